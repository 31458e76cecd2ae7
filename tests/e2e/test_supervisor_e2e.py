"""The real CPU pair's process layout, and the supervisor healing it: a SIGKILLed server and a hung
(SIGSTOPped) one are replaced by healthy ones, and races work again. The stand-in tests
(tests/test_supervisor.py) prove the supervisor's logic on one-process stand-ins; these prove it on
vLLM's own processes (API server, engine core with the worker inside, and the resource tracker).
The kill and the hang are done at the same moment (one fixture), so the two restarts overlap.

They restart servers, so they run last (tests/e2e/conftest.py), and only on a pair that this test
session started itself (or with SPECDEMO_E2E_DISRUPT=1, on the supervised pair of `servers up`).
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from common.waiting import wait_for
from demo.race import run_race
from demo.results import Message, RaceRequest
from demo.settings import Settings
from servers import procs
from servers.settings import LauncherSettings, parse_cores
from servers.state import LauncherState, ServerRecord, read_state
from tests.e2e.conftest import E2E_RUN_DIR

pytestmark = pytest.mark.e2e
DISRUPTIVE = True  # tests/e2e/conftest.py runs this module last
BACK_WITHIN_S = 300.0  # a warm start is 30-90 s; a busy CI machine may double it


@pytest.fixture(scope="module")
def state_file(real_servers: Settings) -> Path:
    ours = E2E_RUN_DIR / "state.json"
    candidates = [ours] + ([LauncherSettings().state_file] if os.environ.get("SPECDEMO_E2E_DISRUPT") == "1" else [])
    for path in candidates:
        st = read_state(path)
        if st is not None and st.supervisor is not None and procs.is_running(st.supervisor.pid,
                                                                               st.supervisor.start_ticks):
            return path
    pytest.skip("the running pair was not started by this test session (set SPECDEMO_E2E_DISRUPT=1 to let "
                "these tests kill and hang the supervised pair of `python -m servers up`)")


def state(path: Path) -> LauncherState:
    st = read_state(path)
    if st is None:
        raise ValueError(f"no state file at {path}")  # between writes: wait_for tries again
    return st


def record(path: Path, role: str) -> ServerRecord:
    return next(r for r in state(path).servers if r.role == role)


def healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/health", timeout=3.0).status_code == 200
    except httpx.HTTPError:
        return False


def children(pid: int) -> list[int]:
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        kids = (task / "children").read_text().split()
        out.extend(int(k) for k in kids)
    return out


def proc_status(pid: int, key: str) -> str:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return line.split(":", 1)[1].strip()
    return ""


def environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(item.decode(errors="replace").split("=", 1) for item in raw if b"=" in item)


def one_race_works(settings: Settings) -> None:
    req = RaceRequest(messages=[Message(role="user", content="Count from 1 to 20, one number a line.")],
                      max_tokens=24, order="sequential")
    result = asyncio.run(run_race(req, settings))
    assert result.baseline.complete and result.speculative.complete, (result.baseline.error, result.speculative.error)
    assert result.speculative.spec is not None, "per-request speculative metrics after the restart"


def test_each_server_is_an_api_server_and_an_engine_core_with_the_worker_inside(state_file: Path) -> None:
    """Two processes of vLLM a server (and multiprocessing's resource tracker), every thread of the
    engine core on the server's own core, OpenMP told to place its threads there."""
    s = LauncherSettings()
    for rec in state(state_file).servers:
        kids = children(rec.pid)
        names = {k: Path(f"/proc/{k}/comm").read_text().strip() for k in kids}
        cores = [k for k, n in names.items() if n.startswith("VLLM::EngineCor")]
        assert len(cores) == 1, f"{rec.role}: children {names}"
        core = cores[0]
        assert not children(core), f"{rec.role}: the engine core has a worker process of its own"
        others = [n for k, n in names.items() if k != core]
        assert len(others) <= 1, f"{rec.role}: more than the resource tracker beside the engine core: {names}"
        want = ",".join(str(c) for c in sorted(s.cores(rec.role)))
        env = environ(core)
        assert env.get("VLLM_ENABLE_V1_MULTIPROCESSING") == "0"
        assert env.get("OMP_NUM_THREADS") == str(len(s.cores(rec.role)))
        if "libiomp" in env.get("LD_PRELOAD", ""):
            assert env.get("KMP_AFFINITY") == f"granularity=fine,explicit,proclist=[{want}]"
        tasks = list(Path(f"/proc/{core}/task").iterdir())
        allowed = {proc_status(int(t.name), "Cpus_allowed_list") for t in tasks}
        assert {frozenset(parse_cores(a)) for a in allowed} == {frozenset(s.cores(rec.role))}, \
            f"{rec.role}: engine core threads on {allowed}, not {want}"
        print(f"\n{rec.role}: API server {rec.pid}, engine core {core} ({len(tasks)} threads on core {want})")


@dataclass
class Disruption:
    before: ServerRecord  # the server's record when it was disrupted
    took_s: float | None  # until a new process answered /health; None: not within the deadline
    waited_s: float


def _back(state_file: Path, rec: ServerRecord) -> bool:
    try:
        return record(state_file, rec.role).pid != rec.pid and healthy(rec.url)
    except (OSError, ValueError, KeyError, StopIteration):  # the state file between writes
        return False


@pytest.fixture(scope="module")
def disrupted(state_file: Path, real_servers: Settings) -> Iterator[dict[str, Disruption]]:
    """The speculative server SIGKILLed and the baseline SIGSTOPped (alive, port open, never
    answering: a hang) at the same moment, each waited for until a new process answers: the two
    restarts overlap, and the supervisor heals each on its own."""
    spec, base = record(state_file, "speculative"), record(state_file, "baseline")
    deadline = {"speculative": BACK_WITHIN_S, "baseline": BACK_WITHIN_S + LauncherSettings().health_timeout_s}
    out = {"speculative": Disruption(spec, None, deadline["speculative"]),
           "baseline": Disruption(base, None, deadline["baseline"])}
    t0 = time.monotonic()
    os.kill(spec.pid, signal.SIGKILL)
    os.kill(base.pid, signal.SIGSTOP)
    try:
        while time.monotonic() - t0 < max(deadline.values()):
            for role, d in out.items():
                if d.took_s is None and time.monotonic() - t0 < deadline[role] and _back(state_file, d.before):
                    d.took_s = time.monotonic() - t0
            if all(d.took_s is not None for d in out.values()):
                break
            time.sleep(1.0)
    finally:
        if procs.is_running(base.pid, base.start_ticks):
            os.kill(base.pid, signal.SIGCONT)
    yield out


def test_a_sigkilled_server_is_restarted_and_races_again(state_file: Path, real_servers: Settings,
                                                          disrupted: dict[str, Disruption]) -> None:
    d = disrupted["speculative"]
    spec = d.before
    assert d.took_s is not None, f"not within {d.waited_s} s: the SIGKILLed speculative server back and healthy"
    print(f"\nSIGKILL -> healthy again: {d.took_s:.1f} s")
    again = record(state_file, "speculative")
    assert again.restarts == spec.restarts + 1 and again.last_cause == "killed by SIGKILL"
    assert not procs.is_running(spec.pid, spec.start_ticks)
    wait_for(lambda: not any(procs.is_running(k) for k in _engine_cores_of_dead(spec)), 30,
             "the killed server's engine core gone")
    one_race_works(real_servers)


def _engine_cores_of_dead(rec: ServerRecord) -> list[int]:
    """Processes still in the killed server's process group (its engine core, if it outlived it)."""
    return [p for p in procs.group_members(rec.pgid)] if hasattr(procs, "group_members") else []


def test_a_hung_server_is_restarted_after_the_health_timeout(state_file: Path, real_servers: Settings,
                                                             disrupted: dict[str, Disruption]) -> None:
    d = disrupted["baseline"]
    base = d.before
    assert d.took_s is not None, f"not within {d.waited_s} s: the hung baseline replaced"
    print(f"\nSIGSTOP -> healthy again: {d.took_s:.1f} s")
    again = record(state_file, "baseline")
    assert again.last_cause is not None and again.last_cause.startswith("no /health answer for")
    assert not procs.is_running(base.pid, base.start_ticks), "the hung process must be gone, not left stopped"
    one_race_works(real_servers)
