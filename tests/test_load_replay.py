"""Trace replay (``python -m demo load --workload FILE --replay [--speed X]``): a workload's requests sent
at their own arrival times through the one open-loop engine (demo/load/rate.py), the loader keeping each
request's arrival time (``WorkloadRequest.arrival_s``).

The truth is what the stand-ins recorded themselves: when each request arrived (``Truth.t_request``) and
what it asked (``Truth.prompt``), compared with the trace's own gaps.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from demo.cli import main
from demo.load.arrivals import MAX_ARRIVAL_WINDOW_S, replay_of
from demo.load.engine import LoadResult
from demo.load.rate_models import RateStep
from demo.workload import load_workload
from harness.margins import inside
from harness.standin import Standin, StandinBehavior
from harness.standin_process import StandinProcess, process_pair

FIX = Path(__file__).parent / "fixtures" / "workloads"
# The trace's arrival times in ms (AIPerf's timestamp), not from 0: the replay keeps the gaps, not the clock.
TIMES_MS: list[float] = [5000, 5400, 5550, 6200, 6300, 6900, 7000]
TOLERANCE_S = 0.05  # the issue's bound on a gap kept at --speed 1


@pytest.fixture(autouse=True)
def _no_saved_runs(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SPECDEMO_RUNS_DIR", str(tmp_path / "runs"))
    monkeypatch.setenv("SPECDEMO_SAVE_RUNS", "false")


def trace(path: Path, times_ms: list[float] = TIMES_MS) -> Path:
    """An AIPerf trace with messages: request i says "request i" and asks for 4 + i tokens."""
    path.write_text("".join(json.dumps({"timestamp": t, "messages": [{"role": "user", "content": f"request {i}"}],
                                        "output_length": 4 + i}) + "\n" for i, t in enumerate(times_ms)))
    return path


def replay(base: Standin | StandinProcess, spec: Standin | StandinProcess, path: Path, *flags: str) -> None:
    assert main(["load", "--baseline-url", base.url, "--speculative-url", spec.url, "--workload", str(path),
                 "--replay", "--drain-s", "5", "--json", "--no-progress", *flags]) == 0


@pytest.mark.parametrize("speed", [1.0, 2.0])
def test_replay_keeps_the_traces_gaps_over_the_speed_on_every_server(speed: float, tmp_path: Path, capsys) -> None:
    path = trace(tmp_path / "trace.jsonl")
    # The stand-ins in their own processes: the replay's sender keeps the event loop of this process to
    # itself (in-process stand-in threads took the GIL from it on a busy machine: a gap 124 ms late).
    behavior = StandinBehavior(tokens_per_s=400, ttft_s=0.01)
    with process_pair(behavior, behavior) as (base, spec):
        replay(base, spec, path, "--speed", f"{speed:g}")
        out = json.loads(capsys.readouterr().out)
        truths = {"baseline": base.truth(), "speculative": spec.truth()}
    assert out["rate"]["replay"]["speed"] == speed and out["rate"]["replay"]["file"] == "trace.jsonl"
    [step] = [RateStep.model_validate(s) for s in out["rate_steps"]]
    assert step.label == f"replay of trace.jsonl at speed {speed:g}"
    wanted = [(t - TIMES_MS[0]) / 1000 / speed for t in TIMES_MS]
    assert step.schedule.offsets_s == pytest.approx(wanted)  # the one schedule, sent to every server
    for side in step.servers():
        tr = truths[side.name]
        assert side.sent == side.finished == len(TIMES_MS) == len(tr) and side.accounted
        # Each request in the trace's order, with its own length (not one request repeated).
        assert [json.loads(t.prompt)[0]["content"] for t in tr] == [f"request {i}" for i in range(len(TIMES_MS))]
        assert [t.completion_tokens for t in tr] == [4 + i for i in range(len(TIMES_MS))]
        # The gaps the server saw, against the trace's gaps over the speed.
        seen = [b.t_request - a.t_request for a, b in zip(tr, tr[1:], strict=False)]
        gaps = [b - a for a, b in zip(wanted, wanted[1:], strict=False)]
        off = [abs(s - g) for s, g in zip(seen, gaps, strict=True)]
        assert all([inside(o, TOLERANCE_S, f"gap {i + 1}, {side.name}, speed {speed:g}") for i, o in enumerate(off)]), (
            side.name, speed, off)
        # From the first arrival on, each request arrived at its offset (the gaps do not drift).
        drift = [abs((t.t_request - tr[0].t_request) - o) for t, o in zip(tr, wanted, strict=True)]
        assert all([inside(d, TOLERANCE_S, f"arrival {i}, {side.name}, speed {speed:g}")
                    for i, d in enumerate(drift)]), (side.name, speed, drift)
    # At speed 2 the trace's 2 s arrive in 1 s: the gaps halved, as the stand-ins recorded them.
    span = truths["baseline"][-1].t_request - truths["baseline"][0].t_request
    assert inside(span - 2.0 / speed, TOLERANCE_S, f"the trace's span, speed {speed:g}")


def test_the_table_and_load_json_are_labelled_with_the_replay(tmp_path: Path, capsys) -> None:
    path = trace(tmp_path / "agents.jsonl", [0, 200, 300])
    with Standin.pair(StandinBehavior(tokens_per_s=400, ttft_s=0.01)) as (base, spec):
        assert main(["load", "--baseline-url", base.url, "--speculative-url", spec.url, "--workload", str(path),
                     "--replay", "--speed", "2", "--drain-s", "5", "--no-progress", "--out", str(tmp_path / "o")]) == 0
    text = capsys.readouterr().out
    assert "replay of agents.jsonl at speed 2" in text and "3 requests at the trace's own times" in text
    assert "no capacity: a replay of agents.jsonl at speed 2 is one step" in text
    saved = LoadResult.model_validate_json((tmp_path / "o" / "load.json").read_text())
    assert saved.spec.rate is not None and saved.spec.rate.replay is not None
    assert saved.spec.rate.replay.trace_offsets_s == pytest.approx([0, 0.2, 0.3])
    assert saved.rate_steps[0].label == "replay of agents.jsonl at speed 2"
    assert saved.rate_steps[0].schedule.offsets_s == pytest.approx([0, 0.1, 0.15])
    assert "replay of agents.jsonl at speed 2" in (tmp_path / "o" / "load.html").read_text()


def test_the_loader_keeps_each_requests_arrival_time() -> None:
    def times(name: str) -> list[float | None]:
        return [r.arrival_s for r in load_workload(FIX / name, max_bytes=10**6, max_prompt_chars=10**5).requests]
    assert times("aiperf-trace.jsonl")[:2] == [0.0, 2.5]  # AIPerf's ms as seconds
    assert 1.2 in times("aiperf-single-turn.jsonl")
    assert times("litellm-payload.json") == [1764840000.0]  # LiteLLM's startTime (epoch seconds)
    assert all(t is not None for t in times("litellm-spendlogs.json"))  # ISO datetimes
    assert all(t is None for t in times("guidellm.jsonl"))  # no time in that form
    multi = load_workload(FIX / "aiperf-multi-turn.jsonl", max_bytes=10**6, max_prompt_chars=10**5)
    with pytest.raises(ValueError, match="are not replayed: a turn would have to wait for its side's answer"):
        replay_of("aiperf-multi-turn.jsonl", multi.requests)


def test_a_bad_timestamp_skips_its_line(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text('{"timestamp": "soon", "messages": [{"role": "user", "content": "a"}]}\n'
                    '{"timestamp": 10, "messages": [{"role": "user", "content": "b"}]}\n')
    w = load_workload(path, max_bytes=10**6, max_prompt_chars=10**5)
    assert [r.arrival_s for r in w.requests] == [0.01]
    assert "timestamp must be milliseconds" in str(w.issues[0])


@pytest.mark.parametrize(("lines", "flags", "words"), [
    (TIMES_MS, ["--speed", "0"], "--speed must be above 0"),
    (TIMES_MS, ["--speed", "-2"], "--speed must be above 0"),
    ([0, 500, 400], [], "the timestamps go backwards at request 3 (line 3)"),
    ([0, MAX_ARRIVAL_WINDOW_S * 1000 * 1.5], [], f"past the sweep's time bound of {MAX_ARRIVAL_WINDOW_S:g} s"),
    ([0, MAX_ARRIVAL_WINDOW_S * 1000 * 3], ["--speed", "2"], "raise --speed to at least 3"),
    (None, [], "has no arrival times (AIPerf timestamp, LiteLLM startTime): use --rate"),
    (TIMES_MS, ["--duration", "3"], "--duration is for --rate"),
    (TIMES_MS, ["--repeats", "2"], "--repeats is for --users"),
])
def test_bad_replay_input_is_one_line(lines: list[float] | None, flags: list[str], words: str, tmp_path: Path,
                                      capsys) -> None:
    path = tmp_path / "t.jsonl"
    if lines is None:
        path.write_text('{"prompt": "a"}\n{"prompt": "b"}\n')
    else:
        trace(path, lines)
    with pytest.raises(SystemExit) as e:
        main(["load", "--baseline-url", "http://127.0.0.1:9", "--speculative-url", "http://127.0.0.1:9",
              "--workload", str(path), "--replay", *flags])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip()
    assert words in err and len(err.splitlines()) == 1, err


@pytest.mark.parametrize(("flags", "words"), [
    (["--prompt", "hi", "--replay"], "--replay needs --workload FILE"),
    (["--prompt", "hi", "--rate", "1", "--duration", "2", "--speed", "2"], "--speed is for --replay"),
])
def test_replay_flags_out_of_place_are_one_line(flags: list[str], words: str, capsys) -> None:
    with pytest.raises(SystemExit) as e:
        main(["load", "--baseline-url", "http://127.0.0.1:9", "--speculative-url", "http://127.0.0.1:9", *flags])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip()
    assert words in err and len(err.splitlines()) == 1, err

