"""Saved races: one JSON record per race under the runs folder, read back by the Replay tab.
(The evaluator, ``python -m demo sweep``, measures afresh and does not read them.)"""

from __future__ import annotations

import re
from pathlib import Path

from demo.files import atomic_write
from demo.results import RaceResult


def run_stem(result: RaceResult) -> str:
    """'20261129T130049396717-json_reformat-simultaneous': when, what, how (saved runs, exported pages)."""
    stamp = result.started_at.strftime("%Y%m%dT%H%M%S%f")
    name = re.sub(r"[^a-z0-9_-]", "", (result.preset or "prompt").lower()) or "prompt"
    return f"{stamp}-{name}-{result.order}"


def save_run(result: RaceResult, runs_dir: Path) -> Path:
    """Write the whole race (request, both event timelines, results); no secrets are in it."""
    runs_dir.mkdir(parents=True, exist_ok=True)
    path = runs_dir / f"{run_stem(result)}.json"
    atomic_write(path, result.model_dump_json(indent=1))  # never a half-written record
    return path


def load_run(path: Path) -> RaceResult:
    return RaceResult.model_validate_json(path.read_text(encoding="utf-8"))


def list_runs(runs_dir: Path) -> list[Path]:
    """Saved runs, newest first."""
    if not runs_dir.is_dir():
        return []
    return sorted(runs_dir.glob("*.json"), reverse=True)
