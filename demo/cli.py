"""Command line: ``python -m demo race ...`` (and ``load``, see demo/load_cli.py; ``sweep``, see demo/sweep)."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any

from demo.cli_args import UsageError, add_server_args, build_request, settings_from_args
from demo.export import add_export_parser
from demo.fmt import fmt_number, fmt_percent, fmt_speedup, or_na
from demo.load_cli import add_load_parser, cmd_race_users, users_arg
from demo.race import run_race
from demo.results import LEGACY_ORDER, RaceResult, SideResult
from demo.runs import RunTooLarge, save_run
from demo.sweep.cli import add_sweep_parser

SIDE_KEYS = ("completion_tokens", "ttft_s", "decode_tokens_per_s", "e2e_s", "itl_p50_s", "itl_p95_s", "text", "error")


def add_race_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("race", help="race one prompt on the baseline and the speculative server")
    add_server_args(p)
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--preset", help="a preset name from presets/")
    src.add_argument("--prompt", help="a free prompt")
    p.add_argument("--order", "--mode", dest="order", type=lambda v: LEGACY_ORDER.get(v, v),
                   choices=["simultaneous", "sequential"], default="simultaneous",
                   help="simultaneous (also: race): both at once; sequential: one after the other "
                        "(the fair A/B on one GPU)")
    p.add_argument("--max-tokens", type=int)
    p.add_argument("--temperature", type=float)
    p.add_argument("--api", choices=["chat", "completions"])
    p.add_argument("--warmup", action="store_true", help="send a short warm-up request to each server first")
    p.add_argument("--users", default="1", help="N > 1: N copies of the prompt per side at once, measured as a "
                   "batch (per-user decode tokens/s, total output tokens/s); 1 to SPECDEMO_MAX_USERS (default 32)")
    p.add_argument("--no-save", action="store_true", help="do not save the run under the runs folder")
    p.add_argument("--json", action="store_true", help="print exactly one JSON object")
    p.set_defaults(func=cmd_race)


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
        "order": r.order,
        "preset": r.preset,
        "baseline": side_json(r.baseline),
        "speculative": side_json(r.speculative),
        "speedup": r.speedup,
        "e2e_speedup": r.e2e_speedup,
        "identical_text": r.identical_text,
        "na_reasons": r.na_reasons,
    }


def _fmt(v: float | None, unit: str = "", digits: int = 2) -> str:
    return or_na(fmt_number(v, digits, unit))


def result_table(r: RaceResult) -> str:
    order = "simultaneous race" if r.order == "simultaneous" else "sequential A/B (each server alone)"
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
        ("acceptance rate", "-",
         or_na(fmt_percent(spec.acceptance_rate, 1) if spec else None)),
        ("mean acceptance length", "-", _fmt(spec.mean_acceptance_length) if spec else "n/a"),
    ]
    lines = [f"Order: {order}" + (f"   preset: {r.preset}" if r.preset else ""), ""]
    lines.append(f"{'':26}{'baseline':>22}{'speculative':>22}")
    lines += [f"{name:26}{bv:>22}{sv:>22}" for name, bv, sv in rows]
    lines.append("")
    na_speedup = f"  [n/a: {r.na_reasons['speedup']}]" if r.speedup is None else ""
    lines.append(f"Speedup (decode tokens/s): {or_na(fmt_speedup(r.speedup))}" + na_speedup)
    lines.append(f"End-to-end speedup:        {or_na(fmt_speedup(r.e2e_speedup))}")
    ident = {True: "yes (lossless)", False: f"no, first difference at character {r.first_difference}",
             None: "n/a"}[r.identical_text]
    lines.append(f"Identical text:            {ident}")
    if spec and spec.source == "metrics_delta":
        lines.append(f"Note: acceptance {spec.note}.")
    for side in (b, s):
        if side.error:
            lines.append(f"{side.side} error: {side.error}")
    return "\n".join(lines)


def cmd_race(args: argparse.Namespace) -> int:
    settings = settings_from_args(args)
    users = users_arg(args.users, settings)
    if len(users) != 1:
        raise UsageError(f"--users takes one count for a race (a sweep over counts is `python -m demo load`), "
                         f"got {args.users!r}")
    req = build_request(args, settings)
    if users[0] > 1:
        return cmd_race_users(args, settings, users[0], req)
    result = asyncio.run(run_race(req, settings))
    if settings.save_runs and not args.no_save:
        try:
            save_run(result, settings.runs_dir, settings.max_run_file_bytes, settings.runs_keep_count,
                     settings.runs_keep_days)
        except (OSError, RunTooLarge) as e:
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
    add_export_parser(sub)
    add_sweep_parser(sub)
    add_load_parser(sub)
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except UsageError as e:
        parser.exit(2, f"error: {e}\n")
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
