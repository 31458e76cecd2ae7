"""Agents' traffic in (issue 40, the loader): each new form's example file (tests/fixtures/workloads/)
read by content into the requests it logged, tools and tool turns kept as given, and every bad
input refused in one line with the reason and what to give instead."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from demo.client import error_from_response, request_body
from demo.workload import Workload, WorkloadError, load_workload

FIX = Path(__file__).parent / "fixtures" / "workloads"
MB = 20_000_000
CAP = 200_000
TOOLS = [{"type": "function", "function": {"name": "read_file", "parameters": {
    "type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}}]
CALL = {"id": "call_1", "type": "function", "function": {"name": "read_file", "arguments": '{"path": "a.py"}'}}
HISTORY = [{"role": "user", "content": "Why does the test fail?"},
           {"role": "assistant", "content": None, "tool_calls": [CALL]},
           {"role": "tool", "tool_call_id": "call_1", "content": "def f(): return 1"}]


def load(path: Path, **kw: Any) -> Workload:
    return load_workload(path, max_bytes=kw.pop("max_bytes", MB), max_prompt_chars=CAP, **kw)


def write_lines(path: Path, rows: list[Any]) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows), encoding="utf-8")
    return path


def sent(w: Workload, i: int = 0) -> dict[str, Any]:
    return request_body(w.requests[i].to_race_request(), "m")


def one_line_error(path: Path, **kw: Any) -> str:
    with pytest.raises(WorkloadError) as e:
        load(path, **kw)
    message = str(e.value)
    assert "\n" not in message
    return message


# --------------------------------------------------------------------------- each form's example file


def test_aiperf_single_turn_text_texts_output_length_and_extra() -> None:
    w = load(FIX / "aiperf-single-turn.jsonl")
    assert (w.format, [r.id for r in w.requests], w.issues) == ("aiperf-single-turn", ["1", "2", "3"], [])
    first, second, third = (sent(w, i) for i in range(3))
    assert first["max_tokens"] == 40 and first["messages"][0]["content"].startswith("Summarize this function")
    assert second["messages"] == [{"role": "user", "content": "Translate to French:\n\nThe cat sleeps on the mat."}]
    assert (second["temperature"], second["top_p"]) == (0.0, 0.9)  # extra: where the request's own fields go
    assert third["max_tokens"] == 256 and w.ignored_fields == {"timestamp": 1}


def test_aiperf_multi_turn_one_request_per_user_turn_each_side_carrying_its_own_answers() -> None:
    w = load(FIX / "aiperf-multi-turn.jsonl")
    assert w.format == "aiperf-multi-turn" and w.history == "own"
    assert [(r.id, r.session, r.turn, r.carry) for r in w.requests] == [
        ("fix-1#1", "fix-1", 1, False), ("fix-1#2", "fix-1", 2, True), ("plan-2#1", "plan-2", 1, False)]
    assert (w.sessions, w.turns) == (2, 3)
    # the first turn opens the history (the system turn leads it); a later turn holds its new messages
    # only: each side sends them after its own answer (tests/test_sweep_agents.py plays it)
    assert [m["role"] for m in sent(w, 0)["messages"]] == ["system", "user"]
    assert sent(w, 1)["messages"] == [{"role": "user", "content": "Rewrite the function with the fix."}]
    assert w.ignored_fields == {"delay": 1, "turns.assistant": 1}  # the logged answer: each side's own instead
    assert "2 sessions, 3 turns; played turn by turn, each side carrying its own answer" in w.summary_lines()[1]


def test_aiperf_trace_with_messages_keeps_tools_and_the_tool_turns_as_given() -> None:
    w = load(FIX / "aiperf-trace.jsonl")
    rows = [json.loads(line) for line in (FIX / "aiperf-trace.jsonl").read_text().splitlines()]
    assert (w.format, w.sessions, w.turns) == ("aiperf-trace", 1, 2)
    assert [(r.session, r.turn) for r in w.requests] == [("agent-1", 1), ("agent-1", 2)]
    body = sent(w, 1)
    assert body["tools"] == rows[1]["tools"] and body["messages"] == rows[1]["messages"]
    assert body["messages"][2]["content"] is None and body["messages"][3]["tool_call_id"] == "call_1"
    assert (body["tool_choice"], body["parallel_tool_calls"], body["max_tokens"]) == ("auto", False, 64)
    assert w.ignored_fields == {"timestamp": 2}


def test_guidellm_columns() -> None:
    w = load(FIX / "guidellm.jsonl")
    assert w.format == "guidellm" and [r.max_tokens for r in w.requests] == [64, 32]
    assert w.ignored_fields == {"prompt_tokens_count": 1}


def test_guidellm_columns_in_csv(tmp_path: Path) -> None:
    f = tmp_path / "g.csv"
    f.write_text("prompt,output_tokens_count,prompt_tokens_count\nSay hi,12,2\nSay bye,,\n", encoding="utf-8")
    w = load(f)
    assert (w.format, [r.max_tokens for r in w.requests]) == ("csv", [12, 256])
    assert w.ignored_fields == {"prompt_tokens_count": 1}


def test_litellm_payload_one_pretty_object_with_its_figures_as_logged() -> None:
    w = load(FIX / "litellm-payload.json")
    (r,) = w.requests
    assert (w.format, r.id, r.session) == ("litellm-payload", "chatcmpl-7f3a", "agent-run-9")
    assert r.logged is not None and r.logged.completion_tokens == 40 and r.logged.prompt_tokens == 140
    assert r.logged.e2e_s == pytest.approx(1.6) and r.logged.ttft_s == pytest.approx(0.35)
    body = sent(w)
    assert body["tools"][0]["function"]["name"] == "read_file" and body["max_tokens"] == 64
    assert "log.stream" in w.ignored_fields


def test_litellm_spendlogs_json_in_strings_and_a_row_without_its_prompt() -> None:
    w = load(FIX / "litellm-spendlogs.json")
    assert w.format == "litellm-spendlogs" and [r.id for r in w.requests] == ["r-1", "r-2"]
    assert [r.max_tokens for r in w.requests] == [48, 30]  # its own, else the logged answer's length
    assert w.requests[1].logged is not None and w.requests[1].logged.e2e_s == pytest.approx(1.25)
    assert sent(w, 1)["messages"][2]["tool_calls"][0]["id"] == "call_1"
    (issue,) = w.issues
    assert issue.message.startswith("the prompt was not logged: LiteLLM keeps no prompt in SpendLogs unless")
    assert "store_prompts_in_spend_logs" in issue.message


def test_litellm_rows_as_jsonl_and_a_string_field_that_is_not_json(tmp_path: Path) -> None:
    rows = json.loads((FIX / "litellm-spendlogs.json").read_text())
    rows[1]["metadata"] = "{not json"
    w = load(write_lines(tmp_path / "spend.jsonl", rows))
    assert [r.id for r in w.requests] == ["r-1"]
    assert w.issues[0].line == 2 and w.issues[0].message.startswith(
        "metadata: a JSON-in-string field that is not JSON (")


def test_one_body_or_one_conversation_as_a_whole_json_file() -> None:
    body = json.loads((FIX / "openai-body.json").read_text())
    w = load(FIX / "openai-body.json")
    assert (w.format, len(w.requests)) == ("openai-body", 1)
    sent_body = sent(w)
    for key in ("messages", "tools", "tool_choice", "parallel_tool_calls", "max_tokens"):
        assert sent_body[key] == body[key], key
    w = load(FIX / "sharegpt-one.json")
    assert (w.format, [r.id for r in w.requests], len(w.requests[0].messages or [])) == ("sharegpt", ["conv-1"], 3)


def test_a_folder_of_json_request_bodies() -> None:
    w = load(FIX / "bodies")
    assert (w.format, [r.id for r in w.requests]) == ("folder", ["a-read.json", "b-fix.json"])
    assert sent(w, 1)["tool_choice"] == {"type": "function", "function": {"name": "run_tests"}}


def test_repeated_ids_every_line_read_and_made_unique() -> None:
    w = load(FIX / "batch-repeated-ids.jsonl")
    assert [r.id for r in w.requests] == ["req", "req#2", "req#3"] and w.issues == []
    assert w.repeated_ids == 2 and "2 repeated ids made unique" in w.summary_lines()[1]


def test_a_token_count_trace_is_refused_whole_with_why_and_what_works() -> None:
    message = one_line_error(FIX / "token-trace.jsonl")
    assert message.startswith("token-trace.jsonl is a trace of token counts")
    assert "gain depends on the text" in message and 'the same trace with "messages" per line' in message


# --------------------------------------------------------------------------- bad input, one line each


@pytest.mark.parametrize(("row", "says"), [
    ({"messages": [{"role": "tool", "tool_call_id": "call_1", "content": "x"}]},
     "messages.0: a role: tool message with no assistant tool_calls before it"),
    ({"messages": [*HISTORY[:2], {"role": "tool", "tool_call_id": "call_9", "content": "x"}]},
     "messages.2: tool_call_id names no call of the assistant turn before it"),
    ({"messages": HISTORY[:1], "tools": [{"type": "function", "function": {"name": "f", "parameters": "{}"}}]},
     "tools.0.function.parameters: Value error, parameters must be a JSON schema object"),
    ({"messages": HISTORY[:1], "tools": [{"type": "function", "function": {"name": "f",
                                                                           "parameters": {"type": "string"}}}]},
     'tools.0.function.parameters: Value error, parameters must be a JSON schema of type "object"'),
    ({"messages": HISTORY[:1], "tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}},
     "Value error, tool_choice names a function that is not in tools"),
    ({"messages": [{"role": "user", "content": [{"type": "text", "text": "What is this?"},
                                                {"type": "image_url", "image_url": {"url": "https://x/y.png"}}]}]},
     "messages.0.content: image or other media content: only text is measured"),
    ({"messages": [{"role": "user", "content": None}]}, "messages.0.content: only text is measured"),
    ({"prompt": "p", "tools": TOOLS}, "tools go with chat messages"),
])
def test_a_bad_agent_line_is_skipped_in_one_line(tmp_path: Path, row: dict[str, Any], says: str) -> None:
    w = load(write_lines(tmp_path / "w.jsonl", [{"messages": HISTORY[:1]}, row]))
    assert [r.id for r in w.requests] == ["1"]
    (issue,) = w.issues
    assert issue.line == 2 and issue.message.startswith(says), issue.message
    assert "\n" not in issue.message


@pytest.mark.parametrize(("row", "says"), [
    ({"session_id": "s", "turns": []}, "session 's': turns: give a list of at least one turn"),
    ({"session_id": "s", "turns": [{"role": "assistant", "text": "a"}]},
     "session 's' has no user turn, so there is no prompt to send"),
    ({"session_id": "s", "turns": [{"role": "tool", "text": "a"}]}, "turns.0: role must be system, user or assistant"),
    ({"text": "hi", "image": "https://x/y.png"}, "image: image or other media content: only text is measured"),
    ({"text": "hi", "extra": {"max_token": 3}}, "extra: unknown field 'max_token' (did you mean 'max_tokens'?)"),
    ({"text": "hi", "extra": {"messages": []}}, "extra: messages or prompt would replace the line's text"),
])
def test_a_bad_aiperf_line_is_skipped_in_one_line(tmp_path: Path, row: dict[str, Any], says: str) -> None:
    first = {"session_id": "ok", "turns": [{"text": "fine"}]} if "turns" in row else {"text": "fine"}
    w = load(write_lines(tmp_path / "w.jsonl", [first, row]))
    assert len(w.requests) == 1
    (issue,) = w.issues
    assert issue.line == 2 and issue.message.startswith(says), issue.message


def test_a_trace_line_with_no_text_in_a_trace_with_messages(tmp_path: Path) -> None:
    w = load(write_lines(tmp_path / "t.jsonl", [{"session_id": "a", "timestamp": 0, "messages": HISTORY[:1]},
                                                {"timestamp": 10, "input_length": 100, "output_length": 5}]))
    assert len(w.requests) == 1
    assert w.issues[0].message.startswith("a line of token counts with no text: speculation's gain depends")


def test_a_log_over_the_size_cap_is_refused_naming_the_setting(tmp_path: Path) -> None:
    f = FIX / "litellm-spendlogs.json"
    message = one_line_error(f, max_bytes=1000)
    assert message.startswith("litellm-spendlogs.json is ") and "over the 1,000 bytes limit" in message
    assert "SPECDEMO_WORKLOAD_MAX_BYTES" in message


def test_a_server_without_a_tool_parser_gets_the_flags_it_needs() -> None:
    body = json.dumps({"error": {"message": '"auto" tool choice requires --enable-auto-tool-choice and '
                                            "--tool-call-parser to be set", "type": "BadRequestError",
                                 "code": 400}}).encode()
    line = str(error_from_response(400, body, "http://127.0.0.1:8001"))
    assert line.startswith("HTTP 400 from http://127.0.0.1:8001: ")
    assert "start vLLM with --enable-auto-tool-choice --tool-call-parser hermes" in line and "\n" not in line
    other = str(error_from_response(400, b'{"error": {"message": "bad"}}', "http://x"))
    assert "tool parser" not in other and other.endswith("(the server refused the request)")


def test_the_agent_session_workload_grows_turn_by_turn_within_the_cpu_pairs_reach() -> None:
    w = load(FIX.parents[2] / "workloads" / "agent-session.jsonl")
    assert (w.format, w.sessions, w.turns, w.issues) == ("aiperf-trace", 1, 7, [])
    bodies = [sent(w, i) for i in range(w.turns)]
    names = {t["function"]["name"] for t in bodies[0]["tools"]}
    assert names == {"read_file", "write_file", "edit_file", "run_tests"}
    for before, after in zip(bodies, bodies[1:], strict=False):
        # each turn is the one before, then the agent's call and the tool's answer, as logged
        assert after["messages"][:len(before["messages"])] == before["messages"]
        assert [m["role"] for m in after["messages"][len(before["messages"]):]] == ["assistant", "tool"]
    calls = [m["tool_calls"][0]["function"]["name"] for m in bodies[-1]["messages"] if m.get("tool_calls")]
    assert calls == ["read_file", "read_file", "write_file", "run_tests", "edit_file", "run_tests"]
    # SmolLM2's tokenizer counts 448..1490 tokens per turn with the tools (docs/workloads.md): a
    # character bound that stays well inside the CPU pair's context of 8,192
    assert max(len(r.prompt_text) for r in w.requests) < 6500


def test_the_agent_session_in_delta_mode_is_the_logged_one_when_the_answers_are_the_logged_ones() -> None:
    logged = load(FIX.parents[2] / "workloads" / "agent-session.jsonl")
    delta = load(FIX.parents[2] / "workloads" / "agent-session-delta.jsonl")
    assert (delta.format, delta.history, delta.turns, delta.issues) == ("aiperf-trace", "own", 7, [])
    assert delta.summary_lines()[1] == (
        "1 session, 7 turns; played turn by turn, each side carrying its own answer into its next turn; 6 turns "
        "follow a logged tool call, replaced by each side's own (the turns whose call differs are counted)")
    assert delta.requests[0].messages == logged.requests[0].messages
    for n in range(1, 7):
        turn = delta.requests[n]
        assert turn.carry and turn.logged_answer is not None and turn.logged_answer.tool_calls
        # had each side answered as the log did, its history would be the logged one
        assert logged.requests[n].messages == [*(logged.requests[n - 1].messages or []), turn.logged_answer,
                                               *(turn.messages or [])]
        assert turn.tools == logged.requests[n].tools and turn.max_tokens == logged.requests[n].max_tokens


def test_a_trace_in_delta_mode_is_played_turn_by_turn(tmp_path: Path) -> None:
    first = {"session_id": "d", "message_mode": "delta", "timestamp": 0,
             "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello"}]}
    later = {"session_id": "d", "message_mode": "delta", "delay": 2000,
             "messages": [{"role": "user", "content": "How are you?"}]}
    w = load(write_lines(tmp_path / "d.jsonl", [
        first, later,
        {**later, "messages": HISTORY[1:]},  # 3: the logged call, then its result: the call set aside
        {**later, "messages": HISTORY[2:]},  # 4: a result alone answers the side's own call of turn 3
        {"message_mode": "delta", "messages": HISTORY[:1]},  # 5: no session
        {**later, "messages": HISTORY[1:2]},  # 6: only the logged answer: nothing follows it
        {**later, "session_id": "e", "messages": HISTORY[2:]},  # 7: a first turn has no call before it
        {**later, "session_id": "e", "messages": HISTORY[:1]},  # 8: so this is session e's first turn
    ]))
    assert [(r.session, r.turn, r.carry) for r in w.requests] == [
        ("d", 1, False), ("d", 2, True), ("d", 3, True), ("d", 4, True), ("e", 1, False)]
    assert w.history == "own"
    third, fourth = w.requests[2], w.requests[3]
    assert third.logged_answer is not None and third.logged_answer.tool_calls is not None
    assert third.logged_answer.tool_calls[0].function.name == "read_file"
    assert [m.role for m in third.messages or []] == ["tool"] and fourth.logged_answer is None
    messages = {i.line: i.message for i in w.issues}
    assert messages[5] == 'message_mode "delta" needs a session_id: its turns follow each other'
    assert messages[6].startswith('message_mode "delta": the line holds only the logged answer')
    assert messages[7].startswith("messages.0: a role: tool message with no assistant tool_calls before it (the "
                                  "first turn of session 'e'")
    assert all("\n" not in m for m in messages.values()) and len(messages) == 3


def test_a_delta_first_turn_with_a_logged_call_is_sent_as_given(tmp_path: Path) -> None:
    w = load(write_lines(tmp_path / "d.jsonl", [{"session_id": "d", "message_mode": "delta",
                                                 "messages": HISTORY[1:]}]))
    (req,) = w.requests
    assert (req.turn, req.carry, req.logged_answer) == (1, False, None)
    assert [m.role for m in req.messages or []] == ["assistant", "tool"]  # no turn before it to replace


def test_a_folder_file_that_is_a_token_trace_skips_that_file_only(tmp_path: Path) -> None:
    d = tmp_path / "bodies"
    d.mkdir()
    for f in (FIX / "bodies").iterdir():
        (d / f.name).write_text(f.read_text())
    (d / "c.json").write_text('{"timestamp": 0, "input_length": 5, "output_length": 3}')
    w = load(d)
    assert [r.id for r in w.requests] == ["a-read.json", "b-fix.json"]
    assert str(w.issues[0]).startswith("c.json: a trace of token counts (timestamp, input_length")
