"""Saving a finished race (one user, or N users: demo.load.engine.UsersRace) or a load sweep from the
page, when the settings say so: a failure to save is logged and noted on the status line, never
fatal on stage.
"""

from __future__ import annotations

import asyncio
import logging
from typing import NamedTuple

from demo.load.engine import LoadResult
from demo.runs.store import Run, RunTooLarge, save_load, save_run
from demo.settings import Settings

log = logging.getLogger(__name__)


class Saved(NamedTuple):
    """Where a run was saved (its file name), or why it was not (a note for the status line)."""

    name: str | None = None
    note: str | None = None


async def save(result: Run | LoadResult, settings: Settings) -> Saved:
    """Save the run (a race, or a load sweep: demo.runs.store.save_load) when settings say so; a failure
    to save is logged, never fatal on stage."""
    if not settings.save_runs:
        return Saved()
    args = (settings.runs_dir, settings.max_run_file_bytes, settings.runs_keep_count, settings.runs_keep_days)
    try:
        if isinstance(result, LoadResult):
            path = await asyncio.to_thread(save_load, result, *args)
        else:
            path = await asyncio.to_thread(save_run, result, *args)
    except RunTooLarge as e:
        log.warning("run not saved: %s", e)
        return Saved(note=f"run not saved: {e}")
    except OSError as e:
        log.warning("could not save the run to %s: %s", settings.runs_dir, e)
        return Saved()
    return Saved(name=path.name)
