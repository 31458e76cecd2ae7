"""A stand-in vLLM server (harness/standin/) in its own process: ``StandinProcess``.

``Standin`` runs in a thread of the caller's process, so it shares the caller's GIL and CPU
time: fine for tests, wrong for measuring a client at tens of thousands of tokens/s, where the
server's work would slow the client and count in its CPU. Here the stand-in is
``python -m harness.standin --behavior-json ...`` on a free port; its truth records come over
HTTP (``GET /standin/truth``, read between batches) and its CPU time from /proc:

    with StandinProcess(StandinBehavior(tokens_per_s=100)) as s:
        ...  # talk to s.url
        s.truth()[-1].decode_tokens_per_s
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
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

    def __init__(self, behavior: StandinBehavior | None = None, *, log_path: Path | None = None) -> None:
        self.behavior = behavior or StandinBehavior()
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self._log_path = log_path
        self._tmp: tempfile.TemporaryDirectory[str] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

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
            self.port = free_port()
            while self.port in taken:
                self.port = free_port()
        with open(self._log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "harness.standin", "--port", str(self.port),
                 "--behavior-json", self.behavior.model_dump_json()],
                cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"})

    def wait_ready(self) -> StandinProcess:
        """Wait until the spawned process answers /health; stop it and raise if it does not."""
        assert self.proc is not None, "spawn() first"
        proc = self.proc

        def answers() -> bool:
            if proc.poll() is not None:
                raise RuntimeError(f"the stand-in exited with {proc.returncode}:\n{self.output()}")
            try:
                return httpx.get(f"{self.url}/health", timeout=2, trust_env=False).status_code == 200
            except httpx.HTTPError:
                return False

        if not held_within(answers, READY_S):
            self.stop()
            raise RuntimeError(f"the stand-in did not answer on {self.url} within {READY_S:g} s")
        return self

    def output(self) -> str:
        return self._log_path.read_text(encoding="utf-8", errors="replace") if self._log_path else ""

    def truth(self, since: int = 0) -> list[Truth]:
        """Every generation request's truth from the ``since``-th on (call between batches)."""
        r = httpx.get(f"{self.url}/standin/truth", params={"since": since}, timeout=TRUTH_TIMEOUT_S, trust_env=False)
        r.raise_for_status()
        return [Truth.model_validate(t) for t in r.json()]

    def cpu_s(self) -> float | None:
        """The stand-in process's CPU time so far (user + system), or None where /proc cannot say."""
        return cpu_seconds(self.proc.pid) if self.proc is not None else None

    def stop(self) -> None:
        if self.proc is not None:
            stop_process(self.proc)
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None
            self._log_path = None

    def __enter__(self) -> StandinProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


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


