"""A load sweep's files (``python -m demo load --out DIR`` and the page's Download button):
load.json (every figure), load.html (one self-contained page: the two curves, the crossover's
sentence and a table of every step; no network, Plotly is inline as in the evaluator's report)
and load.png (both curves on one 16:9 slide, demo/load/png.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, NamedTuple

from markupsafe import Markup

from common.files import atomic_write
from demo.charts import figures_html
from demo.fmt import fmt_number, fmt_percent, fmt_speedup, or_na
from demo.load.engine import SIDES, LoadResult, LoadSide
from demo.load.figures import SLIDE_HEIGHT_PX, SLIDE_WIDTH_PX, per_user_figure, slide_figure, total_figure
from demo.load.png import PngUnavailable, figure_png
from demo.load.rate_page import rate_html, rate_slide
from demo.pages import render, report_assets
from demo.sweep.tables import schedule_html

FILES = ("load.json", "load.html", "load.png")


class Written(NamedTuple):
    """The files written, and why the PNG is not among them when it is not (one line)."""

    paths: list[Path]
    png_note: str | None = None


def write_files(result: LoadResult, out: Path, png: bool = True) -> Written:
    """load.json and load.html into ``out`` (created), and load.png with ``png`` (seconds: a
    browser renders it). Each file is written whole. OSError when ``out`` cannot be written; a
    PNG that cannot be made here is a note, never a failure."""
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / FILES[0], out / FILES[1]]
    atomic_write(paths[0], result.model_dump_json(indent=1))
    atomic_write(paths[1], rate_html(result) if result.spec.rate is not None else load_html(result))
    if not png:
        return Written(paths)
    try:
        slide = (rate_slide(result, SLIDE_WIDTH_PX, SLIDE_HEIGHT_PX) if result.spec.rate is not None
                 else slide_figure(result))
        data = figure_png(slide, SLIDE_WIDTH_PX, SLIDE_HEIGHT_PX)
    except PngUnavailable as e:
        return Written(paths, str(e))
    atomic_write(out / FILES[2], data)
    return Written([*paths, out / FILES[2]])


def _values(s: LoadSide) -> list[str]:
    """A server's figures in a step, as the table shows them ("n/a" when unknown)."""
    ms = [None if v is None else v * 1000 for v in (s.ttft_p95_s, s.itl_p95_s)]
    values = [fmt_number(s.per_user_decode_tokens_per_s, 1), fmt_number(s.per_user_decode_tokens_per_s_min, 1),
              fmt_number(s.per_user_decode_tokens_per_s_max, 1), fmt_number(s.output_tokens_per_s, 1),
              fmt_number(ms[0], 0), fmt_number(ms[1], 0), fmt_number(s.num_requests_waiting_peak, 0),
              fmt_percent(s.kv_cache_usage_peak_perc, 0), fmt_number(s.num_preemptions, 0)]
    return [or_na(v) for v in values]


STEP_HEAD = ("users", "side", "per-user decode tok/s", "slowest", "fastest", "total output tok/s", "TTFT p95 ms",
             "ITL p95 ms", "queue peak", "KV-cache peak", "preemptions", "speedup (per-user)", "throughput ratio")


def step_rows(result: LoadResult) -> list[dict[str, Any]]:
    """The steps table's data: per step its user count, a row per server (its name and figures; with several
    arms each arm's own speedup and throughput ratio, none on the baseline's), the pair's ratios and the errors."""
    steps: list[dict[str, Any]] = []
    for step in result.steps:
        several = len(step.arms) > 1
        rows = ([{"name": "baseline", "figures": _values(step.baseline), "speedup": "", "throughput_ratio": ""}]
                + [{"name": n, "figures": _values(a.side), "speedup": or_na(fmt_speedup(a.speedup)),
                    "throughput_ratio": or_na(fmt_speedup(a.throughput_ratio))} for n, a in step.arms.items()]
                if several else [{"name": side, "figures": _values(getattr(step, side))} for side in SIDES])
        steps.append({"users": step.users, "several": several, "rows": rows, "errors": step.errors,
                      "speedup": or_na(fmt_speedup(step.speedup)),
                      "throughput_ratio": or_na(fmt_speedup(step.throughput_ratio))})
    return steps


def load_html(result: LoadResult) -> str:
    """The saved load sweep's page (load.html; templates/load.html.j2): figures, steps table, crossover and
    settings, self-contained. Every value is autoescaped; the Markup ones are each safe for the reason given."""
    sp = result.spec
    slo_users: list[tuple[str, int | None]] | None = None
    if sp.slo is not None and result.slo_users:  # with several arms, each arm by name (not "speculative")
        slo_users = ([(who, n) for who, n in result.slo_users.items() if who != "speculative"]
                     if len(result.crossovers) > 1 else [(side, result.slo_users.get(side)) for side in SIDES])
    return render(
        "load.html.j2", **report_assets(), sp=sp, when=result.started_at.strftime("%Y-%m-%d %H:%M UTC"),
        order=("sequential A/B: baseline batch, then speculative, each server alone" if sp.order == "sequential"
               else "simultaneous: both batches at once (they compete)"),
        crossover=result.crossover, crossovers=result.crossovers, arms_text=result.arms_text,
        interrupted=result.interrupted, slo_users=slo_users,
        # Plotly's own divs and JSON; schedule_html escapes every value it shows (demo.fmt.esc).
        figs=Markup(figures_html((("per-user", per_user_figure(result)), ("total", total_figure(result))))),
        schedule=Markup(schedule_html(result.recommendation)),
        head=STEP_HEAD, steps=step_rows(result))
