"""One budget of streams for every viewer of the page together, so a shared page cannot flood the servers.

A user costs one stream on each server it is racing at that moment: N users in a simultaneous
race of the baseline and one arm hold 2N streams; in sequential order (one server at a time) N.
The Race tab's races and load sweeps and the Evaluate tab's sweeps all take their streams here
(``SPECDEMO_MAX_STREAMS``; by default enough for one viewer at the most users). A viewer over the
budget waits, first come first served, with a message saying how many streams are in use; a
request larger than the whole budget is refused at once with a one-line reason.

    ticket = budget.ask(streams)          # ValueError when it can never fit
    try:
        while not await ticket.wait(1.0):  # not granted yet: say so, then wait again
            show(waiting_text(ticket))
        ...                                # stream
    finally:
        ticket.release()                   # granted or not: nothing is left held
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from demo.results import Order
from demo.sweep.models import SweepSpec


def streams_needed(users: int, servers: int, order: Order) -> int:
    """Streams a run holds at its peak: every server at once (simultaneous) or one at a time (sequential)."""
    return users * (servers if order == "simultaneous" else 1)


def sweep_streams(spec: SweepSpec) -> int:
    """Streams an evaluator sweep holds at its peak: its largest concurrency on the pair, in its order."""
    return streams_needed(max(spec.concurrency), 2, spec.order)


class Ticket:
    """One viewer's claim on ``streams`` streams: granted in arrival order, released once."""

    def __init__(self, budget: StreamBudget, streams: int) -> None:
        self.budget = budget
        self.streams = streams
        self._granted = asyncio.Event()
        self._released = False

    @property
    def granted(self) -> bool:
        """True once the budget has granted this ticket its streams."""
        return self._granted.is_set()

    async def wait(self, timeout_s: float | None = None) -> bool:
        """True once granted; False when ``timeout_s`` passes first (the ticket keeps its place)."""
        if self._granted.is_set():
            return True
        try:
            await asyncio.wait_for(self._granted.wait(), timeout_s)
        except TimeoutError:
            return False
        return True

    def release(self) -> None:
        """Give the streams back (or leave the queue); a second call does nothing."""
        if self._released:
            return
        self._released = True
        self.budget._release(self)


class StreamBudget:
    """A counting budget of streams with a first-come-first-served queue (one event loop)."""

    def __init__(self, total: int) -> None:
        if total < 1:
            raise ValueError(f"the stream budget must be at least 1, got {total}")
        self.total = total
        self.in_use = 0
        self._queue: deque[Ticket] = deque()

    @property
    def waiting(self) -> int:
        """Tickets queued, not yet granted."""
        return len(self._queue)

    def ask(self, streams: int) -> Ticket:
        """A ticket for ``streams`` streams, granted now if the budget allows and nobody waits ahead."""
        if streams < 1:
            raise ValueError(f"a run needs at least 1 stream, got {streams}")
        if streams > self.total:
            raise ValueError(f"this needs {streams} streams at once, over the page's budget of {self.total} "
                             "(SPECDEMO_MAX_STREAMS): ask for fewer users")
        ticket = Ticket(self, streams)
        self._queue.append(ticket)
        self._grant()
        return ticket

    def ahead_of(self, ticket: Ticket) -> int:
        """Tickets queued before this one (0 when it is next, or granted)."""
        for i, t in enumerate(self._queue):
            if t is ticket:
                return i
        return 0

    @asynccontextmanager
    async def hold(self, streams: int) -> AsyncIterator[Ticket]:
        """``async with budget.hold(n):`` waits its turn, holds n streams, gives them back."""
        ticket = self.ask(streams)
        try:
            await ticket.wait()
            yield ticket
        finally:
            ticket.release()

    def _grant(self) -> None:
        while self._queue and self.in_use + self._queue[0].streams <= self.total:
            ticket = self._queue.popleft()
            self.in_use += ticket.streams
            ticket._granted.set()

    def _release(self, ticket: Ticket) -> None:
        if ticket.granted:
            self.in_use -= ticket.streams
        else:
            self._queue.remove(ticket)
        self._grant()


def waiting_text(ticket: Ticket) -> str:
    """The waiting viewer's one line: what it waits for and why."""
    b = ticket.budget
    ahead = b.ahead_of(ticket)
    queue = f"; {ahead} ahead of you" if ahead else ""
    return (f"waiting for {ticket.streams} streams: {b.in_use} of the page's {b.total} are in use by "
            f"other viewers{queue}")
