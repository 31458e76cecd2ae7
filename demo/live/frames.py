"""Snapshots as Frames of display values, without Gradio: one Frame per snapshot, the race chart
redrawn at most once a CHART_INTERVAL_S (the one throttle of the live race, the Replay tab and
the booth's recordings), and the result view drawn once at the end.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterable, AsyncIterator

import plotly.graph_objects as go
from pydantic import BaseModel, ConfigDict

from demo import charts, view
from demo.agent_race import SessionResult
from demo.load.engine import UsersRace
from demo.results import SIDES, RaceResult, RaceSnapshot, SideSnapshot

# Each frame costs the browser ~30 ms of a core whatever it changes (Gradio's per-message work),
# taken on a CPU laptop from the servers being measured (docs/benchmarks.md, the page's cost).
# The race chart carries every chunk so far: redraw it once a second, live and in a replay
# alike (every 0.5 s cost the browser ~15% more CPU per race).
CHART_INTERVAL_S = 1.0


class Frame(BaseModel):
    """One update of the race area; None fields are left as they are on the page."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    run_status: str | None = None
    speedup: str | None = None
    baseline: view.PaneView | None = None
    speculative: view.PaneView | None = None  # the first arm's pane
    # A race of several arms: every arm after the first, by its pane key (view.pane_key).
    arms: dict[str, view.PaneView] | None = None
    side_status: dict[str, str] | None = None  # status lines only (the quiet-server notice), by pane key
    race_figure: go.Figure | None = None
    result: RaceResult | None = None  # set once, on the final frame (an N-user race: user 1's)
    users: UsersRace | None = None  # an N-user race's record, on its final frame (demo.live.users)
    failed: list[str] = []  # the sides whose stream failed (the booth switches to a recording)
    turns: str | None = None  # a session's per-turn strip (demo.live.agent_frames); None: not a session
    session: SessionResult | None = None  # a session's turns landed so far (demo.live.agent_frames)


class ResultView(BaseModel):
    """What the page shows of a finished race beyond the live frames: drawn once, at the end."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    badge: str
    position_acceptance_figure: go.Figure
    chunk_figure: go.Figure


def result_view(result: RaceResult | None) -> ResultView:
    """The badge and the two result charts; their empty state for None (a race starting)."""
    return ResultView(badge=view.identical_badge_html(result),
                      position_acceptance_figure=charts.position_acceptance_figure(result),
                      chunk_figure=charts.chunk_figure(result))


def pane_sides(snapshot: RaceSnapshot) -> dict[str, SideSnapshot]:
    """Every pane's side as it stands, by pane key: the baseline, the first arm ("speculative"),
    then each other arm (view.pane_key)."""
    out = {"baseline": snapshot.baseline, "speculative": snapshot.speculative}
    for i, (name, arm) in enumerate(snapshot.arms.items()):
        if i:
            out[view.pane_key(i, name)] = arm.side
    return out


def frame_for(snapshot: RaceSnapshot, with_chart: bool) -> Frame:
    """One snapshot's Frame: one arm is the race of two panes; several arms give each its own pane
    and headline (``arms``, the first arm in ``speculative``)."""
    final = snapshot.result is not None
    names = list(snapshot.arms)
    several = len(names) > 1
    return Frame(
        speedup=view.speedup_html(snapshot),
        baseline=view.pane_view("baseline", snapshot),
        speculative=view.arm_pane_view(names[0], snapshot) if several else view.pane_view("speculative", snapshot),
        arms={view.pane_key(i, n): view.arm_pane_view(n, snapshot) for i, n in enumerate(names) if i} or None,
        race_figure=charts.race_figure(snapshot) if with_chart or final else None,
        result=snapshot.result,
        failed=[s for s in SIDES if getattr(snapshot, s).status == "error"]
        + [n for i, n in enumerate(names) if i and snapshot.arms[n].side.status == "error"],
    )


class ChartThrottle:
    """Frames for successive snapshots, the race chart in one at most every CHART_INTERVAL_S
    (and always in the final one)."""

    def __init__(self) -> None:
        self.last_chart = 0.0

    def frame(self, snapshot: RaceSnapshot, now: float | None = None) -> Frame:
        """The page's frame for ``snapshot``; the chart only when CHART_INTERVAL_S has passed since the last."""
        now = time.monotonic() if now is None else now
        with_chart = now - self.last_chart >= CHART_INTERVAL_S
        if with_chart:
            self.last_chart = now
        return frame_for(snapshot, with_chart)


async def throttled_frames(snapshots: AsyncIterable[RaceSnapshot]) -> AsyncIterator[Frame]:
    """A Frame for each snapshot, the chart throttled (a replay, a booth recording)."""
    throttle = ChartThrottle()
    async for snapshot in snapshots:
        yield throttle.frame(snapshot)
