"""The one SLO model (demo/slo.py): its check on given figures, its words, the files written before it."""

from __future__ import annotations

import math

import pytest
from pydantic import ValidationError

from demo.errors import BadInput
from demo.slo import Slo, SloBound, slo_of_bounds

FIGURES_S = {("ttft", 95): 0.40, ("ttft", 50): 0.20, ("itl", 95): 0.050, ("itl", 99): 0.130}


def lookup(figure: str, q: int) -> float | None:
    return FIGURES_S.get((figure, q))


def test_met_missed_and_unknown_with_the_reasons() -> None:
    met = Slo.of_ms(500, 60).check(lookup)
    assert met.meets is True and not met.misses and met.worst_ratio == pytest.approx(50 / 60)
    missed = Slo(ttft=SloBound(ms=300), itl=SloBound(ms=120, percentile=99)).check(lookup)
    assert missed.meets is False
    assert missed.misses == ["TTFT p95 400 ms > 300 ms", "ITL p99 130 ms > 120 ms"]
    assert missed.worst_ratio == pytest.approx(400 / 300)
    unknown = Slo(itl=SloBound(ms=100, percentile=90)).check(lookup)  # p90 not measured
    assert unknown.meets is None and unknown.unknown == ["ITL p90 was not measured"] and math.isinf(unknown.worst_ratio)
    # A miss wins over an unknown: one figure over its bound is enough to say missed.
    both = Slo(ttft=SloBound(ms=300), e2e=SloBound(ms=1000)).check(lookup)
    assert both.meets is False and both.unknown == ["end-to-end latency p95 was not measured"]
    nothing = Slo().check(lookup)
    assert nothing.meets is None and nothing.unknown == ["no SLO given"] and not Slo().given


def test_the_per_user_speed_floor() -> None:
    slo = Slo(min_user_tokens_per_s=20)
    assert slo.check(lookup, 25.0).meets is True and slo.check(lookup, 25.0).worst_ratio == pytest.approx(0.8)
    slow = slo.check(lookup, 12.5)
    assert slow.meets is False and slow.misses == ["per-user decode 12.5 tokens/s < 20"]
    assert slo.check(lookup, None).meets is None
    assert Slo.of_ms(itl_ms=60, min_user_tokens_per_s=20).decode_part().describe() == \
        "ITL p95 ≤ 60 ms and per-user decode ≥ 20 tokens/s"
    assert Slo.of_ms(ttft_ms=500).decode_part().given is False  # prefill is not what k changes


def test_the_words() -> None:
    slo = Slo(ttft=SloBound(ms=500), itl=SloBound(ms=120, percentile=99), min_user_tokens_per_s=20)
    assert slo.describe() == "TTFT p95 ≤ 500 ms and ITL p99 ≤ 120 ms and per-user decode ≥ 20 tokens/s"
    assert Slo().describe() == "no SLO"


def test_files_written_before_the_one_model_still_load() -> None:
    old_capacity = Slo.model_validate({"ttft_ms": 700.0, "itl_ms": None})
    assert old_capacity == Slo(ttft=SloBound(ms=700))
    old_schedule = Slo.model_validate({"min_user_tokens_per_s": 30, "max_itl_p95_ms": 50})
    assert old_schedule == Slo(itl=SloBound(ms=50), min_user_tokens_per_s=30)
    assert Slo.model_validate_json(old_schedule.model_dump_json()) == old_schedule  # and round-trips


def test_bad_bounds_are_refused_in_one_line() -> None:
    with pytest.raises(ValidationError):
        Slo.of_ms(ttft_ms=0)
    with pytest.raises(ValidationError, match="whole percent"):
        SloBound(ms=100, percentile=99.5)
    with pytest.raises(BadInput, match="slo-itl-p"):
        slo_of_bounds({"itl": 100}, {"itl": 100})
    with pytest.raises(BadInput, match="slo-ttft-ms"):
        slo_of_bounds({"ttft": -1})
    assert slo_of_bounds({"itl": 120, "ttft": None}, {"itl": 99}) == Slo(itl=SloBound(ms=120, percentile=99))
