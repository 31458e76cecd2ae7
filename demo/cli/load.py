"""``python -m demo load --users 1,2,4,8,16 ...``: the load engine (demo/load/engine.py) on the
command line; its table and its JSON (the same LoadSide objects), and --out's load.json,
load.html and load.png (demo/load/page.py). What ``race --users N`` shares with it: the user
counts, the spec, the run, a step's JSON and a server's row (demo/cli/race.py prints that race)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from demo.cli.args import (
    UsageError,
    add_open_loop_args,
    add_ray_args,
    add_server_args,
    build_request,
    fleet_of,
    settings_from_args,
    usage_error,
)
from demo.client import run_streams
from demo.errors import BadInput
from demo.fmt import fmt_number, fmt_percent, fmt_speedup, or_na, validation_summary
from demo.load import engine as load
from demo.load.arrivals import replay_of
from demo.load.engine import (
    SIDES,
    ArmStep,
    LoadResult,
    LoadSide,
    LoadSpec,
    LoadStep,
    StreamWatch,
    finish,
    parse_users,
    request_from_race,
    run_load,
)
from demo.load.page import write_files
from demo.load.rate_models import RateLoad, RateStep, make_rate_load
from demo.load.rate_view import rate_json, rate_step_line, rate_table
from demo.results import RaceRequest
from demo.settings import Settings
from demo.slo import SLO_FIGURES, Slo, slo_of_bounds
from demo.sweep.schedule import recommendation_json, recommendation_lines
from demo.workload import WorkloadError, WorkloadRequest, open_workload

# A step's own keys in --json (the evaluator's cell stays out: it is in --out's load.json).
STEP_KEYS = ("users", "status", "speedup", "throughput_ratio", "errors", "na_reasons")


def add_load_parser(sub: argparse._SubParsersAction) -> None:
    """Add the ``load`` sub-command and its options to ``sub``; it runs ``cmd_load``."""
    p = sub.add_parser("load", help="where speculation stops paying: a sweep over user counts",
                       description="Per users count, that many copies of one prompt start together on each "
                                   "server (one evaluator cell: one repeat, no warm-up by default); prints "
                                   "per-user decode tokens/s, total output tokens/s, latency, the servers' "
                                   "queue, KV cache and preemptions, and where the gain crosses the verdict's "
                                   "thresholds.")
    add_server_args(p)
    add_ray_args(p)
    kind = p.add_mutually_exclusive_group(required=True)
    kind.add_argument("--users", help="closed loop: user counts, comma-separated, e.g. 1,2,4,8,16 "
                      "(each from 1 to SPECDEMO_MAX_USERS, default 32)")
    kind.add_argument("--rate", help="open loop: requests per second, comma-separated, e.g. 0.5,1,2,4; each "
                      "request is sent at its time whether or not earlier ones finished (docs/load.md)")
    kind.add_argument("--replay", action="store_true", help="open loop on the trace's own clock: --workload's "
                      "requests, each sent at its offset from the first arrival time (one step; docs/load.md)")
    rp = p.add_argument_group("trace replay (--replay)")
    rp.add_argument("--speed", type=float, metavar="X", help="divide the trace's gaps by X: 2 replays twice as "
                    "fast, 0.5 half as fast (default 1)")
    r = p.add_argument_group("open loop (--rate)")
    add_open_loop_args(r)
    r.add_argument("--normalize", action="store_true", help="with --requests: rescale the gaps so that N "
                   "requests span N/rate seconds, as vllm bench serve does (for a side-by-side check)")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--preset", help="a preset name from presets/")
    src.add_argument("--prompt", help="a free prompt")
    src.add_argument("--workload", type=Path, metavar="FILE", help="with --replay: a workload whose requests carry "
                     "arrival times (AIPerf timestamp, LiteLLM startTime; docs/workloads.md)")
    p.add_argument("--order", choices=["sequential", "simultaneous"], default="sequential",
                   help="sequential (default): baseline batch, then speculative, each server alone (the fair "
                        "A/B); simultaneous: both at once")
    p.add_argument("--max-tokens", type=int)
    p.add_argument("--temperature", type=float)
    p.add_argument("--api", choices=["chat", "completions"])
    p.add_argument("--repeats", type=int, default=1, help="measured batches per side per step (default 1)")
    p.add_argument("--warmup", type=int, default=0, help="untimed warm-up batches per side per step (default 0)")
    p.add_argument("--slo-ttft-ms", type=float, metavar="MS",
                   help="latency target: time to first token p95 (--rate: at --slo-ttft-p)")
    p.add_argument("--slo-itl-ms", type=float, metavar="MS",
                   help="latency target: inter-token latency p95 (--rate: at --slo-itl-p)")
    p.add_argument("--json", action="store_true", help="print exactly one JSON object")
    p.add_argument("--out", type=Path, metavar="DIR", help="also write load.json (every figure), load.html "
                   "(the two curves, a self-contained page) and load.png (both curves, a 16:9 slide) into DIR")
    p.add_argument("--no-progress", action="store_true", help="no progress lines on stderr")
    p.set_defaults(func=cmd_load)


def users_arg(text: str, settings: Settings) -> list[int]:
    """Parse ``--users`` into user counts; raises UsageError naming the flag when a count is bad."""
    try:
        return parse_users(text, settings.max_users)
    except ValueError as e:
        raise UsageError(f"--{e}") from None


def load_request(args: argparse.Namespace, settings: Settings) -> RaceRequest:
    """The request a load sweep (or the what-if) sends, from the race's flags. Its warm-up is a
    count of batches (LoadSpec.warmup), not the race's flag."""
    return build_request(argparse.Namespace(**{**vars(args), "warmup": False}), settings)


def load_spec_of_flags(settings: Settings, req: RaceRequest, users: list[int], order: str, repeats: int = 1,
              warmup: int = 0, slo: Slo | None = None, rate: RateLoad | None = None) -> LoadSpec:
    """The load sweep's spec (``rate``: open loop); raises UsageError naming the flags when the settings do
    not make one."""
    try:
        return load.load_spec(settings, req, users, order, repeats, warmup, slo, rate=rate)
    except ValueError as e:
        if isinstance(e.__cause__, ValidationError):  # name the flags, not the fields
            raise usage_error(e.__cause__, ("repeats", "warmup")) from None
        raise UsageError(str(e)) from None


def rate_load(args: argparse.Namespace) -> RateLoad:
    """The open-loop sweep asked by ``--rate`` and its flags (demo/load/rate.py ``make_rate_load``, as the
    evaluator and the page build theirs); UsageError (one line) on bad input."""
    if args.order != "sequential" or args.repeats != 1 or args.warmup != 0:
        flag = "--order" if args.order != "sequential" else "--repeats" if args.repeats != 1 else "--warmup"
        raise UsageError(f"{flag} is for --users: a rate step sends its schedule once to each server, each alone")
    try:
        return make_rate_load(args.rate, requests=args.requests, duration_s=args.duration, arrivals=args.arrivals,
                              burstiness=args.burstiness, seed=args.arrival_seed, drain_s=args.drain_s,
                              normalized=args.normalize,
                              slo_ms={n: getattr(args, f"slo_{n}_ms") for n in SLO_FIGURES},
                              slo_percentile={n: getattr(args, f"slo_{n}_p") for n in SLO_FIGURES})
    except BadInput as e:
        raise usage_error(e) from None


def rate_slo(args: argparse.Namespace) -> Slo:
    """The open-loop SLOs from ``--slo-*-ms`` and ``--slo-*-p``; UsageError (one line) on a bad one."""
    try:
        return slo_of_bounds({n: getattr(args, f"slo_{n}_ms") for n in SLO_FIGURES},
                             {n: getattr(args, f"slo_{n}_p") for n in SLO_FIGURES})
    except BadInput as e:
        raise usage_error(e) from None


def replay_load(args: argparse.Namespace, settings: Settings) -> tuple[RateLoad, list[WorkloadRequest], str]:
    """``--replay``: the workload's requests (``--max-tokens`` and ``--temperature`` on top of each line's),
    the one-step sweep at their own times over ``--speed``, and the workload's name; UsageError (one line)
    on bad input, before anything is sent."""
    if args.workload is None:
        raise UsageError("--replay needs --workload FILE (a workload whose requests carry arrival times)")
    drawn = [f for f, v in (("--duration", args.duration), ("--requests", args.requests)) if v is not None]
    drawn += [f for f, off in (("--arrivals", args.arrivals != "poisson"), ("--burstiness", args.burstiness != 1.0),
                               ("--arrival-seed", args.arrival_seed != 0), ("--normalize", args.normalize)) if off]
    if drawn:
        raise UsageError(f"{drawn[0]} is for --rate: a replay sends the trace's own times (--speed scales them)")
    if args.order != "sequential" or args.repeats != 1 or args.warmup != 0:
        flag = "--order" if args.order != "sequential" else "--repeats" if args.repeats != 1 else "--warmup"
        raise UsageError(f"{flag} is for --users: a replay sends its schedule once to each server, each alone")
    if args.api is not None:
        raise UsageError("--api is each line's own with --workload (chat messages or a completions prompt)")
    speed = 1.0 if args.speed is None else args.speed
    try:
        workload = open_workload(args.workload, settings)
    except WorkloadError as e:
        raise UsageError(str(e)) from None
    for issue in workload.issues:
        print(f"skipped {issue}", file=sys.stderr)
    changes = {k: v for k, v in (("max_tokens", args.max_tokens), ("temperature", args.temperature)) if v is not None}
    try:
        reqs = [r.model_validate({**r.model_dump(), **changes}) for r in workload.requests] if changes else \
            workload.requests
        replay = replay_of(Path(args.workload).name, reqs, speed)
        sweep = RateLoad(rates=[replay.schedule().rate_requests_per_s], replay=replay, drain_s=args.drain_s,
                         slo=rate_slo(args))
    except ValidationError as e:
        raise UsageError(validation_summary(e)) from None
    except ValueError as e:
        raise UsageError(str(e)) from None
    return sweep, reqs, workload.name


def closed_loop_only(args: argparse.Namespace) -> None:
    """UsageError when an open-loop flag is given with ``--users``."""
    given = [f for f, v in (("--duration", args.duration), ("--requests", args.requests),
                            ("--slo-e2e-ms", args.slo_e2e_ms)) if v is not None]
    given += [f"--slo-{n}-p" for n in ("ttft", "itl", "e2e") if getattr(args, f"slo_{n}_p") != 95.0]
    if given:
        raise UsageError(f"{given[0]} is for open-loop load (--rate), not --users")


def run(spec: LoadSpec, req: RaceRequest, settings: Settings, progress: bool, result: LoadResult | None = None,
        out: Path | None = None, observe: StreamWatch | None = None,
        requests: list[WorkloadRequest] | None = None) -> LoadResult:
    """The sweep, with progress on stderr; ``out``: its files rewritten after every step;
    ``observe``: watches the streams (user 1's answers, for a saved race); ``requests``: a workload's
    requests sent instead of ``req`` (a replay)."""
    def say(label: str) -> None:
        if progress:
            print(f"  {label}", file=sys.stderr, flush=True)

    def done(step: LoadStep) -> None:
        if progress:
            arms = ([f"{n} {or_na(fmt_speedup(a.speedup))}" for n, a in step.arms.items()]
                    if len(step.arms) > 1 else [])
            print(f"{step.users} users: " + (f"speedup {', '.join(arms)}" if arms else
                                             f"speedup {or_na(fmt_speedup(step.speedup))}, throughput ratio "
                                             f"{or_na(fmt_speedup(step.throughput_ratio))}")
                  + (f" ({step.errors[0]})" if step.errors else ""), file=sys.stderr, flush=True)
        if out is not None and result is not None:
            write_out(result, out)

    def rate_done(step: RateStep) -> None:
        if progress:
            print(rate_step_line(step), file=sys.stderr, flush=True)
        if out is not None and result is not None:
            write_out(result, out)

    sent = request_from_race(req) if requests is None else requests
    return run_streams(run_load(spec, sent, settings, on_step=done, on_progress=say,
                                result=result, observe=observe, on_rate_step=rate_done, fleet=fleet_of(settings)))


# --------------------------------------------------------------------------- output


def step_json(step: LoadStep) -> dict[str, Any]:
    """One step as JSON: its figures, each side's, and every arm's with its speedup and n/a reasons."""
    out: dict[str, Any] = {k: getattr(step, k) for k in STEP_KEYS}
    for side in SIDES:
        out[side] = getattr(step, side).model_dump()
    out["arms"] = {name: {**a.side.model_dump(), "speedup": a.speedup, "throughput_ratio": a.throughput_ratio,
                          "speedup_repeats": a.speedup_repeats.model_dump() if a.speedup_repeats else None,
                          "na_reasons": {**a.side.na_reasons, **a.na_reasons}} for name, a in step.arms.items()}
    return out


def load_json(r: LoadResult) -> dict[str, Any]:
    """The whole load sweep as JSON (what ``load --json`` prints): settings, steps, crossovers and targets."""
    return {
        "workload": r.spec.workload,
        "order": r.spec.order,
        "repeats": r.spec.repeats,
        "warmup": r.spec.warmup,
        "steps": [step_json(s) for s in r.steps],
        "crossover": r.crossover.model_dump(),
        "crossovers": {name: c.model_dump() for name, c in r.crossovers.items()},
        "arms_text": r.arms_text or None,
        "slo": r.spec.slo.model_dump() if r.spec.slo else None,
        "slo_users": r.slo_users or None,
        "interrupted": r.interrupted,
        "recommendation": recommendation_json(r.recommendation) if r.recommendation is not None else None,
    }


def _n(v: float | None, digits: int = 1) -> str:
    return or_na(fmt_number(v, digits))


def _ms_text(v: float | None) -> str:
    return or_na(fmt_number(v * 1000 if v is not None else None, 0))


def load_side_cells(s: LoadSide) -> list[str]:
    """A server's row of the load table: per-user tok/s (min-max), total tok/s, TTFT and ITL p95 (ms),
    queue peak, KV peak, preemptions; "n/a" where unknown."""
    per_user = _n(s.per_user_decode_tokens_per_s)
    if s.per_user_decode_tokens_per_s_min is not None and s.per_user_decode_tokens_per_s_max is not None:
        per_user += f" ({s.per_user_decode_tokens_per_s_min:.0f}-{s.per_user_decode_tokens_per_s_max:.0f})"
    return [per_user, _n(s.output_tokens_per_s), _ms_text(s.ttft_p95_s), _ms_text(s.itl_p95_s),
            _n(s.num_requests_waiting_peak, 0), or_na(fmt_percent(s.kv_cache_usage_peak_perc, 0)),
            _n(s.num_preemptions, 0)]


def server_rows(step: LoadStep) -> list[tuple[str, LoadSide]]:
    """The step's servers as rows: the baseline and the speculative server, or each arm by name."""
    if len(step.arms) > 1:
        return [("baseline", step.baseline), *((name, a.side) for name, a in step.arms.items())]
    return [(side, getattr(step, side)) for side in SIDES]


def speedup_text(speedup: float | None, arm: ArmStep | None) -> str:
    """'1.49×', and with several repeats its range: '1.49× (1.21-1.60× over 3 repeats)'; n/a when unknown."""
    text = or_na(fmt_speedup(speedup))
    s = arm.speedup_repeats if arm is not None else None
    if speedup is None or s is None or s.n < 2:
        return text
    return f"{text} ({fmt_number(s.min, 2)}-{fmt_speedup(s.max)} over {s.n} repeats)"


def load_table(r: LoadResult) -> str:
    """The load sweep as plain text for the terminal: a row per server per step, then the crossover, the users within
    the latency target and the recommended schedule."""
    order = "sequential A/B (each server alone)" if r.spec.order == "sequential" else "simultaneous"
    lines = [f"Load: {r.spec.workload}, {r.spec.max_tokens} tokens, {order}, {r.spec.repeats} repeat(s), "
             f"{r.spec.warmup} warm-up batch(es) per step", ""]
    head = ["users", "side", "per-user tok/s (min-max)", "total tok/s", "TTFT p95 ms", "ITL p95 ms", "queue",
            "KV peak", "preempt"]
    widths = [5, 12, 25, 11, 11, 10, 6, 7, 7]
    lines.append("  ".join(h.rjust(w) for h, w in zip(head, widths, strict=True)))
    for step in r.steps:
        rows = server_rows(step)
        for name, side in rows:
            cells = [str(step.users) if name == "baseline" else "", name, *load_side_cells(side)]
            lines.append("  ".join(c.rjust(w) for c, w in zip(cells, widths, strict=True)))
        if len(step.arms) > 1:
            lines += [f"{'':5}  {'':12}  {name}: speedup (per-user decode) {speedup_text(a.speedup, a)}, "
                      f"throughput ratio (total) {or_na(fmt_speedup(a.throughput_ratio))}"
                      for name, a in step.arms.items()]
        else:
            lines.append(f"{'':5}  {'':12}  speedup (per-user decode) {speedup_text(step.speedup, step.first_arm)}, "
                         f"throughput ratio (total) {or_na(fmt_speedup(step.throughput_ratio))}")
        lines += [f"{'':21}error: {e}" for e in step.errors]
        lines += [f"{'':21}client-limited ({name}): {side.client_note}" for name, side in rows if side.client_limited]
    if len(r.crossovers) > 1:
        lines += ["", f"Arms (per-user decode speedup): {r.arms_text}"]
        lines += [f"Crossover ({name}): {c.text}" for name, c in r.crossovers.items()]
    else:
        lines += ["", f"Crossover (per-user decode speedup): {r.crossover.text}"]
    if r.slo_users and r.spec.slo is not None:
        for who, n in r.slo_users.items():
            if who == "speculative" and len(r.crossovers) > 1:
                continue  # the first arm has its own line, by name
            lines.append(f"Within {r.spec.slo.describe()}: {who} serves "
                         + (f"up to {n} users (the most measured within it)" if n is not None
                            else "no measured count"))
    if r.recommendation is not None:
        lines += ["", *recommendation_lines(r.recommendation)]
    if r.interrupted:
        lines.append("Interrupted: the steps above are those measured.")
    return "\n".join(lines)


def write_out(r: LoadResult, out: Path, png: bool = False) -> list[Path]:
    """load.json (every figure, each step's evaluator cell too) and load.html (the curves, offline);
    with ``png`` (the end of the sweep) load.png too, or a note on stderr saying why not."""
    written = write_files(r, out, png=png)
    if written.png_note:
        print(f"note: load.png not written: {written.png_note}", file=sys.stderr)
    return written.paths


def cmd_load(args: argparse.Namespace) -> int:
    """Run ``python -m demo load``: one step per users count, printed as a table (or JSON), saved with ``--out``.

    Returns 0 when some step measured a speedup, 1 when none did, 130 on Ctrl-C (the steps so far are written).
    Raises UsageError on bad options or an ``--out`` folder that cannot be written."""
    settings = settings_from_args(args)
    requests: list[WorkloadRequest] | None = None
    rate: RateLoad | None
    if args.replay:
        rate, requests, name = replay_load(args, settings)
    else:
        if args.speed is not None or args.workload is not None:
            raise UsageError(f"{'--speed' if args.speed is not None else '--workload'} is for --replay (a trace "
                             "on its own clock)")
        rate = rate_load(args) if args.rate is not None else None
    if rate is None:
        closed_loop_only(args)
    users = users_arg(args.users, settings) if rate is None else []
    req = load_request(args, settings) if requests is None else requests[0].to_race_request()
    try:
        slo = (slo_of_bounds({"ttft": args.slo_ttft_ms, "itl": args.slo_itl_ms})
               if rate is None and (args.slo_ttft_ms is not None or args.slo_itl_ms is not None) else None)
    except BadInput as e:  # names the flag
        raise usage_error(e) from None
    spec = load_spec_of_flags(settings, req, users, args.order, args.repeats, args.warmup, slo, rate=rate)
    if requests is not None:  # each request's own length: the spec says the longest
        spec = spec.model_copy(update={"workload": name, "max_tokens": max(r.max_tokens for r in requests)})
    result = LoadResult(spec=spec)
    out: Path | None = args.out
    if out is not None:
        try:
            write_out(result, out)  # a folder that cannot be written is found before anything is sent
        except OSError as e:
            raise UsageError(f"--out {out}: cannot write there ({e.strerror or e})") from None
    try:
        run(spec, req, settings, progress=not args.no_progress, result=result, out=out, requests=requests)
    except KeyboardInterrupt:
        result.interrupted = True
        if out is not None:
            write_out(finish(result), out, png=True)
        measured = len(result.rate_steps) if rate else len(result.steps)
        print(f"interrupted: {measured} step(s) measured" + (f", written to {out}/" if out else ""),
              file=sys.stderr)
        return 130
    if out is not None:
        print(f"wrote {', '.join(map(str, write_out(result, out, png=True)))}", file=sys.stderr)
    if rate is not None:
        print(json.dumps(rate_json(result)) if args.json else rate_table(result))
        return 0 if any(a.speedup is not None for s in result.rate_steps for a in s.arms.values()) else 1
    print(json.dumps(load_json(result)) if args.json else load_table(result))
    return 0 if any(s.speedup is not None for s in result.steps) else 1
