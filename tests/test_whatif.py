"""The what-if run (``python -m demo whatif``, demo/load/whatif.py) against stand-ins that force a mean
acceptance length as vLLM's synthetic rejection sampling does (``synthetic_acceptance_length``):
the stand-in's own truth (exact per-request metrics and /metrics counters), the what-if's figures
against it (speedup within 5%, tokens per step exact), its table and answer line, a server
that fails or is not synthetic, and bad input (exit 2, one line).

Speeds on a busy 2-core machine are not asserted; ratios are, against each stand-in's truth.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from pydantic import ValidationError

from demo.cli import main
from demo.fmt import fmt_speedup
from demo.load.whatif import NOT_THE_TARGET, VERIFIER_SIDE, answer_line, arm_name, parse_lengths
from harness.ports import free_port
from harness.standin import Standin, StandinBehavior, Truth, synthetic_steps
from harness.standin_process import StandinProcess

# 120 decode tokens after the prefill token: whole cycles at every length below (1.5: [1, 2], 2, 3, 5),
# so each request's mean acceptance length is exactly the forced one.
MAX_TOKENS = 121
LENGTHS = (1.5, 2.0, 3.0, 5.0)
# The baseline decodes 40 tokens/s; a what-if server takes 32 verification steps a second (a step
# costs 1.25 baseline steps), each L tokens: 48, 64, 96, 160 tokens/s, i.e. 1.2x, 1.6x, 2.4x, 4.0x, and
# an efficiency of 0.8. Slow streams (the fastest takes ~0.75 s, the baseline 3 s) keep a scheduling
# hiccup small against them (two busy loops beside the test: a 100 ms stall is 3% of a baseline batch).
BASE = StandinBehavior(tokens_per_s=40, ttft_s=0.02)
STEPS_PER_S = 32.0


def whatif_behavior(length: float) -> StandinBehavior:
    return StandinBehavior(tokens_per_s=STEPS_PER_S, ttft_s=0.02, speculative=True, num_spec_tokens=4,
                           synthetic_acceptance_length=length)


@pytest.fixture(autouse=True)
def _no_saved_runs(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    monkeypatch.setenv("SPECDEMO_RUNS_DIR", str(tmp_path / "runs"))
    monkeypatch.setenv("SPECDEMO_SAVE_RUNS", "false")
    monkeypatch.delenv("SPECDEMO_ARMS", raising=False)


@pytest.fixture
def servers() -> Iterator[tuple[StandinProcess, dict[float, StandinProcess]]]:
    """The baseline and a what-if stand-in per length, each in its own process: the client's
    timestamps then never wait for a stand-in thread to give back the GIL (started together)."""
    procs = [StandinProcess(BASE), *(StandinProcess(whatif_behavior(L)) for L in LENGTHS)]
    with ExitStack() as stack:
        for p in procs:
            stack.callback(p.stop)
        with ThreadPoolExecutor(len(procs)) as pool:
            list(pool.map(StandinProcess.start, procs))
        yield procs[0], dict(zip(LENGTHS, procs[1:], strict=True))


def url_flags(servers: dict[float, StandinProcess]) -> list[str]:
    return [x for L, s in servers.items() for x in ("--length-url", f"{L:g}={s.url}")]


def measured(server: StandinProcess) -> list[Truth]:
    """The measured requests (warm-up ones are shorter)."""
    return [t for t in server.truth() if t.stream and t.completion_tokens == MAX_TOKENS]


# --------------------------------------------------------------------------- the stand-in


def test_synthetic_steps_have_the_forced_mean() -> None:
    assert synthetic_steps(1.5) == [1, 2] and synthetic_steps(3.0) == [3] and synthetic_steps(1.0) == [1]
    assert synthetic_steps(2.25) == [2, 2, 2, 3]
    for L in (1.2, 1.5, 2.7, 3.3, 4.75, 5.0):
        steps = synthetic_steps(L)
        assert sum(steps) / len(steps) == pytest.approx(L, abs=1e-9) and max(steps) - min(steps) <= 1


def test_a_synthetic_stand_in_reports_exactly_the_forced_length() -> None:
    with Standin(whatif_behavior(1.5)) as s:
        body = {"model": "smollm2", "messages": [{"role": "user", "content": "hi"}], "max_tokens": MAX_TOKENS,
                "stream": True, "stream_options": {"include_usage": True, "continuous_usage_stats": True}}
        for _ in range(2):
            with httpx.stream("POST", f"{s.url}/v1/chat/completions", json=body, timeout=10) as r:
                lines = [line for line in r.iter_lines() if line.startswith("data: {")]
        final = json.loads(lines[-1].removeprefix("data: "))
        spec = final["metrics"]["speculative_decoding"]
        assert spec["mean_acceptance_length"] == 1.5 and spec["num_spec_steps"] == 80  # 120 tokens, 1.5 a step
        text = httpx.get(f"{s.url}/metrics", timeout=5).text
        totals = {smp.name: smp.value for fam in text_string_to_metric_families(text) for smp in fam.samples}
        drafts = totals["vllm:spec_decode_num_drafts_total"]
        accepted = totals["vllm:spec_decode_num_accepted_tokens_total"]
        assert drafts == 160 and 1 + accepted / drafts == 1.5  # both requests, in the counters too
        t = s.truth[-1]
        assert t.mean_acceptance_length == 1.5 and t.chunk_sizes_sent[1:3] == [1, 2]


@pytest.mark.parametrize(("fields", "message"), [
    ({"synthetic_acceptance_length": 2.0}, "needs speculative=True"),
    ({"speculative": True, "num_spec_tokens": 3, "synthetic_acceptance_length": 4.5}, r"\[1, num_spec_tokens\+1 = 4\]"),
    ({"speculative": True, "synthetic_acceptance_length": 0.5}, "a length in"),
])
def test_the_stand_in_refuses_a_length_vllm_would(fields: dict, message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        StandinBehavior(**fields)


# --------------------------------------------------------------------------- the what-if


def test_the_whatifs_figures_match_the_truth_at_each_length(servers, capsys) -> None:
    base, whatif = servers
    assert main(["whatif", "--baseline-url", base.url, "--lengths", "1.5,2,3,5", *url_flags(whatif),
                 "--max-tokens", str(MAX_TOKENS), "--json", "--no-progress"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [p["length"] for p in out["points"]] == list(LENGTHS) and out["users"] == 1
    # One baseline batch per length, in the lengths' order (sequential: each A/B adjacent in time).
    base_truths = measured(base)
    assert len(base_truths) == len(LENGTHS)
    for p, b in zip(out["points"], base_truths, strict=True):
        (t,) = measured(whatif[p["length"]])
        true = (t.decode_tokens_per_s or 0) / (b.decode_tokens_per_s or 1)
        assert p["speedup"] == pytest.approx(true, rel=0.05), p
        assert true == pytest.approx(p["length"] * STEPS_PER_S / BASE.tokens_per_s, rel=0.2)  # as they say
        assert p["tokens_per_step"] == pytest.approx(p["length"], abs=1e-9)  # exact: the forced length
        assert p["tokens_per_step"] == pytest.approx(t.mean_acceptance_length, abs=1e-9)
        assert p["acceptance_rate"] == pytest.approx(t.acceptance_rate, abs=1e-9)
        assert p["efficiency"] == pytest.approx(p["speedup"] / p["tokens_per_step"], abs=1e-9)
        assert p["note"] is None and p["errors"] == [] and p["na_reasons"] == {}
    first, *rest = out["points"]
    assert out["answer"].startswith(f"a drafter reaching acceptance length 1.5 would buy "
                                    f"{fmt_speedup(first['speedup'])} here; ")
    assert all(f"; {p['length']:g} would buy {fmt_speedup(p['speedup'])}" in out["answer"] for p in rest)
    assert out["notes"] == [NOT_THE_TARGET, VERIFIER_SIDE]


def test_the_table_says_a_failed_or_unforced_server_and_the_caveats(capsys) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    # length 4 is served by a plain speculative server (2 tokens a step): not what was forced
    plain = StandinBehavior(tokens_per_s=80, ttft_s=0.02, speculative=True, chunk_sizes=[2])
    with Standin(BASE) as base, Standin(whatif_behavior(2.0)) as two, Standin(plain) as unforced:
        code = main(["whatif", "--baseline-url", base.url, "--lengths", "2,3,4", "--length-url", f"2={two.url}",
                     "--length-url", f"3={dead}", "--length-url", f"4={unforced.url}", "--users", "2",
                     "--max-tokens", "21", "--warmup", "0", "--no-progress"])
    table = capsys.readouterr().out
    assert code == 0  # a length was measured
    lines = table.splitlines()
    assert lines[0].startswith("What-if: json_reformat, 21 tokens, 2 users, sequential A/B")
    row = {line.split()[0]: line for line in lines if line.strip()[:1].isdigit()}
    assert set(row) == {"2", "3", "4"}
    assert "n/a" in row["3"] and "failed: see the error below" in row["3"]
    assert any(dead in line and "error:" in line for line in lines)
    assert "note: measured 2.00 tokens per step, not the 4 forced" in table
    assert "2.00" in row["2"] and "n/a" not in row["2"]
    answer = next(line for line in lines if line.startswith("a drafter reaching acceptance length 2 would buy "))
    assert "; 3 n/a (its server failed: see the table); 4 would buy " in answer and "2 users" in answer
    assert "(but 2.00 tokens per step were measured, not 4)" in answer
    assert f"Note: {NOT_THE_TARGET}." in table and f"Note: {VERIFIER_SIDE}." in table


@pytest.mark.parametrize(("flags", "message"), [
    (["--lengths", "0.5,2", "--length-url", "2=http://x"], "--lengths takes acceptance lengths of at least 1"),
    (["--lengths", "2", "--length-url", "0.9=http://x"], "--length-url takes acceptance lengths of at least 1"),
    (["--lengths", "2,x"], "--lengths must be comma-separated numbers"),
    (["--lengths", "inf", "--length-url", "inf=http://x"], "--lengths takes acceptance lengths of at least 1"),
    (["--lengths", "2", "--length-url", "2=http://x", "--length-url", "7=http://y"],
     "--length-url 7: not in --lengths"),
    (["--lengths", "2,3", "--length-url", "2=http://x"], "no server for length 3"),
    (["--lengths", "2", "--length-url", "two=http://x"], "--length-url takes L=URL"),
    (["--lengths", "2", "--length-url", "2=http://x", "--length-url", "2.0=http://y"], "given twice"),
    (["--lengths", "2", "--length-url", "2=http://x", "--arm", "l2=http://y"], "--arm is not for whatif"),
    (["--lengths", "2", "--length-url", "2=http://x", "--users", "1,2"], "--users takes one count"),
    (["--lengths", "2", "--length-url", "2=http://x", "--users", "0"], "--users must be from 1"),
    (["--lengths", "2", "--length-url", "2=http://x", "--preset", "nope"], "nope"),
])
def test_bad_input_is_one_line_and_exit_2(flags: list[str], message: str, capsys) -> None:
    with pytest.raises(SystemExit) as e:
        main(["whatif", "--baseline-url", f"http://127.0.0.1:{free_port()}", *flags])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err


def test_lengths_and_names() -> None:
    assert parse_lengths("3, 1.5,2,3") == [1.5, 2.0, 3.0]
    assert arm_name(1.5) == "l1-5" and arm_name(3.0) == "l3"
    assert answer_line([], 1).startswith("no length produced a speedup")
