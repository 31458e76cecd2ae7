"""Open-loop load: requests per second, each sent at its time whether or not earlier ones finished.

A *rate step* sends one arrival schedule (demo/load/arrivals.py) to the baseline and then to each
arm, each server alone (sequential, the fair A/B: the same traffic, one server at a time). Each
request is streamed and measured by demo.measure.SideMeter (demo.sweep.runner ``one_request``,
the evaluator's own). A step on one server ends when every request has ended, or at its bound:
the arrival window plus ``drain_s``; requests still open then are *cut* (cancelled and counted).
Every request is accounted for: finished, failed (with its one-line error) or cut.

The figures of one server at one step (``RateSide``), units in the names:

- offered requests/s: the schedule's requests over its arrival window; completed requests/s:
  finished requests over the time from the step's start to the last finish (as ``vllm bench
  serve``'s request throughput); output tokens/s: the finished requests' tokens from usage over
  the same time;
- TTFT, ITL (every token of every finished request), end-to-end latency and TPOT (as ``vllm bench
  serve`` computes it: (e2e - TTFT) / (tokens - 1) per request) p50/p95/p99 (demo.measure.percentile);
- queueing time from the server's ``vllm:request_queue_time_seconds`` histogram: its delta
  between one /metrics scrape before the step and one after it (finished requests only; the mean
  is exact, the percentiles are estimates no finer than vLLM's buckets);
- the running batch from ``vllm:num_requests_running``, sampled as the evaluator samples KV use
  (demo.sweep.runner ``kv_sampler``: once a second, so as not to slow the server): mean and p95;
  the KV-cache peak from the same samples; preemptions from the counter's delta;
- errors, timeouts (failures whose error says the server timed out) and cut requests;
- goodput: finished requests that met every SLO given, per second. A request meets an SLO on its
  own figures: its TTFT, its end-to-end latency, and the SLO's percentile of its own ITLs.
- saturation: the server did not keep up when requests were cut, or when its finishes spread
  over more than 1/SATURATED_SHARE times its arrival span plus one early request's latency, or when
  its latency grew over the step faster than 1/SATURATED_SHARE - 1 seconds per second of arrivals
  (``latency_growth``; the same bound without the allowance): the queue grew while requests arrived.

Per arm: the per-request decode speedup (median decode tokens/s over the baseline's, the meaning
docs/measurement.md gives ``speedup``) and the throughput ratio, per step. Over the steps
(``rate_summary``): each server's capacity under the SLO (``RateCapacity``) and each arm's
crossover in requests per second (``RateCrossover``).
"""

from __future__ import annotations

import asyncio
import math
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pydantic import BaseModel, Field, ValidationError, model_validator

from demo.client import StreamError, collector_paused
from demo.errors import BadInput
from demo.fmt import validation_summary
from demo.load.arrivals import Arrivals, ArrivalSchedule, Replay, draw_schedule, parse_rates, step_seed
from demo.measure import percentile
from demo.metrics import MetricsSample, histogram_quantile, scrape_metrics
from demo.results import RaceRequest, SideResult
from demo.settings import Settings
from demo.streaming import ServerHandle
from demo.sweep.crossover import GAIN_NONE, GAIN_WORTH, find_crossover
from demo.sweep.models import NoRecommendation, Recommendation, ScheduleSlo
from demo.sweep.pooling import median
from demo.sweep.runner import KV_SAMPLE_INTERVAL_S, kv_sampler, one_request
from demo.sweep.schedule import ServerPoint, recommend

PERCENTILES = (50, 95, 99)
DEFAULT_DRAIN_S = 30.0  # after the last arrival, how long a step waits for open requests before cutting them
SATURATED_SHARE = 0.9  # finishes spread over more than arrivals / this (plus a request's latency): fell behind
MIN_TREND_REQUESTS = 8  # fewer finished requests: too few to tell falling behind from a burst (cuts still count)
MAX_OPEN_STREAMS = 1024  # a request due when this many of the step's streams are open is not sent (failed)
QUEUE_SOURCE = ("vllm:request_queue_time_seconds, the /metrics delta between one scrape before the step and "
                "one after it (finished requests)")
RUNNING_SOURCE = f"vllm:num_requests_running, sampled every {KV_SAMPLE_INTERVAL_S:g} s while the step ran"


class SloBound(BaseModel):
    """One latency bound: the figure's ``percentile`` must be at most ``ms`` milliseconds."""

    ms: float = Field(gt=0)
    percentile: float = Field(95.0, gt=0, lt=100)

    @model_validator(mode="after")
    def _whole(self) -> SloBound:
        if self.percentile != int(self.percentile):
            raise ValueError(f"an SLO percentile is a whole percent (1 to 99), got {self.percentile:g}")
        return self


class RateSlo(BaseModel):
    """The SLOs of a rate sweep: TTFT, ITL and end-to-end bounds, each at its percentile (default p95)."""

    ttft: SloBound | None = None
    itl: SloBound | None = None
    e2e: SloBound | None = None

    def bounds(self) -> dict[str, SloBound]:
        """The bounds given, by figure ("ttft", "itl", "e2e")."""
        return {k: b for k in ("ttft", "itl", "e2e") if (b := getattr(self, k)) is not None}

    def describe(self) -> str:
        """'ITL p99 ≤ 120 ms and TTFT p95 ≤ 500 ms'; 'no SLO' when none is given."""
        names = {"ttft": "TTFT", "itl": "ITL", "e2e": "end-to-end latency"}
        return " and ".join(f"{names[k]} p{b.percentile:g} ≤ {b.ms:g} ms" for k, b in self.bounds().items()) or "no SLO"


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
    slo: RateSlo = Field(default_factory=RateSlo)
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


SLO_FIGURES = ("ttft", "itl", "e2e")


def make_rate_slo(slo_ms: Mapping[str, float | None] | None = None,
                  slo_percentile: Mapping[str, float] | None = None) -> RateSlo:
    """The open-loop SLOs from each figure's bound in ms and its percentile (by figure: "ttft", "itl", "e2e";
    default p95); BadInput (one line, naming the input as the CLI's flag without dashes) on a bound of 0 or
    below or a percentile that is not a whole one from 1 to 99."""
    bounds: dict[str, SloBound] = {}
    for name in SLO_FIGURES:
        p = (slo_percentile or {}).get(name, 95.0)
        if not 0 < p < 100 or p != int(p):
            raise BadInput.about(f"slo-{name}-p", f"must be a whole percentile from 1 to 99, got {p:g}")
        ms = (slo_ms or {}).get(name)
        if ms is not None:
            if not ms > 0:
                raise BadInput.about(f"slo-{name}-ms", f"must be above 0, got {ms:g}")
            bounds[name] = SloBound(ms=ms, percentile=p)
    return RateSlo(**bounds)


def make_rate_load(rates: str, *, requests: int | None = None, duration_s: float | None = None,
                   arrivals: Arrivals = "poisson", burstiness: float = 1.0, seed: int = 0,
                   drain_s: float = DEFAULT_DRAIN_S, slo_ms: Mapping[str, float | None] | None = None,
                   slo_percentile: Mapping[str, float] | None = None, normalized: bool = False) -> RateLoad:
    """The open-loop sweep asked for (load --rate's, sweep --rate's, the Evaluate tab's and the load panel's
    words): ``rates`` as text ("0.5,1,2"), each step's length (``requests`` or ``duration_s``; ``normalized``:
    N requests rescaled to span N/rate, as vllm bench serve does), the arrival law and its seed, each SLO's
    bound in ms and its percentile (``make_rate_slo``). Raises BadInput (one line, naming the
    input as the CLI's flag without dashes) on a rate <= 0, a percentile outside (0, 100), or a step with no
    request; checked before anything is sent."""
    try:
        values = parse_rates(rates)
    except ValueError as e:
        raise BadInput.about("rate", str(e).removeprefix("rate ")) from None
    slo = make_rate_slo(slo_ms, slo_percentile)
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


# --------------------------------------------------------------------------- measuring one server


def _pcts(values: list[float]) -> dict[str, float | None]:
    return {f"p{q}": percentile(values, q) for q in PERCENTILES}


def request_meets(r: SideResult, slo: RateSlo) -> bool:
    """A finished request meets every bound on its own figures (its TTFT, its e2e, its ITLs' percentile);
    an unknown figure does not meet its bound."""
    checks = [(slo.ttft, r.ttft_s), (slo.e2e, r.e2e_s)]
    if slo.itl is not None:
        checks.append((slo.itl, percentile(r.itl_s, slo.itl.percentile) if r.itl_s else None))
    return all(b is None or (v is not None and v * 1000 <= b.ms) for b, v in checks)


def _is_timeout(error: str) -> bool:
    return "timed out" in error.lower() or "timeout" in error.lower()


def side_figures(name: str, schedule: ArrivalSchedule, results: Sequence[SideResult | None], cut: int,
                 duration_s: float, bound_s: float, slo: RateSlo, before: MetricsSample | None,
                 after: MetricsSample | None, running: list[float], kv: list[float],
                 send_lags_s: list[float], open_at_end: int | None) -> RateSide:
    """One server's figures at a step, from its requests' results (None: cut) and its /metrics."""
    sent = len(results)
    ok = [r for r in results if r is not None and r.complete]
    bad = [r for r in results if r is not None and not r.complete]
    out = RateSide(name=name, rate_requests_per_s=schedule.rate_requests_per_s, sent=sent, finished=len(ok),
                   failed=len(bad), cut=cut, duration_s=duration_s, bound_s=bound_s,
                   offered_requests_per_s=schedule.offered_requests_per_s, open_at_arrivals_end=open_at_end,
                   send_lag_max_ms=max(send_lags_s) * 1000 if send_lags_s else None)
    counts: dict[str, int] = {}
    for r in bad:
        msg = r.error or "ended without [DONE]"
        counts[msg] = counts.get(msg, 0) + 1
        out.timeouts += _is_timeout(msg)
    out.errors = [f"{n} x {m}" for m, n in counts.items()]
    if ok and duration_s > 0:
        out.completed_requests_per_s = len(ok) / duration_s
        tokens = [r.completion_tokens for r in ok if r.completion_tokens is not None]
        if tokens:
            out.output_tokens_per_s = sum(tokens) / duration_s
        else:
            out.na_reasons["output_tokens_per_s"] = "the server sent no usage: tokens are never counted from chunks"
        if slo.bounds():
            out.good = sum(request_meets(r, slo) for r in ok)
            out.goodput_requests_per_s = out.good / duration_s
        else:
            out.na_reasons["goodput_requests_per_s"] = "no SLO given (--slo-ttft-ms, --slo-itl-ms, --slo-e2e-ms)"
    else:
        why = ("no request arrived in the step's window" if not sent else
               "no request finished" + (f": {out.errors[0]}" if out.errors else ""))
        for f in ("completed_requests_per_s", "output_tokens_per_s", "goodput_requests_per_s"):
            out.na_reasons[f] = why
    out.num_spec_tokens = next((r.spec.num_spec_tokens for r in ok if r.spec and r.spec.num_spec_tokens), None)
    out.decode_tokens_per_s_p50 = median([r.decode_tokens_per_s for r in ok if r.decode_tokens_per_s])
    values = {"ttft": [r.ttft_s for r in ok if r.ttft_s is not None], "itl": [g for r in ok for g in r.itl_s],
              "e2e": [r.e2e_s for r in ok if r.e2e_s is not None]}
    out.ttft_s, out.itl_s, out.e2e_s = (_pcts(values[k]) for k in ("ttft", "itl", "e2e"))
    out.tpot_s = _pcts([(r.e2e_s - r.ttft_s) / (n - 1) for r in ok if r.e2e_s is not None and r.ttft_s is not None
                        and (n := r.completion_tokens or 0) > 1])
    out.slo_figures_s = {k: percentile(values[k], b.percentile) for k, b in slo.bounds().items()}
    _server_figures(out, before, after, running, kv)
    _saturation(out, schedule, [r for r in results if r is not None])
    return out


def _server_figures(out: RateSide, before: MetricsSample | None, after: MetricsSample | None,
                    running: list[float], kv: list[float]) -> None:
    """Queueing (the histogram's delta), the running batch, the KV peak and preemptions; n/a with why."""
    failed = next((m for m in (before, after) if m is not None and not m.ok), None)
    if before is None or after is None or failed is not None:
        why = (failed.error if failed else None) or "/metrics was not scraped"
        for f in ("queue_time_mean_s", "running_mean", "kv_cache_usage_peak_perc", "num_preemptions"):
            out.na_reasons[f] = why
        return
    if after.queue_time_seconds_count is None or before.queue_time_seconds_count is None:
        out.na_reasons["queue_time_mean_s"] = "the server's /metrics has no vllm:request_queue_time_seconds"
    else:
        n = after.queue_time_seconds_count - before.queue_time_seconds_count
        out.queue_time_requests = int(n)
        if n > 0:
            out.queue_time_mean_s = ((after.queue_time_seconds_sum or 0) - (before.queue_time_seconds_sum or 0)) / n
            delta = {le: c - before.queue_time_seconds_buckets.get(le, 0.0)
                     for le, c in after.queue_time_seconds_buckets.items()}
            out.queue_time_s = {f"p{q}": histogram_quantile(delta, q / 100) for q in PERCENTILES}
        else:
            out.na_reasons["queue_time_mean_s"] = "no request finished on the server during the step"
    if running:
        out.running_mean, out.running_p95, out.running_samples = (
            sum(running) / len(running), percentile(running, 95), len(running))
    else:
        out.na_reasons["running_mean"] = (f"the step took less than one sample ({KV_SAMPLE_INTERVAL_S:g} s apart, "
                                          "so as not to slow the server)")
    if kv:
        out.kv_cache_usage_peak_perc = max(kv)
    else:
        out.na_reasons["kv_cache_usage_peak_perc"] = "not sampled while the step ran"
    if before.num_preemptions_total is not None and after.num_preemptions_total is not None:
        out.num_preemptions = int(after.num_preemptions_total - before.num_preemptions_total)
    else:
        out.na_reasons["num_preemptions"] = "the server's /metrics has no vllm:num_preemptions_total"


def _saturation(out: RateSide, schedule: ArrivalSchedule, ended: list[SideResult]) -> None:
    """Did the server keep up? Cut requests, or finishes spread over much longer than the arrivals."""
    offs = schedule.offsets_s
    if not out.cut and len(ended) < MIN_TREND_REQUESTS:
        out.na_reasons["saturated"] = (f"{len(ended)} requests: too few to tell falling behind from a burst (at least "
                                       f"{MIN_TREND_REQUESTS}); only cut requests would say so")
    if out.cut:
        out.saturated = True
        out.saturation_note = (f"{out.cut} of {out.sent} requests still open at the step's bound "
                               f"({out.bound_s:.0f} s: arrivals plus the drain limit): cut")
        return
    done = [(o, r.e2e_s) for o, r in zip(offs, ended, strict=False) if r.complete and r.e2e_s is not None]
    if len(done) >= MIN_TREND_REQUESTS:
        finished_at = sorted(o + e for o, e in done)
        arrivals_span, finish_span = done[-1][0] - done[0][0], finished_at[-1] - finished_at[0]
        # A server that keeps up finishes its requests over the arrivals' span give or take one request's
        # latency (the first third's median: before any backlog); one that falls behind, ever later.
        slack = statistics.median(e for _, e in done[:max(1, len(done) // 3)])
        growth = latency_growth(done)
        if arrivals_span > 0 and finish_span > arrivals_span / SATURATED_SHARE + slack:
            out.saturated = True
            out.saturation_note = (f"fell behind: {out.finished} finishes spread over {finish_span:.1f} s against "
                                   f"{arrivals_span:.1f} s of arrivals, more than {1 / SATURATED_SHARE:.2f}x plus one "
                                   f"early request's latency ({slack:.1f} s): the queue grew while requests arrived")
        elif growth is not None and growth > 1 / SATURATED_SHARE - 1:
            # A short step whose early latency is long against its arrivals hides a growing queue from the
            # span rule's allowance; the latency's own trend does not: a server that keeps up finishes
            # later requests as fast as earlier ones, once its batch has filled.
            out.saturated = True
            out.saturation_note = (f"fell behind: latency grew {growth:.2f} s per second of arrivals (the last "
                                   f"third's median against the first third's), so finishes came {1 + growth:.2f}x "
                                   f"as spread as arrivals, more than {1 / SATURATED_SHARE:.2f}x: the queue grew "
                                   "while requests arrived")
    if out.completed_requests_per_s is not None and out.saturated:
        out.saturation_note += (f"; completed {out.completed_requests_per_s:.2f} of "
                                f"{out.offered_requests_per_s:.2f} req/s offered")


def latency_growth(done: Sequence[tuple[float, float]]) -> float | None:
    """How fast end-to-end latency grew over a step's arrivals, in seconds per second of arrivals: the last
    third's median latency less the first third's, over the gap between their median arrival times (a
    two-group slope: one burst or one slow request moves it little). ``done``: (arrival offset, latency)
    in arrival order. None with fewer than MIN_TREND_REQUESTS or no spread of arrivals."""
    if len(done) < MIN_TREND_REQUESTS:
        return None
    third = len(done) // 3
    first, last = done[:third], done[-third:]
    gap = statistics.median(o for o, _ in last) - statistics.median(o for o, _ in first)
    if gap <= 0:
        return None
    return (statistics.median(e for _, e in last) - statistics.median(e for _, e in first)) / gap


async def run_rate_side(server: ServerHandle, schedule: ArrivalSchedule, req: RaceRequest | Sequence[RaceRequest],
                        settings: Settings, slo: RateSlo, drain_s: float, name: str) -> RateSide:
    """Send ``schedule`` to ``server`` open-loop (each request at its time, whatever the others do; arrival
    i sends ``req``, or of a list its request i, wrapping round: a trace's or a workload's requests),
    wait for every request or the bound (arrival window + ``drain_s``), cut what is still open, and
    measure. Never raises for a failing server: its requests fail with the error."""
    http = server.http
    reqs = [req] if isinstance(req, RaceRequest) else list(req)
    bound_s = schedule.window_s + drain_s
    try:
        model = await server.ensure_model(http, settings)
    except StreamError as e:
        results: list[SideResult | None] = [SideResult(side=server.side, url=server.url, error=str(e))
                                            for _ in schedule.offsets_s]
        return side_figures(name, schedule, results, 0, 0.0, bound_s, slo, None, None, [], [], [], None)
    before = await scrape_metrics(http, server.url, settings)
    running: list[float] = []
    kv: list[float] = []
    stop = asyncio.Event()
    sampler = (asyncio.create_task(kv_sampler(http, server.url, settings, kv, stop, running=running))
               if before.ok else None)
    tasks: list[asyncio.Task[SideResult] | None] = []
    lags: list[float] = []
    refused: dict[int, SideResult] = {}
    open_at_end: int | None = None
    open_now: set[asyncio.Task[SideResult]] = set()
    t0 = time.perf_counter()
    try:
        with collector_paused():  # no collector pause at a measured token
            for i, offset in enumerate(schedule.offsets_s):
                wait = t0 + offset - time.perf_counter()
                if wait > 0:
                    await asyncio.sleep(wait)
                lags.append(max(0.0, time.perf_counter() - t0 - offset))
                if len(open_now) >= MAX_OPEN_STREAMS:
                    refused[i] = SideResult(side=server.side, url=server.url, error=(
                        f"not sent: {MAX_OPEN_STREAMS} streams already open (the client's cap)"))
                    tasks.append(None)
                    continue
                task = asyncio.create_task(one_request(http, server, model, reqs[i % len(reqs)], i))
                open_now.add(task)
                task.add_done_callback(open_now.discard)
                tasks.append(task)
            open_at_end = len(open_now)
            live = [t for t in tasks if t is not None]
            left = t0 + bound_s - time.perf_counter()
            if live:
                await asyncio.wait(live, timeout=max(0.0, left))
            t_end = time.perf_counter()
            pending = [t for t in live if not t.done()]
            for t in pending:
                t.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
    finally:
        stop.set()
        if sampler is not None:
            sampler.cancel()
            await asyncio.gather(sampler, return_exceptions=True)
        for task in open_now:  # cancelled from outside (Ctrl-C): leave no stream open
            task.cancel()
        await asyncio.gather(*(t for t in tasks if t is not None), return_exceptions=True)
    after = await scrape_metrics(http, server.url, settings) if before.ok else None
    results = []
    cut = 0
    last_finish = 0.0
    for i, done in enumerate(tasks):
        if done is None:
            results.append(refused[i])
        elif done.cancelled():
            results.append(None)
            cut += 1
        elif (exc := done.exception()) is not None:
            results.append(SideResult(side=server.side, url=server.url, error=f"{type(exc).__name__}: {exc}"))
        else:
            r = done.result()
            results.append(r)
            if r.complete and r.e2e_s is not None:
                last_finish = max(last_finish, schedule.offsets_s[i] + lags[i] + r.e2e_s)
    duration = (t_end - t0) if cut else (last_finish or (t_end - t0))
    return side_figures(name, schedule, results, cut, duration, bound_s, slo, before, after, running, kv, lags,
                        open_at_end)


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def arm_step(side: RateSide, base: RateSide) -> RateArm:
    """An arm's figures at a step and its ratios to the baseline's (None with the reason)."""
    arm = RateArm(side=side, speedup=_ratio(side.decode_tokens_per_s_p50, base.decode_tokens_per_s_p50),
                  throughput_ratio=_ratio(side.output_tokens_per_s, base.output_tokens_per_s),
                  goodput_ratio=_ratio(side.goodput_requests_per_s, base.goodput_requests_per_s))
    for f in ("speedup", "throughput_ratio", "goodput_ratio"):
        if getattr(arm, f) is None:
            arm.na_reasons[f] = "not measured on the baseline or on this arm at this rate"
    return arm


StepFn = Callable[[RateStep], None]
ProgressFn = Callable[[str], None]


async def run_rate_sweep(load: RateLoad, servers: Mapping[str, ServerHandle], req: RaceRequest | Sequence[RaceRequest],
                         settings: Settings, steps: list[RateStep], *, on_step: StepFn | None = None,
                         on_progress: ProgressFn | None = None) -> RateSummary:
    """Every rate of ``load``, ascending: the step's one schedule to the baseline, then to each arm, each
    alone; each step appended to ``steps`` as it ends. Stops after a step at which every server saturated
    (with ``load.stop_when_all_saturated``; the summary says so). Returns the summary of the steps."""
    stopped = ""
    for i, rate in enumerate(load.rates):
        schedule = load.schedule(i)
        sides: dict[str, RateSide] = {}
        label = load.replay.label if load.replay is not None else None
        for name, server in servers.items():
            if on_progress is not None:
                on_progress(f"{label or f'{rate:g} req/s'}: {name}, {len(schedule.offsets_s)} requests over "
                            f"{schedule.window_s:.3g} s (bound {schedule.window_s + load.drain_s:.3g} s)")
            sides[name] = await run_rate_side(server, schedule, req, settings, load.slo, load.drain_s, name)
        base = sides.pop("baseline")
        step = RateStep(rate_requests_per_s=rate, schedule=schedule, label=label, baseline=base,
                        arms={n: arm_step(s, base) for n, s in sides.items()})
        steps.append(step)
        if on_step is not None:
            on_step(step)
        if load.stop_when_all_saturated and all(s.saturated for s in step.servers()) and i + 1 < len(load.rates):
            skipped = ", ".join(f"{r:g}" for r in load.rates[i + 1:])
            stopped = (f"stopped after {rate:g} req/s: every server saturated there (higher rates would only "
                       f"saturate more); not measured: {skipped} req/s")
            break
    summary = rate_summary(load, steps)
    summary.stopped_note = stopped
    return summary


# --------------------------------------------------------------------------- over the steps


def _slo_ratio(side: RateSide, slo: RateSlo) -> float:
    """The worst bound's measured/allowed ratio at a step (<= 1 meets every bound); inf when the step
    lost requests (failed or cut: its percentiles would leave them out), saturated (a server that falls
    behind does not hold the rate, however its short step's requests fared) or a bounded figure is unknown."""
    if side.failed or side.cut or not side.finished or side.saturated:
        return math.inf
    worst = 0.0
    for key, b in slo.bounds().items():
        v = side.slo_figures_s.get(key)
        if v is None:
            return math.inf
        worst = max(worst, v * 1000 / b.ms)
    return worst


def capacity_of(name: str, sides: Sequence[RateSide], slo: RateSlo) -> RateCapacity:
    """The highest rate within the SLO, by linear interpolation (RateCapacity's rule)."""
    out = RateCapacity(name=name)
    if not slo.bounds():
        out.na_reason = "no SLO given"
        return out
    pts = sorted(((s.rate_requests_per_s, _slo_ratio(s, slo)) for s in sides), key=lambda p: p[0])
    if not pts:
        out.na_reason = "no rate measured"
        return out
    if pts[0][1] > 1:
        out.na_reason = f"not even the lowest rate measured ({pts[0][0]:g} req/s) met {slo.describe()}"
        return out
    k = next((i for i, (_, v) in enumerate(pts) if v > 1), None)
    if k is None:
        out.requests_per_s, out.at_least = pts[-1][0], True
        out.method = f"every rate measured met it: at least {pts[-1][0]:g} req/s (not extrapolated)"
        return out
    (r0, v0), (r1, v1) = pts[k - 1], pts[k]
    if math.isinf(v1):
        out.requests_per_s = r0
        out.method = (f"{r1:g} req/s lost requests or saturated: the last rate within it, {r0:g} req/s, "
                      "not interpolated")
        return out
    out.requests_per_s = r0 + (1 - v0) * (r1 - r0) / (v1 - v0)
    out.method = f"interpolated linearly between {r0:g} req/s (met) and {r1:g} req/s (missed)"
    return out


def crossover_of(points: Sequence[tuple[float, float | None]]) -> RateCrossover:
    """An arm's crossover in req/s from its (rate, speedup) points: find_crossover's rules (over the
    rates' order) and the break-even rate, interpolated where the gain first falls below 1.0."""
    known = sorted((r, g) for r, g in points if g is not None)
    idx = find_crossover([(i + 1, g) for i, (_, g) in enumerate(known)], noun="step")
    rate = {i + 1: r for i, (r, _) in enumerate(known)}
    out = RateCrossover(pays_up_to_rate=rate.get(idx.pays_up_to_users or 0),
                        stops_paying_from_rate=rate.get(idx.stops_paying_from_users or 0),
                        loses_from_rate=rate.get(idx.loses_from_users or 0))
    if not known:
        out.text = "no crossover: no rate produced a gain"
        return out
    k = next((i for i, (_, g) in enumerate(known) if g < 1.0), None)
    if k is not None and k > 0:
        (r0, g0), (r1, g1) = known[k - 1], known[k]
        out.break_even_rate = r0 + (g0 - 1.0) * (r1 - r0) / (g0 - g1)
        out.break_even_between = (r0, r1)
    thresholds = f"(pays: ≥ {GAIN_WORTH:.2f}×, loses: < {GAIN_NONE:.2f}×)"
    top = known[-1][0]
    if out.pays_up_to_rate is None:
        out.text = f"does not pay at any rate measured ({known[0][0]:g} to {top:g} req/s) {thresholds}"
    elif out.stops_paying_from_rate is None:
        out.text = f"pays at every rate measured (up to {top:g} req/s) {thresholds}"
    else:
        out.text = f"pays up to {out.pays_up_to_rate:g} req/s"
        out.text += (f" and loses from {out.loses_from_rate:g} req/s" if out.loses_from_rate is not None
                     else f", gains too little to count from {out.stops_paying_from_rate:g} req/s")
        out.text += f" {thresholds}"
    if out.break_even_rate is not None and out.break_even_between is not None:
        lo, hi = out.break_even_between
        out.text += (f"; breaks even near {out.break_even_rate:.3g} req/s (interpolated between {lo:g} and "
                     f"{hi:g}): pays below, loses above")
    elif k == 0:
        out.text += f"; slower than the baseline from the lowest rate ({known[0][0]:g} req/s)"
    return out


def rate_summary(load: RateLoad, steps: Sequence[RateStep],
                 configs: Mapping[str, Mapping[str, Any]] | None = None) -> RateSummary:
    """Every server's capacity under the SLO, every arm's crossover, and the capacity sentence."""
    out = RateSummary()
    names = list(dict.fromkeys(n for s in steps for n in s.arms))
    if load.replay is not None:  # one step at the trace's own times: nothing to search between
        out.capacity_text = (f"no capacity: a {load.replay.label} is one step at the trace's own times; "
                             "search it with --rate")
        return out
    out.capacity["baseline"] = capacity_of("baseline", [s.baseline for s in steps], load.slo)
    for n in names:
        out.capacity[n] = capacity_of(n, [s.arms[n].side for s in steps if n in s.arms], load.slo)
        out.crossovers[n] = crossover_of([(s.rate_requests_per_s, s.arms[n].speedup) for s in steps if n in s.arms])
    out.capacity_text = capacity_sentence(out.capacity, load.slo)
    out.recommendation = rate_schedule(steps, load.slo, configs)
    return out


def batch_of(step: RateStep) -> int | None:
    """The batch size a rate produced: the baseline's mean running batch (vllm:num_requests_running), rounded,
    at least 1; None when it was not sampled."""
    m = step.baseline.running_mean
    return None if m is None else max(1, round(m))


def rate_schedule(steps: Sequence[RateStep], slo: RateSlo, configs: Mapping[str, Mapping[str, Any]] | None = None,
                  schedule_slo: ScheduleSlo | None = None) -> Recommendation | NoRecommendation | None:
    """The recommended schedule of k per batch size from the rate steps (recommend(), its own rules): each
    step's servers as points at the batch size the rate produced (the first rate to produce a size stands
    for it), and each band naming the rates whose batch fell in it. With an ITL SLO, a band's k must meet
    it at p95 (the schedule's own figure); ``schedule_slo``, given, is what a band's k must meet instead."""
    points: list[ServerPoint] = []
    rates: dict[int, list[float]] = {}
    for step in steps:
        batch = batch_of(step)
        if batch is None:
            continue
        rates.setdefault(batch, []).append(step.rate_requests_per_s)
        if len(rates[batch]) > 1:
            continue
        points.append(ServerPoint(users=batch, server="baseline", k=0, itl_p95_s=step.baseline.itl_s.get("p95"),
                                  per_user_decode_tokens_per_s=step.baseline.decode_tokens_per_s_p50))
        points += [ServerPoint(users=batch, server=n, k=a.side.num_spec_tokens, itl_p95_s=a.side.itl_s.get("p95"),
                               per_user_decode_tokens_per_s=a.side.decode_tokens_per_s_p50)
                   for n, a in step.arms.items()]
    if not points:
        return None
    sched_slo = schedule_slo or (ScheduleSlo(max_itl_p95_ms=slo.itl.ms)
                                 if slo.itl is not None and slo.itl.percentile == 95 else None)
    rec = recommend(points, configs, sched_slo)
    if isinstance(rec, Recommendation):
        for band in rec.bands:
            band.rates_requests_per_s = [r for b, rs in sorted(rates.items()) if band.users_from <= b <= band.users_to
                                         for r in rs]
        above = [r for b, rs in rates.items() if b > rec.bands[-1].users_to for r in rs]
        rec.bands[-1].rates_requests_per_s += above
    return rec


def _holds(c: RateCapacity) -> str:
    if c.requests_per_s is None:
        return "none of the rates measured"
    return f"{'at least ' if c.at_least else ''}{c.requests_per_s:.3g} req/s"


def capacity_sentence(capacity: Mapping[str, RateCapacity], slo: RateSlo) -> str:
    """'baseline holds 2.1 req/s within ITL p99 ≤ 120 ms; ngram 2.9 req/s (+38%)'; why not, without an SLO."""
    if not slo.bounds():
        return "no capacity: give an SLO (--slo-ttft-ms, --slo-itl-ms, --slo-e2e-ms)"
    base = capacity.get("baseline")
    parts = [f"baseline holds {_holds(base) if base else 'n/a'} within {slo.describe()}"]
    for name, c in capacity.items():
        if name == "baseline":
            continue
        text = f"{name} {_holds(c)}"
        if base is not None and base.requests_per_s and c.requests_per_s is not None and not base.at_least:
            text += f" ({'≥ ' if c.at_least else ''}{(c.requests_per_s / base.requests_per_s - 1) * 100:+.0f}%)"
        parts.append(text)
    return "; ".join(parts)

