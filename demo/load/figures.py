"""Plotly figures of a load sweep: per-user decode tokens/s and total output tokens/s against
users, both sides (with several arms, a line per arm), the (first arm's) crossover shaded between
the two measured counts it lies between and labelled with the verdict's thresholds by name
(GAIN_WORTH, GAIN_NONE: demo/sweep/crossover.py).
They plot demo/load/engine.py's records and compute nothing: the page (live, after each step), --out's
load.html and the slide (load.png, both curves side by side) draw the same traces.
"""

from __future__ import annotations

import math
from typing import Any

import plotly.graph_objects as go

from demo import palette
from demo.charts import COLORS, empty_figure, layout
from demo.fmt import fmt_speedup
from demo.load.engine import SIDES, LoadResult, LoadSide

_LAYOUT = layout(margin=dict(l=70, r=20, t=90, b=60), height=420,
                 legend=dict(orientation="h", yanchor="bottom", y=1.02, xanchor="right", x=1.0))
# The slide (load.png): 16:9, both curves side by side, large type (read from the back of a room).
SLIDE_WIDTH_PX = 1600
SLIDE_HEIGHT_PX = 900
CROSSOVER_COLOR = palette.ALERT
PER_USER = ("Per-user decode speed", "per_user_decode_tokens_per_s", "decode tokens/s per user")
SUBTITLES = {"per_user_decode_tokens_per_s": "the median user; bars: the slowest to the fastest"}
TOTAL = ("Total output throughput", "output_tokens_per_s", "output tokens/s, all users")
X_TITLE = "users (streams at once per server)"


def thresholds_label(result: LoadResult) -> str:
    """The crossover's label, naming the verdict's thresholds it was read with."""
    c = result.crossover
    return (f"crossover: pays ≥ {fmt_speedup(c.gain_worth)} (GAIN_WORTH) up to {c.pays_up_to_users},<br>"
            f"loses < {fmt_speedup(c.gain_none)} (GAIN_NONE) from {c.loses_from_users}")


def _points(result: LoadResult, side: str, field: str) -> list[tuple[int, LoadSide]]:
    return [(s.users, getattr(s, side)) for s in result.steps if getattr(getattr(s, side), field) is not None]



def _series(result: LoadResult, field: str) -> list[tuple[str, str, list[tuple[int, LoadSide]], dict[int, Any]]]:
    """(name, colour, [(users, figures)], {users: per-user speedup}) per line: the baseline and the
    speculative side, or the baseline and each arm."""
    names = list(dict.fromkeys(n for s in result.steps for n in s.arms))
    if len(names) <= 1:
        return [(side, COLORS[side], _points(result, side, field),
                 {s.users: s.speedup for s in result.steps} if side == "speculative" else {}) for side in SIDES]
    return [("baseline", COLORS["baseline"], _points(result, "baseline", field), {})] + [
        (n, palette.arm_color(i),
         [(s.users, s.arms[n].side) for s in result.steps
          if n in s.arms and getattr(s.arms[n].side, field) is not None],
         {s.users: s.arms[n].speedup for s in result.steps if n in s.arms}) for i, n in enumerate(names)]


# Where each labelled line puts its speedups: the first above its points, the next below, and so
# on, so that two arms with close figures do not print their labels over each other.
LABEL_POSITIONS = ("top center", "bottom center")


def _traces(result: LoadResult, field: str, axes: str = "", legend: bool = True) -> list[go.Scatter]:
    traces = []
    labelled = 0
    for side, color, pts, by_users in _series(result, field):
        xs, figs = [u for u, _ in pts], [f for _, f in pts]
        ys = [getattr(f, field) for f in figs]
        extra: dict[str, Any] = {}
        if field == "per_user_decode_tokens_per_s":  # the slowest and fastest user around the median
            highs = [f.per_user_decode_tokens_per_s_max or y for f, y in zip(figs, ys, strict=True)]
            lows = [f.per_user_decode_tokens_per_s_min or y for f, y in zip(figs, ys, strict=True)]
            extra["error_y"] = dict(type="data", symmetric=False, array=[h - y for h, y in zip(highs, ys, strict=True)],
                                    arrayminus=[y - lo for lo, y in zip(lows, ys, strict=True)])
            if by_users:  # each step's per-user speedup beside its point
                extra.update(mode="lines+markers+text", textposition=LABEL_POSITIONS[labelled % len(LABEL_POSITIONS)],
                             cliponaxis=False, text=[fmt_speedup(by_users.get(u)) or "" for u in xs])
                labelled += 1
        if axes:
            extra.update(xaxis=f"x{axes}", yaxis=f"y{axes}")
        traces.append(go.Scatter(x=xs, y=ys, name=side, **{"mode": "lines+markers", **extra},
                                 line=dict(color=color, width=4), marker=dict(size=10),
                                 showlegend=legend, legendgroup=side))
    return traces


def _crossover_marks(result: LoadResult, axes: str = "", label: bool = True) -> tuple[list[dict], list[dict]]:
    """The shaded band between the last paying and the first losing count, and its label."""
    c = result.crossover
    if c.pays_up_to_users is None or c.loses_from_users is None:
        return [], []
    xref, yref = f"x{axes}", (f"y{axes} domain" if axes else "paper")
    shapes = [dict(type="rect", xref=xref, yref=yref, x0=c.pays_up_to_users, x1=c.loses_from_users, y0=0, y1=1,
                   fillcolor=CROSSOVER_COLOR, opacity=0.12, line_width=0, layer="below")]
    # a log axis places annotations by log10 (shapes by value)
    mid = math.log10((c.pays_up_to_users * c.loses_from_users) ** 0.5)
    # at the foot of the band, inside the plot: clear of the title, the legend and the points' labels
    notes = [dict(text=thresholds_label(result) if label else "crossover", showarrow=False, xref=xref, yref=yref,
                  x=mid, y=0.02, yanchor="bottom", font=dict(color=CROSSOVER_COLOR),
                  bgcolor=palette.rgba(palette.BG, 0.75))]
    return shapes, notes


def _x_axis(result: LoadResult, **extra: Any) -> dict[str, Any]:
    return dict(title=dict(text=X_TITLE), type="log", tickvals=[s.users for s in result.steps],
                ticktext=[str(s.users) for s in result.steps], **extra)


def _curve(result: LoadResult | None, title: str, field: str, y_title: str) -> go.Figure:
    if result is None or not result.steps:
        return empty_figure(title, "each step's point appears here as it ends", _LAYOUT)
    if not any(_points(result, side, field) for side in SIDES):
        return empty_figure(title, "n/a: no step measured this figure", _LAYOUT)
    shapes, notes = _crossover_marks(result, label=field == "per_user_decode_tokens_per_s")
    return go.Figure(data=_traces(result, field), layout=dict(
        # left-aligned: clear of the legend, top right, on a half-width chart
        _LAYOUT, title=dict(text=title, x=0.01, xanchor="left", subtitle=dict(text=SUBTITLES.get(field, ""))),
        shapes=shapes, annotations=notes,
        xaxis=_x_axis(result),
        yaxis=dict(title=dict(text=y_title), rangemode="tozero")))


def per_user_figure(result: LoadResult | None) -> go.Figure:
    """None: the empty chart, before a sweep."""
    return _curve(result, *PER_USER)


def total_figure(result: LoadResult | None) -> go.Figure:
    """Total output tokens/s per users count, one curve per server; a placeholder figure before any step."""
    return _curve(result, *TOTAL)


def slide_figure(result: LoadResult) -> go.Figure:
    """Both curves side by side on one 16:9 figure, the crossover sentence as its title (load.png)."""
    traces = [*_traces(result, PER_USER[1]), *_traces(result, TOTAL[1], axes="2", legend=False)]
    shapes, notes = _crossover_marks(result)
    shapes2, notes2 = _crossover_marks(result, axes="2", label=False)
    titles = [dict(text=t, showarrow=False, xref=f"x{a} domain", yref="paper", x=0.5, y=1.0, yshift=60,
                   font=dict(size=20)) for t, a in ((PER_USER[0], ""), (TOTAL[0], "2"))]
    sentence = result.crossover.text or "no step measured yet"
    return go.Figure(data=traces, layout=dict(
        layout(margin=dict(l=80, r=30, t=180, b=80), width=SLIDE_WIDTH_PX, height=SLIDE_HEIGHT_PX,
               font=dict(size=18), legend=dict(orientation="h", yanchor="bottom", y=-0.2, xanchor="center", x=0.5)),
        title=dict(text=f"{result.spec.workload}: {sentence[0].upper() + sentence[1:]}", x=0.5,
                   font=dict(size=22)),
        shapes=shapes + shapes2, annotations=notes + notes2 + titles,
        xaxis=_x_axis(result, domain=[0.0, 0.46]), xaxis2=_x_axis(result, domain=[0.54, 1.0], anchor="y2"),
        yaxis=dict(title=dict(text=PER_USER[2]), rangemode="tozero"),
        yaxis2=dict(title=dict(text=TOTAL[2]), rangemode="tozero", anchor="x2")))
