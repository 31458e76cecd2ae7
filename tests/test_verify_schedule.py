"""benchmarks.verify_schedule on stand-ins: the first sweep's recommended schedule is what the restart
is given, the second sweep runs the same sweep again against the restarted servers (the real
``demo load`` subprocess), and the rows and the two lessons come from the two sweeps. Only the
restart is a stand-in's: its adaptive server changes behaviour as a server restarted with a
schedule that drafts where the first one did not.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from benchmarks import verify_schedule as vs
from demo.cli import main
from demo.runs.store import read_load
from harness.standin import Standin, StandinBehavior

# Per stream: rate / (1 + slowdown (n - 1)) at n streams. The static n-gram arm pays at 1 user (4x)
# and loses at 8 (0.57x): the recommendation is k=4 for 1-7 users, off from 8.
BASE = StandinBehavior(tokens_per_s=40, ttft_s=0.02, slowdown_in_flight=0.05)
NGRAM = StandinBehavior(tokens_per_s=160, ttft_s=0.02, slowdown_in_flight=1.2, speculative=True,
                        num_spec_tokens=4, chunk_sizes=[1, 3, 5, 2])
# The adaptive server as first started: a schedule that never drafts here, a little slower than the baseline.
ADAPTIVE_OFF = StandinBehavior(tokens_per_s=36, ttft_s=0.02, slowdown_in_flight=0.05, speculative=True,
                               num_spec_tokens=4, chunk_sizes=[1])
USERS, TOKENS = "1,8", "30"


@pytest.fixture
def three() -> Iterator[dict[str, Standin]]:
    servers = {"baseline": Standin(BASE).start(), "ngram": Standin(NGRAM).start(),
               "adaptive": Standin(ADAPTIVE_OFF).start()}
    try:
        yield servers
    finally:
        for s in servers.values():
            s.stop()


def first_sweep(three: dict[str, Standin], out: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    assert main(["load", "--baseline-url", three["baseline"].url, "--speculative-url", three["ngram"].url,
                 "--arm", f"adaptive={three['adaptive'].url}", "--users", USERS, "--preset", "json_reformat",
                 "--max-tokens", TOKENS, "--order", "sequential", "--out", str(out), "--no-progress"]) == 0
    capsys.readouterr()
    return out / "load.json"


def test_the_recommended_schedule_is_restarted_and_swept_again(
        three: dict[str, Standin], tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECDEMO_SAVE_RUNS", "false")
    monkeypatch.delenv("SPECDEMO_ARMS", raising=False)
    first = read_load(first_sweep(three, tmp_path / "first", capsys))
    given: list[vs.Schedule] = []

    def restart(schedule: vs.Schedule) -> None:  # the restarted adaptive server now drafts
        given.append(schedule)
        three["adaptive"].behavior = NGRAM

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
    assert one.adaptive_drafts_after and one.adaptive_drafts_after > 0
    assert v.lesson_before.startswith("adaptive loses speculative's gain at 1 user")
    assert v.lesson_after.startswith("adaptive keeps speculative's gain at 1 user")
    text = vs.table(v)
    assert "Schedule verified: [[1, 7, 4], [8, 8, 0]]" in text and "before: adaptive loses" in text


def test_a_sweep_without_an_adaptive_arm_is_refused_before_any_restart(
        three: dict[str, Standin], tmp_path: Path, capsys: pytest.CaptureFixture[str],
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
