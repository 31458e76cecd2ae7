"""A stand-in vLLM server (harness/standin/) in its own process: ``StandinProcess``.

``Standin`` runs in a thread of the caller's process, so it shares the caller's GIL and CPU
time: fine for tests, wrong for measuring a client at tens of thousands of tokens/s, where the
server's work would slow the client and count in its CPU. Here the stand-in is
``python -m harness.standin --behavior-json ...`` on a free port; its truth records come over
HTTP (``GET /standin/truth``, read between batches) and its CPU time from /proc:

    with StandinProcess(StandinBehavior(tokens_per_s=100)) as s:
        ...  # talk to s.url
        s.truth()[-1].decode_tokens_per_s

One process serves a few hundred fast streams on one core; ``processes=N`` runs N on one port
(SO_REUSEPORT: the kernel spreads the connections over them), each with its own /metrics and
truth records, which truth() merges (their times are each process's perf_counter: on Linux one
system-wide monotonic clock). A thousand streams need that (benchmarks/bench_client_streams.py).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Collection, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from common.procstat import cpu_seconds
from common.waiting import held_within
from harness import ROOT
from harness.app_process import stop_process
from harness.ports import free_port
from harness.standin import StandinBehavior, Truth

READY_S = 30.0  # the longest the stand-in may take to answer /health (its imports, on a busy machine)
TRUTH_TIMEOUT_S = 30.0  # a few MB of JSON after a big batch


class StandinProcess:
    """``python -m harness.standin`` with ``behavior``, in a subprocess on 127.0.0.1."""

    def __init__(self, behavior: StandinBehavior | None = None, *, log_path: Path | None = None,
                 processes: int = 1) -> None:
        if processes < 1:
            raise ValueError(f"processes must be at least 1, not {processes}")
        self.behavior = behavior or StandinBehavior()
        self.port = 0
        self.processes = processes
        self.procs: list[subprocess.Popen[bytes]] = []
        self.own_ports: list[int] = []  # with processes > 1: each process's own port
        self._log_path = log_path
        self._tmp: tempfile.TemporaryDirectory[str] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def proc(self) -> subprocess.Popen[bytes] | None:
        """The first process (the only one, with processes=1); None before spawn()."""
        return self.procs[0] if self.procs else None

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    def _own_urls(self) -> list[str]:
        """Where each process answers alone: its own port, or the one port of a single process."""
        return [f"http://127.0.0.1:{p}" for p in self.own_ports] or [self.url]

    def start(self) -> StandinProcess:
        self.spawn()
        return self.wait_ready()

    def spawn(self, taken: frozenset[int] = frozenset()) -> None:
        """Start the process on a free port not in ``taken`` (ports picked for stand-ins not yet
        listening), or on its port from before (a restart after stop()), without waiting for it to answer."""
        if self._log_path is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="standin-")
            self._log_path = Path(self._tmp.name) / "standin.log"
        if not self.port:  # a restart keeps its port, as a restarted server does
            self.port = _free_port_not_in(taken)
        if self.processes > 1 and not self.own_ports:
            for _ in range(self.processes):
                self.own_ports.append(_free_port_not_in(taken | {self.port, *self.own_ports}))
        shared = [["--own-port", str(p)] for p in self.own_ports] or [[]]
        with open(self._log_path, "wb") as log:
            self.procs = [subprocess.Popen(
                [sys.executable, "-m", "harness.standin", "--port", str(self.port), *extra,
                 "--behavior-json", self.behavior.model_dump_json()],
                cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"})
                for extra in shared]

    def wait_ready(self) -> StandinProcess:
        """Wait until the spawned process answers /health; stop it and raise if it does not."""
        assert self.procs, "spawn() first"

        def answers() -> bool:
            for proc in self.procs:
                if proc.poll() is not None:
                    raise RuntimeError(f"the stand-in exited with {proc.returncode}:\n{self.output()}")
            try:
                return all(httpx.get(f"{u}/health", timeout=2, trust_env=False).status_code == 200
                           for u in self._own_urls())
            except httpx.HTTPError:
                return False

        if not held_within(answers, READY_S):
            self.stop()
            raise RuntimeError(f"the stand-in did not answer on {self.url} within {READY_S:g} s")
        return self

    def output(self) -> str:
        return self._log_path.read_text(encoding="utf-8", errors="replace") if self._log_path else ""

    def truth(self, since: int = 0) -> list[Truth]:
        """Every generation request's truth from the ``since``-th on (call between batches), in the
        order they came (over all processes: by arrival time)."""
        urls = self._own_urls()
        if len(urls) == 1:
            return self.truth_at(urls[0], since)
        return sorted((t for u in urls for t in self.truth_at(u, 0)), key=lambda t: t.t_request)[since:]

    @staticmethod
    def truth_at(url: str, since: int = 0) -> list[Truth]:
        """The truth records of the one process answering on ``url`` (its own port), from the ``since``-th on."""
        r = httpx.get(f"{url}/standin/truth", params={"since": since}, timeout=TRUTH_TIMEOUT_S, trust_env=False)
        r.raise_for_status()
        return [Truth.model_validate(t) for t in r.json()]

    def cpu_s(self) -> float | None:
        """The stand-in processes' CPU time so far (user + system), or None where /proc cannot say."""
        times = [cpu_seconds(p.pid) for p in self.procs]
        return None if not times or None in times else sum(t or 0.0 for t in times)

    def stop(self) -> None:
        for proc in self.procs:
            stop_process(proc)
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None
            self._log_path = None

    def __enter__(self) -> StandinProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _free_port_not_in(taken: Collection[int]) -> int:
    port = free_port()
    while port in taken:
        port = free_port()
    return port


@contextmanager
def processes(*behaviors: StandinBehavior) -> Iterator[list[StandinProcess]]:
    """A stand-in per behaviour, each in its own process, started together (their imports overlap)
    and all stopped on the way out."""
    started = [StandinProcess(b) for b in behaviors]
    try:
        for s in started:
            s.spawn(frozenset(o.port for o in started if o is not s))
        for s in started:
            s.wait_ready()
        yield started
    finally:
        for s in started:
            s.stop()


@contextmanager
def process_pair(base: StandinBehavior, spec: StandinBehavior) -> Iterator[tuple[StandinProcess, StandinProcess]]:
    """A baseline and a speculative stand-in, each in its own process: a test whose client and
    servers must not share one GIL (figures checked against the stand-ins' pacing on a busy machine)."""
    with processes(base, spec) as (b, s):
        yield b, s


