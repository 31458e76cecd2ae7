"""The servers a state file records: alive (our own, by PID and start time), healthy, stopped."""

from __future__ import annotations

from typing import TextIO

import httpx

from servers import procs
from servers.state import LauncherState, ServerRecord

# ---------------------------------------------------------------- live records

def health_ok(url: str, timeout_s: float = 2.0, client: httpx.Client | None = None) -> bool:
    """/health answers 200. A caller that checks often passes its own client: a new client per
    call builds a TLS context, which costs many times the CPU of the request itself."""
    try:
        return (client or httpx).get(f"{url}/health", timeout=timeout_s).status_code == 200
    except httpx.HTTPError:
        return False


def live_records(state: LauncherState | None) -> list[ServerRecord]:
    """The state file's servers whose process still runs (PID and start time checked)."""
    if state is None:
        return []
    return [r for r in state.servers if procs.is_running(r.pid, r.start_ticks)]


def ours_alive(r: ServerRecord) -> bool:
    """True while the recorded server, or workers of its process group, still run."""
    if procs.is_running(r.pid, r.start_ticks):
        return True
    if procs.is_running(r.pid):
        return False  # the PID now belongs to another process: its group is not ours
    # Leader gone: Linux never hands out a PID still used as a process group ID, so any
    # member left in the group is an orphaned worker of our server.
    return bool(procs.group_pids(r.pgid))


def stop_records(records: list[ServerRecord], timeout_s: float, out: TextIO) -> None:
    """Stop each recorded server that is still ours (its PID's start time checked), saying what was done on ``out``."""
    for r in records:
        if ours_alive(r):
            how = procs.stop_group(r.pgid, timeout_s)
            print(f"  {r.name}: PID {r.pid} {how}", file=out, flush=True)
