"""The race: one prompt to the baseline and the speculative server(s), measured side by side.

A race has one baseline and 1 to 3 *arms* (speculative servers, ``Settings.arm_endpoints()``).
``order="simultaneous"`` starts every request at the same instant (on one GPU they compete);
``order="sequential"`` runs the baseline, then each arm in its order, each alone: the fair A/B.
Live snapshots stream out while the answers arrive; the last one holds the result. The first arm
is ``speculative`` in every record, so one arm is exactly the race of two servers.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, Mapping
from typing import Any

from demo.client import (
    ServerClient,
    StreamError,
    collector_paused,
    count_prompt_tokens,
    make_http_client,
    stream_completion,
)
from demo.measure import SideMeter, efficiency, over_bound, same_answer, step_cost_note
from demo.metrics import MetricsSample, scrape_metrics, spec_stats_from_delta
from demo.results import FIRST_ARM, ArmResult, ArmSnapshot, RaceRequest, RaceResult, RaceSnapshot, SideResult
from demo.settings import Endpoint, Settings
from demo.streaming import ServerHandle, stream_into

WARMUP = RaceRequest(prompt="Hello", max_tokens=4, temperature=0.0)
HEARTBEAT_S = 0.5


def validate_request(req: RaceRequest, settings: Settings | None = None) -> None:
    """Reject what no server should be sent; raises ValueError with a one-line reason.

    With ``settings``, also the prompt's size (``check_prompt_size``): the page, its API and
    the races of a workload all come through here before anything is sent.
    """
    text = (req.prompt or "") + "".join(m.text for m in req.messages or [])
    if not text.strip():
        raise ValueError("The prompt is empty: type a prompt or pick a preset.")
    if settings is not None:
        check_prompt_size(req, settings.max_prompt_chars)


def prompt_size_problem(chars: int, max_chars: int) -> str | None:
    """The one message for a prompt over the cap (the page, the API, the CLI, a workload line); None when it fits."""
    if chars <= max_chars:
        return None
    return (f"the prompt is {chars:,} characters, over the limit of {max_chars:,} (SPECDEMO_MAX_PROMPT_CHARS): "
            "shorten it")


def check_prompt_size(req: RaceRequest, max_chars: int) -> None:
    """ValueError, naming the limit, when the prompt (all messages) is over ``max_chars`` characters."""
    chars = len(req.prompt or "") + sum(len(m.text) for m in req.messages or [])
    if (problem := prompt_size_problem(chars, max_chars)) is not None:
        raise ValueError(problem[0].upper() + problem[1:] + ".")


def first_difference(a: str, b: str) -> int | None:
    """Index of the first differing character, None when equal."""
    if a == b:
        return None
    for i, (x, y) in enumerate(zip(a, b, strict=False)):  # one may be a prefix of the other
        if x != y:
            return i
    return min(len(a), len(b))


def compare(req: RaceRequest, base: SideResult, spec: SideResult, *, cancelled: bool = False) -> RaceResult:
    """Put two sides together; speedups only from figures both sides really have."""
    return compare_arms(req, base, {FIRST_ARM: spec}, cancelled=cancelled)


def compare_arm(name: str, base: SideResult, spec: SideResult, *, label: str | None = None,
                method: str | None = None, named: bool = False, step_cost: float | None = None) -> ArmResult:
    """One arm against the baseline: speedups only from figures both sides really have, and the
    speedup against the arm's tokens per step (efficiency; over_bound: why it is no result when over
    its bound, 1 or what ``step_cost`` allows). ``named``: reasons name the arm (a race of several),
    not "speculative"."""
    arm = ArmResult(name=name, label=label, method=method, side=spec)
    who = name if named else None
    b, s = base.decode_tokens_per_s, spec.decode_tokens_per_s
    if b and s and not base.error and not spec.error:
        arm.speedup = s / b
    else:
        arm.na_reasons["speedup"] = _why_missing(base, spec, "decode_tokens_per_s", who)
    if base.e2e_s and spec.e2e_s and not base.error and not spec.error:
        arm.e2e_speedup = base.e2e_s / spec.e2e_s
    else:
        arm.na_reasons["e2e_speedup"] = _why_missing(base, spec, "e2e_s", who)
    if base.complete and spec.complete:
        # The answer: its text and its tool calls (names and arguments, compared as parsed JSON).
        arm.identical_text = same_answer(base, spec)
        arm.first_difference = first_difference(base.text, spec.text)
    else:
        arm.na_reasons["identical_text"] = "one side did not finish"
    length = spec.spec.mean_acceptance_length if spec.spec is not None else None
    arm.efficiency = efficiency(arm.speedup, length)
    arm.over_bound = over_bound(arm.speedup, length, step_cost=step_cost)
    arm.step_cost_note = step_cost_note(arm.speedup, length, step_cost)
    return arm


def compare_arms(req: RaceRequest, base: SideResult, arms: Mapping[str, SideResult], *, cancelled: bool = False,
                 endpoints: Mapping[str, Endpoint] | None = None) -> RaceResult:
    """The baseline against every arm (in order); the record's ``speculative``, ``speedup``,
    ``e2e_speedup``, ``identical_text`` and ``first_difference`` are the first arm's."""
    endpoints = endpoints or {}
    compared = {}
    for name, spec in arms.items():
        e = endpoints.get(name)
        compared[name] = compare_arm(name, base, spec, label=e.label if e else None, method=e.method if e else None,
                                     named=len(arms) > 1, step_cost=e.step_cost if e else None)
    return RaceResult(order=req.order, preset=req.preset, request=req, baseline=base, cancelled=cancelled,
                      arms=compared)


def _why_missing(base: SideResult, spec: SideResult, field: str, arm: str | None = None) -> str:
    def who(r: SideResult) -> str:
        return arm if arm and r is spec else r.side

    for r in (base, spec):
        if r.error:
            return f"{who(r)} failed"
    for r in (base, spec):
        if field in r.na_reasons:
            return f"{who(r)}: {r.na_reasons[field]}"
    return "not measured"


class _SideRun:
    """One side's request, fed into a SideMeter; errors land in the meter, never escape."""

    def __init__(self, endpoint: Endpoint, settings: Settings, http: ServerClient, changed: asyncio.Event):
        self.endpoint, self.side, self.url = endpoint, endpoint.side, endpoint.url
        self.settings, self.http, self.changed = settings, http, changed
        self.server = ServerHandle.of(endpoint, http)
        self.meter = SideMeter(endpoint.side, endpoint.url)
        self.model: str | None = endpoint.model
        self.before: MetricsSample | None = None

    async def prepare(self, req: RaceRequest) -> None:
        """Find the model, check the prompt fits, warm up; a failure marks the side failed."""
        try:
            self.model = await self.server.ensure_model(self.http, self.settings)
            self.meter.model = self.model
            await self.check_context(req)
            if req.warmup:
                async for _ in stream_completion(self.http, self.url, self.model, WARMUP):
                    pass
        except StreamError as e:
            self.meter.fail(str(e))

    async def check_context(self, req: RaceRequest) -> None:
        """Refuse before sending a prompt the server says is over its context length."""
        assert self.model is not None
        counted = await count_prompt_tokens(self.http, self.url, self.model, req, self.settings.probe_timeout_s + 2)
        if counted is None:
            return  # the server cannot tell: it will refuse with its own message if needed
        count, limit = counted
        if limit is None:
            return  # no max_model_len reported: the server refuses with its own message if needed
        if count >= limit:
            raise StreamError(
                f"The prompt is {count} tokens but {self.url} serves at most {limit} (max_model_len): "
                "shorten the prompt or start the server with a larger --max-model-len."
            )

    async def scrape_before(self) -> None:
        # Only needed when the server sends no per-request numbers; taken before the start
        # line so that in a race neither side waits for it.
        if self.side == "speculative" and not self.meter.error:
            self.before = await scrape_metrics(self.http, self.url, self.settings)

    async def run(self, req: RaceRequest, t0: float) -> None:
        if self.meter.error:
            return
        self.meter.start(t0)
        assert self.model is not None
        await stream_into(self.meter, self.http, self.url, self.model, req, t0=t0, on_event=self.changed.set)
        if self.side == "speculative" and self.meter.spec_request is None and self.meter.tokens:
            after = await scrape_metrics(self.http, self.url, self.settings)
            self.meter.spec_delta = spec_stats_from_delta(self.before, after)


def _side_runs(settings: Settings, http: ServerClient | None, changed: asyncio.Event) -> dict[str, _SideRun]:
    """A run per server, "baseline" then each arm by name, each on a client of its own (its own key
    and headers) unless the caller shares ``http``."""
    base = settings.endpoint("baseline")
    sides = {"baseline": _SideRun(base, settings, http or make_http_client(settings, endpoint=base), changed)}
    for e in settings.arm_endpoints():
        assert e.arm is not None
        sides[e.arm] = _SideRun(e, settings, http or make_http_client(settings, endpoint=e), changed)
    return sides


async def stream_race(
    req: RaceRequest,
    settings: Settings,
    *,
    http: ServerClient | None = None,
    interval_s: float = 0.05,
    stop: asyncio.Event | None = None,
    side_requests: Mapping[str, RaceRequest] | None = None,
) -> AsyncGenerator[RaceSnapshot, None]:
    """Run a race and yield snapshots at most every ``interval_s``; the last holds ``.result``.

    ``side_requests`` (by "baseline" and arm name) sends a side its own request instead of ``req``:
    in a session each side carries its own answers (demo.agent_race). ``req`` is the one the record keeps.

    Setting ``stop`` (or cancelling the consumer) closes every stream, so the servers abort
    the requests; with ``stop`` a final snapshot with a cancelled result still comes out.
    Use ``contextlib.aclosing`` when breaking out of the loop early.
    """
    validate_request(req, settings)
    for own in (side_requests or {}).values():
        validate_request(own, settings)
    changed = asyncio.Event()
    sides = _side_runs(settings, http, changed)
    endpoints = {e.arm: e for e in settings.arm_endpoints() if e.arm is not None}
    task: asyncio.Task[None] | None = None
    stop_wait: asyncio.Task[bool] | None = None
    cancelled = False

    try:
        yield _snapshot(req, sides)
        task = asyncio.create_task(_drive({name: (side_requests or {}).get(name, req) for name in sides}, sides))
        stop_wait = asyncio.create_task(stop.wait()) if stop else None
        while not task.done():
            await _next_change(task, changed, stop_wait)
            if stop is not None and stop.is_set() and not task.done():
                cancelled = True
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
                break
            changed.clear()
            yield _snapshot(req, sides)
            await asyncio.sleep(interval_s)  # throttle: many chunks fold into one snapshot
        if task.done() and not task.cancelled() and (exc := task.exception()) is not None:
            raise exc  # a bug, not a server fault: never swallow it
        if cancelled:
            for s in sides.values():
                s.meter.cancel()
        result = compare_arms(req, sides["baseline"].meter.result(),
                              {name: run.meter.result() for name, run in sides.items() if name != "baseline"},
                              cancelled=cancelled, endpoints=endpoints)
        yield _snapshot(req, sides, result)
    finally:
        if stop_wait is not None:
            stop_wait.cancel()
        if task is not None and not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        if http is None:
            await asyncio.gather(*(s.http.aclose() for s in sides.values()))


def _snapshot(req: RaceRequest, sides: dict[str, _SideRun], result: RaceResult | None = None) -> RaceSnapshot:
    """Every side as it stands, with each arm's live speedup while it and the baseline stream without error."""
    base = sides["baseline"].meter.snapshot()
    arms: dict[str, ArmSnapshot] = {}
    for name, run in sides.items():
        if name == "baseline":
            continue
        snap = run.meter.snapshot()
        live = None
        if base.tokens_per_s and snap.tokens_per_s and not base.error and not snap.error:
            live = snap.tokens_per_s / base.tokens_per_s
        arms[name] = ArmSnapshot(name=name, label=run.endpoint.label, method=run.endpoint.method, side=snap,
                                 live_speedup=live)
    first = next(iter(arms.values()))
    return RaceSnapshot(order=req.order, baseline=base, speculative=first.side, live_speedup=first.live_speedup,
                        result=result, arms=arms)


async def _drive(reqs: Mapping[str, RaceRequest], sides: dict[str, _SideRun]) -> None:
    """Every side's request (``reqs`` by side name), in the race's order: all at once from one start
    line, or one after the other (the baseline, then each arm in its order)."""
    await asyncio.gather(*(s.prepare(reqs[name]) for name, s in sides.items()))
    with collector_paused():  # no collector pause at a measured token
        if reqs["baseline"].order == "simultaneous":
            await asyncio.gather(*(s.scrape_before() for s in sides.values()))
            t0 = time.perf_counter()
            await asyncio.gather(*(s.run(reqs[name], t0) for name, s in sides.items()))
        else:
            for name, s in sides.items():
                await s.scrape_before()
                await s.run(reqs[name], time.perf_counter())


async def _next_change(task: asyncio.Task[None], changed: asyncio.Event, stop_wait: asyncio.Task[bool] | None) -> None:
    """Until a side changed, the race ended, Stop was pressed, or a heartbeat passed."""
    waiters: set[asyncio.Future[Any]] = {task, asyncio.ensure_future(changed.wait())}
    if stop_wait:
        waiters.add(stop_wait)
    # The timeout is a heartbeat: elapsed time keeps moving while a server is silent.
    await asyncio.wait(waiters, timeout=HEARTBEAT_S, return_when=asyncio.FIRST_COMPLETED)
    for w in waiters:
        if w is not task and w is not stop_wait and not w.done():
            w.cancel()


async def run_race(req: RaceRequest, settings: Settings, *, http: ServerClient | None = None) -> RaceResult:
    """Run a race to the end and return its result."""
    result: RaceResult | None = None
    async for snapshot in stream_race(req, settings, http=http):
        result = snapshot.result or result
    assert result is not None
    return result
