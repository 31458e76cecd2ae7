"""Memory and disk: RSS of a process group or tree, the runs dir's size, a sample of each, and
the app's growth per hour."""

from __future__ import annotations

import statistics
from contextlib import suppress
from datetime import datetime
from pathlib import Path

from pydantic import BaseModel

from servers import procs

MB = 1e6


def group_rss_bytes(pgid: int) -> int | None:
    """RSS summed over a process group (a server and the workers it forked); None when it is gone."""
    pids = procs.group_pids(pgid)
    return procs.rss_bytes(pids) if pids else None


def tree_rss_bytes(pid: int) -> int | None:
    """RSS of a process and all its descendants; None when it is gone."""
    if not procs.is_running(pid):
        return None
    kids = procs.children()
    todo, seen = [pid], []
    while todo:
        p = todo.pop()
        seen.append(p)
        todo.extend(kids.get(p, []))
    return procs.rss_bytes(seen)


def dir_usage(path: Path) -> tuple[int, int]:
    """(bytes, files) under path; (0, 0) when it does not exist yet."""
    total = files = 0
    for p in path.rglob("*") if path.is_dir() else []:
        with suppress(OSError):
            if p.is_file():
                total += p.stat().st_size
                files += 1
    return total, files


class Sample(BaseModel):
    t_s: float  # since the page opened
    at: datetime
    app_rss_bytes: int | None
    supervisor_rss_bytes: int | None
    server_rss_bytes: dict[str, int | None]
    runs_dir_bytes: int
    runs_files: int


def growth_mb_per_h(points: list[tuple[float, float]]) -> float | None:
    """Slope of a least-squares line through (seconds, bytes), in MB per hour; None with fewer than
    two samples or no time between them."""
    if len(points) < 2 or len({t for t, _ in points}) < 2:
        return None
    slope, _ = statistics.linear_regression([t for t, _ in points], [b for _, b in points])
    return slope * 3600 / MB
