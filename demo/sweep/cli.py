"""``python -m demo sweep ...``: run the matrix, show progress, write results.json, results.csv
and report.html into --out. Results are rewritten after every cell, and Ctrl-C writes what
was measured so far (the cell in progress marked interrupted) before exiting with 130.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
from pathlib import Path
from typing import TextIO

from pydantic import ValidationError

from demo.cli import UsageError, add_endpoint_args, settings_from_args
from demo.presets import load_presets
from demo.settings import Settings
from demo.sweep.models import SweepSpec
from demo.sweep.report import DECISION_LABELS, finalize, write_outputs
from demo.sweep.runner import Progress, UnknownPresetError, new_result, resolve_presets, run_sweep

DEFAULT_CONCURRENCY = "1,4"


def parse_numbers(text: str, kind: type, what: str) -> list:
    try:
        values = [kind(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise UsageError(f"--{what} must be comma-separated numbers, got {text!r}") from None
    if not values:
        raise UsageError(f"--{what} is empty")
    return values


def add_sweep_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("sweep", help="is it worth it? measure a matrix of presets x concurrency x temperature",
                       description="Sequential A/B per cell (baseline batch, then speculative batch, same "
                                   "prompts, same concurrency), with warm-up and repeats; writes results.json, "
                                   "results.csv and report.html with a verdict per workload.")
    add_endpoint_args(p)
    p.add_argument("--presets", help="comma-separated preset names (default: every preset)")
    p.add_argument("--concurrency", default=DEFAULT_CONCURRENCY,
                   help=f"concurrent requests per batch, comma-separated (default {DEFAULT_CONCURRENCY})")
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

    def update(self, p: Progress) -> None:
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
        if self.enabled and self.tty:
            self.stream.write("\n")
            self.stream.flush()


def build_spec(args: argparse.Namespace, settings: Settings) -> SweepSpec:
    if args.presets:
        names = [n.strip() for n in args.presets.split(",") if n.strip()]
    else:
        names = sorted(load_presets(settings.presets_dir)[0])
    return make_spec(settings, names, args.concurrency, args.temperatures, args.repeats, args.warmup,
                     args.max_tokens, args.order)


def make_spec(settings: Settings, presets: list[str], concurrency: str, temperatures: str | None, repeats: int,
              warmup: int, max_tokens: int | None, order: str = "sequential") -> SweepSpec:
    """A checked SweepSpec from text inputs (the CLI's and the Evaluate tab's); UsageError says what is wrong."""
    conc = parse_numbers(concurrency, int, "concurrency")
    temps = parse_numbers(temperatures, float, "temperatures") if temperatures and temperatures.strip() else None
    if any(c < 1 or c > 1024 for c in conc):
        raise UsageError("--concurrency values must be between 1 and 1024")
    if any(not 0 <= t <= 2 for t in temps or []):
        raise UsageError("--temperatures must be between 0 and 2")
    try:
        return SweepSpec(baseline_url=settings.baseline_url, speculative_url=settings.speculative_url,
                         presets=presets, concurrency=conc, temperatures=temps, repeats=repeats, warmup=warmup,
                         max_tokens=max_tokens, order=order)  # type: ignore[arg-type]
    except ValidationError as e:
        err = e.errors()[0]
        raise UsageError(f"{'.'.join(map(str, err['loc']))}: {err['msg']}") from None


def cmd_sweep(args: argparse.Namespace) -> int:
    settings = settings_from_args(args)
    spec = build_spec(args, settings)
    try:
        presets = resolve_presets(spec.presets, settings.presets_dir)
    except UnknownPresetError as e:
        raise UsageError(str(e)) from None
    out: Path = args.out
    result = new_result(spec, presets)
    bar = ProgressBar(sys.stderr, enabled=not args.no_progress)
    try:
        asyncio.run(run_sweep(spec, settings, result, presets, on_progress=bar.update,
                              on_cell=lambda _cell: write_outputs(finalize(result), out)))
    except KeyboardInterrupt:
        bar.close()
        result.interrupted = True
        write_outputs(finalize(result), out)
        print(f"interrupted: partial results ({len(result.cells)} cell(s)) written to {out}/", file=sys.stderr)
        return 130
    bar.close()
    paths = write_outputs(finalize(result), out)
    for v in result.verdicts:
        print(f"{DECISION_LABELS[v.decision]:>10}  {v.headline}")
    print(f"wrote {paths['json']}, {paths['csv'].name}, {paths['html'].name}")
    failed = [c for c in result.cells if c.status == "failed"]
    if failed:
        print(f"{len(failed)} of {len(result.cells)} cell(s) failed; their errors are in the report.", file=sys.stderr)
    return 0 if len(failed) < len(result.cells) else 1
