"""Capacity and cost from measured cells only: what each server serves within a latency target,
what a million output tokens cost there, and what speculative decoding saves.

Pure arithmetic on figures the sweep already measured; nothing is extrapolated beyond the
concurrencies that were run. ``results.json`` carries the result as ``"capacity"``
(``Capacity.model_dump()``); the report and the page print it and compute nothing of their own.

- A point is one server (side) at one concurrency: aggregate output tokens/s (all streams of a
  batch together), TTFT and ITL p50/p95.
- The SLO (demo/slo.py) bounds TTFT and/or ITL at p50 or p95 (the percentiles a point has). A side's
  capacity point is the highest measured concurrency whose point meets it; without an SLO, the point of
  highest throughput.
- Cost per million output tokens = price per GPU-hour / (output tokens/s x 3600) x 1e6.
- Saving: at each side's capacity point, speculative tokens per GPU-hour over the baseline's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pydantic import BaseModel, Field

from demo.results import SIDES, Order, Side
from demo.slo import Slo


class MeasuredPoint(BaseModel):
    """What the sweep measured for one side at one concurrency (input of ``build_capacity``)."""

    side: Side
    concurrency: int = Field(ge=1)
    output_tokens_per_s: float | None = Field(None, ge=0)  # aggregate over the batch's streams
    ttft_p50_s: float | None = None
    ttft_p95_s: float | None = None
    itl_p50_s: float | None = None
    itl_p95_s: float | None = None
    error: str | None = None  # why there are no figures (the side failed in this cell)


class CapacityPoint(BaseModel):
    """One side at one concurrency, as the capacity table shows it.

    Latencies in seconds; ``meets_slo`` None when no target is set or the figure it bounds was not measured;
    ``cost_per_million_output_tokens`` None without a GPU-hour price. ``na_reasons`` says why a figure is None."""

    side: Side
    concurrency: int
    output_tokens_per_s: float | None = None
    ttft_p50_s: float | None = None
    ttft_p95_s: float | None = None
    itl_p50_s: float | None = None
    itl_p95_s: float | None = None
    meets_slo: bool | None = None  # None: no SLO given, or the figure it bounds was not measured
    slo_misses: list[str] = Field(default_factory=list)  # e.g. "TTFT p95 812 ms > 500 ms"
    cost_per_million_output_tokens: float | None = None
    na_reasons: dict[str, str] = Field(default_factory=dict)


class BestPoint(BaseModel):
    """A side's capacity point: the highest measured concurrency within the SLO (or top throughput)."""

    side: Side
    concurrency: int
    output_tokens_per_s: float
    output_tokens_per_gpu_hour: float  # output_tokens_per_s x 3600
    cost_per_million_output_tokens: float | None = None
    # The highest concurrency run still met the target: the true capacity may be higher (not measured).
    at_highest_measured: bool = False


class BestPoints(BaseModel):
    """Each side's capacity point (the best that meets the target); None with the reason in ``na_reasons``."""

    baseline: BestPoint | None = None
    speculative: BestPoint | None = None
    na_reasons: dict[str, str] = Field(default_factory=dict)  # side -> why it has no point


class Saving(BaseModel):
    """What speculative decoding saves against the baseline at each side's capacity point.

    Both figures are percentages, None when either side has no capacity point; ``text`` is the one sentence the
    report and the CLI print ("none: …" with the reason when there is no saving to state)."""

    # (speculative / baseline tokens per GPU-hour - 1) x 100, at each side's capacity point.
    more_tokens_per_gpu_hour_pct: float | None = None
    # (1 - speculative / baseline cost per million tokens) x 100; same figures, as a cost cut.
    cost_saving_pct: float | None = None
    text: str  # "speculative serves 42% more tokens per GPU-hour at your latency target" or "none: …"


class Capacity(BaseModel):
    """Capacity at a latency target for one workload: the points per side, the best each, and the saving.

    Prices are per GPU-hour in ``currency``; ``price_note`` says which share of a GPU the price covers."""

    gpu_hour_price: float | None = None
    currency: str = "$"
    shared_gpu: bool = False
    order: Order = "sequential"
    price_note: str  # which share of a GPU the price covers
    arm: str | None = None  # the arm (speculative server) this capacity is about; None: a results file without arms
    # With a shared GPU and the servers' shares given (--gpu-shares): the arm's share of the GPU, the
    # part of the GPU-hour price it carries; and the baseline's. None: not shared, or not given.
    price_share: float | None = None
    baseline_price_share: float | None = None
    slo: Slo = Field(default_factory=Slo)
    concurrencies: list[int] = Field(default_factory=list)  # measured, ascending
    points: list[CapacityPoint] = Field(default_factory=list)
    best: BestPoints = Field(default_factory=BestPoints)
    saving: Saving
    note: str  # no extrapolation beyond the measured concurrencies


# --------------------------------------------------------------------------- arithmetic


def cost_per_million_output_tokens(gpu_hour_price: float, output_tokens_per_s: float) -> float | None:
    """P / (tokens/s x 3600) x 1e6; None when nothing was served."""
    if output_tokens_per_s <= 0:
        return None
    return gpu_hour_price / (output_tokens_per_s * 3600) * 1e6


def _check_slo(p: MeasuredPoint, slo: Slo) -> tuple[bool | None, list[str], str | None]:
    """(meets, misses, why unknown): the point's TTFT and ITL at p50 and p95 against the target (Slo.check)."""
    if not slo.given:
        return None, [], "no latency target given"
    if p.output_tokens_per_s is None:
        return None, [], p.error or "not measured"
    measured = {("ttft", 50): p.ttft_p50_s, ("ttft", 95): p.ttft_p95_s, ("itl", 50): p.itl_p50_s,
                ("itl", 95): p.itl_p95_s}
    c = slo.check(lambda figure, q: measured.get((figure, q)))
    if c.misses:
        return False, c.misses, None
    return c.meets, [], "; ".join(c.unknown) or None


def _price_note(shared_gpu: bool, order: Order, price: float | None, currency: str) -> str:
    p = f"{currency}{price:,.2f}" if price is not None else "the price"
    if not shared_gpu:
        return f"Each server runs on its own GPU; {p} per GPU-hour is charged to each side's throughput."
    if order == "sequential":
        return (f"Both servers share one GPU, but they were measured one at a time (sequential order), so each "
                f"had the whole GPU while measured: {p} per GPU-hour is the cost of one GPU serving only "
                "that configuration.")
    return (f"Both servers share one GPU and ran at the same time (simultaneous order), each with only part of "
            f"it; {p} per GPU-hour is still charged in full to each side, so these costs are upper bounds. "
            "Measure in sequential order for the cost of a GPU serving one configuration.")


def _best(points: list[CapacityPoint], slo: Slo, highest: int) -> tuple[BestPoint | None, str | None]:
    served = [p for p in points if p.output_tokens_per_s]
    if not served:
        errors = [p.na_reasons.get("output_tokens_per_s", "") for p in points]
        return None, "it failed at every measured concurrency" + (f" ({errors[0]})" if errors and errors[0] else "")
    if slo.given:
        meeting = [p for p in served if p.meets_slo]
        if not meeting:
            lowest = min(served, key=lambda p: p.concurrency)
            why = "; ".join(lowest.slo_misses) or lowest.na_reasons.get("meets_slo", "unknown")
            return None, f"it meets the latency target at no measured concurrency (at {lowest.concurrency}: {why})"
        pick = max(meeting, key=lambda p: p.concurrency)
    else:
        pick = max(served, key=lambda p: (p.output_tokens_per_s or 0, -p.concurrency))
    tps = pick.output_tokens_per_s or 0.0
    return BestPoint(side=pick.side, concurrency=pick.concurrency, output_tokens_per_s=tps,
                     output_tokens_per_gpu_hour=tps * 3600,
                     cost_per_million_output_tokens=pick.cost_per_million_output_tokens,
                     at_highest_measured=slo.given and pick.concurrency == highest), None


def _saving(best: BestPoints, slo: Slo) -> Saving:
    where = "at your latency target" if slo.given else "at each server's best measured concurrency"
    b, s = best.baseline, best.speculative
    if b is not None and s is not None:
        more = (s.output_tokens_per_s / b.output_tokens_per_s - 1) * 100
        cut = (1 - b.output_tokens_per_s / s.output_tokens_per_s) * 100
        if s.output_tokens_per_s > b.output_tokens_per_s:
            text = f"speculative serves {more:.0f}% more tokens per GPU-hour {where}"
        else:
            text = (f"none: speculative serves {-more:.0f}% fewer tokens per GPU-hour {where} "
                    f"({s.output_tokens_per_s:,.1f} vs {b.output_tokens_per_s:,.1f} output tokens/s)")
        return Saving(more_tokens_per_gpu_hour_pct=more, cost_saving_pct=cut, text=text)
    if s is not None:
        return Saving(text=(f"speculative only: it meets your latency target (up to concurrency {s.concurrency}, "
                            f"{s.output_tokens_per_s:,.1f} output tokens/s) and the baseline does not: "
                            f"{best.na_reasons.get('baseline', 'no point')}"))
    if b is not None:
        return Saving(text=f"none: speculative has no capacity point: {best.na_reasons.get('speculative', '')}")
    # Each side's reason is in best.na_reasons.
    return Saving(text="none: neither server has a capacity point")


def share_note(arm: str, shares: Mapping[str, float], price: float | None, currency: str) -> str:
    """Which part of a shared GPU's price the arm's server (and the baseline's) carries."""
    p = f"{currency}{price:,.2f}" if price is not None else "the price"
    others = ", ".join(f"{n} {v:.0%}" for n, v in shares.items() if n != arm)
    return (f"On the shared GPU the {arm} server holds {shares[arm]:.0%} of it ({others}): that part of {p} "
            "per GPU-hour is its share of the bill.")


def build_capacity(measured: Sequence[MeasuredPoint], *, slo: Slo | None = None, gpu_hour_price: float | None = None,
                   shared_gpu: bool = False, order: Order = "sequential", currency: str = "$",
                   gpu_shares: Mapping[str, float] | None = None, arm: str | None = None) -> Capacity:
    """Capacity points, each side's best point, cost and saving, from measured points of ONE workload
    (the baseline and one arm, ``arm``). With a shared GPU and ``gpu_shares`` (server name -> share),
    the note says which part of the price the arm carries."""
    slo = slo or Slo()
    seen: set[tuple[str, int]] = set()
    for m in measured:
        if (m.side, m.concurrency) in seen:
            raise ValueError(f"two points for {m.side} at concurrency {m.concurrency}: give one workload's cells")
        seen.add((m.side, m.concurrency))
    concurrencies = sorted({m.concurrency for m in measured})
    points: list[CapacityPoint] = []
    for m in sorted(measured, key=lambda m: (SIDES.index(m.side), m.concurrency)):
        p = CapacityPoint(**m.model_dump(exclude={"error"}))
        if m.output_tokens_per_s is None:
            p.na_reasons["output_tokens_per_s"] = m.error or "not measured"
        p.meets_slo, p.slo_misses, why = _check_slo(m, slo)
        if why:
            p.na_reasons["meets_slo"] = why
        if gpu_hour_price is None:
            p.na_reasons["cost_per_million_output_tokens"] = (
                "no GPU-hour price given (--gpu-hour-price or SPECDEMO_GPU_HOUR_PRICE)")
        elif m.output_tokens_per_s is None or m.output_tokens_per_s <= 0:
            p.na_reasons["cost_per_million_output_tokens"] = "no output tokens/s measured here"
        else:
            p.cost_per_million_output_tokens = cost_per_million_output_tokens(gpu_hour_price, m.output_tokens_per_s)
        points.append(p)
    best = BestPoints()
    highest = concurrencies[-1] if concurrencies else 0
    for side in SIDES:
        mine = [p for p in points if p.side == side]
        if not mine:
            best.na_reasons[side] = "it was not measured"
            continue
        pick, why = _best(mine, slo, highest)
        setattr(best, side, pick)
        if why:
            best.na_reasons[side] = why
    listed = ", ".join(str(c) for c in concurrencies) or "none"
    note = (f"Measured at concurrency {listed} only; nothing is extrapolated beyond {highest}."
            if concurrencies else "Nothing was measured.")
    capped = [b.side for b in (best.baseline, best.speculative) if b is not None and b.at_highest_measured]
    if capped:
        plural = len(capped) > 1
        note += (f" The {' and '.join(capped)} server{'s' if plural else ''} still met the target at "
                 f"{highest}, the highest concurrency run: {'their' if plural else 'its'} capacity may be higher; "
                 "run higher concurrencies to find it.")
    price_note = _price_note(shared_gpu, order, gpu_hour_price, currency)
    share = base_share = None
    key = arm or "speculative"
    if shared_gpu and gpu_shares and key in gpu_shares:
        share, base_share = gpu_shares[key], gpu_shares.get("baseline")
        price_note += " " + share_note(key, gpu_shares, gpu_hour_price, currency)
    return Capacity(gpu_hour_price=gpu_hour_price, currency=currency, shared_gpu=shared_gpu, order=order,
                    price_note=price_note, slo=slo, arm=arm, price_share=share, baseline_price_share=base_share,
                    concurrencies=concurrencies, points=points, best=best, saving=_saving(best, slo), note=note)


# --------------------------------------------------------------------------- words


def _money(capacity: Capacity, value: float) -> str:
    return f"{capacity.currency}{value:,.2f}"


def _side_sentence(capacity: Capacity, b: BestPoint, label: str) -> str:
    within = "within it" if capacity.slo.given else "at best"
    s = (f"the {label} server served {b.output_tokens_per_s:,.1f} output tokens/s {within}, "
         f"with {b.concurrency} request{'s' if b.concurrency != 1 else ''} at once")
    if b.cost_per_million_output_tokens is not None:
        s += f" ({_money(capacity, b.cost_per_million_output_tokens)} per million output tokens)"
    return s


def capacity_summary(capacity: Capacity) -> str:
    """A plain-language paragraph for the top of the report: target, capacity, cost, saving, caveats."""
    out: list[str] = []
    if capacity.slo.given:
        out.append(f"Your latency target: {capacity.slo.describe()}.")
    else:
        out.append("No latency target was given, so each server is taken at its highest measured throughput.")
    sides = []
    for side, label in (("baseline", "baseline"), ("speculative", "speculative")):
        b: BestPoint | None = getattr(capacity.best, side)
        if b is not None:
            sides.append(_side_sentence(capacity, b, label))
        else:
            sides.append(f"the {label} server has no capacity point: {capacity.best.na_reasons.get(side, 'unknown')}")
    out.append(sides[0][0].upper() + sides[0][1:] + "; " + sides[1] + ".")
    s = capacity.saving
    if s.more_tokens_per_gpu_hour_pct is not None and s.more_tokens_per_gpu_hour_pct > 0:
        line = s.text[0].upper() + s.text[1:]
        if capacity.gpu_hour_price is not None and s.cost_saving_pct is not None:
            line += f", so each output token costs {s.cost_saving_pct:.0f}% less"
        out.append(line + ".")
    elif s.text.startswith("none: "):
        out.append("No saving: " + s.text.removeprefix("none: ") + ".")
    else:
        out.append(s.text[0].upper() + s.text[1:] + ".")
    if capacity.gpu_hour_price is not None:
        out.append(capacity.price_note)
    else:
        out.append("No GPU-hour price was given, so no cost is shown.")
    out.append(capacity.note)
    return " ".join(out)
