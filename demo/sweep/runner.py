"""The matrix: presets x temperatures x concurrency, each cell a measured A/B.

A cell sends ``concurrency`` identical requests at once to one server (a batch), then the
same batch to the other: baseline first, speculative second (``order="sequential"``, each
server alone: the fair A/B), ``repeats`` times, after ``warmup`` untimed batches. Every
request is streamed by demo.client and measured by demo.measure.SideMeter: this module
only pools per-request figures into batch, side and cell figures (medians and spread).

A failing server never stops the sweep: its requests' one-line errors land in the cell.
Cancellation (Ctrl-C) records the cell in progress as ``interrupted`` before it propagates.
"""

from __future__ import annotations

import asyncio
import os
import platform
import shutil
import statistics
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import httpx
from pydantic import BaseModel

from demo.client import StreamError, discover_model, make_http_client, stream_completion
from demo.measure import SideMeter, percentile
from demo.metrics import MetricsSample, scrape_metrics, spec_stats_from_delta
from demo.presets import Preset, load_presets
from demo.results import RaceRequest, Side, SideResult
from demo.server_info import probe_server
from demo.settings import Settings
from demo.sweep.models import (
    BatchStats,
    CellResult,
    CellSettings,
    MachineInfo,
    SideCell,
    Spread,
    SweepResult,
    SweepSpec,
)

SAMPLE_CHARS = 300
WARMUP_MAX_TOKENS = 16  # warm-up batches only need to touch every code path once
KV_SAMPLE_INTERVAL_S = 0.1


class UnknownPresetError(ValueError):
    """A preset name that is not in the presets folder."""


class Progress(BaseModel):
    done: int  # batches finished
    total: int
    label: str  # what runs now, e.g. "json_reformat T=0 c=4: speculative, repeat 2/3"


ProgressFn = Callable[[Progress], None]
CellFn = Callable[[CellResult], None]


# --------------------------------------------------------------------------- planning


def resolve_presets(names: list[str], presets_dir: Path) -> dict[str, Preset]:
    """The named presets; raises UnknownPresetError naming the known ones."""
    presets, _errors = load_presets(presets_dir)
    unknown = [n for n in names if n not in presets]
    if unknown:
        known = ", ".join(sorted(presets)) or "none found in " + str(presets_dir)
        raise UnknownPresetError(f"unknown preset {', '.join(map(repr, unknown))}; known presets: {known}")
    return {n: presets[n] for n in names}


def plan_cells(spec: SweepSpec, presets: dict[str, Preset]) -> list[CellSettings]:
    cells = []
    for name in spec.presets:
        p = presets[name]
        for t in spec.temperatures if spec.temperatures is not None else [p.temperature]:
            for c in spec.concurrency:
                cells.append(CellSettings(
                    preset=name, temperature=t, concurrency=c, max_tokens=spec.max_tokens or p.max_tokens,
                    api=p.api, repeats=spec.repeats, warmup=spec.warmup, order=spec.order,
                    baseline_url=spec.baseline_url, speculative_url=spec.speculative_url))
    return cells


def cell_label(c: CellSettings) -> str:
    return f"{c.preset} T={c.temperature:g} c={c.concurrency}"


def cell_request(cell: CellSettings, preset: Preset) -> RaceRequest:
    return RaceRequest(preset=preset.name, messages=preset.messages, api=cell.api,
                       temperature=cell.temperature, max_tokens=cell.max_tokens, mode="sequential")


# --------------------------------------------------------------------------- pooling


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def spread(values: list[float]) -> Spread | None:
    if not values:
        return None
    return Spread(median=statistics.median(values), min=min(values), max=max(values), n=len(values))


def expected_tokens_per_step(a: float | None, k: int | None) -> float | None:
    """Leviathan et al.: expected tokens per target pass for acceptance a and k drafted tokens."""
    if a is None or k is None:
        return None
    if a >= 1.0:
        return float(k + 1)
    return (1 - a ** (k + 1)) / (1 - a)


def batch_stats(side: Side, results: list[SideResult], wall_s: float | None, kv_peak: float | None,
                before: MetricsSample | None, after: MetricsSample | None) -> BatchStats:
    """Pool one batch's per-request results (all figures come from SideMeter)."""
    stats = BatchStats(side=side, requests=len(results), wall_s=wall_s, kv_cache_usage_peak_perc=kv_peak)
    for r in results:
        if r.error and r.error not in stats.errors:
            stats.errors.append(r.error)
    ok = [r for r in results if r.complete]
    stats.ok_requests = len(ok)
    if not ok:
        why = "no request finished" + (f": {stats.errors[0]}" if stats.errors else "")
        for f in ("output_tokens_per_s", "decode_tokens_per_s_p50", "ttft_p50_s", "e2e_p50_s"):
            stats.na_reasons[f] = why
        return stats
    stats.completion_tokens_total = sum(r.completion_tokens or 0 for r in ok)
    if wall_s and stats.completion_tokens_total:
        stats.output_tokens_per_s = stats.completion_tokens_total / wall_s
    else:
        stats.na_reasons["output_tokens_per_s"] = "no tokens counted (the server sent no usage)"
    stats.decode_tokens_per_s_p50 = _median([r.decode_tokens_per_s for r in ok if r.decode_tokens_per_s])
    if stats.decode_tokens_per_s_p50 is None:
        stats.na_reasons["decode_tokens_per_s_p50"] = next(
            (r.na_reasons["decode_tokens_per_s"] for r in ok if "decode_tokens_per_s" in r.na_reasons), "not measured")
    ttfts = [r.ttft_s for r in ok if r.ttft_s is not None]
    e2es = [r.e2e_s for r in ok if r.e2e_s is not None]
    stats.ttft_p50_s, stats.ttft_p95_s = percentile(ttfts, 50), percentile(ttfts, 95)
    stats.e2e_p50_s, stats.e2e_p95_s = percentile(e2es, 50), percentile(e2es, 95)
    stats.itl_p50_s = _median([r.itl_p50_s for r in ok if r.itl_p50_s is not None])
    stats.itl_p95_s = _median([r.itl_p95_s for r in ok if r.itl_p95_s is not None])
    stats.sample_text = ok[0].text[:SAMPLE_CHARS]
    if side == "speculative":
        _pool_acceptance(stats, ok, before, after)
    return stats


def _pool_acceptance(stats: BatchStats, ok: list[SideResult], before: MetricsSample | None,
                     after: MetricsSample | None) -> None:
    """Per-request acceptance summed over the batch; else the /metrics delta around the batch."""
    per = [r.spec for r in ok]
    if all(s is not None and s.source == "per_request" and s.draft_tokens is not None
           and s.accepted_tokens is not None and s.drafts is not None for s in per):
        stats.accepted_tokens = sum(s.accepted_tokens for s in per)  # type: ignore[misc,union-attr]
        stats.draft_tokens = sum(s.draft_tokens for s in per)  # type: ignore[misc,union-attr]
        stats.drafts = sum(s.drafts for s in per)  # type: ignore[misc,union-attr]
        stats.num_spec_tokens = next((s.num_spec_tokens for s in per if s and s.num_spec_tokens), None)
        stats.acceptance_source = "per_request"
        return
    delta = spec_stats_from_delta(before, after)
    if delta is None:
        stats.na_reasons["acceptance_rate"] = "the server reports no speculative metrics (is it speculating?)"
        return
    if delta.accepted_tokens is None or not delta.draft_tokens:
        stats.na_reasons["acceptance_rate"] = (delta.na_reasons.get("acceptance_rate")
                                               or "no drafts were proposed in the batch")
        return
    stats.accepted_tokens, stats.draft_tokens, stats.drafts = delta.accepted_tokens, delta.draft_tokens, delta.drafts
    stats.num_spec_tokens = delta.num_spec_tokens
    stats.acceptance_source = "metrics_delta"


def side_cell(side: Side, batches: list[BatchStats]) -> SideCell:
    cell = SideCell(side=side, batches=batches)
    cell.requests = sum(b.requests for b in batches)
    cell.ok_requests = sum(b.ok_requests for b in batches)
    cell.output_tokens_per_s = spread([b.output_tokens_per_s for b in batches if b.output_tokens_per_s])
    cell.decode_tokens_per_s = spread([b.decode_tokens_per_s_p50 for b in batches if b.decode_tokens_per_s_p50])
    for f in ("ttft_p50_s", "ttft_p95_s", "itl_p50_s", "itl_p95_s", "e2e_p50_s", "e2e_p95_s"):
        setattr(cell, f, _median([getattr(b, f) for b in batches if getattr(b, f) is not None]))
    if cell.ttft_p50_s is not None and cell.e2e_p50_s:
        cell.prefill_share = cell.ttft_p50_s / cell.e2e_p50_s
    kv = [b.kv_cache_usage_peak_perc for b in batches if b.kv_cache_usage_peak_perc is not None]
    cell.kv_cache_usage_peak_perc = max(kv) if kv else None
    if not kv:
        cell.na_reasons["kv_cache_usage_peak_perc"] = "the server's /metrics gave no KV-cache usage"
    cell.sample_text = next((b.sample_text for b in batches if b.sample_text), "")
    for b in batches:
        for f, why in b.na_reasons.items():
            cell.na_reasons.setdefault(f, why)
    return cell


def assemble_cell(settings: CellSettings, base: list[BatchStats], spec: list[BatchStats],
                  identical_text: bool | None = None) -> CellResult:
    """Side figures over the repeats, speedups per repeat (same conditions), pooled acceptance."""
    cell = CellResult(settings=settings, baseline=side_cell("baseline", base),
                      speculative=side_cell("speculative", spec), identical_text=identical_text)
    pairs = list(zip(base, spec))
    cell.speedup = spread([s.output_tokens_per_s / b.output_tokens_per_s for b, s in pairs
                           if b.output_tokens_per_s and s.output_tokens_per_s])
    cell.decode_speedup = spread([s.decode_tokens_per_s_p50 / b.decode_tokens_per_s_p50 for b, s in pairs
                                  if b.decode_tokens_per_s_p50 and s.decode_tokens_per_s_p50])
    bc, sc = cell.baseline, cell.speculative
    if bc.e2e_p50_s and sc.e2e_p50_s:
        cell.e2e_speedup = bc.e2e_p50_s / sc.e2e_p50_s
    for side_name, batches in (("baseline", base), ("speculative", spec)):
        for b in batches:
            for e in b.errors:
                msg = f"{side_name}: {e}"
                if msg not in cell.errors:
                    cell.errors.append(msg)
    counted = [b for b in spec if b.draft_tokens and b.accepted_tokens is not None]
    if counted:
        accepted = sum(b.accepted_tokens or 0 for b in counted)
        cell.acceptance_rate = accepted / sum(b.draft_tokens or 0 for b in counted)
        drafts = sum(b.drafts or 0 for b in counted)
        cell.mean_acceptance_length = 1 + accepted / drafts if drafts else None
        cell.num_spec_tokens = next((b.num_spec_tokens for b in counted if b.num_spec_tokens), None)
        sources = {b.acceptance_source for b in counted}
        cell.acceptance_source = "per_request" if sources == {"per_request"} else "metrics_delta"
        cell.expected_tokens_per_step = expected_tokens_per_step(cell.acceptance_rate, cell.num_spec_tokens)
        if cell.num_spec_tokens is None:
            cell.na_reasons["expected_tokens_per_step"] = "k (num_speculative_tokens) is unknown"
    else:
        why = next((b.na_reasons["acceptance_rate"] for b in spec if "acceptance_rate" in b.na_reasons),
                   "no speculative batch finished")
        cell.na_reasons["acceptance_rate"] = cell.na_reasons["expected_tokens_per_step"] = why
    if cell.speedup is None:
        cell.na_reasons["speedup"] = (cell.errors[0] if cell.errors else
                                      bc.na_reasons.get("output_tokens_per_s")
                                      or sc.na_reasons.get("output_tokens_per_s") or "not measured")
    if cell.decode_speedup is None:
        cell.na_reasons["decode_speedup"] = (bc.na_reasons.get("decode_tokens_per_s_p50")
                                             or sc.na_reasons.get("decode_tokens_per_s_p50")
                                             or cell.na_reasons.get("speedup", "not measured"))
    if cell.speedup is None:
        cell.status = "failed"
    elif cell.errors:
        cell.status = "partial"
    return cell


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


def machine_info() -> MachineInfo:
    mem = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem = round(int(line.split()[1]) / 1024 / 1024, 1)
    except (OSError, ValueError, IndexError):
        pass
    gpus: list[str] = []
    if shutil.which("nvidia-smi"):
        try:
            out = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader"],
                                 capture_output=True, text=True, timeout=5, check=False)
            gpus = [ln.strip() for ln in out.stdout.splitlines() if ln.strip()]
        except (OSError, subprocess.SubprocessError):
            pass
    return MachineInfo(platform=platform.platform(), python=platform.python_version(),
                       cpu_count=os.cpu_count(), memory_total_gb=mem, gpus=gpus)


async def server_version(http: httpx.AsyncClient, url: str, settings: Settings) -> str | None:
    """vLLM's version from GET /version; None when the server does not say."""
    try:
        resp = await http.get(url.rstrip("/") + "/version", timeout=settings.probe_timeout_s)
        version = resp.json().get("version") if resp.status_code == 200 else None
    except (httpx.HTTPError, ValueError, AttributeError):
        return None
    return str(version) if version else None


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
