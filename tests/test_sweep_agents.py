"""Agents' traffic through the sweep (python -m demo sweep --workload ...) against stand-ins that record
what each request carried: for every new form, the tools, tool_choice and history the file gave arrive
identical on both sides; results.json's spec.workload names the form with its sessions and turns; a
server without a tool parser answers with the one line naming its flags."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from common.paths import ROOT
from demo.client import request_body
from demo.results import Message, RaceRequest, SideResult, ToolCall
from demo.sweep import runner
from demo.sweep.models import SweepResult
from demo.sweep.profile import RequestOutcome, answer_kind
from demo.sweep.segments import group_outcomes, routing_sentence, segments_of
from demo.ui.evaluate_tab import workload_html
from demo.workload import load_workload
from harness.standin import TOOL_CALL_FIXTURE, Standin, StandinBehavior

FIX = ROOT / "tests" / "fixtures" / "workloads"
CARRIED = ("messages", "prompt", "tools", "tool_choice", "parallel_tool_calls", "max_tokens", "temperature", "top_p")
# file -> (form, sessions, turns, requests with tools)
FORMS: dict[str, tuple[str, int, int, int]] = {
    "aiperf-trace.jsonl": ("aiperf-trace", 1, 2, 2),
    "aiperf-trace-delta.jsonl": ("aiperf-trace", 1, 3, 3),
    "aiperf-multi-turn.jsonl": ("aiperf-multi-turn", 2, 3, 0),
    "aiperf-single-turn.jsonl": ("aiperf-single-turn", 3, 3, 0),
    "guidellm.jsonl": ("guidellm", 2, 2, 0),
    "litellm-payload.json": ("litellm-payload", 1, 1, 1),
    "litellm-spendlogs.json": ("litellm-spendlogs", 1, 2, 2),
    "openai-body.json": ("openai-body", 1, 1, 1),
    "sharegpt-one.json": ("sharegpt", 1, 1, 0),
    "bodies": ("folder", 2, 2, 2),
    "batch-repeated-ids.jsonl": ("openai-batch", 3, 3, 0),
    "../../../workloads/agent-session.jsonl": ("aiperf-trace", 1, 7, 7),
    "../../../workloads/agent-session-delta.jsonl": ("aiperf-trace", 1, 7, 7),
}


def sweep(base: Standin, spec: Standin, out: Path, workload: Path) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "demo", "sweep", "--baseline-url", base.url, "--speculative-url", spec.url,
           "--out", str(out), "--no-progress", "--warmup", "0", "--workload", str(workload), "--concurrency", "1",
           "--repeats", "1"]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=240,
                          env={**os.environ, "SPECDEMO_SAVE_RUNS": "false"})


def carried(body: dict[str, Any]) -> str:
    """What a request carried that the file decides, as one comparable text."""
    return json.dumps({k: body[k] for k in CARRIED if k in body}, sort_keys=True)


@pytest.fixture(scope="module")
def pair() -> Any:
    with Standin.pair(StandinBehavior(tokens_per_s=2000, ttft_s=0.0, max_model_len=8192)) as servers:
        yield servers


@pytest.mark.parametrize("name", list(FORMS))
def test_each_form_arrives_identical_on_both_sides_as_the_file_gave_it(
        pair: tuple[Standin, Standin], tmp_path: Path, name: str) -> None:
    base, spec = pair
    base.requests.clear()
    spec.requests.clear()
    form, sessions, turns, with_tools = FORMS[name]
    done = sweep(base, spec, tmp_path / "out", FIX / name)
    assert done.returncode == 0, done.stderr
    data = json.loads((tmp_path / "out" / "results.json").read_text())
    w = data["spec"]["workload"]
    assert (w["format"], w["sessions"], w["turns"], w["requests"]) == (form, sessions, turns, turns)
    history = "own" if "delta" in name else {
        "aiperf-trace": "logged", "litellm-payload": "logged", "litellm-spendlogs": "logged",
        "aiperf-multi-turn": "own"}.get(form)
    assert w["history"] == history
    # The stand-ins' own records: both sides got the same requests, each as the file gave it.
    on_base = Counter(carried(r.body) for r in base.requests)
    on_spec = Counter(carried(r.body) for r in spec.requests)
    assert on_base == on_spec and sum(on_base.values()) == turns
    loaded = load_workload(FIX / name, max_bytes=10**7, max_prompt_chars=10**6)
    if history != "own":  # a turn carried on from each side's own answer is checked below
        assert on_base == Counter(carried(request_body(r.to_race_request(), "m")) for r in loaded.requests)
    assert sum(1 for r in base.requests if r.body.get("tools")) == with_tools
    (cell,) = data["cells"]
    assert all(o["error"] is None for o in cell["requests"])


def test_the_tool_history_reaches_the_wire_unchanged(pair: tuple[Standin, Standin], tmp_path: Path) -> None:
    base, spec = pair
    base.requests.clear()
    spec.requests.clear()
    assert sweep(base, spec, tmp_path / "out", FIX / "openai-body.json").returncode == 0
    given = json.loads((FIX / "openai-body.json").read_text())
    for server in (base, spec):
        (req,) = server.requests
        for key in ("messages", "tools", "tool_choice", "parallel_tool_calls"):
            assert req.body[key] == given[key], key  # content: null and the tool_call_id included


def test_a_server_without_a_tool_parser_says_which_flags(tmp_path: Path) -> None:
    with Standin.pair(StandinBehavior(tokens_per_s=2000, ttft_s=0.0, tool_parser=False)) as (base, spec):
        done = sweep(base, spec, tmp_path / "out", FIX / "openai-body.json")
    text = done.stdout + done.stderr
    if done.returncode == 0:
        (cell,) = json.loads((tmp_path / "out" / "results.json").read_text())["cells"]
        text = cell["requests"][0]["error"] or ""
    assert "HTTP 400" in text and "--enable-auto-tool-choice --tool-call-parser hermes" in text, text


def test_segments_per_turn_index_and_per_answer_kind() -> None:
    def outcome(turn: int, kind: str, speedup: float) -> RequestOutcome:
        return RequestOutcome(id=f"s#{turn}-{kind}-{speedup}", prompt_sha256="x", session="s", turn=turn,
                              answer_kind=kind, speedup=speedup, temperature=0.0, structured=False)

    outcomes = [outcome(t, k, sp) for t in (1, 2) for k, sp in (("tool_call", 1.1 + t), ("prose", 1.0 + t))
                for _ in range(2)]
    groups = {(dim, label): [o.speedup for o in members] for dim, label, members in group_outcomes(outcomes)}
    assert groups[("turn", "turn 1")] == [2.1, 2.1, 2.0, 2.0] and groups[("turn", "turn 2")] == [3.1, 3.1, 3.0, 3.0]
    assert groups[("answer", "tool call")] == [2.1, 2.1, 3.1, 3.1]
    assert groups[("answer", "prose")] == [2.0, 2.0, 3.0, 3.0]
    assert not any(dim == "session" for dim, _ in groups)  # one session: no session dimension
    segments = segments_of(outcomes, 1)
    assert [s.label for s in segments if s.dimension == "turn"] == ["turn 1", "turn 2"]
    assert "tool-call answers" in routing_sentence(segments) or "all of this traffic" in routing_sentence(segments)
    # the kind of an answer: the server's parser ends a tool call with finish_reason "tool_calls"
    done = {"side": "baseline", "url": "u", "complete": True}
    assert answer_kind(SideResult(**done, finish_reason="tool_calls")) == "tool_call"
    assert answer_kind(SideResult(**done, finish_reason="stop")) == "prose"
    assert answer_kind(SideResult(side="baseline", url="u", complete=False)) is None


def test_the_agent_session_swept_has_a_segment_per_turn(pair: tuple[Standin, Standin], tmp_path: Path) -> None:
    base, spec = pair
    done = sweep(base, spec, tmp_path / "out", ROOT / "workloads" / "agent-session.jsonl")
    assert done.returncode == 0, done.stderr
    data = json.loads((tmp_path / "out" / "results.json").read_text())
    turns = [s for s in data["segments"] if s["dimension"] == "turn"]
    assert [s["label"] for s in turns] == [f"turn {n}" for n in range(1, 8)]
    assert all(s["requests"] == 1 and s["speedup"] is not None for s in turns)
    (cell,) = data["cells"]
    turns_measured = sorted((o["session"], o["turn"]) for o in cell["requests"])
    assert turns_measured == [("fix-cart-discount", n) for n in range(1, 8)]
    # the per-turn table says the history was the log's: no own call, so nothing is counted as differing
    assert data["sessions"]["history"] == "logged" and data["sessions"]["differed"] is None
    html = (tmp_path / "out" / "report.html").read_text()
    assert 'data-history="logged"' in html and html.count('<tr data-turn="turn ') == 7


# Session truth: a speculative stand-in whose acceptance grows with the turn (the history's length):
# turn n's prompt holds TURN-1..TURN-n; by_marker's first match wins, so the latest turn's marker decides.
TURN_STEPS = {1: 1, 2: 2, 3: 3, 4: 5}  # tokens per step on turn n
BASE_RATE = 40.0
MAX_TOKENS = 61  # 1 prefill token + 60: whole steps for 1, 2, 3 and 5


def test_a_session_played_turn_by_turn_carries_each_sides_own_answer(tmp_path: Path) -> None:
    turns = [{"text": f"TURN-{n}: now extend the record with field {n}", "output_length": MAX_TOKENS}
             for n in TURN_STEPS]
    f = tmp_path / "session.jsonl"
    f.write_text(json.dumps({"session_id": "grow", "turns": [{"role": "system", "text": "Be exact."}, *turns]}) + "\n")
    by_marker = {f"TURN-{n}": {"chunk_sizes": [TURN_STEPS[n]], "tokens_per_s": BASE_RATE * (1 + TURN_STEPS[n]) / 2}
                 for n in sorted(TURN_STEPS, reverse=True)}
    with Standin(StandinBehavior(tokens_per_s=BASE_RATE, ttft_s=0.02)) as base, \
            Standin(StandinBehavior(tokens_per_s=BASE_RATE, ttft_s=0.02, speculative=True, num_spec_tokens=4,
                                    by_marker=by_marker)) as spec:
        done = sweep(base, spec, tmp_path / "out", f)
        assert done.returncode == 0, done.stderr
        truths = {side: list(s.truth) for side, s in (("baseline", base), ("speculative", spec))}
        bodies = {side: [r.body for r in s.requests] for side, s in (("baseline", base), ("speculative", spec))}
    data = json.loads((tmp_path / "out" / "results.json").read_text())
    w = data["spec"]["workload"]
    assert (w["format"], w["sessions"], w["turns"], w["history"]) == ("aiperf-multi-turn", 1, 4, "own")
    for side in ("baseline", "speculative"):
        sent, truth = bodies[side], truths[side]
        assert [len(b["messages"]) for b in sent] == [2, 4, 6, 8]  # system, then user + own answer per turn
        for n in range(1, 4):
            # turn n+1 = what this side sent for turn n, this side's own answer to it, the next user turn
            assert sent[n]["messages"][:-2] == sent[n - 1]["messages"]
            assert sent[n]["messages"][-2] == {"role": "assistant", "content": truth[n - 1].text}
            assert sent[n]["messages"][-1]["content"].startswith(f"TURN-{n + 1}:")
    (cell,) = data["cells"]
    outcomes = {o["turn"]: o for o in cell["requests"]}
    for n, steps in TURN_STEPS.items():
        b, s = truths["baseline"][n - 1], truths["speculative"][n - 1]
        assert b.decode_tokens_per_s is not None and s.decode_tokens_per_s is not None
        assert outcomes[n]["speedup"] == pytest.approx(s.decode_tokens_per_s / b.decode_tokens_per_s, rel=0.05), n
        assert outcomes[n]["tokens_per_step"] == pytest.approx(steps, abs=1e-12), n
    segs = {s["label"]: s for s in data["segments"] if s["dimension"] == "turn"}
    assert [segs[f"turn {n}"]["tokens_per_step"] for n in TURN_STEPS] == list(TURN_STEPS.values())


def test_a_gateway_logs_own_figures_are_shown_beside_ours(pair: tuple[Standin, Standin], tmp_path: Path) -> None:
    base, spec = pair
    done = sweep(base, spec, tmp_path / "out", FIX / "litellm-spendlogs.json")
    assert done.returncode == 0, done.stderr
    data = json.loads((tmp_path / "out" / "results.json").read_text())
    (cell,) = data["cells"]
    logged = {o["id"]: o["logged"] for o in cell["requests"]}
    assert logged["r-1"]["completion_tokens"] == 30 and logged["r-1"]["e2e_s"] == pytest.approx(1.25)
    assert logged["r-1"]["ttft_s"] == pytest.approx(0.3)
    (w,) = data["workloads"]
    assert w["profile"]["logged_e2e_s"]["p50"] == pytest.approx(1.25)
    assert w["profile"]["logged_output_tokens"]["p50"] == 30
    html = (tmp_path / "out" / "report.html").read_text()
    assert "end to end, as logged by the gateway (not measured here)" in html


# --------------------------------------------------------------------------- delta sessions with tool calls
# Each side carries its own answer, tool calls included, into its next turn, followed by the logged tool
# results with their ids rewritten to that side's calls; a logged call at the head of a delta turn is
# replaced by the side's own and compared with it.

WEATHER = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
FIXTURE_CALL = {"id": "chatcmpl-tool-b870873c530fd019", "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}  # what the replay calls


def logged_call(cid: str, city: str) -> dict[str, Any]:
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": cid, "type": "function", "function": {"name": "get_weather", "arguments": json.dumps({"city": city})}}]}


def delta_session(path: Path, later: list[list[dict[str, Any]]], first: str = "What is the weather in Paris?",
                  max_tokens: int = 61) -> Path:
    """A trace in message_mode "delta": the first turn (system, user, tools), then each later turn's new messages."""
    head = [{"role": "system", "content": "You are a weather agent."}, {"role": "user", "content": first}]
    rows = [{"session_id": "w", "message_mode": "delta", "tools": WEATHER, "output_length": max_tokens,
             "messages": m} for m in [head, *later]]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


WEATHER_TURNS = [
    [logged_call("call_1", "Paris"), {"role": "tool", "tool_call_id": "call_1", "content": "18 C, sunny"}],  # same
    [logged_call("call_2", "Berlin"), {"role": "tool", "tool_call_id": "call_2", "content": "12 C, rain"}],  # differs
    [{"role": "tool", "tool_call_id": "t-9", "content": "no logged call before me"}],  # nothing to compare
]


def test_each_side_carries_its_own_tool_call_then_the_logged_result_with_its_id(tmp_path: Path) -> None:
    replay = StandinBehavior(replay_fixture=TOOL_CALL_FIXTURE, replay_speed=50)
    with Standin.pair(replay, replay) as (base, spec):
        done = sweep(base, spec, tmp_path / "out", delta_session(tmp_path / "w.jsonl", WEATHER_TURNS))
        assert done.returncode == 0, done.stderr
        bodies = {side: [r.body for r in s.requests] for side, s in (("baseline", base), ("speculative", spec))}
    assert bodies["baseline"] == bodies["speculative"]  # identical answers: identical histories, turn by turn
    sent = bodies["baseline"]
    assert [len(b["messages"]) for b in sent] == [2, 4, 6, 8]
    for n in range(1, 4):
        new = sent[n]["messages"][len(sent[n - 1]["messages"]):]
        # this side's own answer (the replayed call, content null, its id kept), then the logged result
        assert new[0] == {"role": "assistant", "content": None, "tool_calls": [FIXTURE_CALL]}
        assert new[1]["role"] == "tool" and new[1]["tool_call_id"] == FIXTURE_CALL["id"]  # rewritten from call_n
        assert new[1]["content"] == WEATHER_TURNS[n - 1][-1]["content"]
        assert sent[n]["tools"] == WEATHER
    data = json.loads((tmp_path / "out" / "results.json").read_text())
    assert (data["spec"]["workload"]["history"], data["spec"]["workload"]["turns"]) == ("own", 4)
    (cell,) = data["cells"]
    other = {o["turn"]: o["other_call"] for o in cell["requests"]}
    assert other == {1: {}, 2: {"baseline": False, "speculative": False},
                     3: {"baseline": True, "speculative": True}, 4: {}}
    assert data["sessions"]["after_logged_call"] == {"baseline": 2, "speculative": 2}
    assert data["sessions"]["other_call"] == {"baseline": 1, "speculative": 1}
    said = "1 of 2 turns followed a call that differed from the logged one (each side)"
    assert data["sessions"]["differed"] == said
    assert all(o["answer_kind"] == "tool_call" for o in cell["requests"])
    html = (tmp_path / "out" / "report.html").read_text()
    assert 'data-history="own"' in html and said in html and html.count('<tr data-turn="turn ') == 4
    assert "per turn (own history), decode speedup: turn 1 " in done.stdout and f"  {said}\n" in done.stdout
    tab = workload_html(SweepResult.model_validate(data))  # the Evaluate tab's workload section: the same table
    assert 'data-history="own"' in tab and said in tab and tab.count('<tr data-turn="turn ') == 4


def test_a_pair_whose_calls_differ_from_the_logged_ones_is_counted_per_side(tmp_path: Path) -> None:
    # the baseline calls as the log did on turn 1; the speculative side answers in prose every time
    with Standin(StandinBehavior(replay_fixture=TOOL_CALL_FIXTURE, replay_speed=50)) as base, \
            Standin(StandinBehavior(tokens_per_s=2000, ttft_s=0.0, speculative=True, chunk_sizes=[3])) as spec:
        done = sweep(base, spec, tmp_path / "out", delta_session(tmp_path / "w.jsonl", WEATHER_TURNS[:2], max_tokens=8))
        assert done.returncode == 0, done.stderr
        prose = [r.body for r in spec.requests]
        spec_text = spec.truth[0].text
    # the prose answer carried (no calls), the logged result after it keeps its logged id: nothing to rewrite to
    assert prose[1]["messages"][2] == {"role": "assistant", "content": spec_text}
    assert prose[1]["messages"][3]["tool_call_id"] == "call_1"
    data = json.loads((tmp_path / "out" / "results.json").read_text())
    assert data["sessions"]["after_logged_call"] == {"baseline": 2, "speculative": 2}
    assert data["sessions"]["other_call"] == {"baseline": 1, "speculative": 2}
    assert data["sessions"]["differed"] == ("baseline: 1 of 2 turns; speculative: 2 of 2 turns followed a call that "
                                            "differed from the logged one")
    assert data["cells"][0]["identical_text"] is False  # the answers differ: so do the histories


# Session truth with tool calls: turn 1 is a tool call (the captured hermes stream, on both sides), then the
# logged result and two user turns; the speculative stand-in's acceptance grows with the turn (TOOL_TURN_STEPS).
TOOL_TURN_STEPS = {2: 2, 3: 3, 4: 5}


def test_session_truth_with_tool_calls_per_turn_speedups_match_the_stand_ins(tmp_path: Path) -> None:
    later = [[logged_call("call_1", "Paris"),
              {"role": "tool", "tool_call_id": "call_1", "content": "TURN-2: 18 C, sunny. Now write the forecast."}],
             [{"role": "user", "content": "TURN-3: and for tomorrow?"}],
             [{"role": "user", "content": "TURN-4: and in Fahrenheit?"}]]
    f = delta_session(tmp_path / "w.jsonl", later, first="TURN-1: What is the weather in Paris?", max_tokens=MAX_TOKENS)
    # the captured stream of a server without speculation, on both sides (its chunks are no steps of k=4)
    tool_turn = {"TURN-1": {"replay_fixture": TOOL_CALL_FIXTURE, "replay_speed": 50, "speculative": False}}
    base_marks = {**{f"TURN-{n}": {} for n in sorted(TOOL_TURN_STEPS, reverse=True)}, **tool_turn}
    spec_marks = {**{f"TURN-{n}": {"chunk_sizes": [steps], "tokens_per_s": BASE_RATE * (1 + steps) / 2}
                     for n, steps in sorted(TOOL_TURN_STEPS.items(), reverse=True)}, **tool_turn}
    with Standin(StandinBehavior(tokens_per_s=BASE_RATE, ttft_s=0.02, by_marker=base_marks)) as base, \
            Standin(StandinBehavior(tokens_per_s=BASE_RATE, ttft_s=0.02, speculative=True, num_spec_tokens=4,
                                    by_marker=spec_marks)) as spec:
        done = sweep(base, spec, tmp_path / "out", f)
        assert done.returncode == 0, done.stderr
        truths = {side: list(s.truth) for side, s in (("baseline", base), ("speculative", spec))}
        bodies = {side: [r.body for r in s.requests] for side, s in (("baseline", base), ("speculative", spec))}
    for side in ("baseline", "speculative"):
        sent, truth = bodies[side], truths[side]
        assert sent[1]["messages"][2]["tool_calls"] == [FIXTURE_CALL]  # its own call carried into turn 2
        for n in (3, 4):  # its own prose answer to the turn before, then the next user turn
            assert sent[n - 1]["messages"][:len(sent[n - 2]["messages"])] == sent[n - 2]["messages"]
            assert sent[n - 1]["messages"][-2] == {"role": "assistant", "content": truth[n - 2].text}
    data = json.loads((tmp_path / "out" / "results.json").read_text())
    (cell,) = data["cells"]
    outcomes = {o["turn"]: o for o in cell["requests"]}
    assert outcomes[1]["answer_kind"] == "tool_call" and outcomes[2]["other_call"] == {
        "baseline": False, "speculative": False}
    for n, steps in TOOL_TURN_STEPS.items():
        b, s = truths["baseline"][n - 1], truths["speculative"][n - 1]
        assert b.decode_tokens_per_s is not None and s.decode_tokens_per_s is not None
        assert outcomes[n]["speedup"] == pytest.approx(s.decode_tokens_per_s / b.decode_tokens_per_s, rel=0.05), n
        assert outcomes[n]["tokens_per_step"] == pytest.approx(steps, abs=1e-12), n
    segs = {s["label"]: s for s in data["segments"] if s["dimension"] == "turn"}
    gains = [segs[f"turn {n}"]["speedup"] for n in TOOL_TURN_STEPS]
    assert gains[0] < gains[1] < gains[2]  # speculation gains as the history grows


def test_carried_makes_missing_ids_rewrites_results_in_order_and_compares_parsed_arguments() -> None:
    calls = [ToolCall(id=None, name="read_file", arguments='{"path":"a.py"}'),
             ToolCall(id="srv-2", name="read_file", arguments='{"path": "b.py"}')]
    answer = SideResult(side="baseline", url="u", complete=True, text="", tool_calls=calls)
    results = [Message(role="tool", tool_call_id=f"log-{k}", content=f"r{k}") for k in (1, 2, 3)]
    before = RaceRequest(messages=[Message(role="user", content="go")])
    turn = runner.carried(RaceRequest(messages=[*results, Message(role="user", content="next")]), before, answer, 4)
    assert turn is not None
    sent = request_body(turn, "m")["messages"]
    assert sent[1] == {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call-4-1", "type": "function", "function": {"name": "read_file", "arguments": '{"path":"a.py"}'}},
        {"id": "srv-2", "type": "function", "function": {"name": "read_file", "arguments": '{"path": "b.py"}'}}]}
    # the k-th result answers the side's k-th call; one beyond its calls keeps the logged id
    assert [m.get("tool_call_id") for m in sent[2:]] == ["call-4-1", "srv-2", "log-3", None]
    # the logged call, arguments an object (some logs): compared as parsed JSON, so spacing does not count
    logged = Message.model_validate({"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "function": {"name": "read_file", "arguments": {"path": "a.py"}}},
        {"id": "c2", "function": {"name": "read_file", "arguments": '{"path":"b.py"}'}}]})
    assert runner.followed_other_call(answer, logged) is False
    assert runner.followed_other_call(answer.model_copy(update={"tool_calls": calls[:1]}), logged) is True
    assert runner.followed_other_call(answer, Message(role="assistant", content="prose")) is None
    assert runner.followed_other_call(answer, None) is None
    failed = answer.model_copy(update={"complete": False})
    assert runner.carried(RaceRequest(messages=results[:1]), before, failed, 4) is None


def test_the_warm_up_sends_whole_turns_only(pair: tuple[Standin, Standin], tmp_path: Path) -> None:
    base, spec = pair
    base.requests.clear()
    cmd = [sys.executable, "-m", "demo", "sweep", "--baseline-url", base.url, "--speculative-url", spec.url,
           "--out", str(tmp_path / "out"), "--no-progress", "--warmup", "1", "--workload",
           str(FIX / "aiperf-trace-delta.jsonl"), "--concurrency", "2", "--repeats", "1"]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=240,
                          env={**os.environ, "SPECDEMO_SAVE_RUNS": "false"})
    assert done.returncode == 0, done.stderr
    bodies = [r.body for r in base.requests]
    assert len(bodies) == 1 + 3  # the first turn warmed up once, then the session's 3 turns
    assert bodies[0]["max_tokens"] == 16 and bodies[0]["messages"] == bodies[1]["messages"]
    assert all(b["messages"][0]["role"] == "system" for b in bodies)  # no turn opens with a lone tool result


def test_several_arms_each_get_their_per_turn_column_and_their_own_count(tmp_path: Path) -> None:
    base_b = StandinBehavior(tokens_per_s=400, ttft_s=0.0, replay_fixture=TOOL_CALL_FIXTURE, replay_speed=50)
    prose = StandinBehavior(tokens_per_s=1000, ttft_s=0.0, speculative=True, chunk_sizes=[4])
    with Standin(base_b) as base, Standin(base_b) as ngram, Standin(prose) as suffix:
        cmd = [sys.executable, "-m", "demo", "sweep", "--baseline-url", base.url, "--arm", f"ngram={ngram.url}",
               "--arm", f"suffix={suffix.url}", "--out", str(tmp_path / "out"), "--no-progress", "--warmup", "0",
               "--workload", str(delta_session(tmp_path / "w.jsonl", WEATHER_TURNS[:2], max_tokens=9)),
               "--concurrency", "1", "--repeats", "1"]
        done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=240,
                              env={**os.environ, "SPECDEMO_SAVE_RUNS": "false"})
    assert done.returncode == 0, done.stderr
    data = json.loads((tmp_path / "out" / "results.json").read_text())
    replay = data["sessions"]
    assert replay["arms"] == ["ngram", "suffix"] and list(replay["arm_turns"]) == ["suffix"]
    # the baseline and ngram call as the log did on turn 1 (not on turn 2); suffix answers in prose every time
    assert replay["after_logged_call"] == {"baseline": 2, "ngram": 2, "suffix": 2}
    assert replay["other_call"] == {"baseline": 1, "ngram": 1, "suffix": 2}
    suffix_turns = {s["label"]: s for s in replay["arm_turns"]["suffix"]}
    assert [suffix_turns[f"turn {n}"]["tokens_per_step"] for n in (1, 2, 3)] == [4, 4, 4]
    html = (tmp_path / "out" / "report.html").read_text()
    assert "<th>ngram: decode speedup</th>" in html and "<th>suffix: decode speedup</th>" in html
    assert "decode speedup (suffix): turn 1 " in done.stdout
    assert "baseline: 1 of 2 turns; ngram: 1 of 2 turns; suffix: 2 of 2 turns followed a call" in done.stdout
