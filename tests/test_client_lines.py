"""The SSE reader splits lines on LF only: a model that writes U+2028, U+2029 or U+0085 (which vLLM
sends unescaped inside its JSON) must not cut an event in two."""

from __future__ import annotations

import asyncio

from demo.race import run_race
from demo.results import Message, RaceRequest
from demo.settings import Settings
from harness.standin import Standin, StandinBehavior

PIECES = ["Line", "\u2028", "para", "\u2029", "next", "\u0085", "end", "\x1c", "."]


def test_unicode_line_separators_in_the_answer_arrive_whole() -> None:
    behavior = StandinBehavior(tokens_per_s=500, ttft_s=0.01, pieces=PIECES, stop_at_end_of_pieces=True)
    with Standin(behavior) as base, Standin(behavior.model_copy(update={"speculative": True})) as spec:
        result = asyncio.run(run_race(RaceRequest(messages=[Message(role="user", content="hi")], max_tokens=50),
                                      Settings(baseline_url=base.url, speculative_url=spec.url, save_runs=False)))
    for side in (result.baseline, result.speculative):
        assert side.error is None, side.error
        assert side.text == "".join(PIECES)
        assert side.completion_tokens == len(PIECES)
