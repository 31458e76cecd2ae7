"""``python -m demo sweep ...``: run the matrix, show progress, write results.json, results.csv
and report.html into --out. Results are rewritten after every cell, and Ctrl-C writes what
was measured so far (the cell in progress marked interrupted) before exiting with 130.
With ``--rate`` instead of ``--concurrency``, the evaluator in requests per second: ``--workload``'s
requests open-loop (demo/sweep/rates.py does the work), the files rewritten after every rate step, and
the rate table (demo/load/rate_view.py) on stdout.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path
from typing import TextIO

from demo.cli.args import (
    UsageError,
    add_open_loop_args,
    add_ray_args,
    add_server_args,
    fleet_of,
    settings_from_args,
    usage_error,
)
from demo.client import run_streams
from demo.errors import BadInput
from demo.fmt import fmt_speedup
from demo.load.rate_models import DEFAULT_DRAIN_S, RateLoad, RateStep, make_rate_load
from demo.load.rate_view import rate_step_line, rate_table
from demo.presets import load_presets
from demo.settings import Settings
from demo.slo import slo_of_bounds
from demo.sweep.guardrails import guardrails_for, write_guardrails
from demo.sweep.models import CellResult, SweepResult, SweepSpec
from demo.sweep.plan import UnknownPresetError, resolve_presets
from demo.sweep.rates import check_workload, new_load_result, run_rate_sweep_of
from demo.sweep.report import DECISION_LABELS, finalize, write_outputs
from demo.sweep.runner import SweepProgress, new_result, run_sweep, sweep_spec
from demo.sweep.verdict import VERDICT_BASIS
from demo.workload import Workload, WorkloadError, open_workload

DEFAULT_CONCURRENCY = "1,4"


# The open-loop flags, with the defaults that mean "not given" (a flag away from it needs --rate).
RATE_ONLY = {"duration": None, "requests": None, "arrivals": "poisson", "burstiness": 1.0, "arrival_seed": 0,
             "drain_s": DEFAULT_DRAIN_S, "slo_e2e_ms": None, "slo_ttft_p": 95.0, "slo_itl_p": 95.0,
             "slo_e2e_p": 95.0}
# The closed-loop flags a rate step has no use for, with the sweep's defaults.
USERS_ONLY = {"repeats": 3, "warmup": 1, "order": "sequential", "temperatures": None, "presets": None}


def add_rate_args(p: argparse.ArgumentParser) -> None:
    """The sweep's open-loop flags: ``--rate`` (instead of ``--concurrency``), each step's length, the
    arrival law, and the SLOs' end-to-end bound and percentiles (``--slo-ttft-ms`` and ``--slo-itl-ms`` are
    the sweep's own)."""
    r = p.add_argument_group("requests per second (--rate, instead of --concurrency; docs/load.md)")
    r.add_argument("--rate", metavar="R,...", help="open loop: requests per second, comma-separated, e.g. "
                   "0.5,1,2,4; --workload's requests are each sent at their time whether or not earlier ones "
                   "finished, the same seeded schedule to every server, each alone")
    add_open_loop_args(r)


def rate_arg(args: argparse.Namespace) -> RateLoad | None:
    """The open-loop sweep asked for, or None without ``--rate``; UsageError (one line) for an open-loop flag
    without ``--rate``, a closed-loop one with it, or bad input (before anything is sent)."""
    if args.rate is None:
        given = next((k for k, v in RATE_ONLY.items() if getattr(args, k) != v), None)
        if given is not None:
            raise UsageError(f"--{given.replace('_', '-')} is for --rate (requests per second), not --concurrency")
        return None
    if args.concurrency != DEFAULT_CONCURRENCY:  # its default: not given
        raise UsageError("--concurrency is for closed-loop users and --rate for requests per second: give one")
    if args.workload is None:
        raise UsageError("--rate needs --workload FILE: the requests it sends")
    if (given := next((k for k, v in USERS_ONLY.items() if getattr(args, k) != v), None)) is not None:
        raise UsageError(f"--{given} is for --concurrency: a rate step sends --workload's requests once to each "
                         "server, each alone, each with its own temperature")
    try:
        return make_rate_load(args.rate, requests=args.requests, duration_s=args.duration, arrivals=args.arrivals,
                              burstiness=args.burstiness, seed=args.arrival_seed, drain_s=args.drain_s,
                              slo_ms={"ttft": args.slo_ttft_ms, "itl": args.slo_itl_ms, "e2e": args.slo_e2e_ms},
                              slo_percentile={n: getattr(args, f"slo_{n}_p") for n in ("ttft", "itl", "e2e")})
    except BadInput as e:
        raise usage_error(e) from None


def cmd_rate_sweep(args: argparse.Namespace, settings: Settings, spec: SweepSpec, workload: Workload | None,
                   load: RateLoad) -> int:
    """Run the open-loop sweep of ``--workload``: progress on stderr, the files in ``--out`` after every step,
    the rate table on stdout. Returns 0 when some step measured a speedup, 1 when none did, 130 on Ctrl-C
    (the steps so far are written)."""
    assert workload is not None  # rate_arg asked for it
    try:
        check_workload(workload)
        rated = new_load_result(spec, load, workload, args.max_tokens)
    except BadInput as e:
        raise UsageError(str(e)) from None
    result = new_result(spec, {})
    progress = not args.no_progress

    def say(label: str) -> None:
        if progress:
            print(f"  {label}", file=sys.stderr, flush=True)

    def step_done(step: RateStep) -> None:
        if progress:
            print(rate_step_line(step), file=sys.stderr, flush=True)
        write_outputs(finalize(result), args.out)

    try:
        run_streams(run_rate_sweep_of(spec, load, workload, settings, result, rated, max_tokens=args.max_tokens,
                                      on_step=step_done, on_progress=say, fleet=fleet_of(settings)))
    except KeyboardInterrupt:
        result.interrupted = True
        write_outputs(finalize(result), args.out)
        print(f"interrupted: {len(rated.rate_steps)} rate step(s) written to {args.out}/", file=sys.stderr)
        return 130
    paths = write_outputs(finalize(result), args.out)
    print(rate_table(rated))
    print(f"wrote {paths['json']}, {paths['csv'].name}, {paths['html'].name}")
    return 0 if any(a.speedup is not None for s in rated.rate_steps for a in s.arms.values()) else 1


def add_sweep_parser(sub: argparse._SubParsersAction) -> None:
    """Add the ``sweep`` sub-command and its options to ``sub``; it runs ``cmd_sweep``."""
    p = sub.add_parser("sweep", help="is it worth it? measure a matrix of presets x concurrency x temperature",
                       description="Sequential A/B per cell (baseline batch, then speculative batch, same "
                                   "prompts, same concurrency), with warm-up and repeats; writes results.json, "
                                   "results.csv and report.html with a verdict per workload.")
    add_server_args(p)
    add_ray_args(p)
    p.add_argument("--presets", help="comma-separated preset names (default: every preset, unless --workload "
                   "is given: then only the workload)")
    w = p.add_argument_group("your workload", "a file of your own requests (docs/workloads.md); combined with "
                             "--presets, each is a workload in the report")
    w.add_argument("--workload", type=Path, metavar="FILE",
                   help="your traffic, recognised by content: JSONL, OpenAI batch or request bodies, "
                        "ShareGPT (.json/.jsonl), CSV, or a folder of .txt/.md files (docs/workloads.md)")
    w.add_argument("--sample", type=int, metavar="N", help="measure N requests drawn reproducibly from the file")
    w.add_argument("--seed", type=int, default=0, help="the sample's seed (default 0)")
    w.add_argument("--strict", action="store_true", help="any bad line stops the sweep before anything is sent "
                   "(default: it is reported with its line number and skipped)")
    w.add_argument("--redact", action="store_true", help="no prompt or answer text in results.json, results.csv "
                   "or report.html: ids, token counts and hashes only")
    c = p.add_argument_group("capacity and cost", "from measured cells only (docs/workloads.md)")
    c.add_argument("--slo-ttft-ms", type=float, metavar="MS", help="latency target: time to first token p95")
    c.add_argument("--slo-itl-ms", type=float, metavar="MS", help="latency target: inter-token latency p95")
    c.add_argument("--gpu-hour-price", type=float, metavar="P",
                   help="what one GPU-hour costs (default: SPECDEMO_GPU_HOUR_PRICE); gives the cost per million "
                   "output tokens")
    c.add_argument("--shared-gpu", action=argparse.BooleanOptionalAction, default=None,
                   help="the servers share one GPU, so the price covers them all (default: yes when every URL "
                   "names the same host)")
    c.add_argument("--gpu-shares", metavar="NAME=F,...",
                   help="with a shared GPU, each server's share of it (e.g. its --gpu-memory-utilization: "
                   "baseline=0.22,ngram=0.22,eagle3=0.23,draft=0.25; `python -m servers.arms methods` prints "
                   "them): the report says which part of the price each arm carries")
    p.add_argument("--concurrency", default=DEFAULT_CONCURRENCY,
                   help=f"concurrent requests per batch, comma-separated (default {DEFAULT_CONCURRENCY})")
    add_rate_args(p)
    p.add_argument("--temperatures", help="comma-separated (default: each preset's own temperature)")
    p.add_argument("--repeats", type=int, default=3, help="measured A/B repeats per cell (default 3)")
    p.add_argument("--warmup", type=int, default=1, help="untimed warm-up batches per server per cell (default 1)")
    p.add_argument("--max-tokens", type=int, help="default: each preset's own")
    p.add_argument("--order", choices=["sequential", "simultaneous"], default="sequential",
                   help="sequential: baseline then speculative, each alone (fair); simultaneous: both at once")
    p.add_argument("--out", required=True, type=Path, help="folder for results.json, results.csv, report.html")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_sweep)


class ProgressBar:
    """One redrawn line on a terminal; one line per finished batch elsewhere (logs, CI)."""

    def __init__(self, stream: TextIO, enabled: bool = True) -> None:
        self.stream, self.enabled = stream, enabled
        self.tty = stream.isatty()
        self.last_done = -1

    def update(self, p: SweepProgress) -> None:
        """Draw the progress ``p``: redraw the line on a terminal, else write a line when a batch has finished."""
        if not self.enabled:
            return
        if self.tty:
            width = 30
            filled = int(width * p.done / p.total) if p.total else width
            cols = shutil.get_terminal_size((100, 20)).columns
            line = f"[{'#' * filled}{'.' * (width - filled)}] {p.done}/{p.total} {p.label}"
            self.stream.write("\r" + line[: cols - 1].ljust(cols - 1))
            self.stream.flush()
        elif p.done != self.last_done:
            self.stream.write(f"[{p.done}/{p.total}] {p.label}\n")
            self.stream.flush()
        self.last_done = p.done

    def close(self) -> None:
        """End the redrawn line with a newline (on a terminal only)."""
        if self.enabled and self.tty:
            self.stream.write("\n")
            self.stream.flush()


def build_spec(args: argparse.Namespace, settings: Settings, workload: Workload | None = None) -> SweepSpec:
    """Build the sweep's spec from the parsed options, the settings and the workload file (if any).

    Without ``--presets``, every preset is measured, or none when a workload file is given. Raises UsageError when
    the options do not make a valid spec."""
    if args.presets:
        names = [n.strip() for n in args.presets.split(",") if n.strip()]
    else:
        names = [] if workload is not None else sorted(load_presets(settings.presets_dir)[0])
    price = args.gpu_hour_price if args.gpu_hour_price is not None else settings.gpu_hour_price
    try:
        slo = (slo_of_bounds({"ttft": args.slo_ttft_ms, "itl": args.slo_itl_ms})
               if args.slo_ttft_ms is not None or args.slo_itl_ms is not None else None)
        return sweep_spec(settings, names, args.concurrency, args.temperatures, args.repeats, args.warmup,
                         args.max_tokens, args.order, workload=workload, redact=args.redact, slo=slo,
                         gpu_hour_price=price, shared_gpu=args.shared_gpu,
                         gpu_shares=parse_shares(args.gpu_shares) if getattr(args, "gpu_shares", None) else None)
    except BadInput as e:
        raise usage_error(e) from None


def parse_shares(text: str) -> dict[str, float]:
    """'baseline=0.3,ngram=0.3' -> {'baseline': 0.3, 'ngram': 0.3}; BadInput about gpu-shares when not."""
    out: dict[str, float] = {}
    for part in (p.strip() for p in text.split(",") if p.strip()):
        name, sep, value = part.partition("=")
        try:
            share = float(value)
        except ValueError:
            share = -1.0
        if not sep or not name.strip() or not 0 < share <= 1:
            raise BadInput.about("gpu-shares", f"takes NAME=SHARE pairs with shares from 0 to 1, got {part!r}")
        out[name.strip()] = share
    if not out:
        raise BadInput.about("gpu-shares", "is empty")
    if sum(out.values()) > 1.0 + 1e-9:
        raise BadInput.about("gpu-shares", f"add up to {sum(out.values()):.2f}, more than the whole GPU")
    return out


def load_workload_arg(args: argparse.Namespace, settings: Settings) -> Workload | None:
    """--workload (with --sample/--seed/--strict); skipped lines go to stderr, one per line."""
    if args.workload is None:
        if args.sample is not None or args.strict:
            raise UsageError("--sample and --strict need --workload FILE")
        return None
    try:
        workload = open_workload(args.workload, settings, sample_n=args.sample, seed=args.seed, strict=args.strict)
    except WorkloadError as e:
        for issue in e.issues:
            print(f"  {issue}", file=sys.stderr)
        raise UsageError(str(e)) from None
    for issue in workload.issues:
        print(f"skipped {issue}", file=sys.stderr)
    for line in workload.summary_lines():
        print(f"{workload.name}: {line}", file=sys.stderr)
    return workload


def guardrails_note(result: SweepResult, out: Path) -> str:
    """Write DIR/guardrails.rules.yml from the sweep's figures (demo/sweep/guardrails.py); one line
    saying what was written, or why not."""
    try:
        gs = guardrails_for(result, "results.json")
    except BadInput as e:
        return f"  guardrails: not written ({e})"
    path = write_guardrails(gs, out)
    rules, skipped = sum(len(g.rules) for g in gs), sum(len(g.skipped) for g in gs)
    return f"  guardrails: {path.name} ({rules} rule(s), {skipped} skipped: see its header)"


def _print_summary(result: SweepResult) -> None:
    """The sweep's verdicts (one line each, per arm), its capacity, routing and per-turn lines, on stdout."""
    if result.verdicts:
        print(f"  {VERDICT_BASIS}")
    for v in result.verdicts:
        if v.methods_line:
            print(f"{'':>10}  {v.title}: {v.methods_line}")
        for one in v.per_arm or [v]:
            print(f"{DECISION_LABELS[one.decision]:>10}  {one.headline}"
                  + (f" {one.reconcile}" if one.reconcile else ""))
    for w in result.workloads if any(w.arm_capacity for w in result.workloads) else []:
        for arm, cap in w.arm_capacity.items():
            print(f"  capacity ({w.preset}, {arm}): {cap.saving.text}")
    if result.capacity is not None and not any(w.arm_capacity for w in result.workloads):
        print(f"  capacity: {result.capacity.saving.text}")
    if result.routing:
        print(f"  by segment: {result.routing}")
    if (replay := result.sessions) is not None:
        names = replay.arms or [""]
        first = [s for s in result.segments if s.dimension == "turn"]
        columns = [first, *(replay.arm_turns.get(a, []) for a in names[1:])]
        for name, turns in zip(names, columns, strict=True):
            per = ", ".join(f"{s.label} {fmt_speedup(s.speedup) or 'n/a'}" for s in turns)
            print(f"  per turn ({replay.history} history), decode speedup{f' ({name})' if name else ''}: {per}")
        if replay.differed:
            print(f"  {replay.differed}")


def cmd_sweep(args: argparse.Namespace) -> int:
    """Run ``python -m demo sweep``: measure every cell, write results.json, results.csv and report.html.

    Writes the outputs after each cell, so an interruption keeps what was measured; prints the verdicts, capacity and
    routing lines. Returns 0 when at least one cell did not fail, 1 when every cell failed, 130 on Ctrl-C. Raises
    UsageError on bad options, an unknown preset or a bad workload file."""
    settings = settings_from_args(args)
    rate = rate_arg(args)  # open loop (--rate), checked before the workload is read
    workload = load_workload_arg(args, settings)
    spec = build_spec(args, settings, workload)
    if rate is not None:
        return cmd_rate_sweep(args, settings, spec, workload, rate)
    try:
        presets = resolve_presets(spec.presets, settings.presets_dir)
    except UnknownPresetError as e:
        raise UsageError(str(e)) from None
    out: Path = args.out
    result = new_result(spec, presets)
    bar = ProgressBar(sys.stderr, enabled=not args.no_progress)

    def write_so_far(_cell: CellResult) -> None:
        write_outputs(finalize(result), out)

    try:
        run_streams(run_sweep(spec, settings, result, presets, on_progress=bar.update, on_cell=write_so_far,
                              workload=workload, fleet=fleet_of(settings)))
    except KeyboardInterrupt:
        bar.close()
        result.interrupted = True
        write_outputs(finalize(result), out)
        print(f"interrupted: partial results ({len(result.cells)} cell(s)) written to {out}/", file=sys.stderr)
        return 130
    bar.close()
    paths = write_outputs(finalize(result), out)
    _print_summary(result)
    print(guardrails_note(result, out))
    print(f"wrote {paths['json']}, {paths['csv'].name}, {paths['html'].name}")
    failed = [c for c in result.cells if c.status == "failed"]
    if failed:
        print(f"{len(failed)} of {len(result.cells)} cell(s) failed; their errors are in the report.", file=sys.stderr)
    return 0 if len(failed) < len(result.cells) else 1
