"""The canary's command line (``python -m servers canary``, or ``python -m servers.canary``)."""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import TextIO

from common.canary_rules import (
    ELIGIBILITY_FILE,
    EligibilityError,
)
from servers.canary._admin import parse_share
from servers.canary._run import change_share, down, status, up
from servers.canary._state import (
    ALERTMANAGER_PORT,
    DESCRIPTION,
    METRICS_PORT,
    PAIR_RUN_DIR,
    PROMETHEUS_PORT,
    RECEIVER_PORT,
    ROUTER_PORT,
    RUN_DIR,
    CanaryError,
)
from servers.launcher import LauncherError, report_error

_DURATION = re.compile(r"^\d{1,5}(ms|s|m|h)$")  # a Prometheus duration, as --alert-for takes it


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The canary's flags (``python -m servers canary -h``)."""
    p.add_argument("action", nargs="?", choices=["up", "status", "down"],
                   help="up: start the router; status: the share and counts; down: stop it; "
                        "none with --share: set the share live")
    p.add_argument("--share", help="percent of eligible traffic to the speculative server (0-100; 0 is the rollback)")
    p.add_argument("--run-dir", type=Path, default=RUN_DIR, help="logs, config and state (default: logs/canary)")
    p.add_argument("--json", action="store_true", help="status as JSON")
    p.add_argument("--foreground", action="store_true",
                   help="up: stay until Ctrl-C or SIGTERM, then stop everything (a container's main process)")
    p.add_argument("--host", default="127.0.0.1", help="where the router and its helpers listen")
    p.add_argument("--port", type=int, default=ROUTER_PORT, help=f"the router's port (default {ROUTER_PORT})")
    p.add_argument("--receiver-port", type=int, default=RECEIVER_PORT)
    p.add_argument("--metrics-port", type=int, default=METRICS_PORT, help="HAProxy's Prometheus exporter")
    p.add_argument("--prometheus-port", type=int, default=PROMETHEUS_PORT)
    p.add_argument("--alertmanager-port", type=int, default=ALERTMANAGER_PORT)
    p.add_argument("--pair-run-dir", type=Path, default=PAIR_RUN_DIR,
                   help="`python -m servers up`'s run dir, whose state names the pair (default: logs/servers)")
    p.add_argument("--baseline-url", help="the baseline server (default: from the pair's state)")
    p.add_argument("--speculative-url", help="the speculative server (default: from the pair's state)")
    p.add_argument("--arm", default="speculative", help="the speculative server's arm label in the rules")
    p.add_argument("--eligibility", type=Path, help=f"an eligibility file ({ELIGIBILITY_FILE}; default: the "
                                                    "client's x-specdemo-eligible: 1 header)")
    p.add_argument("--rules", type=Path, help="guardrails rules file: start Prometheus + Alertmanager for the rollback")
    p.add_argument("--alert-for", help="override each rule's `for` (e.g. 15s on stage; the file says 10m)")
    p.add_argument("--alert-window", help="override each rule's rate window (e.g. 30s; the file says 5m)")
    p.add_argument("--scrape-interval", type=int, default=1, help="Prometheus scrape and evaluation interval, s")


def run(args: argparse.Namespace, out: TextIO = sys.stdout) -> int:
    """Dispatch ``python -m servers canary``; errors are one line on stderr (exit 1)."""
    # Absolute: the receiver and Prometheus run from the repository's root, not from this directory.
    args.run_dir = args.run_dir.resolve()
    try:
        for flag in ("alert_for", "alert_window"):
            v = getattr(args, flag)
            if v is not None and not _DURATION.match(v):
                raise CanaryError(f"--{flag.replace('_', '-')} {v}: a Prometheus duration such as 15s or 2m")
        if args.action == "up":
            return up(args, out)
        if args.action == "down":
            return down(args.run_dir, out)
        if args.action == "status":
            return status(args.run_dir, args.json, out)
        if args.share is None:
            raise CanaryError("say what to do: up, status, down, or --share P")
        return change_share(args.run_dir, parse_share(args.share), out)
    except (EligibilityError, OSError) as e:
        return report_error(CanaryError(str(e)))
    except (LauncherError, KeyboardInterrupt) as e:
        return report_error(e)


def main(argv: list[str] | None = None) -> int:
    """``python -m servers.canary ...`` (the same as ``python -m servers canary ...``)."""
    p = argparse.ArgumentParser(prog="python -m servers canary", description=DESCRIPTION)
    add_arguments(p)
    return run(p.parse_args(argv))
