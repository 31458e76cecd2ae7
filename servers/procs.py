"""Processes, ports and /proc: start a server in its own process group, find and stop exactly it.

Linux only (reads /proc). No psutil: the app venv stays small.
"""

from __future__ import annotations

import errno
import fcntl
import os
import re
import signal
import socket
import subprocess
from pathlib import Path

from common.procstat import stat_fields
from common.waiting import held_within

_CLK_TCK = os.sysconf("SC_CLK_TCK")
_PAGE = os.sysconf("SC_PAGE_SIZE")


def spawn(
    cmd: list[str], env: dict[str, str], log_path: Path, cwd: Path, keep_fds: tuple[int, ...] = (),
    cpus: set[int] | None = None,
) -> subprocess.Popen[bytes]:
    """Start ``cmd`` in a new session (its own process group), stdout+stderr appended to log_path.

    A new session keeps a Ctrl-C in the terminal from reaching the server directly (the launcher
    decides when to stop it) and lets `down` stop the server and every child it forked at once.
    ``keep_fds`` are inherited by the server (a port lock that lives exactly as long as it does).
    ``cpus``: the cores the server and every process it starts may run on (None: any).
    """
    log_path.parent.mkdir(parents=True, exist_ok=True)

    def in_child() -> None:  # after the new session is made, before the server runs
        keep_nice_in_session()
        if cpus is not None:
            os.sched_setaffinity(0, cpus)

    with open(log_path, "ab") as log:
        return subprocess.Popen(
            cmd, env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True, pass_fds=keep_fds, preexec_fn=in_child,
        )


def keep_nice_in_session() -> None:
    """Carry this process's nice value over to the session it has just made.

    With Linux's autogroups (sched_autogroup_enabled, the default of many distributions) every
    session is scheduled as one group against the others, and a nice value weighs only inside
    its own group: a server in a session of its own started by `nice -n 19 python -m servers up`
    would take its full share of the cores beside everything else. Writing the nice value to the
    session's autogroup makes the group as nice as its process. Nothing to do at nice 0.
    """
    nice = os.getpriority(os.PRIO_PROCESS, 0)
    if nice > 0:
        try:
            Path("/proc/self/autogroup").write_text(str(nice))
        except OSError:
            pass  # no autogroups in this kernel


def lock_port(lock_dir: Path, host: str, port: int) -> int | None:
    """Take an exclusive lock for host:port; returns its fd, or None when another holds it.

    A server binds its port only after tens of seconds of startup: the lock (inherited by the
    server, released by the kernel when it exits) keeps a second launcher off the port meanwhile.
    """
    lock_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock_dir / f"port-{host}-{port}.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def start_ticks(pid: int) -> int | None:
    """Process start time in clock ticks since boot: with the PID, identifies a process uniquely."""
    f = stat_fields(pid)
    return int(f[19]) if f else None


def is_running(pid: int, ticks: int | None = None) -> bool:
    """True when PID is alive (not a zombie) and, if ticks is given, is the same process."""
    f = stat_fields(pid)
    if f is None or f[0] in ("Z", "X"):
        return False
    return ticks is None or int(f[19]) == ticks


def children() -> dict[int, list[int]]:
    """Each parent PID's child PIDs, over all processes now."""
    kids: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            f = stat_fields(int(entry.name))
            if f:
                kids.setdefault(int(f[1]), []).append(int(entry.name))
    return kids


def group_pids(pgid: int) -> list[int]:
    """Live PIDs whose process group is pgid (the server and the workers it forked)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        f = stat_fields(int(entry.name))
        if f and int(f[2]) == pgid and f[0] not in ("Z", "X"):
            pids.append(int(entry.name))
    return pids


def rss_bytes(pids: list[int]) -> int:
    """The summed resident set size of ``pids`` in bytes (processes gone meanwhile count 0)."""
    total = 0
    for pid in pids:
        try:
            total += int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * _PAGE
        except (OSError, IndexError, ValueError):
            pass
    return total


def pss_bytes(pids: list[int]) -> int:
    """Proportional set size: shared pages (torch libraries) split between the processes
    that map them, so the sum over a server's processes is not double counted."""
    total = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    total += int(line.split()[1]) * 1024
                    break
        except (OSError, IndexError, ValueError):
            total += rss_bytes([pid])
    return total


# vLLM's CPU kernels come in three builds; vllm/platforms/cpu.py imports one by the CPU's flags
# (torch.cpu._is_avx512_supported, then _is_avx512_bf16_supported): the name it maps says which.
KERNEL_BUILDS = {"_C_AVX2": "AVX2", "_C_AVX512": "AVX-512", "_C": "AVX-512 with BF16"}
_KERNEL_SO = re.compile(r"/vllm/(_C(?:_AVX2|_AVX512)?)\.abi3\.so$", re.M)


def kernels_in_maps(maps: str) -> str | None:
    """The vLLM kernel build a process has mapped, from its /proc/PID/maps text; None if none."""
    found = _KERNEL_SO.search(maps)
    return found.group(1) if found else None


def kernel_build(pids: list[int]) -> str | None:
    """The vLLM kernel build (a KERNEL_BUILDS key) the first of ``pids`` that maps one has loaded."""
    for pid in pids:
        try:
            found = kernels_in_maps(Path(f"/proc/{pid}/maps").read_text())
        except OSError:
            continue
        if found:
            return found
    return None


def environ_values(pids: list[int], names: tuple[str, ...]) -> dict[str, str]:
    """Each of ``names`` as the environment of the first of ``pids`` that has it gives it; a name none
    has is left out. Each process's environment is read once, and only until every name is found."""
    found: dict[str, str] = {}
    for pid in pids:
        if len(found) == len(names):
            break
        try:
            entries = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        for entry in entries:
            name, sep, value = entry.partition(b"=")
            key = name.decode(errors="replace")
            if sep and key in names and key not in found:
                found[key] = value.decode(errors="replace")
    return found


def uptime_s(ticks: int) -> float:
    """Seconds since a process started ``ticks`` clock ticks after boot (/proc/PID/stat field 22)."""
    boot_uptime = float(Path("/proc/uptime").read_text().split()[0])
    return boot_uptime - ticks / _CLK_TCK


def stop_group(pgid: int, timeout_s: float) -> str:
    """SIGTERM the group, wait up to timeout_s, then SIGKILL what is left. Returns what it did."""
    if not group_pids(pgid):
        return "already stopped"
    _killpg(pgid, signal.SIGTERM)
    _killpg(pgid, signal.SIGCONT)  # a stopped (SIGSTOP, hung) process acts on SIGTERM only once continued
    if _wait_gone(pgid, timeout_s):
        return "stopped (SIGTERM)"
    _killpg(pgid, signal.SIGKILL)
    if _wait_gone(pgid, 5.0):
        return f"killed (SIGKILL after {timeout_s:.0f} s)"
    return f"still running after SIGKILL: PIDs {group_pids(pgid)}"


def _killpg(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass


def _wait_gone(pgid: int, timeout_s: float) -> bool:
    return held_within(lambda: not group_pids(pgid), timeout_s, poll_s=0.2)


def port_in_use(host: str, port: int) -> bool:
    """True when something already listens on host:port (a bind attempt fails)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        # SO_REUSEADDR: a port in TIME_WAIT from a server we just stopped is free for a new one.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as e:
            return e.errno in (errno.EADDRINUSE, errno.EACCES)
    return False


def listener_pid(port: int) -> int | None:
    """PID of the process listening on a TCP port, when /proc lets us see it (best effort)."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            cols = line.split()
            if cols[3] == "0A" and int(cols[1].rsplit(":", 1)[1], 16) == port:  # 0A = LISTEN
                inodes.add(cols[9])
    if not inodes:
        return None
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            for fd in (entry / "fd").iterdir():
                link = os.readlink(fd)
                if link.startswith("socket:[") and link[8:-1] in inodes:
                    return int(entry.name)
        except OSError:
            continue
    return None


def tail(path: Path, lines: int = 20) -> str:
    """The last ``lines`` lines of the file at ``path`` (read from its last 64 KiB); "" if unreadable."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 64 * 1024))
            text = f.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])
