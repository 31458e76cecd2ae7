"""Load test: many viewers racing at once through the real page, against stand-in servers.

The page runs as ``python app.py`` in a subprocess (its real queue and concurrency limit);
two stand-in vLLM servers run in this process, so their send times and counters are at hand.
Each simulated user is a browser session driving Gradio's own HTTP API, as the page's
JavaScript does: ``POST /gradio_api/queue/join`` for the race event, then the
``/gradio_api/queue/data`` event stream of its frames; Stop is the page's Stop event.
Users run their races one after another; every ``--stop-every``-th race is stopped by its
user once tokens flow, and every ``--leave-every``-th one is left mid-stream (the viewer drops
its connection, like a closed tab), so aborts are part of the load.

Figures (all printed):
- races done / stopped / left / errors / lost. *Lost* = no final frame within ``--race-timeout-s``
  (a stuck or vanished run). Target: no errors, no lost runs.
- waiting: races Gradio's queue put behind another event (it reported a queue rank >= 1), the
  longest wait from Start to the race starting, and the peak of streams open at once on each
  stand-in (from its records), which the page's limit bounds: at most ``--concurrency``.
- streams: the stand-ins' own counts. Every started stream must be closed at the end:
  ``open_streams == 0`` and ``started == completed + aborted`` on both servers.
- added latency per token, p50/p95: for every token of every race, on the same clock
  (``time.perf_counter`` of this process): the time the viewer received the first frame whose
  tokens tile counts that token, minus the time the stand-in wrote the chunk holding it to its
  socket. It is everything the app adds between the server and the viewer: the client's
  parsing and measurement, the snapshot cadence of the race (demo.live.frame_stream.SNAPSHOT_INTERVAL_S,
  50 ms: a token waits for the next frame by design, ~25 ms on average), rendering the frame,
  Gradio's queue and the event stream. On a shared 2-core machine the viewers, the stand-ins and
  the app compete for the CPU, so it is an upper bound.
- app CPU per token: CPU seconds the app process spent during the load (user + system, from
  /proc) divided by the tokens it delivered to viewers (both sides). This is the cost the app
  adds per token independent of the frame cadence. Target: under 2 ms per token.

    python -m benchmarks.load_test [--users 20] [--races 5] [--max-tokens 100] [--concurrency 4]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import re
import secrets
import sys
import tempfile
import time
from collections.abc import AsyncGenerator, Coroutine
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import httpx
from pydantic import BaseModel, Field

from common.procstat import cpu_seconds
from demo.measure import percentile
from demo.results import SIDES
from harness.app_process import AppProcess
from harness.standin import Standin, StandinBehavior

T = TypeVar("T")
TARGET_CPU_MS_PER_TOKEN = 2.0
# A race its viewer leaves asks for this many tokens, so that it is still streaming when the
# page's unread-frame watchdog (5 s) aborts it.
LEAVE_TOKENS = 4000
# A race its user stops asks for at least this many, so that the Stop (sent once the page shows five
# baseline tokens) lands while the baseline still streams, however late the page draws.
STOP_TOKENS = 1000
_TOKENS = re.compile(r'data-key="tokens"[^>]*?data-value="(\d+)"')
_STATE = re.compile(r'class="sd-run-status" data-state="(\w+)"')


def _per_side() -> dict[str, list[tuple[float, int]]]:
    return {"baseline": [], "speculative": []}


class RaceOutcome(BaseModel):
    user: int
    index: int
    prompt: str
    state: str = "lost"  # done | stopped | left | error | lost (no final frame in time)
    detail: str = ""
    stop_requested: bool = False
    leave_requested: bool = False  # drop the connection mid-stream, as a closed tab does
    queued: bool = False
    wait_s: float | None = None  # Start (join) to process_starts
    frames: int = 0
    # (perf_counter when the frame arrived, tokens shown) per side, for the latency figure.
    seen: dict[str, list[tuple[float, int]]] = Field(default_factory=_per_side)


class LoadReport(BaseModel):
    users: int
    races_per_user: int
    concurrency: int
    max_tokens: int
    duration_s: float
    done: int
    stopped: int
    left: int
    errors: int
    lost: int
    error_details: list[str]
    queued_races: int
    max_wait_s: float
    tokens_delivered: int
    latency_p50_ms: float | None
    latency_p95_ms: float | None
    latency_max_ms: float | None
    app_cpu_s: float | None
    app_cpu_ms_per_token: float | None
    standins: dict[str, dict[str, int]]
    peak_streams: dict[str, int]
    race_states: dict[str, str] = {}  # each race's prompt -> how it ended for its user (done, stopped, left, ...)

    @property
    def streams_all_closed(self) -> bool:
        return all(c["open_streams"] == 0 and c["started"] == c["completed"] + c["aborted"]
                   for c in self.standins.values())

    def lines(self) -> list[str]:
        def ms(x: float | None) -> str:
            return "n/a" if x is None else f"{x:.1f} ms"
        planned = self.users * self.races_per_user
        cpu = self.app_cpu_ms_per_token
        verdict = "n/a" if cpu is None else ("PASS" if cpu < TARGET_CPU_MS_PER_TOKEN else "MISS")
        out = [
            f"load: {self.users} users x {self.races_per_user} races = {planned} races, "
            f"page runs {self.concurrency} at a time, max_tokens {self.max_tokens}, {self.duration_s:.1f} s",
            f"races: {self.done} done, {self.stopped} stopped by their user, {self.left} left mid-stream "
            f"by their viewer, {self.errors} errors, {self.lost} lost/stuck",
            f"waiting: {self.queued_races} races queued (Gradio rank >= 1); longest wait before starting "
            f"{self.max_wait_s:.2f} s; peak streams open at once: "
            + ", ".join(f"{side} {n}" for side, n in self.peak_streams.items()),
        ]
        for side, c in self.standins.items():
            out.append(f"streams {side}: started {c['started']}, completed {c['completed']}, aborted "
                       f"{c['aborted']}, faulted {c['faulted']}, still open {c['open_streams']}")
        out += [
            f"every started stream closed: {'yes' if self.streams_all_closed else 'NO'}",
            f"added latency per token (stand-in send -> viewer), {self.tokens_delivered} tokens: "
            f"p50 {ms(self.latency_p50_ms)}, p95 {ms(self.latency_p95_ms)}, max {ms(self.latency_max_ms)} "
            "(includes the page's 50 ms frame cadence)",
            f"app CPU per token streamed: {ms(cpu)} (target < {TARGET_CPU_MS_PER_TOKEN:g} ms: {verdict})",
        ]
        if self.app_cpu_s is not None:
            out.append(f"app process busy {self.app_cpu_s / self.duration_s:.2f} of a core on average "
                       "(one Python process: near 1.0 it is saturated and the latency grows)")
        out += [f"  error: {d}" for d in self.error_details[:10]]
        return out


def run_async(coro: Coroutine[Any, Any, T]) -> T:
    """asyncio.run in a worker thread: safe even when the caller's thread already runs an event
    loop (in a pytest session, the browser tests' session-wide Playwright keeps one running)."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


class PageApi:
    """What a viewer needs from the page's Gradio config: event ids and output positions."""

    def __init__(self, config: dict[str, Any]) -> None:
        deps = {d.get("api_name"): d for d in config["dependencies"]}
        elem = {c["id"]: (c.get("props") or {}).get("elem_id") for c in config["components"]}
        self.race_id: int = deps["on_race"]["id"]
        self.stop_id: int = deps["on_stop"]["id"]
        outputs = [elem.get(i) for i in deps["on_race"]["outputs"]]
        self.n_inputs = len(deps["on_race"]["inputs"])
        self.status_at = outputs.index("sd-run-status")
        self.tiles_at = {side: outputs.index(f"sd-tiles-{side}") for side in SIDES}
        # The page follows a race with on_finish, which shows the final status with the result.
        self.finish_id: int = deps["on_finish"]["id"]
        self.finish_n_inputs = len(deps["on_finish"]["inputs"])
        self.finish_status_at = [elem.get(i) for i in deps["on_finish"]["outputs"]].index("sd-run-status")


def _apply(old: str | None, value: Any, diffed: bool) -> str | None:
    """A string output's new value from a frame (Gradio sends diffs after the first frame)."""
    if not diffed:
        return value if isinstance(value, str) else old
    for action, path, v in value:
        if path:
            continue  # an update dict, not the HTML string
        if action == "replace":
            old = v if isinstance(v, str) else old
        elif action == "append" and isinstance(v, str):
            old = (old or "") + v
    return old


async def _events(http: httpx.AsyncClient, fn_index: int, data: list[Any],
                  session: str) -> AsyncGenerator[tuple[float, dict], None]:
    """Join the queue for one event and yield (arrival time, message) from the session's stream."""
    r = await http.post("/gradio_api/queue/join", json={"data": data, "fn_index": fn_index,
                                                         "session_hash": session, "event_data": None,
                                                         "trigger_id": None})
    r.raise_for_status()
    async with http.stream("GET", "/gradio_api/queue/data", params={"session_hash": session}) as resp:
        async for line in resp.aiter_lines():
            if line.startswith("data:"):
                yield time.perf_counter(), json.loads(line[5:])


async def race_once(http: httpx.AsyncClient, page: PageApi, out: RaceOutcome, max_tokens: int,
                    timeout_s: float) -> None:
    session = secrets.token_hex(8)
    data = [None, out.prompt, 0.0, max_tokens, "simultaneous", None, 1]  # the workload State, then Users
    assert len(data) == page.n_inputs, "the race event's inputs changed: update the load test"
    t_join = time.perf_counter()
    status: str | None = None
    tiles: dict[str, str | None] = {"baseline": None, "speculative": None}
    stop_sent = False
    async with asyncio.timeout(timeout_s):
        async with contextlib.aclosing(_events(http, page.race_id, data, session)) as events:
            async for now, msg in events:
                kind = msg.get("msg")
                if kind == "estimation" and (msg.get("rank") or 0) > 0:
                    out.queued = True
                elif kind == "process_starts":
                    out.wait_s = now - t_join
                elif kind in ("process_generating", "process_completed"):
                    if not msg.get("success", True):
                        out.state, out.detail = "error", str(msg.get("output", {}).get("error"))[:200]
                        return
                    values = (msg.get("output") or {}).get("data") or []
                    diffed = kind == "process_generating" and out.frames > 0
                    out.frames += 1
                    if values:
                        status = _apply(status, values[page.status_at], diffed)
                        for side, at in page.tiles_at.items():
                            tiles[side] = _apply(tiles[side], values[at], diffed)
                            m = _TOKENS.search(tiles[side] or "")
                            if m:
                                out.seen[side].append((now, int(m.group(1))))
                    if out.leave_requested and out.seen["baseline"] and out.seen["baseline"][-1][1] >= 5:
                        out.state = "left"
                        return  # leaving the block closes the connection mid-stream
                    if out.stop_requested and not stop_sent and out.seen["baseline"] \
                            and out.seen["baseline"][-1][1] >= 5:
                        stop_sent = True
                        # Stop is a queue-less event: the page posts it the same way.
                        await http.post("/gradio_api/run/predict", json={
                            "data": [], "fn_index": page.stop_id, "session_hash": session,
                            "event_data": None, "trigger_id": None})
                    if kind == "process_completed":
                        break
                elif kind == "close_stream":
                    out.detail = "the event stream ended without a final frame"
                    return
            else:
                out.detail = "the event stream ended without a final frame"
                return
        # As the page does: on_finish draws the result and shows the final status (its inputs
        # are session State, which the server fills in).
        async with contextlib.aclosing(_events(http, page.finish_id, [None] * page.finish_n_inputs,
                                               session)) as events:
            async for _now, msg in events:
                if msg.get("msg") == "process_completed":
                    values = (msg.get("output") or {}).get("data") or []
                    if not msg.get("success", True):
                        out.state, out.detail = "error", str(msg.get("output", {}).get("error"))[:200]
                        return
                    if values:
                        status = _apply(status, values[page.finish_status_at], False)
                    break
    m = _STATE.search(status or "")
    out.state = m.group(1) if m else "error"
    if out.state not in ("done", "stopped"):
        out.detail = re.sub(r"<[^>]+>", " ", status or "")[:300]


async def _user(http: httpx.AsyncClient, page: PageApi, user: int, races: int, max_tokens: int,
                stop_every: int, leave_every: int, timeout_s: float) -> list[RaceOutcome]:
    outcomes = []
    for i in range(races):
        n = user * races + i
        out = RaceOutcome(user=user, index=i, prompt=f"Load test user {user} race {i}: tell me about foxes.",
                          stop_requested=stop_every > 0 and n % stop_every == stop_every - 1)
        # A left race must outlast the page's unread-frame watchdog (5 s) to show the abort.
        out.leave_requested = leave_every > 0 and n % leave_every == 0 and not out.stop_requested
        try:
            tokens = LEAVE_TOKENS if out.leave_requested else max(max_tokens, STOP_TOKENS) if out.stop_requested \
                else max_tokens
            await race_once(http, page, out, tokens, timeout_s)
        except TimeoutError:
            out.state, out.detail = "lost", f"no final frame within {timeout_s:g} s"
        except httpx.HTTPError as e:
            out.state, out.detail = "error", f"{type(e).__name__}: {e}"
        outcomes.append(out)
    return outcomes


def _latencies(outcomes: list[RaceOutcome], servers: dict[str, Standin]) -> list[float]:
    """Per token: viewer receive time minus stand-in send time, in seconds (see the docstring)."""
    sent: dict[str, dict[str, list[float]]] = {}
    for side, s in servers.items():
        # Requests and truths are appended in the same order (no await between them).
        assert len(s.requests) == len(s.truth), f"{side}: a request was refused before it streamed"
        sent[side] = {}
        for req, truth in zip(s.requests, s.truth, strict=True):
            prompt = req.body["messages"][-1]["content"]
            # One send time per chunk: each of the chunk's tokens left at that time.
            sent[side][prompt] = [t for n, t in zip(truth.chunk_sizes_sent, truth.chunk_send_times, strict=True)
                                  for _ in range(n)]
    lat: list[float] = []
    for out in outcomes:
        for side, seen in out.seen.items():
            times = sent[side].get(out.prompt, [])
            shown = 0
            for t_recv, n in seen:
                for j in range(shown, min(n, len(times))):
                    lat.append(t_recv - times[j])
                shown = max(shown, n)
    return lat


async def run_load(app: AppProcess, servers: dict[str, Standin], *, users: int, races: int,
                   max_tokens: int, concurrency: int, stop_every: int = 5, leave_every: int = 0,
                   race_timeout_s: float = 60.0) -> LoadReport:
    """Drive the page with ``users`` concurrent sessions of ``races`` races each; report."""
    limits = httpx.Limits(max_connections=4 * users + 10, max_keepalive_connections=2 * users)
    async with httpx.AsyncClient(base_url=app.url.rstrip("/"), limits=limits, trust_env=False,
                                 timeout=httpx.Timeout(10.0, read=race_timeout_s)) as http:
        page = PageApi((await http.get("/config")).json())
        cpu0, t0 = cpu_seconds(app.proc.pid), time.perf_counter()
        groups = await asyncio.gather(*(_user(http, page, u, races, max_tokens, stop_every, leave_every,
                                              race_timeout_s)
                                        for u in range(users)))
        duration, cpu1 = time.perf_counter() - t0, cpu_seconds(app.proc.pid)
    for s in servers.values():
        s.wait_idle(10)  # abort detection is asynchronous
    outcomes = [o for g in groups for o in g]
    lat = _latencies(outcomes, servers)
    p50, p95 = percentile(lat, 50), percentile(lat, 95)  # None for no latencies
    tokens = sum(max((n for _, n in seen), default=0) for o in outcomes for seen in o.seen.values())
    cpu = None if cpu0 is None or cpu1 is None else cpu1 - cpu0
    count = {state: sum(o.state == state for o in outcomes)
             for state in ("done", "stopped", "left", "error", "lost")}
    return LoadReport(
        users=users, races_per_user=races, concurrency=concurrency, max_tokens=max_tokens,
        duration_s=duration, done=count["done"], stopped=count["stopped"], left=count["left"],
        errors=count["error"],
        lost=count["lost"],
        error_details=[f"user {o.user} race {o.index}: {o.state}: {o.detail}" for o in outcomes
                       if o.state not in ("done", "stopped", "left")],
        queued_races=sum(o.queued for o in outcomes),
        max_wait_s=max((o.wait_s or 0.0 for o in outcomes), default=0.0),
        tokens_delivered=tokens,
        latency_p50_ms=None if p50 is None else p50 * 1000,
        latency_p95_ms=None if p95 is None else p95 * 1000,
        latency_max_ms=None if not lat else max(lat) * 1000,
        app_cpu_s=cpu, app_cpu_ms_per_token=None if cpu is None or not tokens else cpu / tokens * 1000,
        standins={side: {"started": s.started, "completed": s.completed, "aborted": s.aborted,
                         "faulted": s.faulted, "open_streams": s.open_streams} for side, s in servers.items()},
        peak_streams={side: _peak_open(s) for side, s in servers.items()},
        race_states={o.prompt: o.state for o in outcomes},
    )


def _peak_open(server: Standin) -> int:
    """Most generation streams that were open at the same time, from the stand-in's records
    (a stream spans its request to its last token sent)."""
    edges: list[tuple[float, int]] = []
    for t in server.truth:
        edges += [(t.t_request, 1), (t.t_last_token_sent or t.t_request, -1)]
    peak = now = 0
    for _, step in sorted(edges, key=lambda e: (e[0], e[1])):  # an end before a start at the same time
        now += step
        peak = max(peak, now)
    return peak


def load_behaviors(tokens_per_s: float) -> tuple[StandinBehavior, StandinBehavior]:
    room = LEAVE_TOKENS + 100  # max_model_len: room for the longest answer
    return (StandinBehavior(tokens_per_s=tokens_per_s, ttft_s=0.02, max_model_len=room),
            StandinBehavior(speculative=True, tokens_per_s=tokens_per_s * 2.5, ttft_s=0.02,
                            chunk_sizes=[1, 3, 5, 2], max_model_len=room))


def start_app(base: Standin, spec: Standin, concurrency: int, workdir: Path) -> AppProcess:
    return AppProcess({"SPECDEMO_BASELINE_URL": base.url, "SPECDEMO_SPECULATIVE_URL": spec.url,
                       "SPECDEMO_MAX_CONCURRENT_RACES": str(concurrency), "SPECDEMO_SAVE_RUNS": "false",
                       "SPECDEMO_READ_TIMEOUT_S": "20", "SPECDEMO_PRESETS_DIR": str(workdir)},
                      workdir / "app.log")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--users", type=int, default=20)
    ap.add_argument("--races", type=int, default=5, help="races per user, one after another")
    ap.add_argument("--max-tokens", type=int, default=100)
    ap.add_argument("--concurrency", type=int, default=4, help="SPECDEMO_MAX_CONCURRENT_RACES of the page")
    ap.add_argument("--tokens-per-s", type=float, default=200, help="baseline stand-in rate (speculative 2.5x)")
    ap.add_argument("--stop-every", type=int, default=5, help="every n-th race is stopped by its user (0: none)")
    ap.add_argument("--leave-every", type=int, default=20,
                    help="every n-th race is left mid-stream by its viewer (0: none)")
    ap.add_argument("--race-timeout-s", type=float, default=90)
    a = ap.parse_args()
    base_b, spec_b = load_behaviors(a.tokens_per_s)
    with tempfile.TemporaryDirectory() as tmp, Standin(base_b) as base, Standin(spec_b) as spec:
        app = start_app(base, spec, a.concurrency, Path(tmp))
        try:
            report = asyncio.run(run_load(app, {"baseline": base, "speculative": spec}, users=a.users,
                                          races=a.races, max_tokens=a.max_tokens, concurrency=a.concurrency,
                                          stop_every=a.stop_every, leave_every=a.leave_every,
                                          race_timeout_s=a.race_timeout_s))
        finally:
            app.stop()
    print("\n".join(report.lines()))
    ok = report.errors == 0 and report.lost == 0 and report.streams_all_closed
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
