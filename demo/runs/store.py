"""Saved races: one JSON record per race under the runs folder, read back by the Replay tab.
(The evaluator, ``python -m demo sweep``, measures afresh and does not read them.)

A record is a one-user race (RaceResult, as ever) or an N-user race (demo.load.engine.UsersRace,
``"kind": "users"``: user 1's race and the load step). ``read_record`` gives either (older
records, with no ``kind``, are races); ``read_run`` gives the race a run plays back (an N-user
run's user 1), as every caller had it. An N-user run's file name ends in ``-<N>users``; the
booth plays and keeps only one-user races.

A load sweep from the page is saved beside them, a record of kind "load" (demo.load.engine.LoadResult,
every step's figures) named ``<stamp>-<preset>-load.json``: ``read_load`` reads it back;
``read_run`` and ``read_record`` say it is a load sweep, not a race.
"""

from __future__ import annotations

import json
import logging
import re
import time
from pathlib import Path
from typing import NamedTuple

from pydantic import ValidationError

from common.files import atomic_write
from demo.errors import BadInput, NotFound
from demo.fmt import validation_summary
from demo.load.engine import LoadResult, UsersRace
from demo.results import RaceResult

log = logging.getLogger(__name__)

# A saved run's file name, as run_stem writes it ("race": the older name of "simultaneous").
_STEM = re.compile(r"^(?P<stamp>\d{8}T\d{6})\d*-(?P<preset>.+)-(?P<order>simultaneous|sequential|race)"
                   r"(?:-(?P<users>\d+)users)?$")

# A saved run: a one-user race, or an N-user race (user 1's race and the step).
Run = RaceResult | UsersRace
# A saved load sweep's file name, as load_stem writes it.
_LOAD_STEM = re.compile(r"^(?P<stamp>\d{8}T\d{6})\d*-(?P<preset>.+)-load$")


class StemParts(NamedTuple):
    """A saved run's file name split into its parts: UTC stamp, preset slug, order, and users count."""

    stamp: str  # YYYYmmddTHHMMSS, UTC
    preset: str  # as preset_slug wrote it
    order: str
    users: int = 1


class RunTooLarge(BadInput):
    """A run over the size limit: it is not written."""


def run_stem(result: Run) -> str:
    """'20261129T130049396717-json_reformat-simultaneous': when, what, how (saved runs, exported
    pages); an N-user race's ends in '-8users'."""
    stamp = result.started_at.strftime("%Y%m%dT%H%M%S%f")
    users = f"-{result.users}users" if isinstance(result, UsersRace) else ""
    return f"{stamp}-{preset_slug(result.preset or 'prompt')}-{result.order}{users}"


def race_of(run: Run) -> RaceResult:
    """The race a run replays: itself, or an N-user race's user 1."""
    return run.race if isinstance(run, UsersRace) else run


def preset_slug(name: str) -> str:
    """A preset's name as it stands in a run's file name (no character a path could misuse)."""
    return re.sub(r"[^a-z0-9_-]", "", name.lower()) or "prompt"


def stem_parts(path: Path) -> StemParts | None:
    """When, what and how from a saved run's file name; None for a name run_stem did not write."""
    m = _STEM.match(path.stem)
    return StemParts(m["stamp"], m["preset"], m["order"], int(m["users"] or 1)) if m else None


def save_run(result: Run, runs_dir: Path, max_bytes: int | None = None,
             keep_count: int | None = None, keep_days: float | None = None) -> Path:
    """Write the whole race (request, both event timelines, results); no secrets are in it.

    Raises RunTooLarge, writing nothing, when the record is over ``max_bytes``. Then old runs
    are pruned (prune_runs) when ``keep_count`` or ``keep_days`` is set.
    """
    return _write_record(result.model_dump_json(indent=1), runs_dir / f"{run_stem(result)}.json", max_bytes,
                         keep_count, keep_days)


def load_stem(result: LoadResult) -> str:
    """'20261201T130049396717-json_reformat-load': a saved load sweep's name."""
    return f"{result.started_at.strftime('%Y%m%dT%H%M%S%f')}-{preset_slug(result.spec.workload)}-load"


def load_stem_parts(path: Path) -> tuple[str, str] | None:
    """(stamp, preset) from a saved load sweep's file name; None for any other name."""
    m = _LOAD_STEM.match(path.stem)
    return (m["stamp"], m["preset"]) if m else None


def save_load(result: LoadResult, runs_dir: Path, max_bytes: int | None = None,
              keep_count: int | None = None, keep_days: float | None = None) -> Path:
    """Write a load sweep's whole record (its spec and every step) beside the races, as save_run does."""
    return _write_record(result.model_dump_json(indent=1), runs_dir / f"{load_stem(result)}.json", max_bytes,
                         keep_count, keep_days)


def _write_record(record: str, path: Path, max_bytes: int | None, keep_count: int | None,
                  keep_days: float | None) -> Path:
    size = len(record.encode("utf-8"))
    if max_bytes is not None and size > max_bytes:
        raise RunTooLarge(f"the run's record is {size:,} bytes, over the limit of {max_bytes:,} "
                          "(SPECDEMO_MAX_RUN_FILE_BYTES)")
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, record)  # never a half-written record
    prune_runs(path.parent, keep_count, keep_days)
    return path


def _read_bytes(path: Path, max_bytes: int | None, limit: str, what: str) -> bytes:
    if not path.exists():
        raise NotFound(f"{path}: no such file (saved races are under runs/)")
    if not path.is_file():
        raise BadInput(f"{path} is not a file: give one {what} (a .json under runs/)")
    size = path.stat().st_size
    if max_bytes is not None and size > max_bytes:
        raise RunTooLarge(f"{path} is {size / 1e6:.1f} MB, over the {limit} of {max_bytes / 1e6:g} MB")
    try:
        return path.read_bytes()
    except OSError as e:
        raise BadInput(f"cannot read {path}: {e.strerror or e}") from e


def _is_load_record(raw: bytes) -> bool:
    try:
        return bool(json.loads(raw).get("kind") == "load")
    except (ValueError, AttributeError):
        return False


def read_record(path: Path, max_bytes: int | None = None, limit: str = "limit") -> Run:
    """A saved run, validated (runs saved by older versions load too): a RaceResult, or a
    UsersRace for a record of ``"kind": "users"``. NotFound when there is no
    such file; BadInput, one line, when it is not a file, over ``max_bytes`` (checked before it is
    read; ``limit`` names that limit in the message), unreadable, a load sweep, or not a saved race."""
    raw = _read_bytes(path, max_bytes, limit, "saved race")
    try:
        if _is_users(raw):
            return UsersRace.model_validate_json(raw)
        return RaceResult.model_validate_json(raw)
    except ValidationError as e:
        if _is_load_record(raw):
            raise BadInput(f"{path} is a saved load sweep, not a race: its curves and steps are in the "
                           "record (python -m demo load --out writes them as a page)") from e
        raise BadInput(f"{path} is not a saved race: {validation_summary(e, count_rest=True)}") from e


def read_load(path: Path, max_bytes: int | None = None, limit: str = "limit") -> LoadResult:
    """A saved load sweep, validated; NotFound or BadInput (one line) as read_run."""
    raw = _read_bytes(path, max_bytes, limit, "saved load sweep")
    try:
        return LoadResult.model_validate_json(raw)
    except ValidationError as e:
        raise BadInput(f"{path} is not a saved load sweep: {validation_summary(e, count_rest=True)}") from e


def record_from_dump(data: dict) -> Run:
    """A run from its model_dump (the page's last-run state): an N-user race by its ``kind``."""
    if data.get("kind") == "users":
        return UsersRace.model_validate(data)
    return RaceResult.model_validate(data)


def read_run(path: Path, max_bytes: int | None = None, limit: str = "limit") -> RaceResult:
    """A saved run's race (an N-user run's user 1): read_record, for what plays a race back."""
    return race_of(read_record(path, max_bytes, limit))


def _is_users(raw: bytes) -> bool:
    """The record says ``"kind": "users"`` (an N-user race); anything else is read as a race."""
    if b'"kind"' not in raw:  # every one-user race, cheaply
        return False
    try:
        data = json.loads(raw)
    except ValueError:
        return False  # the race's validation says what is wrong with it
    return isinstance(data, dict) and data.get("kind") == "users"


def list_runs(runs_dir: Path) -> list[Path]:
    """Saved runs, newest first."""
    if not runs_dir.is_dir():
        return []
    return sorted(runs_dir.glob("*.json"), reverse=True)


def is_good(result: Run) -> bool:
    """A one-user race worth showing again (the booth's recording): every side finished, nothing
    failed, nobody stopped it. An N-user race never is: the booth races one user."""
    if isinstance(result, UsersRace):
        return False
    return (result.outcome == "done" and result.baseline.complete and result.speculative.complete
            and all(a.side.complete for a in result.arms.values()))


# path -> (size, mtime_ns, good): a saved run never changes, so it is read once per process.
_good_cache: dict[Path, tuple[int, int, bool]] = {}


def good_run(path: Path) -> bool:
    """Whether the saved run at ``path`` is good (is_good); an unreadable file is not."""
    try:
        st = path.stat()
    except OSError:
        return False
    hit = _good_cache.get(path)
    if hit is not None and hit[:2] == (st.st_size, st.st_mtime_ns):
        return hit[2]
    try:
        good = is_good(read_record(path))
    except (OSError, ValueError):  # pydantic's ValidationError is a ValueError
        good = False
    _good_cache[path] = (st.st_size, st.st_mtime_ns, good)
    return good


def newest_good_run(runs_dir: Path, preset: str, order: str = "simultaneous") -> Path | None:
    """The newest good saved run of ``preset`` raced in ``order``: the booth's recording."""
    wanted = preset_slug(preset)
    for path in list_runs(runs_dir):
        parts = stem_parts(path)
        if parts and parts.users == 1 and parts.preset == wanted and parts.order == order and good_run(path):
            return path
    return None


def prune_runs(runs_dir: Path, keep_count: int | None, keep_days: float | None,
               now: float | None = None) -> list[Path]:
    """Delete the oldest runs beyond ``keep_count`` and those older than ``keep_days`` (by file
    time), except the newest good run of each preset; returns what was deleted."""
    if keep_count is None and keep_days is None:
        return []
    now = time.time() if now is None else now
    runs = list_runs(runs_dir)  # newest first
    doomed: list[Path] = []
    for i, path in enumerate(runs):
        too_many = keep_count is not None and i >= keep_count
        try:
            too_old = keep_days is not None and now - path.stat().st_mtime > keep_days * 86400
        except OSError:
            continue
        if too_many or too_old:
            doomed.append(path)
    if not doomed:
        return []
    doomed_set = set(doomed)
    covered: set[str] = set()  # presets whose newest good run is already kept
    removed: list[Path] = []
    for path in runs:  # newest first: the first good run of a preset is the one to keep
        parts = stem_parts(path)
        if parts is not None and parts.users == 1 and parts.preset not in covered and good_run(path):
            covered.add(parts.preset)
            continue
        if path in doomed_set:
            try:
                path.unlink()
                removed.append(path)
                _good_cache.pop(path, None)
            except OSError as e:
                log.warning("could not delete the old run %s: %s", path, e)
    if removed:
        log.info("pruned %d old runs from %s (SPECDEMO_RUNS_KEEP_COUNT=%s, SPECDEMO_RUNS_KEEP_DAYS=%s)",
                 len(removed), runs_dir, keep_count, keep_days)
    return removed
