"""Drift after launch: are a live server's acceptance, tokens per step and time per token still where
the sweep measured them?

Pure: ``live_figures`` turns two /metrics samples (the window's start and end: the servers are
never polled while they stream) into the window's figures, ``drift`` compares them with the
measured ones (demo/sweep/measured.py), one ``DriftLine`` each. A figure drifts when it is worse
than measured by more than its margin (lower acceptance or tokens per step, a longer time per
token); a better one holds. The live time per token is vLLM's
``vllm:request_time_per_output_token_seconds`` (each finished request's decode time per token),
the measured one 1 / the arm's median per-request decode tokens/s.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from demo.fmt import fmt_number
from demo.metrics import MetricsSample, spec_stats_from_delta, tpot_mean_between
from demo.sweep.measured import Measured


class DriftMargins(BaseModel):
    """How much worse than measured a figure may be and still hold (fractions of the measured figure)."""

    model_config = ConfigDict(frozen=True)

    acceptance_drop: float = Field(0.15, gt=0, lt=1)
    tokens_per_step_drop: float = Field(0.15, gt=0, lt=1)
    itl_rise: float = Field(0.25, gt=0, le=10)


class LiveFigures(BaseModel):
    """One server's figures over a window of its /metrics counters (None: see na_reasons)."""

    window_s: float
    acceptance_rate: float | None = None
    tokens_per_step: float | None = None
    time_per_output_token_s: float | None = None
    requests_finished: int = 0  # requests behind time_per_output_token_s
    na_reasons: dict[str, str] = Field(default_factory=dict)


class DriftLine(BaseModel):
    """One figure: live against measured, the change, and whether it drifted."""

    figure: str
    live: float | None
    measured: float | None
    change: float | None  # live / measured - 1
    drifted: bool
    text: str


def live_figures(before: MetricsSample, after: MetricsSample, window_s: float) -> LiveFigures:
    """The window's acceptance and tokens per step (counter deltas) and mean time per output token."""
    out = LiveFigures(window_s=window_s)
    stats = spec_stats_from_delta(before, after)
    if stats is None:
        why = "the server reports no speculative counters: not a speculative server"
        out.na_reasons.update(acceptance_rate=why, tokens_per_step=why)
    else:
        out.acceptance_rate, out.tokens_per_step = stats.acceptance_rate, stats.mean_acceptance_length
        for field, key in (("acceptance_rate", "acceptance_rate"), ("tokens_per_step", "mean_acceptance_length")):
            if key in stats.na_reasons:
                out.na_reasons[field] = stats.na_reasons[key]
    _tpot(out, before, after)
    return out


def _tpot(out: LiveFigures, before: MetricsSample, after: MetricsSample) -> None:
    out.time_per_output_token_s, out.requests_finished, why = tpot_mean_between(before, after)
    if why:
        out.na_reasons["time_per_output_token_s"] = why


def drift(m: Measured, live: LiveFigures, margins: DriftMargins | None = None) -> list[DriftLine]:
    """One line per figure: ``acceptance 0.62, measured 0.71 (-13%): drifted``, n/a with its reason."""
    mg = margins or DriftMargins()
    return [
        _line("acceptance", live.acceptance_rate, m.acceptance_rate, -mg.acceptance_drop, 2, "",
              live.na_reasons.get("acceptance_rate"), m.na_reasons.get("acceptance_rate")),
        _line("tokens per step", live.tokens_per_step, m.tokens_per_step, -mg.tokens_per_step_drop, 2, "",
              live.na_reasons.get("tokens_per_step"), m.na_reasons.get("tokens_per_step")),
        _line("time per output token", _to_ms(live.time_per_output_token_s), _to_ms(m.time_per_output_token_s),
              mg.itl_rise, 1, " ms", live.na_reasons.get("time_per_output_token_s"),
              m.na_reasons.get("time_per_output_token_s"), f" at {m.users} users"),
    ]


def _to_ms(v: float | None) -> float | None:
    return None if v is None else v * 1000


def _line(figure: str, live: float | None, measured: float | None, limit: float, digits: int, unit: str,
          live_na: str | None, measured_na: str | None, where: str = "") -> DriftLine:
    """``limit``: the largest change that holds (negative: a drop, positive: a rise)."""
    if live is None or measured is None or measured == 0:
        why = (f"live: {live_na or 'not measured'}" if live is None else
               f"measured: {measured_na or 'not measured'}" if measured is None else "measured 0: no change to take")
        return DriftLine(figure=figure, live=live, measured=measured, change=None, drifted=False,
                         text=f"{figure} n/a ({why})")
    change = live / measured - 1
    drifted = change < limit if limit < 0 else change > limit
    verdict = "drifted" if drifted else "holds"
    return DriftLine(figure=figure, live=live, measured=measured, change=change, drifted=drifted,
                     text=f"{figure} {fmt_number(live, digits, unit)}, measured {fmt_number(measured, digits, unit)}"
                          f"{where} ({change:+.0%}, margin {limit:+.0%}): {verdict}")
