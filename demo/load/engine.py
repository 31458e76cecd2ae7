"""Load: N users per side, and a sweep over user counts, on the evaluator's own engine.

A *step* of a load sweep is one evaluator cell (demo/sweep/runner.py ``run_cell``): ``users``
copies of one prompt start together on a server, measured per request by demo.measure.SideMeter
and pooled by demo/sweep/pooling.py; one repeat and no warm-up by default, so the lesson takes
minutes. Users here and ``--concurrency`` in the evaluator are the same quantity: streams at once
per server. ``python -m demo race --users N`` is a sweep of one step.

The records (units in the names):

- ``LoadSide``: one server at one step: per-user decode tokens/s (median over users, min, max),
  total output tokens/s, TTFT p95, ITL p95, and the server's pressure (queue peak, KV-cache peak,
  preemptions), each None with its reason in ``na_reasons``.
- ``LoadStep``: one users count, a view over the evaluator's cell of that count (``cell``, the
  one record it keeps, which names the two ratios alike): the baseline, the speculative side,
  ``speedup`` (per-user decode speedup) and ``throughput_ratio`` (total over total), read off the
  cell and written beside it in the JSON.
- ``LoadResult``: the spec, the steps, the crossover (demo/sweep/crossover.py, shared with the
  verdict) and, with a latency target, the most users each side serves within it.

Arms (several speculative servers, ``LoadSpec.arms``): each step's cell measures the baseline batch
and then each arm's (or all at once), and the step shows every arm as ``arms: {name: ArmStep(side,
speedup, throughput_ratio)}``, with ``speculative``/``speedup``/``throughput_ratio`` the first
arm's as with one arm (``LoadStep.arm_view`` gives any arm's step); the result has one
crossover per arm (``crossovers``, from the same ``find_crossover``; ``crossover`` is the first
arm's) and ``arms_text``, the one line of ``choose_arms`` that the evaluator's verdict also writes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime
from functools import cached_property
from typing import Literal

from pydantic import BaseModel, Field, ValidationError, computed_field, model_validator

from demo.client import ServerClient
from demo.fmt import validation_summary
from demo.limits import Repeats, WarmupBatches
from demo.load.rate import run_rate_sweep
from demo.load.rate_models import RateLoad, RateStep, RateSummary
from demo.load.rate_summary import rate_summary
from demo.measure import SideMeter
from demo.race import compare
from demo.results import (
    FIRST_ARM,
    SIDES,
    Api,
    Order,
    RaceRequest,
    RaceResult,
    Side,
    SideResult,
    StreamProgress,
)
from demo.sampling import SAMPLING_FIELDS
from demo.settings import Settings
from demo.slo import Slo
from demo.streaming import Fleet, ServerHandle
from demo.sweep.crossover import Crossover, choose_arms, find_crossover
from demo.sweep.models import (
    ArmSpec,
    CellResult,
    CellSettings,
    CellStatus,
    NoRecommendation,
    Recommendation,
    SideCell,
    Spread,
)
from demo.sweep.runner import StreamObserver, make_servers, run_cell, settings_arms
from demo.sweep.schedule import recommend, server_points
from demo.workload import WorkloadRequest

# SideCell's reason keys -> LoadSide's field names.
_REASONS = {
    "decode_tokens_per_s_p50": "per_user_decode_tokens_per_s",
    "output_tokens_per_s": "output_tokens_per_s",
    "ttft_p50_s": "ttft_p95_s",
    "itl_p95_s": "itl_p95_s",
    "kv_cache_usage_peak_perc": "kv_cache_usage_peak_perc",
    "num_requests_waiting_peak": "num_requests_waiting_peak",
    "num_preemptions": "num_preemptions",
}


class LoadSpec(BaseModel):
    """What was asked for: the user counts (or, open-loop, the request rates) and how each step is measured."""

    users: list[int] = Field(default_factory=list)  # ascending, distinct; empty with ``rate``
    # Open loop (demo/load/rate.py): requests per second, each sent at its time; None: closed-loop users.
    rate: RateLoad | None = None
    workload: str  # the preset's name, or "prompt" for a free prompt
    max_tokens: int
    temperature: float
    api: Api = "chat"
    # sequential (the load sweep's default): baseline batch, then speculative; simultaneous: both at once.
    order: Order = "sequential"
    repeats: Repeats = 1
    warmup: WarmupBatches = 0
    slo: Slo | None = None
    baseline_url: str
    speculative_url: str  # the first arm's
    # Every arm in order, the first at speculative_url; empty: that one only (named "speculative").
    arms: list[ArmSpec] = Field(default_factory=list)

    @model_validator(mode="after")
    def _users_or_rate(self) -> LoadSpec:
        if not self.users and self.rate is None:
            raise ValueError("give user counts or request rates")
        if self.users and self.rate is not None:
            raise ValueError("give user counts or request rates, not both")
        return self

    def arm_list(self) -> list[ArmSpec]:
        """The arms to measure: those given, else the one arm of a pair at ``speculative_url``."""
        return self.arms or [ArmSpec(name=FIRST_ARM, url=self.speculative_url)]


class LoadSide(BaseModel):
    """One server at one users count (its batch: ``users`` streams started together)."""

    side: str  # "baseline" or "speculative" (an arm's name, later)
    users: int
    ok_users: int = 0  # requests that finished, over the repeats
    per_user_decode_tokens_per_s: float | None = None  # median over users (of a repeat; median of repeats)
    per_user_decode_tokens_per_s_min: float | None = None  # the slowest user's
    per_user_decode_tokens_per_s_max: float | None = None  # the fastest user's
    output_tokens_per_s: float | None = None  # total: every user's tokens / the batch's wall time
    ttft_p95_s: float | None = None
    itl_p95_s: float | None = None  # over every token of the batch
    num_requests_waiting_peak: float | None = None  # the server's queue (vllm:num_requests_waiting)
    kv_cache_usage_peak_perc: float | None = None  # 0..1 (vllm:kv_cache_usage_perc)
    num_preemptions: int | None = None  # vllm:num_preemptions_total over the batch
    # The client's own headroom (demo/sweep/headroom.py), the worst over the batches: with
    # client_limited the speeds may be the client's ceiling, not the server's (client_note says why).
    client_loop_lag_p95_ms: float | None = None
    client_cpu_share: float | None = None  # of one core
    client_limited: bool = False
    client_note: str | None = None
    errors: list[str] = Field(default_factory=list)
    na_reasons: dict[str, str] = Field(default_factory=dict)


class ArmStep(BaseModel):
    """One arm at one users count: its batch and its ratios to the same step's baseline batch."""

    name: str
    side: LoadSide
    speedup: float | None = None  # per-user decode speedup, the arm over the baseline (median of the repeats)
    throughput_ratio: float | None = None  # total output tokens/s, the arm over the baseline
    # The per-user decode speedup over the step's repeats (median, lowest, highest, how many): with
    # --repeats N, a dip can be told from noise. None: not measured.
    speedup_repeats: Spread | None = None
    na_reasons: dict[str, str] = Field(default_factory=dict)


class LoadStep(BaseModel):
    """One users count measured on the baseline and every arm: a view over the evaluator's cell of
    that count (``cell``, the one record a step keeps).

    Its figures, named for users, are read off the cell when first asked and written beside it in
    the JSON, for readers of load.json; loading reads the cell only. Each ratio
    is None, with its reason in ``na_reasons``, when either side did not measure it."""

    cell: CellResult  # the evaluator's record of this step, every figure

    @computed_field  # type: ignore[prop-decorator]
    @property
    def users(self) -> int:
        """Streams at once per server: the cell's concurrency."""
        return self.cell.settings.concurrency

    @computed_field  # type: ignore[prop-decorator]
    @property
    def status(self) -> CellStatus:
        """The cell's status."""
        return self.cell.status

    @computed_field  # type: ignore[prop-decorator]
    @cached_property
    def baseline(self) -> LoadSide:
        """The baseline's batch, as users see it."""
        return _side("baseline", self.cell.baseline, self.cell)

    @computed_field  # type: ignore[prop-decorator]
    @cached_property
    def arms(self) -> dict[str, ArmStep]:
        """Every arm in order: its batch and its ratios to the baseline's (through CellResult.arm_view)."""
        return {name: _arm_step(self.cell, name) for name in self.cell.arms}

    @computed_field  # type: ignore[prop-decorator]
    @cached_property
    def speculative(self) -> LoadSide:
        """The first arm's batch, named "speculative" (as a pair's)."""
        side = self.first_arm.side
        return side if side.side == "speculative" else side.model_copy(update={"side": "speculative"})

    @computed_field  # type: ignore[prop-decorator]
    @property
    def speedup(self) -> float | None:
        """The first arm's per-user decode speedup: its median per-user decode tokens/s over the
        baseline's (the cell's ``speedup``; a one-user race's speedup)."""
        return self.first_arm.speedup

    @computed_field  # type: ignore[prop-decorator]
    @property
    def throughput_ratio(self) -> float | None:
        """The first arm's total output tokens/s over the baseline's (the cell's ``throughput_ratio``)."""
        return self.first_arm.throughput_ratio

    @computed_field  # type: ignore[prop-decorator]
    @property
    def errors(self) -> list[str]:
        """The cell's one-line errors (each prefixed with its side)."""
        return list(self.cell.errors)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def na_reasons(self) -> dict[str, str]:
        """Why the first arm's ratios are None, by name."""
        return self.first_arm.na_reasons

    def arm_view(self, name: str) -> LoadStep:
        """This step as a step of one arm, ``name``: its figures in ``speculative``, ``speedup``
        and ``throughput_ratio`` (the view over CellResult.arm_view)."""
        return LoadStep(cell=self.cell.arm_view(name))

    @property
    def first_arm(self) -> ArmStep:
        """The first arm: the one a pair's figures describe."""
        return next(iter(self.arms.values()))


class LoadResult(BaseModel):
    """A load sweep: its spec, the steps measured so far, and the crossovers read off them.

    ``interrupted`` marks a sweep stopped before its last step; the steps it has are still valid."""

    kind: Literal["load"] = "load"
    spec: LoadSpec
    started_at: datetime = Field(default_factory=lambda: datetime.now(UTC))
    interrupted: bool = False
    steps: list[LoadStep] = Field(default_factory=list)
    crossover: Crossover = Field(default_factory=Crossover)  # the first arm's
    crossovers: dict[str, Crossover] = Field(default_factory=dict)  # every arm's, in order
    arms_text: str = ""  # with several arms: which to enable up to which count (choose_arms)
    # With a latency target: per side (and, with several arms, per arm by name), the most users
    # measured at which it is met (None: at none).
    slo_users: dict[str, int | None] = Field(default_factory=dict)
    # The schedule of k per users band (demo/sweep/schedule.py); None: no step yet.
    recommendation: Recommendation | NoRecommendation | None = None
    # Open loop (spec.rate): one step per request rate, and what they say (capacity, crossovers).
    rate_steps: list[RateStep] = Field(default_factory=list)
    rate_summary: RateSummary | None = None


class UsersRace(BaseModel):
    """A race of N users per side (the Race tab's Users, ``race --users N``), as it is saved
    (demo/runs/store.py), replayed and exported: user 1's race (both sides' answers with their events:
    the panes, the replay) and the step (every user's figures: the per-user speedup, the
    throughput ratio, the tiles). ``race.speedup`` is user 1's own; the headline is ``step``'s."""

    kind: Literal["users"] = "users"
    users: int = Field(ge=2)
    race: RaceResult
    step: LoadStep

    @property
    def order(self) -> Order:
        """The race's order: sequential or simultaneous."""
        return self.race.order

    @property
    def started_at(self) -> datetime:
        """When the race started (UTC)."""
        return self.race.started_at

    @property
    def preset(self) -> str | None:
        """The race's preset name; None for a prompt of the user's own."""
        return self.race.preset


class StreamWatch:
    """A StreamObserver (demo.sweep.runner) keeping the meters of the first ``users`` users of the
    baseline and of every arm, keyed by the server's name ("baseline", else the arm's): the live
    page's strip and user 1's text (demo.live.users), a saved race's user 1 (``race --users``).
    ``arms`` names the arms in order, the first being the record's ``speculative`` (default: the
    one arm of a pair, "speculative"). Marks itself ``changed`` on every event and does nothing
    else there: a viewer reads the meters when it draws, and clears ``changed``."""

    def __init__(self, users: int = 1, arms: list[str] | None = None) -> None:
        self.arms = list(arms or [FIRST_ARM])
        self.meters: dict[str, list[SideMeter | None]] = {}
        self.users = users
        self.changed = False
        self.reset(users)

    def reset(self, users: int) -> None:
        """Watch ``users`` users afresh (a load sweep's next step)."""
        self.users = users
        self.meters = {name: [None] * users for name in ("baseline", *self.arms)}
        self.changed = False

    def __call__(self, server: str, index: int, meter: SideMeter) -> None:
        """Keep ``meter`` as user ``index``'s of ``server`` (users past the first ``users`` are ignored) and mark a
        change."""
        row = self.meters.setdefault(server, [None] * self.users)  # an arm it was not told of: watched too
        if index < len(row):
            row[index] = meter
        self.changed = True

    def _key(self, side: str) -> str:
        """A side's server: "speculative" is the first arm; any other name is itself."""
        return self.arms[0] if side == "speculative" else side

    def first(self) -> dict[Side, SideMeter]:
        """User 1's meter per side, the first arm's as ``speculative`` (a side whose user 1 never
        started is left out)."""
        return {side: m for side in SIDES if (m := self.meters.get(self._key(side), [None])[0]) is not None}

    def first_of_arms(self) -> dict[str, SideMeter]:
        """User 1's meter of every arm, by its name (an arm whose user 1 never started is left out)."""
        return {name: m for name, row in self.meters.items() if name != "baseline" and (m := row[0]) is not None}

    def progress(self, side: str) -> list[StreamProgress | None]:
        """Every watched user's tokens so far and status (None: not started), of a side
        ("baseline", "speculative": the first arm) or an arm by its name."""
        row = self.meters.get(self._key(side), [None] * self.users)
        return [m.progress() if m is not None else None for m in row]


def users_race(req: RaceRequest, step: LoadStep, first: dict[Side, SideMeter], settings: Settings,
               cancelled: bool = False) -> UsersRace:
    """The record of an N-user race: user 1's answers (a side that never sent it fails with the
    step's error for that side) and the step."""
    def side_result(side: Side) -> SideResult:
        meter = first.get(side)
        if meter is not None:
            return meter.result()
        sided: LoadSide = getattr(step, side)
        why = sided.errors[0] if sided.errors else ("stopped before it started" if cancelled else "not sent")
        return SideResult(side=side, url=settings.endpoint(side).url, error=why)

    return UsersRace(users=step.users, step=step,
                     race=compare(req, side_result("baseline"), side_result("speculative"), cancelled=cancelled))


StepFn = Callable[[LoadStep], None]
ProgressFn = Callable[[str], None]


def check_users(values: list[int], max_users: int) -> None:
    """ValueError (one line) unless every count is a whole number from 1 to max_users."""
    for v in values:
        if v < 1 or v > max_users:
            raise ValueError(f"users must be from 1 to {max_users} (SPECDEMO_MAX_USERS), got {v}")


def parse_users(text: str, max_users: int) -> list[int]:
    """'1,2,4' -> [1, 2, 4] (ascending, distinct); ValueError with a one-line message."""
    parts = [p.strip() for p in str(text).split(",") if p.strip()]
    if not parts:
        raise ValueError("users is empty: give counts such as 1,2,4,8")
    values = []
    for p in parts:
        if not p.lstrip("-").isdigit():
            raise ValueError(f"users must be whole numbers from 1 to {max_users}, got {p!r}")
        values.append(int(p))
    check_users(values, max_users)
    return sorted(set(values))


def load_spec(settings: Settings, req: RaceRequest, users: list[int], order: str, repeats: int = 1,
              warmup: int = 0, slo: Slo | None = None, rate: RateLoad | None = None) -> LoadSpec:
    """The sweep of ``req`` over ``users`` (or, ``rate`` given, over its request rates) on the settings'
    servers (the CLI's and the page's); ValueError with a one-line message for what LoadSpec refuses."""
    try:
        return LoadSpec(users=users, rate=rate, workload=req.preset or "prompt", max_tokens=req.max_tokens,
                        temperature=req.temperature, api=req.api, order=order, repeats=repeats, warmup=warmup,
                        slo=slo, baseline_url=settings.baseline_url, speculative_url=settings.speculative_url,
                        arms=settings_arms(settings))
    except ValidationError as e:
        raise ValueError(validation_summary(e)) from e


def request_from_race(req: RaceRequest) -> WorkloadRequest:
    """The request each user sends: a race's request (its seed and sampling fields too), in the
    evaluator's vocabulary."""
    return WorkloadRequest(id=req.preset or "prompt", api=req.api, messages=req.messages, prompt=req.prompt,
                           max_tokens=req.max_tokens, temperature=req.temperature, seed=req.seed,
                           **{name: getattr(req, name) for name in SAMPLING_FIELDS})


def _side(side: str, sc: SideCell, cell: CellResult, shown: str | None = None) -> LoadSide:
    """``side``'s figures (its errors are those prefixed ``side: ``), named ``shown`` (default ``side``)."""
    out = LoadSide(side=shown or side, users=cell.settings.concurrency, ok_users=sc.ok_requests,
                   per_user_decode_tokens_per_s=sc.decode_tokens_per_s.median if sc.decode_tokens_per_s else None,
                   output_tokens_per_s=sc.output_tokens_per_s.median if sc.output_tokens_per_s else None,
                   ttft_p95_s=sc.ttft_p95_s, itl_p95_s=sc.itl_p95_s,
                   num_requests_waiting_peak=sc.num_requests_waiting_peak,
                   kv_cache_usage_peak_perc=sc.kv_cache_usage_peak_perc, num_preemptions=sc.num_preemptions,
                   errors=[e.removeprefix(f"{side}: ") for e in cell.errors if e.startswith(f"{side}: ")])
    lows = [b.decode_tokens_per_s_min for b in sc.batches if b.decode_tokens_per_s_min is not None]
    highs = [b.decode_tokens_per_s_max for b in sc.batches if b.decode_tokens_per_s_max is not None]
    out.per_user_decode_tokens_per_s_min = min(lows) if lows else None
    out.per_user_decode_tokens_per_s_max = max(highs) if highs else None
    clients = [b.client for b in sc.batches if b.client is not None]
    lags = [c.loop_lag_p95_ms for c in clients if c.loop_lag_p95_ms is not None]
    cpus = [c.cpu_share for c in clients if c.cpu_share is not None]
    out.client_loop_lag_p95_ms, out.client_cpu_share = (max(lags) if lags else None), (max(cpus) if cpus else None)
    out.client_limited = any(c.limited for c in clients)
    out.client_note = next((c.note for c in clients if c.note), None)
    for key, name in _REASONS.items():
        if getattr(out, name) is None and key in sc.na_reasons:
            out.na_reasons.setdefault(name, sc.na_reasons[key])
    for name in _REASONS.values():
        if getattr(out, name) is None:
            out.na_reasons.setdefault(name, out.errors[0] if out.errors else "not measured")
    return out


def _arm_step(cell: CellResult, name: str) -> ArmStep:
    """Arm ``name`` of ``cell`` at its step: its side, named as the page shows it (its own name
    with several arms, "speculative" with one), and its two ratios' medians (why each is None)."""
    view = cell.arm_view(name)
    why = {f: view.reason(f) or "not measured" for f in ("speedup", "throughput_ratio")
           if getattr(view, f) is None}
    shown = name if len(cell.arms) > 1 else None
    return ArmStep(name=name, side=_side("speculative", view.speculative, view, shown=shown),
                   speedup=view.speedup.median if view.speedup else None,
                   throughput_ratio=view.throughput_ratio.median if view.throughput_ratio else None,
                   speedup_repeats=view.speedup, na_reasons=why)


def within_slo(side: LoadSide, slo: Slo) -> bool:
    """The side's step meets the target on its p95s and per-user speed (an unknown figure does not)."""
    measured = {("ttft", 95): side.ttft_p95_s, ("itl", 95): side.itl_p95_s}
    return slo.check(lambda figure, q: measured.get((figure, q)), side.per_user_decode_tokens_per_s).meets is True


def finish(result: LoadResult) -> LoadResult:
    """The crossover and the SLO figures from the steps so far (called after every step)."""
    if result.spec.rate is not None:
        stopped = result.rate_summary.stopped_note if result.rate_summary else ""
        configs = {a.name: {"method": a.method} for a in result.spec.arm_list() if a.method}
        result.rate_summary = rate_summary(result.spec.rate, result.rate_steps, configs)
        result.rate_summary.stopped_note = stopped
        return result
    result.crossover = find_crossover([(s.users, s.speedup) for s in result.steps])
    names = [a.name for a in result.spec.arm_list()]
    choice = choose_arms({n: [(s.users, s.arms[n].speedup if n in s.arms else None) for s in result.steps]
                          for n in names})
    result.crossovers = choice.crossovers
    result.arms_text = choice.text if len(names) > 1 else ""
    result.recommendation = recommend_schedule(result)
    slo = result.spec.slo
    if slo is not None and slo.given:
        for side in SIDES:
            ok = [s.users for s in result.steps if within_slo(getattr(s, side), slo)]
            result.slo_users[side] = max(ok) if ok else None
        for n in names if len(names) > 1 else []:
            ok = [s.users for s in result.steps if n in s.arms and within_slo(s.arms[n].side, slo)]
            result.slo_users[n] = max(ok) if ok else None
    return result


def recommend_schedule(result: LoadResult, slo: Slo | None = None) -> Recommendation | NoRecommendation:
    """The schedule of k per users band from the steps so far; ``slo`` (default: the latency target's
    decode part, Slo.decode_part) is what a band's k must meet."""
    target = result.spec.slo
    if slo is None and target is not None and target.decode_part().given:
        slo = target.decode_part()
    configs = {a.name: {"method": a.method} for a in result.spec.arm_list() if a.method}
    return recommend(server_points([s.cell for s in result.steps]), configs, slo, workload=result.spec.workload)


def _cell_settings(spec: LoadSpec, users: int, requests: int = 1) -> CellSettings:
    return CellSettings(preset=spec.workload, kind="preset", temperature=spec.temperature, concurrency=users,
                        max_tokens=spec.max_tokens, requests=requests, api=spec.api, repeats=spec.repeats,
                        warmup=spec.warmup, order=spec.order, baseline_url=spec.baseline_url,
                        speculative_url=spec.speculative_url)


async def _rate_steps(rate: RateLoad, servers: dict[str, ServerHandle], reqs: list[WorkloadRequest],
                      settings: Settings, result: LoadResult, on_rate_step: Callable[[RateStep], None] | None,
                      on_progress: ProgressFn | None) -> LoadResult:
    """The open-loop rate steps (demo/load/rate.py) into ``result``, each written and handed to
    ``on_rate_step`` as it ends; cancelled, the result is marked interrupted and kept."""

    def rate_step(step: RateStep) -> None:
        finish(result)
        if on_rate_step is not None:
            on_rate_step(step)

    try:
        summary = await run_rate_sweep(rate, servers, [r.to_race_request() for r in reqs], settings,
                                       result.rate_steps, on_step=rate_step, on_progress=on_progress)
    except asyncio.CancelledError:
        result.interrupted = True
        finish(result)
        raise
    result.rate_summary = summary
    return finish(result)


async def run_load(spec: LoadSpec, request: WorkloadRequest | list[WorkloadRequest], settings: Settings, *,
                   on_step: StepFn | None = None, on_progress: ProgressFn | None = None,
                   http: ServerClient | None = None, result: LoadResult | None = None,
                   observe: StreamObserver | None = None,
                   on_rate_step: Callable[[RateStep], None] | None = None, fleet: Fleet | None = None) -> LoadResult:
    """Every users count of ``spec``, ascending, each a cell of ``request`` copied ``users`` times
    (a list: user i sends request i, wrapping round when it is shorter; longer, every request is
    sent once, ``users`` at a time, as an evaluator workload cell), appended to
    ``result`` (a new one if None) as each ends. Every request is sent with the spec's max_tokens
    and temperature. A failing server never stops the sweep: its step records the error.
    Cancelled, the result holds the finished steps (and the one in progress, as ``interrupted``).
    ``observe`` watches every stream of the measured batches (demo.sweep.runner.StreamObserver:
    the side, the user's index, its meter). With ``spec.rate``: the open-loop rate steps instead
    (demo/load/rate.py; arrival i sends request i of ``request``, wrapping round), each handed to
    ``on_rate_step`` as it ends; a replay (``spec.rate.replay``) sends each request as the file gave it.
    ``fleet`` (``--ray``): its workers send the requests, this process measures."""
    result = result if result is not None else LoadResult(spec=spec)
    servers = make_servers(settings, spec.baseline_url, spec.arm_list(), http, fleet)
    reqs = request if isinstance(request, list) else [request]
    if spec.rate is None or spec.rate.replay is None:  # a replay sends each request's own length and sampling
        reqs = [r.model_copy(update={"max_tokens": spec.max_tokens, "temperature": spec.temperature}) for r in reqs]

    def progress(label: str, done: bool) -> None:
        if on_progress is not None and not done:
            on_progress(label)

    def interrupted(cell: CellResult) -> None:
        result.steps.append(LoadStep(cell=cell))

    try:
        if spec.rate is not None:
            return await _rate_steps(spec.rate, servers, reqs, settings, result, on_rate_step, on_progress)
        for users in spec.users:
            try:
                cell = await run_cell(_cell_settings(spec, users, len(reqs)), reqs, servers, settings, progress,
                                      interrupted, observe=observe)
            except asyncio.CancelledError:
                result.interrupted = True
                finish(result)
                raise
            step = LoadStep(cell=cell)
            result.steps.append(step)
            finish(result)
            if on_step is not None:
                on_step(step)
    finally:
        if http is None:
            await asyncio.gather(*(s.http.aclose() for s in servers.values()))
    return finish(result)
