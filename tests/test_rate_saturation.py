"""Saturation as an outcome (demo/load/rate.py ``mark_saturation``): a step says when its server fell
behind, from what the requests themselves recorded; here on hand-made steps, where the truth is known
exactly (tests/test_load_rate.py checks the same on the stand-ins)."""

from __future__ import annotations

import statistics

from demo.load.arrivals import ArrivalSchedule
from demo.load.rate import latency_growth, mark_saturation
from demo.load.rate_models import SATURATED_SHARE, RateSide
from demo.load.rate_summary import capacity_of
from demo.results import SideResult
from demo.slo import Slo


def step(latencies_s: list[float], gap_s: float = 1.0) -> tuple[RateSide, ArrivalSchedule, list[SideResult]]:
    offsets = [i * gap_s for i in range(len(latencies_s))]
    schedule = ArrivalSchedule.from_offsets(offsets, window_s=len(offsets) * gap_s)
    ended = [SideResult(side="baseline", url="http://127.0.0.1:1", complete=True, e2e_s=e) for e in latencies_s]
    side = RateSide(name="baseline", rate_requests_per_s=1 / gap_s, sent=len(ended), finished=len(ended))
    return side, schedule, ended


def test_a_queue_that_grows_without_cuts_is_saturation() -> None:
    # Like the real CPU baseline at 1 req/s offered (issue 41's busy sweep: completed 0.51 req/s):
    # 16 requests, the early ones 12 s each, every later one waiting longer; none cut. The span rule's
    # allowance (one early request's latency, 13 s, against 15 s of arrivals) lets it pass.
    lat = [12.0 + 0.5 * i for i in range(16)]  # finishes spread 1.5x as wide as the arrivals
    side, schedule, ended = step(lat)
    finish_span, arrivals_span = (15 + lat[-1]) - lat[0], 15
    assert finish_span < arrivals_span / SATURATED_SHARE + statistics.median(lat[:5])  # the span rule: kept up
    mark_saturation(side, schedule, ended)
    assert side.saturated, side.saturation_note
    assert "latency grew 0.50 s per second of arrivals" in side.saturation_note


def test_a_server_that_keeps_up_is_not_saturated_even_while_its_batch_fills() -> None:
    # Latency rises while the batch fills (the first few requests find an empty server), then holds:
    # finishes keep pace with arrivals.
    lat = [7.7, 7.9, 8.1, 8.3, 8.4, 8.5] + [8.5, 8.6, 8.4, 8.5, 8.6, 8.5, 8.4, 8.6, 8.5, 8.5]
    side, schedule, ended = step(lat, gap_s=2.0)
    mark_saturation(side, schedule, ended)
    assert not side.saturated, side.saturation_note


def test_the_growth_bound_is_the_span_rules_share() -> None:
    # Just under and just over 1/SATURATED_SHARE - 1 seconds of latency per second of arrivals.
    bound = 1 / SATURATED_SHARE - 1
    for slope, want in ((bound * 0.8, False), (bound * 1.25, True)):
        side, schedule, ended = step([1.0 + slope * i for i in range(24)])
        growth = latency_growth([(float(i), e.e2e_s or 0.0) for i, e in enumerate(ended)])
        assert growth is not None and abs(growth - slope) < 1e-9
        mark_saturation(side, schedule, ended)
        assert side.saturated is want, (slope, side.saturation_note)


def test_too_few_requests_give_no_trend() -> None:
    assert latency_growth([(float(i), 1.0 + i) for i in range(7)]) is None


def test_a_saturated_step_does_not_hold_its_rate_though_its_requests_met_the_slo() -> None:
    # A step 10x above what the server holds, short enough that its few requests all met the SLO:
    # the capacity is the last rate that kept up, not "at least" the saturated one.
    slo = Slo.model_validate({"itl": {"ms": 100, "percentile": 95}})
    steps = [RateSide(name="baseline", rate_requests_per_s=r, sent=10, finished=10, slo_figures_s={"itl": 0.05},
                      saturated=r > 4) for r in (2, 4, 40)]
    cap = capacity_of("baseline", steps, slo)
    assert cap.requests_per_s == 4 and not cap.at_least, cap
    assert "40 req/s lost requests or saturated" in cap.method
