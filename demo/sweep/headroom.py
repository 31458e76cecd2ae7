"""The client's own headroom during a batch: is a figure the server's, or the client's limit?

While a batch streams, a ticker on the client's event loop sleeps ``TICK_S`` and records how
late it wakes (event-loop lag: every stream's chunks wait that long to be read and timed), and
the process's CPU time over the batch's wall time gives its CPU share (1.0 = one core, all an
asyncio client can use). A batch whose lag p95 or CPU share passes the limits is marked
``limited``: its speeds may be the client's ceiling, not the server's. The ticker costs the
client ~100 wake-ups a second and the servers nothing.
"""

from __future__ import annotations

import asyncio
import time
from types import TracebackType

from pydantic import BaseModel

from demo.measure import percentile

TICK_S = 0.01
LAG_LIMIT_MS = 20.0  # p95 event-loop lag above this smears arrival times by more than a chunk's gap
CPU_LIMIT = 0.9  # of one core


class ClientHeadroom(BaseModel):
    """Whether the client itself could keep up during a batch (event-loop lag in ms, CPU share of one core).

    ``limited`` is True when either passes its limit, with ``note`` saying which; None figures were not measured."""

    loop_lag_p95_ms: float | None = None  # how late the client's event loop woke, p95 over the batch
    loop_lag_max_ms: float | None = None
    cpu_share: float | None = None  # the client process's CPU time / the batch's wall time (1.0 = one core)
    limited: bool = False  # lag or CPU past the limits: the figures may be the client's limit
    note: str | None = None  # why it is limited


class HeadroomProbe:
    """``async with HeadroomProbe() as probe: ...``, then ``probe.result()``."""

    def __init__(self) -> None:
        self.lags_s: list[float] = []
        self._task: asyncio.Task[None] | None = None
        self._cpu0 = self._wall0 = 0.0
        self._cpu_s = self._wall_s = 0.0
        self.stopped_at: float | None = None  # perf_counter when the reading ended (stop or the block's end)

    async def _tick(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            due = loop.time() + TICK_S
            await asyncio.sleep(TICK_S)
            self.lags_s.append(max(0.0, loop.time() - due))

    async def __aenter__(self) -> HeadroomProbe:
        self._cpu0, self._wall0 = time.process_time(), time.perf_counter()
        self._task = asyncio.create_task(self._tick())
        return self

    def stop(self) -> None:
        """End the reading now (the streams have ended; what follows, their figures, is not streaming).
        Leaving the ``async with`` stops it too, if not stopped before."""
        if self._task is None or self._task.done():
            return
        self.stopped_at = time.perf_counter()
        self._cpu_s, self._wall_s = time.process_time() - self._cpu0, self.stopped_at - self._wall0
        self._task.cancel()

    async def __aexit__(self, et: type[BaseException] | None, e: BaseException | None,
                        tb: TracebackType | None) -> None:
        self.stop()
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)

    def result(self) -> ClientHeadroom:
        """The batch's client headroom: lag p95 and max in ms, CPU share, and whether either passed its limit."""
        out = ClientHeadroom()
        if self.lags_s:
            out.loop_lag_p95_ms = (percentile(self.lags_s, 95) or 0.0) * 1000
            out.loop_lag_max_ms = max(self.lags_s) * 1000
        if self._wall_s > 0:
            out.cpu_share = self._cpu_s / self._wall_s
        why = []
        if out.loop_lag_p95_ms is not None and out.loop_lag_p95_ms > LAG_LIMIT_MS:
            why.append(f"the client's event loop ran {out.loop_lag_p95_ms:.0f} ms late (p95; limit {LAG_LIMIT_MS:g})")
        if out.cpu_share is not None and out.cpu_share > CPU_LIMIT:
            why.append(f"the client used {out.cpu_share:.0%} of a core (limit {CPU_LIMIT:.0%})")
        if why:
            out.limited = True
            out.note = "; ".join(why) + ": these figures may be the client's limit, not the server's"
        return out
