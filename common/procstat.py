"""A process as /proc/PID/stat tells it (Linux): its fields, its CPU time, whether it lives.

Read by hand, not through psutil: harness/busy.py runs on the machine's bare python3, before any
venv exists, and servers/ stays on the standard library (the app venv stays small).
"""

from __future__ import annotations

import os
from pathlib import Path

CLOCK_TICKS_PER_S = os.sysconf("SC_CLK_TCK")


def stat_fields(pid: int) -> list[str] | None:
    """/proc/PID/stat's fields from the state on (field 3 is [0]); None when the process is gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: split after the last ')'.
    return raw[raw.rindex(")") + 2 :].split()


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds the process has used so far (its threads included); None once gone."""
    f = stat_fields(pid)
    return (int(f[11]) + int(f[12])) / CLOCK_TICKS_PER_S if f else None


def alive(pid: int) -> bool:
    """True while the process exists and is not a zombie."""
    f = stat_fields(pid)
    return f is not None and f[0] not in ("Z", "X")
