"""The numbers against the truth of a stand-in server that sends several tokens per chunk.

The rate checks run the stand-ins in processes of their own (harness/standin_process.py): in the
client's process they share one GIL with it, and a busy machine's hiccup at the first or the last
token of a stream of well under a second moved a measured rate by over 10%."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from demo.race import run_race
from demo.results import Message, RaceRequest
from demo.settings import Settings
from harness.standin import Standin, StandinBehavior
from harness.standin_process import StandinProcess, process_pair

REQ = RaceRequest(messages=[Message(role="user", content="Reformat this JSON.")], max_tokens=150)


def race(base: Standin | StandinProcess, spec: Standin | StandinProcess, req: RaceRequest = REQ, **settings: Any):
    s = Settings(baseline_url=base.url, speculative_url=spec.url, save_runs=False, **settings)
    return asyncio.run(run_race(req, s))


@pytest.mark.parametrize("per_request", [True, False], ids=["per-request-metrics", "metrics-delta"])
def test_multi_token_chunks_measured_right(per_request: bool) -> None:
    # 150 tokens: 2.5 s on the baseline, 1 s speculative (a 50 ms hiccup is 5% of 1 s).
    base_b = StandinBehavior(tokens_per_s=60, ttft_s=0.02)
    spec_b = StandinBehavior(tokens_per_s=150, ttft_s=0.02, speculative=True, chunk_sizes=[1, 3, 5, 2],
                             per_request_metrics=per_request)
    with process_pair(base_b, spec_b) as (base, spec):
        result = race(base, spec, REQ.model_copy(update={"order": "sequential"}))
        bt, st = base.truth()[-1], spec.truth()[-1]
    b, s = result.baseline, result.speculative
    assert b.error is None and s.error is None
    # tokens: exactly what the server sent
    assert b.completion_tokens == bt.completion_tokens == 150
    assert s.completion_tokens == st.completion_tokens == 150
    # decode tokens/s within 5% of what the server really sent
    assert st.decode_tokens_per_s is not None and bt.decode_tokens_per_s is not None
    assert s.decode_tokens_per_s == pytest.approx(st.decode_tokens_per_s, rel=0.05)
    assert b.decode_tokens_per_s == pytest.approx(bt.decode_tokens_per_s, rel=0.05)
    assert result.speedup == pytest.approx(st.decode_tokens_per_s / bt.decode_tokens_per_s, rel=0.08)
    # acceptance: the truth of the chunks sent
    assert s.spec is not None and s.spec.source == ("per_request" if per_request else "metrics_delta")
    assert s.spec.acceptance_rate == pytest.approx(st.acceptance_rate)
    assert s.spec.mean_acceptance_length == pytest.approx(st.mean_acceptance_length)
    assert (s.spec.accepted_tokens, s.spec.drafts, s.spec.draft_tokens) == (st.accepted, st.drafts, st.draft_tokens)
    assert s.tokens_per_chunk == {n: st.chunk_sizes_sent.count(n) for n in set(st.chunk_sizes_sent)}


def test_chunk_counting_would_have_failed() -> None:
    """Counting SSE chunks as tokens undercounts a speculative stream by the acceptance length."""
    spec_b = StandinBehavior(tokens_per_s=150, ttft_s=0.02, speculative=True, chunk_sizes=[4, 5, 3])
    with process_pair(StandinBehavior(tokens_per_s=120, ttft_s=0.02), spec_b) as (base, spec):
        result = race(base, spec)
        truth = spec.truth()[-1]
    s = result.speculative
    chunk_count = s.chunks
    content = [e for e in s.events if e.text]
    chunk_rate = (chunk_count - 1) / (content[-1].t_s - content[0].t_s)
    assert chunk_count < 0.4 * truth.completion_tokens  # chunk counting: wrong token count
    assert abs(chunk_rate - truth.decode_tokens_per_s) / truth.decode_tokens_per_s > 0.5  # and wrong speed
    assert s.completion_tokens == truth.completion_tokens  # ours: right
    assert s.decode_tokens_per_s == pytest.approx(truth.decode_tokens_per_s, rel=0.05)


def test_simultaneous_starts_both_together_and_sequential_one_after_the_other() -> None:
    with Standin.pair(StandinBehavior(tokens_per_s=400, ttft_s=0.01)) as (base, spec):
        race(base, spec, REQ.model_copy(update={"order": "simultaneous", "max_tokens": 60}))
        assert abs(base.last_truth.t_request - spec.last_truth.t_request) < 0.05
        race(base, spec, REQ.model_copy(update={"order": "sequential", "max_tokens": 60}))
        base_last = base.last_truth.t_last_token_sent
        assert base_last is not None and spec.last_truth.t_request >= base_last


def test_identical_text_and_first_difference() -> None:
    with Standin.pair() as (base, spec):
        same = race(base, spec, REQ.model_copy(update={"max_tokens": 40}))
        assert same.identical_text is True and same.first_difference is None
        spec.behavior.pieces = [" The", " quick", " red", " fox"]
        diff = race(base, spec, REQ.model_copy(update={"max_tokens": 40}))
    assert diff.identical_text is False
    assert diff.first_difference == len(" The quick ")
