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
from collections.abc import Callable

import httpx

from demo.client import StreamError, discover_model, stream_completion
from demo.measure import SideMeter
from demo.results import RaceRequest, ServerWait, Side
from demo.settings import Endpoint, Settings


class ServerHandle:
    """One server as a measurement talks to it: its side, URL, HTTP client (its key and headers),
    served model (discovered once, when not given) and, for an arm, its name, label and method."""

    def __init__(self, side: Side, url: str, model: str | None, http: httpx.AsyncClient, *, arm: str | None = None,
                 label: str | None = None, method: str | None = None) -> None:
        self.side, self.url, self.model, self.http = side, url, model, http
        self.arm, self.label, self.method = arm, label, method

    @classmethod
    def of(cls, endpoint: Endpoint, http: httpx.AsyncClient, url: str | None = None) -> ServerHandle:
        """The handle of a settings endpoint (its side, model, arm, label and method) on client ``http``;
        ``url`` replaces the endpoint's URL when given."""
        return cls(endpoint.side, url or endpoint.url, endpoint.model, http, arm=endpoint.arm, label=endpoint.label,
                   method=endpoint.method)

    async def ensure_model(self, http: httpx.AsyncClient, settings: Settings) -> str:
        """The served model's id: the one given, else asked of GET /v1/models once (through ``http``).

        Raises StreamError when the server cannot be asked or serves no model.
        """
        if self.model is None:
            self.model = (await discover_model(http, self.url, settings.probe_timeout_s + 2)).id
        return self.model


async def stream_into(meter: SideMeter, http: httpx.AsyncClient, url: str, model: str, req: RaceRequest, *,
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
