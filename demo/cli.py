"""Command line: ``python -m demo race ...`` (and ``sweep``, see demo/sweep)."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any

from pydantic import ValidationError

from demo.presets import load_presets
from demo.race import run_race, validate_request
from demo.results import Message, RaceRequest, RaceResult, SideResult
from demo.runs import save_run
from demo.settings import Settings

SIDE_KEYS = ("completion_tokens", "ttft_s", "decode_tokens_per_s", "e2e_s", "itl_p50_s", "itl_p95_s", "text", "error")


class UsageError(Exception):
    """Bad arguments: exit code 2 with this message."""


def add_endpoint_args(p: argparse.ArgumentParser) -> None:
    """Each side's server: URL, model, extra headers; the TLS CA bundle. Shared by race and sweep."""
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
            raise UsageError(f"{flag} takes 'NAME: VALUE', got {v.split(':')[0]!r}…")
        out[name.strip()] = value.strip()
    return out


def settings_from_args(args: argparse.Namespace) -> Settings:
    """Settings (environment, .env) with the endpoint flags on top; UsageError says what is wrong."""
    overrides: dict[str, Any] = {}
    for side in ("baseline", "speculative"):
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
        err = e.errors()[0]
        raise UsageError(f"{'.'.join(map(str, err['loc']))}: {err['msg']}") from None


def add_race_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("race", help="race one prompt on the baseline and the speculative server")
    add_endpoint_args(p)
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--preset", help="a preset name from presets/")
    src.add_argument("--prompt", help="a free prompt")
    p.add_argument("--mode", choices=["race", "sequential"], default="race",
                   help="race: both at once; sequential: one after the other (the fair A/B on one GPU)")
    p.add_argument("--max-tokens", type=int)
    p.add_argument("--temperature", type=float)
    p.add_argument("--api", choices=["chat", "completions"])
    p.add_argument("--warmup", action="store_true", help="send a short warm-up request to each server first")
    p.add_argument("--no-save", action="store_true", help="do not save the run under the runs folder")
    p.add_argument("--json", action="store_true", help="print exactly one JSON object")
    p.set_defaults(func=cmd_race)


def build_request(args: argparse.Namespace, settings: Settings) -> RaceRequest:
    fields: dict[str, Any] = {"mode": args.mode, "warmup": args.warmup}
    if args.preset:
        presets, _ = load_presets(settings.presets_dir)
        if args.preset not in presets:
            known = ", ".join(sorted(presets)) or "none found"
            raise UsageError(f"unknown preset {args.preset!r}; known presets: {known}")
        pr = presets[args.preset]
        fields.update(preset=pr.name, messages=pr.messages, temperature=pr.temperature,
                      max_tokens=pr.max_tokens, api=pr.api)
    else:
        fields.update(messages=[Message(role="user", content=args.prompt)])
    for name in ("max_tokens", "temperature", "api"):
        if getattr(args, name) is not None:
            fields[name] = getattr(args, name)
    try:
        req = RaceRequest(**fields)
        validate_request(req)
    except ValueError as e:  # pydantic's ValidationError is a ValueError
        raise UsageError(str(e).splitlines()[0] if "validation error" not in str(e) else _short(e)) from e
    return req


def _short(e: Exception) -> str:
    lines = str(e).splitlines()
    return f"{lines[1].strip()}: {lines[2].strip()}" if len(lines) > 2 else lines[0]


def side_json(side: SideResult) -> dict[str, Any]:
    out: dict[str, Any] = {k: getattr(side, k) for k in SIDE_KEYS}
    if side.side == "speculative":
        spec = side.spec
        out["acceptance_rate"] = spec.acceptance_rate if spec else None
        out["mean_acceptance_length"] = spec.mean_acceptance_length if spec else None
        out["accepted_tokens"] = spec.accepted_tokens if spec else None
        out["draft_tokens"] = spec.draft_tokens if spec else None
        out["drafts"] = spec.drafts if spec else None
        out["acceptance_source"] = spec.source if spec else None
    out["na_reasons"] = {**side.na_reasons, **(side.spec.na_reasons if side.spec else {})}
    if side.side == "speculative" and side.spec is None and not side.error:
        out["na_reasons"]["acceptance_rate"] = "the server reported no speculative metrics"
    return out


def result_json(r: RaceResult) -> dict[str, Any]:
    return {
        "mode": r.mode,
        "preset": r.preset,
        "baseline": side_json(r.baseline),
        "speculative": side_json(r.speculative),
        "speedup": r.speedup,
        "e2e_speedup": r.e2e_speedup,
        "identical_text": r.identical_text,
        "na_reasons": r.na_reasons,
    }


def _fmt(v: Any, unit: str = "", digits: int = 2) -> str:
    if v is None:
        return "n/a"
    if isinstance(v, float):
        return f"{v:.{digits}f}{unit}"
    return f"{v}{unit}"


def result_table(r: RaceResult) -> str:
    mode = "simultaneous race" if r.mode == "race" else "sequential A/B (each server alone)"
    b, s = r.baseline, r.speculative
    spec = s.spec
    rows = [
        ("completion tokens", _fmt(b.completion_tokens), _fmt(s.completion_tokens)),
        ("time to first token", _fmt(b.ttft_s, " s", 3), _fmt(s.ttft_s, " s", 3)),
        ("decode tokens/s", _fmt(b.decode_tokens_per_s, "", 1), _fmt(s.decode_tokens_per_s, "", 1)),
        ("end-to-end", _fmt(b.e2e_s, " s"), _fmt(s.e2e_s, " s")),
        ("ITL p50 / p95 (ms)",
         f"{_fmt(b.itl_p50_s and b.itl_p50_s * 1000, '', 1)} / {_fmt(b.itl_p95_s and b.itl_p95_s * 1000, '', 1)}",
         f"{_fmt(s.itl_p50_s and s.itl_p50_s * 1000, '', 1)} / {_fmt(s.itl_p95_s and s.itl_p95_s * 1000, '', 1)}"),
        ("acceptance rate", "-", _fmt(spec.acceptance_rate * 100, " %", 1) if spec and spec.acceptance_rate is not None else "n/a"),
        ("mean acceptance length", "-", _fmt(spec.mean_acceptance_length) if spec else "n/a"),
    ]
    lines = [f"Mode: {mode}" + (f"   preset: {r.preset}" if r.preset else ""), ""]
    lines.append(f"{'':26}{'baseline':>22}{'speculative':>22}")
    lines += [f"{name:26}{bv:>22}{sv:>22}" for name, bv, sv in rows]
    lines.append("")
    lines.append(f"Speedup (decode tokens/s): {_fmt(r.speedup, 'x')}" + (f"  [n/a: {r.na_reasons['speedup']}]" if r.speedup is None else ""))
    lines.append(f"End-to-end speedup:        {_fmt(r.e2e_speedup, 'x')}")
    ident = {True: "yes (lossless)", False: f"no, first difference at character {r.first_difference}", None: "n/a"}[r.identical_text]
    lines.append(f"Identical text:            {ident}")
    if spec and spec.source == "metrics_delta":
        lines.append(f"Note: acceptance {spec.note}.")
    for side in (b, s):
        if side.error:
            lines.append(f"{side.side} error: {side.error}")
    return "\n".join(lines)


def cmd_race(args: argparse.Namespace) -> int:
    settings = settings_from_args(args)
    req = build_request(args, settings)
    result = asyncio.run(run_race(req, settings))
    if settings.save_runs and not args.no_save:
        try:
            save_run(result, settings.runs_dir)
        except OSError as e:
            print(f"warning: could not save the run under {settings.runs_dir}: {e}", file=sys.stderr)
    if args.json:
        print(json.dumps(result_json(result)))
    else:
        print(result_table(result))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m demo", description="Speculative decoding demo")
    sub = parser.add_subparsers(dest="command", required=True)
    add_race_parser(sub)
    try:
        from demo.sweep.cli import add_sweep_parser  # the evaluator, when installed
    except ImportError:
        pass
    else:
        add_sweep_parser(sub)
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except UsageError as e:
        parser.exit(2, f"error: {e}\n")
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
