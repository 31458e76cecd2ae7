"""The agent session (presets/agent_session.yaml) played turn by turn on the real CPU vLLM servers,
as the page plays it (demo.agent_race, in the page's order): the servers take every turn's history (the
side's own answers, their tool calls with the ids vLLM gave them, the logged tool results), every
turn finishes on every side with the same answer, and each turn's figures and the session's are
measured. The per-turn table is printed: the figures for docs/benchmarks.md.

Slow (five turns, ~2-4 minutes on 2 cores): `pytest -m e2e tests/e2e/test_agent_session_e2e.py`,
against the pair (tests/e2e/conftest.py). With the suffix arm (its module's docstring says how to
start the three servers), SPECDEMO_E2E_SUFFIX_URL adds it as a third pane's arm.
"""

from __future__ import annotations

import asyncio
import os

import pytest

from demo.agent_race import SessionResult, stream_session
from demo.live.request import default_order
from demo.presets import load_presets
from demo.settings import ArmSetting, Settings

pytestmark = pytest.mark.e2e

SUFFIX_URL = os.environ.get("SPECDEMO_E2E_SUFFIX_URL")


def test_the_agent_session_plays_every_turn_on_the_real_servers(real_servers: Settings) -> None:
    presets, problems = load_presets(real_servers.presets_dir)
    assert "agent_session" in presets, problems
    preset = presets["agent_session"]
    settings = real_servers.model_copy()
    if SUFFIX_URL:
        settings.arms = [ArmSetting(name="ngram", url=str(real_servers.speculative_url), method="ngram"),
                         ArmSetting(name="suffix", url=SUFFIX_URL, method="suffix")]

    # The page's order: simultaneous on the pair (each server on a core of its own), sequential with
    # the suffix arm (three servers would share the two cores).
    order, _why = default_order(settings)

    async def play() -> SessionResult:
        session = None
        async for snap in stream_session(preset.to_request(order=order), preset.turns, settings,
                                         first_label=preset.first_label):
            session = snap.session
        assert session is not None
        return session

    session = asyncio.run(play())
    for turn in session.turns:
        race = turn.race
        assert race.outcome == "done", (turn.index, race.baseline.error,
                                        {n: a.side.error for n, a in race.arms.items()})
        for name, arm in race.arms.items():
            assert arm.identical_text is True, f"turn {turn.index} {name}: the answers differ"
        calls = [c.name for c in race.baseline.tool_calls]
        acc = {n: (a.speedup, a.side.spec.mean_acceptance_length if a.side.spec else None)
               for n, a in race.arms.items()}
        print(f"\n[e2e] turn {turn.index} ({turn.label}): prompt {race.baseline.prompt_tokens} tokens, "
              f"answer {race.baseline.completion_tokens} tokens, calls {calls}, speedup and tokens/step {acc}")
    assert session.complete
    for name, figures in session.arms.items():
        assert figures.speedup is not None, figures.na_reasons
        print(f"[e2e] session {name}: decode speedup {figures.speedup:.2f}x over {session.landed} turns")
