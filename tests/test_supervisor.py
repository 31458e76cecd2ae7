"""The supervisor (servers/supervisor.py) against real stand-in server processes on 127.0.0.1:
`python -m servers up --detach` runs as a real subprocess and leaves a real supervisor behind; the
tests kill, stop (SIGSTOP: a hang) and crash the stand-ins and watch what it does. Every wait is
bounded; every test leaves no process and no port behind.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from common.waiting import wait_for
from servers import procs
from tests.signals import interruptible
from tests.test_launcher import Env

# Fast, but never a tight loop: the supervisor looks every 0.2 s, restarts after 0.5 s (doubling).
FAST = {
    "SPECDEMO_SERVERS_HEALTH_INTERVAL_S": "0.2",
    "SPECDEMO_SERVERS_RESTART_BACKOFF_S": "0.5",
    "SPECDEMO_SERVERS_HEALTH_TIMEOUT_S": "2",
}
# The restart delay of a first restart (0.5 s) + the stand-in's start (0.3 s sleep + python start),
# with room for a busy 2-core machine.
BACK_WITHIN_S = 15.0


class SupEnv(Env):
    def __init__(self, tmp: Path) -> None:
        super().__init__(tmp)
        self.env.update(FAST)

    def server(self, role: str) -> dict[str, Any]:
        return next(r for r in self.state()["servers"] if r["role"] == role)

    def supervisor_pid(self) -> int | None:
        try:
            sup = self.state().get("supervisor")
        except (OSError, ValueError):
            return None
        return sup["pid"] if sup else None

    def healthy(self, role: str) -> bool:
        port = self.ports[0] if role == "baseline" else self.ports[1]
        try:
            return httpx.get(f"http://127.0.0.1:{port}/health", timeout=1.0).status_code == 200
        except httpx.HTTPError:
            return False


def _alive(pid: int) -> bool:
    return procs.is_running(pid)


@pytest.fixture
def env(tmp_path: Path) -> Iterator[SupEnv]:
    e = SupEnv(tmp_path)
    yield e
    sup = e.supervisor_pid() if (e.run_dir / "state.json").exists() else None
    if sup and _alive(sup):
        os.kill(sup, signal.SIGKILL)
    for pid in e.leftovers():
        try:
            os.killpg(os.getpgid(pid), signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def _up(env: SupEnv, **extra: str) -> None:
    env.env.update(extra)  # also for `status` and `down` later
    up = env.run("up", "--detach")
    assert up.returncode == 0, up.stdout + up.stderr
    assert "supervisor   running (PID" in up.stdout and "detached" in up.stdout


def _down_leaves_nothing(env: SupEnv, sup_pid: int | None) -> None:
    down = env.run("down")
    assert down.returncode == 0, down.stdout + down.stderr
    assert env.wait_no_leftovers() == []
    assert sup_pid is None or not _alive(sup_pid)
    assert not any(procs.port_in_use("127.0.0.1", p) for p in env.ports), "a port is still taken"
    assert not (env.run_dir / "state.json").exists()


def test_sigkilled_server_is_back_and_healthy_within_the_restart_delay(env: SupEnv) -> None:
    _up(env)
    spec, base = env.server("speculative"), env.server("baseline")
    os.kill(spec["pid"], signal.SIGKILL)
    took = wait_for(lambda: env.server("speculative")["pid"] != spec["pid"] and env.healthy("speculative"),
                    BACK_WITHIN_S, "the speculative server back and healthy")
    print(f"\nSIGKILL -> healthy again: {took:.1f} s")
    again = env.server("speculative")
    assert again["restarts"] == 1 and again["last_cause"] == "killed by SIGKILL"
    assert env.server("baseline")["pid"] == base["pid"] and env.server("baseline")["restarts"] == 0, "untouched"
    log = (env.run_dir / "speculative.log").read_text()
    assert log.count("fake speculative: starting") == 2, "one log, appended"
    assert "restart 1 by the supervisor after: killed by SIGKILL" in log
    st = env.run("status")
    assert "restarts: 1; last cause: killed by SIGKILL at" in st.stdout
    _down_leaves_nothing(env, env.supervisor_pid())


def test_hung_server_is_restarted(env: SupEnv) -> None:
    _up(env)
    base, spec = env.server("baseline"), env.server("speculative")
    os.kill(base["pid"], signal.SIGSTOP)  # alive, port open, but never answers: a hang
    took = wait_for(lambda: env.server("baseline")["pid"] != base["pid"] and env.healthy("baseline"),
                    BACK_WITHIN_S + 2, "the hung baseline replaced by a healthy one")
    print(f"\nSIGSTOP -> healthy again: {took:.1f} s (health timeout 2 s)")
    assert env.server("baseline")["last_cause"] == "no /health answer for 2 s"
    assert not _alive(base["pid"]), "the hung process must be gone, not left stopped"
    assert env.server("speculative")["pid"] == spec["pid"] and env.server("speculative")["restarts"] == 0
    _down_leaves_nothing(env, env.supervisor_pid())


def test_server_crashing_at_every_start_stops_being_restarted_after_the_cap(env: SupEnv) -> None:
    # Every backoff 0.5 s: without the cap, a 4th restart would come within a second.
    _up(env, FAKE_SPECULATIVE="crash-on-restart", SPECDEMO_SERVERS_MAX_RESTARTS_PER_HOUR="3",
        SPECDEMO_SERVERS_RESTART_BACKOFF_MAX_S="0.5")
    first = env.server("speculative")
    os.kill(first["pid"], signal.SIGKILL)
    wait_for(lambda: "restart cap reached" in (env.server("speculative")["held"] or ""), 30, "the cap reached")
    rec = env.server("speculative")
    assert rec["restarts"] == 3 and rec["last_cause"] == "exit code 3"
    times = [datetime.fromisoformat(t) for t in rec["restart_times"]]
    gaps = [(b - a).total_seconds() for a, b in zip(times, times[1:], strict=False)]
    assert all(g >= 0.5 for g in gaps), f"restarts too close together: {gaps}"
    time.sleep(3.0)  # six backoffs long
    assert env.server("speculative")["restarts"] == 3, "restarted past the cap"
    st = env.run("status")
    assert "restarts: 3; last cause: exit code 3 at" in st.stdout
    assert "not restarting: restart cap reached (3 in the last hour); next try at" in st.stdout
    assert "speculative  " in st.stdout and "not answering" in st.stdout
    assert env.healthy("baseline") and env.server("baseline")["restarts"] == 0
    _down_leaves_nothing(env, env.supervisor_pid())


def test_down_stops_the_supervisor_first_and_leaves_nothing(env: SupEnv) -> None:
    _up(env, FAKE_SPECULATIVE="forks")
    sup = env.supervisor_pid()
    assert sup and _alive(sup)
    down = env.run("down")
    assert down.returncode == 0, down.stdout + down.stderr
    lines = down.stdout.splitlines()
    assert lines[1].strip().startswith(f"supervisor: PID {sup} stopped"), down.stdout
    assert env.wait_no_leftovers() == [], "servers (and the grandchild) gone"
    assert not _alive(sup)
    assert not any(procs.port_in_use("127.0.0.1", p) for p in env.ports)
    assert not (env.run_dir / "state.json").exists()


def test_supervisor_killed_leaves_servers_running_and_status_honest(env: SupEnv) -> None:
    _up(env)
    sup = env.supervisor_pid()
    assert sup is not None
    pids = {r["role"]: r["pid"] for r in env.state()["servers"]}
    os.kill(sup, signal.SIGKILL)
    wait_for(lambda: not _alive(sup), 5, "the supervisor gone")
    assert env.healthy("baseline") and env.healthy("speculative")
    st = env.run("status")
    assert st.returncode == 0, st.stdout
    assert f"supervisor   not running (PID {sup} gone)" in st.stdout
    rows = json.loads(env.run("status", "--json").stdout)
    assert all(r["pid"] == pids[r["role"]] and r["managed"] for r in rows)
    _down_leaves_nothing(env, None)


def test_foreground_up_restarts_a_killed_server_and_ctrl_c_stops_all(env: SupEnv) -> None:
    p = subprocess.Popen(
        [sys.executable, "-m", "servers", "up"], cwd=env.tmp, env=env.env,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, preexec_fn=interruptible,
    )
    try:
        wait_for(lambda: env.server("baseline")["time_to_healthy_s"] and env.server("speculative")["time_to_healthy_s"],
                 30, "both healthy")
        assert env.supervisor_pid() == p.pid and env.state()["supervisor"]["mode"] == "foreground"
        base = env.server("baseline")["pid"]
        os.kill(base, signal.SIGKILL)
        wait_for(lambda: env.server("baseline")["pid"] != base and env.healthy("baseline"), BACK_WITHIN_S, "restart")
        p.send_signal(signal.SIGINT)
        out, _ = p.communicate(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 0, out
    assert "baseline: killed by SIGKILL" in out and "baseline: restarted (restart 1)" in out
    assert env.wait_no_leftovers() == []
    assert not (env.run_dir / "state.json").exists()


def test_up_never_starts_a_second_pair_while_the_supervisor_runs(env: SupEnv) -> None:
    """Both servers down (restarts off) but the supervisor alive: its pair, not a stale one."""
    _up(env, SPECDEMO_SERVERS_MAX_RESTARTS_PER_HOUR="0")
    pids = [r["pid"] for r in env.state()["servers"]]
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    wait_for(lambda: all(r["held"] for r in env.state()["servers"]), 15, "both held")
    again = env.run("up", "--detach")
    assert again.returncode == 0 and "already running, nothing to start (supervisor PID" in again.stdout
    assert "not restarting: restarts are off (max_restarts_per_hour=0)" in again.stdout
    assert [r["pid"] for r in env.state()["servers"]] == pids
    _down_leaves_nothing(env, env.supervisor_pid())
