"""HAProxy's runtime API over its admin socket (the share, per-server counts) and the canary's event log."""

from __future__ import annotations

import contextlib
import json
import socket
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from servers import procs
from servers.canary._state import ADMIN_TIMEOUT_S, BASELINE_BACKEND, FALLBACK, SPLIT_BACKEND, CanaryError

# ---------------------------------------------------------------- the runtime API (admin socket)

def admin(sock: Path, command: str, timeout_s: float = ADMIN_TIMEOUT_S) -> str:
    """One command on HAProxy's admin socket; its answer. OSError when the router does not answer."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout_s)
        s.connect(str(sock))
        s.sendall(command.encode() + b"\n")
        chunks = []
        while chunk := s.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks).decode(errors="replace")


def read_share(sock: Path) -> int:
    """The speculative server's weight in the split: the share of eligible traffic, in percent."""
    answer = admin(sock, f"get weight {SPLIT_BACKEND}/speculative")
    try:
        return int(answer.split()[0])
    except (IndexError, ValueError):
        raise CanaryError(f"the router's answer to `get weight` is not a weight: {answer[:80]!r}") from None


def set_share(sock: Path, share: int) -> int:
    """Set the share live (both weights) and return the one before. The weight that grows is set
    first, so the split never has both at 0 between the two commands (no request gets a 503)."""
    before = read_share(sock)
    spec = f"set weight {SPLIT_BACKEND}/speculative {share}"
    base = f"set weight {SPLIT_BACKEND}/baseline {100 - share}"
    answer = admin(sock, "; ".join([base, spec] if share < before else [spec, base]))
    if answer.strip():
        raise CanaryError(f"the router refused the weights: {answer.strip()[:200]}")
    return before


def request_counts(sock: Path) -> dict[str, int]:
    """Requests the router sent to each server, and how many were eligible and ineligible."""
    rows = admin(sock, "show stat").splitlines()
    if not rows or not rows[0].startswith("# "):
        raise CanaryError("the router's `show stat` answer has no header line")
    cols = rows[0][2:].split(",")
    px, sv, stot = cols.index("pxname"), cols.index("svname"), cols.index("stot")
    got: dict[tuple[str, str], int] = {}
    for row in rows[1:]:
        f = row.split(",")
        if len(f) > stot:
            got[(f[px], f[sv])] = int(f[stot] or 0)
    split_base = got.get((SPLIT_BACKEND, "baseline"), 0)
    split_spec = got.get((SPLIT_BACKEND, "speculative"), 0)
    fallback = got.get((SPLIT_BACKEND, FALLBACK), 0)
    other = got.get((BASELINE_BACKEND, "baseline"), 0)
    return {"baseline": split_base + fallback + other, "speculative": split_spec,
            "eligible": split_base + fallback + split_spec, "ineligible": other, "fallback": fallback}


# ---------------------------------------------------------------- events (rollbacks, share changes)

def append_event(path: Path, event: dict[str, Any]) -> dict[str, Any]:
    """Add one event (one JSON line) to the canary's events file, stamped with the time; returns it."""
    event = {"at": datetime.now(UTC).isoformat(), **event}
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(event, separators=(",", ":")) + "\n")
    return event


def read_events(path: Path, limit: int = 200) -> list[dict[str, Any]]:
    """The last ``limit`` events (a line that is not JSON is skipped)."""
    events = []
    for line in procs.tail(path, limit).splitlines():
        with contextlib.suppress(ValueError):
            events.append(json.loads(line))
    return events


def parse_share(text: str) -> int:
    """A share in whole percent, 0 to 100; CanaryError in one line otherwise."""
    try:
        value = int(text)
    except ValueError:
        raise CanaryError(f"--share {text}: a whole percentage from 0 to 100") from None
    if not 0 <= value <= 100:
        raise CanaryError(f"--share {value}: outside 0-100 (a percentage of the eligible traffic)")
    return value
