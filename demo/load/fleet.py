"""A fleet of senders on a Ray cluster (``--ray ADDRESS``): when one machine's client cannot drive the load.

Ray is the distributed engine vLLM itself runs on. ``RayFleet`` places one actor per worker across
the cluster's nodes (a STRICT_SPREAD placement group while there are as many nodes as workers, so
no two share a machine), each with its own event loop and HTTP client. A step is split between
them and sent from one start:

- a rate step (``send_schedule``): request i of the schedule goes to worker i mod k, which sends it
  at its own offset from the start, so the one schedule holds whatever the split;
- a batch (``stream_batch``): request i to worker i mod k, the streams shared out as evenly as they go.

The driver picks the start as a wall-clock instant ``START_LEAD_S`` ahead (time.time(), which a
cluster's nodes keep in step by NTP), so every worker holds its part before it; each worker turns it
into its own perf_counter. Every request comes back by its index into the same records the local
path makes (demo/load/send.py), so the figures, results.json and the report are the same code's.
Each worker measures its own client headroom (event-loop lag, CPU); the merged batch carries the
worst worker's, and a rate step the largest send lag of any.

Nothing here imports Ray until a fleet is made: without ``--ray`` the default install has no Ray
(requirements-ray.txt adds it). Sessions (turns carried on) and a live observer stay in this process.
"""

from __future__ import annotations

import asyncio
import functools
import os
import socket
import time
from collections.abc import Sequence
from typing import Any

from common.paths import ROOT
from demo.client import collector_paused, make_http_client
from demo.load.send import send_schedule, stream_part
from demo.results import RaceRequest
from demo.settings import Settings
from demo.streaming import BatchOutcome, SendOutcome, ServerHandle
from demo.sweep.headroom import ClientHeadroom, HeadroomProbe

START_LEAD_S = 2.0  # the start is this far ahead of the driver's now: every worker holds its part by then
PLACEMENT_TIMEOUT_S = 60.0  # the cluster has this long to place the workers
CONNECT_TIMEOUT_S = 5.0  # a cluster's address must take a TCP connection within this


class FleetError(RuntimeError):
    """The fleet cannot run: Ray is not installed, the cluster is not reachable, or it has no room."""


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise FleetError("--ray needs Ray: pip install -r requirements-ray.txt (Ray is not in the default "
                         "install)") from None
    return ray


class FleetWorker:
    """One sender on a node of the cluster: its own event loop and HTTP client (a Ray actor)."""

    async def send(self, url: str, side: str, model: str, headers: dict[str, str], settings: Settings,
                   reqs: list[RaceRequest], part: list[tuple[int, float]], start_epoch: float,
                   bound_s: float) -> tuple[SendOutcome, ClientHeadroom]:
        """Send ``part`` (index, offset) of a rate step's schedule from the start."""
        async with _Handle(url, side, model, headers, settings) as server:
            t0 = time.perf_counter() + (start_epoch - time.time())
            await asyncio.sleep(max(0.0, t0 - time.perf_counter()))  # the probe measures the step, not the wait
            async with HeadroomProbe() as probe:
                with collector_paused():
                    out = await send_schedule(server.http, server, model, reqs, part, t0, bound_s, on_ended=probe.stop)
        return out, probe.result()

    async def stream(self, url: str, side: str, model: str, headers: dict[str, str], settings: Settings,
                     reqs: list[RaceRequest], indices: list[int], concurrency: int,
                     start_epoch: float) -> tuple[BatchOutcome, float]:
        """Stream the batch's requests ``indices`` through ``concurrency`` streams, from the start;
        the outcome and when this worker ended, as a wall-clock instant."""
        async with _Handle(url, side, model, headers, settings) as server:
            await asyncio.sleep(max(0.0, start_epoch - time.time()))
            t0 = time.perf_counter()
            async with HeadroomProbe() as probe:
                with collector_paused():  # the probe stops as the last stream ends: the worker's end
                    results = await stream_part(server.http, server, model, reqs, indices, concurrency,
                                                on_ended=probe.stop)
            end = probe.stopped_at or time.perf_counter()
        return (BatchOutcome(results=results, wall_s=end - t0, client=probe.result()),
                time.time() - (time.perf_counter() - end))

    def where(self) -> tuple[str, int]:
        """(the id of the Ray node this worker runs on, its PID)."""
        return _ray().get_runtime_context().get_node_id(), os.getpid()


class _Handle:
    """``async with``: a ServerHandle on a client of this worker's own, with the driver's headers."""

    def __init__(self, url: str, side: str, model: str, headers: dict[str, str], settings: Settings) -> None:
        self.http = make_http_client(settings)
        self.http.headers.update(headers)
        self.server = ServerHandle("baseline" if side == "baseline" else "speculative", url, model, self.http)

    async def __aenter__(self) -> ServerHandle:
        return self.server

    async def __aexit__(self, *exc: object) -> None:
        await self.http.aclose()


def _headers(server: ServerHandle) -> dict[str, str]:
    """The driver's headers for this server (its key and extra headers), to send them alike."""
    return {k: v for k, v in server.http.headers.items() if k.lower() not in ("user-agent", "accept-encoding",
                                                                               "accept", "connection")}


def worst_headroom(parts: Sequence[ClientHeadroom | None]) -> ClientHeadroom | None:
    """The headroom of the worst worker: the largest lag p95 (its own max and CPU with it), limited if any was."""
    known = [h for h in parts if h is not None]
    if not known:
        return None
    worst = max(known, key=lambda h: (h.loop_lag_p95_ms or 0.0, h.cpu_share or 0.0)).model_copy()
    limited = [h for h in known if h.limited]
    if limited and not worst.limited:
        worst.limited, worst.note = True, limited[0].note
    return worst


def _check_reachable(address: str) -> None:
    """A HOST:PORT that takes no TCP connection within CONNECT_TIMEOUT_S is said so in one line (Ray
    itself would retry its GCS for minutes); "auto" and ray:// addresses are left to Ray."""
    host, sep, port = address.rpartition(":")
    if address == "auto" or "://" in address or not sep or not port.isdigit():
        return
    try:
        socket.create_connection((host or "127.0.0.1", int(port)), timeout=CONNECT_TIMEOUT_S).close()
    except OSError as e:
        raise FleetError(f"--ray {address}: no Ray cluster answers there ({e.strerror or type(e).__name__}); "
                         "start one with `ray start --head`, or pass --ray auto on a node of one") from None


class RayFleet:
    """``workers`` senders on the Ray cluster at ``address`` ("auto": the one this machine belongs to)."""

    def __init__(self, address: str, workers: int | None = None) -> None:
        ray = _ray()
        _check_reachable(address)
        try:
            if not ray.is_initialized():
                ray.init(address=address, log_to_driver=False, configure_logging=False,
                         runtime_env={"py_modules": [str(ROOT / "demo"), str(ROOT / "common")]})
        except (ConnectionError, RuntimeError, ValueError) as e:
            raise FleetError(f"--ray {address}: no Ray cluster there ({str(e).splitlines()[0]})") from None
        nodes = [n for n in ray.nodes() if n.get("Alive")]
        self.workers = workers or max(1, len(nodes))
        strategy = "STRICT_SPREAD" if self.workers <= len(nodes) else "SPREAD"
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy
        self._pg = placement_group([{"CPU": 1}] * self.workers, strategy=strategy)
        try:
            ray.get(self._pg.ready(), timeout=PLACEMENT_TIMEOUT_S)
        except Exception as e:  # GetTimeoutError: the cluster cannot give every worker a CPU
            raise FleetError(f"--ray {address}: the cluster did not place {self.workers} workers of 1 CPU each "
                             f"within {PLACEMENT_TIMEOUT_S:g} s ({type(e).__name__}); "
                             f"{len(nodes)} node(s) alive") from None
        actor = ray.remote(num_cpus=1)(FleetWorker)
        self._actors = [actor.options(scheduling_strategy=PlacementGroupSchedulingStrategy(
            placement_group=self._pg, placement_group_bundle_index=i)).remote() for i in range(self.workers)]
        self.address, self.strategy, self.nodes = address, strategy, len(nodes)

    def placement(self) -> list[tuple[str, int]]:
        """Each worker's (node id, PID): where the fleet sends from."""
        return list(_ray().get([a.where.remote() for a in self._actors]))

    def describe(self) -> str:
        """'4 Ray workers on 4 nodes (STRICT_SPREAD)'."""
        return f"{self.workers} Ray workers on {self.nodes} node(s) ({self.strategy}), cluster {self.address}"

    async def send_schedule(self, server: ServerHandle, model: str, reqs: Sequence[RaceRequest],
                            offsets_s: Sequence[float], bound_s: float, settings: Settings) -> SendOutcome:
        """The schedule split i mod k, sent from one start; the parts merged by index."""
        k = self.workers
        start = time.time() + START_LEAD_S
        parts = [[(i, o) for i, o in enumerate(offsets_s) if i % k == w] for w in range(k)]
        refs = [a.send.remote(server.url, server.side, model, _headers(server), settings, list(reqs), part, start,
                              bound_s) for a, part in zip(self._actors, parts, strict=True)]
        outs = await asyncio.gather(*refs)
        merged = SendOutcome(results={}, lags_s={}, open_at_end=0, end_s=0.0)
        for out, _headroom in outs:
            merged.results.update(out.results)
            merged.lags_s.update(out.lags_s)
            merged.open_at_end += out.open_at_end
            merged.end_s = max(merged.end_s, out.end_s)
        merged.client = worst_headroom([h for _, h in outs])
        return merged

    async def stream_batch(self, server: ServerHandle, model: str, reqs: Sequence[RaceRequest], concurrency: int,
                           settings: Settings) -> BatchOutcome:
        """The batch split i mod k, each worker with its share of the streams, from one start; merged."""
        k = min(self.workers, max(1, len(reqs)))
        start = time.time() + START_LEAD_S
        shares = [concurrency // k + (1 if w < concurrency % k else 0) for w in range(k)]
        refs = [self._actors[w].stream.remote(server.url, server.side, model, _headers(server), settings, list(reqs),
                                              [i for i in range(len(reqs)) if i % k == w], max(1, shares[w]), start)
                for w in range(k)]
        outs = await asyncio.gather(*refs)
        merged = BatchOutcome(results={}, wall_s=max(end for _, end in outs) - start)
        for out, _end in outs:
            merged.results.update(out.results)
        merged.client = worst_headroom([out.client for out, _ in outs])
        return merged

    def close(self) -> None:
        """Let the workers go (the cluster stays up)."""
        ray = _ray()
        for a in self._actors:
            ray.kill(a)
        from ray.util.placement_group import remove_placement_group
        remove_placement_group(self._pg)


@functools.cache
def fleet_at(address: str, workers: int | None = None) -> RayFleet:
    """One fleet per cluster address and worker count for this process (made on first use)."""
    return RayFleet(address, workers)


def fleet_for(settings: Settings) -> RayFleet | None:
    """The settings' fleet (``ray_address``), or None: this process sends the requests."""
    return fleet_at(settings.ray_address, settings.ray_workers) if settings.ray_address else None
