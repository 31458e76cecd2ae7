"""up: start the planned servers, each in its own process group, wait for /health with a progress
line, warm them up, write the state file; on any failure stop what was started."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal, TextIO

from servers import procs
from servers.arms import get_arm_config
from servers.launcher._plan import (
    LauncherError,
    Plan,
    check_cores,
    check_ports,
    check_runtime,
    check_speculative_config,
    plan,
    resolve_model,
    server_cpus,
)
from servers.launcher._records import health_ok, live_records, stop_records
from servers.launcher._status import print_status
from servers.progress import StartProgress
from servers.settings import ROOT, LauncherSettings
from servers.state import LauncherState, ServerRecord, SupervisorRecord, clear_state, read_state, write_state
from servers.warmup import time_steps, warm_up

# ---------------------------------------------------------------- up


def _lock_ports(s: LauncherSettings, plans: list[Plan]) -> dict[str, int]:
    locks: dict[str, int] = {}
    for p in plans:
        fd = procs.lock_port(s.cache_dir / "locks", p.config.host, p.config.port)
        if fd is None:
            for other in locks.values():
                os.close(other)
            raise LauncherError(
                f"port {p.config.port} ({p.name}) is reserved by a server another `python -m servers up` "
                f"is starting (maybe with another --run-dir); wait for it, or stop it with `python -m servers down`"
            )
        locks[p.name] = fd
    return locks


def _marker(s: LauncherSettings, p: Plan) -> Path:
    return s.cache_dir / "compile-markers" / f"{p.name}-{p.cache_key}"


@dataclass
class Started:
    """A server this process started: its record in the state file and its process (our child)."""

    record: ServerRecord
    proc: subprocess.Popen[bytes]


def already_running(s: LauncherSettings, out: TextIO) -> bool:
    """True (and says so, with the status) when servers of this run dir still run; a stale
    state file, whose processes are gone, is removed."""
    state = read_state(s.state_file)
    who = [f"{r.name} PID {r.pid}" for r in live_records(state)]
    sup = state.supervisor if state else None
    if sup and procs.is_running(sup.pid, sup.start_ticks):
        # Its servers may be down for a restart, but they are still its own: never start a second pair.
        who.append(f"supervisor PID {sup.pid}")
    if who:
        print(f"already running, nothing to start ({', '.join(who)}):", file=out)
        print_status(s, out)
        print("to restart them with other settings: python -m servers down, then up", file=out)
        return True
    if state is not None:
        clear_state(s.state_file)  # stale: its processes are gone
    return False


def _checked_plans(s: LauncherSettings, out: TextIO) -> tuple[list[Plan], dict[str, int]]:
    """The plans of both servers, every check passed, their ports locked (the locks' fds, by name)."""
    check_speculative_config(s)
    check_cores(s)
    check_runtime(s)
    check_ports(plan(s, s.model or "default-model"))  # fail fast, before any model preparation
    model = resolve_model(s, out)
    plans = plan(s, model)
    locks = _lock_ports(s, plans)
    try:
        check_ports(plans)  # conversion can take minutes; check again just before starting
    except LauncherError:
        for fd in locks.values():
            os.close(fd)
        raise
    return plans, locks


def _spawn(s: LauncherSettings, p: Plan, lock_fd: int, out: TextIO) -> Started:
    """Start one planned server in its own process group, its log begun with its command line."""
    kind: Literal["cold", "warm"] = "warm" if _marker(s, p).exists() else "cold"
    with open(p.log_path, "w") as f:  # one log per start; the previous one is replaced
        f.write(f"# {datetime.now(UTC).isoformat()} {shlex.join(p.cmd)}\n")
    proc = procs.spawn(p.cmd, p.env, p.log_path, ROOT, keep_fds=(lock_fd,), cpus=server_cpus(s, p.role, p.cores))
    rec = ServerRecord(
        role=p.role, url=p.url, pid=proc.pid, pgid=proc.pid, arm=p.arm, cores=p.cores if p.arm else None,
        start_ticks=procs.start_ticks(proc.pid) or 0, log_path=p.log_path,
        served_model_name=p.config.served_model_name, model=p.config.model,
        command=p.cmd, started_at=datetime.now(UTC), start_kind=kind,
    )
    print(f"started {p.name} ({kind} start) PID {proc.pid} on {p.url}; log: {p.log_path}", file=out, flush=True)
    return Started(rec, proc)


def start_pair(s: LauncherSettings, out: TextIO, supervisor: SupervisorRecord | None = None) -> list[Started]:
    """Start both servers and wait until they answer /health; on any failure stop what was started.

    The servers are children of the calling process: the supervisor that calls this sees their
    exit codes. ``supervisor`` is recorded in the state file from the first write on.
    """
    plans, locks = _checked_plans(s, out)
    s.run_dir.mkdir(parents=True, exist_ok=True)
    records: list[ServerRecord] = []
    pair: list[Started] = []

    def record_state() -> None:
        write_state(s.state_file, LauncherState(
            launcher_pid=os.getpid(), device=s.device, servers=records, supervisor=supervisor))

    # On CPU each server computes on its own core, so both start at once. On one GPU the second
    # must start after the first is healthy, or both size their KV cache from the same free memory.
    groups = [plans] if s.device == "cpu" else [[p] for p in plans]
    try:
        for group in groups:
            started = []
            for p in group:
                one = _spawn(s, p, locks[p.name], out)
                records.append(one.record)
                pair.append(one)
                started.append((p, one.proc, one.record))
            record_state()
            wait_healthy(s, started, out)
            if s.warmup:
                _warm_up(s, started, out)
            record_state()
        if s.warmup:
            _time_steps(s, plans, records, out)
            record_state()
    except BaseException:
        # Whatever went wrong (crash, timeout, Ctrl-C): leave nothing running behind.
        print("stopping the servers started by this run ...", file=out, flush=True)
        stop_records(records, s.stop_timeout_s, out)
        clear_state(s.state_file)
        raise
    finally:
        for fd in locks.values():
            os.close(fd)  # the servers hold their own copies: the lock lives as long as they do

    for p in plans:
        marker = _marker(s, p)
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.touch()
    _write_client_env(s, plans, records)
    return pair


def wait_healthy(
    s: LauncherSettings, started: list[tuple[Plan, subprocess.Popen[bytes], ServerRecord]], out: TextIO
) -> None:
    """Wait until every started server answers /health, showing their start phases on ``out``.

    Raises LauncherError when one exits during its start (with its log's last lines) or when
    startup_timeout_s runs out.
    """
    t0 = time.monotonic()
    progress = StartProgress(out)
    pending = {p.name: (p, proc, rec) for p, proc, rec in started}
    while pending:
        elapsed = time.monotonic() - t0
        for role, (p, proc, rec) in list(pending.items()):
            code = proc.poll()
            if code is not None:
                progress.finish()
                raise LauncherError(
                    f"the {role} server exited with code {code} during start; last lines of {p.log_path}:\n"
                    + procs.tail(p.log_path, 20)
                )
            if health_ok(p.url, timeout_s=1.0):
                owner = procs.listener_pid(p.config.port)
                if owner is not None and owner not in procs.group_pids(rec.pgid):
                    progress.finish()
                    raise LauncherError(
                        f"another process (PID {owner}) answers on port {p.config.port}, not the {role} server "
                        f"this run started; stop it or pick another port with --{p.role}-port"
                    )
                rec.time_to_healthy_s = round(time.monotonic() - t0, 1)
                del pending[role]
                progress.done(role, rec.time_to_healthy_s)
            else:
                progress.update(role, elapsed, p.log_path)
        if pending and elapsed > s.startup_timeout_s:
            progress.finish()
            roles = ", ".join(pending)
            last = pending[next(iter(pending))][0].log_path
            raise LauncherError(
                f"{roles} not healthy after {s.startup_timeout_s:.0f} s (raise --startup-timeout); "
                f"last lines of {last}:\n{procs.tail(last, 20)}"
            )
        progress.render(elapsed)
        if pending:
            time.sleep(0.5)
    progress.finish()


def _warm_up(s: LauncherSettings, started: list[tuple[Plan, subprocess.Popen[bytes], ServerRecord]],
             out: TextIO) -> None:
    """Warm each just-healthy server up with real requests, all at once; say how long it took."""
    print("warming up: real requests to " + " and ".join(p.name for p, _proc, _rec in started) + " ...",
          file=out, flush=True)
    with ThreadPoolExecutor(max_workers=len(started)) as pool:
        results = list(pool.map(lambda st: warm_up(st[0].url, st[0].config.served_model_name, s.warmup_timeout_s),
                                started))
    for (p, _proc, rec), result in zip(started, results, strict=True):
        rec.warmup_s = result.seconds
        print(result.line(p.name), file=out, flush=True)


def _time_steps(s: LauncherSettings, plans: list[Plan], records: list[ServerRecord], out: TextIO) -> None:
    """Time each server's decode step, one server at a time (each alone, as in a sequential race),
    and say what a verification step costs here in the baseline's plain steps."""
    timed = time_steps([(p.url, p.config.served_model_name, p.role != "baseline") for p in plans], s.warmup_timeout_s)
    for rec, step in zip(records, timed, strict=True):
        rec.step_ms, rec.step_na = step.ms, step.na_reason
    print("decode step at warm-up: " + "; ".join(f"{r.name} {r.step_text(records[0])}" for r in records),
          file=out, flush=True)


def _write_client_env(s: LauncherSettings, plans: list[Plan], records: list[ServerRecord]) -> None:
    """What the app needs to find these servers (its own SPECDEMO_ settings), for `source` or .env;
    with arms, SPECDEMO_ARMS lists every arm (the first is the SPECDEMO_SPECULATIVE_URL one)."""
    spec = plans[1].config.speculative_config or {}
    lines = [
        f"SPECDEMO_BASELINE_URL={plans[0].url}",
        f"SPECDEMO_SPECULATIVE_URL={plans[1].url}",
    ]
    if any(p.arm for p in plans):
        arms = [{"name": p.arm, "url": p.url, "method": (p.config.speculative_config or {}).get("method"),
                 "label": get_arm_config(p.arm).summary[:60], "step_cost": r.step_cost(records[0])}
                for p, r in zip(plans[1:], records[1:], strict=True) if p.arm]
        lines.append(f"SPECDEMO_ARMS={json.dumps(arms, separators=(',', ':'))}")
    # An empty value would not validate as a number in the app: leave unknown ones out.
    if spec.get("method"):
        lines.append(f"SPECDEMO_SPEC_METHOD={spec['method']}")
    if spec.get("num_speculative_tokens") is not None:
        lines.append(f"SPECDEMO_SPEC_NUM_TOKENS={spec['num_speculative_tokens']}")
    cost = records[1].step_cost(records[0]) if len(records) > 1 else None
    if cost is not None:  # what a verification step costs here: the bound of the race's efficiency
        lines.append(f"SPECDEMO_SPEC_STEP_COST={cost}")
    (s.run_dir / "client.env").write_text("\n".join(lines) + "\n")
