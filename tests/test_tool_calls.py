"""An answer that is a tool call, end to end: the client reads ``delta.tool_calls`` (captured from
vLLM 0.32's hermes parser, tests/fixtures/stream-chat-tool-call.sse), the meter measures it like
any answer (tokens from usage) and joins the call, the race's identical check compares the calls'
names and parsed arguments, the pane shows the call escaped; a server without a tool parser is one
line naming the flags."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx
import pytest

from demo.cli.race import result_json, result_table
from demo.client import (
    MAX_TOOL_CALLS,
    StreamError,
    error_from_response,
    make_http_client,
    parse_chunk,
    stream_completion,
    tool_call_deltas,
)
from demo.measure import SideMeter, same_answer, same_tool_calls
from demo.race import run_race
from demo.results import (
    ChunkEvent,
    Message,
    RaceRequest,
    RaceResult,
    Side,
    SideSnapshot,
    ToolCall,
    answer_text,
)
from demo.settings import Settings
from demo.sweep.pooling import batch_stats
from demo.view import identical_badge_html, text_html
from harness.standin import TOOL_CALL_FIXTURE, Standin, StandinBehavior

FIX = Path(__file__).parent / "fixtures"
NO_ARGUMENTS = FIX / "stream-chat-tool-call-no-arguments.sse"
CALL_ID = "chatcmpl-tool-b870873c530fd019"  # the id vLLM gave the captured call
PARIS = ToolCall(id=CALL_ID, name="get_weather", arguments='{"city": "Paris"}')
REQ = RaceRequest(messages=[Message(role="user", content="What is the weather in Paris?")], max_tokens=200)


def replay_offline(path: Path, side: Side = "baseline") -> SideMeter:
    """A captured stream, with its captured arrival times, through the client's parser into a meter."""
    lines = [ln[5:].strip() for ln in path.read_text().split("\n") if ln.startswith("data:")]
    times = [float(x) for x in path.with_suffix(".times").read_text().split()]
    assert len(lines) == len(times)
    meter = SideMeter(side, "fixture", t0=0.0)
    for payload, t in zip(lines, times, strict=True):
        meter.feed(ChunkEvent(t_s=t, done=True) if payload == "[DONE]" else parse_chunk(json.loads(payload), t))
    return meter


def test_the_captured_tool_call_is_joined_and_measured_from_usage() -> None:
    r = replay_offline(TOOL_CALL_FIXTURE).result()
    assert r.tool_calls == [PARIS] and r.text == ""
    assert json.loads(r.tool_calls[0].arguments) == {"city": "Paris"}
    assert r.finish_reason == "tool_calls" and r.complete
    # 31 tokens from usage: the parser held 14 back until the name was known, 7 more after the call.
    assert r.completion_tokens == 31 and r.prompt_tokens == 439
    assert r.tokens_per_chunk == {14: 1, 4: 1, 1: 6, 7: 1}
    times = [float(x) for x in TOOL_CALL_FIXTURE.with_suffix(".times").read_text().split()]
    assert r.ttft_s == pytest.approx(times[1])
    # The 13 tokens held back with the first came before it: not counted as decoded after it.
    assert r.decode_tokens_per_s == pytest.approx((31 - 14) / (times[-3] - times[1]))


def test_the_speculative_servers_call_is_the_same_with_its_acceptance() -> None:
    """The n-gram server's answer to the same request: the same call (another id), its acceptance
    from vLLM's per-request metrics. Drafts copied from the earlier calls in the history."""
    base = replay_offline(TOOL_CALL_FIXTURE).result()
    spec = replay_offline(FIX / "stream-chat-tool-call-speculative.sse", "speculative").result()
    assert same_answer(base, spec) and spec.tool_calls[0].id != base.tool_calls[0].id
    assert spec.completion_tokens == 31 and spec.tokens_per_chunk == {15: 1, 6: 1, 1: 3, 7: 1}
    assert spec.spec is not None
    assert (spec.spec.drafts, spec.spec.draft_tokens, spec.spec.accepted_tokens) == (8, 32, 23)
    assert spec.spec.mean_acceptance_length == pytest.approx(3.875)


def test_a_call_whose_arguments_never_came_is_kept_with_empty_arguments() -> None:
    """vLLM 0.32 sent the name, then nothing: the model's JSON after it was not a call's."""
    r = replay_offline(NO_ARGUMENTS).result()
    assert [(c.name, c.arguments) for c in r.tool_calls] == [("get_weather", "")]
    assert r.completion_tokens == 127 and r.finish_reason == "tool_calls" and r.complete


def test_pieces_join_per_index_and_live_snapshots_show_the_call_so_far() -> None:
    meter = SideMeter("speculative", "x", t0=0.0)
    pieces = [
        [{"index": 0, "id": "a", "type": "function", "function": {"name": "read_file"}}],
        [{"index": 0, "function": {"arguments": '{"path": '}}],
        [{"index": 1, "id": "b", "function": {"name": "run_tests", "arguments": ""}},
         {"index": 0, "function": {"arguments": '"a.py"}'}}],
        [{"index": 1, "function": {"arguments": "{}"}}],
    ]
    for n, p in enumerate(pieces, start=1):
        meter.feed(parse_chunk({"choices": [{"delta": {"content": None, "tool_calls": p}}],
                                "usage": {"completion_tokens": 3 * n}}, 0.1 * n))
        if n == 2:
            assert meter.snapshot().tool_calls == [ToolCall(id="a", name="read_file", arguments='{"path": ')]
    r = meter.result()
    assert r.tool_calls == [ToolCall(id="a", name="read_file", arguments='{"path": "a.py"}'),
                            ToolCall(id="b", name="run_tests", arguments="{}")]
    assert r.completion_tokens == 12 and r.chunks == 4


@pytest.mark.parametrize("bad", [
    "not a list", [1], [{"index": -1}], [{"index": MAX_TOOL_CALLS}], [{"index": True}], [{"index": "0"}],
    [{"function": "read_file"}], [{"function": {"name": 7}}], [{"function": {"arguments": {"a": 1}}}],
    [{"id": ["x"]}],
])
def test_tool_call_pieces_the_client_cannot_read_are_one_line(bad: object) -> None:
    with pytest.raises(StreamError) as e:
        tool_call_deltas(bad)
    assert str(e.value).startswith("Bad data") and "\n" not in str(e.value)


def test_an_answer_as_text_names_its_calls() -> None:
    """What the evaluator's report samples from a cell's first answer: the text, then each call."""
    assert answer_text("", [PARIS]) == 'get_weather({"city": "Paris"})'
    assert answer_text("Looking.", [PARIS, ToolCall(name="f")]) == 'Looking.\nget_weather({"city": "Paris"})\nf()'
    assert answer_text("prose only", []) == "prose only"
    batch = batch_stats("baseline", [replay_offline(TOOL_CALL_FIXTURE).result()], 2.0, None, None, None)
    assert batch.sample_text == 'get_weather({"city": "Paris"})' and batch.completion_tokens_total == 31
    redacted = batch_stats("baseline", [replay_offline(TOOL_CALL_FIXTURE).result()], 2.0, None, None, None,
                           keep_text=False)
    assert redacted.sample_text == ""


def test_same_tool_calls_compares_names_and_parsed_arguments() -> None:
    a = [ToolCall(name="f", arguments='{"x": 1, "y": [1, 2]}')]
    assert same_tool_calls(a, [ToolCall(id="other", name="f", arguments='{ "y":[1,2],"x":1 }')])
    assert not same_tool_calls(a, [ToolCall(name="f", arguments='{"x": 2, "y": [1, 2]}')])
    assert not same_tool_calls(a, [ToolCall(name="g", arguments='{"x": 1, "y": [1, 2]}')])
    assert not same_tool_calls(a, a + a) and not same_tool_calls(a, [])
    # Arguments that are not JSON (a cut answer) are compared as text.
    assert same_tool_calls([ToolCall(name="f", arguments='{"x": ')], [ToolCall(name="f", arguments='{"x": ')])
    assert not same_tool_calls([ToolCall(name="f", arguments='{"x": ')], [ToolCall(name="f", arguments='{"x":')])


def test_the_call_streams_over_real_http_from_the_stand_in() -> None:
    async def go() -> SideMeter:
        with Standin(StandinBehavior(replay_fixture=TOOL_CALL_FIXTURE, replay_speed=4.0)) as s:
            meter = SideMeter("baseline", s.url)
            async with make_http_client(Settings(baseline_url=s.url, speculative_url=s.url)) as http:
                async for ev in stream_completion(http, s.url, "smollm2", REQ, t0=meter.t0):
                    meter.feed(ev)
            truth = s.truth[-1]
            assert truth.completion_tokens == 31 and truth.finish_reason == "tool_calls"
            return meter

    r = asyncio.run(go()).result()
    assert r.tool_calls == [PARIS] and r.completion_tokens == 31 and r.complete


def race(base: StandinBehavior, spec: StandinBehavior) -> tuple[RaceResult, float, float]:
    """A race of two stand-ins; the result and each side's true decode rate (the stand-ins' record)."""
    with Standin(base) as b, Standin(spec) as s:
        settings = Settings(baseline_url=b.url, speculative_url=s.url, save_runs=False)
        result = asyncio.run(run_race(REQ, settings))
        rates = b.truth[-1].decode_tokens_per_s, s.truth[-1].decode_tokens_per_s
    assert rates[0] and rates[1]
    return result, rates[0], rates[1]


def test_a_race_whose_answers_are_the_same_tool_call_is_identical() -> None:
    # The speculative side replays the same capture twice as fast: the speed differs, the answer not.
    r, base_rate, spec_rate = race(StandinBehavior(replay_fixture=TOOL_CALL_FIXTURE),
                                   StandinBehavior(replay_fixture=TOOL_CALL_FIXTURE, replay_speed=2.0))
    assert r.baseline.tool_calls == r.speculative.tool_calls == [PARIS]
    assert r.identical_text is True and r.first_difference is None
    assert r.baseline.completion_tokens == r.speculative.completion_tokens == 31
    assert r.speedup == pytest.approx(spec_rate / base_rate, rel=0.05)
    badge = identical_badge_html(r)
    assert 'data-identical="true"' in badge
    # The CLI's --json carries each side's calls.
    assert result_json(r)["speculative"]["tool_calls"] == [PARIS.model_dump()]


def test_a_saved_race_keeps_the_calls_and_its_replay_shows_them() -> None:
    r, _, _ = race(StandinBehavior(replay_fixture=TOOL_CALL_FIXTURE, replay_speed=4.0),
                   StandinBehavior(replay_fixture=TOOL_CALL_FIXTURE, replay_speed=8.0))
    saved = json.loads(r.model_dump_json())
    # Only the chunks that carried pieces of a call have the key: saved runs stay as small as before.
    events = saved["baseline"]["events"]
    assert sum("tool_calls" in e for e in events) == 8 and len(events) == 12
    back = RaceResult.model_validate(saved)
    assert back.baseline.tool_calls == [PARIS] and back.identical_text is True
    meter = SideMeter("baseline", "replay", t0=0.0)  # what the Replay tab does with the saved events
    for ev in back.baseline.events:
        meter.feed(ev)
    assert meter.snapshot().tool_calls == [PARIS] and meter.result().tool_calls == [PARIS]


def test_a_race_whose_tool_calls_differ_is_not_identical() -> None:
    r, _, _ = race(StandinBehavior(replay_fixture=TOOL_CALL_FIXTURE),
                   StandinBehavior(replay_fixture=NO_ARGUMENTS, replay_speed=4.0))
    assert r.baseline.text == r.speculative.text == ""  # the same (empty) text: only the calls differ
    assert r.identical_text is False and r.first_difference is None
    badge = identical_badge_html(r)
    assert 'data-identical="false"' in badge and "Tool calls differ" in badge
    assert "get_weather({&quot;city&quot;: &quot;Paris&quot;})" in badge and "get_weather()" in badge
    assert "Identical text:            no, the tool calls differ" in result_table(r)


def test_the_pane_shows_each_call_escaped_after_the_text() -> None:
    snap = SideSnapshot(side="baseline", text="Let me look.", tool_calls=[
        ToolCall(name="<b>read</b>", arguments='{"path": "<script>alert(1)</script>"}'),
        ToolCall(name="run_tests", arguments="{}")])
    html = text_html("baseline", snap, shade=True)
    assert "<script>" not in html and "<b>" not in html
    assert "&lt;b&gt;read&lt;/b&gt;" in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert html.index("Let me look.") < html.index('data-tool-call="0"') < html.index('data-tool-call="1"')
    # Append-only: the last call's block is left open, so its arguments can grow frame by frame.
    assert html.endswith('<code class="sd-tool-args">{}')
    grown = snap.model_copy(update={"tool_calls": [*snap.tool_calls[:1], ToolCall(name="run_tests", arguments="{")]})
    assert text_html("baseline", grown, shade=True).startswith(html[:-2])


def test_captured_refusal_without_a_tool_parser_is_one_line_naming_the_flags() -> None:
    bodies = [ln for ln in (FIX / "error-tools-no-parser.txt").read_text().splitlines() if ln.startswith('{"error"')]
    assert len(bodies) == 2
    for body in bodies:
        err = str(error_from_response(400, body.encode(), "http://x:1"))
        assert "\n" not in err and "HTTP 400 from http://x:1" in err
        assert "start vLLM with --enable-auto-tool-choice --tool-call-parser hermes" in err


@pytest.mark.parametrize(("choice", "needle"), [
    (None, '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set'),
    ("required", 'tool_choice="required" requires --tool-call-parser to be set'),
    ({"type": "function", "function": {"name": "get_weather"}},
     'tool_choice=function "get_weather" requires --tool-call-parser to be set'),
])
def test_a_stand_in_without_a_tool_parser_refuses_tools_as_vllm_does(choice: object, needle: str) -> None:
    body = json.loads((FIX / "requests" / "chat-tool-call.json").read_text())
    body.pop("tool_choice")
    if choice is not None:
        body["tool_choice"] = choice
    with Standin(StandinBehavior(tool_parser=False)) as s:
        resp = httpx.post(s.url + "/v1/chat/completions", json=body, timeout=10.0)
        # Without tools, or with tool_choice none, the same server answers.
        plain = httpx.post(s.url + "/v1/chat/completions", timeout=10.0,
                           json={**body, "tools": None, "tool_choice": None, "stream": False, "max_tokens": 3})
        none = httpx.post(s.url + "/v1/chat/completions", timeout=10.0,
                          json={**body, "tool_choice": "none", "stream": False, "max_tokens": 3})
    assert resp.status_code == 400 and resp.json()["error"]["message"] == needle
    assert plain.status_code == 200 and none.status_code == 200
    err = str(error_from_response(resp.status_code, resp.content, s.url))
    assert "--enable-auto-tool-choice --tool-call-parser hermes" in err and "\n" not in err
