"""How much of the machine is idle now: the idle cores over a short sample of /proc/stat (Linux).

scripts/test.sh asks before its timing stage: that stage's lanes run side by side only when the
machine has a core per lane to spare; beside a neighbour (a busy loop, another job) they run one
after another, so that each lane's client and stand-ins are never short of a core while their
figures are checked against real time.

    python -m harness.idle [--seconds 3]   # prints the idle cores, e.g. 1.96
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

IDLE_FIELDS = (3, 4)  # idle and iowait, after "cpu": /proc/stat's aggregate line (proc(5))


def _cpu_ticks() -> tuple[int, int]:
    """(idle, total) jiffies of all CPUs since boot."""
    fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    # guest and guest_nice (fields 8 and 9) are already counted in user and nice
    total = sum(fields[:8])
    return sum(fields[i] for i in IDLE_FIELDS), total


def idle_between(before: tuple[int, int], after: tuple[int, int], cores: int) -> float:
    """The idle cores, on average, between two (idle, total) readings of /proc/stat."""
    return cores * (after[0] - before[0]) / max(after[1] - before[1], 1)


def idle_cores(seconds: float = 3.0) -> float:
    """The cores that stood idle over the next ``seconds``, on average (0 .. the machine's count)."""
    before = _cpu_ticks()
    time.sleep(seconds)
    return idle_between(before, _cpu_ticks(), os.cpu_count() or 1)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m harness.idle", description=(__doc__ or "").splitlines()[0])
    p.add_argument("--seconds", type=float, default=3.0)
    a = p.parse_args(argv)
    if a.seconds <= 0:
        p.error("--seconds must be above 0")
    print(f"{idle_cores(a.seconds):.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
