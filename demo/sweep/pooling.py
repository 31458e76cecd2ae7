"""Pooling: per-request figures into batch figures, batches into a side of a cell, the two
sides into a cell (medians and spread over repeats, speedups per repeat, pooled acceptance).
Pure arithmetic over demo.measure's per-request results; the runner, the verdict and the
report all use it.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence

from demo.measure import Acceptance, acceptance, efficiency, median, percentile
from demo.metrics import MetricsSample, spec_stats_from_delta
from demo.results import FIRST_ARM, SIDES, Side, SideResult, answer_text
from demo.sweep.capacity import Capacity, MeasuredPoint, build_capacity
from demo.sweep.models import (
    ArmCell,
    ArmSpec,
    BatchStats,
    CellResult,
    CellSettings,
    SideCell,
    Spread,
    SweepResult,
    WorkloadSummary,
)
from demo.sweep.profile import workload_profile

SAMPLE_CHARS = 300


def spread(values: list[float]) -> Spread | None:
    """The median, min and max of ``values`` and how many there are; None for no values."""
    if not values:
        return None
    return Spread(median=statistics.median(values), min=min(values), max=max(values), n=len(values))


def expected_tokens_per_step(a: float | None, k: int | None) -> float | None:
    """Leviathan et al.: expected tokens per target pass for acceptance a and k drafted tokens."""
    if a is None or k is None:
        return None
    if a >= 1.0:
        return float(k + 1)
    return (1 - a ** (k + 1)) / (1 - a)


def batch_stats(side: Side, results: list[SideResult], wall_s: float | None, kv_peak: float | None,
                before: MetricsSample | None, after: MetricsSample | None, *, keep_text: bool = True,
                waiting_peak: float | None = None) -> BatchStats:
    """Pool one batch's per-request results (all figures come from SideMeter). ``keep_text`` False
    (redaction) keeps no answer text. ``waiting_peak``: the highest queue length sampled."""
    stats = BatchStats(side=side, requests=len(results), wall_s=wall_s, kv_cache_usage_peak_perc=kv_peak,
                       num_requests_waiting_peak=waiting_peak)
    _pool_pressure(stats, before, after)
    for r in results:
        if r.error and r.error not in stats.errors:
            stats.errors.append(r.error)
    ok = [r for r in results if r.complete]
    stats.ok_requests = len(ok)
    if not ok:
        why = "no request finished" + (f": {stats.errors[0]}" if stats.errors else "")
        for f in ("output_tokens_per_s", "decode_tokens_per_s_p50", "ttft_p50_s", "e2e_p50_s"):
            stats.na_reasons[f] = why
        return stats
    stats.completion_tokens_total = sum(r.completion_tokens or 0 for r in ok)
    if wall_s and stats.completion_tokens_total:
        stats.output_tokens_per_s = stats.completion_tokens_total / wall_s
    else:
        stats.na_reasons["output_tokens_per_s"] = "no tokens counted (the server sent no usage)"
    rates = [r.decode_tokens_per_s for r in ok if r.decode_tokens_per_s]
    stats.decode_tokens_per_s_p50 = median(rates)
    stats.decode_tokens_per_s_min, stats.decode_tokens_per_s_max = (min(rates), max(rates)) if rates else (None, None)
    if stats.decode_tokens_per_s_p50 is None:
        stats.na_reasons["decode_tokens_per_s_p50"] = next(
            (r.na_reasons["decode_tokens_per_s"] for r in ok if "decode_tokens_per_s" in r.na_reasons), "not measured")
    ttfts = [r.ttft_s for r in ok if r.ttft_s is not None]
    e2es = [r.e2e_s for r in ok if r.e2e_s is not None]
    stats.ttft_p50_s, stats.ttft_p95_s = percentile(ttfts, 50), percentile(ttfts, 95)
    stats.e2e_p50_s, stats.e2e_p95_s = percentile(e2es, 50), percentile(e2es, 95)
    # Over every token of the batch (what a latency target means), not a median of per-request figures.
    gaps = [g for r in ok for g in r.itl_s]
    stats.itl_p50_s, stats.itl_p95_s = percentile(gaps, 50), percentile(gaps, 95)
    if not gaps:
        stats.na_reasons["itl_p95_s"] = next(
            (r.na_reasons["itl_p95_s"] for r in ok if "itl_p95_s" in r.na_reasons), "not measured")
    stats.sample_text = answer_text(ok[0].text, ok[0].tool_calls)[:SAMPLE_CHARS] if keep_text else ""
    if side == "speculative":
        _pool_batch_acceptance(stats, ok, before, after)
    return stats


def _pool_pressure(stats: BatchStats, before: MetricsSample | None, after: MetricsSample | None) -> None:
    """Preemptions in the batch (the counter's delta), and why the queue or the preemptions are n/a."""
    failed = next((m for m in (before, after) if m is not None and not m.ok), None)
    why = (failed.error if failed else None) or "/metrics was not scraped"
    if before is None or after is None or failed is not None:
        stats.na_reasons.setdefault("num_preemptions", why)
    elif before.num_preemptions_total is None or after.num_preemptions_total is None:
        stats.na_reasons["num_preemptions"] = "the server's /metrics has no vllm:num_preemptions_total"
    else:
        stats.num_preemptions = int(after.num_preemptions_total - before.num_preemptions_total)
    if stats.num_requests_waiting_peak is None:
        stats.na_reasons["num_requests_waiting_peak"] = (
            why if failed is not None or before is None else "the server's /metrics has no vllm:num_requests_waiting")


def _pool_batch_acceptance(stats: BatchStats, ok: list[SideResult], before: MetricsSample | None,
                     after: MetricsSample | None) -> None:
    """Per-request acceptance summed over the batch; else the /metrics delta around the batch."""
    per = [r.spec for r in ok]
    counts = [(s.accepted_tokens, s.draft_tokens, s.drafts) for s in per
              if s is not None and s.source == "per_request" and s.draft_tokens is not None
              and s.accepted_tokens is not None and s.drafts is not None]
    if len(counts) == len(per):  # every request reported all three
        stats.accepted_tokens = sum(a for a, _, _ in counts)
        stats.draft_tokens = sum(d for _, d, _ in counts)
        stats.drafts = sum(n for _, _, n in counts)
        stats.num_spec_tokens = next((s.num_spec_tokens for s in per if s and s.num_spec_tokens), None)
        stats.acceptance_source = "per_request"
        return
    delta = spec_stats_from_delta(before, after)
    if delta is None:
        stats.na_reasons["acceptance_rate"] = "the server reports no speculative metrics (is it speculating?)"
        return
    if delta.accepted_tokens is None or not delta.draft_tokens:
        stats.na_reasons["acceptance_rate"] = (delta.na_reasons.get("acceptance_rate")
                                               or "no drafts were proposed in the batch")
        return
    stats.accepted_tokens, stats.draft_tokens, stats.drafts = delta.accepted_tokens, delta.draft_tokens, delta.drafts
    stats.num_spec_tokens = delta.num_spec_tokens
    stats.acceptance_source = "metrics_delta"


def pooled_acceptance(batches: list[BatchStats]) -> Acceptance:
    """Acceptance over the speculative batches that counted their drafts (token counts summed, then divided)."""
    counted = [b for b in batches if b.draft_tokens and b.accepted_tokens is not None]
    return acceptance(sum(b.accepted_tokens or 0 for b in counted), sum(b.draft_tokens or 0 for b in counted),
                      sum(b.drafts or 0 for b in counted))


def side_cell(side: Side, batches: list[BatchStats]) -> SideCell:
    """Pool one side's batches of a cell into its cell figures.

    Throughputs as spreads over the batches, latencies as the median of the batches' percentiles, the peak KV-cache
    usage and queue, the preemptions summed; a figure no batch measured stays None with its reason."""
    cell = SideCell(side=side, batches=batches)
    cell.requests = sum(b.requests for b in batches)
    cell.ok_requests = sum(b.ok_requests for b in batches)
    cell.output_tokens_per_s = spread([b.output_tokens_per_s for b in batches if b.output_tokens_per_s])
    cell.decode_tokens_per_s = spread([b.decode_tokens_per_s_p50 for b in batches if b.decode_tokens_per_s_p50])
    for f in ("ttft_p50_s", "ttft_p95_s", "itl_p50_s", "itl_p95_s", "e2e_p50_s", "e2e_p95_s"):
        setattr(cell, f, median([getattr(b, f) for b in batches if getattr(b, f) is not None]))
    if cell.ttft_p50_s is not None and cell.e2e_p50_s:
        cell.prefill_share = cell.ttft_p50_s / cell.e2e_p50_s
    kv = [b.kv_cache_usage_peak_perc for b in batches if b.kv_cache_usage_peak_perc is not None]
    cell.kv_cache_usage_peak_perc = max(kv) if kv else None
    waiting = [b.num_requests_waiting_peak for b in batches if b.num_requests_waiting_peak is not None]
    cell.num_requests_waiting_peak = max(waiting) if waiting else None
    preempted = [b.num_preemptions for b in batches if b.num_preemptions is not None]
    cell.num_preemptions = sum(preempted) if preempted else None
    if not kv:
        cell.na_reasons["kv_cache_usage_peak_perc"] = next(  # a batch's own reason (e.g. /metrics down) first
            (b.na_reasons["kv_cache_usage_peak_perc"] for b in batches if "kv_cache_usage_peak_perc" in b.na_reasons),
            "the server's /metrics gave no KV-cache usage")
    cell.sample_text = next((b.sample_text for b in batches if b.sample_text), "")
    for b in batches:
        for f, why in b.na_reasons.items():
            cell.na_reasons.setdefault(f, why)
    return cell


def arm_cell(name: str, base: list[BatchStats], spec: list[BatchStats], identical_text: bool | None = None, *,
             about: ArmSpec | None = None) -> ArmCell:
    """One arm of a cell against the baseline's batches of the same repeats: its side over the repeats,
    speedups per repeat (same conditions), pooled acceptance; its label, method and timed step cost
    from ``about``."""
    arm = ArmCell(name=name, label=about.label if about else None, method=about.method if about else None,
                  step_cost=about.step_cost if about else None, side=side_cell("speculative", spec),
                  identical_text=identical_text)
    bc, sc = side_cell("baseline", base), arm.side
    pairs = list(zip(base, spec, strict=True))
    arm.speedup = spread([s.decode_tokens_per_s_p50 / b.decode_tokens_per_s_p50 for b, s in pairs
                          if b.decode_tokens_per_s_p50 and s.decode_tokens_per_s_p50])
    arm.throughput_ratio = spread([s.output_tokens_per_s / b.output_tokens_per_s for b, s in pairs
                                   if b.output_tokens_per_s and s.output_tokens_per_s])
    if bc.e2e_p50_s and sc.e2e_p50_s:
        arm.e2e_speedup = bc.e2e_p50_s / sc.e2e_p50_s
    for b in spec:
        for e in b.errors:
            if e not in arm.errors:
                arm.errors.append(e)
    counted = [b for b in spec if b.draft_tokens and b.accepted_tokens is not None]
    if counted:
        acc = pooled_acceptance(counted)
        arm.acceptance_rate, arm.mean_acceptance_length = acc.rate, acc.tokens_per_step
        arm.efficiency = efficiency(arm.speedup.median if arm.speedup else None,
                                    arm.mean_acceptance_length)
        arm.num_spec_tokens = next((b.num_spec_tokens for b in counted if b.num_spec_tokens), None)
        sources = {b.acceptance_source for b in counted}
        arm.acceptance_source = "per_request" if sources == {"per_request"} else "metrics_delta"
        arm.expected_tokens_per_step = expected_tokens_per_step(arm.acceptance_rate, arm.num_spec_tokens)
        if arm.num_spec_tokens is None:
            arm.na_reasons["expected_tokens_per_step"] = "k (num_speculative_tokens) is unknown"
    else:
        why = next((b.na_reasons["acceptance_rate"] for b in spec if "acceptance_rate" in b.na_reasons),
                   "no speculative batch finished")
        arm.na_reasons["acceptance_rate"] = arm.na_reasons["expected_tokens_per_step"] = why
    base_errors = [f"baseline: {e}" for b in base for e in b.errors]
    if arm.throughput_ratio is None:
        arm.na_reasons["throughput_ratio"] = ((base_errors[0] if base_errors else None)
                                              or (f"speculative: {arm.errors[0]}" if arm.errors else None)
                                              or bc.na_reasons.get("output_tokens_per_s")
                                              or sc.na_reasons.get("output_tokens_per_s") or "not measured")
    if arm.speedup is None:
        arm.na_reasons["speedup"] = (bc.na_reasons.get("decode_tokens_per_s_p50")
                                     or sc.na_reasons.get("decode_tokens_per_s_p50")
                                     or arm.na_reasons.get("throughput_ratio", "not measured"))
    return arm


def assemble_cell(settings: CellSettings, base: list[BatchStats], spec: list[BatchStats],
                  identical_text: bool | None = None) -> CellResult:
    """A cell of one arm (the baseline and the speculative server): see assemble_arms."""
    return assemble_arms(settings, base, {FIRST_ARM: spec}, {FIRST_ARM: identical_text})


def assemble_arms(settings: CellSettings, base: list[BatchStats], arms: Mapping[str, list[BatchStats]],
                  identical_text: Mapping[str, bool | None] | None = None,
                  about: Mapping[str, ArmSpec] | None = None) -> CellResult:
    """The baseline's batches and each arm's (``arms``, in order; ``about``: each arm as configured):
    every arm's figures (arm_cell). Errors are prefixed by side: "baseline: ", then "speculative: "
    with one arm, else the arm's name. The cell failed when no arm produced a throughput ratio."""
    identical_text, about = identical_text or {}, dict(about or {})
    if settings.concurrency != 1:  # a step cost timed with one request alone says nothing of a batch's
        about = {name: a.model_copy(update={"step_cost": None}) for name, a in about.items()}
    cells = {name: arm_cell(name, base, spec, identical_text.get(name), about=about.get(name))
             for name, spec in arms.items()}
    cell = CellResult(settings=settings, baseline=side_cell("baseline", base), arms=cells)
    for b in base:
        for e in b.errors:
            if f"baseline: {e}" not in cell.errors:
                cell.errors.append(f"baseline: {e}")
    for name, arm in cells.items():
        prefix = "speculative" if len(cells) == 1 else name
        cell.errors += [f"{prefix}: {e}" for e in arm.errors if f"{prefix}: {e}" not in cell.errors]
    if all(a.throughput_ratio is None for a in cells.values()):
        cell.status = "failed"
    elif cell.errors:
        cell.status = "partial"
    return cell


def measured_points(cells: Sequence[CellResult]) -> list[MeasuredPoint]:
    """One workload's cells (one per concurrency) -> the capacity module's measured points, both sides.

    Each SideCell's medians over the repeats: output_tokens_per_s.median, TTFT and ITL p50/p95
    (a batch's ITL percentiles are over every token of the batch).
    """
    points: list[MeasuredPoint] = []
    for cell in cells:
        for side in SIDES:
            sc = getattr(cell, side)
            tps = sc.output_tokens_per_s.median if sc.output_tokens_per_s is not None else None
            error = None
            if tps is None:
                error = (next((e.removeprefix(f"{side}: ") for e in cell.errors if e.startswith(f"{side}: ")), None)
                         or sc.na_reasons.get("output_tokens_per_s") or "not measured")
            points.append(MeasuredPoint(side=side, concurrency=cell.settings.concurrency, output_tokens_per_s=tps,
                                        ttft_p50_s=sc.ttft_p50_s, ttft_p95_s=sc.ttft_p95_s, itl_p50_s=sc.itl_p50_s,
                                        itl_p95_s=sc.itl_p95_s, error=error))
    return points


def workload_groups(cells: Sequence[CellResult]) -> dict[tuple[str, float | None], list[CellResult]]:
    """Cells by workload (a preset at a temperature, or the workload file), in the order they ran."""
    groups: dict[tuple[str, float | None], list[CellResult]] = {}
    for c in cells:
        groups.setdefault((c.settings.preset, c.settings.temperature), []).append(c)
    return groups


def summarize_workloads(result: SweepResult) -> list[WorkloadSummary]:
    """Per workload: its profile (who gains, from the cell at the lowest concurrency: the least
    contention between requests) and its capacity and cost over the measured concurrencies."""
    spec = result.spec
    out = []
    for (name, temperature), cells in workload_groups(result.cells).items():
        measured = [c for c in cells if c.status != "interrupted"] or cells
        lowest = min(measured, key=lambda c: c.settings.concurrency)
        arms = list(lowest.arms)

        def capacity(arm: str, measured: list[CellResult] = measured) -> Capacity:
            return build_capacity(measured_points([c.arm_view(arm) for c in measured if arm in c.arms]),
                                  slo=spec.slo, gpu_hour_price=spec.gpu_hour_price, shared_gpu=spec.shared_gpu,
                                  order=spec.order, gpu_shares=spec.gpu_shares, arm=arm)

        out.append(WorkloadSummary(
            preset=name, kind=lowest.settings.kind, temperature=temperature,
            profile_concurrency=lowest.settings.concurrency,
            profile=workload_profile(lowest.requests, redacted=spec.redact),
            capacity=build_capacity(measured_points(measured), slo=spec.slo, gpu_hour_price=spec.gpu_hour_price,
                                    shared_gpu=spec.shared_gpu, order=spec.order, gpu_shares=spec.gpu_shares,
                                    arm=arms[0] if arms else None),
            arm_capacity={arm: capacity(arm) for arm in arms} if len(arms) > 1 else {}))
    return out
