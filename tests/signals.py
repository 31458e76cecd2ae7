"""For tests that press Ctrl-C on a child process."""

from __future__ import annotations

import signal


def interruptible() -> None:
    """A ``preexec_fn``: the child starts with Ctrl-C (SIGINT) at its default. A shell that runs a
    command in the background (``cmd &``, nohup) starts it with SIGINT ignored, children inherit
    that, and Python then never raises KeyboardInterrupt: the test would fail for how it was
    started, not for what it tests."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
