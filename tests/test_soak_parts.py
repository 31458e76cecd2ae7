"""The soak test's parts that need no running booth (benchmarks/soak/): the app's booth-race
lines, memory and disk sampling on real processes, the kill schedule, and the summary's figures
and verdict from small made-up runs. The whole soak on stand-ins is tests/test_soak.py."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest

from benchmarks.soak.kills import AnswerProbe, Kill, mid_stream, plan_kills, recording_exists
from benchmarks.soak.logs import LogTail, RaceSeen, parse_booth_line, saved_path
from benchmarks.soak.memory import MB, Sample, dir_usage, group_rss_bytes, growth_mb_per_h, tree_rss_bytes
from benchmarks.soak.run import parse_args
from benchmarks.soak.summary import GROWTH_LIMIT_MB_PER_H, Sighting, summarize
from benchmarks.soak_standin import standin_args
from common.sides import Side
from common.waiting import held_within
from harness.standin import Standin

LINE = ('booth-race {"n": 3, "preset": "json_reformat", "source": "live", "outcome": "done", "speedup": 1.95, '
        '"saved": "20261130-184500-json_reformat.json", "started_at": "2026-11-30T18:44:50+00:00", '
        '"ended_at": "2026-11-30T18:45:00Z", "note": null}')
T0 = datetime(2026, 11, 30, 18, 0, 0, tzinfo=UTC)


# ---------------------------------------------------------------- booth-race lines


def test_a_booth_race_line_is_read_with_any_logging_prefix() -> None:
    for prefix in ("", "INFO:demo.ui.booth:", "2026-11-30 18:45:00,123 INFO demo.ui.booth: "):
        race = parse_booth_line(prefix + LINE + "\n")
        assert race is not None
        assert (race.n, race.preset, race.source, race.outcome, race.speedup) == (3, "json_reformat", "live", "done",
                                                                                 1.95)
        assert race.saved == "20261130-184500-json_reformat.json"
        assert race.started_at == datetime(2026, 11, 30, 18, 44, 50, tzinfo=UTC)
        assert race.ended_at == datetime(2026, 11, 30, 18, 45, 0, tzinfo=UTC)


def test_a_recording_with_nulls_and_a_naive_time_is_read_as_utc() -> None:
    race = parse_booth_line('booth-race {"n": 4, "preset": "sql", "source": "recording", "outcome": null, '
                            '"speedup": null, "saved": null, "started_at": "2026-11-30T18:45:00", '
                            '"ended_at": "2026-11-30T18:45:09", "note": "baseline down", "future_field": 1}')
    assert race is not None and race.source == "recording" and race.outcome is None and race.saved is None
    assert race.started_at.tzinfo is UTC and race.note == "baseline down"


@pytest.mark.parametrize("line", ["Running on local URL:  http://127.0.0.1:7860", "booth-race started", ""])
def test_other_lines_are_not_races(line: str) -> None:
    assert parse_booth_line(line) is None


@pytest.mark.parametrize("line", [
    'booth-race {"n": 3, "preset": "sql"',  # cut
    'booth-race {"n": 3, "preset": "sql", "source": "live"}',  # no times
    LINE.replace('"live"', '"replay"'),  # unknown source
])
def test_a_broken_booth_race_line_is_an_error_not_a_silent_skip(line: str) -> None:
    with pytest.raises(ValueError, match="unreadable booth-race line"):
        parse_booth_line(line)


def test_log_tail_returns_each_complete_line_once(tmp_path: Path) -> None:
    log = tmp_path / "app.log"
    tail = LogTail(log)
    assert tail.lines() == []  # not there yet
    log.write_text("one\ntw")
    assert tail.lines() == ["one"]
    with open(log, "a") as f:
        f.write("o\nthree\n")
    assert tail.lines() == ["two", "three"]
    assert tail.lines() == []


def test_saved_path_is_under_the_runs_dir_unless_absolute(tmp_path: Path) -> None:
    assert saved_path(tmp_path, "a.json") == tmp_path / "a.json"
    assert saved_path(tmp_path, "/x/a.json") == Path("/x/a.json")


# ---------------------------------------------------------------- memory and disk, on real processes

# Holds ~60 MB, and forks a child in its process group holding ~30 MB; prints when ready.
HOLDER = """
import os, subprocess, sys, time
block = bytearray(int(sys.argv[1]) * 1_000_000)
for i in range(0, len(block), 4096): block[i] = 1
if len(sys.argv) > 2:
    subprocess.Popen([sys.executable, __file__, sys.argv[2]])
    time.sleep(1.0)
print("ready", flush=True)
time.sleep(60)
"""


def test_rss_is_summed_over_the_group_and_the_tree_and_none_when_gone(tmp_path: Path) -> None:
    script = tmp_path / "hold.py"
    script.write_text(HOLDER)
    p = subprocess.Popen([sys.executable, str(script), "60", "30"], stdout=subprocess.PIPE, text=True,
                         start_new_session=True)
    try:
        assert p.stdout is not None and p.stdout.readline().strip() == "ready"
        own = tree_rss_bytes(p.pid)
        group = group_rss_bytes(p.pid)
        assert own is not None and group is not None
        # Both processes' blocks (60 + 30 MB) plus two interpreters, counted once each.
        assert 90 * MB < group < 200 * MB, group / MB
        assert abs(own - group) < 5 * MB, "the tree and the group are the same two processes"
    finally:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait(5)
    held_within(lambda: group_rss_bytes(p.pid) is None, 5, poll_s=0.05)  # the child is reaped by init
    assert group_rss_bytes(p.pid) is None
    assert tree_rss_bytes(p.pid) is None


def test_dir_usage_counts_files_below(tmp_path: Path) -> None:
    assert dir_usage(tmp_path / "missing") == (0, 0)
    (tmp_path / "sub").mkdir()
    (tmp_path / "a.json").write_bytes(b"x" * 1000)
    (tmp_path / "sub" / "b.json").write_bytes(b"y" * 234)
    assert dir_usage(tmp_path) == (1234, 2)


def test_growth_is_the_least_squares_slope_in_mb_per_hour() -> None:
    assert growth_mb_per_h([(0, 100 * MB), (3600, 150 * MB)]) == pytest.approx(50.0)
    # One sample a minute for 30 min, +1 MB a minute, with a spike in the middle that a first/last
    # difference would not see but that moves the fitted line only a little.
    pts = [(60.0 * i, 200 * MB + i * MB + (30 * MB if i == 15 else 0)) for i in range(31)]
    assert growth_mb_per_h(pts) == pytest.approx(60.0, abs=1.0)
    assert growth_mb_per_h([(0, 100 * MB), (60, 90 * MB)]) == pytest.approx(-600.0)
    assert growth_mb_per_h([(0, 100 * MB)]) is None
    assert growth_mb_per_h([(5, 100 * MB), (5, 120 * MB)]) is None


# ---------------------------------------------------------------- kill schedule


def test_kills_land_one_per_slot_in_order_and_repeat_with_the_seed() -> None:
    roles: list[Side] = ["speculative", "baseline"]
    plan = plan_kills(roles, 1800, random.Random(7), lead_s=120, tail_s=420)
    assert [r for r, _ in plan] == roles
    (_, a), (_, b) = plan
    assert 120 <= a < 750 <= b < 1380, plan  # slots [120, 750) and [750, 1380)
    assert plan == plan_kills(roles, 1800, random.Random(7), lead_s=120, tail_s=420)
    times = {round(t) for seed in range(40) for _, t in plan_kills(roles[:1], 1800, random.Random(seed), 120, 420)}
    assert len(times) > 30 and min(times) < 300 and max(times) > 1200, "spread over the window"
    assert plan_kills([], 1800, random.Random(1), 120, 420) == []
    # A run shorter than lead + tail: every kill at the lead time.
    assert [t for _, t in plan_kills(roles, 100, random.Random(1), 20, 100)] == [20, 20]


def race(n: int, preset: str, source: str, start_s: float, end_s: float, outcome: str | None = "done",
         speedup: float | None = 2.0, saved: str | None = "auto", saved_found: bool | None = None,
         note: str | None = None) -> RaceSeen:
    live = source == "live"
    return RaceSeen(n=n, preset=preset, source=source, outcome=outcome, speedup=speedup if live else None,
                    saved=(f"run-{n}.json" if saved == "auto" else saved) if live else None,
                    started_at=T0 + timedelta(seconds=start_s), ended_at=T0 + timedelta(seconds=end_s),
                    note=note, seen_at=T0 + timedelta(seconds=end_s + 0.5),
                    saved_found=(True if saved_found is None else saved_found) if live else None)


def test_a_recording_exists_once_a_live_race_is_done_and_saved() -> None:
    races = [race(1, "a", "live", 0, 5, outcome="error"), race(2, "b", "live", 7, 12, saved_found=False),
             race(3, "a", "recording", 14, 18)]
    assert not recording_exists(races)
    assert recording_exists([*races, race(4, "a", "live", 20, 25)])


def test_a_kill_is_mid_stream_from_the_first_token_while_half_the_answer_is_to_come() -> None:
    assert not mid_stream(None, 256), "no answer streaming"
    assert not mid_stream(0, 256), "running, no token out yet (prefill)"
    assert mid_stream(1, 256) and mid_stream(128, 256)
    assert not mid_stream(129, 256), "less than half to come"
    assert not mid_stream(10, None), "unknown preset: nothing to judge the rest by"


def test_the_probe_counts_the_answers_tokens_from_when_the_server_was_idle() -> None:
    probe = AnswerProbe("http://127.0.0.1:9")
    assert probe.observe(1, 500) is None, "running at the first look: where it began is unknown"
    assert probe.observe(0, 520) is None
    assert probe.observe(1, 520) == 0 and probe.observe(1, 561) == 41
    assert probe.observe(0, 776) is None and probe.observe(1, 790) == 14, "the next race counts from its start"
    assert AnswerProbe("http://127.0.0.1:9", timeout_s=0.5).tokens_done() is None, "nothing listens"


def test_the_probe_reads_a_stand_ins_metrics_while_it_streams(standin_factory: Callable[..., Standin]) -> None:
    s = standin_factory(tokens_per_s=40.0, ttft_s=0.05)  # 120 tokens: a 3 s answer
    probe = AnswerProbe(s.url)
    assert probe.tokens_done() is None, "idle"
    body = {"model": s.behavior.model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 120,
            "stream": True}

    def ask() -> None:
        with httpx.stream("POST", s.url + "/v1/chat/completions", json=body, timeout=30, trust_env=False) as r:
            for _ in r.iter_lines():
                pass

    t = threading.Thread(target=ask)
    t.start()
    seen: list[int] = []
    deadline = time.monotonic() + 20
    while t.is_alive() and time.monotonic() < deadline:
        done = probe.tokens_done()
        if done is not None:
            seen.append(done)
        time.sleep(0.05)
    t.join(10)
    assert seen and seen == sorted(seen), seen
    assert 1 <= max(seen) <= 120 and any(mid_stream(d, 120) for d in seen), seen
    assert probe.tokens_done() is None, "idle again"
    assert s.completed == 1


# ---------------------------------------------------------------- summary


def at(s: float) -> datetime:
    return T0 + timedelta(seconds=s)


def sample(t_s: float, app_mb: float, runs_mb: float = 1.0) -> Sample:
    return Sample(t_s=t_s, at=at(t_s), app_rss_bytes=int(app_mb * MB), supervisor_rss_bytes=int(48 * MB),
                  server_rss_bytes={"baseline": int(40 * MB), "speculative": None},
                  runs_dir_bytes=int(runs_mb * MB), runs_files=3)


def good_run() -> tuple[list[RaceSeen], list[Kill]]:
    """Live races; the speculative server killed mid-race 4 at 30 s, healthy at 45 s; two recordings
    while down; live again at 50 s."""
    races = [
        race(1, "a", "live", 0, 8, speedup=1.8),
        race(2, "b", "live", 10, 18, speedup=2.4),
        race(3, "a", "live", 20, 28, speedup=2.0),
        race(4, "b", "live", 29, 31, outcome="error", speedup=None, note="speculative: connection reset"),
        race(5, "b", "recording", 33, 40, outcome="done"),
        race(6, "a", "recording", 42, 48, outcome="done"),
        race(7, "b", "live", 50, 58, speedup=2.2),
    ]
    kill = Kill(role="speculative", planned_at_s=25, killed_at=at(30), killed_at_s=30, pid=101, tokens_done=40,
                max_tokens=256, healthy_at=at(45), new_pid=202)
    return races, [kill]


def run_summary(races: list[RaceSeen], kills: list[Kill], minutes: float = 1.0, **kw: object):
    args: dict = dict(servers="standin", seed=1, minutes_planned=minutes, started=T0, ended=at(minutes * 60),
                      races=races, unreadable_lines=0, kills=kills,
                      samples=[sample(0, 180), sample(60, 181)], markers=[], console_errors=[],
                      restarts={"baseline": 0, "speculative": 1})
    args.update(kw)
    return summarize(**args)


def test_a_good_run_passes_with_its_figures() -> None:
    races, kills = good_run()
    s = run_summary(races, kills)
    assert s.passed, s.checks
    assert (s.races, s.live, s.recording, s.none) == (7, 5, 2, 0)
    assert s.outcomes == {"live done": 4, "live error": 1, "recording done": 2}
    assert s.live_speedup_median == pytest.approx(2.1)
    assert (s.live_speedup_min, s.live_speedup_max) == (1.8, 2.4)
    k = s.kills[0]
    assert k.kill_to_healthy_s == pytest.approx(15.0) and k.kill_to_live_s == pytest.approx(20.0)
    assert k.recordings_while_down == 2 and k.live_races_after == 1 and k.healed and k.mid_race
    assert (k.tokens_done, k.max_tokens) == (40, 256)
    assert s.failed_outside_outage == [], "the race the kill cut is expected to fail"
    assert s.app_growth_mb_per_h == pytest.approx(60.0) and not s.growth_judged
    text = "\n".join(s.lines())
    assert "races: 7 (5 live, 2 recording, 0 with nothing to show)" in text
    assert "kill speculative at 30 s (mid-race): healthy after 15.0 s, live again after 20.0 s" in text
    assert "not judged: run < 20 min" in text
    assert text.splitlines()[-1] == "PASS"


def test_mid_race_is_a_race_the_kill_cut_not_where_it_was_aimed() -> None:
    races, kills = good_run()
    # Aimed mid-stream, but the answer was out before the kill landed: the race completed.
    races[3] = race(4, "b", "live", 29, 31, speedup=2.1)
    s = run_summary(races, kills)
    assert s.kills[0].mid_race is False and s.outcomes.get("live error") is None
    assert "kill speculative at 30 s (mid-stream, but the race was not cut)" in "\n".join(s.lines())
    # Killed when no live answer was streaming: the race before it ended at 28 s, the next failed
    # after it (both outside the kill).
    between = kills[0].model_copy(update={"killed_at": at(28.5), "killed_at_s": 28.5, "tokens_done": None,
                                          "max_tokens": None})
    s = run_summary(good_run()[0], [between])
    assert s.kills[0].mid_race is False
    assert "kill speculative at 28 s (between races)" in "\n".join(s.lines())
    assert run_summary(races, [Kill(role="baseline", planned_at_s=50)]).kills[0].mid_race is None, "no kill"


def test_lost_runs_fail() -> None:
    races, kills = good_run()
    races[1] = race(2, "b", "live", 10, 18, saved_found=False)  # its file is not on disk
    races[2] = race(3, "a", "live", 20, 28, outcome=None, speedup=None, saved=None)  # no result
    s = run_summary(races, kills)
    assert not s.passed and not s.checks["no lost run"]
    assert len(s.lost_runs) == 2
    assert "race 2 (b): its saved file run-2.json is missing" in s.lost_runs[0]
    assert "race 3 (a): ended without a result" in s.lost_runs[1]
    assert s.lines()[-1].startswith("FAIL: no lost run")


def test_a_kill_that_never_heals_or_never_goes_live_again_fails() -> None:
    races, kills = good_run()
    no_heal = kills[0].model_copy(update={"healthy_at": None, "note": "not healthy again within 60 s"})
    s = run_summary(races[:6], [no_heal])
    assert not s.checks["every kill done and healed"]
    assert s.kills[0].kill_to_healthy_s is None and s.kills[0].kill_to_live_s is None
    # Healthy, but no live race after it: not healed as the audience sees it.
    s = run_summary(races[:6], kills)
    assert not s.kills[0].healed and s.kills[0].kill_to_healthy_s == pytest.approx(15.0)
    # Planned but never done (the run was too short).
    s = run_summary(races, [Kill(role="baseline", planned_at_s=50, note="no time left in the run")])
    assert not s.passed and "kill baseline: not done (no time left in the run)" in s.lines()


def test_a_failure_outside_an_outage_fails_and_so_does_any_error_marker() -> None:
    races, kills = good_run()
    inside = Sighting(at=at(31), text="sd-side-error: Speculative failed: connection reset")
    s = run_summary(races, kills, markers=[inside])
    assert s.checks["no live race failed outside an outage"], "the race the kill cut may fail"
    assert not s.checks["no error marker on the page"], "but the audience must not see it"
    assert s.error_markers_during_outage == ["18:00:31 sd-side-error: Speculative failed: connection reset"]
    assert s.error_markers_outside_outage == []
    outside = Sighting(at=at(55), text="sd-side-error: Baseline failed: HTTP 500")
    races.append(race(8, "a", "live", 60, 62, outcome="error", speedup=None, note="baseline: HTTP 500"))
    s = run_summary(races, kills, minutes=1.1, markers=[outside])
    assert not s.checks["no error marker on the page"] and len(s.error_markers_outside_outage) == 1
    assert not s.checks["no live race failed outside an outage"]
    assert s.failed_outside_outage == ["race 8 (a) 18:01:00-18:01:02: baseline: HTTP 500"]


def test_console_errors_and_unreadable_lines_fail() -> None:
    races, kills = good_run()
    s = run_summary(races, kills, console_errors=[Sighting(at=at(3), text="TypeError: x is undefined")])
    assert not s.passed and s.console_errors == ["18:00:03 TypeError: x is undefined"]
    s = run_summary(races, kills, unreadable_lines=1)
    assert not s.passed and not s.checks["every booth-race line readable"]


def test_no_live_race_at_all_is_not_a_pass() -> None:
    s = run_summary([], [])
    assert not s.passed and not s.checks["live races ran"]


def test_memory_growth_is_judged_only_for_runs_of_20_minutes_or_more() -> None:
    races, kills = good_run()
    key = f"app memory growth < {GROWTH_LIMIT_MB_PER_H:g} MB/h"
    growing = [sample(60 * i, 180 + i) for i in range(31)]  # +60 MB/h
    s = run_summary(races, kills, minutes=30, samples=growing)
    assert s.growth_judged and not s.checks[key] and s.app_growth_mb_per_h == pytest.approx(60.0)
    assert (s.app_rss_mb_first, s.app_rss_mb_last) == (pytest.approx(180), pytest.approx(210))
    flat = [sample(60 * i, 180 + (i % 2)) for i in range(31)]
    assert run_summary(races, kills, minutes=30, samples=flat).checks[key]
    assert run_summary(races, kills, minutes=10, samples=growing[:11]).checks[key], "not judged under 20 min"


# ---------------------------------------------------------------- command lines


def test_the_standin_takes_what_it_needs_from_vllms_flags() -> None:
    base = standin_args(["--model", "default-model", "--served-model-name", "smollm2", "--host", "127.0.0.1",
                         "--port", "9000", "--dtype", "float32", "--max-model-len", "8192"])
    assert base[:8] == ["--host", "127.0.0.1", "--port", "9000", "--model", "smollm2", "--max-model-len", "8192"]
    assert "--speculative" not in base
    spec = standin_args(["--port", "9001", "--speculative-config", '{"method":"ngram"}',
                         "--per-request-spec-decode-metrics", "detailed"])
    assert "--speculative" in spec and spec[spec.index("--chunk-sizes") + 1] == "1,3,5,2"


def test_kills_flag_is_checked(capsys: pytest.CaptureFixture[str]) -> None:
    a = parse_args(["--minutes", "2", "--kills", "speculative", "--seed", "3"])
    assert a.kills == ["speculative"] and a.seed == 3 and a.servers == "cpu"
    assert parse_args(["--minutes", "2", "--kills", ""]).kills == []
    for bad in (["--minutes", "2", "--kills", "draft"], ["--minutes", "2", "--kills", "baseline,baseline"],
                ["--minutes", "0"]):
        with pytest.raises(SystemExit):
            parse_args(bad)
    assert "--kills takes baseline and/or speculative" in capsys.readouterr().err
