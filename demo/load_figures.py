"""Plotly figures of a load sweep: per-user decode tokens/s and total output tokens/s against
users, both sides, the crossover shaded between the two measured counts it lies between. They
plot demo/load.py's records and compute nothing.
"""

from __future__ import annotations

import math

import plotly.graph_objects as go

from demo import palette
from demo.charts import COLORS, empty_figure, layout
from demo.load import SIDES, LoadResult, LoadSide

_LAYOUT = layout(margin=dict(l=70, r=20, t=60, b=60), height=420,
                 legend=dict(orientation="h", yanchor="bottom", y=1.02, xanchor="right", x=1.0))


def _curve(result: LoadResult, title: str, field: str, y_title: str) -> go.Figure:
    pts: dict[str, list[tuple[int, LoadSide]]] = {
        side: [(s.users, getattr(s, side)) for s in result.steps if getattr(getattr(s, side), field) is not None]
        for side in SIDES}
    if not any(pts.values()):
        return empty_figure(title, "n/a: no step measured this figure", _LAYOUT)
    traces = []
    for side in SIDES:
        xs, figs = [u for u, _ in pts[side]], [f for _, f in pts[side]]
        ys = [getattr(f, field) for f in figs]
        extra: dict[str, object] = {}
        if field == "per_user_decode_tokens_per_s":  # the slowest and fastest user around the median
            highs = [f.per_user_decode_tokens_per_s_max or y for f, y in zip(figs, ys, strict=True)]
            lows = [f.per_user_decode_tokens_per_s_min or y for f, y in zip(figs, ys, strict=True)]
            extra["error_y"] = dict(type="data", symmetric=False, array=[h - y for h, y in zip(highs, ys, strict=True)],
                                    arrayminus=[y - lo for lo, y in zip(lows, ys, strict=True)])
        traces.append(go.Scatter(x=xs, y=ys, name=side, mode="lines+markers",
                                 line=dict(color=COLORS[side], width=4), marker=dict(size=10), **extra))
    shapes, notes = [], []
    c = result.crossover
    if c.pays_up_to_users is not None and c.loses_from_users is not None:
        shapes.append(dict(type="rect", xref="x", yref="paper", x0=c.pays_up_to_users, x1=c.loses_from_users,
                           y0=0, y1=1, fillcolor=palette.ALERT, opacity=0.12, line_width=0, layer="below"))
        notes.append(dict(text="crossover", showarrow=False, xref="x", yref="paper",
                          # a log axis places annotations by log10 (shapes by value)
                          x=math.log10((c.pays_up_to_users * c.loses_from_users) ** 0.5), y=1.0, yanchor="bottom",
                          font=dict(color=palette.ALERT)))
    return go.Figure(data=traces, layout=dict(
        _LAYOUT, title=dict(text=title), shapes=shapes, annotations=notes,
        xaxis=dict(title=dict(text="users (streams at once per server)"), type="log",
                   tickvals=[s.users for s in result.steps], ticktext=[str(s.users) for s in result.steps]),
        yaxis=dict(title=dict(text=y_title), rangemode="tozero")))


def per_user_figure(result: LoadResult) -> go.Figure:
    return _curve(result, "Per-user decode speed (median user; bars: slowest to fastest)",
                  "per_user_decode_tokens_per_s",
                  "decode tokens/s per user")


def total_figure(result: LoadResult) -> go.Figure:
    return _curve(result, "Total output throughput", "output_tokens_per_s", "output tokens/s, all users")
