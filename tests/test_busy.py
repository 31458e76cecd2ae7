"""`scripts/test.sh --busy`'s background load (harness/busy.py): one busy loop in a session of its
own that really takes a core, stopped with nothing left behind (by the helper, and by an EXIT trap
as test.sh stops it), and gone by itself after its time bound; and the idle cores test.sh reads
before its timing stage (harness/idle.py)."""

from __future__ import annotations

import os
import subprocess
import sys

from common.paths import ROOT
from common.procstat import cpu_seconds
from common.waiting import held_within, wait_for
from harness import busy, idle


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    """python -m harness.busy as test.sh runs it (its own process: the loop outlives it)."""
    return subprocess.run([sys.executable, "-m", "harness.busy", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)


def test_the_loop_runs_in_its_own_session_at_our_priority_and_stops_with_nothing_left() -> None:
    started = cli("start", "--max-s", "120")
    assert started.returncode == 0, started.stderr
    pid = int(started.stdout.strip())
    try:
        assert busy.running(pid) and busy.is_loop(pid)
        assert os.getsid(pid) == pid and os.getpgid(pid) == pid  # a session and a group of its own
        assert os.getsid(pid) != os.getsid(0)
        assert os.getpriority(os.PRIO_PROCESS, pid) == os.getpriority(os.PRIO_PROCESS, 0)  # nice as ours
        # It computes: CPU time grows while it runs (polled, a busy machine gives it less than a core;
        # briefly, as the other xdist worker may be running a rate check).
        wait_for(lambda: (cpu_seconds(pid) or 0) >= 0.1, 30, "the loop using 0.1 CPU-s")
    finally:
        stopped = cli("stop", str(pid))
    assert stopped.returncode == 0, stopped.stderr
    assert stopped.stdout.startswith(f"[busy] the busy loop (PID {pid}) stopped in"), stopped.stdout
    assert "CPU-s" in stopped.stdout
    assert held_within(lambda: not busy.running(pid), 10), "the loop is still there after stop"
    # Stopping it again (a trap that runs twice) kills nothing and says so.
    again = cli("stop", str(pid))
    assert again.returncode == 0 and "n/a (already gone)" in again.stdout, again.stdout


def test_an_exit_trap_stops_the_loop_however_the_script_ends() -> None:
    # test.sh's pattern: start, then `trap ... EXIT`; here the script fails half-way (set -e).
    script = ('set -euo pipefail; pid=$(python3 -m harness.busy start --max-s 120); '
              'trap \'python3 -m harness.busy stop "$pid"\' EXIT; echo "$pid"; false; echo never')
    run = subprocess.run(["bash", "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert run.returncode == 1 and "never" not in run.stdout, run.stdout + run.stderr
    pid = int(run.stdout.splitlines()[0])
    assert "stopped in" in run.stdout, run.stdout
    assert held_within(lambda: not busy.running(pid), 10), "the loop outlived the script"


def test_the_loop_ends_by_itself_after_its_time_bound() -> None:
    with busy.busy_core(max_s=0.5) as pid:
        assert busy.running(pid)
        wait_for(lambda: not busy.running(pid), 30, "the loop ending by itself after 0.5 s")
    assert not busy.is_loop(pid)


def test_the_script_says_how_to_use_it_for_a_bad_flag() -> None:
    run = subprocess.run(["bash", str(ROOT / "scripts" / "test.sh"), "--noisy"], capture_output=True, text=True,
                         timeout=30)
    assert run.returncode == 2 and run.stderr.strip() == "usage: bash scripts/test.sh [--fast] [--busy]"


def test_idle_cores_are_the_idle_share_of_the_machine() -> None:
    # /proc/stat's jiffies of all CPUs: of 400 ticks on 2 cores, 100 idle is half a core idle.
    assert idle.idle_between((1_000, 5_000), (1_100, 5_400), cores=2) == 0.5
    assert idle.idle_between((0, 0), (0, 0), cores=2) == 0.0  # no tick between the readings
    # Beside one busy loop on this machine, at most all but that core stands idle.
    with busy.busy_core(max_s=30):
        assert idle.idle_cores(1.0) <= (os.cpu_count() or 1) - 0.5
