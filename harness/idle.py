"""Run a command at the lowest priority, in a session of its own: it takes only CPU that nothing
else wants. scripts/test.sh runs the page modules of BESIDE_ALONE (tests/conftest.py) this way
beside the rate checks of its alone stage.

Under Linux's autogroups every session is scheduled as one group against the others, and a nice
value weighs only inside its own group: ``nice -n 19`` alone would still take a full share beside
the checks. So the command gets a new session, nice 19, and its session's autogroup nice 19 too
(``servers.procs.keep_nice_in_session``; the servers it starts carry it over the same way). A
waking task of a nice-0 group then runs before it: the checks keep the core they had alone.

    python -m harness.idle CMD [ARGS...]   # exec's CMD; its exit status is CMD's
"""

from __future__ import annotations

import os
import sys

from servers.procs import keep_nice_in_session

NICE = 19


def become_idle() -> None:
    """This process in a new session at nice 19, its autogroup too (where the kernel has autogroups).
    Its PID becomes its session's and process group's id: ``kill -- -PID`` stops all it started.
    Raises PermissionError in a process group's leader (a job of a shell with job control)."""
    os.setsid()
    os.nice(NICE - os.getpriority(os.PRIO_PROCESS, 0))
    keep_nice_in_session()


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: python -m harness.idle CMD [ARGS...]", file=sys.stderr)
        return 2
    become_idle()
    os.execvp(argv[0], argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
