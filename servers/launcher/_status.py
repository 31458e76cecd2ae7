"""down and status: stop exactly the recorded servers (and the supervisor); the status table and JSON."""

from __future__ import annotations

import json
import os
import signal
import sys
from typing import TextIO

import httpx

from common.sides import SIDES, Side
from common.waiting import held_within
from servers import procs
from servers.launcher._plan import ATTN_SPLIT_KV, THREADS_BIND, flag_value
from servers.launcher._records import health_ok, ours_alive, stop_records
from servers.settings import LauncherSettings
from servers.state import LauncherState, ServerRecord, clear_state, read_state

# ---------------------------------------------------------------- down, status


def down(s: LauncherSettings, out: TextIO = sys.stdout) -> int:
    """Stop the supervisor first (so it restarts nothing), then the servers."""
    state = read_state(s.state_file)
    if state is None:
        print(f"no servers started by this launcher are running (no state file at {s.state_file})", file=out)
        return 0
    sup = state.supervisor
    sup_running = sup is not None and procs.is_running(sup.pid, sup.start_ticks)
    if sup_running:
        print("stopping:", file=out, flush=True)
        _stop_supervisor(s, state, out)
        # It may have restarted a server since we read the state; a foreground `up` stops its servers itself.
        after = read_state(s.state_file)
        known = {r.pid for r in state.servers}
        state.servers += [r for r in (after.servers if after else []) if r.pid not in known]
    live = [r for r in state.servers if ours_alive(r)]
    if not live:
        clear_state(s.state_file)
        if not sup_running:
            print(f"no servers started by this launcher are running (removed stale state file {s.state_file})",
                  file=out)
        return 0
    if not sup_running:
        print("stopping:", file=out, flush=True)
    stop_records(live, s.stop_timeout_s, out)
    left = [r for r in live if ours_alive(r)]
    if left:
        print(f"error: still running: {', '.join(f'{r.name} PID {r.pid}' for r in left)}", file=out)
        return 1
    clear_state(s.state_file)
    return 0


def _stop_supervisor(s: LauncherSettings, state: LauncherState, out: TextIO) -> None:
    """SIGTERM the supervisor and wait; SIGKILL if it does not go. A detached one exits at once,
    or once it has stopped a failed server it was stopping (the servers are then ours to stop);
    a foreground `up` stops both its servers first."""
    sup = state.supervisor
    assert sup is not None
    os.kill(sup.pid, signal.SIGTERM)
    wait_s = (2 if sup.mode == "foreground" else 1) * s.stop_timeout_s + 10
    held_within(lambda: not procs.is_running(sup.pid, sup.start_ticks), wait_s)
    how = "stopped (SIGTERM)"
    if procs.is_running(sup.pid, sup.start_ticks):
        os.kill(sup.pid, signal.SIGKILL)
        how = f"killed (SIGKILL after {wait_s:.0f} s)"
    print(f"  supervisor: PID {sup.pid} {how}", file=out, flush=True)


def supervisor_line(state: LauncherState | None) -> str:
    """Whether a supervisor watches the servers, for `status`."""
    sup = state.supervisor if state else None
    if sup is None:
        return "not running" + (" (this pair was started without one)" if state else "")
    if procs.is_running(sup.pid, sup.start_ticks):
        return f"running (PID {sup.pid}, {sup.mode}, up {procs.uptime_s(sup.start_ticks):.0f} s)"
    return f"not running (PID {sup.pid} gone); servers that stop are not restarted"


def status_rows(s: LauncherSettings) -> list[dict[str, object]]:
    """Each server's status as a row, from the state file.

    A row: health, PID, processes, memory, last start, log and the supervisor.
    """
    state = read_state(s.state_file)
    records = {r.name: r for r in state.servers} if state else {}
    on_cpu = (state.device if state else s.device) == "cpu"
    # The pair's two servers; with arms started (`up --arms`), the baseline and each arm as recorded.
    named: list[tuple[Side, str]] = [(role, role) for role in SIDES]
    if state and any(r.arm for r in state.servers):
        named = [(r.role, r.name) for r in state.servers]
    base = records.get("baseline")
    rows = []
    for role, name in named:
        r = records.get(name)
        port = s.baseline_port if role == "baseline" else s.speculative_port
        url = r.url if r else f"http://{s.host}:{port}"
        running = bool(r and procs.is_running(r.pid, r.start_ticks))
        pids = procs.group_pids(r.pgid) if running and r else []
        env = procs.environ_values(pids, (THREADS_BIND, "OMP_NUM_THREADS", ATTN_SPLIT_KV)) if on_cpu else {}
        row: dict[str, object] = {
            "role": role,
            "arm": r.arm if r else None,
            "url": url,
            # CPU: the cores its threads are bound to: a running server's own (its environment), else
            # an arm's recorded cores or the settings'; None on a GPU.
            "cores": (env.get(THREADS_BIND)
                      or (r.cores if r and r.cores else None)
                      or (s.baseline_cores if role == "baseline" else s.speculative_cores)) if on_cpu else None,
            "healthy": health_ok(url),
            "managed": running,  # started by this launcher and still running
            "pid": r.pid if running and r else None,
            "served_model": _served_model(url),
            # The dtype it was started with (float32 on a CPU: docs/cpu-servers.md#dtype-float32-on-every-cpu).
            "dtype": flag_value(r.command, "--dtype") if r else None,
            "uptime_s": round(procs.uptime_s(r.start_ticks), 1) if running and r else None,
            "memory_pss_bytes": procs.pss_bytes(pids) if pids else None,
            "memory_rss_bytes": procs.rss_bytes(pids) if pids else None,
            "processes": len(pids),
            # CPU: the kernel build vLLM loaded (by the CPU's flags) and its compute threads.
            "kernels": procs.kernel_build(pids) if on_cpu and pids else None,
            "compute_threads": _int_or_none(env.get("OMP_NUM_THREADS")) if on_cpu and pids else None,
            # CPU: whether its attention splits one request's KV cache across those threads (vLLM's default).
            "attn_split_kv": env.get(ATTN_SPLIT_KV) != "0" if on_cpu and pids else None,
            "start_kind": r.start_kind if r else None,
            "time_to_healthy_s": r.time_to_healthy_s if r else None,
            "warmup_s": r.warmup_s if r else None,
            **_step_fields(r, base),
            "log_path": str(r.log_path) if r else str(s.log_file(name)),
            "restarts": r.restarts if r else 0,
            "last_cause": r.last_cause if r else None,
            "last_cause_at": r.last_cause_at.isoformat() if r and r.last_cause_at else None,
            "next_restart_at": r.next_restart_at.isoformat() if r and r.next_restart_at else None,
            "restart_held": r.held if r else None,
            "supervisor": supervisor_line(state),
        }
        rows.append(row)
    return rows


def _step_fields(r: ServerRecord | None, base: ServerRecord | None) -> dict[str, object]:
    """A server's decode step timed at warm-up (ms; a verification step on a speculative server), that
    step in the baseline's plain steps (under 1, speculation may beat its tokens per step) and the line
    that says both."""
    return {"step_ms": r.step_ms if r else None, "step_cost": r.step_cost(base) if r else None,
            "step_text": r.step_text(base) if r else None}


def _int_or_none(text: str | None) -> int | None:
    return int(text) if text and text.isdigit() else None


def kernels_text(row: dict[str, object]) -> str:
    """"kernels: _C_AVX2 (AVX2); compute threads: 2, KV split off", or the reason there is none, for a
    CPU server (the split matters only with more than one thread)."""
    build = row["kernels"]
    kernels = (f"{build} ({procs.KERNEL_BUILDS[build]})" if isinstance(build, str)
               else "n/a (no vLLM kernel library mapped: not a vLLM CPU server, or still starting)")
    threads = row["compute_threads"]
    if threads is None:
        return f"kernels: {kernels}; compute threads: n/a (OMP_NUM_THREADS not set)"
    split = f", KV split {'on' if row['attn_split_kv'] else 'off'}" if isinstance(threads, int) and threads > 1 else ""
    return f"kernels: {kernels}; compute threads: {threads}{split}"


def _served_model(url: str) -> str | None:
    try:
        data = httpx.get(f"{url}/v1/models", timeout=2.0).json()
        return ", ".join(m["id"] for m in data.get("data", [])) or None
    except (httpx.HTTPError, ValueError, KeyError, TypeError, AttributeError):
        return None


def _restarts_text(row: dict[str, object]) -> str:
    """"restarts: 2; last: exit code 1 at 15:02:11 UTC; ..." or "" when nothing happened."""
    if not row["restarts"] and not row["last_cause"]:
        return ""
    text = f"restarts: {row['restarts']}"
    if row["last_cause"]:
        at = str(row["last_cause_at"])[11:19]
        text += f"; last cause: {row['last_cause']} at {at} UTC"
    if row["restart_held"]:
        text += f"; not restarting: {row['restart_held']}"
    elif row["next_restart_at"]:
        text += f"; restart due at {str(row['next_restart_at'])[11:19]} UTC"
    return text


def _gb(n: object) -> str:
    return f"{n / 1e9:.2f} GB" if isinstance(n, int) else "-"


def print_status(s: LauncherSettings, out: TextIO = sys.stdout, as_json: bool = False) -> int:
    """Print the status table (or JSON) on ``out``; return 0 when every server is healthy, else 1."""
    rows = status_rows(s)
    if as_json:
        print(json.dumps(rows, indent=2), file=out)
    else:
        for row in rows:
            health = "healthy" if row["healthy"] else "not answering"
            if row["managed"]:
                owner = f"PID {row['pid']} ({row['processes']} processes), up {row['uptime_s']:.0f} s"
            else:
                owner = "not started by this launcher" if row["healthy"] else "not running"
            print(f"{str(row['arm'] or row['role']):<12} {row['url']}  {health}; {owner}", file=out)
            if row["managed"] or row["healthy"]:
                cores = f"; cores: {row['cores']}" if row["cores"] is not None else ""
                dtype = f" ({row['dtype']})" if row.get("dtype") else ""
                print(f"{'':<12} model: {row['served_model'] or '-'}{dtype}{cores}; "
                      f"memory: {_gb(row['memory_pss_bytes'])} PSS ({_gb(row['memory_rss_bytes'])} RSS)", file=out)
            if row["managed"] and row["cores"] is not None:
                print(f"{'':<12} {kernels_text(row)}", file=out)
            if row["time_to_healthy_s"] is not None:
                warm = f", warmed up in {row['warmup_s']} s" if row.get("warmup_s") is not None else ""
                print(f"{'':<12} last start: {row['start_kind']}, healthy after {row['time_to_healthy_s']} s{warm}",
                      file=out)
            if row.get("step_text"):
                print(f"{'':<12} decode step at warm-up: {row['step_text']}", file=out)
            restarts = _restarts_text(row)
            if restarts:
                print(f"{'':<12} {restarts}", file=out)
            print(f"{'':<12} log: {row['log_path']}", file=out)
        pss = [r["memory_pss_bytes"] for r in rows if isinstance(r["memory_pss_bytes"], int)]
        if len(pss) == len(rows) >= 2:
            print(f"{'pair' if len(pss) == 2 else 'all':<12} memory: {_gb(sum(pss))} PSS", file=out)
        print(f"{'supervisor':<12} {rows[0]['supervisor']}", file=out)
    return 0 if all(r["healthy"] for r in rows) else 1
