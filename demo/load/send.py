"""A part of a step's requests, sent by one process: a rate step's schedule (``send_schedule``: each
request at its offset from one start, open loop) or a batch's requests through its streams
(``stream_part``, closed loop).

Run here for the whole step (demo/load/rate.py ``run_rate_side``, demo/sweep/runner.py ``run_batch``),
or by each worker of a fleet for its part (demo/load/fleet.py): the results come back by the
step's own request index.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence

from demo.client import ServerClient
from demo.load.rate_models import MAX_OPEN_STREAMS
from demo.measure import SideMeter
from demo.results import RaceRequest, SideResult
from demo.streaming import SendOutcome, ServerHandle
from demo.sweep.runner import metered_request, stream_all


async def send_schedule(http: ServerClient, server: ServerHandle, model: str, reqs: Sequence[RaceRequest],
                        part: Sequence[tuple[int, float]], t0: float, bound_s: float,
                        on_ended: Callable[[], None] | None = None) -> SendOutcome:
    """Send each (index, offset) of ``part`` at ``t0`` + offset (perf_counter), open-loop: request
    ``reqs[index % len(reqs)]``, whatever the others do; wait for them all or ``t0`` + ``bound_s``,
    and cut what is still open then. A request due while MAX_OPEN_STREAMS are open is not sent (it
    fails, said so). A cancel from outside leaves no stream open. ``on_ended`` is called when the
    wait ends, before the figures are taken."""
    tasks: dict[int, asyncio.Task[SideMeter]] = {}
    out = SendOutcome(results={}, lags_s={}, open_at_end=0, end_s=0.0)
    open_now: set[asyncio.Task[SideMeter]] = set()
    try:
        for i, offset in part:
            wait = t0 + offset - time.perf_counter()
            if wait > 0:
                await asyncio.sleep(wait)
            out.lags_s[i] = max(0.0, time.perf_counter() - t0 - offset)
            if len(open_now) >= MAX_OPEN_STREAMS:
                out.results[i] = SideResult(side=server.side, url=server.url, error=(
                    f"not sent: {MAX_OPEN_STREAMS} streams already open (the client's cap)"))
                continue
            task = asyncio.create_task(metered_request(http, server, model, reqs[i % len(reqs)], i))
            open_now.add(task)
            task.add_done_callback(open_now.discard)
            tasks[i] = task
        out.open_at_end = len(open_now)
        if tasks:
            await asyncio.wait(tasks.values(), timeout=max(0.0, t0 + bound_s - time.perf_counter()))
        out.end_s = time.perf_counter() - t0
        if on_ended is not None:
            on_ended()
    finally:
        for task in tasks.values():  # cut at the bound, or cancelled from outside (Ctrl-C)
            task.cancel()
        await asyncio.gather(*tasks.values(), return_exceptions=True)
    for i, done in tasks.items():
        if done.cancelled():
            out.results[i] = None
        elif (exc := done.exception()) is not None:
            out.results[i] = SideResult(side=server.side, url=server.url, error=f"{type(exc).__name__}: {exc}")
        else:
            out.results[i] = done.result().result()  # the figures once every stream has ended
    return out


async def stream_part(http: ServerClient, server: ServerHandle, model: str, reqs: Sequence[RaceRequest],
                      indices: Sequence[int], concurrency: int,
                      on_ended: Callable[[], None] | None = None) -> dict[int, SideResult]:
    """The requests ``indices`` of ``reqs`` through ``concurrency`` streams (stream_all), by index;
    ``on_ended`` as the last stream ends."""
    results = await stream_all(http, server, model, [reqs[i] for i in indices], concurrency, on_ended=on_ended)
    return dict(zip(indices, results, strict=True))
