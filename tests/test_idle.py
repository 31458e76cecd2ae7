"""harness/idle.py: a command in a session of its own at nice 19, its autogroup at 19 too."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from demo.settings import ROOT

PROBE = ("import os, pathlib; p = pathlib.Path('/proc/self/autogroup'); "
         "print(os.getsid(0) == os.getpid(), os.getpriority(os.PRIO_PROCESS, 0), "
         "p.read_text().split()[-1] if p.exists() else 'none')")


def test_the_command_runs_in_its_own_session_at_nice_19_with_its_autogroup() -> None:
    done = subprocess.run([sys.executable, "-m", "harness.idle", sys.executable, "-c", PROBE], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    own_session, nice, group_nice = done.stdout.split()
    assert own_session == "True" and nice == "19"
    assert group_nice == ("19" if Path("/proc/self/autogroup").exists() else "none")


def test_its_exit_status_is_the_commands_and_no_command_is_exit_2() -> None:
    done = subprocess.run([sys.executable, "-m", "harness.idle", sys.executable, "-c", "raise SystemExit(3)"],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 3
    done = subprocess.run([sys.executable, "-m", "harness.idle"], cwd=ROOT, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 2 and "usage" in done.stderr
