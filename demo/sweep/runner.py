"""The matrix: presets x temperatures x concurrency, each cell a measured A/B.

A cell sends ``concurrency`` identical requests at once to one server (a batch), then the
same batch to the other: baseline first, speculative second (``order="sequential"``, each
server alone: the fair A/B), ``repeats`` times, after ``warmup`` untimed batches. Every
request is streamed by demo.client and measured by demo.measure.SideMeter; demo.sweep.pooling
turns those per-request figures into batch, side and cell figures. This module runs the cells
(orchestration and I/O); the plan comes from demo.sweep.plan, the machine's description from
demo.sweep.machine.

A failing server never stops the sweep: its requests' one-line errors land in the cell.
Cancellation (Ctrl-C) records the cell in progress as ``interrupted`` before it propagates.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import httpx
from pydantic import BaseModel

from demo.client import StreamError, discover_model, make_http_client, stream_completion
from demo.measure import SideMeter
from demo.metrics import scrape_metrics
from demo.presets import Preset
from demo.results import RaceRequest, Side, SideResult
from demo.server_info import probe_server
from demo.settings import Settings
from demo.sweep.machine import machine_info, server_version
from demo.sweep.models import BatchStats, CellResult, CellSettings, SweepResult, SweepSpec
from demo.sweep.plan import cell_label, cell_request, plan_cells
from demo.sweep.pooling import assemble_cell, batch_stats

WARMUP_MAX_TOKENS = 16  # warm-up batches only need to touch every code path once
KV_SAMPLE_INTERVAL_S = 0.1


class Progress(BaseModel):
    done: int  # batches finished
    total: int
    label: str  # what runs now, e.g. "json_reformat T=0 c=4: speculative, repeat 2/3"


ProgressFn = Callable[[Progress], None]
CellFn = Callable[[CellResult], None]


# --------------------------------------------------------------------------- measuring


class _Server:
    """One server of the pair: its side, URL, HTTP client (its key and headers) and served model
    (discovered once)."""

    def __init__(self, side: Side, url: str, model: str | None, http: httpx.AsyncClient) -> None:
        self.side, self.url, self.model, self.http = side, url, model, http

    async def ensure_model(self, http: httpx.AsyncClient, settings: Settings) -> str:
        if self.model is None:
            self.model = (await discover_model(http, self.url, settings.probe_timeout_s + 2)).id
        return self.model


async def _one_request(http: httpx.AsyncClient, server: _Server, model: str, req: RaceRequest) -> SideResult:
    t0 = time.perf_counter()
    meter = SideMeter(server.side, server.url, t0=t0)
    meter.model = model
    try:
        async for ev in stream_completion(http, server.url, model, req, t0=t0):
            meter.feed(ev)
    except StreamError as e:
        meter.fail(str(e))
    result = meter.result()
    result.events = []  # a sweep keeps figures, not timelines
    return result


async def _kv_sampler(http: httpx.AsyncClient, url: str, settings: Settings, peaks: list[float],
                      stop: asyncio.Event) -> None:
    """Sample /metrics while the batch runs: KV-cache use peaks mid-batch, not after it."""
    # The scrape just before the batch is the first sample: wait first, so that no scrape
    # competes with the batch's requests while they are being sent.
    while True:
        try:
            await asyncio.wait_for(stop.wait(), KV_SAMPLE_INTERVAL_S)
            return
        except TimeoutError:
            pass
        m = await scrape_metrics(http, url, settings)
        if not m.ok:
            return  # no /metrics: do not keep knocking
        if m.kv_cache_usage_perc is not None:
            peaks.append(m.kv_cache_usage_perc)


async def run_batch(http: httpx.AsyncClient, server: _Server, req: RaceRequest, concurrency: int,
                    settings: Settings) -> tuple[BatchStats, str | None]:
    """``concurrency`` identical requests at once; returns the batch figures and the first answer."""
    try:
        model = await server.ensure_model(http, settings)
    except StreamError as e:
        failed = [SideResult(side=server.side, url=server.url, error=str(e))] * concurrency
        return batch_stats(server.side, failed, None, None, None, None), None
    before = await scrape_metrics(http, server.url, settings)
    peaks: list[float] = []
    if before.ok and before.kv_cache_usage_perc is not None:
        peaks.append(before.kv_cache_usage_perc)
    stop = asyncio.Event()
    sampler = asyncio.create_task(_kv_sampler(http, server.url, settings, peaks, stop)) if before.ok else None
    t_start = time.perf_counter()
    try:
        results = await asyncio.gather(*(_one_request(http, server, model, req) for _ in range(concurrency)))
        wall_s = time.perf_counter() - t_start
    finally:
        stop.set()
        if sampler is not None:
            sampler.cancel()
            await asyncio.gather(sampler, return_exceptions=True)
    after = await scrape_metrics(http, server.url, settings) if before.ok else None
    if after is not None and after.ok and after.kv_cache_usage_perc is not None:
        peaks.append(after.kv_cache_usage_perc)
    stats = batch_stats(server.side, list(results), wall_s, max(peaks) if peaks else None, before, after)
    if not before.ok:
        stats.na_reasons.setdefault("kv_cache_usage_peak_perc", before.error or "/metrics unavailable")
    first_ok = next((r.text for r in results if r.complete), None)
    return stats, first_ok


async def _warm_up(http: httpx.AsyncClient, server: _Server, req: RaceRequest, concurrency: int,
                   settings: Settings, rounds: int) -> None:
    warm = req.model_copy(update={"max_tokens": min(req.max_tokens, WARMUP_MAX_TOKENS)})
    for _ in range(rounds):
        stats, _ = await run_batch(http, server, warm, concurrency, settings)
        if stats.ok_requests == 0:
            return  # the server fails: the measured batches will record why


async def run_cell(cell: CellSettings, preset: Preset, servers: dict[Side, _Server],
                   settings: Settings, step: Callable[[str, bool], None],
                   on_interrupt: CellFn) -> CellResult:
    """Measure one cell. When cancelled, hands the repeats done so far to ``on_interrupt``
    (as an ``interrupted`` cell) before the cancellation propagates."""
    req = cell_request(cell, preset)
    base: list[BatchStats] = []
    spec: list[BatchStats] = []
    texts: dict[Side, str | None] = {"baseline": None, "speculative": None}
    t0 = time.perf_counter()
    try:
        for side in ("baseline", "speculative"):
            if cell.warmup:
                step(f"{cell_label(cell)}: warm-up {side}", False)
                await _warm_up(servers[side].http, servers[side], req, cell.concurrency, settings, cell.warmup)

        async def one(side: Side, r: int) -> None:
            label = f"{cell_label(cell)}: {side}, repeat {r + 1}/{cell.repeats}"
            step(label, False)
            stats, text = await run_batch(servers[side].http, servers[side], req, cell.concurrency, settings)
            (base if side == "baseline" else spec).append(stats)
            if texts[side] is None:
                texts[side] = text
            step(label, True)

        for r in range(cell.repeats):
            if cell.order == "sequential":
                await one("baseline", r)
                await one("speculative", r)
            else:
                await asyncio.gather(one("baseline", r), one("speculative", r))
    except asyncio.CancelledError:
        n = min(len(base), len(spec))
        partial = assemble_cell(cell, base[:n], spec[:n])
        partial.status = "interrupted"
        partial.na_reasons["status"] = f"stopped after {n} of {cell.repeats} repeats"
        partial.duration_s = time.perf_counter() - t0
        on_interrupt(partial)
        raise
    identical = None
    if texts["baseline"] is not None and texts["speculative"] is not None:
        identical = texts["baseline"] == texts["speculative"]
    result = assemble_cell(cell, base, spec, identical)
    result.duration_s = time.perf_counter() - t0
    return result


# --------------------------------------------------------------------------- the sweep


def new_result(spec: SweepSpec, presets: dict[str, Preset]) -> SweepResult:
    return SweepResult(spec=spec, machine=machine_info(),
                       preset_titles={n: p.title for n, p in presets.items()})


async def run_sweep(
    spec: SweepSpec,
    settings: Settings,
    result: SweepResult,
    presets: dict[str, Preset],
    *,
    http: httpx.AsyncClient | None = None,
    on_progress: ProgressFn | None = None,
    on_cell: CellFn | None = None,
) -> SweepResult:
    """Run every cell, appending to ``result.cells`` as each one ends (so a caller that is
    interrupted still holds every finished cell, and the interrupted one)."""
    cells = plan_cells(spec, presets)
    # Each side gets its own client (its own key and headers) unless the caller shares one.
    urls: dict[Side, str] = {"baseline": spec.baseline_url, "speculative": spec.speculative_url}
    servers: dict[Side, _Server] = {
        side: _Server(side, url, settings.endpoint(side).model, http or make_http_client(settings, side))
        for side, url in urls.items()
    }
    total = len(cells) * spec.repeats * 2
    done = 0

    def step(label: str, finished: bool) -> None:
        nonlocal done
        done += finished
        if on_progress is not None:
            on_progress(Progress(done=done, total=total, label=label))

    try:
        result.servers = list(await asyncio.gather(
            *(probe_server(s.http, s.side, s.url, settings) for s in servers.values())))
        for side, server in servers.items():
            if (version := await server_version(server.http, server.url, settings)) is not None:
                result.server_versions[side] = version
        for cell in cells:
            try:
                cell_result = await run_cell(cell, presets[cell.preset], servers, settings, step,
                                             result.cells.append)
            except asyncio.CancelledError:
                result.interrupted = True
                raise
            result.cells.append(cell_result)
            if on_cell is not None:
                on_cell(cell_result)
    finally:
        if http is None:
            await asyncio.gather(*(s.http.aclose() for s in servers.values()))
    return result
