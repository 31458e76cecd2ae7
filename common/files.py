"""Writing files so that a reader (or a Ctrl-C, or a crash) never sees half of one."""

from __future__ import annotations

import os
from pathlib import Path


def atomic_write(path: Path, text: str | bytes) -> None:
    """Write ``text`` (UTF-8; bytes as they are) to a temporary file beside ``path``, then rename it over ``path``."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        if isinstance(text, bytes):
            tmp.write_bytes(text)
        else:
            tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    except OSError:
        tmp.unlink(missing_ok=True)
        raise
