"""A server's decode step read off a stream of given times (common.decode_step): no clock, no server."""

from __future__ import annotations

import pytest

from common.decode_step import MIN_STEPS, median_step_s, step_gaps_s


def test_a_plain_stream_gives_the_median_gap_after_its_first_token() -> None:
    # The role chunk (no usage), the first token after a 300 ms prefill, then a token every 45 ms
    # with one slow step, and the usage-only last chunk (no new token): the prefill is no step.
    chunks = [(0.0, None), (0.3, 1)] + [(0.3 + 0.045 * i, 1 + i) for i in range(1, 8)] + [(0.9, 8), (0.91, 8)]
    assert median_step_s(step_gaps_s(chunks)) == pytest.approx(0.045)


def test_a_speculative_stream_keeps_the_steps_that_accepted_a_draft() -> None:
    # Verification steps of 5 tokens every 39 ms, broken by plain steps of one token every 46 ms:
    # min_tokens=2 keeps only the verification steps, each timed from the chunk before it.
    t, n, chunks = 0.25, 1, [(0.25, 1)]
    for size in (5, 1, 5, 5, 1, 1, 5, 5, 5):
        t += 0.039 if size > 1 else 0.046
        n += size
        chunks.append((t, n))
    assert step_gaps_s(chunks, min_tokens=2) == pytest.approx([0.039] * 6)
    assert median_step_s(step_gaps_s(chunks)) == pytest.approx(0.039)  # every step: 6 of 9 are verifications


def test_too_few_steps_give_none_and_streams_pool() -> None:
    chunks = [(0.1 * i, i) for i in range(1, MIN_STEPS + 1)]  # MIN_STEPS - 1 gaps
    assert median_step_s(step_gaps_s(chunks)) is None
    assert median_step_s(step_gaps_s(chunks) * 2) == pytest.approx(0.1)  # two streams' gaps pooled
    assert step_gaps_s([(0.1 * i, 1 + i) for i in range(12)], min_tokens=2) == []  # one token a step
