"""What an open-loop sweep asks and what it measured: the load (rates, arrival law, SLOs), each
server's figures at a step (``RateSide``), a step of every server, and the summary's models
(demo/load/rate.py measures, demo/load/rate_summary.py sums up)."""


from __future__ import annotations

from collections.abc import Mapping

from pydantic import BaseModel, Field, ValidationError, model_validator

from demo.errors import BadInput
from demo.fmt import validation_summary
from demo.load.arrivals import Arrivals, ArrivalSchedule, Replay, draw_schedule, parse_rates, step_seed
from demo.slo import Slo, slo_of_bounds
from demo.sweep.headroom import ClientHeadroom
from demo.sweep.models import NoRecommendation, Recommendation
from demo.sweep.runner import KV_SAMPLE_INTERVAL_S

PERCENTILES = (50, 95, 99)
DEFAULT_DRAIN_S = 30.0  # after the last arrival, how long a step waits for open requests before cutting them
SATURATED_SHARE = 0.9  # finishes spread over more than arrivals / this (plus a request's latency): fell behind
MIN_TREND_REQUESTS = 8  # fewer finished requests: too few to tell falling behind from a burst (cuts still count)
MAX_OPEN_STREAMS = 1024  # a request due when this many of the step's streams are open is not sent (failed)
QUEUE_SOURCE = ("vllm:request_queue_time_seconds, the /metrics delta between one scrape before the step and "
                "one after it (finished requests)")
RUNNING_SOURCE = f"vllm:num_requests_running, sampled every {KV_SAMPLE_INTERVAL_S:g} s while the step ran"


class RateLoad(BaseModel):
    """What a rate sweep asks: the rates, the arrival law, each step's length and bound, the SLOs."""

    rates: list[float] = Field(min_length=1)  # requests/s, ascending, each > 0 (a replay: its mean rate)
    arrivals: Arrivals = "poisson"
    burstiness: float = Field(1.0, gt=0)  # gamma's shape (arrivals "gamma")
    seed: int = 0
    duration_s: float | None = Field(None, gt=0)  # each step's arrival window; or:
    requests: int | None = Field(None, ge=1)  # each step's number of requests
    normalized: bool = False  # with requests: rescale the gaps so N requests span N/rate s (vllm bench serve)
    drain_s: float = Field(DEFAULT_DRAIN_S, gt=0)  # a step's bound: its arrival window plus this
    slo: Slo = Field(default_factory=Slo)
    # A trace on its own clock instead of drawn arrivals: one step, its send times (rates: its mean rate).
    replay: Replay | None = None
    # Stop the sweep after a step at which every server saturated (the higher rates would only saturate more).
    stop_when_all_saturated: bool = True

    @model_validator(mode="after")
    def _one_length(self) -> RateLoad:
        if self.replay is not None:
            if self.duration_s is not None or self.requests is not None or len(self.rates) != 1:
                raise ValueError("a replay is one step at the trace's own times: no duration, requests or rates")
        elif (self.duration_s is None) == (self.requests is None):
            raise ValueError("give each step a duration or a number of requests (one of the two)")
        if any(r <= 0 for r in self.rates):
            raise ValueError("every rate must be above 0 requests/s")
        return self

    def schedule(self, index: int) -> ArrivalSchedule:
        """Step ``index``'s schedule (its rate, this sweep's law, the seed of the sweep and the step); a
        replay's: the trace's own times over its speed."""
        if self.replay is not None:
            return self.replay.schedule()
        return draw_schedule(self.rates[index], self.arrivals, burstiness=self.burstiness,
                             seed=step_seed(self.seed, index), duration_s=self.duration_s, requests=self.requests,
                             normalized=self.normalized)


def make_rate_load(rates: str, *, requests: int | None = None, duration_s: float | None = None,
                   arrivals: Arrivals = "poisson", burstiness: float = 1.0, seed: int = 0,
                   drain_s: float = DEFAULT_DRAIN_S, slo_ms: Mapping[str, float | None] | None = None,
                   slo_percentile: Mapping[str, float] | None = None, normalized: bool = False) -> RateLoad:
    """The open-loop sweep asked for (load --rate's, sweep --rate's, the Evaluate tab's and the load panel's
    words): ``rates`` as text ("0.5,1,2"), each step's length (``requests`` or ``duration_s``; ``normalized``:
    N requests rescaled to span N/rate, as vllm bench serve does), the arrival law and its seed, each SLO's
    bound in ms and its percentile (demo.slo ``slo_of_bounds``). Raises BadInput (one line, naming the
    input as the CLI's flag without dashes) on a rate <= 0, a percentile outside (0, 100), or a step with no
    request; checked before anything is sent."""
    try:
        values = parse_rates(rates)
    except ValueError as e:
        raise BadInput.about("rate", str(e).removeprefix("rate ")) from None
    slo = slo_of_bounds(slo_ms, slo_percentile)
    if duration_s is None and requests is None:
        raise BadInput.about("rate", "needs each step's length: --duration S or --requests N (a number of requests)")
    try:
        load = RateLoad(rates=values, arrivals=arrivals, burstiness=burstiness, seed=seed, duration_s=duration_s,
                        requests=requests, normalized=normalized, drain_s=drain_s, slo=slo)
        for i, r in enumerate(values):
            if not load.schedule(i).offsets_s:  # also: a step past the time bound, before anything is sent
                raise BadInput.about("duration", f"of {duration_s:g} s holds no request at {r:g} req/s (arrival "
                                     f"seed {seed}): lengthen it, or give a number of requests")
    except ValidationError as e:
        raise BadInput(validation_summary(e)) from None
    except BadInput:
        raise
    except ValueError as e:
        raise BadInput(str(e)) from None
    return load


class RateSide(BaseModel):
    """One server at one rate step: what it was offered, what it did, and how it felt to each request."""

    name: str  # "baseline" or the arm's name
    rate_requests_per_s: float
    sent: int = 0
    finished: int = 0
    failed: int = 0  # with errors
    cut: int = 0  # still open at the step's bound: cancelled
    timeouts: int = 0  # failed ones whose error is a timeout
    errors: list[str] = Field(default_factory=list)  # distinct one-line errors, "N x message"
    duration_s: float | None = None  # from the step's start to its last finish (or its cut)
    bound_s: float = 0.0  # the step's stated bound: arrival window + drain
    offered_requests_per_s: float = 0.0
    completed_requests_per_s: float | None = None
    output_tokens_per_s: float | None = None  # from usage, never chunks
    goodput_requests_per_s: float | None = None  # finished requests meeting every SLO, per second
    good: int | None = None  # how many met every SLO
    decode_tokens_per_s_p50: float | None = None  # median over finished requests
    ttft_s: dict[str, float | None] = Field(default_factory=dict)  # "p50", "p95", "p99"
    itl_s: dict[str, float | None] = Field(default_factory=dict)  # over every token of the finished requests
    e2e_s: dict[str, float | None] = Field(default_factory=dict)
    # Time per output token as vllm bench serve computes it, per finished request: (e2e - TTFT) / (tokens - 1)
    tpot_s: dict[str, float | None] = Field(default_factory=dict)
    tpot_mean_s: float | None = None  # their mean: vllm bench serve's "Mean TPOT"
    # The server's own mean of the same figure over the requests that finished on it during the step
    # (vllm:request_time_per_output_token_seconds between the scrapes before and after it): what
    # tpot_mean_s is checked against, the server's speed apart from the client's reading of it.
    server_tpot_mean_s: float | None = None
    # Each SLO's figure at its own percentile, by figure ("ttft", "itl", "e2e"): what the SLO is checked on.
    slo_figures_s: dict[str, float | None] = Field(default_factory=dict)
    queue_time_mean_s: float | None = None  # QUEUE_SOURCE
    queue_time_s: dict[str, float | None] = Field(default_factory=dict)  # p50/p95/p99, bucket estimates
    queue_time_requests: int | None = None  # how many finished requests the histogram counted
    running_mean: float | None = None  # RUNNING_SOURCE
    running_p95: float | None = None
    running_samples: int = 0
    kv_cache_usage_peak_perc: float | None = None  # 0..1
    num_preemptions: int | None = None
    num_spec_tokens: int | None = None  # k, as the server reported it per request (None: baseline, or not reported)
    send_lag_max_ms: float | None = None  # the latest any request went out after its scheduled time
    # The client's own headroom while it sent (event-loop lag, CPU; limited past either limit): with
    # --ray the worst worker's. None: not measured (a step that sent nothing).
    client: ClientHeadroom | None = None
    open_at_arrivals_end: int | None = None  # requests open when the last one was sent
    saturated: bool = False
    saturation_note: str = ""
    na_reasons: dict[str, str] = Field(default_factory=dict)

    @property
    def accounted(self) -> bool:
        """Every request sent is finished, failed or cut."""
        return self.finished + self.failed + self.cut == self.sent


class RateArm(BaseModel):
    """One arm at one rate step: its server's figures and its ratios to the same step's baseline."""

    side: RateSide
    speedup: float | None = None  # per-request decode tokens/s median, the arm over the baseline
    throughput_ratio: float | None = None  # output tokens/s, the arm over the baseline
    goodput_ratio: float | None = None
    na_reasons: dict[str, str] = Field(default_factory=dict)


class RateStep(BaseModel):
    """One rate measured on the baseline and every arm, with the one schedule they were all sent."""

    rate_requests_per_s: float
    schedule: ArrivalSchedule
    label: str | None = None  # "replay of FILE at speed X" (shown instead of the rate); None: a rate step
    baseline: RateSide
    arms: dict[str, RateArm] = Field(default_factory=dict)

    def servers(self) -> list[RateSide]:
        """The baseline's figures, then every arm's."""
        return [self.baseline, *(a.side for a in self.arms.values())]


class RateCapacity(BaseModel):
    """A server's capacity under the SLO: the highest rate whose step meets every bound.

    Found by linear interpolation between the last measured rate that meets the SLO and the next one
    (the worst bound's measured/allowed ratio against rate, crossing 1); not interpolated when that next
    step saturated or lost requests (then the last rate that met it). Never beyond the rates measured."""

    name: str
    requests_per_s: float | None = None  # None: not even the lowest rate met the SLO, or no SLO
    at_least: bool = False  # every rate measured met it: the capacity is at least the highest
    method: str = ""  # how it was found, in words
    na_reason: str | None = None


class RateCrossover(BaseModel):
    """Where an arm's gain crosses the thresholds in requests per second (find_crossover's rules over
    the measured rates), and the rate at which it breaks even (gain 1.0, interpolated between the two
    measured rates around it)."""

    pays_up_to_rate: float | None = None
    stops_paying_from_rate: float | None = None
    loses_from_rate: float | None = None
    break_even_rate: float | None = None  # interpolated
    break_even_between: tuple[float, float] | None = None  # the measured rates around it
    text: str = ""


class RateSummary(BaseModel):
    """What the rate steps say: each server's capacity under the SLO, each arm's crossover, in sentences."""

    capacity: dict[str, RateCapacity] = Field(default_factory=dict)  # "baseline" and every arm
    crossovers: dict[str, RateCrossover] = Field(default_factory=dict)  # every arm
    capacity_text: str = ""  # "baseline holds 2.1 req/s within ITL p99 ≤ 120 ms; ngram 2.9 req/s (+38%)"
    # The schedule of k per batch size (demo/sweep/schedule.py), keyed by the baseline's measured running
    # batch at each rate, each band naming the rates that produced it; None: no rate had a batch measured.
    recommendation: Recommendation | NoRecommendation | None = None
    stopped_note: str = ""  # why the sweep stopped before its last rate
