"""Waiting for a condition in a test: one loop, with a deadline, that fails the test with what it
waited for."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest


def wait_for(cond: Callable[[], bool], timeout_s: float, what: str, poll_s: float = 0.1) -> float:
    """Seconds until cond() held; fails the test after timeout_s. A condition that raises OSError,
    ValueError, KeyError or StopIteration (a state file between writes, a record being replaced)
    has not held yet."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        try:
            if cond():
                return time.monotonic() - t0
        except (OSError, ValueError, KeyError, StopIteration):
            pass
        time.sleep(poll_s)
    pytest.fail(f"not within {timeout_s} s: {what}")
