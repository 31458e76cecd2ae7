"""What the race and the sweep share to measure one server: a handle that finds its served model
once, and one streamed request fed into a SideMeter.

The race (demo.race) streams a side per server and redraws on each event; the sweep and the load
steps (demo.sweep.runner) stream many requests per server and tell an observer. Both stream
through :func:`stream_into`, so a failure, a stop and the last look at the meter are handled
alike: a StreamError marks the meter failed, a cancel marks it stopped and goes on up, and
``on_event`` is called after every event and once more however the stream ends.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from demo.client import ServerClient, StreamError, discover_model, stream_completion
from demo.measure import SideMeter
from demo.results import RaceRequest, ServerWait, Side, SideResult
from demo.settings import Endpoint, Settings
from demo.sweep.headroom import ClientHeadroom


@dataclass
class SendOutcome:
    """What a send loop did with its part of a schedule, by the schedule's own request index."""

    results: dict[int, SideResult | None]  # None: still open at the bound, cut
    lags_s: dict[int, float]  # how late each request was sent against its offset
    open_at_end: int  # streams still open when the last request of the part was sent
    end_s: float  # from t0 to when the loop stopped waiting (every request ended, or the bound)
    client: ClientHeadroom | None = None  # the sender's headroom (merged: the worst worker's)


@dataclass
class BatchOutcome:
    """A batch's requests as its workers sent them: each result by the batch's request index, the
    batch's wall time (one start to the last worker's end) and the client's headroom (the worst worker's)."""

    results: dict[int, SideResult]
    wall_s: float
    client: ClientHeadroom | None = None


class Fleet(Protocol):
    """Workers elsewhere that send a server's requests from one start (demo/load/fleet.py: Ray actors,
    ``--ray``): a rate step's schedule split between them, or a batch's requests and streams."""

    workers: int

    async def send_schedule(self, server: ServerHandle, model: str, reqs: Sequence[RaceRequest],
                            offsets_s: Sequence[float], bound_s: float, settings: Settings) -> SendOutcome:
        """Every request of the schedule at its offset, by the workers between them; merged."""
        ...

    async def stream_batch(self, server: ServerHandle, model: str, reqs: Sequence[RaceRequest], concurrency: int,
                           settings: Settings) -> BatchOutcome:
        """Every request through ``concurrency`` streams, shared among the workers; merged."""
        ...


class ServerHandle:
    """One server as a measurement talks to it: its side, URL, HTTP client (its key and headers),
    served model (discovered once, when not given), for an arm its name, label and method, and the
    fleet that sends its requests when not this process (``--ray``)."""

    def __init__(self, side: Side, url: str, model: str | None, http: ServerClient, *, arm: str | None = None,
                 label: str | None = None, method: str | None = None, step_cost: float | None = None,
                 fleet: Fleet | None = None) -> None:
        self.side, self.url, self.model, self.http = side, url, model, http
        self.arm, self.label, self.method = arm, label, method
        self.step_cost = step_cost  # an arm's timed verification step cost (Endpoint.step_cost)
        self.fleet = fleet  # None: this process sends the requests (the default)

    @classmethod
    def of(cls, endpoint: Endpoint, http: ServerClient, url: str | None = None) -> ServerHandle:
        """The handle of a settings endpoint (its side, model, arm, label and method) on client ``http``;
        ``url`` replaces the endpoint's URL when given."""
        return cls(endpoint.side, url or endpoint.url, endpoint.model, http, arm=endpoint.arm, label=endpoint.label,
                   method=endpoint.method, step_cost=endpoint.step_cost)

    async def ensure_model(self, http: ServerClient, settings: Settings) -> str:
        """The served model's id: the one given, else asked of GET /v1/models once (through ``http``).

        Raises StreamError when the server cannot be asked or serves no model.
        """
        if self.model is None:
            self.model = (await discover_model(http, self.url, settings.probe_timeout_s + 2)).id
        return self.model


async def stream_into(meter: SideMeter, http: ServerClient, url: str, model: str, req: RaceRequest, *,
                      t0: float, on_event: Callable[[], None] | None = None) -> None:
    """Stream ``req`` from the server at ``url`` into ``meter``, its times counted from ``t0``.

    Never raises a StreamError: it fails the meter with its one-line message. A cancel marks the
    meter stopped and is raised on. ``on_event`` is called after each event the meter takes and
    once more when the stream ends, whichever way; also when a quiet stream waits on a server that
    says it is working (the meter's ``server_wait``, shown by the page), and when data comes again.
    """
    def waiting(wait: ServerWait | None) -> None:
        meter.server_wait = wait
        if on_event is not None:
            on_event()

    try:
        async for ev in stream_completion(http, url, model, req, t0=t0, on_wait=waiting):
            meter.feed(ev)
            if on_event is not None:
                on_event()
    except StreamError as e:
        meter.server_wait = None
        meter.fail(str(e))
    except asyncio.CancelledError:
        meter.cancel()
        raise
    finally:
        if on_event is not None:
            on_event()
