"""What the command lines share (``python -m demo race``, ``load`` and ``sweep``): the usage
error and the argument helpers, and the request a race or a load sweep sends. A leaf: it
imports no CLI, so no CLI imports another's module for these.
"""

from __future__ import annotations

import argparse
from collections.abc import Collection
from typing import Any

from pydantic import ValidationError

from demo.errors import BadInput
from demo.fmt import validation_summary
from demo.presets import resolve_presets
from demo.race import validate_request
from demo.results import SIDES, Message, RaceRequest
from demo.settings import Settings


class UsageError(Exception):
    """Bad arguments: exit code 2 with this message."""


def add_server_args(p: argparse.ArgumentParser) -> None:
    """Each side's server: URL, model, extra headers; the TLS CA bundle (defaults: the settings)."""
    g = p.add_argument_group(
        "endpoints", "each side's server (API keys come only from SPECDEMO_BASELINE_API_KEY, "
        "SPECDEMO_SPECULATIVE_API_KEY or SPECDEMO_API_KEY, never a flag: a command line is visible to "
        "every user of the machine)")
    for side, port in (("baseline", 8000), ("speculative", 8001)):
        g.add_argument(f"--{side}-url", help=f"default: SPECDEMO_{side.upper()}_URL or http://127.0.0.1:{port}")
        g.add_argument(f"--{side}-model", help=f"served model name (default: SPECDEMO_{side.upper()}_MODEL, "
                       "SPECDEMO_MODEL, else the first one /v1/models lists)")
        g.add_argument(f"--{side}-header", action="append", default=[], metavar="'NAME: VALUE'",
                       help=f"an extra header for every request to the {side} server (repeatable)")
    g.add_argument("--ca-bundle", help="a PEM file of CA certificates to trust for https endpoints "
                   "(default: SPECDEMO_CA_BUNDLE, else the system's)")


def _headers(values: list[str], flag: str) -> dict[str, str]:
    out = {}
    for v in values:
        name, sep, value = v.partition(":")
        if not sep or not name.strip():
            # The value is not echoed: it may be a credential ("Authorization Bearer sk-...").
            raise UsageError(f"{flag} takes 'NAME: VALUE' (a colon after the name); the value given has none")
        out[name.strip()] = value.strip()
    return out


def settings_from_args(args: argparse.Namespace) -> Settings:
    """Settings (environment, .env) with the endpoint flags on top; UsageError says what is wrong."""
    overrides: dict[str, Any] = {}
    for side in SIDES:
        for field in ("url", "model"):
            if getattr(args, f"{side}_{field}", None):
                overrides[f"{side}_{field}"] = getattr(args, f"{side}_{field}")
        if getattr(args, f"{side}_header", None):
            overrides[f"{side}_headers"] = _headers(getattr(args, f"{side}_header"), f"--{side}-header")
    if getattr(args, "ca_bundle", None):
        overrides["ca_bundle"] = args.ca_bundle
    try:
        return Settings(**overrides)
    except ValidationError as e:  # its text would echo the input, which may hold a secret header
        raise UsageError(validation_summary(e)) from None


def parse_numbers(text: str, kind: type, what: str) -> list[Any]:
    """Comma-separated numbers of ``kind`` for the input ``what`` (the flag ``--what``); BadInput
    about ``what`` when not (usage_error gives the CLI's wording)."""
    try:
        values = [kind(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise BadInput.about(what, f"must be comma-separated numbers, got {text!r}") from None
    if not values:
        raise BadInput.about(what, "is empty")
    return values


def build_request(args: argparse.Namespace, settings: Settings) -> RaceRequest:
    """The race's request from the flags: the preset's (Preset.to_request) or the prompt's, with
    --max-tokens, --temperature and --api on top; UsageError says what is wrong."""
    changes: dict[str, Any] = {"order": args.order, "warmup": args.warmup}
    changes.update({name: getattr(args, name) for name in ("max_tokens", "temperature", "api")
                    if getattr(args, name) is not None})
    try:
        if args.preset:
            req = resolve_presets([args.preset], settings.presets_dir)[args.preset].to_request(**changes)
        else:
            req = RaceRequest(**{"messages": [Message(role="user", content=args.prompt)], **changes})
        validate_request(req)
    except ValidationError as e:
        raise usage_error(e, vars(args)) from e
    except ValueError as e:  # NotFound (the preset), an empty prompt
        raise UsageError(str(e).splitlines()[0]) from e
    return req


def flag(field: str) -> str:
    """The command line's flag for an input: ``max_tokens`` -> ``--max-tokens``."""
    return "--" + field.replace("_", "-")


def usage_error(e: BadInput | ValidationError, flags: Collection[str] = ()) -> UsageError:
    """Bad input in the CLI's words: the input it is about named as its flag. A BadInput about a
    field says ``--concurrency values must be between 1 and 1024``; a model's ValidationError
    (a bound in demo.limits) ``--max-tokens: Input should be ...`` for a field in ``flags`` (the
    command's flags as argparse's dests: ``vars(args)``). The page shows them without dashes."""
    if isinstance(e, ValidationError):
        def name(path: str) -> str:
            head, dot, rest = path.partition(".")
            return flag(head) + dot + rest if head in flags else path
        return UsageError(validation_summary(e, name=name))
    return UsageError(f"{flag(e.field)} {e.problem}" if e.field and e.problem else str(e))
