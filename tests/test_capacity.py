"""Capacity and cost: the SLO point, the cost arithmetic by hand, no SLO, nothing within it, a side failing."""

from __future__ import annotations

import json

import pytest

from demo.results import Side
from demo.slo import Slo
from demo.sweep.capacity import (
    Capacity,
    MeasuredPoint,
    build_capacity,
    capacity_summary,
    cost_per_million_output_tokens,
)
from demo.sweep.models import CellResult, CellSettings, SideCell, Spread
from demo.sweep.pooling import measured_points

# (concurrency, output tokens/s, TTFT p95 s, ITL p95 s): throughput and latency both grow with concurrency.
BASE = [(1, 20.0, 0.20, 0.040), (2, 36.0, 0.35, 0.050), (4, 60.0, 0.60, 0.070), (8, 70.0, 1.20, 0.120)]
SPEC = [(1, 40.0, 0.20, 0.020), (2, 70.0, 0.35, 0.030), (4, 110.0, 0.55, 0.045), (8, 120.0, 1.10, 0.090)]


def points(base: list[tuple[int, float, float, float]] = BASE,
           spec: list[tuple[int, float, float, float]] = SPEC) -> list[MeasuredPoint]:
    return [MeasuredPoint(side=side, concurrency=c, output_tokens_per_s=t, ttft_p95_s=a, itl_p95_s=i)
            for side, rows in (("baseline", base), ("speculative", spec)) for c, t, a, i in rows]


def test_cost_arithmetic_by_hand() -> None:
    # 3.60 per hour, 100 tokens/s = 360,000 tokens per hour -> 10.00 per million.
    assert cost_per_million_output_tokens(3.60, 100.0) == pytest.approx(10.0)
    # 2.50 / (36 x 3600) x 1e6 = 2.5 / 129,600 x 1e6 = 19.2901...
    assert cost_per_million_output_tokens(2.50, 36.0) == pytest.approx(19.29012, abs=1e-5)
    assert cost_per_million_output_tokens(2.50, 0.0) is None


def test_capacity_point_when_latency_grows_with_concurrency() -> None:
    cap = build_capacity(points(), slo=Slo.of_ms(700, 60), gpu_hour_price=2.50)
    assert cap.concurrencies == [1, 2, 4, 8]
    meets = {(p.side, p.concurrency): p.meets_slo for p in cap.points}
    assert meets == {("baseline", 1): True, ("baseline", 2): True, ("baseline", 4): False, ("baseline", 8): False,
                     ("speculative", 1): True, ("speculative", 2): True, ("speculative", 4): True,
                     ("speculative", 8): False}
    b4 = next(p for p in cap.points if (p.side, p.concurrency) == ("baseline", 4))
    assert b4.slo_misses == ["ITL p95 70 ms > 60 ms"]
    s8 = next(p for p in cap.points if (p.side, p.concurrency) == ("speculative", 8))
    assert s8.slo_misses == ["TTFT p95 1,100 ms > 700 ms", "ITL p95 90 ms > 60 ms"]
    assert cap.best.baseline is not None and cap.best.speculative is not None
    assert (cap.best.baseline.concurrency, cap.best.baseline.output_tokens_per_s) == (2, 36.0)
    assert (cap.best.speculative.concurrency, cap.best.speculative.output_tokens_per_s) == (4, 110.0)
    assert cap.best.baseline.output_tokens_per_gpu_hour == 129_600
    assert cap.best.baseline.cost_per_million_output_tokens == pytest.approx(19.29012, abs=1e-5)
    assert cap.best.speculative.cost_per_million_output_tokens == pytest.approx(2.5 / 396_000 * 1e6)
    # 110 / 36 = 3.0556 -> 206% more tokens per GPU-hour; 1 - 36/110 = 67.3% cheaper per token.
    assert cap.saving.more_tokens_per_gpu_hour_pct == pytest.approx(205.5556, abs=1e-3)
    assert cap.saving.cost_saving_pct == pytest.approx(67.2727, abs=1e-3)
    assert cap.saving.text == "speculative serves 206% more tokens per GPU-hour at your latency target"
    assert cap.note == "Measured at concurrency 1, 2, 4, 8 only; nothing is extrapolated beyond 8."
    # Every point has a cost.
    assert all(p.cost_per_million_output_tokens is not None for p in cap.points)


def test_highest_concurrency_meeting_the_target_even_past_a_miss() -> None:
    # A noisy point: c=2 misses, c=4 meets. The highest measured concurrency that meets it wins.
    base = [(1, 20.0, 0.2, 0.04), (2, 30.0, 0.9, 0.05), (4, 50.0, 0.6, 0.05)]
    cap = build_capacity(points(base, SPEC[:1]), slo=Slo.of_ms(ttft_ms=700))
    assert cap.best.baseline is not None and cap.best.baseline.concurrency == 4


def test_results_json_shape() -> None:
    cap = build_capacity(points(), slo=Slo.of_ms(700, 60), gpu_hour_price=2.50)
    data = json.loads(cap.model_dump_json())
    assert {"gpu_hour_price", "slo", "points", "best", "saving", "note", "price_note"} <= set(data)
    assert data["slo"] == {"ttft": {"ms": 700.0, "percentile": 95.0}, "itl": {"ms": 60.0, "percentile": 95.0},
                           "e2e": None, "min_user_tokens_per_s": None}
    assert {"side", "concurrency", "output_tokens_per_s", "ttft_p95_s", "itl_p95_s", "meets_slo",
            "cost_per_million_output_tokens"} <= set(data["points"][0])
    assert Capacity.model_validate(data) == cap  # results.json reads back


def test_no_slo_takes_the_top_throughput_and_says_so() -> None:
    cap = build_capacity(points())
    assert all(p.meets_slo is None and p.na_reasons["meets_slo"] == "no latency target given" for p in cap.points)
    assert cap.best.baseline is not None and cap.best.speculative is not None
    assert (cap.best.baseline.concurrency, cap.best.speculative.concurrency) == (8, 8)
    assert not cap.best.baseline.at_highest_measured  # only said of a latency target
    assert cap.saving.text == ("speculative serves 71% more tokens per GPU-hour at each server's best measured "
                               "concurrency")
    assert all(p.cost_per_million_output_tokens is None for p in cap.points)
    assert cap.points[0].na_reasons["cost_per_million_output_tokens"].startswith("no GPU-hour price given")
    text = capacity_summary(cap)
    assert text.startswith("No latency target was given, so each server is taken at its highest measured throughput.")
    assert "No GPU-hour price was given, so no cost is shown." in text


def test_nothing_meets_the_slo() -> None:
    cap = build_capacity(points(), slo=Slo.of_ms(ttft_ms=100), gpu_hour_price=2.0)
    assert cap.best.baseline is None and cap.best.speculative is None
    assert cap.best.na_reasons["baseline"] == ("it meets the latency target at no measured concurrency "
                                               "(at 1: TTFT p95 200 ms > 100 ms)")
    assert cap.saving.text == "none: neither server has a capacity point"
    assert cap.saving.more_tokens_per_gpu_hour_pct is None
    assert "No saving: neither server has a capacity point." in capacity_summary(cap)


def test_speculative_slower_is_none_with_the_reason() -> None:
    cap = build_capacity(points(SPEC, BASE), slo=Slo.of_ms(itl_ms=60))
    assert cap.saving.text.startswith("none: speculative serves ")
    assert cap.saving.more_tokens_per_gpu_hour_pct is not None and cap.saving.more_tokens_per_gpu_hour_pct < 0


def test_one_side_failing() -> None:
    failed = [MeasuredPoint(side="speculative", concurrency=c, error="connection refused") for c in (1, 2)]
    base = [p for p in points(BASE[:2], []) if p.side == "baseline"]
    cap = build_capacity(base + failed, slo=Slo.of_ms(ttft_ms=700), gpu_hour_price=1.0)
    spec_points = [p for p in cap.points if p.side == "speculative"]
    assert all(p.meets_slo is None and p.na_reasons["meets_slo"] == "connection refused" for p in spec_points)
    assert all(p.na_reasons["output_tokens_per_s"] == "connection refused" for p in spec_points)
    assert all(p.na_reasons["cost_per_million_output_tokens"] == "no output tokens/s measured here"
               for p in spec_points)
    assert cap.best.speculative is None
    assert cap.best.na_reasons["speculative"] == "it failed at every measured concurrency (connection refused)"
    assert cap.saving.text == ("none: speculative has no capacity point: it failed at every measured "
                               "concurrency (connection refused)")
    # The other way round: only speculative has a point.
    cap2 = build_capacity([MeasuredPoint(side="baseline", concurrency=1, error="HTTP 500")]
                          + [p for p in points([], SPEC[:2]) if p.side == "speculative"], slo=Slo.of_ms(ttft_ms=700))
    assert cap2.saving.text.startswith("speculative only: it meets your latency target (up to concurrency 2, "
                                       "70.0 output tokens/s) and the baseline does not: it failed")


def test_unmeasured_latency_is_unknown_not_met() -> None:
    m = [MeasuredPoint(side="baseline", concurrency=1, output_tokens_per_s=10.0, ttft_p95_s=0.1),
         MeasuredPoint(side="speculative", concurrency=1, output_tokens_per_s=20.0, ttft_p95_s=0.1, itl_p95_s=0.01)]
    cap = build_capacity(m, slo=Slo.of_ms(500, 50))
    assert cap.points[0].meets_slo is None
    assert cap.points[0].na_reasons["meets_slo"] == "ITL p95 was not measured"
    assert cap.best.baseline is None and cap.best.speculative is not None


def test_target_met_at_the_highest_concurrency_is_flagged() -> None:
    cap = build_capacity(points(), slo=Slo.of_ms(ttft_ms=5000), gpu_hour_price=2.5, shared_gpu=True)
    assert cap.best.baseline is not None and cap.best.baseline.at_highest_measured
    assert cap.note.endswith("The baseline and speculative servers still met the target at 8, the highest "
                             "concurrency run: their capacity may be higher; run higher concurrencies to find it.")


def test_price_note_says_which_share_the_price_covers() -> None:
    own = build_capacity(points(), gpu_hour_price=2.5)
    assert own.price_note == "Each server runs on its own GPU; $2.50 per GPU-hour is charged to each side's throughput."
    seq = build_capacity(points(), gpu_hour_price=2.5, shared_gpu=True, order="sequential")
    assert "measured one at a time" in seq.price_note and "whole GPU" in seq.price_note
    sim = build_capacity(points(), gpu_hour_price=2.5, shared_gpu=True, order="simultaneous")
    assert "upper bounds" in sim.price_note


def test_summary_paragraph() -> None:
    cap = build_capacity(points(), slo=Slo.of_ms(700, 60), gpu_hour_price=2.50)
    assert capacity_summary(cap) == (
        "Your latency target: TTFT p95 ≤ 700 ms and ITL p95 ≤ 60 ms. "
        "The baseline server served 36.0 output tokens/s within it, with 2 requests at once "
        "($19.29 per million output tokens); the speculative server served 110.0 output tokens/s within it, "
        "with 4 requests at once ($6.31 per million output tokens). Speculative serves 206% more tokens per "
        "GPU-hour at your latency target, so each output token costs 67% less. Each server runs on its own GPU; "
        "$2.50 per GPU-hour is charged to each side's throughput. Measured at concurrency 1, 2, 4, 8 only; "
        "nothing is extrapolated beyond 8.")


def test_duplicate_points_are_refused() -> None:
    with pytest.raises(ValueError, match="two points for baseline at concurrency 1"):
        build_capacity(points(BASE[:1] + BASE[:1], []))


def _cell(c: int, base_tps: float | None, spec_tps: float | None, errors: list[str]) -> CellResult:
    settings = CellSettings(preset="w", temperature=0.0, concurrency=c, max_tokens=64, api="chat", repeats=3,
                            warmup=1, order="sequential", baseline_url="b", speculative_url="s")

    def side(name: Side, tps: float | None) -> SideCell:
        sc = SideCell(side=name,
                      output_tokens_per_s=Spread(median=tps, min=tps, max=tps, n=3) if tps else None,
                      ttft_p50_s=0.1, ttft_p95_s=0.2 * c, itl_p50_s=0.01, itl_p95_s=0.02 * c)
        if tps is None:
            sc.na_reasons["output_tokens_per_s"] = "no request finished"
        return sc

    return CellResult.model_validate({"settings": settings, "baseline": side("baseline", base_tps),
                                      "speculative": side("speculative", spec_tps), "errors": errors})


def test_points_from_cells() -> None:
    cells = [_cell(1, 20.0, 40.0, []), _cell(2, 36.0, None, ["speculative: HTTP 500 from the server"])]
    pts = measured_points(cells)
    assert [(p.side, p.concurrency, p.output_tokens_per_s, p.error) for p in pts] == [
        ("baseline", 1, 20.0, None), ("speculative", 1, 40.0, None),
        ("baseline", 2, 36.0, None), ("speculative", 2, None, "HTTP 500 from the server"),
    ]
    assert (pts[2].ttft_p95_s, pts[2].itl_p95_s, pts[2].ttft_p50_s, pts[2].itl_p50_s) == (0.4, 0.04, 0.1, 0.01)
    cap = build_capacity(pts, slo=Slo.of_ms(ttft_ms=500))
    assert cap.best.speculative is not None and cap.best.speculative.concurrency == 1
    assert cap.best.baseline is not None and cap.best.baseline.concurrency == 2
