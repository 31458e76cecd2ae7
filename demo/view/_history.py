"""The history table: one row per race or N-user run, as shown and as CSV."""

from __future__ import annotations

import csv
import io

from pydantic import BaseModel

from demo.fmt import NA, csv_cell, fmt_length, fmt_percent, fmt_rate, fmt_speedup, or_na
from demo.load.engine import UsersRace
from demo.results import (
    RaceResult,
)
from demo.view._common import ORDER_LABELS

# ---------------------------------------------------------------- history

class HistoryRow(BaseModel):
    """One row of the Run history table.

    When, preset, order, temperature, each side's tokens/s, speedup, acceptance, identical text, status.
    """

    started_at: str
    preset: str
    order: str
    temperature: float
    baseline_tokens_per_s: float | None
    speculative_tokens_per_s: float | None
    speedup: float | None
    acceptance_rate: float | None
    mean_acceptance_length: float | None
    identical: str
    status: str
    users: int = 1  # an N-user race: its figures are the step's (per-user decode tokens/s, per-user speedup)


HISTORY_HEADERS = ["time (UTC)", "preset", "order", "T", "baseline tok/s", "speculative tok/s",
                   "speedup", "acceptance", "tokens/step", "identical", "status"]


def history_row(result: RaceResult) -> HistoryRow:
    """The Run history row of a finished race (n/a where a figure is unknown)."""
    spec = result.speculative.spec
    identical = {True: "yes", False: "no", None: NA}[result.identical_text]
    status = {"done": "ok"}.get(result.outcome, result.outcome)
    return HistoryRow(
        started_at=result.started_at.strftime("%H:%M:%S"),
        preset=result.preset or "(free prompt)",
        order=ORDER_LABELS[result.order],
        temperature=result.request.temperature,
        baseline_tokens_per_s=result.baseline.decode_tokens_per_s,
        speculative_tokens_per_s=result.speculative.decode_tokens_per_s,
        speedup=result.speedup,
        acceptance_rate=spec.acceptance_rate if spec else None,
        mean_acceptance_length=spec.mean_acceptance_length if spec else None,
        identical=identical,
        status=status,
    )


def users_history_row(run: UsersRace) -> HistoryRow:
    """An N-user race in the history: the step's per-user figures, its order labelled "N users"."""
    race, step = run.race, run.step
    cell = step.cell
    identical = {True: "yes", False: "no", None: NA}[cell.identical_text]
    status = {"done": "ok"}.get(race.outcome, race.outcome)
    return HistoryRow(
        started_at=race.started_at.strftime("%H:%M:%S"), users=run.users,
        preset=race.preset or "(free prompt)",
        order=f"{ORDER_LABELS[race.order]} · {run.users} users",
        temperature=race.request.temperature,
        baseline_tokens_per_s=step.baseline.per_user_decode_tokens_per_s,
        speculative_tokens_per_s=step.speculative.per_user_decode_tokens_per_s,
        speedup=step.speedup, acceptance_rate=cell.acceptance_rate,
        mean_acceptance_length=cell.mean_acceptance_length, identical=identical, status=status,
    )


def history_table(rows: list[HistoryRow]) -> list[list[str]]:
    """Rows for the on-page table: rounded, n/a where unknown, newest first."""
    return [
        [r.started_at, r.preset, r.order, f"{r.temperature:g}", or_na(fmt_rate(r.baseline_tokens_per_s)),
         or_na(fmt_rate(r.speculative_tokens_per_s)), or_na(fmt_speedup(r.speedup)),
         or_na(fmt_percent(r.acceptance_rate)), or_na(fmt_length(r.mean_acceptance_length)), r.identical, r.status]
        for r in reversed(rows)
    ]


def history_csv(rows: list[HistoryRow]) -> str:
    """Full-precision CSV of the session's runs, oldest first."""
    out = io.StringIO()
    fields = list(HistoryRow.model_fields)
    writer = csv.writer(out)
    writer.writerow(fields)
    for r in rows:
        data = r.model_dump()
        writer.writerow([csv_cell(data[f]) for f in fields])
    return out.getvalue()
