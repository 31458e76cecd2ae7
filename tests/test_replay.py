"""Replay of saved races: real timing, the same figures as saved, labelled as a recording."""

from __future__ import annotations

import asyncio
import re
import time
from contextlib import ExitStack
from html import unescape
from pathlib import Path

import pytest

from demo.race import run_race
from demo.results import Message, RaceRequest, RaceResult, RaceSnapshot
from demo.runs.replay import replay_snapshots, run_label, timeline
from demo.runs.store import read_run, save_run
from demo.settings import Settings
from demo.view import recording_banner_html
from harness.ports import free_port
from harness.standin import Standin, StandinBehavior

REQ = RaceRequest(preset="json_reformat", messages=[Message(role="user", content="Reformat <b>this</b>")],
                  max_tokens=40, order="simultaneous")


def saved_race(tmp_path: Path, base_url: str | None = None) -> Path:
    base_b = StandinBehavior(tokens_per_s=100, ttft_s=0.05, pieces=[" <i>x</i>", " y"])
    spec_b = StandinBehavior(tokens_per_s=250, ttft_s=0.05, speculative=True, chunk_sizes=[3, 1, 4],
                             pieces=[" <i>x</i>", " y"])
    with Standin(base_b) as base, Standin(spec_b) as spec:
        settings = Settings(baseline_url=base_url or base.url, speculative_url=spec.url, save_runs=False)
        result = asyncio.run(run_race(REQ, settings))
    return save_run(result, tmp_path)


def play(result: RaceResult) -> list[tuple[float, RaceSnapshot]]:
    async def go() -> list[tuple[float, RaceSnapshot]]:
        t0 = time.perf_counter()
        return [(time.perf_counter() - t0, s) async for s in replay_snapshots(result)]
    return asyncio.run(go())


def test_replay_runs_at_the_recorded_timing_and_ends_on_the_saved_figures(tmp_path: Path) -> None:
    result = read_run(saved_race(tmp_path))
    frames = play(result)
    last_event = max(t for t, _s, _e in timeline(result))
    took = frames[-1][0]
    assert last_event - 0.01 <= took <= last_event + 0.3  # real timing, not instant, not slowed
    final = frames[-1][1]
    assert final.result == result  # the saved figures, not recomputed ones
    assert final.baseline.text == result.baseline.text and final.speculative.text == result.speculative.text
    assert final.speculative.completion_tokens == result.speculative.completion_tokens
    # Tokens appear over time, never ahead of the recording.
    for wall, snap in frames[:-1]:
        for side in ("baseline", "speculative"):
            arrived = sum(n for t, n, _ in getattr(snap, side).bursts)
            recorded = getattr(result, side)
            due = [e for e in recorded.events if e.t_s <= wall + 0.02 and e.completion_tokens is not None]
            assert arrived <= max((e.completion_tokens for e in due), default=0)
    mid = [s for w, s in frames if 0.2 < w < last_event - 0.1]
    assert mid and any(0 < (s.baseline.completion_tokens or 0) < 40 for s in mid)  # it streamed


def test_a_failed_side_replays_as_failed(tmp_path: Path) -> None:
    result = read_run(saved_race(tmp_path, base_url=f"http://127.0.0.1:{free_port()}"))
    assert result.baseline.error
    final = play(result)[-1][1]
    assert final.baseline.status == "error" and final.baseline.error == result.baseline.error
    assert final.speculative.status == "done"


def test_labels_say_recording_and_escape(tmp_path: Path) -> None:
    path = saved_race(tmp_path)
    result = read_run(path)
    banner = recording_banner_html(result)
    assert "RECORDING of " + result.started_at.strftime("%Y-%m-%d %H:%M:%S UTC") + ", not live" in banner
    assert run_label(path).endswith("· json_reformat · Simultaneous race")
    bad = result.model_copy(update={"preset": "<script>x</script>"})
    assert "<script>" not in recording_banner_html(bad)


@pytest.mark.parametrize("name", ["weird.json", "20261129T130049396717-x-race.json"])
def test_run_label_never_fails(name: str) -> None:
    assert run_label(Path(name))


# ---------------------------------------------------------------- a run of several arms

ARM_BEHAVIORS = {  # each arm its own speed and bursts; draft's answer differs from the baseline's
    "eagle3": StandinBehavior(tokens_per_s=300, ttft_s=0.05, speculative=True, chunk_sizes=[3, 5, 4],
                              pieces=[" <i>x</i>", " y"]),
    "ngram": StandinBehavior(tokens_per_s=200, ttft_s=0.05, speculative=True, chunk_sizes=[2, 1],
                             pieces=[" <i>x</i>", " y"]),
    "draft": StandinBehavior(tokens_per_s=150, ttft_s=0.05, speculative=True, chunk_sizes=[1, 2],
                             pieces=[" <i>x</i>", " z"]),
}


def saved_arms_race(tmp_path: Path) -> Path:
    """A real race of a baseline and three stand-in arms (demo.race), saved."""
    base_b = StandinBehavior(tokens_per_s=100, ttft_s=0.05, pieces=[" <i>x</i>", " y"])
    with ExitStack() as stack:
        base = stack.enter_context(Standin(base_b))
        arms = {n: stack.enter_context(Standin(b)) for n, b in ARM_BEHAVIORS.items()}
        settings = Settings(baseline_url=base.url, speculative_url=arms["eagle3"].url, save_runs=False,
                            arms=[{"name": n, "url": s.url, "method": n.upper()} for n, s in arms.items()])
        result = asyncio.run(run_race(REQ, settings))
    assert list(result.arms) == list(ARM_BEHAVIORS) and all(a.side.complete for a in result.arms.values())
    return save_run(result, tmp_path)


def _shown_text(html: str) -> str:
    """A pane's text as the browser shows it: the markup's tags dropped, its entities read."""
    return unescape(re.sub(r"<[^>]+>", "", html))


class TabValues:
    """What the Replay tab's handlers set, read back by component."""

    def __init__(self, components: list, values: list) -> None:
        assert len(components) == len(values)
        self.by_id = {id(c): v for c, v in zip(components, values, strict=True)}

    def __getitem__(self, component: object) -> object:
        return self.by_id[id(component)]

    def visible(self, component: object) -> bool:
        update = self[component]
        assert isinstance(update, dict) and "visible" in update, update
        return bool(update["visible"])


def _tab(tmp_path: Path):
    import gradio as gr

    from demo.ui.replay_tab import build
    with gr.Blocks():
        return build(Settings(runs_dir=tmp_path, save_runs=False))


def _played(tab, path: Path) -> TabValues:
    async def go() -> list:
        return [v async for v in tab.on_play(str(path))]
    frames = asyncio.run(go())
    assert len(frames) > 3  # it streamed, frame by frame
    return TabValues(tab.outputs, frames[-1])


def test_a_run_of_three_arms_replays_every_arm_as_saved(tmp_path: Path) -> None:
    result = read_run(saved_arms_race(tmp_path))
    final = play(result)[-1][1]
    assert list(final.arms) == list(ARM_BEHAVIORS) and final.result == result
    for name, arm in result.arms.items():
        assert final.arms[name].side.text == arm.side.text
        assert final.arms[name].side.completion_tokens == arm.side.completion_tokens


def test_the_replay_tab_draws_a_pane_per_arm_of_the_run_it_plays(tmp_path: Path) -> None:
    """The panes follow the run played, not the settings (which have no arms here): a run of three
    arms shows three arm panes, each with its answer, tiles, headline and badge as saved; a run of
    two arms hides the third; a run of one arm is the pair's two panes again."""
    arms_path = saved_arms_race(tmp_path / "three")
    result = read_run(arms_path)
    tab = _tab(tmp_path)
    assert len(tab.slots) == 3

    layout = TabValues(tab.layout_outputs, tab.on_layout(str(arms_path)))
    assert not layout.visible(tab.pair) and layout.visible(tab.arms_area)
    assert not layout.visible(tab.speedup) and not layout.visible(tab.badge)  # each arm has its own
    assert [layout.visible(s.column) for s in tab.slots] == [True, True, True]
    for slot, name in zip(tab.slots, result.arms, strict=True):  # 'eagle3 (EAGLE3, k=…)', as saved
        assert f"{name} ({name.upper()}" in str(layout[slot.title])

    shown = _played(tab, arms_path)
    assert _shown_text(str(shown[tab.arms_baseline[2]])) == result.baseline.text
    for slot, (name, arm) in zip(tab.slots, result.arms.items(), strict=True):
        assert _shown_text(str(shown[slot.text])) == arm.side.text
        assert f'data-value="{arm.side.decode_tokens_per_s!r}"' in str(shown[slot.tiles])
        headline = str(shown[slot.headline])
        assert f'data-arm="{name}"' in headline and f'data-value="{arm.speedup!r}"' in headline
        assert f'data-arm="{name}"' in str(shown[slot.badge])
    badges = [str(shown[s.badge]) for s in tab.slots]
    assert ['data-identical="true"' in b for b in badges] == [True, True, False]  # draft's answer differs
    assert result.arms["draft"].identical_text is False
    for status, tiles, text in tab.panes.values():  # the pair's panes: emptied, not a stale race
        assert shown[status] == shown[tiles] == "" and _shown_text(str(shown[text])) == ""
    assert 'data-state="done"' in str(shown[tab.status])

    # Two arms: the third slot is hidden and emptied.
    two = result.model_copy(update={"arms": dict(list(result.arms.items())[:2])})
    two_path = save_run(two, tmp_path / "two")
    layout = TabValues(tab.layout_outputs, tab.on_layout(str(two_path)))
    assert [layout.visible(s.column) for s in tab.slots] == [True, True, False]
    shown = _played(tab, two_path)
    assert _shown_text(str(shown[tab.slots[1].text])) == result.arms["ngram"].side.text
    assert shown[tab.slots[2].text] == '<div class="sd-text"></div>' and shown[tab.slots[2].tiles] == ""

    # One arm: the pair's two panes, as the replay always was.
    pair_path = saved_race(tmp_path / "pair")
    pair = read_run(pair_path)
    layout = TabValues(tab.layout_outputs, tab.on_layout(str(pair_path)))
    assert layout.visible(tab.pair) and not layout.visible(tab.arms_area)
    assert layout.visible(tab.speedup) and layout.visible(tab.badge)
    assert [layout.visible(s.column) for s in tab.slots] == [False, False, False]
    shown = _played(tab, pair_path)
    assert _shown_text(str(shown[tab.panes["speculative"][2]])) == pair.speculative.text
    assert f'data-value="{pair.speedup!r}"' in str(shown[tab.speedup])
    assert 'data-identical="true"' in str(shown[tab.badge])
    assert all(shown[s.text] == '<div class="sd-text"></div>' for s in tab.slots)


def test_the_replay_tab_keeps_the_pairs_layout_for_a_run_it_cannot_read(tmp_path: Path) -> None:
    tab = _tab(tmp_path)
    broken = tmp_path / "20261129T130049-json_reformat-simultaneous.json"
    broken.write_text("{not json")
    layout = TabValues(tab.layout_outputs, tab.on_layout(str(broken)))
    assert layout.visible(tab.pair) and not layout.visible(tab.arms_area)

    async def go() -> list:
        return [v async for v in tab.on_play(str(broken))]
    (only,) = asyncio.run(go())
    assert "cannot play it" in str(only[tab.status])
