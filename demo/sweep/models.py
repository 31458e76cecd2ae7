"""The evaluator's records: one per batch, per side of a cell, per cell, per workload verdict,
and the whole sweep. Units are in the names; an unknown figure is None with its reason in
``na_reasons``. results.json is ``SweepResult.model_dump_json()``; the report and the page
print these objects and compute nothing of their own.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, Field, SerializerFunctionWrapHandler, computed_field, field_serializer, model_validator

from common.spec_schedule import check_schedule
from demo.limits import Concurrency, MaxTokens, Repeats, Temperature, WarmupBatches
from demo.measure import over_bound, step_cost_note
from demo.results import FIRST_ARM, Api, Order, Side, arms_out, first_arm_in
from demo.server_info import ServerInfo
from demo.slo import Slo
from demo.sweep.capacity import Capacity
from demo.sweep.headroom import ClientHeadroom
from demo.sweep.profile import RequestOutcome, WorkloadProfile
from demo.workload import Format, History, LoadIssue, SampleInfo, Workload

# 2: workloads (a file of the customer's requests), per-request outcomes, profile, capacity and
# cost, redaction. Version 1 files load unchanged (every new field has a default).
# 3: one word per figure, as the README defines them: ``speedup`` is the decode ratio (per-request
# decode tokens/s, as a race's), ``throughput_ratio`` the aggregate output-tokens/s ratio. Versions
# 1-2 called these ``decode_speedup`` and ``speedup``; such files are read with those meanings
# (``old_ratio_names``).
SCHEMA_VERSION = 3
# The two ratios' names before version 3 -> their names since.
OLD_RATIO_NAMES = {"speedup": "throughput_ratio", "decode_speedup": "speedup"}
CellStatus = Literal["ok", "partial", "failed", "interrupted"]
Decision = Literal["enable", "don't", "depends", "unknown"]


def _now() -> datetime:
    return datetime.now(UTC)


class WorkloadSpec(BaseModel):
    """The customer's workload file as the sweep used it (never its text: that stays in the file)."""

    name: str
    source: str  # the path as given
    format: Format  # the form read (jsonl, csv, folder, openai-batch, openai-body, sharegpt)
    requests: int  # requests measured (after --sample)
    read: int | None = None  # usable requests read from the file (before --sample); None: a results file without it
    skipped: int = 0  # lines skipped (each in issues)
    sample: SampleInfo | None = None
    issues: list[LoadIssue] = Field(default_factory=list)  # skipped lines, by file and line
    ignored_fields: dict[str, int] = Field(default_factory=dict)  # field -> lines it was ignored on
    # Sessions and turns measured (a request without a session is a session of one turn); None: a
    # results file that does not count them (an older version's, which still loads).
    sessions: int | None = None
    turns: int | None = None
    history: History | None = None  # how sessions' turns got their history ("logged"); None: no sessions
    repeated_ids: int = 0  # requests whose id an earlier line had (read, made unique)

    @model_validator(mode="before")
    @classmethod
    def _skipped_of_a_sweep_from_before(cls, data: Any) -> Any:
        if isinstance(data, dict) and "skipped" not in data:
            data = {**data, "skipped": len(data.get("issues") or [])}
        return data

    @classmethod
    def of(cls, workload: Workload) -> WorkloadSpec:
        """The record of a loaded workload: its form, counts, skipped lines and ignored fields."""
        return cls(name=workload.name, source=workload.source, format=workload.format,
                   requests=len(workload.requests), read=workload.read, skipped=len(workload.issues),
                   sample=workload.sample, issues=workload.issues, ignored_fields=workload.ignored_fields,
                   sessions=workload.sessions, turns=workload.turns, history=workload.history,
                   repeated_ids=workload.repeated_ids)


class ArmSpec(BaseModel):
    """One arm (speculative server) of a sweep, as configured (Settings.arm_endpoints())."""

    name: str
    url: str
    label: str | None = None
    method: str | None = None
    # A verification step in the baseline's plain steps, timed alone by `servers up` at warm-up
    # (Endpoint.step_cost): the efficiency bound of a cell at concurrency 1; None: not timed.
    step_cost: float | None = None


class SweepSpec(BaseModel):
    """What the user asked for: the settings that produced every cell."""

    baseline_url: str
    speculative_url: str  # the first arm's
    # Every arm in order, the first at speculative_url; empty (a spec without arms): that one only.
    arms: list[ArmSpec] = Field(default_factory=list)
    # With a shared GPU: each server's share of it ("baseline" and arm names -> 0..1, e.g. its
    # --gpu-memory-utilization), so the report says which part of the price each carries; None: not given.
    gpu_shares: dict[str, float] | None = None
    presets: list[str] = Field(default_factory=list)
    workload: WorkloadSpec | None = None
    concurrency: list[Concurrency] = Field(default_factory=lambda: [1], min_length=1)
    # None: each preset's own temperature.
    temperatures: list[Temperature] | None = None
    repeats: Repeats = 3
    warmup: WarmupBatches = 1  # untimed batches per server before each cell
    max_tokens: MaxTokens | None = None  # None: each preset's own
    # sequential: baseline batch, then speculative batch (each server alone: the fair A/B).
    order: Order = "sequential"
    # No prompt or answer text in any output (results.json, results.csv, report.html): ids, token
    # counts and sha256 hashes stay.
    redact: bool = False
    slo: Slo | None = None  # the latency target for the capacity point
    gpu_hour_price: float | None = Field(None, gt=0)  # what one GPU-hour costs (capacity and cost)
    shared_gpu: bool = False  # both servers on one GPU: the price covers the pair

    @model_validator(mode="after")
    def _something_to_run(self) -> SweepSpec:
        if not self.presets and self.workload is None:
            raise ValueError("nothing to measure: give presets or a workload file")
        return self


class CellSettings(BaseModel):
    """The exact settings of one cell (repeated in every record so a row stands on its own)."""

    preset: str  # the workload's name: a preset's, or the workload file's
    kind: Literal["preset", "workload"] = "preset"
    temperature: float | None  # None: each request's own (a workload file)
    concurrency: int
    max_tokens: int  # a preset's; for a workload file, the cap on each request's own
    requests: int = 1  # distinct requests (a preset: 1; at concurrency c, c streams share them)
    api: Api
    repeats: int
    warmup: int
    order: Order
    baseline_url: str
    speculative_url: str


class BatchStats(BaseModel):
    """One side's batch: ``concurrency`` identical requests started together."""

    side: Side
    requests: int
    ok_requests: int = 0  # finished with [DONE] and no error
    errors: list[str] = Field(default_factory=list)  # distinct one-line messages
    completion_tokens_total: int = 0  # over the ok requests, from the server's usage
    wall_s: float | None = None  # batch start to the last request's end
    output_tokens_per_s: float | None = None  # aggregate: completion_tokens_total / wall_s
    decode_tokens_per_s_p50: float | None = None  # median over requests of each one's decode rate
    decode_tokens_per_s_min: float | None = None  # the slowest request's (user's) decode rate
    decode_tokens_per_s_max: float | None = None  # the fastest request's
    ttft_p50_s: float | None = None
    ttft_p95_s: float | None = None
    # Over every token of the batch (each chunk's gap spread over its tokens).
    itl_p50_s: float | None = None
    itl_p95_s: float | None = None
    e2e_p50_s: float | None = None
    e2e_p95_s: float | None = None
    kv_cache_usage_peak_perc: float | None = None  # 0..1, highest /metrics sample in the batch
    # The server's queue: highest vllm:num_requests_waiting of the batch's /metrics samples.
    num_requests_waiting_peak: float | None = None
    num_preemptions: int | None = None  # vllm:num_preemptions_total after the batch minus before
    client: ClientHeadroom | None = None  # the client's own event-loop lag and CPU during the batch
    accepted_tokens: int | None = None
    draft_tokens: int | None = None
    drafts: int | None = None
    num_spec_tokens: int | None = None
    acceptance_source: Literal["per_request", "metrics_delta"] | None = None
    sample_text: str = ""  # the first answer's opening (model output: escape before HTML)
    na_reasons: dict[str, str] = Field(default_factory=dict)


class Spread(BaseModel):
    """A figure over the repeats: median, lowest, highest."""

    median: float
    min: float
    max: float
    n: int


class SideCell(BaseModel):
    """One side of a cell, over its repeats (medians of the per-batch figures)."""

    side: Side
    requests: int = 0
    ok_requests: int = 0
    output_tokens_per_s: Spread | None = None
    decode_tokens_per_s: Spread | None = None
    ttft_p50_s: float | None = None
    ttft_p95_s: float | None = None
    itl_p50_s: float | None = None
    itl_p95_s: float | None = None
    e2e_p50_s: float | None = None
    e2e_p95_s: float | None = None
    prefill_share: float | None = None  # ttft_p50_s / e2e_p50_s
    kv_cache_usage_peak_perc: float | None = None
    num_requests_waiting_peak: float | None = None  # highest over the batches
    num_preemptions: int | None = None  # summed over the batches
    sample_text: str = ""
    batches: list[BatchStats] = Field(default_factory=list)
    na_reasons: dict[str, str] = Field(default_factory=dict)


def _renamed(record: dict[str, Any]) -> dict[str, Any]:
    out = {OLD_RATIO_NAMES.get(k, k): v for k, v in record.items()}
    if isinstance(record.get("na_reasons"), dict):
        out["na_reasons"] = {OLD_RATIO_NAMES.get(k, k): v for k, v in record["na_reasons"].items()}
    return out


def old_ratio_names(cell: Any, *, old: bool = False) -> Any:
    """A cell (and its arms) as saved before schema version 3 (``old``, or recognised by its
    ``decode_speedup`` key, which every such cell was written with) with its two ratios under
    today's names: ``decode_speedup`` -> ``speedup``, ``speedup`` -> ``throughput_ratio`` (their
    n/a reasons too). A cell of today is returned as it is."""
    if not isinstance(cell, dict) or not (old or "decode_speedup" in cell):
        return cell
    out = _renamed(cell)
    if isinstance(out.get("arms"), dict):
        out["arms"] = {n: _renamed(a) if isinstance(a, dict) else a for n, a in out["arms"].items()}
    return out


class ArmCell(BaseModel):
    """One arm of a cell: its side over the repeats and its figures against the same baseline batches."""

    name: str
    label: str | None = None
    method: str | None = None
    side: SideCell
    speedup: Spread | None = None  # per-request decode tokens/s (median), the arm over the baseline, per repeat
    throughput_ratio: Spread | None = None  # aggregate output tokens/s, the arm over the baseline, per repeat
    e2e_speedup: float | None = None
    acceptance_rate: float | None = None
    mean_acceptance_length: float | None = None
    efficiency: float | None = None
    # The arm's timed verification step cost the bound used (ArmSpec.step_cost), at concurrency 1 only:
    # it was timed with one request alone; None: the bound is 1.
    step_cost: float | None = None
    num_spec_tokens: int | None = None
    expected_tokens_per_step: float | None = None
    acceptance_source: Literal["per_request", "metrics_delta"] | None = None
    identical_text: bool | None = None
    errors: list[str] = Field(default_factory=list)  # the arm's own one-line errors (no prefix)
    na_reasons: dict[str, str] = Field(default_factory=dict)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def over_bound(self) -> str | None:
        """Why the arm's speedup (median) is not a result: its efficiency exceeds its bound, more than its
        tokens per step allow (demo.measure.over_bound, with step_cost); None otherwise. Read off the
        figures, so a results.json written before it gets it too; the verdict's headline names such a cell
        with the reason."""
        return over_bound(self.speedup.median if self.speedup else None, self.mean_acceptance_length, "cell",
                          step_cost=self.step_cost)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def step_cost_note(self) -> str | None:
        """Why the arm's efficiency over 1 is a result all the same: a verification step timed cheaper than
        a plain one on the servers' host (demo.measure.step_cost_note; at concurrency 1 only); None otherwise."""
        return step_cost_note(self.speedup.median if self.speedup else None, self.mean_acceptance_length,
                              self.step_cost)


# The first arm's figures, written beside a cell's ``arms`` for readers of the pair's JSON (ArmCell's
# fields of the same name; a cell saved before arms held them as its own).
ARM_FIELDS = ("speedup", "throughput_ratio", "e2e_speedup", "acceptance_rate", "mean_acceptance_length", "efficiency",
              "num_spec_tokens", "expected_tokens_per_step", "acceptance_source", "identical_text")


def _own_reasons(data: Any) -> Any:
    """A saved cell's ``na_reasons`` less those of its first arm (written beside the cell's own)."""
    if not isinstance(data, dict) or not isinstance(data.get("na_reasons"), dict) or not data.get("arms"):
        return data
    first = next(iter(data["arms"].values())) if isinstance(data["arms"], dict) else None
    theirs = first.get("na_reasons") or {} if isinstance(first, dict) else {}
    return {**data, "na_reasons": {k: v for k, v in data["na_reasons"].items() if theirs.get(k) != v}}


class CellResult(BaseModel):
    """One cell of the matrix: a preset at a temperature and a concurrency, the baseline and every arm.

    ``arms`` holds every arm in order. ``speculative`` and the figures in ARM_FIELDS are the first
    arm's, read off it and written beside ``arms`` in results.json (where the first arm's side is
    written once, as ``speculative``), as are its n/a reasons within the cell's own ``na_reasons``. A
    cell saved before arms loads with its one arm, named "speculative"."""

    settings: CellSettings
    status: CellStatus = "ok"
    started_at: datetime = Field(default_factory=_now)
    duration_s: float | None = None
    baseline: SideCell
    # Per request of the workload (both sides, pooled over the repeats): speedup, acceptance, copy-ness.
    requests: list[RequestOutcome] = Field(default_factory=list)
    # A workload with sessions and several arms: each arm after the first against the baseline, per request
    # (pooled as ``requests``, no prompt text), for the per-turn table's column of that arm.
    arm_requests: dict[str, list[RequestOutcome]] = Field(default_factory=dict)
    # The cell's errors, prefixed by side: "baseline: ", then "speculative: " with one arm, else the arm's name.
    errors: list[str] = Field(default_factory=list)
    na_reasons: dict[str, str] = Field(default_factory=dict)  # the cell's own (its arms' are in each arm)
    arms: dict[str, ArmCell] = Field(min_length=1)  # every arm in its order

    @model_validator(mode="before")
    @classmethod
    def _first_arm(cls, data: Any) -> Any:
        data = first_arm_in(old_ratio_names(data), ARM_FIELDS)
        if isinstance(data, dict) and isinstance(data.get("arms"), dict) and FIRST_ARM in data["arms"]:
            arm = data["arms"][FIRST_ARM]
            if isinstance(arm, dict) and "errors" not in arm:  # no errors of its own: the cell's "speculative: " ones
                arm["errors"] = [e.removeprefix("speculative: ") for e in data.get("errors") or []
                                 if e.startswith("speculative: ")]
        return _own_reasons(data)

    @field_serializer("arms", mode="wrap")
    def _arms_out(self, arms: dict[str, ArmCell], handler: SerializerFunctionWrapHandler) -> Any:
        return arms_out(arms, handler)

    @field_serializer("na_reasons")
    def _reasons_out(self, reasons: dict[str, str]) -> dict[str, str]:
        return {**self.first_arm.na_reasons, **reasons}

    @property
    def first_arm(self) -> ArmCell:
        """The first arm: the one a pair's figures describe."""
        return next(iter(self.arms.values()))

    @computed_field  # type: ignore[prop-decorator]
    @property
    def speculative(self) -> SideCell:
        """The first arm's side over the repeats."""
        return self.first_arm.side

    @computed_field  # type: ignore[prop-decorator]
    @property
    def speedup(self) -> Spread | None:
        """The first arm's per-request decode tokens/s (median) over the baseline's, per repeat."""
        return self.first_arm.speedup

    @computed_field  # type: ignore[prop-decorator]
    @property
    def throughput_ratio(self) -> Spread | None:
        """The first arm's aggregate output tokens/s over the baseline's, per repeat."""
        return self.first_arm.throughput_ratio

    @computed_field  # type: ignore[prop-decorator]
    @property
    def e2e_speedup(self) -> float | None:
        """The baseline's e2e p50 over the first arm's."""
        return self.first_arm.e2e_speedup

    @computed_field  # type: ignore[prop-decorator]
    @property
    def acceptance_rate(self) -> float | None:
        """The first arm's accepted / drafted tokens, pooled over the repeats."""
        return self.first_arm.acceptance_rate

    @computed_field  # type: ignore[prop-decorator]
    @property
    def mean_acceptance_length(self) -> float | None:
        """The first arm's measured tokens per verification step."""
        return self.first_arm.mean_acceptance_length

    @computed_field  # type: ignore[prop-decorator]
    @property
    def efficiency(self) -> float | None:
        """The first arm's speedup median over its tokens per step (1.0 is the bound)."""
        return self.first_arm.efficiency

    @computed_field  # type: ignore[prop-decorator]
    @property
    def num_spec_tokens(self) -> int | None:
        """The first arm's k."""
        return self.first_arm.num_spec_tokens

    @computed_field  # type: ignore[prop-decorator]
    @property
    def expected_tokens_per_step(self) -> float | None:
        """Theory for the first arm (Leviathan et al.): (1 - a^(k+1)) / (1 - a), a its acceptance rate."""
        return self.first_arm.expected_tokens_per_step

    @computed_field  # type: ignore[prop-decorator]
    @property
    def acceptance_source(self) -> Literal["per_request", "metrics_delta"] | None:
        """Where the first arm's acceptance was read: per request, or a /metrics delta."""
        return self.first_arm.acceptance_source

    @computed_field  # type: ignore[prop-decorator]
    @property
    def identical_text(self) -> bool | None:
        """A preset: the first answers are equal (meaningful at T=0 only); a workload file: every greedy
        request's two answers are equal; the first arm's against the baseline's."""
        return self.first_arm.identical_text

    def reason(self, field: str) -> str | None:
        """Why ``field`` of the first arm (or of the cell) is unknown, or None."""
        return self.first_arm.na_reasons.get(field) or self.na_reasons.get(field)

    def arm_view(self, name: str) -> CellResult:
        """This cell as a cell of one arm, ``name``: its errors and the baseline's (prefixed baseline: /
        speculative:), as a one-arm sweep records them. The verdict, capacity and load read an arm through this."""
        arm = self.arms[name]
        errors = [e for e in self.errors if e.startswith("baseline: ")] + [f"speculative: {e}" for e in arm.errors]
        return self.model_copy(update={"errors": errors, "arms": {name: arm}})


class ChecklistItem(BaseModel):
    """One item of a verdict's checklist: what it checks, how it came out, and the sentence that says why."""

    name: Literal["structuredness", "memory headroom", "concurrency", "prefill share"]
    status: Literal["good", "bad", "mixed", "unknown"]
    text: str


class WorkloadVerdict(BaseModel):
    """enable / don't / depends for one workload (a preset at a temperature), with reasons.

    With several arms, the verdict is the first arm's; ``per_arm`` holds every arm's (each with its
    ``arm``) and ``methods_line`` the one line that says which arm to enable up to which concurrency."""

    preset: str
    title: str
    temperature: float | None  # None: each request's own (a workload file)
    decision: Decision
    headline: str  # one sentence with numbers
    checklist: list[ChecklistItem] = Field(default_factory=list)
    expected_tokens_per_step: float | None = None
    measured_tokens_per_step: float | None = None
    num_spec_tokens: int | None = None
    acceptance_rate: float | None = None
    arm: str | None = None  # the arm this verdict is about (None: a sweep of one arm, or a file without arms)
    per_arm: list[WorkloadVerdict] = Field(default_factory=list)
    methods_line: str | None = None  # e.g. "for this workload, enable eagle3 up to 16 concurrent requests; ..."
    # Where the speedup and the throughput ratio would decide differently: why, in one sentence
    # (demo.sweep.verdict.reconcile); None where they agree.
    reconcile: str | None = None


class MachineInfo(BaseModel):
    """The machine that ran the sweep (the client; the servers' side is in ``servers``)."""

    platform: str
    python: str
    cpu_count: int | None = None
    memory_total_gb: float | None = None
    gpus: list[str] = Field(default_factory=list)


class WorkloadSummary(BaseModel):
    """One workload (a preset at a temperature, or the workload file): who gains, and what it serves."""

    preset: str  # the workload's name, as in CellSettings.preset
    kind: Literal["preset", "workload"]
    temperature: float | None
    # From the cell at the lowest concurrency (least contention between requests).
    profile_concurrency: int
    profile: WorkloadProfile
    capacity: Capacity  # the first arm's against the baseline
    arm_capacity: dict[str, Capacity] = Field(default_factory=dict)  # with several arms: each arm's


SegmentDimension = Literal["tag", "session", "turn", "answer", "output_format", "temperature", "prompt_tokens",
                          "output_tokens"]
SegmentVerdict = Literal["enable", "don't", "depends", "n/a"]


class Segment(BaseModel):
    """One segment of the customer's workload (a bucket of one dimension, demo/sweep/segments.py):
    its requests' decode speedups (median and range), acceptance, tokens per step and verdict."""

    dimension: SegmentDimension
    label: str  # the bucket as stated ("< 256", "greedy (T=0)") or the file's tag (user text: escape it)
    concurrency: int  # the cell it comes from: the workload's lowest measured concurrency
    requests: int  # requests in the segment
    measured: int = 0  # of them, with a decode speedup
    speedup: float | None = None  # median per-request decode speedup (speculative over baseline decode tokens/s)
    speedup_min: float | None = None
    speedup_max: float | None = None
    acceptance_rate: float | None = None  # median over the segment's requests
    tokens_per_step: float | None = None  # median over the segment's requests
    verdict: SegmentVerdict = "n/a"  # n/a: too few requests, or none measured (see reason)
    reason: str = ""  # one line: the figure against the thresholds, or why n/a
    na_reasons: dict[str, str] = Field(default_factory=dict)


class SessionReplay(BaseModel):
    """How the workload's sessions were replayed turn by turn (demo/sweep/segments.py session_replay),
    for the per-turn table: the history mode in words and, when each side carried its own answers,
    how many turns followed a call other than the one the log recorded, per side."""

    history: History  # logged: each turn's history as the file gives it; own: each side carried its own answers
    how: str  # the history mode in one sentence
    # Per side ("baseline", then each arm by name; "speculative" with one arm): the measured turns that
    # followed a call the log recorded, and of them those where that side's own call differed (the
    # logged result followed it anyway).
    after_logged_call: dict[str, int] = Field(default_factory=dict)
    other_call: dict[str, int] = Field(default_factory=dict)
    differed: str | None = None  # "n of m turns followed a call that differed from the logged one"; None: no such turn
    # Several arms: each arm after the first by name -> its per-turn segments (the first arm's are the
    # sweep's ``segments`` of dimension turn).
    arm_turns: dict[str, list[Segment]] = Field(default_factory=dict)
    arms: list[str] = Field(default_factory=list)  # several arms: every arm's name in order (the first's first)


# The recommended schedule: demo/sweep/schedule.py builds it; load.json and results.json hold it.

class Band(BaseModel):
    """One band of the schedule: users (batch size) from..to, the k, and the figures behind it."""

    users_from: int = Field(ge=1)
    users_to: int = Field(ge=1)
    k: int = Field(ge=0)
    server: str  # the measured server whose k this is
    per_user_decode_tokens_per_s: float | None = None  # the chosen server's, at measured_users
    baseline_tokens_per_s: float | None = None  # the baseline's at the same count
    measured_users: list[int] = Field(default_factory=list)
    # An open-loop sweep's (load --rate): the request rates whose measured running batch fell in this band.
    rates_requests_per_s: list[float] = Field(default_factory=list)
    why: str = ""


class OffPoint(BaseModel):
    """The adaptive arm with drafting off at one measured count: its per-user decode tokens/s over the baseline's."""

    users: int
    ratio: float


class OffCost(BaseModel):
    """The adaptive arm with drafting off against the baseline (None figures: n/a, ``text`` says why).

    ``by_users``: every measured count where it drafted nothing; ``costs_at_users``: those where it ran
    below OFF_COST_WORTH of the baseline. ``users``/``ratio``: the worst count of the recommendation's
    k = 0 bands (of every off count when no k = 0 band was measured with it off), the one the routing
    advice ``route_to_baseline`` rests on.
    """

    users: int | None = None
    ratio: float | None = None  # adaptive per-user decode tokens/s over the baseline's
    route_to_baseline: bool | None = None  # True: a server without speculation beats k = 0 on one server
    by_users: list[OffPoint] = Field(default_factory=list)
    costs_at_users: list[int] = Field(default_factory=list)
    text: str = ""


class Recommendation(BaseModel):
    """The schedule, ready for ``--speculative-config``, and the bands with their reasons."""

    speculative_config: dict[str, Any]
    bands: list[Band]
    configured_but_off: OffCost = Field(default_factory=OffCost)
    workload: str | None = None
    slo: Slo | None = None
    text: str = ""  # one line: "k=4 up to 2 users, off from 3 (…)"
    notes: list[str] = Field(default_factory=list)  # what to know before deploying it (arms left out, no method)
    # The stage's line: does the adaptive arm keep the static arm's gain and stay at the baseline where it loses.
    adaptive_text: str = ""

    @model_validator(mode="after")
    def _valid_schedule(self) -> Recommendation:
        check_schedule(self.speculative_config.get("num_speculative_tokens_per_batch_size") or [])
        return self


class NoRecommendation(BaseModel):
    """Why no schedule is recommended (one line)."""

    reason: str


class SweepResult(BaseModel):
    """Everything a sweep produced: its spec, the machine and servers, every cell, and what was derived.

    This is results.json. The verdicts, workload summaries, segments, routing line and schedule are derived from the
    cells (``finalize`` in demo/sweep/report.py); ``interrupted`` marks partial results."""

    schema_version: int = SCHEMA_VERSION
    spec: SweepSpec
    started_at: datetime = Field(default_factory=_now)
    finished_at: datetime | None = None
    interrupted: bool = False
    machine: MachineInfo | None = None
    servers: list[ServerInfo] = Field(default_factory=list)
    # "baseline", "speculative" (the first arm) or another arm's name -> vLLM's GET /version
    server_versions: dict[str, str] = Field(default_factory=dict)
    preset_titles: dict[str, str] = Field(default_factory=dict)
    cells: list[CellResult] = Field(default_factory=list)
    verdicts: list[WorkloadVerdict] = Field(default_factory=list)
    workloads: list[WorkloadSummary] = Field(default_factory=list)
    # The customer's workload by segment, and the one routing sentence built from their verdicts
    # (demo/sweep/segments.py); empty and None with no workload file, or in a results file without segments.
    segments: list[Segment] = Field(default_factory=list)
    routing: str | None = None
    # How a workload with sessions was replayed (the per-turn table's heading); None: no sessions.
    sessions: SessionReplay | None = None
    # The schedule of k per concurrency band (demo/sweep/schedule.py), from one workload's concurrency cells.
    recommendation: Recommendation | NoRecommendation | None = None
    # An open-loop sweep (sweep --rate, demo/sweep/rates.py): load.json's object (demo/load/rate_view.py
    # rate_json: the settings, every rate step, the capacity sentence and crossovers in req/s, the schedule's
    # bands with their rates); None for a sweep over concurrency. demo.sweep.rates.load_result reads it back.
    rate: dict[str, Any] | None = None

    @model_validator(mode="before")
    @classmethod
    def _old_ratio_names(cls, data: Any) -> Any:
        """A results.json of schema version 1-2 is read with its meanings: its cells' ``speedup`` is
        the throughput ratio and ``decode_speedup`` the speedup. In memory it is of today's version."""
        if isinstance(data, dict) and int(data.get("schema_version") or 1) < 3:
            data = {**data, "schema_version": SCHEMA_VERSION,
                    "cells": [old_ratio_names(c, old=True) for c in data.get("cells") or []]}
        return data

    @computed_field  # type: ignore[prop-decorator]  # pydantic's documented pattern; mypy can't see it
    @property
    def capacity(self) -> Capacity | None:
        """The customer's workload's capacity and cost (results.json "capacity"); else the only workload's."""
        mine = [w for w in self.workloads if w.kind == "workload"] or (
            self.workloads if len(self.workloads) == 1 else [])
        return mine[0].capacity if mine else None
