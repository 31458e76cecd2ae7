"""What the command lines share (``python -m demo race``, ``load`` and ``sweep``): the usage
error and the argument helpers, the sampling flags, and the request a race or a load sweep
sends. A leaf: it imports no CLI, so no CLI imports another's module for these.
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Collection
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from demo.errors import BadInput
from demo.fmt import validation_summary
from demo.load.arrivals import ARRIVALS
from demo.load.rate_models import DEFAULT_DRAIN_S
from demo.presets import resolve_presets
from demo.race import validate_request
from demo.results import SIDES, Message, RaceRequest
from demo.sampling import MAX_SCHEMA_BYTES, MAX_STOP_SEQUENCES, ResponseFormat
from demo.settings import MAX_ARMS, ArmSetting, Settings, check_arm_name, same_url
from demo.streaming import Fleet


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
    g.add_argument("--arm", action="append", default=[], metavar="NAME=URL",
                   help=f"a speculative server (an arm) to race against the baseline, e.g. ngram=http://h:8001 "
                   f"(repeatable, at most {MAX_ARMS} arms in all; with --speculative-url that one is the first). "
                   "Its model, headers and label come from the SPECDEMO_ARMS entry of that name; its key from "
                   "SPECDEMO_ARM_<NAME>_API_KEY or SPECDEMO_API_KEY")
    g.add_argument("--ca-bundle", help="a PEM file of CA certificates to trust for https endpoints "
                   "(default: SPECDEMO_CA_BUNDLE, else the system's)")


def add_ray_args(p: argparse.ArgumentParser) -> None:
    """--ray ADDRESS and --ray-workers N: send a sweep's requests from a Ray cluster's workers."""
    g = p.add_argument_group("beyond one machine", "send the requests from a Ray cluster's workers, each step "
                             "shared out from one start (pip install -r requirements-ray.txt; docs/load.md)")
    g.add_argument("--ray", metavar="ADDRESS", help="the cluster: 'auto' (the one this machine belongs to) or "
                   "HOST:PORT (default: SPECDEMO_RAY_ADDRESS, else this process sends them)")
    g.add_argument("--ray-workers", type=int, metavar="N", help="workers, one CPU each (default: one per node)")


def fleet_of(settings: Settings) -> Fleet | None:
    """The Ray fleet the settings ask for (--ray, SPECDEMO_RAY_ADDRESS), or None; UsageError in one line
    when Ray is missing or the cluster cannot place the workers."""
    if not settings.ray_address:
        return None
    from demo.load.fleet import FleetError, fleet_for  # a Ray cluster only when asked for

    try:
        return fleet_for(settings)
    except FleetError as e:
        raise UsageError(str(e)) from None


def _headers(values: list[str], flag: str) -> dict[str, str]:
    out = {}
    for v in values:
        name, sep, value = v.partition(":")
        if not sep or not name.strip():
            # The value is not echoed: it may be a credential ("Authorization Bearer sk-...").
            raise UsageError(f"{flag} takes 'NAME: VALUE' (a colon after the name); the value given has none")
        out[name.strip()] = value.strip()
    return out


def parse_arms(values: list[str], with_speculative_url: bool) -> list[tuple[str, str]]:
    """``--arm NAME=URL`` values -> [(name, url)], checked; UsageError (one line) when one is not."""
    out: list[tuple[str, str]] = []
    for v in values:
        name, sep, url = v.partition("=")
        name, url = name.strip(), url.strip()
        if not sep or not url:
            raise UsageError(f"--arm takes NAME=URL (e.g. ngram=http://127.0.0.1:8001), got {v!r}")
        try:
            check_arm_name(name)
        except ValueError as e:
            raise UsageError(f"--arm: {e}") from None
        if any(n == name for n, _ in out):
            raise UsageError(f"--arm {name} is given twice: give each arm its own name")
        out.append((name, url))
    total = len(out) + (1 if with_speculative_url else 0)
    if total > MAX_ARMS:
        extra = " (--speculative-url is the first)" if with_speculative_url else ""
        raise UsageError(f"{total} arms{extra}: at most {MAX_ARMS} speculative servers can race one baseline")
    return out


def _arm_overrides(arms: list[tuple[str, str]], speculative_url: str | None) -> dict[str, Any]:
    """The settings for ``--arm`` flags: they replace SPECDEMO_ARMS, each taking the model, headers and
    label of the SPECDEMO_ARMS entry of its name; without --speculative-url the first is the first arm."""
    try:
        configured = {a.name: a for a in Settings().arms}
    except ValidationError:
        configured = {}  # the full check below reports what is wrong
    entries = []
    for name, url in arms:
        known = configured.get(name)
        entries.append(ArmSetting(name=name, url=url, model=known.model if known else None,
                                  headers=known.headers if known else {}, label=known.label if known else None,
                                  method=known.method if known else None))
    out: dict[str, Any] = {"arms": entries}
    if speculative_url is None:
        out["speculative_url"] = arms[0][1]
    elif any(same_url(url, speculative_url) for _, url in arms):
        raise UsageError("--arm repeats --speculative-url's URL: give that arm once, as --arm NAME=URL "
                         "or as --speculative-url")
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
    if getattr(args, "ray", None):
        overrides["ray_address"] = args.ray
    if getattr(args, "ray_workers", None) is not None:
        overrides["ray_workers"] = args.ray_workers
    if getattr(args, "arm", None):
        spec_url = getattr(args, "speculative_url", None)
        overrides.update(_arm_overrides(parse_arms(args.arm, spec_url is not None), spec_url))
    try:
        return Settings(**overrides)
    except ValidationError as e:  # its text would echo the input, which may hold a secret header
        raise UsageError(validation_summary(e)) from None


# The sampling flags' dests, each a RaceRequest field of that name (--response-format is read apart).
SAMPLING_ARGS = ("top_p", "top_k", "min_p", "stop", "presence_penalty", "frequency_penalty", "repetition_penalty",
                 "seed")
# A --response-format file: a pretty-printed schema may be a few times its serialized size (capped there).
MAX_RESPONSE_FORMAT_FILE_BYTES = 4 * MAX_SCHEMA_BYTES
RESPONSE_FORMAT_WORDS = ("json_object", "text")
# A JSON schema's own "type" words: a file whose "type" is one of these (or has none) is a bare schema.
JSON_SCHEMA_TYPES = frozenset({"object", "array", "string", "number", "integer", "boolean", "null"})


def add_open_loop_args(r: argparse._ArgumentGroup) -> None:
    """The open-loop flags ``load --rate`` and ``sweep --rate`` share, into the group ``r``: the arrival law,
    each step's length (``--duration`` or ``--requests``), the schedule's seed, the drain, the end-to-end SLO
    and each SLO's percentile (``--slo-ttft-ms`` and ``--slo-itl-ms`` are each command's own)."""
    r.add_argument("--arrivals", choices=list(ARRIVALS), default="poisson",
                   help="the gaps between arrivals: poisson (default), constant, or gamma (see --burstiness)")
    r.add_argument("--burstiness", type=float, default=1.0, metavar="B",
                   help="gamma's shape: below 1 burstier than Poisson, above 1 steadier (default 1)")
    length = r.add_mutually_exclusive_group()
    length.add_argument("--duration", type=float, metavar="S", help="each step's arrival window in seconds")
    length.add_argument("--requests", type=int, metavar="N", help="each step's number of requests")
    r.add_argument("--arrival-seed", type=int, default=0, metavar="K",
                   help="the arrival schedule's seed (default 0); --seed is the sampling seed")
    r.add_argument("--drain-s", type=float, default=DEFAULT_DRAIN_S, metavar="S",
                   help=f"after the arrivals, how long a step waits before cutting open requests (default "
                        f"{DEFAULT_DRAIN_S:g}); the step's bound is its window plus this")
    r.add_argument("--slo-e2e-ms", type=float, metavar="MS", help="SLO: end-to-end latency (with --rate)")
    for name in ("ttft", "itl", "e2e"):
        r.add_argument(f"--slo-{name}-p", type=float, default=95.0, metavar="P",
                       help=f"the percentile --slo-{name}-ms bounds with --rate (default 95)")


def add_sampling_args(p: argparse.ArgumentParser) -> None:
    """The sampling flags (demo/sampling.py's vocabulary, and --seed): sent alike to every server,
    each one given on top of the preset's value."""
    g = p.add_argument_group("sampling", "sent alike to every server; a flag given replaces the preset's value, "
                             "a flag left out keeps it (none: the server's default)")
    g.add_argument("--top-p", type=float, metavar="P", help="nucleus sampling, over 0 to 1")
    g.add_argument("--top-k", type=int, metavar="K", help="the K most likely tokens only; -1 or 0: off")
    g.add_argument("--min-p", type=float, metavar="P",
                   help="0 to 1: drop tokens below P times the top one's probability")
    g.add_argument("--stop", action="append", metavar="TEXT",
                   help=f"a stop sequence (repeatable, at most {MAX_STOP_SEQUENCES}); in bash, $'\\n\\n' "
                        "is a blank line")
    g.add_argument("--presence-penalty", type=float, metavar="X", help="-2 to 2")
    g.add_argument("--frequency-penalty", type=float, metavar="X", help="-2 to 2")
    g.add_argument("--repetition-penalty", type=float, metavar="X", help="over 0 to 2; 1: none")
    g.add_argument("--seed", type=int, help="the sampling seed, the same for every server")
    g.add_argument("--response-format", metavar="json_object|text|FILE.json",
                   help="json_object: any JSON; text: free text; FILE.json: JSON following a schema (vLLM's "
                        "structured outputs): a file holding a response_format of type json_schema, or a bare "
                        f"JSON schema (named after the file), at most {MAX_RESPONSE_FORMAT_FILE_BYTES:,} bytes")


def _schema_name(path: Path) -> str:
    # OpenAI's json_schema.name: letters, digits, _ and -, at most 64 characters.
    return re.sub(r"[^A-Za-z0-9_-]", "_", path.stem)[:64] or "response"


def response_format_arg(value: str) -> ResponseFormat:
    """--response-format's value as a ResponseFormat: ``json_object`` or ``text``, else a JSON file
    holding a response_format (also as ``{"response_format": ...}``, as a request body has it) or a
    bare JSON schema (no ``json_schema`` key, and a ``type`` that is a JSON schema type, or none),
    sent as ``json_schema`` named after the file. Capped at
    MAX_RESPONSE_FORMAT_FILE_BYTES; UsageError in one line that never quotes the file's text."""
    if value in RESPONSE_FORMAT_WORDS:
        return ResponseFormat.model_validate({"type": value})
    flag_ = f"--response-format {value}"
    path = Path(value)
    try:
        with path.open("rb") as f:
            raw = f.read(MAX_RESPONSE_FORMAT_FILE_BYTES + 1)
    except OSError as e:
        raise UsageError(f"{flag_}: cannot read it ({e.strerror or type(e).__name__}); give json_object, text "
                         "or a JSON file") from None
    if len(raw) > MAX_RESPONSE_FORMAT_FILE_BYTES:
        raise UsageError(f"{flag_}: the file is over {MAX_RESPONSE_FORMAT_FILE_BYTES:,} bytes")
    try:
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise UsageError(f"{flag_}: not UTF-8 text") from None
    except json.JSONDecodeError as e:
        raise UsageError(f"{flag_}: not JSON (line {e.lineno}, column {e.colno}: {e.msg})") from None
    except RecursionError:
        raise UsageError(f"{flag_}: the JSON is nested too deeply") from None
    if isinstance(data, dict) and set(data) == {"response_format"}:
        data = data["response_format"]
    if not isinstance(data, dict):
        raise UsageError(f"{flag_}: the file must hold a JSON object (a response_format or a JSON schema)")
    kind = data.get("type")
    if "json_schema" not in data and (not isinstance(kind, str) or kind in JSON_SCHEMA_TYPES):  # a bare schema
        data = {"type": "json_schema", "json_schema": {"name": _schema_name(path), "schema": data}}
    try:
        return ResponseFormat.model_validate(data)
    except ValidationError as e:
        raise UsageError(f"{flag_}: {validation_summary(e)}") from None


def sampling_changes(args: argparse.Namespace) -> dict[str, Any]:
    """The sampling flags given (a command without them gives none): RaceRequest field values."""
    changes: dict[str, Any] = {name: getattr(args, name) for name in SAMPLING_ARGS
                               if getattr(args, name, None) is not None}
    if getattr(args, "response_format", None) is not None:
        changes["response_format"] = response_format_arg(args.response_format)
    return changes


def build_request(args: argparse.Namespace, settings: Settings) -> RaceRequest:
    """The race's request from the flags: the preset's (Preset.to_request) or the prompt's, with
    --max-tokens, --temperature, --api and the sampling flags on top; UsageError says what is wrong."""
    changes: dict[str, Any] = {"order": args.order, "warmup": args.warmup}
    changes.update({name: getattr(args, name) for name in ("max_tokens", "temperature", "api")
                    if getattr(args, name) is not None})
    changes.update(sampling_changes(args))
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
