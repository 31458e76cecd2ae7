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
  TPOT's mean too, beside the server's own mean of it (``vllm:request_time_per_output_token_seconds``
  between the scrapes before and after the step): the check of our reading against the server's;
- queueing time from the server's ``vllm:request_queue_time_seconds`` histogram: its delta
  between one /metrics scrape before the step and one after it (finished requests only; the mean
  is exact, the percentiles are estimates no finer than vLLM's buckets);
- the running batch from ``vllm:num_requests_running``, sampled as the evaluator samples KV use
  (demo.sweep.runner ``MetricsAround``: once a second, so as not to slow the server): mean and p95;
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
(``rate_summary``, demo/load/rate_summary.py): each server's capacity under the SLO
(``RateCapacity``) and each arm's crossover in requests per second (``RateCrossover``). The models
live in demo/load/rate_models.py.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping, Sequence

from demo.client import StreamError, collector_paused
from demo.load.arrivals import ArrivalSchedule
from demo.load.rate_models import (
    MIN_TREND_REQUESTS,
    PERCENTILES,
    SATURATED_SHARE,
    RateArm,
    RateLoad,
    RateSide,
    RateStep,
    RateSummary,
)
from demo.load.rate_summary import rate_summary
from demo.load.send import send_schedule
from demo.measure import median, percentile
from demo.metrics import MetricsSample, histogram_quantile, tpot_mean_between
from demo.results import RaceRequest, SideResult
from demo.settings import Settings
from demo.slo import Slo, SloFigure
from demo.streaming import ServerHandle
from demo.sweep.headroom import HeadroomProbe
from demo.sweep.runner import KV_SAMPLE_INTERVAL_S, MetricsAround

# --------------------------------------------------------------------------- measuring one server


def _pcts(values: list[float]) -> dict[str, float | None]:
    return {f"p{q}": percentile(values, q) for q in PERCENTILES}


def request_meets(r: SideResult, slo: Slo) -> bool:
    """A finished request meets the SLO on its own figures (its TTFT, its e2e, its ITLs' percentile, its
    decode speed); an unknown figure does not meet its bound."""
    def figure_s(figure: SloFigure, q: int) -> float | None:
        if figure == "itl":
            return percentile(r.itl_s, q) if r.itl_s else None
        return r.ttft_s if figure == "ttft" else r.e2e_s

    return slo.check(figure_s, r.decode_tokens_per_s).meets is True


def _is_timeout(error: str) -> bool:
    return "timed out" in error.lower() or "timeout" in error.lower()


def side_figures(name: str, schedule: ArrivalSchedule, results: Sequence[SideResult | None], cut: int,
                 duration_s: float, bound_s: float, slo: Slo, before: MetricsSample | None,
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
        if slo.given:
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
    tpots = [(r.e2e_s - r.ttft_s) / (n - 1) for r in ok if r.e2e_s is not None and r.ttft_s is not None
             and (n := r.completion_tokens or 0) > 1]
    out.tpot_s = _pcts(tpots)
    out.tpot_mean_s = statistics.fmean(tpots) if tpots else None
    if not tpots:
        out.na_reasons["tpot_mean_s"] = "no finished request had two tokens or more"
    out.slo_figures_s = {k: percentile(values[k], b.percentile) for k, b in slo.bounds().items()}
    _server_figures(out, before, after, running, kv)
    mark_saturation(out, schedule, [r for r in results if r is not None])
    return out


def _server_figures(out: RateSide, before: MetricsSample | None, after: MetricsSample | None,
                    running: list[float], kv: list[float]) -> None:
    """Queueing (the histogram's delta), the running batch, the KV peak and preemptions; n/a with why."""
    failed = next((m for m in (before, after) if m is not None and not m.ok), None)
    if before is None or after is None or failed is not None:
        why = (failed.error if failed else None) or "/metrics was not scraped"
        for f in ("queue_time_mean_s", "running_mean", "kv_cache_usage_peak_perc", "num_preemptions",
                  "server_tpot_mean_s"):
            out.na_reasons[f] = why
        return
    out.server_tpot_mean_s, _, tpot_na = tpot_mean_between(before, after)
    if tpot_na:
        out.na_reasons["server_tpot_mean_s"] = tpot_na
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


def mark_saturation(out: RateSide, schedule: ArrivalSchedule, ended: list[SideResult]) -> None:
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
                        settings: Settings, slo: Slo, drain_s: float, name: str) -> RateSide:
    """Send ``schedule`` to ``server`` open-loop (each request at its time, whatever the others do; arrival
    i sends ``req``, or of a list its request i, wrapping round: a trace's or a workload's requests),
    wait for every request or the bound (arrival window + ``drain_s``), cut what is still open, and
    measure. With the handle's fleet (``--ray``) its workers send the schedule between them, from one
    start; the /metrics scrapes stay here. Never raises for a failing server: its requests fail with the error."""
    http = server.http
    reqs = [req] if isinstance(req, RaceRequest) else list(req)
    bound_s = schedule.window_s + drain_s
    try:
        model = await server.ensure_model(http, settings)
    except StreamError as e:
        failed: list[SideResult | None] = [SideResult(side=server.side, url=server.url, error=str(e))
                                           for _ in schedule.offsets_s]
        return side_figures(name, schedule, failed, 0, 0.0, bound_s, slo, None, None, [], [], [], None)
    async with MetricsAround(http, server.url, settings) as metrics:
        if server.fleet is not None:
            out = await server.fleet.send_schedule(server, model, reqs, schedule.offsets_s, bound_s, settings)
        else:
            async with HeadroomProbe() as probe:  # is the client keeping up while it sends?
                with collector_paused():  # no collector pause at a measured token
                    out = await send_schedule(http, server, model, reqs, list(enumerate(schedule.offsets_s)),
                                              time.perf_counter(), bound_s, on_ended=probe.stop)
            out.client = probe.result()
    results = [out.results.get(i) for i in range(len(schedule.offsets_s))]
    lags = [out.lags_s.get(i, 0.0) for i in range(len(schedule.offsets_s))]
    cut = sum(r is None for r in results)
    last_finish = max((schedule.offsets_s[i] + lags[i] + r.e2e_s for i, r in enumerate(results)
                       if r is not None and r.complete and r.e2e_s is not None), default=0.0)
    duration = out.end_s if cut else (last_finish or out.end_s)
    side = side_figures(name, schedule, results, cut, duration, bound_s, slo, metrics.before, metrics.after,
                        metrics.running, metrics.kv, lags, out.open_at_end)
    side.client = out.client
    return side


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
