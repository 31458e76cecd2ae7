"""Load: many viewers race at once through the real page (app.py in a subprocess, its real
queue) against stand-in servers; see benchmarks/load_test.py for the figures' definitions.

Asserts what must hold under load: no lost or stuck run, no errors, the concurrency limit
holds (extra races wait), and every stream that reached a server was closed (completed or
aborted), including those of a viewer that pressed Stop or dropped its connection mid-stream.
The speed figures (added latency per token, app CPU per token) are printed (-s), their target
is checked by ``python -m benchmarks.load_test``, not here.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from benchmarks.load_test import load_behaviors, run_async, run_load, start_app
from common.waiting import wait_for
from harness.standin import Standin

USERS, RACES, CONCURRENCY, STOP_EVERY, LEAVE_EVERY = 8, 3, 2, 4, 12


@pytest.fixture
def servers() -> Iterator[dict[str, Standin]]:
    base_b, spec_b = load_behaviors(tokens_per_s=300)
    with Standin(base_b) as base, Standin(spec_b) as spec:
        yield {"baseline": base, "speculative": spec}


def test_concurrent_viewers_no_lost_or_stuck_runs_and_every_stream_closed(
        servers: dict[str, Standin], tmp_path: Path) -> None:
    app = start_app(servers["baseline"], servers["speculative"], CONCURRENCY, tmp_path)
    try:
        report = run_async(run_load(app, servers, users=USERS, races=RACES, max_tokens=30,
                                      concurrency=CONCURRENCY, stop_every=STOP_EVERY, leave_every=LEAVE_EVERY,
                                      race_timeout_s=90))
    finally:
        app.stop()
    print("\n" + "\n".join(report.lines()))
    planned = USERS * RACES
    assert report.lost == 0 and report.errors == 0, report.error_details
    assert report.done + report.stopped + report.left == planned
    assert report.stopped >= 1 and report.left >= 1  # users pressed Stop, or left, mid-stream
    # Every race reached both servers once; every stream ended, completed or aborted. A stream ends
    # on the stand-in's side only when it sees the disconnect (Stop, a viewer gone), after the page
    # said so: the counts are read once they have settled, not at one instant.
    def counts() -> dict[str, dict[str, int]]:
        return {side: {"started": s.started, "completed": s.completed, "aborted": s.aborted,
                       "faulted": s.faulted, "open_streams": s.open_streams} for side, s in servers.items()}

    def settled() -> bool:
        now = counts()
        return now == counts() and all(c["started"] == planned and c["open_streams"] == 0 and c["started"]
                                       == c["completed"] + c["aborted"] + c["faulted"] for c in now.values())

    try:
        wait_for(settled, 30, "every stream on both stand-ins ended and counted (none open, started = completed "
                 "+ aborted)")
    finally:
        standins = counts()
        print(f"stand-ins' counts: {standins}; stopped {report.stopped}, left {report.left}")
    for side, c in standins.items():
        assert c["started"] == planned, (side, c)
        assert c["open_streams"] == 0 and c["faulted"] == 0, (side, c)
        assert c["started"] == c["completed"] + c["aborted"], (side, c)
    # Race by race, from the stand-ins' own records (no clock): a race its user saw done completed on
    # both servers, and only a race stopped or left was aborted anywhere. A viewer gone aborted the
    # baseline's stream (4,000 tokens, still streaming when the page's 5 s watchdog cuts it); a Stop
    # aborted it at least once (one that reaches a server after the stream ended finds nothing to cut).
    assert len(report.race_states) == planned
    ends = {side: {race: [t.outcome for t in s.truth if race in t.prompt] for race in report.race_states}
            for side, s in servers.items()}
    for side, per_race in ends.items():
        for race, state in report.race_states.items():
            want = {"completed"} if state == "done" else {"completed", "aborted"}
            assert len(per_race[race]) == 1 and per_race[race][0] in want, (side, race, state, per_race[race])
    by_state = {state: [ends["baseline"][race][0] for race, s in report.race_states.items() if s == state]
                for state in ("stopped", "left")}
    assert set(by_state["left"]) == {"aborted"} and "aborted" in by_state["stopped"], by_state
    # The queue: never more than the limit streaming, and the rest waited for a slot.
    assert all(1 <= n <= CONCURRENCY for n in report.peak_streams.values()), report.peak_streams
    assert report.queued_races >= 1 and report.max_wait_s > 0
    assert report.tokens_delivered > 0 and report.latency_p50_ms is not None
