"""The server pair under the supervisor (real CPU vLLM or stand-ins), through `python -m servers`
and its state file; the timings for each kind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path

from pydantic import BaseModel

from common.paths import ROOT
from common.sides import SIDES, Side
from harness.ports import free_port
from servers import procs
from servers.launcher import health_ok
from servers.settings import LauncherSettings
from servers.state import LauncherState, ServerRecord, read_state


class Timing(BaseModel):
    lead_s: float  # no kill planned before this
    tail_s: float  # nor in the last tail_s of the run: room to heal and race live again
    heal_timeout_s: float  # kill -> healthy
    live_timeout_s: float  # healthy -> a live race started
    mid_race_wait_s: float  # a due kill waits this long at most for a live answer to cut (mid_stream)
    up_timeout_s: float  # `servers up --detach`


TIMINGS = {
    "standin": Timing(lead_s=20, tail_s=60, heal_timeout_s=60, live_timeout_s=60, mid_race_wait_s=20,
                      up_timeout_s=90),
    "cpu": Timing(lead_s=120, tail_s=420, heal_timeout_s=600, live_timeout_s=300, mid_race_wait_s=180,
                  up_timeout_s=1500),
}
# The supervisor's settings for stand-ins: a 8 s restart delay keeps the server down long enough
# for the booth to notice and show a recording (a stand-in itself starts in about a second).
STANDIN_SUPERVISOR = {
    "SPECDEMO_SERVERS_HEALTH_INTERVAL_S": "0.5",
    "SPECDEMO_SERVERS_RESTART_BACKOFF_S": "8",
    "SPECDEMO_SERVERS_HEALTH_TIMEOUT_S": "5",
    "SPECDEMO_SERVERS_STOP_TIMEOUT_S": "3",
    "SPECDEMO_SERVERS_STARTUP_TIMEOUT_S": "30",
}


class Pair:
    """The server pair under the supervisor, through `python -m servers` and its state file."""

    def __init__(self, kind: str, out: Path, log: Callable[[str], None]) -> None:
        self.kind, self.log = kind, log
        self.started_here = False
        self.tmp: tempfile.TemporaryDirectory[str] | None = None
        if kind == "standin":
            self.tmp = tempfile.TemporaryDirectory(prefix="soak-")
            ports = (free_port(), free_port())
            self.cwd = Path(self.tmp.name)  # no .env of a checkout is read
            self.env = {k: v for k, v in os.environ.items() if not k.startswith("SPECDEMO_")}
            self.env.update({
                "PYTHONPATH": str(ROOT),
                "SPECDEMO_SERVERS_RUN_DIR": str(out / "servers"),
                "SPECDEMO_SERVERS_CACHE_DIR": str(self.cwd / "cache"),
                "SPECDEMO_SERVERS_BASELINE_PORT": str(ports[0]),
                "SPECDEMO_SERVERS_SPECULATIVE_PORT": str(ports[1]),
                "SPECDEMO_SERVERS_SERVER_COMMAND": f"{sys.executable} -m benchmarks.soak_standin",
                **STANDIN_SUPERVISOR,
            })
            self.settings = LauncherSettings(_env_file=None, run_dir=out / "servers", host="127.0.0.1",
                                             baseline_port=ports[0], speculative_port=ports[1])
        else:
            self.cwd = ROOT
            self.env = dict(os.environ)
            self.settings = LauncherSettings(_env_file=ROOT / ".env")

    def url(self, role: Side) -> str:
        port = self.settings.baseline_port if role == "baseline" else self.settings.speculative_port
        return f"http://{self.settings.host}:{port}"

    def servers(self, *args: str, timeout_s: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "servers", *args], cwd=self.cwd, env=self.env,
                              capture_output=True, text=True, timeout=timeout_s)

    def state(self) -> LauncherState | None:
        return read_state(self.settings.state_file)

    def record(self, role: Side) -> ServerRecord | None:
        st = self.state()
        return next((r for r in st.servers if r.role == role), None) if st else None

    def healthy(self, role: Side) -> bool:
        return health_ok(self.url(role))

    def supervised(self) -> bool:
        st = self.state()
        return bool(st and st.supervisor and procs.is_running(st.supervisor.pid, st.supervisor.start_ticks))

    def restarts(self) -> dict[str, int]:
        """Each server's restart count, from `python -m servers status --json`."""
        try:
            done = self.servers("status", "--json", timeout_s=60)
            return {str(row["role"]): int(row["restarts"]) for row in json.loads(done.stdout)}
        except (subprocess.TimeoutExpired, ValueError, KeyError, TypeError) as e:
            self.log(f"status --json failed: {e}")
            return {}

    def up(self, timeout_s: float) -> None:
        """Start the pair, or use the CPU pair already running under its supervisor. Anything in
        between (one server up, or no supervisor) is refused untouched: the soak would have to stop
        a pair it did not start."""
        if self.kind == "cpu":
            healthy = [r for r in SIDES if self.healthy(r)]
            if len(healthy) == len(SIDES) and self.supervised():
                self.log("the CPU pair is already running under its supervisor: using it, leaving it running")
                return
            if healthy or self.supervised():
                raise RuntimeError(
                    "the CPU pair is partly running or has no supervisor (`python -m servers status`): the soak "
                    "needs both servers under a supervisor; stop it with `python -m servers down` (the soak then "
                    "starts its own) or bring it up with `python -m servers up --detach`, and rerun")
            self.log("the CPU pair is not running: starting it with `python -m servers up --detach` (a cold start "
                     "takes minutes); it is stopped again at the end")
        self.started_here = True
        try:
            done = self.servers("up", "--detach", timeout_s=timeout_s)
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"`python -m servers up --detach` did not return within {timeout_s:g} s") from None
        if done.returncode != 0:
            raise RuntimeError(f"`python -m servers up --detach` failed (exit {done.returncode}):\n"
                               f"{done.stdout[-2000:]}{done.stderr[-2000:]}")
        if not self.supervised():
            raise RuntimeError("the servers are up but no supervisor watches them: a killed server would not "
                               "come back; stop them (`python -m servers down`) and rerun")

    def close(self) -> None:
        """Stop what this started: `down`, then SIGKILL anything of it still alive."""
        if not self.started_here:
            if self.tmp:
                self.tmp.cleanup()
            return
        st = self.state()
        try:
            done = self.servers("down", timeout_s=90)
            self.log("servers down: " + " ".join(done.stdout.split())[:300])
        except subprocess.TimeoutExpired:
            self.log("`python -m servers down` did not return within 90 s: killing what is left")
        if st:
            if st.supervisor and procs.is_running(st.supervisor.pid, st.supervisor.start_ticks):
                with suppress(ProcessLookupError):
                    os.kill(st.supervisor.pid, signal.SIGKILL)
            for r in st.servers:  # only while its leader is the very process started (a PID is reused)
                if procs.is_running(r.pid, r.start_ticks):
                    procs.stop_group(r.pgid, 3)
        if self.tmp:
            self.tmp.cleanup()
