"""Booth mode without a browser: which recording is shown, how old runs are pruned, the
"live again in …" line from the supervisor's state file, and how a page's pending updates fold.
The page itself is in tests/browser/test_booth_page.py."""

from __future__ import annotations

import asyncio
import os
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from demo.fmt import esc
from demo.live.booth import VIEWER_TIMEOUT_S, BoothView, RestartWatch, Viewer
from demo.live.frames import Frame
from demo.results import RaceRequest, RaceResult, SideResult
from demo.runs.store import list_runs, newest_good_run, prune_runs, save_run
from demo.server_info import ServerInfo
from servers.state import LauncherState, ServerRecord, write_state

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def race(preset: str, minutes: int, *, good: bool = True, order: str = "simultaneous") -> RaceResult:
    def side(name: str) -> SideResult:
        return SideResult(side=name, url="http://x", text="ok", complete=good, error=None if good else "boom")
    return RaceResult.model_validate({  # a pair's shape: its one arm from ``speculative``
        "order": order, "preset": preset, "request": RaceRequest(preset=preset, order=order),
        "started_at": T0 + timedelta(minutes=minutes), "baseline": side("baseline"),
        "speculative": side("speculative")})


def saved(runs: Path, preset: str, minutes: int, **kw) -> Path:
    path = save_run(race(preset, minutes, **kw), runs)
    stamp = (T0 + timedelta(minutes=minutes)).timestamp()
    os.utime(path, (stamp, stamp))  # file times follow the race times
    return path


def test_the_recording_is_the_newest_good_race_of_that_preset_in_simultaneous_order(tmp_path: Path) -> None:
    old_good = saved(tmp_path, "json_reformat", 1)
    saved(tmp_path, "json_reformat", 2, order="sequential")
    saved(tmp_path, "json_reformat", 3, good=False)
    saved(tmp_path, "code_edit", 4)
    assert newest_good_run(tmp_path, "json_reformat") == old_good
    assert newest_good_run(tmp_path, "poetry") is None
    assert newest_good_run(tmp_path / "missing", "json_reformat") is None


def test_pruning_keeps_the_newest_by_count_and_each_presets_newest_good_run(tmp_path: Path) -> None:
    keep_good = saved(tmp_path, "poetry", 0)  # the only good poetry run: kept however old
    saved(tmp_path, "poetry", 1, good=False)
    for m in range(2, 8):
        saved(tmp_path, "json_reformat", m)
    removed = prune_runs(tmp_path, keep_count=3, keep_days=None)
    left = list_runs(tmp_path)
    assert len(removed) == 4 and keep_good in left and len(left) == 4
    assert [p.name for p in left[:3]] == [p.name for p in sorted(left, reverse=True)[:3]]
    assert not any("poetry" in p.name and p != keep_good for p in left)


def test_pruning_by_age_and_off_without_limits(tmp_path: Path) -> None:
    now = (T0 + timedelta(days=10)).timestamp()
    saved(tmp_path, "sql", 0)
    saved(tmp_path, "sql", 1)
    only_poetry = saved(tmp_path, "poetry", 2)  # old, but the only poetry recording
    fresh = saved(tmp_path, "sql", 60 * 24 * 9)  # a day old
    assert prune_runs(tmp_path, None, None, now=now) == []
    removed = prune_runs(tmp_path, None, 2.0, now=now)
    assert len(removed) == 2
    assert set(list_runs(tmp_path)) == {fresh, only_poetry}
    saved(tmp_path, "sql", 60 * 24 * 9 + 1)  # a newer good sql run: the day-old one is just old now
    assert prune_runs(tmp_path, None, 0.5, now=now) == [fresh]


def test_saving_prunes_when_asked(tmp_path: Path) -> None:
    for m in range(5):
        save_run(race("code_edit", m), tmp_path, keep_count=2)
    assert len(list_runs(tmp_path)) == 2


def _state(path: Path, **fields) -> None:
    rec = ServerRecord(role="speculative", url="http://127.0.0.1:8001", pid=1, pgid=1, start_ticks=1,
                       log_path=Path("x.log"), served_model_name="m", model="m", command=["x"],
                       started_at=T0, **fields)
    write_state(path, LauncherState(launcher_pid=1, device="cpu", servers=[rec]))


def test_live_again_is_estimated_from_the_supervisors_state(tmp_path: Path) -> None:
    state = tmp_path / "state.json"
    down = [ServerInfo(side="speculative", url="http://127.0.0.1:8001")]
    watch = RestartWatch(state)
    assert "once the speculative server answers" in watch.estimate(down)  # no state file: plain words
    _state(state, time_to_healthy_s=40.0)
    watch.remember()  # seen healthy: a start takes 40 s
    assert "once the speculative server answers" in watch.estimate(down, now=T0 + timedelta(hours=1))
    _state(state, next_restart_at=T0 + timedelta(seconds=4), restarts=1)  # killed, restart in 4 s
    assert watch.estimate(down, now=T0) == "Live again in about 44 s: the speculative server is restarting."
    _state(state, restarts=1)  # restarted at T0, not healthy yet
    assert "about 30 s" in watch.estimate(down, now=T0 + timedelta(seconds=10))
    assert "in a moment" in watch.estimate(down, now=T0 + timedelta(seconds=45))
    _state(state, held="restart cap reached (5 in the last hour); next try at 13:00:00 UTC")
    assert "not being restarted: restart cap reached" in watch.estimate(down)
    assert "checked every few seconds" in RestartWatch(None).estimate(down)


def test_a_pages_pending_updates_fold_into_one_and_a_silent_page_is_gone() -> None:
    async def go() -> None:
        v = Viewer()
        v.offer(BoothView(caption="a", banner="", frame=Frame(run_status="racing", speedup="1x")))
        v.offer(BoothView(caption="b", frame=Frame(speedup="2x")))
        got = await v.take(0.1)
        assert got is not None and got.caption == "b" and got.banner == ""
        assert got.frame is not None and got.frame.run_status == "racing" and got.frame.speedup == "2x"
        assert await v.take(0.05) is None
        v.offer(BoothView(caption="c"))
        assert not v.gone(time.monotonic())
        assert v.gone(time.monotonic() + VIEWER_TIMEOUT_S + 1)
    asyncio.run(go())


def test_a_slow_first_token_from_a_server_that_answers_health_is_not_a_stall(tmp_path: Path, monkeypatch) -> None:
    """A long prefill (tens of seconds for rag_long on a CPU) leaves a side quiet; its server still
    answers /health, so the booth keeps the live race instead of cutting to the recording."""
    import demo.live.booth
    from demo.live.booth import Booth
    from demo.presets import load_presets
    from demo.settings import ROOT, Settings
    from harness.standin import Standin, StandinBehavior

    monkeypatch.setattr(demo.live.booth, "STALL_S", 0.3)  # quiet from 2 s on (the quiet notice), checked at once
    presets, _ = load_presets(ROOT / "presets")
    with Standin(StandinBehavior(ttft_s=3.5, tokens_per_s=400)) as base, \
            Standin(StandinBehavior(speculative=True, ttft_s=3.5, tokens_per_s=800)) as spec:
        settings = Settings(baseline_url=base.url, speculative_url=spec.url, runs_dir=tmp_path, booth=True,
                            probe_timeout_s=2)
        booth = Booth(settings, presets)
        assert asyncio.run(booth._live(presets["json_reformat"])) is True
        (run,) = list_runs(tmp_path)
        assert "simultaneous" in run.name and newest_good_run(tmp_path, "json_reformat") == run

        async def nobody_answers(_settings: Settings) -> set[str]:
            return set()
        monkeypatch.setattr(demo.live.booth, "healthy_sides", nobody_answers)  # as a hung server: no /health
        assert asyncio.run(booth._live(presets["json_reformat"])) is False  # cut short for the recording
    assert newest_good_run(tmp_path, "json_reformat") == run  # the cut race is saved, never a recording


def test_the_default_rotation_is_every_preset_the_booth_suits() -> None:
    from demo.live.booth import Booth
    from demo.presets import load_presets
    from demo.settings import ROOT, Settings

    presets, _ = load_presets(ROOT / "presets")
    names = [p.name for p in Booth(Settings(booth=True), presets).rotation]
    assert "rag_long" in presets and "rag_long" not in names  # a minute of prefill on a busy CPU
    assert set(names) == {n for n, p in presets.items() if p.booth} and "json_reformat" in names
    chosen = Booth(Settings(booth=True, booth_presets=["rag_long", "nope"]), presets).rotation
    assert [p.name for p in chosen] == ["rag_long"]  # named, it is raced; an unknown name is skipped


def test_a_load_turn_ends_the_rotation_and_falls_back_to_a_recording(tmp_path: Path) -> None:
    """SPECDEMO_BOOTH_LOAD_USERS: after the rotation's presets, json_reformat swept live over those
    counts on the load panel (saved like a page's sweep); a server down: a recording instead."""
    from demo.live.booth import Booth
    from demo.presets import load_presets
    from demo.runs.store import read_load
    from demo.settings import ROOT, Settings
    from harness.standin import Standin, StandinBehavior

    presets, _ = load_presets(ROOT / "presets")
    with Standin(StandinBehavior(tokens_per_s=600, ttft_s=0.02)) as base, \
            Standin(StandinBehavior(speculative=True, tokens_per_s=1500, ttft_s=0.02, chunk_sizes=[1, 3])) as spec:
        settings = Settings(baseline_url=base.url, speculative_url=spec.url, runs_dir=tmp_path, booth=True,
                            booth_presets=["poetry"], booth_load_users="2,1", booth_pause_s=0, probe_timeout_s=2)
        booth = Booth(settings, presets)
        assert booth.load_users == [1, 2] and booth.load_preset is not None
        assert booth.load_preset.name == "json_reformat"
        viewer = Viewer()
        booth.viewers.add(viewer)

        async def turns(n: int) -> list[BoothView]:
            seen: list[BoothView] = []
            for _ in range(n):
                await booth._one_turn()
                update = await viewer.take(0.1)
                if update is not None:
                    seen.append(update)
            return seen

        race_turn, load_turn = asyncio.run(turns(2))
        assert race_turn.load is None and 'data-turn="race"' in (race_turn.caption or "")
        assert load_turn.load is not None and load_turn.load.result is not None
        assert [s.users for s in load_turn.load.result.steps] == [1, 2]
        assert all(s.status == "ok" for s in load_turn.load.result.steps)
        assert 'data-turn="load"' in (load_turn.caption or "") and "1 user, then 2 users" in (load_turn.caption or "")
        (swept,) = tmp_path.glob("*-json_reformat-load.json")
        assert read_load(swept).spec.order == "sequential"
        assert base.open_streams == spec.open_streams == 0
        assert booth._next_title() == presets["poetry"].title  # the rotation starts over

        spec.stop()  # the next load turn finds a server down: the recording of a preset that has one
        booth.turn = 1
        (down_turn,) = asyncio.run(turns(1))
        assert 'data-state="recording"' in (down_turn.caption or "")
        assert down_turn.load is None
        assert len(list(tmp_path.glob("*-load.json"))) == 1


def test_the_load_turns_users_are_a_comma_list_within_max_users(monkeypatch) -> None:
    import pytest
    from pydantic import ValidationError

    from demo.settings import Settings

    monkeypatch.setenv("SPECDEMO_BOOTH_LOAD_USERS", "8, 1")
    assert Settings().booth_load_users == [1, 8]
    monkeypatch.setenv("SPECDEMO_BOOTH_LOAD_USERS", "")
    assert Settings().booth_load_users == []
    for bad, words in (("1,x", "give user counts such as 1,8"), ("0,8", "from 1 to max_users (32), got 0"),
                       ("64", "got 64")):
        monkeypatch.setenv("SPECDEMO_BOOTH_LOAD_USERS", bad)
        with pytest.raises(ValidationError, match=words.replace("(", r"\(").replace(")", r"\)")):
            Settings()


def test_a_booth_turn_with_two_arms_races_both_one_after_another_on_cpu(tmp_path: Path) -> None:
    """Several arms (SPECDEMO_ARMS) on CPU servers: the booth races the baseline and every arm in
    sequential order, as the Race tab's default, says why in the caption, draws every arm's pane and
    badge, and saves the run with both arms; with an arm's server down, the next turn plays that
    sequential recording instead."""
    from demo import view
    from demo.live.booth import Booth
    from demo.presets import load_presets
    from demo.runs.store import read_run
    from demo.settings import ROOT, Settings
    from harness.standin import Standin, StandinBehavior

    presets, _ = load_presets(ROOT / "presets")
    with Standin(StandinBehavior(tokens_per_s=800, ttft_s=0.02)) as base, \
            Standin(StandinBehavior(speculative=True, tokens_per_s=2000, ttft_s=0.02, chunk_sizes=[2, 3])) as fast, \
            Standin(StandinBehavior(speculative=True, tokens_per_s=1200, ttft_s=0.02, chunk_sizes=[1, 2])) as slow:
        settings = Settings(baseline_url=base.url, speculative_url=fast.url, runs_dir=tmp_path, booth=True,
                            booth_presets=["json_reformat"], booth_pause_s=0, probe_timeout_s=2,
                            arms=[{"name": "eagle3", "url": fast.url}, {"name": "ngram", "url": slow.url}])
        assert settings.server_device == "cpu"  # the default
        booth = Booth(settings, presets)
        viewer = Viewer()
        booth.viewers.add(viewer)

        async def turn() -> BoothView | None:
            await booth._one_turn()
            return await viewer.take(0.1)

        live = asyncio.run(turn())
        assert base.started == fast.started == slow.started == 1  # every server raced, once
        (run,) = list_runs(tmp_path)
        result = read_run(run)
        assert result.order == "sequential" and "-sequential" in run.name
        assert list(result.arms) == ["eagle3", "ngram"] and all(a.side.complete for a in result.arms.values())
        assert live is not None and live.caption is not None and live.frame is not None
        assert 'data-state="live"' in live.caption and esc(view.cpu_arms_order_note(2)) in live.caption
        assert live.frame.arms is not None and list(live.frame.arms) == ["ngram"]  # the second arm's pane
        assert live.badges is not None and set(live.badges) == {"speculative", "ngram"}
        assert 'data-arm="ngram"' in live.badges["ngram"] and 'data-identical="true"' in live.badges["ngram"]

        # A quiet pane is a stall only when its server stops answering: every server, by pane key.
        every = {"baseline", "speculative", "ngram"}
        assert asyncio.run(booth._healthy_panes(["ngram"])) == every
        slow.stop()  # the ngram arm's server is down: the next turn is that recording
        assert asyncio.run(booth._healthy_panes(["ngram"])) == every - {"ngram"}
        assert asyncio.run(booth._healthy_panes(["speculative"])) == {"baseline", "speculative"}  # /health alone
        recorded = asyncio.run(turn())
        assert recorded is not None and recorded.caption is not None and recorded.frame is not None
        assert 'data-state="recording"' in recorded.caption
        assert recorded.banner is not None and 'data-recording="true"' in recorded.banner
        assert "once the ngram server answers" in recorded.banner  # the "live again" line names the arm
        assert recorded.frame.arms is not None and "ngram" in recorded.frame.arms
        assert recorded.badges is not None and 'data-identical="true"' in recorded.badges["ngram"]
        assert len(list_runs(tmp_path)) == 1  # a recording is never saved again


def test_the_booth_with_one_arm_races_simultaneously_and_says_no_why() -> None:
    from demo.live.booth import Booth, caption_html
    from demo.presets import load_presets
    from demo.settings import ROOT, Settings

    presets, _ = load_presets(ROOT / "presets")
    booth = Booth(Settings(booth=True), presets)
    assert booth.order == "simultaneous" and booth.order_why == "" and booth._badges(None) is None
    gpu = Booth(Settings(booth=True, server_device="gpu", arms=[{"name": "speculative", "url": "http://127.0.0.1:8001"},
                                                                 {"name": "ngram", "url": "http://x:1"}]), presets)
    assert gpu.order == "simultaneous" and gpu.order_why == ""  # GPU servers: the arms race at once
    assert "sd-booth-why" not in caption_html("live", presets["json_reformat"], "Racing both servers now")
