"""The one latency target (SLO) every measurement is judged against.

The evaluator's capacity point (demo/sweep/capacity.py), the load sweep's "within the SLO" users,
the rate sweep's goodput and capacity (demo/load/rate.py, rate_summary.py) and the k schedule's
bands (demo/sweep/schedule.py) all take an ``Slo`` and ask it ``check``:

- a bound per figure (TTFT, ITL, end-to-end latency), each at its percentile (p95 unless said):
  the figure's percentile must be at most ``ms`` milliseconds;
- a floor on each user's decode speed (``min_user_tokens_per_s``), what a band's k must keep;
- a figure the caller did not measure (at that percentile) makes the verdict unknown, never met.

Files written before the one model (results.json's ``{"ttft_ms", "itl_ms"}``, a schedule's
``{"max_itl_p95_ms"}``) still load: those keys are read as bounds at p95.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any, Literal

from pydantic import BaseModel, Field, model_validator

from demo.errors import BadInput

SloFigure = Literal["ttft", "itl", "e2e"]
SLO_FIGURES: tuple[SloFigure, ...] = ("ttft", "itl", "e2e")
FIGURE_NAMES: dict[SloFigure, str] = {"ttft": "TTFT", "itl": "ITL", "e2e": "end-to-end latency"}
# A figure's value in seconds at a percentile, as the caller measured it; None: not measured there.
FigureLookup = Callable[[SloFigure, int], float | None]


class SloBound(BaseModel):
    """One latency bound: the figure's ``percentile`` must be at most ``ms`` milliseconds."""

    ms: float = Field(gt=0)
    percentile: float = Field(95.0, gt=0, lt=100)

    @model_validator(mode="after")
    def _whole(self) -> SloBound:
        if self.percentile != int(self.percentile):
            raise ValueError(f"an SLO percentile is a whole percent (1 to 99), got {self.percentile:g}")
        return self

    def text(self, figure: SloFigure) -> str:
        """'ITL p99 ≤ 120 ms'."""
        return f"{FIGURE_NAMES[figure]} p{self.percentile:g} ≤ {self.ms:g} ms"


class SloCheck(BaseModel):
    """What ``Slo.check`` found: met (True), missed (False) or unknown (None), and why."""

    meets: bool | None
    misses: list[str] = Field(default_factory=list)  # e.g. "TTFT p95 812 ms > 500 ms"
    unknown: list[str] = Field(default_factory=list)  # e.g. "ITL p99 was not measured"
    # The worst bound's measured/allowed ratio (<= 1 meets every bound; the speed floor counts as
    # floor/speed); inf when a bounded figure is unknown.
    worst_ratio: float = 0.0


class Slo(BaseModel):
    """The latency target: TTFT, ITL and end-to-end bounds, each at its percentile, and a floor on each
    user's decode speed. None leaves that figure free; nothing given is no target at all."""

    ttft: SloBound | None = None
    itl: SloBound | None = None
    e2e: SloBound | None = None
    min_user_tokens_per_s: float | None = Field(None, gt=0)  # each user's decode tokens/s, at least

    @model_validator(mode="before")
    @classmethod
    def _older_keys(cls, data: Any) -> Any:
        """An older file's keys, read as bounds at p95 (results.json's capacity target, a schedule's)."""
        if not isinstance(data, dict):
            return data
        data = dict(data)
        for old, figure in (("ttft_ms", "ttft"), ("itl_ms", "itl"), ("max_itl_p95_ms", "itl")):
            ms = data.pop(old, None)
            if ms is not None and data.get(figure) is None:
                data[figure] = {"ms": ms}
        return data

    @classmethod
    def of_ms(cls, ttft_ms: float | None = None, itl_ms: float | None = None, e2e_ms: float | None = None, *,
              percentile: float = 95.0, min_user_tokens_per_s: float | None = None) -> Slo:
        """Bounds in ms at one percentile (None leaves the figure free; 0 or below is refused, as by the
        models), as the flags give them."""
        bounds = {f: SloBound(ms=ms, percentile=percentile)
                  for f, ms in (("ttft", ttft_ms), ("itl", itl_ms), ("e2e", e2e_ms)) if ms is not None}
        return cls(**bounds, min_user_tokens_per_s=min_user_tokens_per_s)

    @property
    def given(self) -> bool:
        """Whether a target is set at all."""
        return bool(self.bounds()) or self.min_user_tokens_per_s is not None

    def bounds(self) -> dict[SloFigure, SloBound]:
        """The latency bounds given, by figure."""
        return {f: b for f in SLO_FIGURES if (b := getattr(self, f)) is not None}

    def decode_part(self) -> Slo:
        """The bounds speculation's k changes (ITL and the per-user speed; not TTFT, which is prefill):
        what a band of the k schedule is held to."""
        return Slo(itl=self.itl, min_user_tokens_per_s=self.min_user_tokens_per_s)

    def describe(self) -> str:
        """'TTFT p95 ≤ 500 ms and ITL p99 ≤ 120 ms and per-user decode ≥ 20 tokens/s'; 'no SLO' without one."""
        parts = [b.text(f) for f, b in self.bounds().items()]
        if self.min_user_tokens_per_s is not None:
            parts.append(f"per-user decode ≥ {self.min_user_tokens_per_s:g} tokens/s")
        return " and ".join(parts) or "no SLO"

    def check(self, figure_s: FigureLookup, user_tokens_per_s: float | None = None) -> SloCheck:
        """Every bound against the caller's figures (``figure_s(figure, percentile)``, seconds) and the
        speed floor against ``user_tokens_per_s``. Missed when any is over; else unknown when any is
        not measured; else met. Without a target: unknown."""
        if not self.given:
            return SloCheck(meets=None, unknown=["no SLO given"], worst_ratio=math.inf)
        out = SloCheck(meets=None)
        for f, b in self.bounds().items():
            name = f"{FIGURE_NAMES[f]} p{b.percentile:g}"
            value = figure_s(f, int(b.percentile))
            if value is None:
                out.unknown.append(f"{name} was not measured")
                out.worst_ratio = math.inf
                continue
            out.worst_ratio = max(out.worst_ratio, value * 1000 / b.ms)
            if value * 1000 > b.ms:
                out.misses.append(f"{name} {value * 1000:,.0f} ms > {b.ms:g} ms")
        floor = self.min_user_tokens_per_s
        if floor is not None:
            if user_tokens_per_s is None:
                out.unknown.append("per-user decode tokens/s was not measured")
                out.worst_ratio = math.inf
            else:
                out.worst_ratio = max(out.worst_ratio, floor / user_tokens_per_s if user_tokens_per_s else math.inf)
                if user_tokens_per_s < floor:
                    out.misses.append(f"per-user decode {user_tokens_per_s:,.1f} tokens/s < {floor:g}")
        out.meets = False if out.misses else None if out.unknown else True
        return out


def slo_of_bounds(slo_ms: Mapping[str, float | None] | None = None,
                  slo_percentile: Mapping[str, float] | None = None, *,
                  min_user_tokens_per_s: float | None = None) -> Slo:
    """The SLO from each figure's bound in ms and its percentile (by figure: "ttft", "itl", "e2e"; default
    p95), as the flags give them; BadInput (one line, naming the input as the CLI's flag without dashes) on
    a bound of 0 or below or a percentile that is not a whole one from 1 to 99."""
    bounds: dict[str, SloBound] = {}
    for name in SLO_FIGURES:
        p = (slo_percentile or {}).get(name, 95.0)
        if not 0 < p < 100 or p != int(p):
            raise BadInput.about(f"slo-{name}-p", f"must be a whole percentile from 1 to 99, got {p:g}")
        ms = (slo_ms or {}).get(name)
        if ms is not None:
            if not ms > 0:
                raise BadInput.about(f"slo-{name}-ms", f"must be above 0, got {ms:g}")
            bounds[name] = SloBound(ms=ms, percentile=p)
    return Slo(**bounds, min_user_tokens_per_s=min_user_tokens_per_s)
