"""The workload profile and the per-request ranking: known inputs, known answers."""

from __future__ import annotations

from typing import Any

import pytest

from demo.results import Message, Side, SideResult, SpecStats
from demo.sweep.profile import (
    RequestOutcome,
    distribution,
    pearson,
    pool_outcomes,
    rank_requests,
    request_outcome,
    workload_profile,
)
from demo.workload import WorkloadRequest


def req(rid: str, text: str = "copy this sentence please exactly") -> WorkloadRequest:
    return WorkloadRequest(id=rid, api="chat", messages=[Message(role="user", content=text)], max_tokens=64)


def side(name: Side, rate: float | None, *, text: str = "", error: str | None = None, acceptance: float | None = None
         ) -> SideResult:
    spec = SpecStats(source="per_request", acceptance_rate=acceptance) if acceptance is not None else None
    return SideResult(side=name, url="u", completion_tokens=40, prompt_tokens=12, ttft_s=0.5, e2e_s=2.0,
                      decode_tokens_per_s=rate, text=text, complete=error is None, error=error, spec=spec)


def outcome(rid: str, speedup: float | None, **kw: Any) -> RequestOutcome:
    return RequestOutcome(id=rid, prompt_sha256="h" + rid, prompt_text=f"prompt {rid}", speedup=speedup,
                          **kw)


def test_request_outcome_from_two_sides() -> None:
    r = req("a")
    o = request_outcome(r, side("baseline", 10.0, text="copy this sentence please"),
                        side("speculative", 25.0, text="x", acceptance=0.6))
    assert (o.id, o.speedup, o.acceptance_rate) == ("a", 2.5, 0.6)
    assert (o.prompt_tokens, o.output_tokens, o.prefill_share) == (12, 40, 0.25)
    assert o.copyness == 1.0  # both trigrams of the answer are in the prompt
    assert o.prompt_text == "copy this sentence please exactly"
    assert o.prompt_sha256 == r.prompt_sha256 and len(o.prompt_sha256) == 64
    red = request_outcome(r, side("baseline", 10.0, text="copy this sentence please"),
                          side("speculative", 25.0, acceptance=0.6), redact=True)
    assert red.prompt_text is None and red.copyness == 1.0 and red.prompt_sha256 == r.prompt_sha256


def test_request_outcome_with_a_failed_side_keeps_reasons() -> None:
    o = request_outcome(req("b"), side("baseline", 10.0, text="an answer of words"),
                        side("speculative", None, error="HTTP 400: prompt too long"))
    assert o.speedup is None and o.na_reasons["speedup"] == "speculative failed"
    assert o.error == "HTTP 400: prompt too long"
    assert o.acceptance_rate is None and o.na_reasons["acceptance_rate"] == "HTTP 400: prompt too long"
    assert o.copyness == 0.0


def test_rank_most_and_least_without_overlap() -> None:
    outs = [outcome(f"r{i:02d}", 1.0 + i / 10) for i in range(12)] + [outcome("failed", None)]
    most, least, unranked = rank_requests(outs)
    assert [m.id for m in most] == ["r11", "r10", "r09", "r08", "r07"]
    assert [m.id for m in least] == ["r00", "r01", "r02", "r03", "r04"]
    assert unranked == ["failed"]
    assert most[0].speedup == pytest.approx(2.1)
    assert most[0].prompt_preview == "prompt r11"
    # Seven measured: five gain most, the other two are the least.
    most, least, _ = rank_requests(outs[:7])
    assert [m.id for m in most] == ["r06", "r05", "r04", "r03", "r02"]
    assert [m.id for m in least] == ["r00", "r01"]
    # Ties are broken by id, so the ranking is deterministic.
    most, least, _ = rank_requests([outcome("b", 1.5), outcome("a", 1.5), outcome("c", 1.0)], n=1)
    assert [m.id for m in most] == ["a"] and [m.id for m in least] == ["c"]


def test_preview_is_one_line_and_capped() -> None:
    long = RequestOutcome(id="x", prompt_sha256="h", prompt_text="line one\n\n  line two " + "w" * 300, speedup=1.0)
    (ranked,), _, _ = rank_requests([long])
    assert ranked.prompt_preview is not None
    assert ranked.prompt_preview.startswith("line one line two www")
    assert len(ranked.prompt_preview) == 120 and ranked.prompt_preview.endswith("…")


def test_distribution_and_pearson_known_values() -> None:
    d = distribution([10, 20, 30, 40, None])
    assert d is not None
    # Inclusive interpolation over 4 values: p50 = 25, p95 = 30 + 0.85 x 10 = 38.5.
    assert (d.p50, d.p95, d.max, d.n) == (25.0, pytest.approx(38.5), 40.0, 4)
    assert distribution([None]) is None
    assert pearson([1, 2, 3], [2, 4, 6]) == pytest.approx(1.0)
    assert pearson([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
    assert pearson([1, 2, 3, 4], [1, 3, 2, 4]) == pytest.approx(0.8)
    assert pearson([1, 2], [1, 2]) is None
    assert pearson([1, 1, 1], [1, 2, 3]) is None


def test_workload_profile() -> None:
    outs = [
        outcome("a", 2.0, prompt_tokens=100, output_tokens=50, prefill_share=0.1, copyness=0.8, acceptance_rate=0.7),
        outcome("b", 1.5, prompt_tokens=200, output_tokens=30, prefill_share=0.2, copyness=0.5, acceptance_rate=0.4),
        outcome("c", 0.9, prompt_tokens=300, output_tokens=10, prefill_share=0.3, copyness=0.1, acceptance_rate=0.1),
        outcome("d", None, error="timeout", na_reasons={"copyness": "the baseline answer did not finish"}),
    ]
    prof = workload_profile(outs)
    assert prof.requests == 4
    assert prof.prompt_tokens is not None and (prof.prompt_tokens.p50, prof.prompt_tokens.max) == (200.0, 300.0)
    assert prof.output_tokens is not None and prof.output_tokens.n == 3
    assert prof.prefill_share is not None and prof.prefill_share.p50 == pytest.approx(0.2)
    assert prof.copyness is not None and prof.acceptance_rate is not None
    assert prof.copyness_acceptance_r is not None and prof.copyness_acceptance_r > 0.95
    assert [r.id for r in prof.gain_most] == ["a", "b", "c"] and prof.gain_least == []
    assert prof.unranked == ["d"]
    assert prof.gain_most[0].prompt_preview == "prompt a"
    red = workload_profile(outs, redacted=True)
    assert red.redacted and all(r.prompt_preview is None for r in red.gain_most)
    assert red.gain_most[0].prompt_sha256 == "ha"


def test_profile_reasons_when_unknown() -> None:
    prof = workload_profile([outcome("a", None, na_reasons={"copyness": "the answer is empty"})])
    assert prof.copyness is None and prof.na_reasons["copyness"] == "the answer is empty"
    assert prof.na_reasons["copyness_acceptance_r"] == "0 request(s) have both copy-ness and acceptance; 3 are needed"
    assert prof.na_reasons["gain_most"] == "no request has a speedup"
    with pytest.raises(ValueError, match="pool_outcomes"):
        workload_profile([outcome("a", 1.0), outcome("a", 2.0)])


def test_pool_outcomes_takes_medians_per_id() -> None:
    pooled = pool_outcomes([outcome("a", 1.0, output_tokens=10), outcome("b", 3.0),
                            outcome("a", 2.0, output_tokens=11), outcome("a", 4.0, output_tokens=20)])
    assert [p.id for p in pooled] == ["a", "b"]
    assert pooled[0].speedup == 2.0 and pooled[0].output_tokens == 11
    assert pooled[1].na_reasons["output_tokens"] == "not measured"
