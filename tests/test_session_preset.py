"""Session presets (issue 40, the agent race on stage): the preset's turns validated (a bad turn is
one line, the other presets still load), the shipped agent_session sized for the CPU pair, and the
session raced against stand-ins with known truth: each turn's decode speedup and the session's
within 5% of what the stand-ins really sent, each side carrying its OWN answer into its next turn
(the stand-ins answer different words and record every request), the logged tool result under the
side's own call id; a side whose answer is not a call the next request could carry sends it as text.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
import yaml

from demo.agent_race import SessionSnapshot, stream_session
from demo.live.agent_frames import session_frames
from demo.live.frames import Frame
from demo.live.session import RaceControl
from demo.presets import MAX_TURNS, Preset, Turn, load_presets
from demo.results import Message, ToolCall, answer_message, next_turn
from demo.settings import Settings
from demo.view import session_badge_html
from harness.standin import Standin, StandinBehavior, Truth

PRESETS = Path(__file__).resolve().parents[1] / "presets"
CONTEXT_TOKENS = 8192  # SmolLM2-135M-Instruct's context, as the CPU servers serve it
TOOL = {"role": "tool", "tool_call_id": "call_1", "content": "ok"}


@pytest.fixture(autouse=True)
def _no_saved_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SPECDEMO_ARMS", raising=False)


def load_one(tmp_path: Path, **fields: object) -> tuple[dict[str, Preset], list[str]]:
    data = {"title": "t", "expect": "e", "booth": False,
            "messages": [{"role": "user", "content": "start"}], **fields}
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(data))
    (tmp_path / "ok.yaml").write_text(yaml.safe_dump({"title": "ok", "expect": "e",
                                                      "messages": [{"role": "user", "content": "hi"}]}))
    presets, problems = load_presets(tmp_path)
    return presets, [p.message for p in problems]


@pytest.mark.parametrize(("turns", "extra", "said"), [
    ([{"messages": [{"role": "assistant", "content": "my answer"}]}], {},
     "a turn adds only tool results and user messages"),
    ([{"messages": [{"role": "tool", "content": "ok"}]}], {}, "needs the logged call's tool_call_id"),
    ([{"messages": [{"role": "user", "content": "go on"}, TOOL]}], {}, "tool results come before its user message"),
    ([{"messages": []}], {}, "messages"),
    ([{"messages": [TOOL], "colour": "red"}], {}, "colour"),
    ([{"messages": [TOOL]}], {"api": "completions"}, "uses the chat API"),
    ([{"messages": [TOOL]}], {"booth": True}, "set booth: false"),
    ([{"messages": [TOOL]}] * (MAX_TURNS + 1), {}, "turns"),
    ("not a list", {}, "turns"),
])
def test_a_bad_turn_is_one_line_and_the_other_presets_load(tmp_path: Path, turns: object, extra: dict,
                                                           said: str) -> None:
    presets, problems = load_one(tmp_path, turns=turns, **extra)
    assert list(presets) == ["ok"]
    (line,) = problems
    assert said in line and "\n" not in line, line


def test_a_good_session_preset_loads_with_its_tools(tmp_path: Path) -> None:
    tools = [{"type": "function", "function": {"name": "read_file", "parameters": {"type": "object"}}}]
    presets, problems = load_one(tmp_path, tools=tools, first_label="plan",
                                 turns=[{"label": "read", "messages": [TOOL, {"role": "user", "content": "go"}]}])
    assert problems == []
    s = presets["s"]
    assert s.session and [t.label for t in s.turns] == ["read"]
    assert [t.function.name for t in s.to_request().tools or []] == ["read_file"]
    assert not presets["ok"].session and presets["ok"].to_request().tools is None  # sent as before


def test_the_agent_session_fits_the_cpu_model_turn_after_turn() -> None:
    presets, problems = load_presets(PRESETS)
    assert problems == []
    p = presets["agent_session"]
    assert 4 <= 1 + len(p.turns) <= 5 and 120 <= p.max_tokens <= 160 and p.temperature == 0.0
    assert {t.function.name for t in p.tools or []} == {"read_file", "write_file", "edit_file", "run_tests"}
    # The last turn's prompt: every message, the tools and four answers at max_tokens. A token is at
    # least one character, so characters bound the tokens from above (the chat template adds < 300).
    chars = (sum(len(m.text) for m in p.messages) + sum(len(m.text) for t in p.turns for m in t.messages)
             + len(json.dumps([t.model_dump(mode="json") for t in p.tools or []])))
    assert chars + len(p.turns) * p.max_tokens + 300 < CONTEXT_TOKENS // 2, chars
    # The session of workloads/agent-session.jsonl: its logged tool results, in order.
    logged = [json.loads(line) for line in (PRESETS.parent / "workloads" / "agent-session.jsonl").open()]
    results = [m["content"] for m in logged[-1]["messages"] if m["role"] == "tool"]
    assert [t.messages[0].content for t in p.turns] == results[:len(p.turns)]


# --------------------------------------------------------------------------- carrying an answer

def test_an_answer_becomes_the_next_turns_assistant_message_with_its_own_ids() -> None:
    calls = [ToolCall(id="mine-1", name="read_file", arguments='{"path": "a.py"}'),
             ToolCall(id="mine-2", name="read_file", arguments='{"path": "b.py"}')]
    answer = answer_message("I read both.", calls)
    assert answer.content == "I read both." and [c.id for c in answer.tool_calls or []] == ["mine-1", "mine-2"]
    turn = [Message(role="tool", tool_call_id="call_1", content="A"), Message(role="tool", tool_call_id="call_2",
                                                                              content="B")]
    history = next_turn([Message(role="user", content="go")], answer, turn)
    assert [m.tool_call_id for m in history[2:]] == ["mine-1", "mine-2"] and history[1] is answer
    # Fewer calls than logged results: the result past them keeps its logged id.
    one = answer_message("", calls[:1])
    assert one.content is None
    assert [m.tool_call_id for m in next_turn([], one, turn)[1:]] == ["mine-1", "call_2"]


@pytest.mark.parametrize("call", [ToolCall(id="x", name="bad name!", arguments="{}"),
                                  ToolCall(id="x", name="read_file", arguments='{"path": '),
                                  ToolCall(id="x", name="read_file", arguments="[1, 2]")])
def test_a_call_the_next_request_could_not_carry_is_carried_as_text(call: ToolCall) -> None:
    m = answer_message("plan", [call])
    assert m.tool_calls is None and m.content == f"plan\n{call.signature()}"


def test_a_prose_answer_is_carried_as_prose() -> None:
    assert answer_message("done", []).model_dump() == {"role": "assistant", "content": "done"}


# --------------------------------------------------------------------------- the session's truth

TURNS = [Turn(label="two", messages=[Message(role="tool", tool_call_id="call_1", content="result two")]),
         Turn(label="three", messages=[Message(role="tool", tool_call_id="call_2", content="result three"),
                                       Message(role="user", content="and now?")])]
TOKENS = 40
BASE = StandinBehavior(tokens_per_s=40, ttft_s=0.02, pieces=["base "])
ARM = StandinBehavior(tokens_per_s=80, ttft_s=0.02, speculative=True, chunk_sizes=[1, 3, 2], pieces=["arm "])


def pooled_truth(truths: list[Truth]) -> float:
    """A side's decode tokens/s over its turns, from the stand-in's real send times."""
    tokens = sum(t.completion_tokens - t.chunk_sizes_sent[0] for t in truths)
    seconds = sum((t.t_last_token_sent or 0) - (t.t_first_token_sent or 0) for t in truths)
    return tokens / seconds


def test_each_turns_speedup_and_the_sessions_match_the_truth_with_each_side_carrying_its_own() -> None:
    preset = Preset(name="s", title="t", expect="e", booth=False, max_tokens=TOKENS, turns=TURNS,
                    messages=[Message(role="user", content="start")])
    with Standin(BASE) as base, Standin(ARM) as arm:
        settings = Settings(baseline_url=base.url, speculative_url=arm.url, spec_method="ngram", save_runs=False)

        async def play() -> list[SessionSnapshot]:
            return [s async for s in stream_session(preset.to_request(order="sequential"), TURNS, settings,
                                                    first_label="one")]

        snaps = asyncio.run(play())
        session = snaps[-1].session
        assert session.complete and [t.label for t in session.turns] == ["one", "two", "three"]
        assert sorted({s.turn for s in snaps}) == [1, 2, 3]
        # A turn lands while the next has not started: its snapshot's session holds it already.
        first_final = next(i for i, s in enumerate(snaps) if s.snapshot.result is not None)
        assert len(snaps[first_final].session.turns) == 1 and snaps[first_final + 1].turn == 2
        truth_b, truth_a = [t for t in base.truth if t.stream], [t for t in arm.truth if t.stream]
        assert len(truth_b) == len(truth_a) == 3
        for turn, tb, ta in zip(session.turns, truth_b, truth_a, strict=True):
            assert tb.decode_tokens_per_s and ta.decode_tokens_per_s
            measured = turn.race.arms["ngram"].speedup
            assert measured is not None
            assert abs(measured / (ta.decode_tokens_per_s / tb.decode_tokens_per_s) - 1) < 0.05
            assert turn.race.arms["ngram"].identical_text is False  # the stand-ins answer different words
        # The session's badge names every turn whose answer differed, not only the last turn's.
        badge = session_badge_html(session)
        assert 'data-identical="false"' in badge and "Outputs differ in turns 1, 2, 3" in badge
        overall = session.arms["ngram"].speedup
        assert overall is not None and abs(overall / (pooled_truth(truth_a) / pooled_truth(truth_b)) - 1) < 0.05
        # Each side's third request: the first turn, its own two answers, each followed by the logged messages.
        for server, word in ((base, "base"), (arm, "arm")):
            third = [r.body for r in server.requests if r.path.endswith("/chat/completions")][-1]["messages"]
            assert [m["role"] for m in third] == ["user", "assistant", "tool", "assistant", "tool", "user"]
            assert third[1]["content"].startswith(word) and third[3]["content"].startswith(word)
            assert [third[2]["content"], third[4]["content"], third[5]["content"]] == [
                "result two", "result three", "and now?"]


def test_a_side_failing_ends_the_session_after_that_turn_and_its_figures_leave_it_out() -> None:
    turns = [Turn(messages=[Message(role="tool", tool_call_id="call_1", content="BREAK the stream")]),
             Turn(messages=[Message(role="user", content="never sent")])]
    preset = Preset(name="s", title="t", expect="e", booth=False, max_tokens=12, turns=turns,
                    messages=[Message(role="user", content="start")])
    arm_breaks = ARM.model_copy(update={"tokens_per_s": 400.0, "by_marker": {"BREAK": {"fault": "server_error"}}})
    with Standin(BASE.model_copy(update={"tokens_per_s": 200.0})) as base, Standin(arm_breaks) as arm:
        settings = Settings(baseline_url=base.url, speculative_url=arm.url, spec_method="ngram", save_runs=False)

        async def play() -> list[SessionSnapshot]:
            return [s async for s in stream_session(preset.to_request(order="sequential"), turns, settings)]

        session = asyncio.run(play())[-1].session
        assert [t.race.outcome for t in session.turns] == ["done", "error"] and session.landed == 1
        assert not session.complete and session.arms["ngram"].speedup is not None  # over the first turn only
        assert [len(s.requests) for s in (base, arm)] == [2, 2]  # no third turn was sent


# --------------------------------------------------------------------------- the page, without a browser

def test_the_pages_frames_fill_the_strip_turn_by_turn_and_end_on_the_sessions_headline() -> None:
    """One arm (the pair's layout): the pair's headline is the session's once a turn has landed."""
    preset = Preset(name="s", title="t", expect="e", booth=False, max_tokens=12, turns=TURNS[:1],
                    first_label="<b>one</b>", messages=[Message(role="user", content="start")])
    with Standin(BASE.model_copy(update={"tokens_per_s": 200.0})) as base, \
            Standin(ARM.model_copy(update={"tokens_per_s": 400.0})) as arm:
        settings = Settings(baseline_url=base.url, speculative_url=arm.url, spec_method="ngram", save_runs=False)

        async def frames() -> list[Frame]:
            req = preset.to_request(order="sequential")
            return [f async for f in session_frames(req, preset, settings, RaceControl())]

        shown = asyncio.run(frames())
    strips = [f.turns for f in shown if f.turns is not None]
    landed = [int(s.split('data-turns="')[1].split('"')[0]) for s in strips]
    assert landed[0] == 0 and landed[-1] == 2 and landed == sorted(landed) and 1 in landed
    assert "&lt;b&gt;one&lt;/b&gt;" in strips[-1] and "<b>one" not in strips[-1]  # a label is escaped
    assert 'data-turn="1" data-state="landed"' in strips[-1] and 'data-turn="2" data-state="landed"' in strips[-1]
    final = next(f for f in reversed(shown) if f.speedup is not None).speedup or ""
    assert 'data-session="2"' in final and 'data-state="final"' in final and "2 of 2 turns" in final
    session = next(f.session for f in reversed(shown) if f.session is not None)
    assert session is not None and session.arms["ngram"].speedup is not None
    assert f'data-value="{session.arms["ngram"].speedup!r}"' in final
    statuses = [f.run_status or "" for f in shown]
    assert any("turn 2 of 2" in s for s in statuses)
