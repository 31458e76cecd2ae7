"""Waiting for a condition, for the product, the harness and the tests alike: one polling loop with a deadline.

A wait polls for the thing it waits for (a port answering, a file written, a process gone, a page
element shown) up to a generous deadline, and never sleeps a fixed time in its place: on a busy
machine the thing comes late, and a fixed sleep then fails, or wastes time on a quiet one.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

# A condition that raises one of these has not held yet: a state file between writes, a record
# being replaced, a port not answering.
NOT_YET = (OSError, ValueError, KeyError, StopIteration)


class WaitTimeout(AssertionError):
    """A condition did not hold within its deadline (an AssertionError: pytest reports it as a
    failed test, with what it waited for)."""


def _holds(cond: Callable[[], bool]) -> bool:
    """cond() now; one that raises one of NOT_YET has not held yet (any other error is raised)."""
    try:
        return bool(cond())
    except NOT_YET:
        return False


def held_within(cond: Callable[[], bool], timeout_s: float, poll_s: float = 0.1) -> bool:
    """True as soon as cond() holds, False if it still does not after timeout_s (checked once more
    at the deadline). A cond that raises one of NOT_YET has not held yet; any other error is raised."""
    deadline = time.monotonic() + timeout_s
    while not _holds(cond):
        if time.monotonic() >= deadline:
            return False
        time.sleep(min(poll_s, max(0.0, deadline - time.monotonic())))
    return True


def wait_for(cond: Callable[[], bool], timeout_s: float, what: str, poll_s: float = 0.1) -> float:
    """Seconds until cond() held; raises WaitTimeout naming ``what`` after timeout_s. A cond that
    raises OSError, ValueError, KeyError or StopIteration has not held yet."""
    t0 = time.monotonic()
    if not held_within(cond, timeout_s, poll_s):
        raise WaitTimeout(f"not within {timeout_s:g} s: {what}")
    return time.monotonic() - t0


async def held_within_async(cond: Callable[[], bool], timeout_s: float, poll_s: float = 0.05) -> bool:
    """held_within for a coroutine: polls without blocking the event loop (the streams it waits on
    run in that loop)."""
    deadline = time.monotonic() + timeout_s
    while not _holds(cond):
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(min(poll_s, max(0.0, deadline - time.monotonic())))
    return True


async def wait_for_async(cond: Callable[[], bool], timeout_s: float, what: str, poll_s: float = 0.05) -> float:
    """wait_for for a coroutine: seconds until cond() held; raises WaitTimeout naming ``what``."""
    t0 = time.monotonic()
    if not await held_within_async(cond, timeout_s, poll_s):
        raise WaitTimeout(f"not within {timeout_s:g} s: {what}")
    return time.monotonic() - t0
