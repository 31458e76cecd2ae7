"""Planning the matrix: which workloads, which cells (presets x temperatures x concurrency, and
the workload file x concurrency), and the requests each cell sends. Pure: no I/O beyond reading
the presets folder.
"""

from __future__ import annotations

from demo.fmt import fmt_temperature
from demo.presets import Preset
from demo.presets import UnknownPresetError as UnknownPresetError  # re-exported: demo.cli.sweep
from demo.presets import resolve_presets as resolve_presets  # re-exported: the Evaluate tab, tests
from demo.sampling import SAMPLING_FIELDS
from demo.sweep.models import CellSettings, SweepSpec
from demo.workload import Workload, WorkloadRequest


def plan_cells(spec: SweepSpec, presets: dict[str, Preset], workload: Workload | None = None) -> list[CellSettings]:
    """Presets x temperatures x concurrency, then the workload file x concurrency."""
    common = dict(repeats=spec.repeats, warmup=spec.warmup, order=spec.order,
                  baseline_url=spec.baseline_url, speculative_url=spec.speculative_url)
    cells = []
    for name in spec.presets:
        p = presets[name]
        for t in spec.temperatures if spec.temperatures is not None else [p.temperature]:
            for c in spec.concurrency:
                cells.append(CellSettings(preset=name, temperature=t, concurrency=c,
                                          max_tokens=spec.max_tokens or p.max_tokens, api=p.api, **common))
    if workload is not None:
        apis = {r.api for r in workload.requests}
        for c in spec.concurrency:
            cells.append(CellSettings(
                preset=workload.name, kind="workload", temperature=None, concurrency=c,
                max_tokens=spec.max_tokens or max(r.max_tokens for r in workload.requests),
                api="chat" if apis == {"chat"} else "completions" if apis == {"completions"} else "chat",
                requests=len(workload.requests), **common))
    return cells


def cell_label(c: CellSettings) -> str:
    """A cell's short label, e.g. "json_reformat T=0 c=4"."""
    return f"{c.preset} {fmt_temperature(c.temperature)} c={c.concurrency}"


def cell_requests(cell: CellSettings, presets: dict[str, Preset], workload: Workload | None) -> list[WorkloadRequest]:
    """The distinct requests of a cell, in workload order: a preset's one request at the cell's
    temperature and max tokens, or the workload file's requests (max tokens capped by the cell's)."""
    if cell.kind == "preset":
        p = presets[cell.preset]
        assert cell.temperature is not None
        # The preset's own sampling (and seed) goes with it: json_reformat_schema is measured as JSON.
        return [WorkloadRequest(id=p.name, api=cell.api, messages=p.messages, max_tokens=cell.max_tokens,
                                temperature=cell.temperature, seed=p.seed,
                                **{name: getattr(p, name) for name in SAMPLING_FIELDS})]
    assert workload is not None and workload.name == cell.preset
    return [r.model_copy(update={"max_tokens": min(r.max_tokens, cell.max_tokens)}) for r in workload.requests]


def batch_requests(requests: list[WorkloadRequest], concurrency: int) -> list[WorkloadRequest]:
    """One batch: every request once, in order, and at least ``concurrency`` of them (a list
    shorter than the concurrency wraps round, so a preset's one request fills every stream)."""
    n = max(len(requests), concurrency)
    return [requests[i % len(requests)] for i in range(n)]
