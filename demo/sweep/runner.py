"""The matrix: presets x temperatures x concurrency, and the workload file x concurrency, each
cell a measured A/B.

A batch sends a cell's requests to one server through ``concurrency`` streams (a preset's one
request ``concurrency`` times at once; a workload file's every request once, ``concurrency`` at
a time), then the same batch to the next: baseline first, then each arm (speculative server) in
its order (``order="sequential"``, each server alone: the fair A/B), ``repeats`` times, after
``warmup`` untimed batches. Every
request is streamed by demo.client and measured by demo.measure.SideMeter; demo.sweep.pooling
turns those per-request figures into batch, side and cell figures. This module runs the cells
(orchestration and I/O); the plan comes from demo.sweep.plan, the machine's description from
demo.sweep.machine. The spec itself is checked here too (sweep_spec: from the text the command line
and the Evaluate tab take).

A failing server never stops the sweep: its requests' one-line errors land in the cell.
Cancellation (Ctrl-C) records the cell in progress as ``interrupted`` before it propagates.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence
from urllib.parse import urlparse

from pydantic import BaseModel, ValidationError

from demo.client import ServerClient, StreamError, collector_paused, make_http_client
from demo.errors import BadInput
from demo.fmt import validation_summary
from demo.limits import CONCURRENCY_LIMIT, TEMPERATURE_MAX, TEMPERATURE_MIN, parse_numbers
from demo.measure import SideMeter, same_answer, same_tool_calls
from demo.metrics import MetricsSample, scrape_metrics
from demo.presets import Preset
from demo.results import FIRST_ARM, Message, RaceRequest, SideResult, ToolCall, answer_message, next_turn
from demo.server_info import probe_server
from demo.settings import Endpoint, Settings
from demo.slo import Slo
from demo.streaming import Fleet, ServerHandle, stream_into
from demo.sweep.headroom import ClientHeadroom, HeadroomProbe
from demo.sweep.machine import machine_info, server_version
from demo.sweep.models import ArmSpec, BatchStats, CellResult, CellSettings, SweepResult, SweepSpec, WorkloadSpec
from demo.sweep.plan import batch_requests, cell_label, cell_requests, plan_cells
from demo.sweep.pooling import assemble_arms, batch_stats
from demo.sweep.profile import pool_outcomes, request_outcome
from demo.workload import Workload, WorkloadRequest

WARMUP_MAX_TOKENS = 16  # warm-up batches only need to touch every code path once
# At most one /metrics scrape a second while a batch streams. A scrape costs a CPU server ~5 ms of
# the core its engine decodes on (~58 KB of text): ten a second took 4-10% of the measured
# throughput (docs/evaluator.md, "Measuring without disturbing"); one a second stays under 1%.
KV_SAMPLE_INTERVAL_S = 1.0


class SweepProgress(BaseModel):
    """How far a sweep is: batches done of the total, and what runs now."""

    done: int  # batches finished
    total: int
    label: str  # what runs now, e.g. "json_reformat T=0 c=4: speculative, repeat 2/3"


ProgressFn = Callable[[SweepProgress], None]
CellFn = Callable[[CellResult], None]
# Watches a batch's streams as they go (the live page: user 1's text, every user's progress).
# Called with the stream's server ("baseline", else the arm's name: every arm is watched), the
# request's index in the batch (a load step's user: index 0 is user 1)
# and that request's SideMeter, after every event the meter takes and once more when the stream
# ends (done, failed or stopped: meter.status says which). The meter itself, to be read, not
# changed: a SideSnapshot per event would copy the text and every burst each time (32 users x 2
# sides x 400 events); the observer takes meter.snapshot() only when it draws. Measured batches
# only (no warm-up); None costs nothing.
StreamObserver = Callable[[str, int, SideMeter], None]


# --------------------------------------------------------------------------- measuring


def spec_arms(spec: SweepSpec) -> list[ArmSpec]:
    """A sweep's arms in order: its ``arms``, or (a spec without arms) the one at speculative_url."""
    return spec.arms or [ArmSpec(name=FIRST_ARM, url=spec.speculative_url)]


def settings_arms(settings: Settings) -> list[ArmSpec]:
    """The settings' arms (Settings.arm_endpoints()) as a sweep or load spec records them."""
    return [ArmSpec(name=e.arm or FIRST_ARM, url=e.url, label=e.label, method=e.method, step_cost=e.step_cost)
            for e in settings.arm_endpoints()]


def same_host(a: str, b: str) -> bool:
    """Whether two URLs name the same host (the port is ignored)."""
    return urlparse(a).hostname == urlparse(b).hostname


def sweep_spec(settings: Settings, presets: list[str], concurrency: str, temperatures: str | None, repeats: int,
              warmup: int, max_tokens: int | None, order: str = "sequential", *, workload: Workload | None = None,
              redact: bool = False, slo: Slo | None = None, gpu_hour_price: float | None = None,
              shared_gpu: bool | None = None, gpu_shares: dict[str, float] | None = None) -> SweepSpec:
    """A checked SweepSpec from text inputs (the CLI's and the Evaluate tab's); BadInput says what
    is wrong in the user's words (the CLI names the flag: demo/cli/sweep.py's build_spec)."""
    conc = parse_numbers(concurrency, int, "concurrency")
    temps = parse_numbers(temperatures, float, "temperatures") if temperatures and temperatures.strip() else None
    # The bounds are demo/limits.py's (SweepSpec's types); said here for the whole list at once.
    if any(c < 1 or c > CONCURRENCY_LIMIT for c in conc):
        raise BadInput.about("concurrency", f"values must be between 1 and {CONCURRENCY_LIMIT}")
    if any(not TEMPERATURE_MIN <= t <= TEMPERATURE_MAX for t in temps or []):
        raise BadInput.about("temperatures", f"must be between {TEMPERATURE_MIN:g} and {TEMPERATURE_MAX:g}")
    try:
        wspec = None if workload is None else WorkloadSpec.of(workload)
        arms = settings_arms(settings)
        if shared_gpu is None:
            shared_gpu = all(same_host(settings.baseline_url, a.url) for a in arms)
        servers = {"baseline", *(a.name for a in arms)}
        if gpu_shares is not None and (unknown := sorted(set(gpu_shares) - servers)):
            raise BadInput.about("gpu-shares", f"names {', '.join(unknown)}, not a server of this sweep "
                                 f"({', '.join(['baseline', *(a.name for a in arms)])})")
        return SweepSpec(baseline_url=settings.baseline_url, speculative_url=settings.speculative_url,
                         arms=arms, gpu_shares=gpu_shares, presets=presets, workload=wspec, concurrency=conc,
                         temperatures=temps, repeats=repeats,
                         warmup=warmup, max_tokens=max_tokens, order=order, redact=redact, slo=slo,
                         gpu_hour_price=gpu_hour_price, shared_gpu=shared_gpu)
    except ValidationError as e:
        raise BadInput(validation_summary(e)) from None


def make_servers(settings: Settings, baseline_url: str, arms: Sequence[ArmSpec],
                 http: ServerClient | None = None, fleet: Fleet | None = None) -> dict[str, ServerHandle]:
    """"baseline" and each arm by name -> its server: the URL as given, the model, key and headers of
    the settings' endpoint of that name (else the shared ones). Each gets its own client unless
    ``http`` is shared. With a ``fleet`` (``--ray``), its workers send every server's requests."""
    endpoints = {e.arm: e for e in settings.arm_endpoints()}
    base = settings.endpoint("baseline")
    servers = {"baseline": ServerHandle("baseline", baseline_url, base.model,
                                   http or make_http_client(settings, endpoint=base))}
    for i, a in enumerate(arms):
        e = endpoints.get(a.name) or (settings.endpoint("speculative") if i == 0 else Endpoint(
            side="speculative", url=a.url, model=settings.model, api_key=settings.api_key))
        servers[a.name] = ServerHandle("speculative", a.url, e.model, http or make_http_client(settings, endpoint=e),
                                  arm=a.name, label=a.label, method=a.method, step_cost=a.step_cost)
    for handle in servers.values():
        handle.fleet = fleet
    return servers


async def metered_request(http: ServerClient, server: ServerHandle, model: str, req: RaceRequest,
                          index: int = 0, observe: StreamObserver | None = None) -> SideMeter:
    """Stream one request to ``server`` into a SideMeter. Its figures are the meter's ``result()``,
    which a batch of many streams takes once they have all ended, as vllm bench serve computes its
    metrics after its requests: a thousand streams ending together would otherwise read their last
    tokens late. The meter keeps its events only for an ``observe``-r (the N-user race shows user 1's
    timeline); a sweep keeps figures, not timelines (a thousand streams would hold a million events)."""
    t0 = time.perf_counter()
    meter = SideMeter(server.side, server.url, t0=t0, keep_events=observe is not None)
    meter.model = model
    # The observer's last look (stream_into calls it once more at the end) sees how it ended.
    look = None if observe is None else (lambda: observe(server.arm or server.side, index, meter))
    await stream_into(meter, http, server.url, model, req, t0=t0, on_event=look)
    return meter


async def one_request(http: ServerClient, server: ServerHandle, model: str, req: RaceRequest,
                      index: int = 0, observe: StreamObserver | None = None) -> SideResult:
    """Stream one request to ``server`` and measure it (metered_request); its figures, without its events."""
    return (await metered_request(http, server, model, req, index, observe)).result()


async def kv_sampler(http: ServerClient, url: str, settings: Settings, peaks: list[float],
                     stop: asyncio.Event, waiting: list[float] | None = None,
                     running: list[float] | None = None) -> None:
    """Sample /metrics while the batch runs (every KV_SAMPLE_INTERVAL_S): KV-cache use, the
    queue and (``running``) the running batch mid-batch, not after it."""
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
        if waiting is not None and m.num_requests_waiting is not None:
            waiting.append(m.num_requests_waiting)
        if running is not None and m.num_requests_running is not None:
            running.append(m.num_requests_running)


class MetricsAround:
    """``async with``: a server's /metrics around a batch: scraped before it (``before``), sampled while
    it streams (kv_sampler: ``kv``, ``waiting``, ``running``), scraped after it (``after``, once the
    batch ended without an error). A server without /metrics is scraped once, then left alone."""

    def __init__(self, http: ServerClient, url: str, settings: Settings) -> None:
        self.http, self.url, self.settings = http, url, settings
        self.kv: list[float] = []  # KV-cache use sampled while the batch streamed
        self.waiting: list[float] = []  # the queue (vllm:num_requests_waiting), sampled with the KV use
        self.running: list[float] = []  # the running batch (vllm:num_requests_running)
        self.before = MetricsSample(ok=False)
        self.after: MetricsSample | None = None
        self._stop = asyncio.Event()
        self._sampler: asyncio.Task[None] | None = None

    async def __aenter__(self) -> MetricsAround:
        self.before = await scrape_metrics(self.http, self.url, self.settings)
        if self.before.ok:
            self._sampler = asyncio.create_task(kv_sampler(self.http, self.url, self.settings, self.kv, self._stop,
                                                           self.waiting, self.running))
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, *_: object) -> None:
        self._stop.set()
        if self._sampler is not None:
            self._sampler.cancel()
            await asyncio.gather(self._sampler, return_exceptions=True)
        if exc_type is None and self.before.ok:
            self.after = await scrape_metrics(self.http, self.url, self.settings)


def carried(req: RaceRequest, before: RaceRequest, answer: SideResult, turn: int = 1) -> RaceRequest | None:
    """A session's turn as one side sends it: what that side sent for the turn before (``turn``), its own
    answer to it (demo.results.answer_message: text and tool calls), then this turn's new messages
    (``req.messages``), whose ``role: tool`` results answer this side's calls (demo.results.next_turn:
    the k-th result takes the id of this side's k-th call; a result beyond its calls keeps the logged
    id), so the history is consistent whatever the side called. None when the turn before has no
    answer to carry (it failed)."""
    if answer.error or not answer.complete:
        return None
    own = answer_message(answer.text, answer.tool_calls, turn)
    return req.model_copy(update={"messages": next_turn(list(before.messages or []), own, list(req.messages or []))})


def followed_other_call(answer: SideResult, logged: Message | None) -> bool | None:
    """Whether a side's answer (carried into the next turn) called other than the log recorded: True
    when its tool calls differ from ``logged``'s (demo.measure.same_tool_calls: names and arguments,
    as parsed JSON); None when the log recorded no call there (nothing to compare)."""
    if logged is None or not logged.tool_calls:
        return None
    return not same_tool_calls(answer.tool_calls, [ToolCall.of_history(c) for c in logged.tool_calls])


async def stream_all(http: ServerClient, server: ServerHandle, model: str, reqs: list[RaceRequest],
                     concurrency: int, observe: StreamObserver | None = None,
                     sessions: Sequence[Sequence[int]] | None = None,
                     logged: Sequence[Message | None] | None = None,
                     on_ended: Callable[[], None] | None = None) -> list[SideResult]:
    """``concurrency`` streams at once, each taking the next request as it finishes one: a slice of
    real traffic. Results in request order. With ``sessions`` (the indices of each session's turns,
    in order; every other request alone), a stream takes a whole session and plays its turns one
    after another, each carried on from its own answer to the turn before (``carried``). ``logged``:
    per request, the answer the log recorded for the turn before (WorkloadRequest.logged_answer),
    which the side's own replaces; a turn after a logged call says whether the side's call differed
    (SideResult.followed_other_call). ``on_ended`` is called as the last stream ends, before the lone
    requests' figures are taken (the batch's wall time ends there)."""
    results: list[SideResult | None] = [None] * len(reqs)
    alone: dict[int, SideMeter] = {}  # lone requests' meters: their figures once every stream has ended
    in_session = {i for unit in sessions or [] for i in unit}
    units = [*(list(u) for u in sessions or []), *([i] for i in range(len(reqs)) if i not in in_session)]
    units.sort(key=lambda u: u[0])
    queue = iter(units)

    async def worker() -> None:
        for unit in queue:  # one shared iterator: each session (or lone request) is taken once
            sent: RaceRequest | None = None
            for n, i in enumerate(unit):
                req: RaceRequest | None = reqs[i]
                prev: SideResult | None = None
                if n > 0 and sent is not None:
                    prev = results[unit[n - 1]]
                    req = carried(reqs[i], sent, prev, n) if prev is not None else None
                if req is None:
                    results[i] = SideResult(side=server.side, url=server.url,
                                            error="not sent: the session's turn before has no answer to carry on from")
                    continue
                if len(unit) == 1:
                    alone[i] = await metered_request(http, server, model, req, i, observe)
                    continue
                results[i] = result = await one_request(http, server, model, req, i, observe)
                if prev is not None:
                    result.followed_other_call = followed_other_call(prev, logged[i] if logged else None)
                sent = req

    await asyncio.gather(*(worker() for _ in range(min(concurrency, len(reqs)))))
    if on_ended is not None:
        on_ended()
    for i, meter in alone.items():
        results[i] = meter.result()
    return [r for r in results if r is not None]


async def run_batch(http: ServerClient, server: ServerHandle, reqs: list[RaceRequest], concurrency: int,
                    settings: Settings, *, keep_text: bool = True, observe: StreamObserver | None = None,
                    sessions: Sequence[Sequence[int]] | None = None, logged: Sequence[Message | None] | None = None,
                    ) -> tuple[BatchStats, list[SideResult]]:
    """Every request of ``reqs`` through ``concurrency`` streams; the batch figures and each request's
    result (in order). ``observe`` watches every stream as it goes (StreamObserver); ``sessions``:
    sessions played turn by turn, each side carrying its own answers in place of the ``logged`` ones
    (stream_all). With the handle's fleet (``--ray``), and neither of those, its workers send the
    requests between them."""
    try:
        model = await server.ensure_model(http, settings)
    except StreamError as e:
        failed = [SideResult(side=server.side, url=server.url, error=str(e)) for _ in reqs]
        return batch_stats(server.side, failed, None, None, None, None), failed
    probe = HeadroomProbe()
    fleet = server.fleet if observe is None and not sessions else None  # a live view and sessions stay here
    client: ClientHeadroom | None = None
    async with MetricsAround(http, server.url, settings) as metrics:
        t_start = time.perf_counter()  # the batch's wall time starts after the scrape before it
        if fleet is not None:  # the workers send; each says its own headroom
            out = await fleet.stream_batch(server, model, reqs, concurrency, settings)
            results, wall_s, client = [out.results[i] for i in range(len(reqs))], out.wall_s, out.client
        else:
            async with probe:  # is the client keeping up? (its loop lag and CPU, not the server's)
                with collector_paused():  # no collector pause at a measured token
                    # The probe, and with it the batch's wall time, stops as the last stream ends.
                    results = await stream_all(http, server, model, reqs, concurrency, observe, sessions, logged,
                                               on_ended=probe.stop)
            wall_s = (probe.stopped_at or time.perf_counter()) - t_start
            client = probe.result()
    before, after, during, waiting = metrics.before, metrics.after, metrics.kv, metrics.waiting
    # The KV peak is a mid-batch figure: before the batch and after it the cache holds none of its
    # requests. With no sample while it streamed, the peak is not known (rather than a false 0).
    peaks = [*during, *(m.kv_cache_usage_perc for m in (before, after)
                        if during and m and m.ok and m.kv_cache_usage_perc is not None)]
    waiting += [m.num_requests_waiting for m in (before, after) if m and m.ok and m.num_requests_waiting is not None]
    stats = batch_stats(server.side, results, wall_s, max(peaks) if peaks else None, before, after,
                        keep_text=keep_text, waiting_peak=max(waiting) if waiting else None)
    if not before.ok:
        stats.na_reasons.setdefault("kv_cache_usage_peak_perc", before.error or "/metrics unavailable")
    elif not during:
        stats.na_reasons.setdefault(
            "kv_cache_usage_peak_perc",
            f"the batch took {wall_s:.1f} s, less than one KV sample ({KV_SAMPLE_INTERVAL_S:g} s apart, so as not "
            "to slow the server): not sampled while it ran")
    stats.client = client
    return stats, results


async def _warm_up(server: ServerHandle, reqs: list[RaceRequest], concurrency: int, settings: Settings,
                   rounds: int) -> None:
    warm = [r.model_copy(update={"max_tokens": min(r.max_tokens, WARMUP_MAX_TOKENS)})
            for r in reqs[:max(concurrency, 1)]]
    for _ in range(rounds):
        stats, _ = await run_batch(server.http, server, warm, concurrency, settings)
        if stats.ok_requests == 0:
            return  # the server fails: the measured batches will record why


def carried_sessions(requests: Sequence[WorkloadRequest]) -> list[list[int]]:
    """The sessions whose turns carry each side's own answers: each one's indices, in turn order."""
    by_session: dict[str, list[int]] = {}
    for i, q in enumerate(requests):
        if q.session is not None:
            by_session.setdefault(q.session, []).append(i)
    own = [ix for ix in by_session.values() if any(requests[i].carry for i in ix)]
    return [sorted(ix, key=lambda i: requests[i].turn or 0) for ix in own]


def _identical(requests: list[WorkloadRequest], base: list[SideResult], spec: list[SideResult],
               workload: bool) -> bool | None:
    """A preset: the first finished answers of the two sides are equal, text and tool calls
    (demo.measure.same_answer; meaningful at T=0 only).
    A workload file: both answers are equal for every greedy (T=0) request that finished on both
    sides. None when there is nothing to compare."""
    if not workload:
        first = [next((r for r in side if r.complete), None) for side in (base, spec)]
        return None if first[0] is None or first[1] is None else same_answer(first[0], first[1])
    greedy = [(b, s) for q, b, s in zip(requests, base, spec, strict=True)
              if b.complete and s.complete and q.temperature == 0]
    return all(same_answer(b, s) for b, s in greedy) if greedy else None


async def run_cell(cell: CellSettings, requests: list[WorkloadRequest], servers: Mapping[str, ServerHandle],
                   settings: Settings, step: Callable[[str, bool], None], on_interrupt: CellFn,
                   *, redact: bool = False, observe: StreamObserver | None = None) -> CellResult:
    """Measure one cell: per repeat, the same batch of requests on each server (``servers``: "baseline",
    then each arm by name, in order): in sequential order the baseline, then each arm alone; in
    simultaneous order all at once. When cancelled, hands the repeats done so far to ``on_interrupt``
    (as an ``interrupted`` cell) before the cancellation propagates. ``observe`` watches the measured
    batches' streams (StreamObserver)."""
    # A session played turn by turn is played once, whole: no wrap-around to fill the streams.
    sessions = carried_sessions(requests)
    batch = list(requests) if sessions else batch_requests(requests, cell.concurrency)
    reqs = [q.to_race_request() for q in batch]
    logged = [q.logged_answer for q in batch] if sessions else None
    # A carried turn alone is no request (its new messages answer a turn before): warm up on whole ones.
    warm = [r for q, r in zip(batch, reqs, strict=True) if not q.carry] or reqs
    names = list(servers)  # "baseline" first, then the arms
    arms = [n for n in names if n != "baseline"]
    stats: dict[str, list[BatchStats]] = {n: [] for n in names}
    answers: dict[str, list[list[SideResult]]] = {n: [] for n in names}
    about = {n: ArmSpec(name=n, url=servers[n].url, label=servers[n].label, method=servers[n].method,
                        step_cost=servers[n].step_cost) for n in arms}
    t0 = time.perf_counter()

    def shown(name: str) -> str:  # a cell of one arm calls its arm "speculative"
        return "speculative" if name != "baseline" and len(arms) == 1 else name

    try:
        for name in names:
            if cell.warmup:
                step(f"{cell_label(cell)}: warm-up {shown(name)}", False)
                await _warm_up(servers[name], warm, cell.concurrency, settings, cell.warmup)

        async def one(name: str, r: int) -> None:
            label = f"{cell_label(cell)}: {shown(name)}, repeat {r + 1}/{cell.repeats}"
            step(label, False)
            # The observer is told each stream's server: the baseline and every arm by its name.
            batch_stats_, results = await run_batch(servers[name].http, servers[name], reqs, cell.concurrency,
                                                    settings, keep_text=not redact, observe=observe,
                                                    sessions=sessions, logged=logged)
            stats[name].append(batch_stats_)
            answers[name].append(results)
            step(label, True)

        for r in range(cell.repeats):
            if cell.order == "sequential":
                for name in names:
                    await one(name, r)
            else:
                await asyncio.gather(*(one(name, r) for name in names))
    except asyncio.CancelledError:
        n = min(len(v) for v in stats.values())
        partial = assemble_arms(cell, stats["baseline"][:n], {a: stats[a][:n] for a in arms}, about=about)
        partial.status = "interrupted"
        partial.na_reasons["status"] = f"stopped after {n} of {cell.repeats} repeats"
        partial.duration_s = time.perf_counter() - t0
        on_interrupt(partial)
        raise
    result = _assembled(cell, batch, stats, answers, about, redact=redact)
    result.duration_s = time.perf_counter() - t0
    return result


def _assembled(cell: CellSettings, batch: list[WorkloadRequest], stats: dict[str, list[BatchStats]],
               answers: dict[str, list[list[SideResult]]], about: dict[str, ArmSpec], *,
               redact: bool) -> CellResult:
    """A measured cell from each server's batches ("baseline" first, then the arms): its figures, the
    arms' identical answers, and its requests' outcomes against the baseline's."""
    arms = [n for n in stats if n != "baseline"]
    base_answers = answers["baseline"]
    identical = {a: (_identical(batch, base_answers[0], answers[a][0], workload=cell.kind == "workload")
                     if base_answers else None) for a in arms}
    result = assemble_arms(cell, stats["baseline"], {a: stats[a] for a in arms}, identical, about)
    # Per request of the workload: the first arm against the baseline (the profile and copy-ness).
    pairs = list(zip(base_answers, answers[arms[0]], strict=True))
    result.requests = pool_outcomes([request_outcome(q, b, s, redact=redact)
                                     for bs, ss in pairs for q, b, s in zip(batch, bs, ss, strict=True)])
    if any(q.turn for q in batch):  # sessions: each other arm's per-request figures too, for its per-turn column
        result.arm_requests = {a: pool_outcomes([request_outcome(q, b, s, redact=True)
                                                 for bs, ss in zip(base_answers, answers[a], strict=True)
                                                 for q, b, s in zip(batch, bs, ss, strict=True)])
                               for a in arms[1:]}
    return result


# --------------------------------------------------------------------------- the sweep


def new_result(spec: SweepSpec, presets: dict[str, Preset]) -> SweepResult:
    """An empty result for ``spec``, with this machine's description and the presets' titles."""
    return SweepResult(spec=spec, machine=machine_info(),
                       preset_titles={n: p.title for n, p in presets.items()})


async def describe_servers(servers: Mapping[str, ServerHandle], arms: Sequence[ArmSpec], settings: Settings,
                           result: SweepResult) -> None:
    """Each server's description and vLLM version into ``result`` (``servers``, ``server_versions``), as
    the report shows them; before anything is measured."""
    result.servers = list(await asyncio.gather(
        *(probe_server(s.http, s.side, s.url, settings, arm=s.arm if len(arms) > 1 else None, method=s.method,
                       first_arm=s.arm in (None, arms[0].name)) for s in servers.values())))
    for i, (name, server) in enumerate(servers.items()):
        # "baseline", "speculative" (the first arm, as before arms), then the other arms by name
        key = "baseline" if i == 0 else "speculative" if i == 1 else name
        if (version := await server_version(server.http, server.url, settings)) is not None:
            result.server_versions[key] = version


async def run_sweep(
    spec: SweepSpec,
    settings: Settings,
    result: SweepResult,
    presets: dict[str, Preset],
    *,
    http: ServerClient | None = None,
    on_progress: ProgressFn | None = None,
    on_cell: CellFn | None = None,
    workload: Workload | None = None,
    fleet: Fleet | None = None,
) -> SweepResult:
    """Run every cell, appending to ``result.cells`` as each one ends (so a caller that is
    interrupted still holds every finished cell, and the interrupted one). ``workload`` is the
    customer's file (spec.workload describes it), measured after the presets. ``fleet`` (``--ray``):
    its workers send the batches' requests."""
    cells = plan_cells(spec, presets, workload)
    arms = spec_arms(spec)
    servers = make_servers(settings, spec.baseline_url, arms, http, fleet)
    total = len(cells) * spec.repeats * len(servers)  # batches
    done = 0

    def step(label: str, finished: bool) -> None:
        nonlocal done
        done += finished
        if on_progress is not None:
            on_progress(SweepProgress(done=done, total=total, label=label))

    try:
        await describe_servers(servers, arms, settings, result)
        for cell in cells:
            try:
                cell_result = await run_cell(cell, cell_requests(cell, presets, workload), servers, settings,
                                             step, result.cells.append, redact=spec.redact)
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
