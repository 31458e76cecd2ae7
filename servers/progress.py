"""The startup progress display: elapsed time and each server's phase, read from its log tail.

On a terminal one line is redrawn in place; elsewhere (CI logs, pipes) a line is printed when a
phase changes and every 15 s, so a log stays short but shows the launcher is not stuck.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TextIO

from servers.procs import tail

# Checked from the last line of the log backwards: the first match is the current phase.
# Patterns follow vLLM 0.32's log lines; an unknown line keeps the previous phase.
PHASES: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"Starting vLLM server on|Available routes|Application startup complete"), "starting HTTP"),
    (re.compile(r"init engine .* took|Supported tasks"), "engine ready, starting HTTP"),
    (re.compile(r"Warming up done|KV cache size|for KV cache"), "allocating KV cache"),
    (re.compile(r"Warming up model"), "compiling (first start: minutes; cached after)"),
    (re.compile(r"Starting to load model|Loading safetensors|Loading weights|Loading drafter"), "loading weights"),
    (re.compile(r"Initializing a V1 LLM engine|OpenMP thread binding|Initializing"), "starting engine"),
    (re.compile(r"non-default args|Resolved architecture|Using max model len"), "reading config"),
]
# Heartbeat lines that say nothing about the phase.
IGNORE = re.compile(r"shm_broadcast|No available shared memory")


def phase_of(log_path: Path) -> str:
    """The start phase a vLLM server's log shows last (PHASES' names); "starting python" before any."""
    for line in reversed(tail(log_path, 40).splitlines()):
        if IGNORE.search(line):
            continue
        for pattern, name in PHASES:
            if pattern.search(line):
                return name
    return "starting python"


class StartProgress:
    """The launcher's one-line view of each server's start phase, redrawn in place on a terminal.

    Elsewhere (a log, a pipe) it prints a line when a phase changes or every 15 s.
    """
    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.tty = hasattr(out, "isatty") and out.isatty()
        self.phases: dict[str, str] = {}
        self.last_printed: tuple[str, ...] = ()
        self.last_print_s = 0.0
        self.width = 0

    def update(self, role: str, elapsed_s: float, log_path: Path) -> None:
        """Read ``role``'s phase from its log at ``log_path``."""
        self.phases[role] = phase_of(log_path)

    def done(self, role: str, after_s: float) -> None:
        """Mark ``role`` ready after ``after_s`` seconds."""
        self.phases[role] = f"ready after {after_s:.0f} s"

    def render(self, elapsed_s: float) -> None:
        """Show every server's phase at ``elapsed_s`` seconds since the start."""
        line = f"[{elapsed_s:5.0f} s] " + " | ".join(f"{r}: {p}" for r, p in self.phases.items())
        if self.tty:
            pad = max(0, self.width - len(line))
            self.out.write("\r" + line + " " * pad)
            self.out.flush()
            self.width = len(line)
            return
        key = tuple(self.phases.values())
        if key != self.last_printed or elapsed_s - self.last_print_s >= 15:
            print(line, file=self.out, flush=True)
            self.last_printed, self.last_print_s = key, elapsed_s

    def finish(self) -> None:
        """End the in-place line on a terminal, so later output starts on a line of its own."""
        if self.tty and self.width:
            self.out.write("\n")
            self.out.flush()
            self.width = 0
