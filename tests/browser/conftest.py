"""Real headless Chromium (Debian's package, driven by Playwright) and the page in a subprocess.

Chromium is never downloaded: the tests use /usr/bin/chromium (``apt-get install -y chromium``)
and skip, saying so, when it is absent.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import pytest

from harness.ports import free_port
from harness.standin import Standin, StandinBehavior

if TYPE_CHECKING:
    from playwright.sync_api import ViewportSize

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "artifacts"
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]
VIEWPORT: ViewportSize = {"width": 1280, "height": 720}
APP_READY_S = 90.0  # the longest an app.py may take to answer its first request


# One Playwright and one Chromium per test process, whichever module asks first: the sync API
# cannot nest, and tests/e2e imports these fixtures too (a second session fixture would nest).
_shared: dict[str, Any] = {}  # the Playwright and its Browser, started lazily


def _shared_browser():
    if "browser" not in _shared:
        from playwright.sync_api import sync_playwright
        pw = sync_playwright().start()
        _shared["playwright"] = pw
        _shared["browser"] = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
    return _shared["browser"]


def close_shared_browser() -> None:
    browser, pw = _shared.pop("browser", None), _shared.pop("playwright", None)
    if browser is not None:
        browser.close()
    if pw is not None:
        pw.stop()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    close_shared_browser()


@pytest.fixture(scope="module")
def chromium() -> Iterator[object]:
    """A Playwright Browser on Debian's Chromium, shared by one module's tests.

    Closed when the module ends: Playwright's sync API keeps an event loop running in this
    thread, and any later test that calls asyncio.run() would fail on it.
    """
    if not CHROMIUM.exists():
        pytest.skip("browser tests need Debian's Chromium at /usr/bin/chromium: apt-get install -y chromium")
    pytest.importorskip("playwright.sync_api", reason="pip install playwright (requirements-dev.txt)")
    yield _shared_browser()
    close_shared_browser()


@pytest.fixture
def page(chromium):
    context = chromium.new_context(viewport=VIEWPORT)
    pg = context.new_page()
    pg.console_errors = []
    pg.on("console", lambda m: m.type == "error" and pg.console_errors.append(m.text))
    # Uncaught exceptions in the page's scripts are not console messages: count them too.
    pg.on("pageerror", lambda e: pg.console_errors.append(f"uncaught: {e}"))
    yield pg
    context.close()


def screenshot(pg, name: str) -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    pg.screenshot(path=str(path))
    return path


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
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"app.py exited with {self.proc.returncode}:\n{self.output()}")
            try:
                if httpx.get(self.url, timeout=2, trust_env=False).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        self.stop()
        raise RuntimeError(f"app.py did not answer on {self.url} within {timeout_s:g} s:\n{self.output()}")

    def output(self) -> str:
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
        self._log.close()


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


@contextmanager
def standin_pair(base: StandinBehavior, spec: StandinBehavior) -> Iterator[dict[str, Standin]]:
    """A baseline and a speculative stand-in server, by side; both stopped on the way out."""
    servers = {"baseline": Standin(base).start(), "speculative": Standin(spec).start()}
    try:
        yield servers
    finally:
        for s in servers.values():
            s.stop()
