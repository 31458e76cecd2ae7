"""What the tests and the benchmarks both run: the stand-in vLLM server, the app in a subprocess,
headless Chromium's settings and the page-driving helpers, free ports. Imports nothing from tests/."""

from common.paths import ROOT

__all__ = ["ROOT"]  # the repository's root, for harness/'s modules, tests and benchmarks
