"""Over the rate steps: each server's capacity under the SLO (``capacity_of``: linear interpolation,
never beyond the rates measured), each arm's crossover in requests per second, the k schedule,
and the sentences that say them."""


from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from demo.load.rate_models import RateCapacity, RateCrossover, RateLoad, RateSide, RateStep, RateSummary
from demo.slo import Slo
from demo.sweep.crossover import GAIN_NONE, GAIN_WORTH, find_crossover
from demo.sweep.models import NoRecommendation, Recommendation
from demo.sweep.schedule import ServerPoint, recommend

# --------------------------------------------------------------------------- over the steps


def _slo_ratio(side: RateSide, slo: Slo) -> float:
    """The worst bound's measured/allowed ratio at a step (<= 1 meets every bound); inf when the step
    lost requests (failed or cut: its percentiles would leave them out), saturated (a server that falls
    behind does not hold the rate, however its short step's requests fared) or a bounded figure is unknown."""
    if side.failed or side.cut or not side.finished or side.saturated:
        return math.inf
    # The step's figures at each bound's own percentile (side_figures computed them so).
    return slo.check(lambda figure, _q: side.slo_figures_s.get(figure), side.decode_tokens_per_s_p50).worst_ratio


def capacity_of(name: str, sides: Sequence[RateSide], slo: Slo) -> RateCapacity:
    """The highest rate within the SLO, by linear interpolation (RateCapacity's rule)."""
    out = RateCapacity(name=name)
    if not slo.given:
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


def rate_schedule(steps: Sequence[RateStep], slo: Slo, configs: Mapping[str, Mapping[str, Any]] | None = None,
                  schedule_slo: Slo | None = None) -> Recommendation | NoRecommendation | None:
    """The recommended schedule of k per batch size from the rate steps (recommend(), its own rules): each
    step's servers as points at the batch size the rate produced (the first rate to produce a size stands
    for it), and each band naming the rates whose batch fell in it. With an ITL SLO, a band's k must meet
    it at p95 (the schedule's own figure), as it must a per-user decode floor; ``schedule_slo``, given, is
    what a band's k must meet instead."""
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
    decode = slo.decode_part()
    if decode.itl is not None and decode.itl.percentile != 95:  # the points carry ITL p95 only
        decode = decode.model_copy(update={"itl": None})
    sched_slo = schedule_slo or (decode if decode.given else None)
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


def capacity_sentence(capacity: Mapping[str, RateCapacity], slo: Slo) -> str:
    """'baseline holds 2.1 req/s within ITL p99 ≤ 120 ms; ngram 2.9 req/s (+38%)'; why not, without an SLO."""
    if not slo.given:
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
