"""The soak test of booth mode (benchmarks/soak/), shortened: two minutes on stand-ins under the
real supervisor, one SIGKILL of the speculative server, the page in real headless Chromium; and
Ctrl-C in the middle leaves nothing running. The 30-minute run on the real CPU pair is
`python -m benchmarks.soak --minutes 30`."""

from __future__ import annotations

import contextlib
import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from common.paths import ROOT
from common.waiting import held_within
from harness.chromium import CHROMIUM
from servers import procs
from tests.signals import interruptible

pytestmark = pytest.mark.browser



@pytest.fixture(autouse=True)
def chromium_present() -> None:
    if not CHROMIUM.exists():
        pytest.skip("the soak opens the page in Debian's Chromium at /usr/bin/chromium: apt-get install -y chromium")


def soak(out: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "benchmarks.soak", "--servers", "standin", "--out", str(out),
                             *args], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            preexec_fn=interruptible)


def state_pids(out: Path) -> list[int]:
    """The supervisor's and the servers' PIDs from the launcher's state file of this soak."""
    state = json.loads((out / "servers" / "state.json").read_text())
    return [state["supervisor"]["pid"], *(s["pid"] for s in state["servers"])]


def kill_leftovers(p: subprocess.Popen[str], out: Path) -> None:
    """When a test fails half-way: the soak (SIGKILL, it cleans nothing) and what it started."""
    if p.poll() is None:
        p.kill()
        p.wait(10)
    try:
        supervisor, *servers = state_pids(out)
    except (OSError, ValueError, KeyError):
        return  # no state file: the soak tore the pair down, or never started it
    with contextlib.suppress(ProcessLookupError):
        os.kill(supervisor, signal.SIGKILL)  # first: it would restart the servers
    for pid in servers:  # each server leads its own process group
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)


def gone(pids: list[int], timeout_s: float = 10.0) -> list[int]:
    """The pids still running once they are all gone or timeout_s has passed."""
    held_within(lambda: not any(procs.is_running(p) for p in pids), timeout_s)
    return [p for p in pids if procs.is_running(p)]


def test_two_minutes_of_booth_mode_with_a_speculative_kill(tmp_path: Path) -> None:
    out = tmp_path / "soak"
    p = soak(out, "--minutes", "2", "--kills", "speculative", "--seed", "1")
    try:
        printed, _ = p.communicate(timeout=420)
    finally:
        kill_leftovers(p, out)
    print(printed[-4000:])
    assert (out / "summary.json").exists(), printed[-3000:]
    s = json.loads((out / "summary.json").read_text())
    kill = s["kills"][0]
    assert kill["role"] == "speculative" and kill["killed_at_s"] is not None, printed[-3000:]
    # Killed while it streamed a live race's answer, at least half of it still to come (the soak
    # reads that from the server's /metrics, so the kill lands before the last token however late
    # the page shows it): that race was cut and failed (mid_race is the race on at the kill ending
    # in an error, not where the kill was aimed), was saved (no lost run), and the booth cut to a
    # recording.
    assert kill["tokens_done"] is not None and kill["tokens_done"] >= 1, kill
    assert kill["max_tokens"] - kill["tokens_done"] >= kill["max_tokens"] / 2, kill
    assert kill["mid_race"] and s["outcomes"].get("live error") == 1, s["outcomes"]
    assert kill["kill_to_healthy_s"] is not None and kill["healed"], kill
    assert kill["recordings_while_down"] >= 1, "no recording was shown while the server was down"
    assert kill["live_races_after"] >= 1 and kill["kill_to_live_s"] > kill["kill_to_healthy_s"]
    assert s["restarts"] == {"baseline": 0, "speculative": 1}
    assert s["lost_runs"] == []
    assert s["failed_outside_outage"] == []
    assert s["error_markers_outside_outage"] == [] and s["error_markers_during_outage"] == []
    assert s["console_errors"] == []
    assert s["live"] >= 3 and s["recording"] >= 1
    assert s["passed"], s["checks"]
    assert p.returncode == 0
    assert printed.rstrip().splitlines()[-2] == "PASS"
    # The files the summary came from.
    races = [json.loads(line) for line in (out / "races.jsonl").read_text().splitlines()]
    assert len(races) == s["races"] and all(r["saved_found"] for r in races if r["source"] == "live")
    assert len((out / "samples.jsonl").read_text().splitlines()) >= 3, "one a minute, and at the end"
    # Torn down: the supervisor and both servers gone, the state file removed.
    assert not (out / "servers" / "state.json").exists()


def test_ctrl_c_stops_everything_the_soak_started(tmp_path: Path) -> None:
    out = tmp_path / "soak"
    p = soak(out, "--minutes", "5", "--kills", "")
    lines: queue.Queue[str] = queue.Queue()
    assert p.stdout is not None
    stdout = p.stdout

    def read() -> None:
        for line in stdout:
            lines.put(line)

    threading.Thread(target=read, daemon=True).start()
    printed, app_port = [], None
    try:
        deadline = time.monotonic() + 150
        while app_port is None and time.monotonic() < deadline:
            try:
                printed.append(lines.get(timeout=1))
            except queue.Empty:
                continue
            m = re.search(r"app \(booth mode\) on http://127\.0\.0\.1:(\d+)/", printed[-1])
            app_port = int(m.group(1)) if m else None
        assert app_port is not None, "".join(printed)
        pids = state_pids(out)
        assert gone(pids, 0) == pids, "the supervisor and both servers are running"
        p.send_signal(signal.SIGINT)
        p.wait(timeout=120)
    finally:
        kill_leftovers(p, out)
    time.sleep(0.5)  # the reader thread drains the pipe
    while not lines.empty():
        printed.append(lines.get())
    text = "".join(printed)
    assert p.returncode == 130, text
    assert "interrupted: stopped what the soak started" in text
    assert gone(pids) == [], "the supervisor or a server is still running"
    assert not (out / "servers" / "state.json").exists()
    assert not procs.port_in_use("127.0.0.1", app_port), "the app still listens"
