"""``python -m demo sweep --workload FILE --rate 0.5,1,2 ...``: the evaluator in requests per second on
the command line (demo/sweep/rates.py does the work). Its flags beside ``--concurrency``, the one-line
usage errors each way, progress on stderr, results.json / results.csv / report.html rewritten after
every rate step, and the rate table (demo/load/rate_view.py) on stdout."""

from __future__ import annotations

import argparse
import asyncio
import sys

from demo.cli_args import UsageError, usage_error
from demo.errors import BadInput
from demo.load.arrivals import ARRIVALS
from demo.load.rate import DEFAULT_DRAIN_S, RateLoad, RateStep
from demo.load.rate_view import rate_step_line, rate_table
from demo.settings import Settings
from demo.sweep.models import SweepSpec
from demo.sweep.rates import check_workload, make_rate_load, new_load_result, run_rate_sweep_of
from demo.sweep.report import finalize, write_outputs
from demo.sweep.runner import new_result
from demo.workload import Workload

# The open-loop flags, with the defaults that mean "not given" (a flag away from it needs --rate).
RATE_ONLY = {"duration": None, "requests": None, "arrivals": "poisson", "burstiness": 1.0, "arrival_seed": 0,
             "drain_s": DEFAULT_DRAIN_S, "slo_e2e_ms": None, "slo_ttft_p": 95.0, "slo_itl_p": 95.0,
             "slo_e2e_p": 95.0}
# The closed-loop flags a rate step has no use for, with the sweep's defaults.
DEFAULT_CONCURRENCY = "1,4"  # demo/sweep/cli.py's (which imports this module)
USERS_ONLY = {"repeats": 3, "warmup": 1, "order": "sequential", "temperatures": None, "presets": None}


def add_rate_args(p: argparse.ArgumentParser) -> None:
    """The sweep's open-loop flags: ``--rate`` (instead of ``--concurrency``), each step's length, the
    arrival law, and the SLOs' end-to-end bound and percentiles (``--slo-ttft-ms`` and ``--slo-itl-ms`` are
    the sweep's own)."""
    r = p.add_argument_group("requests per second (--rate, instead of --concurrency; docs/load.md)")
    r.add_argument("--rate", metavar="R,...", help="open loop: requests per second, comma-separated, e.g. "
                   "0.5,1,2,4; --workload's requests are each sent at their time whether or not earlier ones "
                   "finished, the same seeded schedule to every server, each alone")
    length = r.add_mutually_exclusive_group()
    length.add_argument("--duration", type=float, metavar="S", help="each step's arrival window in seconds")
    length.add_argument("--requests", type=int, metavar="N", help="each step's number of requests")
    r.add_argument("--arrivals", choices=list(ARRIVALS), default="poisson",
                   help="the gaps between arrivals: poisson (default), constant, or gamma (see --burstiness)")
    r.add_argument("--burstiness", type=float, default=1.0, metavar="B",
                   help="gamma's shape: below 1 burstier than Poisson, above 1 steadier (default 1)")
    r.add_argument("--arrival-seed", type=int, default=0, metavar="K",
                   help="the arrival schedule's seed (default 0); --seed is the sample's")
    r.add_argument("--drain-s", type=float, default=DEFAULT_DRAIN_S, metavar="S",
                   help=f"after the arrivals, how long a step waits before cutting open requests (default "
                        f"{DEFAULT_DRAIN_S:g})")
    r.add_argument("--slo-e2e-ms", type=float, metavar="MS", help="SLO: end-to-end latency (with --rate)")
    for name in ("ttft", "itl", "e2e"):
        r.add_argument(f"--slo-{name}-p", type=float, default=95.0, metavar="P",
                       help=f"the percentile --slo-{name}-ms bounds with --rate (default 95)")


def rate_arg(args: argparse.Namespace) -> RateLoad | None:
    """The open-loop sweep asked for, or None without ``--rate``; UsageError (one line) for an open-loop flag
    without ``--rate``, a closed-loop one with it, or bad input (before anything is sent)."""
    if args.rate is None:
        given = next((k for k, v in RATE_ONLY.items() if getattr(args, k) != v), None)
        if given is not None:
            raise UsageError(f"--{given.replace('_', '-')} is for --rate (requests per second), not --concurrency")
        return None
    if args.concurrency != DEFAULT_CONCURRENCY:  # its default is the sweep's own (demo/sweep/cli.py)
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
        asyncio.run(run_rate_sweep_of(spec, load, workload, settings, result, rated, max_tokens=args.max_tokens,
                                      on_step=step_done, on_progress=say))
    except KeyboardInterrupt:
        result.interrupted = True
        write_outputs(finalize(result), args.out)
        print(f"interrupted: {len(rated.rate_steps)} rate step(s) written to {args.out}/", file=sys.stderr)
        return 130
    paths = write_outputs(finalize(result), args.out)
    print(rate_table(rated))
    print(f"wrote {paths['json']}, {paths['csv'].name}, {paths['html'].name}")
    return 0 if any(a.speedup is not None for s in rated.rate_steps for a in s.arms.values()) else 1
