"""The figures a sweep measured for one arm, as guardrails and the drift check read them.

One place reads results.json for what comes after the evaluation: the acceptance and tokens per
step pooled over the arm's cells, its time per output token at one user count, and, at the highest
measured user count, the baseline's p95 inter-token latency and the arm's KV-cache peak and
preemptions. A figure the sweep did not measure is None with its reason in ``na_reasons``.
"""

from __future__ import annotations

import statistics
from pathlib import Path

from pydantic import BaseModel, Field, ValidationError

from demo.errors import BadInput, NotFound
from demo.fmt import validation_summary
from demo.measure import acceptance
from demo.settings import ARM_NAME
from demo.sweep.models import CellResult, SideCell, SweepResult

MAX_RESULTS_BYTES = 50_000_000  # a results.json larger than this is refused before it is read


class Measured(BaseModel):
    """One arm's figures from one results.json (units in the names; None: not measured, see na_reasons)."""

    source: str  # the file's name, as annotations and lines cite it
    measured_on: str  # the sweep's date, YYYY-MM-DD
    arm: str
    model: str | None = None  # the model the arm's server served (results.json "servers"); None: not recorded
    cells: int  # the arm's measured cells the pooled figures come from
    acceptance_rate: float | None = None  # accepted / drafted tokens, pooled over the cells
    tokens_per_step: float | None = None  # 1 + accepted / drafts, pooled over the cells
    users: int  # the user count time_per_output_token_s was measured at
    time_per_output_token_s: float | None = None  # 1 / the arm's median per-request decode tokens/s
    top_users: int  # the highest measured user count
    baseline_itl_p95_s: float | None = None  # the baseline's p95 ITL at top_users (worst of its cells)
    kv_cache_usage_peak_perc: float | None = None  # 0..1, the arm's highest at top_users
    preemptions_per_s: float | None = None  # the arm's preemptions over its batches' time at top_users
    na_reasons: dict[str, str] = Field(default_factory=dict)


def read_results(path: Path, max_bytes: int = MAX_RESULTS_BYTES) -> SweepResult:
    """results.json, validated; NotFound or BadInput in one line (never the file's text)."""
    if not path.is_file():
        raise NotFound(f"{path}: no such file (the sweep writes results.json into its --out folder)")
    if path.stat().st_size > max_bytes:
        raise BadInput(f"{path} is over {max_bytes / 1e6:g} MB: not a results.json")
    try:
        return SweepResult.model_validate_json(path.read_bytes())
    except OSError as e:
        raise BadInput(f"cannot read {path}: {e.strerror or e}") from e
    except ValidationError as e:
        raise BadInput(f"{path} is not a sweep's results.json: {validation_summary(e, count_rest=True)}") from e


def arm_names(result: SweepResult) -> list[str]:
    """The arms of the measured cells, in the sweep's order."""
    names: dict[str, None] = {}
    for cell in result.cells:
        if cell.status in ("ok", "partial"):
            names.update(dict.fromkeys(cell.arms))
    return list(names)


def measured_figures(result: SweepResult, source: str, arm: str | None = None, users: int | None = None) -> Measured:
    """The figures of ``arm`` (default: the first) in ``result``; ``users``: the user count of the
    time per output token (default: the lowest measured). BadInput (one line) when there is no such
    arm, no measured cell or no cell at ``users``."""
    cells = [c for c in result.cells if c.status in ("ok", "partial")]
    if not cells:
        raise BadInput(f"{source} has no measured cell: nothing to compare with")
    name = arm or next(iter(cells[0].arms))
    if not ARM_NAME.match(name):  # it goes into PromQL: a slug only (the file's text is not repeated)
        raise BadInput(f"{source}: an arm's name is not a slug (lowercase letters, digits, '-'): not a sweep's arm")
    cells = [c for c in cells if name in c.arms]
    if not cells:
        raise BadInput(f"{source} has no measured cell of that arm (--for-arm names one of the sweep's arms)")
    counts = sorted({c.settings.concurrency for c in cells})
    at = counts[0] if users is None else users
    if at not in counts:
        raise BadInput(f"{source} measured {', '.join(map(str, counts))} users, not {at}")
    out = Measured(source=source, measured_on=(result.finished_at or result.started_at).date().isoformat(),
                   arm=name, cells=len(cells), users=at, top_users=counts[-1],
                   model=next((s.model for s in result.servers if s.side == "speculative" and s.arm in (name, None)),
                              None))
    _pool_cell_acceptance(out, [c.arms[name].side for c in cells])
    _speed(out, [c.arms[name].side for c in cells if c.settings.concurrency == at])
    _top(out, [c for c in cells if c.settings.concurrency == counts[-1]], name)
    return out


def _pool_cell_acceptance(out: Measured, sides: list[SideCell]) -> None:
    batches = [b for s in sides for b in s.batches if b.draft_tokens and b.drafts and b.accepted_tokens is not None]
    acc = acceptance(sum(b.accepted_tokens or 0 for b in batches), sum(b.draft_tokens or 0 for b in batches),
                     sum(b.drafts or 0 for b in batches))
    out.acceptance_rate, out.tokens_per_step = acc.rate, acc.tokens_per_step
    if acc.rate is None:
        why = f"arm {out.arm} drafted nothing in {out.cells} measured cell(s)"
        out.na_reasons.update(acceptance_rate=why, tokens_per_step=why)


def _speed(out: Measured, sides: list[SideCell]) -> None:
    rates = [s.decode_tokens_per_s.median for s in sides if s.decode_tokens_per_s and s.decode_tokens_per_s.median > 0]
    if rates:
        out.time_per_output_token_s = 1 / statistics.median(rates)
    else:
        out.na_reasons["time_per_output_token_s"] = f"no decode speed measured at {out.users} users"


def _top(out: Measured, cells: list[CellResult], arm: str) -> None:
    at = f"at {out.top_users} users"
    itl = [v for c in cells if (v := c.baseline.itl_p95_s) is not None]
    kv = [v for c in cells if (v := c.arms[arm].side.kv_cache_usage_peak_perc) is not None]
    batches = [b for c in cells for b in c.arms[arm].side.batches if b.num_preemptions is not None and b.wall_s]
    out.baseline_itl_p95_s = max(itl) if itl else None
    out.kv_cache_usage_peak_perc = max(kv) if kv else None
    wall_s = sum(b.wall_s or 0 for b in batches)
    out.preemptions_per_s = sum(b.num_preemptions or 0 for b in batches) / wall_s if wall_s else None
    for field, value, what in (("baseline_itl_p95_s", out.baseline_itl_p95_s, "the baseline's p95 ITL"),
                               ("kv_cache_usage_peak_perc", out.kv_cache_usage_peak_perc, "KV-cache use (/metrics)"),
                               ("preemptions_per_s", out.preemptions_per_s, "preemptions (/metrics)")):
        if value is None:
            own = next((r for c in cells if (r := c.arms[arm].side.na_reasons.get(field))), None)
            out.na_reasons[field] = f"the sweep did not measure {what} {at}" + (f": {own}" if own else "")
