"""The repository's root folder, named once for demo/, servers/, harness/, benchmarks/ and tests/."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
"""The repository's root: the folder holding common/, demo/, servers/, presets/ and logs/."""
