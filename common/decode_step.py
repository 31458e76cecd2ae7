"""A server's decode step read off its streams: the gap before each chunk that brought new tokens.

One request streams alone; with ``continuous_usage_stats`` every chunk carries the completion
tokens so far, so a chunk that adds tokens ends one engine step (the API server sends a step's
tokens together). The launcher times each server's step this way at warm-up (servers/warmup.py):
a plain step on the baseline, a verification step (k + 1 positions) on a speculative server. Pure
functions of given times: no clock here.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

# Fewer steps than this give no median worth a figure (one slow step would be the whole answer).
MIN_STEPS = 5


def step_gaps_s(chunks: Sequence[tuple[float, int | None]], *, min_tokens: int = 1) -> list[float]:
    """The gaps in seconds before each chunk that added at least ``min_tokens`` tokens.

    ``chunks``: (arrival s, completion tokens so far, from the server's usage; None when the chunk
    had no usage) in arrival order. The first chunk with tokens has no step before it (its gap is
    the prefill's); a chunk that adds none (the role chunk, the usage-only last one) is skipped, so
    the next gap spans from the chunk before it. ``min_tokens`` 2 on a speculative server keeps the
    steps that verified a draft and accepted some of it (a step with no draft is a plain one).
    """
    gaps: list[float] = []
    last_t: float | None = None
    last_n = 0
    for t, n in chunks:
        if n is None or n <= last_n:
            continue
        if last_t is not None and n - last_n >= min_tokens:
            gaps.append(t - last_t)
        last_t, last_n = t, n
    return gaps


def median_step_s(gaps: Sequence[float]) -> float | None:
    """The median of ``gaps`` (one stream's step_gaps_s, or several pooled); None for fewer than MIN_STEPS."""
    return statistics.median(gaps) if len(gaps) >= MIN_STEPS else None
