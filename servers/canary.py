"""python -m servers canary up|status|down [--share P]: HAProxy in front of the pair, rolled back by the guardrails.

A share of the ELIGIBLE traffic goes to the speculative server, the rest and every ineligible
request to the baseline (docs/canary.md). The router is Debian's HAProxy (scripts/install_canary.sh):

- eligibility (common/canary_rules.py, a file the evaluator writes) becomes HAProxy ACLs: a request
  header's value, or a JSON body field's value read with ``option http-buffer-request`` and
  ``json_query``; a rule it cannot express is refused in one line (``expressible``);
- the split is a backend of the two servers with weights share and 100 - share, balanced by
  weighted round robin (deterministic: over N requests the split is within one request of the share);
- ``--share P`` sets both weights live through HAProxy's runtime API (its admin unix socket), no
  restart; ``--share 0`` is the rollback; ``status`` reads the weights and per-server counts back;
- responses are streamed as they come (HAProxy buffers requests only): SSE passes unchanged;
- one log line per request (router.log): request id, backend, status, duration.

With ``--rules FILE`` (the guardrails the evaluator wrote), ``up`` also runs the alert path:
Prometheus (scraping the pair, evaluating the rules with ``--alert-for`` and ``--alert-window``),
Debian's Alertmanager routing every alert to a webhook, and the canary's receiver
(servers/canary_receiver.py) that sets the share to 0 for an alert it knows and logs it. Nothing of
ours reads the metrics. Recovery is manual: ``--share P`` again.

Every process runs in its own session; the state file (RUN_DIR/state.json) names them, and
``down`` stops exactly those.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO
from urllib.parse import urlparse

import httpx
import yaml
from pydantic import BaseModel

from common.canary_rules import (
    ELIGIBILITY_FILE,
    Condition,
    Eligibility,
    EligibilityError,
    default_eligibility,
    read_eligibility,
)
from common.files import atomic_write
from common.paths import ROOT
from common.waiting import held_within
from servers import monitor, procs
from servers.launcher import LauncherError, report_error
from servers.state import read_state

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
# Names HAProxy takes safely in a config line (anything else is refused, never quoted into it).
_HEADER_NAME = re.compile(r"^[A-Za-z0-9-]{1,64}$")
_FIELD = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}(\.[A-Za-z_][A-Za-z0-9_]{0,63}){0,4}$")
_VALUE = re.compile(r"^[A-Za-z0-9_.:/+-]{1,64}$")
_DURATION = re.compile(r"^\d{1,5}(ms|s|m|h)$")
_WINDOW = re.compile(r"\[(\d+(?:ms|s|m|h|d))\]")


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


# ---------------------------------------------------------------- eligibility -> HAProxy ACLs

EXPRESSIBLE = ("header: a request header equal to a value",
               "body: a JSON body field (dotted path) equal to a number, string or boolean")


def _text_value(v: str | int | float | bool | None) -> str | None:
    """The text HAProxy's json_query gives for a JSON value (0.0 -> "0", true -> "1"); None: not a scalar."""
    if isinstance(v, bool):
        return "1" if v else "0"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return str(int(v)) if v.is_integer() else repr(v)
    return v


def expressible(c: Condition) -> str | None:
    """Why HAProxy cannot express ``c`` (one line), or None when it can."""
    value = _text_value(c.equals)
    if c.kind == "header":
        if c.name is None or not _HEADER_NAME.match(c.name):
            return f"header condition needs a header name of letters, digits and '-' (got {c.name!r})"
    elif c.kind == "body":
        if c.field is None or not _FIELD.match(c.field):
            return f"body condition needs a dotted field path such as 'temperature' (got {c.field!r})"
    else:
        what = f" ({c.note})" if c.note else ""
        return (f"a {c.kind!r} condition{what}: HAProxy reads headers and JSON body fields, "
                f"not this; it can express only {'; '.join(EXPRESSIBLE)}")
    if value is None or not _VALUE.match(value):
        return f"{c.kind} condition needs a short value of letters, digits and ._:/+- (got {c.equals!r})"
    return None


def check_eligibility(e: Eligibility) -> None:
    """CanaryError naming the first rule HAProxy cannot express."""
    for rule in e.rules:
        for c in rule.when:
            if (why := expressible(c)) is not None:
                raise CanaryError(f"eligibility rule {rule.name!r} cannot be routed: {why}")


def _acl(c: Condition) -> str:
    value = _text_value(c.equals)
    if c.kind == "header":
        return f"req.hdr({c.name}) -m str {value}"
    return f"req.body,json_query('$.{c.field}') -m str {value}"


def haproxy_config(*, host: str, port: int, admin_socket: Path, baseline: str, speculative: str,
                   share: int, eligibility: Eligibility, metrics_port: int | None = None) -> str:
    """The router's config: eligible requests to the weighted split, the rest to the baseline;
    with ``metrics_port``, HAProxy's built-in Prometheus exporter on it (``/metrics``)."""
    check_eligibility(eligibility)
    acls: list[str] = []
    uses: list[str] = []
    for i, rule in enumerate(eligibility.rules):
        names = []
        for j, c in enumerate(rule.when):
            acls.append(f"    acl r{i}c{j} {_acl(c)}")
            names.append(f"r{i}c{j}")
        uses.append(f"    use_backend {SPLIT_BACKEND} if {' '.join(names)}  # {rule.name}")
    check = "check inter 2s fall 2 rise 2"
    return "\n".join([
        f"# Written by `python -m servers canary up` at {datetime.now(UTC):%Y-%m-%dT%H:%M:%SZ}: do not edit,",
        "# the share lives in the runtime weights (`--share P`), not here.",
        "global",
        "    log stdout format raw local0 info",
        f"    stats socket {admin_socket} mode 600 level admin",
        "    stats timeout 10s",
        "    nbthread 1",
        f"    tune.bufsize {BODY_BUFFER_BYTES}",
        "defaults",
        "    mode http",
        "    log global",
        "    timeout connect 5s",
        f"    timeout client {STREAM_TIMEOUT}",
        f"    timeout server {STREAM_TIMEOUT}",
        "    timeout http-request 30s",
        "    option http-no-delay  # forward each SSE chunk at once (no waiting for a fuller packet)",
        "    retries 2",
        "    option redispatch 1  # a connection refused by one server of the split: retried on the other",
        "    timeout queue 30s",
        "frontend canary",
        f"    bind {host}:{port}",
        "    option http-buffer-request",
        "    unique-id-format %{+X}o%ci%cp%fp%Ts%rt",
        f"    unique-id-header {REQUEST_ID_HEADER}",
        f"    http-response set-header {REQUEST_ID_HEADER} %[unique-id]",
        f"    http-response set-header {BACKEND_HEADER} %s",
        '    log-format "canary rid=%ID backend=%s route=%b status=%ST duration_ms=%Ta bytes=%B %HM %HP"',
        *acls,
        *uses,
        f"    default_backend {BASELINE_BACKEND}",
        f"backend {SPLIT_BACKEND}",
        "    balance roundrobin",
        "    option httpchk GET /health",
        f"    server baseline {_host_port(baseline)} weight {100 - share} {check}",
        # A refused connection marks it down at once (not after the next checks), and the request
        # is retried on the other server, or on the fallback when the share is 100.
        f"    server speculative {_host_port(speculative)} weight {share} {check} "
        "observe layer4 error-limit 1 on-error mark-down",
        # Only when no server of the split can serve (the share at 100 and the speculative down).
        f"    server {FALLBACK} {_host_port(baseline)} backup {check}",
        f"backend {BASELINE_BACKEND}",
        "    option httpchk GET /health",
        f"    server baseline {_host_port(baseline)} {check}",
        *([] if metrics_port is None else [
            "frontend metrics",
            f"    bind {host}:{metrics_port}",
            "    no log",
            "    http-request use-service prometheus-exporter if { path /metrics }",
            "    http-request return status 404",
        ]),
        "",
    ])


def _host_port(url: str) -> str:
    u = urlparse(url)
    if u.scheme != "http" or not u.hostname or not u.port:
        raise CanaryError(f"{url!r}: the canary routes to http://HOST:PORT servers")
    return f"{u.hostname}:{u.port}"


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


# ---------------------------------------------------------------- the alert path (stage rules)

def stage_rules(text: str, *, arm: str, alert_for: str | None, window: str | None) -> tuple[str, list[str]]:
    """The guardrails as the canary's Prometheus loads them, and the alert names it acts on.

    Each rule of ``arm`` keeps its expression and threshold; ``alert_for`` replaces its ``for`` and
    ``window`` every range in its expression (the evaluator writes 10m and 5m: a test or a stage
    wants seconds), and an annotation carries the value that fired it (``{{ $value }}``).
    Rules of other arms are left out: the canary routes to one speculative server.
    """
    try:
        doc = yaml.safe_load(text)
        groups = doc["groups"]
        assert isinstance(groups, list)
    except (yaml.YAMLError, KeyError, TypeError, AssertionError):
        raise CanaryError("the rules file is not a Prometheus rules file (no `groups:` list)") from None
    known: list[str] = []
    kept = []
    for g in groups:
        rules = []
        for r in g.get("rules") or []:
            if "alert" not in r or r.get("labels", {}).get("arm", arm) != arm:
                continue
            r = dict(r)
            if alert_for is not None:
                r["for"] = alert_for
            if window is not None:
                r["expr"] = _WINDOW.sub(f"[{window}]", r["expr"])
            r["annotations"] = {**r.get("annotations", {}), "value": "{{ $value }}"}
            rules.append(r)
            known.append(str(r["alert"]))
        if rules:
            kept.append({**g, "rules": rules})
    if not known:
        raise CanaryError(f"the rules file has no alerting rule for arm {arm!r}: nothing would roll the canary back")
    head = (f"# The guardrails for the canary (arm {arm}): for {alert_for or 'as written'}, "
            f"window {window or 'as written'}; written by `python -m servers canary up`.\n")
    return head + yaml.safe_dump({"groups": kept}, sort_keys=False, width=1000), known


def alertmanager_config(receiver_url: str) -> dict[str, Any]:
    """Every alert to the canary's receiver at once (group_wait 0 s), resolved ones too."""
    return {
        "route": {"receiver": "canary", "group_by": ["alertname", "arm"], "group_wait": "0s",
                  "group_interval": "5s", "repeat_interval": "1h"},
        "receivers": [{"name": "canary", "webhook_configs": [
            {"url": f"{receiver_url}/alert", "send_resolved": True, "max_alerts": 0}]}],
    }


def prometheus_config(baseline: str, speculative: str, arm: str, rules: Path, alertmanager: str,
                      interval_s: int, router_metrics: str | None = None) -> dict[str, Any]:
    """servers/monitor.py's scrape config for the pair (its labels, so the rules' selectors match),
    loading ``rules`` and sending alerts to ``alertmanager``; with ``router_metrics`` (host:port),
    HAProxy's exporter too, as job ``canary-router`` (requests per server: the split as it runs)."""
    if arm == "speculative":  # the pair's own labels: role and arm speculative
        config = monitor.scrape_config({"baseline": [_host_port(baseline)], "speculative": [_host_port(speculative)]},
                                       interval_s=interval_s, rule_files=[str(rules)])
    else:  # a named arm (`up --arms`): role speculative, arm NAME
        config = monitor.scrape_config({"baseline": [_host_port(baseline)]}, {arm: [_host_port(speculative)]},
                                       interval_s=interval_s, rule_files=[str(rules)])
    config["alerting"] = {"alertmanagers": [{"static_configs": [{"targets": [_host_port(alertmanager)]}]}]}
    if router_metrics is not None:
        config["scrape_configs"].append({"job_name": ROUTER_JOB, "scrape_interval": f"{interval_s}s",
                                         "scrape_timeout": f"{max(1, interval_s - 1)}s",
                                         "static_configs": [{"targets": [router_metrics]}]})
    return config


# ---------------------------------------------------------------- up / status / down

def state_path(run_dir: Path) -> Path:
    """The canary's state file in ``run_dir``."""
    return run_dir / "state.json"


def read_canary(run_dir: Path) -> CanaryState | None:
    """The recorded state, or None (no file, or one that does not parse)."""
    try:
        return CanaryState.model_validate_json(state_path(run_dir).read_text())
    except (OSError, ValueError):
        return None


def _alive(p: ProcRecord) -> bool:
    return procs.is_running(p.pid, p.start_ticks)


def pair_urls(pair_run_dir: Path, baseline: str | None, speculative: str | None) -> tuple[str, str]:
    """The pair's URLs: the flags, else the launcher's state file; each must answer /health."""
    if baseline is None or speculative is None:
        state = read_state(pair_run_dir / "state.json")
        found = {r.role: r.url for r in (state.servers if state else [])
                 if r.arm is None and procs.is_running(r.pid, r.start_ticks)}
        baseline = baseline or found.get("baseline")
        speculative = speculative or found.get("speculative")
        if baseline is None or speculative is None:
            raise CanaryError(f"no pair running (no live servers in {pair_run_dir / 'state.json'}): start it with "
                              "`python -m servers up --detach`, or give --baseline-url and --speculative-url")
    for role, url in (("baseline", baseline), ("speculative", speculative)):
        _host_port(url)
        try:
            ok = httpx.get(f"{url}/health", timeout=HEALTH_TIMEOUT_S).status_code == 200
        except httpx.HTTPError:
            ok = False
        if not ok:
            raise CanaryError(f"no pair running: the {role} server at {url} does not answer /health "
                              "(`python -m servers up --detach` starts the pair)")
    return baseline, speculative


def _port_free(host: str, port: int, flag: str) -> None:
    if procs.port_in_use(host, port):
        pid = procs.listener_pid(port)
        who = f" (PID {pid})" if pid else ""
        raise CanaryError(f"port {port} on {host} is in use{who}: choose another with {flag}")


def _binary(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise CanaryError(f"`{name}` is not installed: bash scripts/install_canary.sh (as root), "
                          "or apt-get install haproxy prometheus-alertmanager")
    return path


def _wait_ready(p: ProcRecord, ready: Any, what: str, timeout_s: float = READY_TIMEOUT_S) -> None:
    def up() -> bool:
        if not _alive(p):
            last = procs.tail(p.log_path, 3).replace("\n", " | ")[-300:]
            raise CanaryError(f"{what} exited at start (log {p.log_path}): {last}")
        with contextlib.suppress(OSError, httpx.HTTPError):
            return bool(ready())
        return False

    if not held_within(up, timeout_s):
        raise CanaryError(f"{what} not ready within {timeout_s:g} s (log {p.log_path})")


def _http_ready(url: str) -> bool:
    return httpx.get(url, timeout=2.0).status_code == 200


def _spawn(name: str, cmd: list[str], run_dir: Path, url: str) -> ProcRecord:
    log = run_dir / f"{name}.log"
    proc = procs.spawn(cmd, dict(os.environ), log, cwd=ROOT)
    ticks = procs.start_ticks(proc.pid)
    if ticks is None:  # gone already: _wait_ready reports its log
        ticks = -1
    return ProcRecord(name=name, pid=proc.pid, pgid=proc.pid, start_ticks=ticks, log_path=log, url=url)


def up(args: argparse.Namespace, out: TextIO = sys.stdout) -> int:
    """Start the router (and the receiver; with --rules, Prometheus and Alertmanager too)."""
    run_dir: Path = args.run_dir
    share = parse_share(args.share if args.share is not None else "0")
    old = read_canary(run_dir)
    if old is not None and any(_alive(p) for p in old.processes):
        raise CanaryError(f"a canary is already running ({old.router_url}): `python -m servers canary down` first")
    eligibility = read_eligibility(args.eligibility) if args.eligibility else default_eligibility()
    check_eligibility(eligibility)
    haproxy = _binary("haproxy")
    baseline, speculative = pair_urls(args.pair_run_dir, args.baseline_url, args.speculative_url)
    host = args.host
    _port_free(host, args.port, "--port")
    _port_free(host, args.receiver_port, "--receiver-port")
    _port_free(host, args.metrics_port, "--metrics-port")
    rules_text: str | None = None
    known: list[str] = []
    if args.rules is not None:
        try:
            if args.rules.stat().st_size > MAX_RULES_BYTES:
                raise CanaryError(f"{args.rules} is over 1 MB: not a rules file")
            raw = args.rules.read_text()
        except OSError as e:
            raise CanaryError(f"cannot read {args.rules}: {e.strerror or e}") from None
        rules_text, known = stage_rules(raw, arm=args.arm, alert_for=args.alert_for, window=args.alert_window)
        _binary("prometheus")
        _binary("prometheus-alertmanager")
        _port_free(host, args.prometheus_port, "--prometheus-port")
        _port_free(host, args.alertmanager_port, "--alertmanager-port")

    run_dir.mkdir(parents=True, exist_ok=True)
    sock = run_dir.resolve() / "admin.sock"
    if len(str(sock)) > MAX_SOCKET_PATH:  # the kernel's limit for a unix socket's path (108 bytes)
        raise CanaryError(f"--run-dir {run_dir}: too deep for HAProxy's admin socket ({len(str(sock))} > "
                          f"{MAX_SOCKET_PATH} characters); choose a shorter one")
    sock.unlink(missing_ok=True)
    cfg = run_dir / "haproxy.cfg"
    atomic_write(cfg, haproxy_config(host=host, port=args.port, admin_socket=sock, baseline=baseline,
                                     speculative=speculative, share=share, eligibility=eligibility,
                                     metrics_port=args.metrics_port))
    atomic_write(run_dir / ELIGIBILITY_FILE, eligibility.model_dump_json(indent=2))
    checked = subprocess.run([haproxy, "-c", "-q", "-f", str(cfg)], capture_output=True, text=True, timeout=30)
    if checked.returncode != 0:
        raise CanaryError(f"HAProxy refused the generated config {cfg}: "
                          f"{(checked.stderr or checked.stdout).strip().splitlines()[-1][:200]}")
    state = CanaryState(
        started_at=datetime.now(UTC), router_url=f"http://{host}:{args.port}", admin_socket=sock,
        router_metrics_url=f"http://{host}:{args.metrics_port}/metrics",
        baseline_url=baseline, speculative_url=speculative, arm=args.arm, eligibility=eligibility,
        known_alerts=known, alert_for=args.alert_for, alert_window=args.alert_window,
        events_path=run_dir / "events.jsonl", processes=[])
    try:
        router = _spawn("router", [haproxy, "-db", "-f", str(cfg)], run_dir, state.router_url)
        state.processes.append(router)
        _wait_ready(router, lambda: "Name: HAProxy" in admin(sock, "show info", 1.0), "HAProxy")
        receiver_url = f"http://{host}:{args.receiver_port}"
        receiver = _spawn("receiver", [sys.executable, "-m", "servers.canary_receiver", "--run-dir", str(run_dir),
                                       "--host", host, "--port", str(args.receiver_port)], run_dir, receiver_url)
        state.processes.append(receiver)
        atomic_write(state_path(run_dir), state.model_dump_json(indent=2))  # the receiver reads it
        _wait_ready(receiver, lambda: _http_ready(f"{receiver_url}/health"), "the alert receiver")
        if rules_text is not None:
            _start_alert_path(args, state, rules_text, receiver_url, baseline, speculative)
        atomic_write(state_path(run_dir), state.model_dump_json(indent=2))
        append_event(state.events_path, {"kind": "share", "share_before": None, "share_after": share, "by": "up"})
    except BaseException:
        _stop_all(state)
        state_path(run_dir).unlink(missing_ok=True)
        raise
    print(f"canary up: router {state.router_url} (HAProxy PID {router.pid}), share {share}% of eligible "
          f"traffic to {speculative}, the rest to {baseline}", file=out)
    print(f"eligible: {_rules_text(eligibility)}", file=out)
    if known:
        print(f"rollback: Prometheus {state.processes[-1].url} -> Alertmanager {state.processes[-2].url} -> "
              f"{receiver_url}/alert on {', '.join(known)} (for {args.alert_for or 'as written'}, window "
              f"{args.alert_window or 'as written'}); recovery is manual: --share P", file=out)
    else:
        print(f"rollback: no --rules, no alert path started; the receiver {receiver_url}/alert knows no alert",
              file=out)
    if not args.foreground:
        print(f"logs: {run_dir}; stop with `python -m servers canary down`", file=out)
        return 0
    print(f"logs: {run_dir}; in the foreground: Ctrl-C or SIGTERM stops it", file=out, flush=True)
    return _foreground(state, out)


def _foreground(state: CanaryState, out: TextIO) -> int:
    """Stay until SIGTERM or Ctrl-C, or until a process of the canary exits; then stop them all
    (a container's main process: compose's `canary` profile)."""
    def stop(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    gone: list[ProcRecord] = []
    try:
        while not (gone := [p for p in state.processes if not _alive(p)]):
            time.sleep(1.0)
    except KeyboardInterrupt:
        pass
    said = _stop_all(state)
    state_path(state.events_path.parent).unlink(missing_ok=True)
    for p in gone:
        print(f"{p.name} exited (log {p.log_path}): {procs.tail(p.log_path, 1)[-200:]}", file=out)
    print("canary stopped: " + ("; ".join(said) or "nothing left running"), file=out)
    return 1 if gone else 0


def _start_alert_path(args: argparse.Namespace, state: CanaryState, rules_text: str, receiver_url: str,
                      baseline: str, speculative: str) -> None:
    run_dir: Path = args.run_dir
    host = args.host
    am_url = f"http://{host}:{args.alertmanager_port}"
    (run_dir / "alertmanager.yml").write_text(yaml.safe_dump(alertmanager_config(receiver_url), sort_keys=False))
    am = _spawn("alertmanager", [_binary("prometheus-alertmanager"),
                                 f"--config.file={run_dir / 'alertmanager.yml'}",
                                 f"--storage.path={run_dir / 'alertmanager-data'}",
                                 f"--web.listen-address={host}:{args.alertmanager_port}",
                                 "--cluster.listen-address="], run_dir, am_url)
    state.processes.append(am)
    rules = run_dir / "guardrails.rules.yml"
    atomic_write(rules, rules_text)
    prom_url = f"http://{host}:{args.prometheus_port}"
    reach = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
    config = prometheus_config(baseline, speculative, args.arm, rules, am_url, args.scrape_interval,
                               router_metrics=f"{reach}:{args.metrics_port}")
    (run_dir / "prometheus.yml").write_text(monitor.config_text(config))
    prom = _spawn("prometheus", [_binary("prometheus"), f"--config.file={run_dir / 'prometheus.yml'}",
                                 f"--storage.tsdb.path={run_dir / 'prometheus-data'}",
                                 "--storage.tsdb.retention.time=1d",
                                 f"--web.listen-address={host}:{args.prometheus_port}"], run_dir, prom_url)
    state.processes.append(prom)
    _wait_ready(am, lambda: _http_ready(f"{am_url}/-/ready"), "Alertmanager")
    _wait_ready(prom, lambda: _http_ready(f"{prom_url}/-/ready"), "Prometheus")


def _rules_text(e: Eligibility) -> str:
    def cond(c: Condition) -> str:
        return f"header {c.name}: {c.equals}" if c.kind == "header" else f"body {c.field} = {c.equals}"
    return " or ".join(f"{r.name} ({' and '.join(cond(c) for c in r.when)})" for r in e.rules)


def _stop_all(state: CanaryState) -> list[str]:
    said = []
    for p in reversed(state.processes):  # the alert path first, the router last
        if _alive(p):
            said.append(f"{p.name} PID {p.pid}: {procs.stop_group(p.pgid, STOP_TIMEOUT_S)}")
    return said


def down(run_dir: Path, out: TextIO = sys.stdout) -> int:
    """Stop every process this canary started (the pair keeps running)."""
    state = read_canary(run_dir)
    if state is None:
        print(f"no canary is running (no state file at {state_path(run_dir)})", file=out)
        return 0
    said = _stop_all(state)
    state_path(run_dir).unlink(missing_ok=True)
    state.admin_socket.unlink(missing_ok=True)
    print("canary down: " + ("; ".join(said) if said else "its processes were already gone"), file=out)
    return 0


def _running(run_dir: Path) -> CanaryState:
    state = read_canary(run_dir)
    if state is None or not any(p.name == "router" and _alive(p) for p in state.processes):
        raise CanaryError(f"no canary is running (state file {state_path(run_dir)}): `python -m servers canary up`")
    return state


def status_data(run_dir: Path) -> dict[str, Any]:
    """What a view needs: the share, per-backend counts, the last rollback and the alert path."""
    state = _running(run_dir)
    events = read_events(state.events_path)
    rollbacks = [e for e in events if e.get("kind") == "rollback"]
    return {
        "router_url": state.router_url,
        "router_metrics_url": state.router_metrics_url,
        "share_percent": read_share(state.admin_socket),
        "requests": request_counts(state.admin_socket),
        "baseline_url": state.baseline_url,
        "speculative_url": state.speculative_url,
        "eligibility": [r.model_dump(exclude_none=True) for r in state.eligibility.rules],
        "known_alerts": state.known_alerts,
        "alert_for": state.alert_for,
        "alert_window": state.alert_window,
        "last_rollback": rollbacks[-1] if rollbacks else None,
        "last_event": events[-1] if events else None,
        "processes": {p.name: {"pid": p.pid, "url": p.url, "running": _alive(p), "log": str(p.log_path)}
                      for p in state.processes},
        "started_at": state.started_at.isoformat(),
    }


def status(run_dir: Path, as_json: bool, out: TextIO = sys.stdout) -> int:
    """Print the canary's share, counts and last rollback (``--json``: the same as one object)."""
    data = status_data(run_dir)
    if as_json:
        print(json.dumps(data, indent=2), file=out)
        return 0
    n = data["requests"]
    print(f"canary {data['router_url']}: share {data['share_percent']}% of eligible traffic to speculative", file=out)
    print(f"requests: baseline {n['baseline']}, speculative {n['speculative']} "
          f"(eligible {n['eligible']}, ineligible {n['ineligible']})", file=out)
    rb = data["last_rollback"]
    print("last rollback: " + (f"{rb['at']} on {rb['alert']} (value {rb.get('value', 'n/a')}), share "
                               f"{rb['share_before']}% -> 0%" if rb else "none"), file=out)
    for name, p in data["processes"].items():
        print(f"  {name}: PID {p['pid']} {'running' if p['running'] else 'GONE'} {p['url']}", file=out)
    return 0


def change_share(run_dir: Path, share: int, out: TextIO = sys.stdout, by: str = "cli") -> int:
    """Set the share live; ``--share 0`` is the rollback, logged as a manual one; ``by`` names who
    changed it in the event (``cli``, or ``page`` for the page's canary view)."""
    state = _running(run_dir)
    before = set_share(state.admin_socket, share)
    append_event(state.events_path, {"kind": "share", "share_before": before, "share_after": share, "by": by})
    print(f"share {before}% -> {share}% of eligible traffic to speculative (live, no restart)", file=out)
    return 0


def parse_share(text: str) -> int:
    """A share in whole percent, 0 to 100; CanaryError in one line otherwise."""
    try:
        value = int(text)
    except ValueError:
        raise CanaryError(f"--share {text}: a whole percentage from 0 to 100") from None
    if not 0 <= value <= 100:
        raise CanaryError(f"--share {value}: outside 0-100 (a percentage of the eligible traffic)")
    return value


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


if __name__ == "__main__":
    sys.exit(main())
