"""Prove a recommended schedule on the same servers: restart the pair with it and sweep again.

    python -m benchmarks.verify_schedule DIR/load.json [--run-dir logs/servers] [--out DIR2]

DIR/load.json is a load sweep (``python -m demo load --preset P --users 1,2,4,8,16,32
--speculative-url URL --arm adaptive=URL2 --out DIR``) of the baseline, a static arm and the
``adaptive`` arm: a server running a schedule of k by batch size (``python -m servers up --arms
ngram,adaptive --share-arm-cores``). Its recommendation (demo/sweep/schedule.py) is the schedule to
prove. This script:

1. restarts the pair with that schedule, by the launcher's own commands: ``python -m servers down``,
   then ``python -m servers up --detach --adaptive-schedule JSON`` with ``--up-args`` (default: the
   arms and placement above), waiting until it is healthy and warm;
2. runs the same load sweep again (same preset, users, tokens, order, repeats, URLs) into DIR2;
3. prints, per users count, the static arm's and the adaptive arm's speedup before and after, the
   adaptive arm's drafts after (0: drafting off), and the one line read from the second sweep:
   whether adaptive keeps the static arm's gain at few users and stays at or above the baseline
   where the static arm loses; and writes it all to DIR2/verify.json.

Every subprocess has a timeout; a bad input (no recommendation, no adaptive arm, a free prompt)
is one line and exit 2, before anything is restarted.
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel, Field

from common.paths import ROOT
from demo.errors import DemoError
from demo.fmt import fmt_speedup, or_na
from demo.load.engine import LoadResult, LoadStep
from demo.runs.store import read_load
from demo.sweep.models import Recommendation
from demo.sweep.schedule import ADAPTIVE_ARM, adaptive_lesson, server_points

UP_ARGS = "--arms ngram,adaptive --share-arm-cores --host 127.0.0.1"
UP_TIMEOUT_S = 1500.0  # a cold start compiles for minutes on 2 busy cores
DOWN_TIMEOUT_S = 120.0
SWEEP_TIMEOUT_S = 7200.0

Schedule = list[list[int]]


class VerifyRow(BaseModel):
    """One users count: the static and the adaptive arm's per-user decode speedup, before and after."""

    users: int
    static_before: float | None = None
    adaptive_before: float | None = None
    static_after: float | None = None
    adaptive_after: float | None = None
    adaptive_drafts_after: int | None = None  # drafts in the measured batches; 0: drafting off


class Verification(BaseModel):
    """The schedule proven, the arms compared, a row per users count and the lesson of each sweep."""

    schedule: Schedule
    static_arm: str
    rows: list[VerifyRow] = Field(default_factory=list)
    lesson_before: str = ""
    lesson_after: str = ""


def check_first(first: LoadResult) -> tuple[Schedule, str]:
    """The schedule to prove and the static arm's name; ValueError (one line) when the sweep cannot be verified."""
    names = [a.name for a in first.spec.arm_list()]
    if ADAPTIVE_ARM not in names:
        raise ValueError(f"the sweep has no '{ADAPTIVE_ARM}' arm to restart: sweep with --arm {ADAPTIVE_ARM}=URL")
    statics = [n for n in names if n != ADAPTIVE_ARM]
    if not statics:
        raise ValueError(f"the sweep has no static arm beside '{ADAPTIVE_ARM}' to compare it with")
    if first.spec.workload == "prompt":
        raise ValueError("the sweep ran a free prompt; verify re-runs a preset's sweep: sweep with --preset")
    rec = first.recommendation
    if not isinstance(rec, Recommendation):
        why = getattr(rec, "reason", "no step measured")
        raise ValueError(f"the sweep has no recommended schedule to verify ({why})")
    return [list(map(int, band)) for band in rec.speculative_config["num_speculative_tokens_per_batch_size"]], \
        statics[0]


def _speedup(step: LoadStep | None, arm: str) -> float | None:
    return step.arms[arm].speedup if step is not None and arm in step.arms else None


def _drafts(step: LoadStep | None, arm: str) -> int | None:
    if step is None:
        return None
    return next((p.drafts for p in server_points([step.cell]) if p.server == arm), None)


def compare(first: LoadResult, second: LoadResult, schedule: Schedule, static: str) -> Verification:
    """The two sweeps side by side, a row per users count of the first."""
    before = {s.users: s for s in first.steps}
    after = {s.users: s for s in second.steps}
    rows = [VerifyRow(users=u, static_before=_speedup(before[u], static),
                      adaptive_before=_speedup(before[u], ADAPTIVE_ARM), static_after=_speedup(after.get(u), static),
                      adaptive_after=_speedup(after.get(u), ADAPTIVE_ARM),
                      adaptive_drafts_after=_drafts(after.get(u), ADAPTIVE_ARM))
            for u in sorted(before)]
    return Verification(schedule=schedule, static_arm=static, rows=rows,
                        lesson_before=adaptive_lesson(server_points([s.cell for s in first.steps])),
                        lesson_after=adaptive_lesson(server_points([s.cell for s in second.steps])))


def verify(first: LoadResult, restart: Callable[[Schedule], None],
           sweep: Callable[[LoadResult], LoadResult]) -> Verification:
    """Restart the pair with the first sweep's recommended schedule, sweep again, compare.

    ``restart`` and ``sweep`` do the work (the CLI: the launcher's and demo load's commands); a
    ValueError from check_first comes before either is called.
    """
    schedule, static = check_first(first)
    restart(schedule)
    return compare(first, sweep(first), schedule, static)


def table(v: Verification) -> str:
    """The verification as plain text for the terminal."""
    lines = [f"Schedule verified: {json.dumps(v.schedule)} (adaptive arm restarted with it)", "",
             f"{'users':>5}  {v.static_arm + ' before/after':>24}  {'adaptive before/after':>24}  {'drafts after':>12}"]
    def pair(a: float | None, b: float | None) -> str:
        return f"{or_na(fmt_speedup(a))} / {or_na(fmt_speedup(b))}"

    for r in v.rows:
        drafts = or_na(str(r.adaptive_drafts_after) if r.adaptive_drafts_after is not None else None)
        lines.append(f"{r.users:>5}  {pair(r.static_before, r.static_after):>24}"
                     f"  {pair(r.adaptive_before, r.adaptive_after):>24}  {drafts:>12}")
    lines += ["", f"before: {v.lesson_before}", f"after:  {v.lesson_after}"]
    return "\n".join(lines)


# --------------------------------------------------------------------------- the real commands


def _run(cmd: list[str], timeout_s: float, what: str) -> subprocess.CompletedProcess[str]:
    try:
        done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise SystemExit(f"error: {what} did not finish within {timeout_s:.0f} s") from None
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-5:]
        raise SystemExit(f"error: {what} failed (exit {done.returncode}): " + " | ".join(tail))
    return done


def restart_pair(run_dir: Path, up_args: str) -> Callable[[Schedule], None]:
    """A restart by the launcher's commands: ``servers down``, then ``servers up --detach`` with the schedule."""
    def restart(schedule: Schedule) -> None:
        servers = [sys.executable, "-m", "servers"]
        _run([*servers, "down", "--run-dir", str(run_dir)], DOWN_TIMEOUT_S, "servers down")
        _run([*servers, "up", "--detach", "--run-dir", str(run_dir), *shlex.split(up_args),
              "--adaptive-schedule", json.dumps(schedule)], UP_TIMEOUT_S, "servers up with the schedule")
    return restart


def sweep_again(out: Path) -> Callable[[LoadResult], LoadResult]:
    """The first sweep's ``demo load``, again, into ``out``; returns its result."""
    def sweep(first: LoadResult) -> LoadResult:
        s = first.spec
        cmd = [sys.executable, "-m", "demo", "load", "--preset", s.workload, "--users", ",".join(map(str, s.users)),
               "--max-tokens", str(s.max_tokens), "--temperature", str(s.temperature), "--api", s.api,
               "--order", s.order, "--repeats", str(s.repeats), "--warmup", str(s.warmup),
               "--baseline-url", s.baseline_url, "--speculative-url", s.speculative_url,
               *(x for a in s.arm_list()[1:] for x in ("--arm", f"{a.name}={a.url}")),
               "--out", str(out), "--no-progress"]
        _run(cmd, SWEEP_TIMEOUT_S, "the second load sweep")
        return read_load(out / "load.json")
    return sweep


def main(argv: list[str] | None = None) -> int:
    """``python -m benchmarks.verify_schedule``: 0 when both sweeps ran, 2 on bad input."""
    ap = argparse.ArgumentParser(prog="python -m benchmarks.verify_schedule", description=__doc__.splitlines()[0])
    ap.add_argument("load_json", type=Path, help="the first sweep's load.json (demo load --out DIR)")
    ap.add_argument("--run-dir", type=Path, default=ROOT / "logs" / "servers", help="the pair's run dir")
    ap.add_argument("--up-args", default=UP_ARGS, help=f"servers up's flags for the pair (default: {UP_ARGS})")
    ap.add_argument("--out", type=Path, help="where the second sweep and verify.json go (default: DIR/verify)")
    a = ap.parse_args(argv)
    try:
        first = read_load(a.load_json)
        check_first(first)
    except (DemoError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    out = a.out or a.load_json.parent / "verify"
    out.mkdir(parents=True, exist_ok=True)
    v = verify(first, restart_pair(a.run_dir, a.up_args), sweep_again(out))
    (out / "verify.json").write_text(v.model_dump_json(indent=2))
    print(table(v))
    return 0


if __name__ == "__main__":
    sys.exit(main())
