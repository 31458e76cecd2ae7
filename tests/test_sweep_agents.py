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
from demo.results import SideResult
from demo.sweep.profile import RequestOutcome, answer_kind
from demo.sweep.segments import group_outcomes, routing_sentence, segments_of
from demo.workload import load_workload
from harness.standin import Standin, StandinBehavior

FIX = ROOT / "tests" / "fixtures" / "workloads"
CARRIED = ("messages", "prompt", "tools", "tool_choice", "parallel_tool_calls", "max_tokens", "temperature", "top_p")
# file -> (form, sessions, turns, requests with tools)
FORMS: dict[str, tuple[str, int, int, int]] = {
    "aiperf-trace.jsonl": ("aiperf-trace", 1, 2, 2),
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
    history = {"aiperf-trace": "logged", "litellm-payload": "logged", "litellm-spendlogs": "logged",
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
