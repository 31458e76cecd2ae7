"""What both command lines share (``python -m demo race`` and ``sweep``): the usage error and
the argument helpers. A leaf: it imports no other CLI, so neither CLI imports the other's module
for these.
"""

from __future__ import annotations

import argparse
from typing import Any

from demo.settings import Settings


class UsageError(Exception):
    """Bad arguments: exit code 2 with this message."""


def add_server_args(p: argparse.ArgumentParser) -> None:
    """--baseline-url and --speculative-url, defaulting to the settings (environment)."""
    p.add_argument("--baseline-url", help="default: SPECDEMO_BASELINE_URL or http://127.0.0.1:8000")
    p.add_argument("--speculative-url", help="default: SPECDEMO_SPECULATIVE_URL or http://127.0.0.1:8001")


def settings_from_args(args: argparse.Namespace) -> Settings:
    """Settings from the environment, with the server URLs given on the command line."""
    overrides = {k: v for k, v in (("baseline_url", args.baseline_url), ("speculative_url", args.speculative_url)) if v}
    return Settings(**overrides)


def parse_numbers(text: str, kind: type, what: str) -> list[Any]:
    """Comma-separated numbers of ``kind`` for the flag ``--what``; UsageError when not."""
    try:
        values = [kind(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise UsageError(f"--{what} must be comma-separated numbers, got {text!r}") from None
    if not values:
        raise UsageError(f"--{what} is empty")
    return values
