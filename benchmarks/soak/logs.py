"""The app's ``booth-race {json}`` log lines: each race of the rotation as the soak reads it, and
a growing log file read line by line."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

MARKER = "booth-race "


class BoothRace(BaseModel):
    """One ``booth-race`` log line of the app (one race of the rotation, when it ended)."""

    model_config = ConfigDict(extra="ignore")

    n: int
    preset: str
    source: Literal["live", "recording", "none"]
    outcome: Literal["done", "error", "stopped"] | None = None
    speedup: float | None = None
    saved: str | None = None
    started_at: datetime
    ended_at: datetime
    note: str | None = None

    @field_validator("started_at", "ended_at")
    @classmethod
    def _utc(cls, v: datetime) -> datetime:
        return v.replace(tzinfo=UTC) if v.tzinfo is None else v


class RaceSeen(BoothRace):
    """A booth race as the soak saw it: when its line was read and whether its saved file was there."""

    seen_at: datetime
    saved_found: bool | None = None  # None: nothing to look for (a recording, or nothing saved)


def parse_booth_line(line: str) -> BoothRace | None:
    """The race of a ``booth-race {json}`` line (any logging prefix before it); None for any other
    line. A marked line whose JSON is broken or incomplete raises ValueError."""
    at = line.find(MARKER + "{")
    if at < 0:
        return None
    text = line[at + len(MARKER):]
    try:
        obj, _ = json.JSONDecoder().raw_decode(text)
        return BoothRace.model_validate(obj)
    except (ValueError, ValidationError) as e:
        raise ValueError(f"unreadable booth-race line ({type(e).__name__}): {text.strip()[:200]}") from None


class LogTail:
    """New complete lines of a growing file, from where the last call stopped."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._pos = 0
        self._partial = ""

    def lines(self) -> list[str]:
        try:
            with open(self.path, encoding="utf-8", errors="replace") as f:
                f.seek(self._pos)
                chunk = f.read()
                self._pos = f.tell()
        except OSError:
            return []
        text = self._partial + chunk
        *done, self._partial = text.split("\n")
        return done


def saved_path(runs_dir: Path, saved: str) -> Path:
    p = Path(saved)
    return p if p.is_absolute() else runs_dir / p
