"""An open-loop load sweep (``python -m demo load --rate ...``) as text and JSON: a row per server per
rate step, each arm's ratios, the saturation and error notes, the capacity sentence and the crossovers.
Pure formatting of demo/load/rate.py's records; "n/a" where a figure is unknown."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from demo.fmt import fmt_number, fmt_percent, fmt_speedup, or_na
from demo.load.rate_models import QUEUE_SOURCE, RUNNING_SOURCE, RateSide, RateStep
from demo.sweep.schedule import recommendation_json, recommendation_lines

if TYPE_CHECKING:
    from demo.load.engine import LoadResult

HEAD = ("req/s", "server", "sent", "ok/fail/cut", "offered", "completed", "out tok/s", "goodput",
        "TTFT p50/95/99 ms", "ITL p50/95/99 ms", "e2e p50/95/99 s", "queue ms", "running", "KV", "preempt")
WIDTHS = (6, 12, 5, 11, 7, 9, 9, 7, 17, 16, 15, 8, 9, 4, 7)
# The page's rate table (demo/ui/load_panel.py): HEAD and the row's notes (ratios, saturation, errors).
RATE_HEADERS = [*HEAD, "notes"]


def _n(v: float | None, digits: int = 1) -> str:
    return or_na(fmt_number(v, digits))


def _ms3(p: dict[str, float | None]) -> str:
    vals = [p.get(k) for k in ("p50", "p95", "p99")]
    return "/".join("n/a" if v is None else f"{v * 1000:.0f}" for v in vals)


def _s3(p: dict[str, float | None]) -> str:
    vals = [p.get(k) for k in ("p50", "p95", "p99")]
    return "/".join("n/a" if v is None else f"{v:.1f}" for v in vals)


def rate_side_cells(s: RateSide) -> list[str]:
    """A server's row of the rate table (after the rate and its name)."""
    running = "n/a" if s.running_mean is None else f"{s.running_mean:.1f}/{s.running_p95:.0f}"
    queue = "n/a" if s.queue_time_mean_s is None else f"{s.queue_time_mean_s * 1000:.0f}"
    return [str(s.sent), f"{s.finished}/{s.failed}/{s.cut}", _n(s.offered_requests_per_s, 2),
            _n(s.completed_requests_per_s, 2) + ("!" if s.saturated else ""), _n(s.output_tokens_per_s),
            _n(s.goodput_requests_per_s, 2), _ms3(s.ttft_s), _ms3(s.itl_s), _s3(s.e2e_s), queue, running,
            or_na(fmt_percent(s.kv_cache_usage_peak_perc, 0)), _n(s.num_preemptions, 0)]


def side_notes(step: RateStep, side: RateSide) -> str:
    """A server's notes at a step: an arm's ratios to the baseline, its saturation, its errors ("; ")."""
    notes = []
    arm = step.arms.get(side.name) if side is not step.baseline else None
    if arm is not None:
        notes.append(f"speedup (per-request decode) {or_na(fmt_speedup(arm.speedup))}, throughput ratio "
                     f"{or_na(fmt_speedup(arm.throughput_ratio))}, goodput ratio "
                     f"{or_na(fmt_speedup(arm.goodput_ratio))}")
    if side.saturated:
        notes.append(f"saturated: {side.saturation_note}")
    if side.client is not None and side.client.limited:
        notes.append(f"client-limited: {side.client.note}")
    notes += [f"error: {e}" for e in side.errors]
    return "; ".join(notes)


def rate_rows(r: LoadResult) -> list[list[str]]:
    """Every step as the page's table rows (RATE_HEADERS): a row per server, the baseline first, the step's
    rate (or its replay's label) on its first row."""
    rows = []
    for step in r.rate_steps:
        first = f"{step.rate_requests_per_s:g}" if step.label is None else step.label
        rows += [[first if i == 0 else "", side.name, *rate_side_cells(side), side_notes(step, side)]
                 for i, side in enumerate(step.servers())]
    return rows


def rate_finished_text(result: LoadResult) -> str:
    """The status line for a finished open-loop sweep: the steps measured, why it stopped early, and saturation."""
    assert result.spec.rate is not None
    out = f"{len(result.rate_steps)} of {len(result.spec.rate.rates)} rate step(s), each server alone"
    saturated = [f"{s.name} at {st.rate_requests_per_s:g} req/s" for st in result.rate_steps for s in st.servers()
                 if s.saturated]
    if saturated:
        out += f"; saturated: {', '.join(saturated)} (see the table)"
    summary = result.rate_summary
    return out + (f"; {summary.stopped_note}" if summary is not None and summary.stopped_note else "")


def rate_step_line(step: RateStep) -> str:
    """One line per finished step (progress on stderr): completed req/s per server and each arm's speedup."""
    parts = [f"{s.name} {_n(s.completed_requests_per_s, 2)} req/s" + (" (saturated)" if s.saturated else "")
             for s in step.servers()]
    gains = [f"{n} speedup {or_na(fmt_speedup(a.speedup))}" for n, a in step.arms.items()]
    head = step.label or f"{step.rate_requests_per_s:g} req/s offered"
    return f"{head}: " + ", ".join(parts + gains)


def rate_table(r: LoadResult) -> str:
    """The open-loop sweep as plain text: a row per server per step, then capacity and crossovers."""
    spec = r.spec
    rate = spec.rate
    assert rate is not None  # only a rate sweep is shown so
    length = f"{rate.duration_s:g} s of arrivals" if rate.duration_s else f"{rate.requests} requests"
    law = rate.arrivals + (f" (burstiness {rate.burstiness:g})" if rate.arrivals == "gamma" else "")
    if rate.replay is not None:
        sched = rate.replay.schedule()
        lines = [f"Open-loop load: {rate.replay.label}: {len(sched.offsets_s)} requests at the trace's own times "
                 f"over {sched.window_s:.1f} s (mean {sched.offered_requests_per_s:.2f} req/s), each line's own "
                 f"max_tokens (up to {spec.max_tokens}); bound: window + {rate.drain_s:g} s drain; each server "
                 "alone, the same send times", ""]
    else:
        lines = [f"Open-loop load: {spec.workload}, {spec.max_tokens} tokens, {law} arrivals (seed {rate.seed}), "
                 f"{length} per step, bound: window + {rate.drain_s:g} s drain; each server alone, the same "
                 "schedule", ""]
    lines.append("  ".join(h.rjust(w) for h, w in zip(HEAD, WIDTHS, strict=True)))
    for step in r.rate_steps:
        for i, side in enumerate(step.servers()):
            first = f"{step.rate_requests_per_s:g}" if step.label is None else f"{step.rate_requests_per_s:.2f}*"
            cells = [first if i == 0 else "", side.name, *rate_side_cells(side)]
            lines.append("  ".join(c.rjust(w) for c, w in zip(cells, WIDTHS, strict=True)))
        for n, a in step.arms.items():
            lines.append(f"{'':8}{n}: speedup (per-request decode) {or_na(fmt_speedup(a.speedup))}, throughput "
                         f"ratio {or_na(fmt_speedup(a.throughput_ratio))}, goodput ratio "
                         f"{or_na(fmt_speedup(a.goodput_ratio))}")
        for side in step.servers():
            if side.saturated:
                lines.append(f"{'':8}saturated ({side.name}): {side.saturation_note}")
            if side.client is not None and side.client.limited:
                lines.append(f"{'':8}client-limited ({side.name}): {side.client.note}")
            lines += [f"{'':8}error ({side.name}): {e}" for e in side.errors]
    if rate.replay is not None:
        lines.append(f"*: the {rate.replay.label}; req/s: the trace's mean rate at that speed.")
    lines += ["", "!: saturated, the server did not keep up (its note says how).",
              f"queue: {QUEUE_SOURCE}; running: {RUNNING_SOURCE} (mean/p95).",
              "completed req/s and tokens/s: over the time from the step's start to its last finish."]
    s = r.rate_summary
    if s is not None:
        lines += ["", f"Capacity: {s.capacity_text}"]
        lines += [f"  {n}: {c.method or c.na_reason}" for n, c in s.capacity.items() if c.method or c.na_reason]
        lines += [f"Crossover ({n}, per-request decode speedup): {c.text}" for n, c in s.crossovers.items()]
        if s.stopped_note:
            lines.append(s.stopped_note[0].upper() + s.stopped_note[1:] + ".")
        if s.recommendation is not None:
            lines += ["", *recommendation_lines(s.recommendation)]
    if r.interrupted:
        lines.append("Interrupted: the steps above are those measured.")
    return "\n".join(lines)


def rate_json(r: LoadResult) -> dict[str, Any]:
    """The open-loop sweep as one JSON object: the settings, every step (its schedule's send offsets, each
    server's figures, each arm's ratios), the capacity and crossovers: what a peer check needs."""
    assert r.spec.rate is not None
    return {
        "kind": "rate",
        "workload": r.spec.workload,
        "max_tokens": r.spec.max_tokens,
        "temperature": r.spec.temperature,
        "api": r.spec.api,
        "baseline_url": r.spec.baseline_url,
        "arms": [a.model_dump() for a in r.spec.arm_list()],
        "rate": r.spec.rate.model_dump(),
        "sources": {"queue_time": QUEUE_SOURCE, "running": RUNNING_SOURCE},
        "rate_steps": [s.model_dump() for s in r.rate_steps],
        "summary": r.rate_summary.model_dump() if r.rate_summary else None,
        "recommendation": (recommendation_json(r.rate_summary.recommendation)
                           if r.rate_summary and r.rate_summary.recommendation else None),
        "interrupted": r.interrupted,
    }
