"""The browser tests' fixtures: real headless Chromium (Debian's package, driven by Playwright),
one page per test, and a stand-in pair by side.

Chromium is never downloaded: the tests use /usr/bin/chromium (``apt-get install -y chromium``)
and skip, saying so, when it is absent. The app in a subprocess is ``harness.app_process``; the
page-driving helpers are ``harness.page_driver``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import pytest

from common.waiting import WaitTimeout, held_within
from harness.app_process import AppProcess
from harness.chromium import CHROMIUM, VIEWPORT, launch
from harness.standin import Standin, StandinBehavior

T = TypeVar("T")

# A web-first assertion (Playwright's expect) waits for the page to show what it asserts: the
# page draws each Gradio output on its own, and on a busy 2-core machine a state the test
# asserts may land seconds after the one it waited for. 30 s by default here (not Playwright's
# 5 s); a passing assertion returns as soon as it holds.
EXPECT_TIMEOUT_MS = 30_000
try:
    from playwright.sync_api import expect as _expect
except ImportError:  # the tests skip without Playwright (the chromium fixture says so)
    pass
else:
    _expect.set_options(timeout=EXPECT_TIMEOUT_MS)


def exactly(text: str) -> re.Pattern[str]:
    """For to_have_text: the whole text is ``text`` (a string there would collapse whitespace)."""
    return re.compile("^" + re.escape(text) + "$")


def wait_equal(read: Callable[[], T], want: T, timeout_s: float, what: str) -> None:
    """Poll ``read()`` (common.waiting) until it returns ``want``: a value read from the page or a
    stand-in and compared exactly, which may still be on its way. Fails naming ``what`` with the
    last value read."""
    seen: list[T] = []

    def equal() -> bool:
        seen[:] = [read()]
        return seen[0] == want

    if not held_within(equal, timeout_s):
        last = repr(seen[0]) if seen else "nothing read"
        raise WaitTimeout(f"not within {timeout_s:g} s: {what}: {last}, not {want!r}")


# One Playwright and one Chromium per test process, whichever module asks first: the sync API
# cannot nest, and tests/e2e imports these fixtures too (a second session fixture would nest).
_shared: dict[str, Any] = {}  # the Playwright and its Browser, started lazily


def _shared_browser():
    if "browser" not in _shared:
        from playwright.sync_api import sync_playwright
        pw = sync_playwright().start()
        _shared["playwright"] = pw
        _shared["browser"] = launch(pw)
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


@contextmanager
def standin_pair(base: StandinBehavior, spec: StandinBehavior) -> Iterator[dict[str, Standin]]:
    """A baseline and a speculative stand-in server, by side; both stopped on the way out."""
    servers = {"baseline": Standin(base).start(), "speculative": Standin(spec).start()}
    try:
        yield servers
    finally:
        for s in servers.values():
            s.stop()


def pair_app(base: Standin, spec: Standin, tmp: Path, **extra: str) -> AppProcess:
    """The app on the pair ``base`` and ``spec``, saving runs in ``tmp/runs`` (its ``runs_dir``),
    with short timeouts for stand-ins; ``extra`` adds or overrides settings."""
    app = AppProcess({
        "SPECDEMO_BASELINE_URL": base.url, "SPECDEMO_SPECULATIVE_URL": spec.url, "SPECDEMO_RUNS_DIR": str(tmp / "runs"),
        "SPECDEMO_READ_TIMEOUT_S": "10", "SPECDEMO_PROBE_TIMEOUT_S": "2", **extra,
    }, tmp / "app.log")
    app.runs_dir = tmp / "runs"
    return app
