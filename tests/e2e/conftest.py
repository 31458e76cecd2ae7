"""End-to-end fixtures: two real vLLM servers (baseline + n-gram speculative).

Uses servers already healthy at SPECDEMO_BASELINE_URL / SPECDEMO_SPECULATIVE_URL (defaults
127.0.0.1:8000/8001); otherwise starts them with the launcher (`python -m servers up --detach`,
its own run dir logs/servers-e2e) and stops exactly those at the end of the session.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from urllib.parse import urlparse

import httpx
import pytest

from common.paths import ROOT
from demo.settings import Settings
from servers import procs
from servers.settings import LauncherSettings
from servers.state import read_state

E2E_RUN_DIR = ROOT / "logs" / "servers-e2e"
# The pair this session starts replaces a hung server after this long without /health (the
# product's default is 30 s): test_supervisor_e2e.py's hang waits that long. As scripts/test.sh.
HEALTH_TIMEOUT_S = "10"


def _healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/health", timeout=3.0).status_code == 200
    except httpx.HTTPError:
        return False


def _wait_for_a_starting_pair(urls: tuple[str, str], timeout_s: float = 900) -> bool:
    """True once a pair that `python -m servers up` is starting right now becomes healthy."""
    # A pair from `python -m servers up`, or from another test session's fixture.
    states = [read_state(f) for f in (LauncherSettings().state_file, E2E_RUN_DIR / "state.json")]
    records = [r for st in states if st is not None for r in st.servers]
    if not any(procs.is_running(r.pid, r.start_ticks) for r in records):
        return False
    print("\n[e2e] a server pair is starting (python -m servers up); waiting for it", flush=True)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if all(_healthy(u) for u in urls):
            return True
        if not any(procs.is_running(r.pid, r.start_ticks) for r in records):
            return False
        time.sleep(2)
    return False


@pytest.fixture(scope="session")
def real_servers() -> Iterator[Settings]:
    settings = Settings(save_runs=False)
    urls = (settings.baseline_url, settings.speculative_url)
    if all(_healthy(u) for u in urls) or _wait_for_a_starting_pair(urls):
        print(f"\n[e2e] using running servers {urls[0]} and {urls[1]}")
        yield settings
        return
    base, spec = (urlparse(u) for u in urls)
    if base.hostname not in ("127.0.0.1", "localhost") or spec.hostname != base.hostname:
        pytest.fail(f"servers at {urls} are not healthy and are not local, so they cannot be started here")
    cmd = [sys.executable, "-m", "servers", "up", "--detach", "--host", "127.0.0.1",
           "--baseline-port", str(base.port), "--speculative-port", str(spec.port), "--run-dir", str(E2E_RUN_DIR)]
    print(f"\n[e2e] starting the servers: {' '.join(cmd[1:])}", flush=True)
    t0 = time.monotonic()
    # Output goes straight to the terminal: the progress display shows what is happening.
    up = subprocess.run(cmd, cwd=ROOT, timeout=1500,
                        env={**os.environ, "SPECDEMO_SERVERS_HEALTH_TIMEOUT_S": HEALTH_TIMEOUT_S})
    if up.returncode != 0:
        pytest.fail(f"`python -m servers up` failed (exit {up.returncode}); see its message above")
    print(f"[e2e] both servers healthy after {time.monotonic() - t0:.0f} s", flush=True)
    try:
        yield settings
    finally:
        subprocess.run([sys.executable, "-m", "servers", "down", "--run-dir", str(E2E_RUN_DIR)],
                       cwd=ROOT, timeout=120)


@pytest.fixture(scope="session")
def served_model(real_servers: Settings) -> str:
    data = httpx.get(f"{real_servers.baseline_url}/v1/models", timeout=5.0).json()
    return str(data["data"][0]["id"])



def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Modules that restart servers (DISRUPTIVE = True) run after every other test, so that no race
    of another module meets a server being killed."""
    items.sort(key=lambda item: bool(getattr(getattr(item, "module", None), "DISRUPTIVE", False)))
