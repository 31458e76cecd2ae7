"""`python app.py` in a subprocess on a free port (``AppProcess``), and several started at once."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from common.waiting import held_within
from harness import ROOT
from harness.ports import free_port

APP_READY_S = 90.0  # the longest an app.py may take to answer its first request


class AppProcess:
    """`python app.py` in a subprocess, on a free port, configured by SPECDEMO_* variables."""

    runs_dir: Path  # set by the fixtures that give the app its own SPECDEMO_RUNS_DIR

    def __init__(self, env: dict[str, str], log_path: Path, *, pin_host: bool = True, wait: bool = True) -> None:
        """``pin_host=False`` leaves SPECDEMO_UI_HOST unset: the app's own default binding.
        ``wait=False`` returns at once: call ``wait_ready()`` before use (see ``start_together``)."""
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/"
        self.log_path = log_path
        full_env = {k: v for k, v in os.environ.items() if not k.startswith("SPECDEMO_")}
        full_env.update({"SPECDEMO_UI_PORT": str(self.port),
                         "GRADIO_ANALYTICS_ENABLED": "False", "PYTHONUNBUFFERED": "1"})
        if pin_host:
            full_env["SPECDEMO_UI_HOST"] = "127.0.0.1"
        full_env.update(env)
        self._log = open(log_path, "w", encoding="utf-8")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen([sys.executable, "app.py"], cwd=ROOT, env=full_env,
                                     stdout=self._log, stderr=subprocess.STDOUT)
        if wait:
            self.wait_ready()

    def wait_ready(self, timeout_s: float = APP_READY_S) -> AppProcess:
        def answers() -> bool:
            if self.proc.poll() is not None:
                raise RuntimeError(f"app.py exited with {self.proc.returncode}:\n{self.output()}")
            try:
                return httpx.get(self.url, timeout=2, trust_env=False).status_code == 200
            except httpx.HTTPError:
                return False

        if held_within(answers, timeout_s, poll_s=0.3):
            return self
        self.stop()
        raise RuntimeError(f"app.py did not answer on {self.url} within {timeout_s:g} s:\n{self.output()}")

    def output(self) -> str:
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def stop(self) -> None:
        stop_process(self.proc)
        self._log.close()


def stop_process(proc: subprocess.Popen[Any]) -> None:
    """SIGTERM, 10 s to go, then SIGKILL: a child of ours never outlives its test."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)


def start_together(configs: dict[str, dict[str, Any]]) -> dict[str, AppProcess]:
    """Several apps, each from its AppProcess keywords (env, log_path, pin_host), started at once
    and all answering on return.

    Most of an app's start is importing Gradio on one core: a module that needs several differently
    configured apps starts them side by side, before its first test, instead of one per test (and
    none is still starting while a test runs). On a failure every app started is stopped.
    """
    apps: dict[str, AppProcess] = {}
    # As long in all as the apps would have had one after another (90 s each): sharing the cores
    # on a busy machine, every one of them takes longer than one alone.
    deadline = time.monotonic() + APP_READY_S * len(configs)
    try:
        for name, kwargs in configs.items():
            apps[name] = AppProcess(**kwargs, wait=False)
        for proc in apps.values():
            proc.wait_ready(timeout_s=max(1.0, deadline - time.monotonic()))
    except BaseException:
        for proc in apps.values():
            proc.stop()
        raise
    return apps
