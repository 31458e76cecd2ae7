"""``python -m demo race ...``: one prompt raced on the baseline and each arm, printed as a table
or one JSON object (``--json``); ``race --users N`` through the load engine (demo/cli/load.py's
user counts, spec and run)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from demo import view
from demo.cli.args import UsageError, add_sampling_args, add_server_args, build_request, settings_from_args
from demo.cli.load import load_side_cells, load_spec_of_flags, run, server_rows, step_json, users_arg
from demo.client import request_body, run_streams
from demo.fmt import fmt_number, fmt_percent, fmt_speedup, or_na
from demo.load.engine import LoadResult, StreamWatch, users_race
from demo.race import run_race
from demo.results import LEGACY_ORDER, ArmResult, RaceRequest, RaceResult, SideResult
from demo.runs.store import RunTooLarge, save_run
from demo.settings import Settings

# The request-body fields that are not its sampling (race --json's "sampling" holds the others).
NOT_SAMPLING = ("model", "messages", "prompt", "stream", "stream_options")
SIDE_KEYS = ("completion_tokens", "ttft_s", "decode_tokens_per_s", "e2e_s", "itl_p50_s", "itl_p95_s", "text", "error")


def add_race_parser(sub: argparse._SubParsersAction) -> None:
    """Add the ``race`` command and its flags to ``sub``."""
    p = sub.add_parser("race", help="race one prompt on the baseline and the speculative server(s)")
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
    add_sampling_args(p)
    p.add_argument("--users", default="1", help="N > 1: N copies of the prompt per side at once, measured as a "
                   "batch (per-user decode tokens/s, total output tokens/s); 1 to SPECDEMO_MAX_USERS (default 32)")
    p.add_argument("--no-save", action="store_true", help="do not save the run under the runs folder")
    p.add_argument("--json", action="store_true", help="print exactly one JSON object")
    p.set_defaults(func=cmd_race)


def side_json(side: SideResult) -> dict[str, Any]:
    """One side in --json: its figures, text, tool calls and error; the loop its answer ends in
    (``repetition``: the span, how often, its share; null when it ends in none); acceptance on a
    speculative side; each missing figure's reason."""
    out: dict[str, Any] = {k: getattr(side, k) for k in SIDE_KEYS}
    out["repetition"] = side.repetition.model_dump() if side.repetition else None
    out["tool_calls"] = [c.model_dump() for c in side.tool_calls]  # name and arguments' JSON text, in order
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


def arm_json(a: ArmResult) -> dict[str, Any]:
    """One arm in --json: its side's figures (acceptance included) and its figures against the baseline."""
    out = side_json(a.side)
    out.update(label=a.label, method=a.method, speedup=a.speedup, e2e_speedup=a.e2e_speedup,
               identical_text=a.identical_text, first_difference=a.first_difference, efficiency=a.efficiency,
               over_bound=a.over_bound, step_cost_note=a.step_cost_note)
    out["na_reasons"] = {**out["na_reasons"], **a.na_reasons}
    return out


def sampling_json(req: RaceRequest) -> dict[str, Any]:
    """The request's sampling in --json: the body fields every server was sent beside the model, the
    prompt and the stream options (client.request_body): temperature, max_tokens, and the seed and
    sampling fields that were set."""
    return {k: v for k, v in request_body(req, "").items() if k not in NOT_SAMPLING}


def result_json(r: RaceResult) -> dict[str, Any]:
    """The race in --json: ``speculative``, ``speedup``... hold the first arm; ``arms`` every arm, in order."""
    return {
        "order": r.order,
        "preset": r.preset,
        "sampling": sampling_json(r.request),
        "baseline": side_json(r.baseline),
        "speculative": side_json(r.speculative),
        "speedup": r.speedup,
        "e2e_speedup": r.e2e_speedup,
        "efficiency": r.efficiency,
        "over_bound": r.over_bound,
        "step_cost_note": r.step_cost_note,
        "identical_text": r.identical_text,
        "na_reasons": r.na_reasons,
        "arms": {name: arm_json(a) for name, a in r.arms.items()},
    }


def _fmt(v: float | None, unit: str = "", digits: int = 2) -> str:
    return or_na(fmt_number(v, digits, unit))


def _side_rows(side: SideResult) -> list[str]:
    spec = side.spec
    itl = (f"{_fmt(side.itl_p50_s and side.itl_p50_s * 1000, '', 1)} / "
           f"{_fmt(side.itl_p95_s and side.itl_p95_s * 1000, '', 1)}")
    return [_fmt(side.completion_tokens), _fmt(side.ttft_s, " s", 3), _fmt(side.decode_tokens_per_s, "", 1),
            _fmt(side.e2e_s, " s"), itl,
            "-" if side.side == "baseline" else or_na(fmt_percent(spec.acceptance_rate, 1) if spec else None),
            "-" if side.side == "baseline" else (_fmt(spec.mean_acceptance_length) if spec else "n/a")]


ROW_NAMES = ("completion tokens", "time to first token", "decode tokens/s", "end-to-end", "ITL p50 / p95 (ms)",
             "acceptance rate", "mean acceptance length")


def _identical(value: bool | None, first: int | None) -> str:
    differ = f"no, first difference at character {first}" if first is not None else "no, the tool calls differ"
    return {True: "yes (lossless)", False: differ, None: "n/a"}[value]


def _not_headlined(reason: str | None, note: str | None = None) -> str:
    """Beside a speedup over the bound (demo.measure.over_bound): that it is no result, and why; beside
    one over its tokens per step that a cheap verification step explains: why (step_cost_note)."""
    return f"  [not headlined: {reason}]" if reason else (f"  [{note}]" if note else "")


def result_table(r: RaceResult) -> str:
    """The race as a table: one column per server; with several arms, one column and one headline each."""
    order = "simultaneous race" if r.order == "simultaneous" else "sequential A/B (each server alone)"
    several = len(r.arms) > 1
    arms = list(r.arms.values()) if several else []
    heads = ["baseline", *(a.name for a in arms)] if several else ["baseline", "speculative"]
    columns = [_side_rows(r.baseline)] + ([_side_rows(a.side) for a in arms] if several else
                                          [_side_rows(r.speculative)])
    lines = [f"Order: {order}" + (f"   preset: {r.preset}" if r.preset else ""),
             f"Sampling: {view.sampling_text(r.request)}", ""]
    lines.append(f"{'':26}" + "".join(f"{h:>22}" for h in heads))
    lines += [f"{name:26}" + "".join(f"{col[i]:>22}" for col in columns) for i, name in enumerate(ROW_NAMES)]
    lines.append("")
    if several:
        for a in arms:
            na = f"  [n/a: {a.na_reasons['speedup']}]" if a.speedup is None else ""
            lines.append(f"{a.name + ':':14} speedup (decode tokens/s) {or_na(fmt_speedup(a.speedup))}{na}"
                         f"{_not_headlined(a.over_bound, a.step_cost_note)}, "
                         f"end-to-end {or_na(fmt_speedup(a.e2e_speedup))}, "
                         f"identical text: {_identical(a.identical_text, a.first_difference)}")
    else:
        na_speedup = f"  [n/a: {r.na_reasons['speedup']}]" if r.speedup is None else ""
        lines.append(f"Speedup (decode tokens/s): {or_na(fmt_speedup(r.speedup))}" + na_speedup
                     + _not_headlined(r.over_bound, r.step_cost_note))
        lines.append(f"End-to-end speedup:        {or_na(fmt_speedup(r.e2e_speedup))}")
        lines.append(f"Identical text:            {_identical(r.identical_text, r.first_difference)}")
    for name, side in ([(a.name, a.side) for a in arms] if several else [("", r.speculative)]):
        if side.spec and side.spec.source == "metrics_delta":
            lines.append(f"Note{' (' + name + ')' if name else ''}: acceptance {side.spec.note}.")
    sides = [("baseline", r.baseline)] + ([(a.name, a.side) for a in arms] if several else
                                          [("speculative", r.speculative)])
    for name, side in sides:
        if side.error:
            lines.append(f"{name} error: {side.error}")
    return "\n".join(lines)


def users_json(r: LoadResult) -> dict[str, Any]:
    """``race --users N --json``: the one step, keyed like a race."""
    step = r.steps[0]
    return {"users": step.users, "order": r.spec.order, "preset": r.spec.workload if r.spec.workload != "prompt"
            else None, **step_json(step)}


def users_table(r: LoadResult) -> str:
    """``race --users N``: the one step's table (a column per server)."""
    step = r.steps[0]
    names = ["per-user decode tok/s", "total output tok/s", "TTFT p95 (ms)", "ITL p95 (ms)", "queue peak",
             "KV-cache peak", "preemptions"]
    rows = server_rows(step)
    cols = [load_side_cells(side) for _, side in rows]
    lines = [f"{step.users} users, order: {r.spec.order}   {r.spec.workload}", "",
             f"{'':26}" + "".join(f"{name:>22}" for name, _ in rows)]
    lines += [f"{name:26}" + "".join(f"{col[i]:>22}" for col in cols) for i, name in enumerate(names)]
    lines.append("")
    if len(step.arms) > 1:
        lines += [f"{name}: speedup (per-user decode tokens/s, {step.users} users) {or_na(fmt_speedup(a.speedup))}, "
                  f"throughput ratio {or_na(fmt_speedup(a.throughput_ratio))}" for name, a in step.arms.items()]
    else:
        lines += [f"Speedup (per-user decode tokens/s, {step.users} users): {or_na(fmt_speedup(step.speedup))}",
                  f"Throughput ratio (total output tokens/s):   {or_na(fmt_speedup(step.throughput_ratio))}"]
    lines += [f"error: {e}" for e in step.errors]
    lines += [f"client-limited ({name}): {side.client_note}" for name, side in rows if side.client_limited]
    return "\n".join(lines)


def cmd_race_users(args: argparse.Namespace, settings: Settings, users: int, req: RaceRequest) -> int:
    """``race --users N`` (N > 1): N copies of the prompt per side at once, through the load engine."""
    spec = load_spec_of_flags(settings, req, [users], req.order, warmup=1 if req.warmup else 0)
    # User 1's answers on the baseline and every arm, with their events: the saved race replays them.
    watch = StreamWatch(1, [a.name for a in spec.arm_list()])
    result = run(spec, req, settings, progress=False, observe=watch)
    if result.steps and settings.save_runs and not args.no_save:
        record = users_race(req, result.steps[0], watch.first(), settings)
        try:
            save_run(record, settings.runs_dir, settings.max_run_file_bytes, settings.runs_keep_count,
                     settings.runs_keep_days)
        except (OSError, RunTooLarge) as e:
            print(f"warning: could not save the run under {settings.runs_dir}: {e}", file=sys.stderr)
    print(json.dumps(users_json(result)) if args.json else users_table(result))
    return 0 if result.steps and result.steps[0].speedup is not None else 1


def cmd_race(args: argparse.Namespace) -> int:
    """``python -m demo race``: race one prompt (or N users with --users N); return the exit code."""
    settings = settings_from_args(args)
    users = users_arg(args.users, settings)
    if len(users) != 1:
        raise UsageError(f"--users takes one count for a race (a sweep over counts is `python -m demo load`), "
                         f"got {args.users!r}")
    req = build_request(args, settings)
    if users[0] > 1:
        return cmd_race_users(args, settings, users[0], req)
    result = run_streams(run_race(req, settings))
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

