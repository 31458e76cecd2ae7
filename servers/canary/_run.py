"""up, status, down and the live share: the canary's processes, each in its own session."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

import httpx
import yaml

from common.canary_rules import (
    ELIGIBILITY_FILE,
    Condition,
    Eligibility,
    default_eligibility,
    read_eligibility,
)
from common.files import atomic_write
from common.paths import ROOT
from common.waiting import held_within
from servers import monitor, procs
from servers.canary._admin import admin, append_event, parse_share, read_events, read_share, request_counts, set_share
from servers.canary._alerts import alertmanager_config, prometheus_config, stage_rules
from servers.canary._haproxy import check_eligibility, haproxy_config, host_port
from servers.canary._state import (
    HEALTH_TIMEOUT_S,
    MAX_RULES_BYTES,
    MAX_SOCKET_PATH,
    READY_TIMEOUT_S,
    STOP_TIMEOUT_S,
    CanaryError,
    CanaryState,
    ProcRecord,
)
from servers.state import read_state

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
        host_port(url)
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


@dataclass
class _Plan:
    """What ``up`` checked before it writes or starts anything."""

    share: int
    eligibility: Eligibility
    haproxy: str  # its binary
    baseline: str
    speculative: str
    rules_text: str | None  # the staged guardrails (--rules), or None: no alert path
    known: list[str]  # the alerts the receiver acts on


def _plan(args: argparse.Namespace) -> _Plan:
    """Every check of ``up`` that needs nothing started: no canary running, the eligibility, the
    binaries, the pair, the ports, the rules; CanaryError in one line on the first that fails."""
    share = parse_share(args.share if args.share is not None else "0")
    old = read_canary(args.run_dir)
    if old is not None and any(_alive(p) for p in old.processes):
        raise CanaryError(f"a canary is already running ({old.router_url}): `python -m servers canary down` first")
    eligibility = read_eligibility(args.eligibility) if args.eligibility else default_eligibility()
    check_eligibility(eligibility)
    haproxy = _binary("haproxy")
    baseline, speculative = pair_urls(args.pair_run_dir, args.baseline_url, args.speculative_url)
    for port, flag in ((args.port, "--port"), (args.receiver_port, "--receiver-port"),
                       (args.metrics_port, "--metrics-port")):
        _port_free(args.host, port, flag)
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
        _port_free(args.host, args.prometheus_port, "--prometheus-port")
        _port_free(args.host, args.alertmanager_port, "--alertmanager-port")
    return _Plan(share, eligibility, haproxy, baseline, speculative, rules_text, known)


def _write_router_config(args: argparse.Namespace, plan: _Plan) -> tuple[Path, Path]:
    """The run dir's HAProxy config (checked by ``haproxy -c``) and eligibility file: (admin socket, config)."""
    run_dir: Path = args.run_dir
    run_dir.mkdir(parents=True, exist_ok=True)
    sock = run_dir.resolve() / "admin.sock"
    if len(str(sock)) > MAX_SOCKET_PATH:  # the kernel's limit for a unix socket's path (108 bytes)
        raise CanaryError(f"--run-dir {run_dir}: too deep for HAProxy's admin socket ({len(str(sock))} > "
                          f"{MAX_SOCKET_PATH} characters); choose a shorter one")
    sock.unlink(missing_ok=True)
    cfg = run_dir / "haproxy.cfg"
    atomic_write(cfg, haproxy_config(host=args.host, port=args.port, admin_socket=sock, baseline=plan.baseline,
                                     speculative=plan.speculative, share=plan.share, eligibility=plan.eligibility,
                                     metrics_port=args.metrics_port))
    atomic_write(run_dir / ELIGIBILITY_FILE, plan.eligibility.model_dump_json(indent=2))
    checked = subprocess.run([plan.haproxy, "-c", "-q", "-f", str(cfg)], capture_output=True, text=True, timeout=30)
    if checked.returncode != 0:
        raise CanaryError(f"HAProxy refused the generated config {cfg}: "
                          f"{(checked.stderr or checked.stdout).strip().splitlines()[-1][:200]}")
    return sock, cfg


def _start_processes(args: argparse.Namespace, plan: _Plan, state: CanaryState, cfg: Path) -> str:
    """The router, the receiver and (with rules) the alert path, each waited for; the receiver's URL.
    On any failure every process started is stopped and the state file removed."""
    run_dir: Path = args.run_dir
    try:
        router = _spawn("router", [plan.haproxy, "-db", "-f", str(cfg)], run_dir, state.router_url)
        state.processes.append(router)
        _wait_ready(router, lambda: "Name: HAProxy" in admin(state.admin_socket, "show info", 1.0), "HAProxy")
        receiver_url = f"http://{args.host}:{args.receiver_port}"
        receiver = _spawn("receiver", [sys.executable, "-m", "servers.canary_receiver", "--run-dir", str(run_dir),
                                       "--host", args.host, "--port", str(args.receiver_port)], run_dir, receiver_url)
        state.processes.append(receiver)
        atomic_write(state_path(run_dir), state.model_dump_json(indent=2))  # the receiver reads it
        _wait_ready(receiver, lambda: _http_ready(f"{receiver_url}/health"), "the alert receiver")
        if plan.rules_text is not None:
            _start_alert_path(args, state, plan.rules_text, receiver_url, plan.baseline, plan.speculative)
        atomic_write(state_path(run_dir), state.model_dump_json(indent=2))
        append_event(state.events_path, {"kind": "share", "share_before": None, "share_after": plan.share,
                                         "by": "up"})
    except BaseException:
        _stop_all(state)
        state_path(run_dir).unlink(missing_ok=True)
        raise
    return receiver_url


def up(args: argparse.Namespace, out: TextIO = sys.stdout) -> int:
    """Start the router (and the receiver; with --rules, Prometheus and Alertmanager too)."""
    plan = _plan(args)
    sock, cfg = _write_router_config(args, plan)
    host, run_dir = args.host, args.run_dir
    state = CanaryState(
        started_at=datetime.now(UTC), router_url=f"http://{host}:{args.port}", admin_socket=sock,
        router_metrics_url=f"http://{host}:{args.metrics_port}/metrics",
        baseline_url=plan.baseline, speculative_url=plan.speculative, arm=args.arm, eligibility=plan.eligibility,
        known_alerts=plan.known, alert_for=args.alert_for, alert_window=args.alert_window,
        events_path=run_dir / "events.jsonl", processes=[])
    receiver_url = _start_processes(args, plan, state, cfg)
    print(f"canary up: router {state.router_url} (HAProxy PID {state.processes[0].pid}), share {plan.share}% of "
          f"eligible traffic to {plan.speculative}, the rest to {plan.baseline}", file=out)
    print(f"eligible: {_rules_text(plan.eligibility)}", file=out)
    if plan.known:
        print(f"rollback: Prometheus {state.processes[-1].url} -> Alertmanager {state.processes[-2].url} -> "
              f"{receiver_url}/alert on {', '.join(plan.known)} (for {args.alert_for or 'as written'}, window "
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
