"""What the tests and the benchmarks both run: the stand-in vLLM server, the app in a subprocess,
headless Chromium's settings and the page-driving helpers, free ports. Imports nothing from tests/."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]  # the repository
