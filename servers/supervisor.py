"""The supervisor: watches the two servers of a running pair and restarts one that fails.

A server that exits, or that answered /health and then fails it for ``health_timeout_s``, is
stopped (its whole process group), and started again after a backoff with the same command,
environment and log file (appended, after a restart marker line). The backoff doubles with each
restart of that server in the last hour; at most ``max_restarts_per_hour`` restarts happen per
hour, after which the server stays down until the oldest restart is an hour old. The other server
is never touched. Every restart, its cause and time go into the state file, for `status`.

`up` runs the supervisor: in the foreground it is the `up` process itself (Ctrl-C stops it and
the servers); with ``--detach`` the `up` process forks before starting the servers, so the
servers are children of the supervisor (their exit codes are known), and the parent returns
once both are healthy. `down` stops the supervisor first, then the servers. A supervisor killed
with SIGKILL leaves the servers running; `status` then says it is gone.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Literal, TextIO

import httpx

from common.waiting import held_within
from servers import launcher, procs
from servers.settings import ROOT, LauncherSettings
from servers.state import LauncherState, ServerRecord, SupervisorRecord, clear_state, write_state

HOUR = timedelta(hours=1)


@dataclass
class _Watch:
    """What the supervisor knows of one server beyond its record."""

    record: ServerRecord
    proc: subprocess.Popen[bytes] | None
    started_mono: float
    healthy: bool  # answered /health since its last start
    last_ok_mono: float
    restart_at_mono: float | None = None  # a restart is due (backoff); the server is down meanwhile


def _now() -> datetime:
    return datetime.now(UTC)


def exit_cause(code: int | None) -> str:
    """'exit code 1', 'killed by SIGKILL', or 'exited (code unknown)' for a process not our child."""
    if code is None:
        return "exited (code unknown)"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


class Supervisor:
    """Watches the started servers and restarts one that exits or stops answering /health; logs what it does.

    run() loops until request_stop(); it never raises on a server's fault.
    """
    def __init__(
        self, s: LauncherSettings, pair: list[launcher.Started], me: SupervisorRecord, out: TextIO
    ) -> None:
        self.s = s
        self.me = me
        self.out = out
        now = time.monotonic()
        self.watches = [_Watch(p.record, p.proc, now, True, now) for p in pair]
        self.stopping = False
        self.http = httpx.Client()  # one client for every check: cheap on a busy 2-core machine

    # ------------------------------------------------------------ the loop

    def request_stop(self, signum: int = 0, frame: object = None) -> None:
        """Ask the loop to stop (a signal handler: SIGTERM, SIGINT)."""
        self.stopping = True

    def run(self) -> None:
        """Watch until asked to stop (SIGTERM, SIGINT: see request_stop). Never raises on a server fault."""
        self._log(f"supervising {', '.join(f'{w.record.role} PID {w.record.pid}' for w in self.watches)}")
        while not self.stopping:
            for w in self.watches:
                if self.stopping:
                    break
                try:
                    self.check(w)
                except Exception:  # noqa: BLE001 - e.g. a full disk for the state file: log it, keep watching
                    self._log(f"{w.record.role}: check failed:\n{traceback.format_exc()}")
            self._sleep(self.s.health_interval_s)
        self._log("stopping (asked to)")

    def _sleep(self, seconds: float) -> None:
        """``seconds``, or less once asked to stop."""
        held_within(lambda: self.stopping, seconds)

    def check(self, w: _Watch) -> None:
        """One look at one server: restart it when due, or notice that it failed."""
        now = time.monotonic()
        if w.restart_at_mono is not None:
            if now >= w.restart_at_mono:
                self._restart(w)
            return
        r = w.record
        if w.proc is not None:
            code = w.proc.poll()
            if code is not None:
                self._failed(w, exit_cause(code))
                return
        elif not procs.is_running(r.pid, r.start_ticks):
            self._failed(w, exit_cause(None))
            return
        if launcher.health_ok(r.url, timeout_s=min(2.0, self.s.health_timeout_s), client=self.http):
            if not w.healthy:
                r.time_to_healthy_s = round(now - w.started_mono, 1)
                self._log(f"{r.name}: healthy again after {r.time_to_healthy_s} s (PID {r.pid})")
                self._save()
            w.healthy, w.last_ok_mono = True, now
        elif w.healthy and now - w.last_ok_mono >= self.s.health_timeout_s:
            self._failed(w, f"no /health answer for {self.s.health_timeout_s:g} s")
        elif not w.healthy and now - w.started_mono >= self.s.startup_timeout_s:
            self._failed(w, f"not healthy {self.s.startup_timeout_s:g} s after its restart")

    # ------------------------------------------------------------ failure, backoff, restart

    def _failed(self, w: _Watch, cause: str) -> None:
        r = w.record
        r.last_cause, r.last_cause_at = cause, _now()
        self._log(f"{r.name}: {cause} (PID {r.pid}); log: {r.log_path}")
        if procs.group_pids(r.pgid):  # hung, or exited leaving workers: stop the whole group
            procs.stop_group(r.pgid, self.s.stop_timeout_s)
        if w.proc is not None:
            try:
                w.proc.wait(timeout=5)  # reap it
            except subprocess.TimeoutExpired:
                pass
        self._schedule(w)

    def _schedule(self, w: _Watch) -> None:
        r = w.record
        now = _now()
        r.restart_times = [t for t in r.restart_times if now - t < HOUR]
        cap = self.s.max_restarts_per_hour
        if cap == 0:
            r.held, r.next_restart_at = "restarts are off (max_restarts_per_hour=0)", None
            w.restart_at_mono = float("inf")
        elif len(r.restart_times) >= cap:
            next_try = min(r.restart_times) + HOUR
            r.held = f"restart cap reached ({cap} in the last hour); next try at {next_try:%H:%M:%S} UTC"
            r.next_restart_at = next_try
            w.restart_at_mono = time.monotonic() + (next_try - now).total_seconds()
        else:
            delay = min(self.s.restart_backoff_s * 2 ** len(r.restart_times), self.s.restart_backoff_max_s)
            r.held, r.next_restart_at = None, now + timedelta(seconds=delay)
            w.restart_at_mono = time.monotonic() + delay
        self._log(f"{r.name}: " + (r.held or f"restart in {w.restart_at_mono - time.monotonic():.1f} s"))
        self._save()

    def _restart(self, w: _Watch) -> None:
        r = w.record
        host, port = r.url.rsplit("//", 1)[1].rsplit(":", 1)
        lock = None
        if not procs.port_in_use(host, int(port)):
            lock = procs.lock_port(self.s.cache_dir / "locks", host, int(port))
        if lock is None:
            owner = procs.listener_pid(int(port))
            held = f"port {port} is taken{f' by PID {owner}' if owner else ''}; waiting for it to be free"
            if r.held != held:
                r.held = held
                self._log(f"{r.name}: {held}")
                self._save()
            w.restart_at_mono = time.monotonic() + self.s.health_interval_s
            return
        try:
            with open(r.log_path, "a") as f:
                f.write(f"\n# {_now().isoformat()} restart {r.restarts + 1} by the supervisor after: {r.last_cause}\n"
                        f"# {shlex.join(r.command)}\n")
            env = launcher.server_env(self.s, r.role, r.cores, launcher.speculative_config_of(r.command))
            proc = procs.spawn(r.command, env, r.log_path, ROOT,
                               keep_fds=(lock,), cpus=launcher.server_cpus(self.s, r.role, r.cores))
        except OSError as e:
            r.last_cause, r.last_cause_at = f"could not restart: {e}", _now()
            self._log(f"{r.name}: {r.last_cause}")
            r.restart_times.append(_now())  # counts against the cap: a failing spawn never loops fast
            self._schedule(w)
            return
        finally:
            os.close(lock)  # the server holds its own copy
        r.pid = r.pgid = proc.pid
        r.start_ticks = procs.start_ticks(proc.pid) or 0
        r.started_at = _now()
        r.restarts += 1
        r.restart_times.append(r.started_at)
        r.time_to_healthy_s, r.start_kind, r.next_restart_at, r.held = None, "warm", None, None
        now = time.monotonic()
        w.proc, w.started_mono, w.healthy, w.last_ok_mono, w.restart_at_mono = proc, now, False, now, None
        self._log(f"{r.name}: restarted (restart {r.restarts}), PID {proc.pid}")
        self._save()

    # ------------------------------------------------------------ output

    def _save(self) -> None:
        write_state(self.s.state_file, LauncherState(
            launcher_pid=self.me.pid, device=self.s.device, servers=[w.record for w in self.watches],
            supervisor=self.me,
        ))

    def _log(self, msg: str) -> None:
        print(f"{_now():%H:%M:%S} supervisor: {msg}", file=self.out, flush=True)

    def stop_servers(self) -> None:
        """Foreground `up` ending: stop both servers and forget them."""
        print("stopping ...", file=self.out, flush=True)
        launcher.stop_records([w.record for w in self.watches], self.s.stop_timeout_s, self.out)
        clear_state(self.s.state_file)


# ---------------------------------------------------------------- `up`


def _me(mode: Literal["detached", "foreground"]) -> SupervisorRecord:
    return SupervisorRecord(pid=os.getpid(), start_ticks=procs.start_ticks(os.getpid()) or 0,
                            started_at=_now(), mode=mode)


def up(s: LauncherSettings, detach: bool, out: TextIO = sys.stdout) -> int:
    """`python -m servers up`: start the pair under a supervisor (foreground, or detached)."""
    if launcher.already_running(s, out):
        return 0
    if detach:
        return _up_detached(s, out)
    me = _me("foreground")
    pair = launcher.start_pair(s, out, supervisor=me)
    sup = Supervisor(s, pair, me, out)
    try:
        signal.signal(signal.SIGINT, sup.request_stop)
        signal.signal(signal.SIGTERM, sup.request_stop)  # e.g. from a CI runner, or `down`
        print("", file=out)
        launcher.print_status(s, out)
        print("\nservers run in the foreground, restarted if they fail; Ctrl-C stops both", file=out, flush=True)
        sup.run()
    finally:
        sup.stop_servers()
    return 0


def _up_detached(s: LauncherSettings, out: TextIO) -> int:
    """Fork: the child starts the servers (so they are its children) and supervises them; the
    parent waits for the child's one-byte verdict (0 = both healthy) and exits with it."""
    out.flush()
    sys.stderr.flush()
    r, w = os.pipe()
    pid = os.fork()
    if pid:
        os.close(w)
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # the child reports a Ctrl-C during the start itself
        verdict = os.read(r, 1)
        os.close(r)
        if verdict:
            return verdict[0]
        _, status = os.waitpid(pid, 0)  # the child died without a word
        return os.waitstatus_to_exitcode(status) or 1
    os.close(r)
    code, pair = 1, []
    try:
        me = _me("detached")
        pair = launcher.start_pair(s, out, supervisor=me)
        print("", file=out)
        launcher.print_status(s, out)
        print(f"\nservers run in the background, restarted if they fail by supervisor PID {me.pid} "
              f"(log: {s.supervisor_log}); stop them with: python -m servers down", file=out, flush=True)
        os.setsid()  # before `up` returns: the terminal's Ctrl-C and hang-up no longer reach us
        procs.keep_nice_in_session()  # a niced `up` stays niced under Linux's autogroups
        code = 0
    except BaseException as e:  # noqa: BLE001 - every failure must reach the waiting parent as an exit code
        if pair:  # started, then interrupted: leave nothing behind
            launcher.stop_records([p.record for p in pair], s.stop_timeout_s, out)
            clear_state(s.state_file)
        try:
            code = launcher.report_error(e)
        except BaseException:  # noqa: BLE001 - a bug: its traceback, and still an exit code for the parent
            traceback.print_exc()
            code = 1
    finally:
        out.flush()
        sys.stderr.flush()
        try:
            os.write(w, bytes([code]))
        except OSError:
            pass  # the `up` that waited is gone (killed): supervise all the same
        os.close(w)
    if code:
        os._exit(code)
    _daemon_stdio(s)
    sup = Supervisor(s, pair, me, sys.stdout)
    signal.signal(signal.SIGTERM, sup.request_stop)
    signal.signal(signal.SIGINT, sup.request_stop)
    try:
        sup.run()  # on SIGTERM (from `down`) it returns and leaves the servers to `down`
    except BaseException:  # noqa: BLE001 - log it; the servers keep running, `status` shows us gone
        traceback.print_exc()
        os._exit(1)
    os._exit(0)


def _daemon_stdio(s: LauncherSettings) -> None:
    """stdin from /dev/null, stdout and stderr appended to the supervisor's log: the terminal (or a
    caller's pipe) is released when the parent exits."""
    s.supervisor_log.parent.mkdir(parents=True, exist_ok=True)
    log = os.open(s.supervisor_log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(null)
    os.close(log)
    sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115 - lives as long as the process
    sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
