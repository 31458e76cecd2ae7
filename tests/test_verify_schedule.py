"""benchmarks.verify_schedule on stand-ins: the first sweep's recommended schedule is what the restart
is given, the second sweep runs the same sweep again against the restarted servers (the real
``demo load`` subprocess), and the rows and the two lessons come from the two sweeps. Only the
restart is a stand-in's: its adaptive server is restarted (a new process on the same port) with the
behaviour of a server whose schedule drafts where the first one did not.

The lesson compares the adaptive arm's per-user speedup with the static arm's at 1 user (keeps it at
95% or more). The stand-ins run in processes of their own, and their streams are long enough (the
fastest 1 s) that a busy machine's late wake-ups stay small against them: with 30 tokens at 160
tokens/s (0.19 s) and one busy loop beside, two identical servers once measured 4.06x and 4.37x.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from benchmarks import verify_schedule as vs
from demo.cli import main
from demo.runs.store import read_load
from harness.standin import StandinBehavior, Truth
from harness.standin_process import StandinProcess, processes

# Per stream: rate / (1 + slowdown (n - 1)) at n streams. The static n-gram arm pays at 1 user (4x)
# and loses at 8 (0.82x): the recommendation is k=4 for 1-7 users, off from 8.
BASE = StandinBehavior(tokens_per_s=10, ttft_s=0.02, slowdown_in_flight=0.05)
NGRAM = StandinBehavior(tokens_per_s=40, ttft_s=0.02, slowdown_in_flight=0.8, speculative=True,
                        num_spec_tokens=4, chunk_sizes=[1, 3, 5, 2])
# The adaptive server as first started: a schedule that never drafts here, a little slower than the baseline.
ADAPTIVE_OFF = StandinBehavior(tokens_per_s=9, ttft_s=0.02, slowdown_in_flight=0.05, speculative=True,
                               num_spec_tokens=4, chunk_sizes=[1])
# 41 tokens: 1 s of decoding for the n-gram arm at 1 user. The three sides race at once (each
# stand-in has its own process and its own slowdown): the sweep's time is its slowest side's.
USERS, TOKENS = "1,8", "41"


@pytest.fixture(scope="module")  # the second test uses no rate, and only the adaptive arm's URL
def three() -> Iterator[dict[str, StandinProcess]]:
    with processes(BASE, NGRAM, ADAPTIVE_OFF) as started:
        yield dict(zip(("baseline", "ngram", "adaptive"), started, strict=True))


def first_sweep(three: dict[str, StandinProcess], out: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    assert main(["load", "--baseline-url", three["baseline"].url, "--speculative-url", three["ngram"].url,
                 "--arm", f"adaptive={three['adaptive'].url}", "--users", USERS, "--preset", "json_reformat",
                 "--max-tokens", TOKENS, "--order", "simultaneous", "--out", str(out), "--no-progress"]) == 0
    capsys.readouterr()
    return out / "load.json"


def alone(server: StandinProcess) -> Truth:
    """The server's last request streamed with no other in flight on it (a 1-user step's)."""
    streams = [t for t in server.truth() if t.stream and t.completion_tokens == int(TOKENS)]
    return next(t for t in reversed(streams) if not any(
        o is not t and o.t_request < (t.t_last_token_sent or 0) and t.t_request < (o.t_last_token_sent or 0)
        for o in streams))


def test_the_recommended_schedule_is_restarted_and_swept_again(
        three: dict[str, StandinProcess], tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECDEMO_SAVE_RUNS", "false")
    monkeypatch.delenv("SPECDEMO_ARMS", raising=False)
    first = read_load(first_sweep(three, tmp_path / "first", capsys))
    given: list[vs.Schedule] = []

    def restart(schedule: vs.Schedule) -> None:  # the restarted adaptive server now drafts
        given.append(schedule)
        three["adaptive"].stop()
        three["adaptive"].behavior = NGRAM
        three["adaptive"].start()  # on the same port

    v = vs.verify(first, restart, vs.sweep_again(tmp_path / "second"))
    rec = first.recommendation
    assert rec is not None and not hasattr(rec, "reason")
    assert given == [rec.speculative_config["num_speculative_tokens_per_batch_size"]] == [[[1, 7, 4], [8, 8, 0]]]
    second = read_load(tmp_path / "second" / "load.json")
    assert second.spec.users == [1, 8] and [a.name for a in second.spec.arm_list()] == ["speculative", "adaptive"]
    assert v.static_arm == "speculative" and [r.users for r in v.rows] == [1, 8]
    one = v.rows[0]
    assert one.adaptive_before is not None and one.adaptive_before < 1.0  # it drafted nothing: no gain
    assert one.adaptive_after is not None and one.static_after is not None
    assert one.adaptive_after == pytest.approx(one.static_after, rel=0.3)  # restarted, it keeps the gain
    # Both against the truth the stand-ins recorded (their own send times), within 5%: the second
    # sweep's 1-user step, each server's one request with nothing beside it on that server.
    base_rate = alone(three["baseline"]).decode_tokens_per_s or 0.0
    for got, server in ((one.static_after, "ngram"), (one.adaptive_after, "adaptive")):
        true = (alone(three[server]).decode_tokens_per_s or 0.0) / base_rate
        assert got == pytest.approx(true, rel=0.05), (server, got, true)
        assert true == pytest.approx(4.0, rel=0.1)  # the stand-ins do what they say
    assert one.adaptive_drafts_after and one.adaptive_drafts_after > 0
    assert v.lesson_before.startswith("adaptive loses speculative's gain at 1 user")
    assert v.lesson_after.startswith("adaptive keeps speculative's gain at 1 user")
    text = vs.table(v)
    assert "Schedule verified: [[1, 7, 4], [8, 8, 0]]" in text and "before: adaptive loses" in text


def test_a_sweep_without_an_adaptive_arm_is_refused_before_any_restart(
        three: dict[str, StandinProcess], tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECDEMO_SAVE_RUNS", "false")
    monkeypatch.delenv("SPECDEMO_ARMS", raising=False)
    assert main(["load", "--baseline-url", three["baseline"].url, "--speculative-url", three["ngram"].url,
                 "--users", "1", "--preset", "json_reformat", "--max-tokens", "10", "--out", str(tmp_path),
                 "--no-progress"]) == 0
    capsys.readouterr()
    assert vs.main([str(tmp_path / "load.json"), "--run-dir", str(tmp_path / "never")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: the sweep has no 'adaptive' arm to restart: sweep with --arm adaptive=URL"]
    assert not (tmp_path / "never").exists() and not (tmp_path / "verify").exists()
    data = json.loads((tmp_path / "load.json").read_text())
    data["spec"]["arms"] = [{"name": "speculative", "url": three["ngram"].url},
                            {"name": "adaptive", "url": three["adaptive"].url}]
    data["recommendation"] = {"speculative_config": None, "bands": [], "reason": "no arm with a known k"}
    (tmp_path / "load.json").write_text(json.dumps(data))
    with pytest.raises(ValueError, match="no recommended schedule to verify"):
        vs.verify(read_load(tmp_path / "load.json"), lambda s: pytest.fail("restarted"), lambda r: r)
