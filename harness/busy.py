"""One core kept busy, as on a shared runner: the background load of ``scripts/test.sh --busy``.

One busy loop (``while True: pass``, the neighbour a busy CI machine has) in a session of its
own, at the priority of whoever starts it (nice 0 as CI runs; under Linux's autogroups a session is
scheduled as one group, so the loop competes like another user's job). It is bounded twice: whoever
starts it stops it (test.sh's EXIT trap), and it ends by itself after ``max_s`` if that stop never
comes (a SIGKILLed script). Standard library only: test.sh starts it before the venv exists.

    python3 -m harness.busy start [--max-s S]   # prints the loop's PID
    python3 -m harness.busy stop PID            # kills its session, waits until it is gone, says its CPU
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from common.procstat import alive, cpu_seconds
from common.waiting import held_within

DEFAULT_MAX_S = 2.5 * 3600  # past CI's 90-minute budget, well short of a forgotten day
# The loop checks its deadline every 2**20 iterations: still a busy loop, with a clock read that costs nothing.
LOOP = """import time
end = time.monotonic() + {max_s!r}
while time.monotonic() < end:
    for _ in range(1 << 20):
        pass
"""
STOP_WAIT_S = 10.0


def start(max_s: float = DEFAULT_MAX_S) -> int:
    """Start the loop in a new session (its own process group); its PID, which is also its session's id."""
    proc = subprocess.Popen([sys.executable, "-c", LOOP.format(max_s=float(max_s))], start_new_session=True,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return proc.pid


def running(pid: int) -> bool:
    """True while the process exists and is not a zombie (reaping one we started, if it is ours)."""
    with contextlib.suppress(ChildProcessError):
        if os.waitpid(pid, os.WNOHANG)[0] == pid:
            return False
    return alive(pid)


def is_loop(pid: int) -> bool:
    """True if PID is a busy loop that start() started (its command line), so stop() kills nothing else."""
    try:
        return b"while time.monotonic() < end" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def stop(pid: int) -> float | None:
    """Kill the loop's whole session (its process group) and wait until it is gone; its CPU seconds,
    or None if PID is no loop of ours (gone already: nothing is killed). Raises RuntimeError if it is
    still there after STOP_WAIT_S."""
    if not is_loop(pid):
        running(pid)  # reaps it if it is our child that ended by itself
        return None
    used = cpu_seconds(pid)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
    if not held_within(lambda: not running(pid), STOP_WAIT_S, poll_s=0.05):
        raise RuntimeError(f"the busy loop (PID {pid}) is still running {STOP_WAIT_S:g} s after SIGKILL")
    return used


@contextlib.contextmanager
def busy_core(max_s: float = DEFAULT_MAX_S) -> Iterator[int]:
    """The loop for the length of a with block: its PID inside, stopped on the way out."""
    pid = start(max_s)
    try:
        yield pid
    finally:
        stop(pid)


def main(argv: list[str] | None = None) -> int:
    """``start [--max-s S]`` prints the PID; ``stop PID`` stops it and prints its CPU time."""
    ap = argparse.ArgumentParser(prog="python3 -m harness.busy", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    st = sub.add_parser("start", help="start the loop; prints its PID")
    st.add_argument("--max-s", type=float, default=DEFAULT_MAX_S, help="it ends by itself after this long")
    sp = sub.add_parser("stop", help="stop the loop started as PID and wait until it is gone")
    sp.add_argument("pid", type=int)
    args = ap.parse_args(argv)
    if args.cmd == "start":
        if not args.max_s > 0:
            ap.error("--max-s must be above 0")
        print(start(args.max_s), flush=True)
        return 0
    t0 = time.monotonic()
    used = stop(args.pid)
    took = time.monotonic() - t0
    print(f"[busy] the busy loop (PID {args.pid}) stopped in {took:.2f} s; it had used "
          f"{'n/a (already gone)' if used is None else f'{used:.0f} CPU-s'}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
