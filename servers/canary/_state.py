"""The canary's constants (ports, backends, timeouts), its error and its state file's models."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from pydantic import BaseModel

from common.canary_rules import (
    Eligibility,
)
from common.paths import ROOT
from servers.launcher import LauncherError

DESCRIPTION = "A canary: HAProxy sends a share of the eligible traffic to the speculative server."
RUN_DIR = ROOT / "logs" / "canary"
PAIR_RUN_DIR = ROOT / "logs" / "servers"  # `python -m servers up`'s run dir (its state.json)
ROUTER_PORT = 8090
RECEIVER_PORT = 8091
METRICS_PORT = 8092  # HAProxy's own Prometheus exporter: requests and response times per server
PROMETHEUS_PORT = 9092  # not 9090: `python -m servers monitor` and compose take that one
ALERTMANAGER_PORT = 9093
ROUTER_JOB = "canary-router"  # the router's exporter in the canary's Prometheus
SPLIT_BACKEND = "split"  # eligible requests: baseline and speculative, weighted by the share
BASELINE_BACKEND = "baseline_only"  # ineligible requests
FALLBACK = "baseline-fallback"  # the baseline as the split's backup server
REQUEST_ID_HEADER = "x-specdemo-request-id"
BACKEND_HEADER = "x-specdemo-backend"  # which server answered (baseline or speculative)
# A body bigger than this is judged on its first bytes: truncated JSON matches no body rule, so
# the request goes to the baseline (the safe side).
BODY_BUFFER_BYTES = 128 * 1024
STREAM_TIMEOUT = "15m"  # HAProxy's client and server idle timeouts: a long stream's pauses fit
ADMIN_TIMEOUT_S = 5.0
READY_TIMEOUT_S = 30.0
HEALTH_TIMEOUT_S = 3.0
STOP_TIMEOUT_S = 10.0
MAX_RULES_BYTES = 1024 * 1024
MAX_SOCKET_PATH = 100


class CanaryError(LauncherError):
    """A one-line message: what is wrong and what to do (exit 1, as the launcher's errors)."""


class ProcRecord(BaseModel):
    """One process the canary started: its name, PID, process group, start ticks, log and URL."""

    name: str
    pid: int
    pgid: int
    start_ticks: int
    log_path: Path
    url: str


class CanaryState(BaseModel):
    """The canary's state file: its processes, the pair it fronts, its rules and alert settings."""

    started_at: datetime
    router_url: str
    router_metrics_url: str | None = None  # HAProxy's Prometheus exporter
    admin_socket: Path
    baseline_url: str
    speculative_url: str
    arm: str
    eligibility: Eligibility
    known_alerts: list[str] = []
    alert_for: str | None = None
    alert_window: str | None = None
    events_path: Path
    processes: list[ProcRecord]
