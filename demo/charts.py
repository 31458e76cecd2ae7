"""Plotly figures from snapshots and results: the race over time, acceptance by draft
position, and tokens per chunk. Figures only plot figures the measurement core made;
the one transformation here is a running sum of the per-chunk token counts for the
tokens-over-time line.
"""

from __future__ import annotations

from collections.abc import Iterable
from itertools import accumulate

import plotly.graph_objects as go
import plotly.io as pio

from demo import palette
from demo.fmt import fmt_percent
from demo.results import SIDES, RaceResult, RaceSnapshot, SideSnapshot

COLORS = {"baseline": palette.BASELINE, "speculative": palette.ACCENT}
FONT = dict(size=16, color=palette.TEXT)
# A small dark template of our own: "plotly_dark" is large, and copying it into every figure
# made each live redraw of the race chart cost twice the CPU.
_AXIS = dict(gridcolor=palette.GRID, zerolinecolor=palette.AXIS, linecolor=palette.AXIS)
DARK = go.layout.Template(layout=dict(
    font=dict(color=palette.TEXT), paper_bgcolor=palette.BG, plot_bgcolor=palette.SURFACE,
    xaxis=_AXIS, yaxis=_AXIS, colorway=[palette.ACCENT, palette.BLUE, palette.GREEN, palette.ALERT, palette.VIOLET],
))
_LAYOUT = dict(
    template=DARK,
    font=FONT,
    margin=dict(l=60, r=20, t=50, b=50),
    height=320,
    legend=dict(orientation="h", yanchor="bottom", y=1.0, xanchor="right", x=1.0),
)


def layout(**overrides: object) -> dict[str, object]:
    """The page's figure layout, with some keys replaced (the report uses taller figures)."""
    return {**_LAYOUT, **overrides}


def empty_figure(title: str, message: str, fig_layout: dict[str, object] | None = None) -> go.Figure:
    """A figure with no data yet: the title and a line saying what will appear."""
    hidden = dict(visible=False)
    return _figure([], dict(
        fig_layout or _LAYOUT, title=dict(text=title), xaxis=hidden, yaxis=hidden,
        annotations=[dict(text=message, showarrow=False, font=dict(size=18, color=palette.TEXT_DIM),
                          xref="paper", yref="paper", x=0.5, y=0.5)]))


def _figure(traces: list[dict[str, object]], fig_layout: dict[str, object]) -> go.Figure:
    # One constructor call: building the same figure with add_trace and update_layout costs
    # 2-3x the CPU (the race chart, redrawn once a second: 12.9 ms against 4.8 ms at 400 points).
    return go.Figure(dict(data=traces, layout=fig_layout))


def _axes(x: str, y: str, **y_extra: object) -> dict[str, object]:
    return dict(xaxis=dict(title=dict(text=x)), yaxis=dict(title=dict(text=y), **y_extra))


def _token_line(snap: SideSnapshot) -> tuple[list[float], list[int]]:
    times = [t for t, _n, _text in snap.bursts]
    counts = list(accumulate(n for _t, n, _text in snap.bursts))
    return [0.0, *times], [0, *counts]


def race_lines(snapshot: RaceSnapshot) -> list[tuple[str, str, SideSnapshot]]:
    """(name, colour, side) of each line of the race chart: the baseline and the speculative side,
    or, in a race of several arms, the baseline and each arm (its label, palette.arm_color)."""
    if len(snapshot.arms) <= 1:
        return [(side, COLORS[side], getattr(snapshot, side)) for side in SIDES]
    return [("baseline", COLORS["baseline"], snapshot.baseline)] + [
        (arm.label or name, palette.arm_color(i), arm.side) for i, (name, arm) in enumerate(snapshot.arms.items())]


def race_figure(snapshot: RaceSnapshot | None) -> go.Figure:
    """Tokens received over time, every side: the race itself. Steps show the bursts."""
    title = "Tokens over time"
    lines = race_lines(snapshot) if snapshot is not None else []
    if snapshot is None or not any(snap.bursts for _n, _c, snap in lines):
        return empty_figure(title, "Press Start: both answers will race here")
    traces: list[dict[str, object]] = []
    for name, colour, snap in lines:
        if snap.bursts:
            x, y = _token_line(snap)
            traces.append(dict(type="scatter", x=x, y=y, name=name, mode="lines", line_shape="hv",
                               line=dict(color=colour, width=4)))
    fig_layout: dict[str, object] = dict(_LAYOUT, title=dict(text=title),
                                         **_axes("seconds since the request", "tokens"))
    if snapshot.order == "sequential":
        fig_layout["annotations"] = [dict(
            text="sequential A/B: each side timed from its own start", showarrow=False,
            xref="paper", yref="paper", x=0.0, y=1.0, xanchor="left", yanchor="bottom",
            font=dict(size=13, color=palette.TEXT_DIM))]
    return _figure(traces, fig_layout)


def position_acceptance_figure(result: RaceResult | None) -> go.Figure:
    """Per draft position: how often the server kept that drafted token."""
    title = "Acceptance by draft position"
    if result is None:
        return empty_figure(title, "After a run: how often draft token 1, 2, … was kept")
    several = len(result.arms) > 1
    arms = ([(a.label or a.name, palette.arm_color(i), a.side) for i, a in enumerate(result.arms.values())]
            if several else [("speculative", COLORS["speculative"], result.speculative)])
    bars: list[dict[str, object]] = []
    for name, colour, side in arms:
        spec = side.spec
        rates = spec.per_position_acceptance if spec else None
        if not rates:
            if several:
                continue
            reason = (spec.na_reasons.get("per_position_acceptance") if spec else None) or (
                side.na_reasons.get("spec") or "the server did not report it")
            return empty_figure(title, f"n/a ({reason})")
        bars.append(dict(type="bar", x=[str(i + 1) for i in range(len(rates))], y=[r * 100 for r in rates],
                         name=name, marker=dict(color=colour), text=[fmt_percent(r) for r in rates],
                         textposition="outside"))
    if not bars:
        return empty_figure(title, "n/a (no arm's server reported it)")
    return _figure(bars, dict(_LAYOUT, title=dict(text=title), **({"barmode": "group"} if several else {}),
                              **_axes("draft position", "accepted (%)", range=[0, 110])))


def chunk_figure(result: RaceResult | None) -> go.Figure:
    """How many tokens each streamed chunk carried: 1 for the baseline, bursts with speculation."""
    title = "Tokens per chunk"
    if result is None:
        return empty_figure(title, "After a run: how many tokens each step delivered")
    sides = ([(side, COLORS[side], getattr(result, side)) for side in SIDES] if len(result.arms) <= 1 else
             [("baseline", COLORS["baseline"], result.baseline)]
             + [(a.label or a.name, palette.arm_color(i), a.side) for i, a in enumerate(result.arms.values())])
    bars: list[dict[str, object]] = []
    for name, colour, side_result in sides:
        dist = side_result.tokens_per_chunk
        if dist:
            sizes = sorted(dist)
            bars.append(dict(type="bar", x=[str(s) for s in sizes], y=[dist[s] for s in sizes], name=name,
                             marker=dict(color=colour)))
    if not bars:
        return empty_figure(title, "n/a (no chunk carried a token count)")
    return _figure(bars, dict(_LAYOUT, title=dict(text=title), barmode="group",
                              **_axes("tokens in the chunk", "chunks")))


def figures_html(figures: Iterable[tuple[str, go.Figure]]) -> str:
    """Figures for a self-contained page (report.html, load.html), each in its ``<div class="chart">``
    with the id ``chart-KEY``; the page carries plotly.js once, in its head."""
    config = {"displaylogo": False, "responsive": True}
    return "".join('<div class="chart">' + pio.to_html(fig, full_html=False, include_plotlyjs=False,
                                                       div_id=f"chart-{key}", config=config) + "</div>"
                   for key, fig in figures)
