"""The state file: which processes this launcher started, so `down` stops exactly those, and what
the supervisor did to them (restarts, their last cause), so `status` can say it."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ValidationError

from common.files import atomic_write
from common.sides import Side


class ServerRecord(BaseModel):
    """One started server as the state file records it.

    Its role, URL, arm, cores, PID, process group, start time, log, model and last start.
    """

    role: Side
    url: str
    # A speculative server started as a named arm (`up --arms`), and its CPU cores; None: the pair's
    # server of that role (a state file that names no arm, as `up` without --arms writes).
    arm: str | None = None
    cores: str | None = None
    pid: int
    pgid: int
    # Start time in clock ticks since boot: a reused PID is never mistaken for our server.
    start_ticks: int
    log_path: Path
    served_model_name: str
    model: str
    command: list[str]
    started_at: datetime
    # Filled in when /health first answers 200.
    time_to_healthy_s: float | None = None
    # cold: no compile cache for these flags yet; warm: the cache from an earlier start was there.
    start_kind: Literal["cold", "warm"] | None = None
    # The warm-up's time after /health first answered (servers/warmup.py); None: no warm-up ran.
    warmup_s: float | None = None
    # Its decode step timed at warm-up (servers/warmup.py time_steps), ms: a plain step on a baseline,
    # a verification step on a speculative server; None with the reason in step_na (or not timed).
    step_ms: float | None = None
    step_na: str | None = None

    # Written by the supervisor (servers/supervisor.py).
    restarts: int = 0
    # When the supervisor restarted this server within the last hour: the restart cap counts these.
    restart_times: list[datetime] = []
    # Why it last failed ("exit code 1", "killed by SIGKILL", "no /health answer for 30 s") and when.
    last_cause: str | None = None
    last_cause_at: datetime | None = None
    # A restart is due at this time (backoff); None while the server runs.
    next_restart_at: datetime | None = None
    # Why the supervisor is not restarting it now (the hourly cap, a port taken), else None.
    held: str | None = None


    @property
    def name(self) -> str:
        """The server's name: its arm's, else its role."""
        return self.arm or self.role

    def step_cost(self, baseline: ServerRecord | None) -> float | None:
        """This speculative server's verification step in ``baseline``'s plain steps, as timed at
        warm-up; None for a baseline or when either was not timed."""
        if self.role == "baseline" or not self.step_ms or baseline is None or not baseline.step_ms:
            return None
        return round(self.step_ms / baseline.step_ms, 2)

    def step_text(self, baseline: ServerRecord | None) -> str:
        """"38.9 ms a verification step (0.86x a plain one)", or n/a with the reason."""
        if self.step_ms is None:
            return f"n/a ({self.step_na or 'not timed: started without a warm-up'})"
        if self.role == "baseline":
            return f"{self.step_ms} ms a plain step"
        cost = self.step_cost(baseline)
        return f"{self.step_ms} ms a verification step" + (f" ({cost}x a plain one)" if cost else "")


class SupervisorRecord(BaseModel):
    """The supervisor as the state file records it: its PID, start time (ticks and UTC) and mode."""
    pid: int
    start_ticks: int
    started_at: datetime
    # detached: `up --detach` left it in the background; foreground: the `up` in a terminal.
    mode: Literal["detached", "foreground"]


class LauncherState(BaseModel):
    """What ``up`` started (the state file): the launcher's PID, the device, every server and the supervisor."""
    launcher_pid: int
    device: str
    servers: list[ServerRecord]
    supervisor: SupervisorRecord | None = None


def read_state(path: Path) -> LauncherState | None:
    """The recorded state, or None when there is none; an unreadable file counts as none."""
    try:
        return LauncherState.model_validate_json(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValidationError, ValueError):
        return None


def write_state(path: Path, state: LauncherState) -> None:
    """Write ``state`` to ``path`` whole (atomically: a reader never sees half a file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, state.model_dump_json(indent=2))  # `status` never reads half a file


def clear_state(path: Path) -> None:
    """Remove the state file at ``path`` (nothing when it is already gone)."""
    path.unlink(missing_ok=True)
