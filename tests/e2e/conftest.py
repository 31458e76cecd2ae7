"""End-to-end fixtures: two real vLLM servers (baseline + n-gram speculative).

Uses servers already healthy at SPECDEMO_BASELINE_URL / SPECDEMO_SPECULATIVE_URL (defaults
127.0.0.1:8000/8001); otherwise starts them with the launcher (`python -m servers up --detach`,
its own run dir logs/servers-e2e) and stops exactly those at the end of the session.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from urllib.parse import urlparse

import httpx
import pytest

from common.waiting import held_within
from demo.settings import Settings
from harness import e2e_pair
from servers import procs
from servers.settings import LauncherSettings
from servers.state import read_state

E2E_RUN_DIR = e2e_pair.RUN_DIR  # the pair's start, as scripts/test.sh starts it: harness/e2e_pair.py


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

    def settled() -> bool:  # healthy, or no longer starting
        return all(_healthy(u) for u in urls) or not any(procs.is_running(r.pid, r.start_ticks) for r in records)

    return held_within(settled, timeout_s, poll_s=2) and all(_healthy(u) for u in urls)


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
    print()
    t0 = time.monotonic()
    # Output goes straight to the terminal: the progress display shows what is happening.
    code = e2e_pair.up(base.port or e2e_pair.BASELINE_PORT, spec.port or e2e_pair.SPECULATIVE_PORT)
    if code != 0:
        pytest.fail(f"`python -m servers up` failed (exit {code}); see its message above")
    print(f"[e2e] both servers healthy after {time.monotonic() - t0:.0f} s", flush=True)
    try:
        yield settings
    finally:
        e2e_pair.down()


@pytest.fixture(scope="session")
def served_model(real_servers: Settings) -> str:
    data = httpx.get(f"{real_servers.baseline_url}/v1/models", timeout=5.0).json()
    return str(data["data"][0]["id"])



def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Modules that restart servers (DISRUPTIVE = True) run after every other test, so that no race
    of another module meets a server being killed."""
    items.sort(key=lambda item: bool(getattr(getattr(item, "module", None), "DISRUPTIVE", False)))
