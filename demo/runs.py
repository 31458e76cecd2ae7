"""Saved races: one JSON record per race under the runs folder, read back by the Replay tab.
(The evaluator, ``python -m demo sweep``, measures afresh and does not read them.)"""

from __future__ import annotations

import re
from pathlib import Path

from demo.files import atomic_write
from demo.results import RaceResult


class RunTooLarge(ValueError):
    """A run over the size limit: it is not written."""


def run_stem(result: RaceResult) -> str:
    """'20261129T130049396717-json_reformat-simultaneous': when, what, how (saved runs, exported pages)."""
    stamp = result.started_at.strftime("%Y%m%dT%H%M%S%f")
    name = re.sub(r"[^a-z0-9_-]", "", (result.preset or "prompt").lower()) or "prompt"
    return f"{stamp}-{name}-{result.order}"


def save_run(result: RaceResult, runs_dir: Path, max_bytes: int | None = None) -> Path:
    """Write the whole race (request, both event timelines, results); no secrets are in it.

    Raises RunTooLarge, writing nothing, when the record is over ``max_bytes``.
    """
    record = result.model_dump_json(indent=1)
    size = len(record.encode("utf-8"))
    if max_bytes is not None and size > max_bytes:
        raise RunTooLarge(f"the run's record is {size:,} bytes, over the limit of {max_bytes:,} "
                          "(SPECDEMO_MAX_RUN_FILE_BYTES)")
    runs_dir.mkdir(parents=True, exist_ok=True)
    path = runs_dir / f"{run_stem(result)}.json"
    atomic_write(path, record)  # never a half-written record
    return path


def load_run(path: Path) -> RaceResult:
    return RaceResult.model_validate_json(path.read_text(encoding="utf-8"))


def list_runs(runs_dir: Path) -> list[Path]:
    """Saved runs, newest first."""
    if not runs_dir.is_dir():
        return []
    return sorted(runs_dir.glob("*.json"), reverse=True)
