"""The Race page per arm without a browser (issue 23): a race of several arms as panes, headlines,
badges, the race chart's lines and colours, the frames and the order the page defaults to; one arm
stays exactly the race of two panes."""

from __future__ import annotations

import asyncio
from contextlib import ExitStack

import pytest

from demo import charts, palette, view
from demo.fmt import esc
from demo.live.frames import frame_for, pane_sides
from demo.live.pane_title import arm_titles, spec_title
from demo.live.request import default_order
from demo.live.session import RaceControl
from demo.live.status import final_status
from demo.live.users import users_frames
from demo.load.engine import StreamWatch, load_spec, request_from_race, run_load
from demo.race import compare_arms
from demo.results import ArmSnapshot, RaceRequest, RaceResult, RaceSnapshot, SideResult, SideSnapshot, SpecStats
from demo.server_info import ServerInfo
from demo.settings import Settings
from demo.ui.outputs import frame_updates
from harness.given_clock import Pace, given_race
from harness.standin import Standin, StandinBehavior
from tests.test_view import EVIL, sample_snapshot

ARMS = {"eagle3": 90.0, "ngram": 60.0, "draft": 36.0}  # decode tokens/s; the baseline's 30


def _side(side: str, rate: float, text: str = "abc def", chunks: dict[int, int] | None = None,
          rates: list[float] | None = None) -> SideResult:
    spec = (SpecStats(source="per_request", acceptance_rate=0.5, mean_acceptance_length=2.0, num_spec_tokens=len(rates),
                      per_position_acceptance=rates) if rates else None)
    return SideResult(side=side, url=f"http://{side}", completion_tokens=60, ttft_s=0.05, decode_tokens_per_s=rate,
                      e2e_s=60 / rate, text=text, tokens_per_chunk=chunks or {1: 60}, complete=True, spec=spec)


def sample_result(texts: dict[str, str] | None = None) -> RaceResult:
    texts = texts or {}
    arms = {n: _side("speculative", r, texts.get(n, "abc def"), {1: 10, 3: 10}, [0.9, 0.5]) for n, r in ARMS.items()}
    return compare_arms(RaceRequest(prompt="p", order="sequential"), _side("baseline", 30.0), arms)


def _arm_snapshot(name: str, tokens: int, live: float | None) -> ArmSnapshot:
    side = SideSnapshot(side="speculative", status="streaming", text="x" * tokens, completion_tokens=tokens,
                        elapsed_s=0.5, ttft_s=0.05, tokens_per_s=30.0 * (live or 1),
                        bursts=[(0.05, 1, "x"), (0.1, 2, "xx")])
    return ArmSnapshot(name=name, label="Draft <model>" if name == "draft" else None, side=side, live_speedup=live)


def _several(result: RaceResult | None = None) -> RaceSnapshot:
    arms = {n: _arm_snapshot(n, 3, r / 30.0) for n, r in ARMS.items()}
    base = SideSnapshot(side="baseline", status="streaming", text="ab", completion_tokens=2, tokens_per_s=30.0,
                        bursts=[(0.05, 1, "a"), (0.08, 1, "b")])
    first = arms["eagle3"]
    return RaceSnapshot(order="sequential", baseline=base, speculative=first.side, live_speedup=first.live_speedup,
                        arms=arms, result=result)


def test_pane_keys_keep_the_first_arms_ids() -> None:
    assert view.pane_key(0, "eagle3") == "speculative"  # #sd-pane-speculative, as with one arm
    assert view.pane_key(1, "ngram") == "ngram" and view.pane_key(2, "speculative") == "arm-speculative"
    assert list(pane_sides(_several())) == ["baseline", "speculative", "ngram", "draft"]
    assert list(pane_sides(sample_snapshot())) == ["baseline", "speculative"]


def test_an_arms_headline_live_then_final_then_na() -> None:
    snap = _several()
    live = view.arm_speedup_html("ngram", snap.arms["ngram"], None, running=True)
    assert "2.00×" in live and 'data-state="running"' in live and "data-value" not in live  # no exact live figure
    assert 'data-state="running"' in view.arm_speedup_html("ngram", None, None, running=True)
    assert 'data-state="idle"' in view.arm_speedup_html("ngram", None, None, running=False)
    result = sample_result()
    final = view.arm_speedup_html("ngram", snap.arms["ngram"], result.arms["ngram"], running=False)
    assert f'data-value="{result.arms["ngram"].speedup!r}"' in final and 'data-arm="ngram"' in final
    assert "2.00×" in final and "sd-win" in final
    slow = result.arms["draft"].model_copy(update={"speedup": 0.8})
    assert "sd-loss" in view.arm_speedup_html("draft", None, slow, running=False)
    unknown = result.arms["draft"].model_copy(update={"speedup": None, "na_reasons": {"speedup": "draft failed"}})
    na = view.arm_speedup_html("draft", None, unknown, running=False)
    assert 'data-state="na"' in na and "draft failed" in na


def test_each_arm_over_the_bound_is_flagged_in_its_own_pane() -> None:
    """Issue 52, several arms: ngram's 4x at 2.95 tokens per step is flagged in its pane's headline
    (and in the record), eagle3's fair 2x is headlined; the first arm's flag is the race's."""
    base = Pace(tokens_per_s=30)
    r = given_race(base, {"eagle3": Pace(tokens_per_s=60, chunk_sizes=(3,), speculative=True),
                          "ngram": Pace(tokens_per_s=120, chunk_sizes=(3,), speculative=True)}, 60)
    assert r.over_bound is None and r.arms["ngram"].over_bound is not None
    snap = _several(r)
    snap.arms = {n: snap.arms[n] for n in r.arms}
    frame = frame_for(snap, with_chart=False)
    assert frame.speculative is not None and frame.arms is not None
    first, ngram = frame.speculative.headline_html, frame.arms["ngram"].headline_html
    assert first is not None and ngram is not None and r.arms["ngram"].over_bound is not None
    assert 'data-state="final"' in first and "2.00×" in first and "over-bound" not in first
    assert 'data-state="over-bound"' in ngram and 'data-arm="ngram"' in ngram and ">run again<" in ngram
    assert esc(r.arms["ngram"].over_bound) in ngram and "4.00×</div>" not in ngram
    assert frame.speedup is not None and 'data-state="final"' in frame.speedup  # the first arm's, fair


def test_identical_badge_per_arm() -> None:
    result = sample_result({"ngram": "abc <b>X"})
    assert 'data-identical="true"' in view.identical_badge_html(result, arm="eagle3")
    differs = view.identical_badge_html(result, arm="ngram")
    assert 'data-identical="false"' in differs and 'data-arm="ngram"' in differs
    assert "ngram: “abc &lt;b&gt;X”" in differs and "<b>X" not in differs
    assert 'data-identical="pending"' in view.identical_badge_html(None, arm="draft")
    assert 'data-identical="pending"' in view.identical_badge_html(result, arm="missing")  # an N-user race's others
    assert "data-arm" not in view.identical_badge_html(result)  # one arm: as always


def test_a_frame_of_several_arms_has_a_pane_and_headline_each() -> None:
    frame = frame_for(_several(sample_result()), with_chart=True)
    assert frame.speculative is not None and frame.speculative.headline_html is not None
    assert 'data-arm="eagle3"' in frame.speculative.headline_html
    assert frame.arms is not None and list(frame.arms) == ["ngram", "draft"]
    draft = frame.arms["draft"]
    assert 'data-key="acceptance_rate"' in draft.tiles_html and 'data-state="final"' in (draft.headline_html or "")
    # One arm: exactly the frame of two panes, no headline in the pane.
    one = frame_for(sample_snapshot(), with_chart=False)
    assert one.arms is None and one.speculative is not None and one.speculative.headline_html is None


def test_an_arms_failure_names_it_and_is_escaped() -> None:
    snap = _several()
    snap.arms["draft"].side.status, snap.arms["draft"].side.error = "error", EVIL
    pane = view.arm_pane_view("draft", snap)
    assert "Draft &lt;model&gt; failed:" in pane.status_html and "<script>" not in pane.status_html
    assert "draft" in frame_for(snap, with_chart=False).failed


def test_frame_updates_set_every_arms_pane_and_skip_panes_the_page_lacks() -> None:
    frame = frame_for(_several(), with_chart=False)
    comps = {key: tuple(f"{key}.{part}" for part in ("status", "tiles", "text", "headline"))
             for key in ("baseline", "speculative", "ngram", "draft")}
    comps["baseline"] = comps["baseline"][:3]  # the baseline has no headline of its own
    out = frame_updates(frame, comps, "speedup", "plot")
    assert frame.arms is not None
    assert out["ngram.text"] == frame.arms["ngram"].text_html
    assert out["draft.headline"] == frame.arms["draft"].headline_html
    assert "baseline.headline" not in out
    # A replay tab that shows two panes gets those two, nothing else.
    two = frame_updates(frame, {k: comps[k][:3] for k in ("baseline", "speculative")}, "speedup", "plot")
    assert not any(str(k).startswith(("ngram", "draft")) for k in two)


def test_the_race_chart_has_a_line_per_arm_in_its_palette_colour() -> None:
    fig = charts.race_figure(_several())
    assert [t.name for t in fig.data] == ["baseline", "eagle3", "ngram", "Draft <model>"]
    assert [t.line.color for t in fig.data] == [charts.COLORS["baseline"], *palette.ARM_COLORS]
    assert palette.arm_color(0) == charts.COLORS["speculative"] and palette.arm_color(3) == palette.arm_color(0)
    one = charts.race_figure(sample_snapshot())
    assert [t.name for t in one.data] == ["baseline", "speculative"]  # one arm: as always


def test_the_result_charts_per_arm() -> None:
    result = sample_result()
    acc = charts.position_acceptance_figure(result)
    assert [t.name for t in acc.data] == list(ARMS) and acc.layout.barmode == "group"
    chunks = charts.chunk_figure(result)
    assert [t.name for t in chunks.data] == ["baseline", *ARMS]
    assert [t.marker.color for t in chunks.data][1:] == list(palette.ARM_COLORS)


def _settings(device: str = "cpu", arms: int = 3) -> Settings:
    entries = [{"name": n, "url": f"http://127.0.0.1:{9000 + i}", "method": n} for i, n in enumerate(ARMS)]
    return Settings(speculative_url="http://127.0.0.1:9000", arms=entries[:arms], server_device=device,
                    spec_method=None, spec_num_tokens=None)


@pytest.mark.parametrize(("device", "arms", "order"), [
    ("cpu", 3, "sequential"), ("cpu", 2, "sequential"), ("gpu", 3, "simultaneous"), ("cpu", 1, "simultaneous")])
def test_a_cpu_race_of_several_arms_defaults_to_sequential_and_says_why(device: str, arms: int, order: str) -> None:
    chosen, why = default_order(_settings(device, arms))
    assert chosen == order
    if order == "sequential":
        assert why is not None and f"the {arms} speculative servers" in why and "sharing the cores" in why
        assert why in view.order_html("simultaneous", why)  # said whichever order is picked
    else:
        assert why is None
    assert "sd-order-why" not in view.order_html("simultaneous")


def test_arm_titles_name_each_arm_and_its_method() -> None:
    titles = arm_titles(_settings(), None, sample_result())
    assert list(titles) == ["speculative", "ngram", "draft"]
    assert "eagle3 (eagle3, k=2)" in titles["speculative"] and "draft (draft, k=2)" in titles["draft"]
    one = Settings(speculative_url="http://127.0.0.1:9000", spec_method="ngram", spec_num_tokens=4)
    assert arm_titles(one, None, None) == {"speculative": spec_title(one, None, None)}


def test_an_arm_left_out_of_an_n_user_race_says_so() -> None:
    pane = view.arm_left_out_view("ngram", 4)
    assert "4 users race the first arm only" in pane.status_html and 'data-state="na"' in (pane.headline_html or "")


def test_the_server_panel_names_each_arm() -> None:
    infos = [ServerInfo(side="baseline", url="http://b", healthy=True),
             ServerInfo(side="speculative", url="http://e", arm="eagle3", healthy=True),
             ServerInfo(side="speculative", url="http://n", arm="ngram", healthy=True)]
    html = view.server_panel_html(infos)
    assert "<td>eagle3</td>" in html and "<td>ngram</td>" in html and "<td>baseline</td>" in html
    one = view.server_panel_html([ServerInfo(side="speculative", url="http://s", healthy=True)])
    assert "<td>speculative</td>" in one  # the pair: as always


def test_the_stream_watch_watches_every_arm_by_name() -> None:
    """The engine's observer is told each stream's server: a load step of three arms is watched on
    the baseline and every arm (not the first only), and the first arm is the record's speculative."""
    with ExitStack() as stack:
        base = stack.enter_context(Standin(StandinBehavior(tokens_per_s=400, ttft_s=0.01)))
        arms = {n: stack.enter_context(Standin(StandinBehavior(tokens_per_s=800, ttft_s=0.01, speculative=True,
                                                               chunk_sizes=[1, 2]))) for n in ARMS}
        settings = Settings(baseline_url=base.url, speculative_url=arms["eagle3"].url, save_runs=False,
                            arms=[{"name": n, "url": s.url} for n, s in arms.items()])
        req = RaceRequest(prompt="Say hi", max_tokens=12, order="simultaneous")
        spec = load_spec(settings, req, [2], "simultaneous")
        watch = StreamWatch(2, [a.name for a in spec.arm_list()])
        asyncio.run(run_load(spec, request_from_race(req), settings, observe=watch))
    assert list(watch.first_of_arms()) == list(ARMS)
    for name, meter in watch.first_of_arms().items():
        assert meter.url == arms[name].url and meter.result().completion_tokens == 12
    assert [p is not None and p.status == "done" for p in watch.progress("draft")] == [True, True]
    first = watch.first()
    assert first["speculative"].url == arms["eagle3"].url and first["baseline"].url == base.url
    assert watch.progress("speculative") == watch.progress("eagle3")


def test_n_users_with_several_arms_race_the_first_and_the_others_say_so() -> None:
    """Users > 1 races the first arm only (the load engine's pair): its headline is in the first
    arm's pane (the pair's headline is folded away), and every other arm's pane says it is left out."""
    async def drain() -> list:
        return [f async for f in users_frames(RaceRequest(prompt="Say hi", max_tokens=8), 2, settings, RaceControl())]

    with ExitStack() as stack:
        base = stack.enter_context(Standin(StandinBehavior(tokens_per_s=400, ttft_s=0.01)))
        arms = {n: stack.enter_context(Standin(StandinBehavior(tokens_per_s=800, ttft_s=0.01, speculative=True)))
                for n in ARMS}
        settings = Settings(baseline_url=base.url, speculative_url=arms["eagle3"].url, save_runs=False,
                            arms=[{"name": n, "url": s.url} for n, s in arms.items()])
        frames = asyncio.run(drain())
        assert arms["ngram"].started == 0 and arms["draft"].started == 0 and arms["eagle3"].started == 2
    drawn = [f for f in frames if f.speculative is not None]
    assert drawn and all(f.arms is not None and list(f.arms) == ["ngram", "draft"] for f in drawn)
    last = drawn[-1]
    assert last.users is not None and last.speculative is not None and last.arms is not None
    assert last.speculative.headline_html == last.speedup and 'data-users="2"' in (last.speedup or "")
    assert "2 users race the first arm only" in last.arms["draft"].status_html


def test_a_stopped_race_of_several_arms_says_every_request_was_aborted() -> None:
    stopped = sample_result().model_copy(update={"cancelled": True})
    assert "Stopped: every request was aborted" in final_status(stopped, None)
    pair = compare_arms(RaceRequest(prompt="p"), _side("baseline", 30.0), {"speculative": _side("speculative", 60.0)},
                        cancelled=True)
    assert "Stopped: both requests were aborted" in final_status(pair, None)  # one arm: as always
