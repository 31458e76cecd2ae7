"""Soak test of booth mode: the page races presets by itself for M minutes while its servers are killed.

    python -m benchmarks.soak --minutes M [--servers cpu|standin] [--seed S]
                              [--kills speculative,baseline] [--out DIR] [--pause-s 2]

What runs:
- servers: ``cpu`` (default) uses the real CPU vLLM pair (``python -m servers up --detach`` when it
  is not running, said so, and ``down`` at the end only then: the pair is left as found);
  ``standin`` runs two stand-ins (benchmarks/soak_standin.py) under the real supervisor, on free
  ports, with their run dir under the output folder; always torn down.
- the app: ``python app.py --booth`` in a subprocess on a free port, with its own runs dir under
  the output folder and a short pause between races.
- the page: headless Chromium (Playwright on /usr/bin/chromium) keeps it open for M minutes; it is
  polled every few seconds for the booth caption and for any error marker, and its console
  errors (and uncaught script errors) are collected.
- kills: each server in --kills is killed once (SIGKILL to its process group leader, from the
  launcher's state file) at a random time: the window [lead, M minutes - tail] is cut into one
  slot per kill and each lands at a uniform random time in its slot. A kill also waits until a
  live race has been saved (so the booth has a recording to show), for a bounded time until the
  server is streaming a live race's answer with at least half of it still to come (the hardest
  moment: the race fails mid-way; judged from the server's /metrics, not from the page, which
  lags), and until the kill before it has healed and a live race has run again.

What is measured (files in --out: races.jsonl, samples.jsonl, events.jsonl, summary.json, app.log):
- per booth race, from the app's ``booth-race {json}`` log lines: source (live / recording /
  none), outcome, speedup, the saved file (checked on disk when the line is read).
- every minute: RSS of the app, the supervisor and each server (summed over its process group),
  and the disk used by the runs dir.
- per kill: kill -> healthy (the supervisor restarted it and /health answers) and kill -> live
  (the first live race that started after it was healthy again); mid-race when the live race on
  at the kill failed (the kill cut it), whatever the soak aimed at.
- the summary and a PASS/FAIL line: no lost run, every kill done and healed (live again), no error
  marker on the page (a failed side, an error state, Gradio's error toast), no console error, no
  live race failed outside an outage, app memory growth < 50 MB/h (judged for runs of 20 minutes or more).

Every wait is bounded; Ctrl-C (or SIGTERM) stops what this started and leaves the pair as found.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager, suppress
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, TextIO

import httpx
from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from common.paths import ROOT
from demo.measure import percentile
from demo.metrics import parse_metrics
from demo.presets import load_presets
from harness.ports import free_port
from servers import procs
from servers.config import Role
from servers.launcher import ROLES, health_ok
from servers.settings import LauncherSettings
from servers.state import LauncherState, ServerRecord, read_state

MARKER = "booth-race "
GROWTH_LIMIT_MB_PER_H = 50.0
GROWTH_JUDGED_FROM_MIN = 20.0
SAMPLE_EVERY_S = 60.0
PAGE_POLL_S = 3.0
LOOP_S = 0.25
DUE_LOOP_S = 0.05  # while a kill is due: a stand-in streams a short answer in about a second
# A due kill lands only while the server has at least this share of the live answer to come.
MID_STREAM_TO_COME = 0.5
MB = 1e6
# Anything on the page that says a run failed: a side's error line, a run status or pane in the
# error state, Gradio's error toast. The servers-down banner (.sd-banner) is not one: during an
# outage it is the intended message.
ERROR_SELECTOR = '.sd-side-error, [data-state="error"], .toast-body.error'
CAPTION_SELECTOR = "#sd-booth-caption .sd-booth-caption"
RUN_STATUS_SELECTOR = "#sd-run-status .sd-run-status"
# One call per poll: caption, run status and the visible error markers. (Whether a server is
# still streaming is asked of the server, AnswerProbe: the page shows it late.)
POLL_JS = """([errSel, capSel, runSel]) => {
  const visible = el => !!(el.offsetWidth || el.offsetHeight || el.getClientRects().length);
  const cap = document.querySelector(capSel);
  const run = document.querySelector(runSel);
  const errors = [];
  for (const el of document.querySelectorAll(errSel)) {
    if (visible(el)) errors.push(`${el.className}: ${(el.textContent || '').trim().slice(0, 200)}`);
  }
  return {caption: cap ? (cap.dataset.state || null) : null, preset: cap ? (cap.dataset.preset || null) : null,
          run: run ? (run.dataset.state || null) : null, errors};
}"""


# ----------------------------------------------------------------------------- the app's log lines


class BoothRace(BaseModel):
    """One ``booth-race`` log line of the app (one race of the rotation, when it ended)."""

    model_config = ConfigDict(extra="ignore")

    n: int
    preset: str
    source: Literal["live", "recording", "none"]
    outcome: Literal["done", "error", "stopped"] | None = None
    speedup: float | None = None
    saved: str | None = None
    started_at: datetime
    ended_at: datetime
    note: str | None = None

    @field_validator("started_at", "ended_at")
    @classmethod
    def _utc(cls, v: datetime) -> datetime:
        return v.replace(tzinfo=UTC) if v.tzinfo is None else v


class RaceSeen(BoothRace):
    """A booth race as the soak saw it: when its line was read and whether its saved file was there."""

    seen_at: datetime
    saved_found: bool | None = None  # None: nothing to look for (a recording, or nothing saved)


def parse_booth_line(line: str) -> BoothRace | None:
    """The race of a ``booth-race {json}`` line (any logging prefix before it); None for any other
    line. A marked line whose JSON is broken or incomplete raises ValueError."""
    at = line.find(MARKER + "{")
    if at < 0:
        return None
    text = line[at + len(MARKER):]
    try:
        obj, _ = json.JSONDecoder().raw_decode(text)
        return BoothRace.model_validate(obj)
    except (ValueError, ValidationError) as e:
        raise ValueError(f"unreadable booth-race line ({type(e).__name__}): {text.strip()[:200]}") from None


class LogTail:
    """New complete lines of a growing file, from where the last call stopped."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._pos = 0
        self._partial = ""

    def lines(self) -> list[str]:
        try:
            with open(self.path, encoding="utf-8", errors="replace") as f:
                f.seek(self._pos)
                chunk = f.read()
                self._pos = f.tell()
        except OSError:
            return []
        text = self._partial + chunk
        *done, self._partial = text.split("\n")
        return done


def saved_path(runs_dir: Path, saved: str) -> Path:
    p = Path(saved)
    return p if p.is_absolute() else runs_dir / p


# ----------------------------------------------------------------------------- memory and disk


def group_rss_bytes(pgid: int) -> int | None:
    """RSS summed over a process group (a server and the workers it forked); None when it is gone."""
    pids = procs.group_pids(pgid)
    return procs.rss_bytes(pids) if pids else None


def tree_rss_bytes(pid: int) -> int | None:
    """RSS of a process and all its descendants; None when it is gone."""
    if not procs.is_running(pid):
        return None
    kids = procs.children()
    todo, seen = [pid], []
    while todo:
        p = todo.pop()
        seen.append(p)
        todo.extend(kids.get(p, []))
    return procs.rss_bytes(seen)


def dir_usage(path: Path) -> tuple[int, int]:
    """(bytes, files) under path; (0, 0) when it does not exist yet."""
    total = files = 0
    for p in path.rglob("*") if path.is_dir() else []:
        with suppress(OSError):
            if p.is_file():
                total += p.stat().st_size
                files += 1
    return total, files


class Sample(BaseModel):
    t_s: float  # since the page opened
    at: datetime
    app_rss_bytes: int | None
    supervisor_rss_bytes: int | None
    server_rss_bytes: dict[str, int | None]
    runs_dir_bytes: int
    runs_files: int


def growth_mb_per_h(points: list[tuple[float, float]]) -> float | None:
    """Slope of a least-squares line through (seconds, bytes), in MB per hour; None with fewer than
    two samples or no time between them."""
    if len(points) < 2 or len({t for t, _ in points}) < 2:
        return None
    slope, _ = statistics.linear_regression([t for t, _ in points], [b for _, b in points])
    return slope * 3600 / MB


# ----------------------------------------------------------------------------- kills


def plan_kills(roles: list[Role], duration_s: float, rng: random.Random, lead_s: float,
               tail_s: float) -> list[tuple[Role, float]]:
    """(role, planned seconds after the page opened) per kill, in the given order: the window
    [lead_s, duration_s - tail_s] is cut into one slot per kill, each kill at a uniform random time
    in its own slot (so the kills are spread out and in order). A window too short collapses to
    lead_s."""
    if not roles:
        return []
    end = max(lead_s, duration_s - tail_s)
    width = (end - lead_s) / len(roles)
    return [(role, lead_s + width * (i + rng.random())) for i, role in enumerate(roles)]


class Kill(BaseModel):
    role: Role
    planned_at_s: float
    killed_at: datetime | None = None
    killed_at_s: float | None = None
    pid: int | None = None
    # What the server had streamed of a live answer at the kill, by its /metrics (AnswerProbe), of
    # the preset's max_tokens; None when no live answer was streaming (the wait for one ran out).
    tokens_done: int | None = None
    max_tokens: int | None = None
    healthy_at: datetime | None = None  # restarted (another PID) and /health answered
    new_pid: int | None = None
    note: str | None = None  # why it was not done, or did not heal

    def outage_end(self, races: list[RaceSeen], end: datetime) -> datetime:
        """The outage lasts from the kill until the first live race after healing started (or the
        end of the run)."""
        live = first_live_after(races, self.healthy_at) if self.healthy_at else None
        return live.started_at if live else end


class AnswerProbe:
    """How far a server is into the answer it streams now, from its /metrics (vLLM's names, which
    the stand-in publishes too): a request running, and vllm:generation_tokens_total since the
    server was last seen idle. The booth is a server's only client, one request a race, so that
    difference is the live answer's tokens so far. The page is no judge of it: it shows tokens late
    (later on a busy machine), and a kill timed by the page can land after the last token."""

    def __init__(self, url: str, timeout_s: float = 2.0) -> None:
        self.url = url.rstrip("/") + "/metrics"
        self.timeout_s = timeout_s
        self._idle_total: float | None = None

    def tokens_done(self) -> int | None:
        """Tokens of the answer streaming now; None when no request runs, the scrape fails, or the
        request was already running at the first look (where it began is unknown)."""
        try:
            r = httpx.get(self.url, timeout=self.timeout_s, trust_env=False)
        except httpx.HTTPError:
            return None
        m = parse_metrics(r.text) if r.status_code == 200 else None
        if m is None or not m.ok or m.num_requests_running is None or m.generation_tokens_total is None:
            return None
        return self.observe(m.num_requests_running, m.generation_tokens_total)

    def observe(self, running: float, generated_total: float) -> int | None:
        """One scrape's two figures -> tokens of the answer streaming now (see tokens_done)."""
        if running < 1:
            self._idle_total = generated_total
            return None
        if self._idle_total is None:
            return None
        return int(generated_total - self._idle_total)


def mid_stream(tokens_done: int | None, max_tokens: int | None) -> bool:
    """A kill now cuts the answer: it has begun (a token is out) and at least MID_STREAM_TO_COME
    of max_tokens is still to come, time enough for the kill to land before the last token even
    on a busy machine (on a stand-in, which always streams max_tokens, half an answer is 0.5 s or
    more). On a real server an answer may stop early, before max_tokens: the summary's mid_race
    says whether the race was cut."""
    return (tokens_done is not None and max_tokens is not None and tokens_done >= 1
            and max_tokens - tokens_done >= MID_STREAM_TO_COME * max_tokens)


def cut_race(races: list[RaceSeen], killed_at: datetime) -> RaceSeen | None:
    """The live race that was on at the kill and failed: the race the kill cut."""
    return next((r for r in races if r.source == "live" and r.outcome == "error"
                 and r.started_at <= killed_at <= r.ended_at), None)


def first_live_after(races: list[RaceSeen], t: datetime) -> RaceSeen | None:
    later = [r for r in races if r.source == "live" and r.started_at >= t]
    return min(later, key=lambda r: r.started_at) if later else None


def recording_exists(races: list[RaceSeen]) -> bool:
    """A live race finished and was saved: the booth has a recording to show while a server is down."""
    return any(r.source == "live" and r.outcome == "done" and r.saved_found for r in races)


# ----------------------------------------------------------------------------- summary


class KillResult(BaseModel):
    role: Role
    planned_at_s: float
    killed_at_s: float | None
    mid_race: bool | None  # the live race on at the kill failed (None: no kill)
    tokens_done: int | None  # of max_tokens, streamed at the kill (None: no live answer streaming)
    max_tokens: int | None
    kill_to_healthy_s: float | None
    kill_to_live_s: float | None
    recordings_while_down: int  # recording races that overlapped the outage
    live_races_after: int  # live races that started after it was healthy again
    healed: bool  # killed, healthy again, and a live race ran after
    note: str | None


class Sighting(BaseModel):
    """An error marker on the page (first poll it was seen), or a console error."""

    at: datetime
    text: str


class Summary(BaseModel):
    servers: str
    seed: int
    minutes_planned: float
    minutes_run: float
    races: int
    live: int
    recording: int
    none: int
    unreadable_lines: int
    outcomes: dict[str, int]
    live_speedup_median: float | None
    live_speedup_min: float | None
    live_speedup_max: float | None
    restarts: dict[Role, int]  # per server, during the soak (from status)
    kills: list[KillResult]
    app_rss_mb_first: float | None
    app_rss_mb_last: float | None
    app_growth_mb_per_h: float | None
    growth_judged: bool
    supervisor_rss_mb_last: float | None
    server_rss_mb_last: dict[str, float | None]
    runs_dir_mb_max: float | None
    runs_dir_mb_last: float | None
    runs_files_last: int | None
    lost_runs: list[str]
    failed_outside_outage: list[str]
    error_markers_outside_outage: list[str]
    error_markers_during_outage: list[str]
    console_errors: list[str]
    checks: dict[str, bool]
    passed: bool

    def lines(self) -> list[str]:
        def mb(x: float | None) -> str:
            return "n/a" if x is None else f"{x:.0f} MB"

        def sec(x: float | None) -> str:
            return "n/a" if x is None else f"{x:.1f} s"

        outcomes = ", ".join(f"{n} {k}" for k, n in sorted(self.outcomes.items())) or "none"
        speed = ("n/a (no live race done)" if self.live_speedup_median is None else
                 f"median {self.live_speedup_median:.2f}x (min {self.live_speedup_min:.2f}x, "
                 f"max {self.live_speedup_max:.2f}x)")
        growth = ("n/a (fewer than two samples)" if self.app_growth_mb_per_h is None else
                  f"{self.app_growth_mb_per_h:+.1f} MB/h"
                  + ("" if self.growth_judged else f" (not judged: run < {GROWTH_JUDGED_FROM_MIN:g} min)"))
        out = [
            f"soak: {self.minutes_run:.1f} min of booth mode on {self.servers} servers "
            f"(planned {self.minutes_planned:g} min, seed {self.seed})",
            f"races: {self.races} ({self.live} live, {self.recording} recording, {self.none} with nothing "
            f"to show); outcomes: {outcomes}"
            + (f"; {self.unreadable_lines} unreadable booth-race lines" if self.unreadable_lines else ""),
            f"live speedup: {speed}",
            "restarts (status): " + ", ".join(f"{r} {n}" for r, n in self.restarts.items()),
        ]
        for k in self.kills:
            if k.killed_at_s is None:
                out.append(f"kill {k.role}: not done ({k.note})")
                continue
            where = ("mid-race" if k.mid_race else "between races" if k.tokens_done is None
                     else "mid-stream, but the race was not cut")
            out.append(
                f"kill {k.role} at {k.killed_at_s:.0f} s ({where}): "
                f"healthy after {sec(k.kill_to_healthy_s)}, live again after {sec(k.kill_to_live_s)}; "
                f"{k.recordings_while_down} recordings shown while down, {k.live_races_after} live races after"
                + (f" ({k.note})" if k.note else ""))
        out += [
            f"memory: app {mb(self.app_rss_mb_first)} -> {mb(self.app_rss_mb_last)} RSS, growth {growth}; "
            f"supervisor {mb(self.supervisor_rss_mb_last)}; "
            + ", ".join(f"{r} {mb(v)}" for r, v in self.server_rss_mb_last.items()),
            f"runs dir: {mb(self.runs_dir_mb_last)} now, {mb(self.runs_dir_mb_max)} at most, "
            f"{self.runs_files_last if self.runs_files_last is not None else 'n/a'} files",
            f"runs lost: {len(self.lost_runs)}",
            f"live races failed outside an outage: {len(self.failed_outside_outage)}",
            f"error markers on the page: {len(self.error_markers_outside_outage)} outside an outage, "
            f"{len(self.error_markers_during_outage)} during one",
            f"console errors: {len(self.console_errors)}",
        ]
        out += [f"  lost: {x}" for x in self.lost_runs[:10]]
        out += [f"  failed: {x}" for x in self.failed_outside_outage[:10]]
        markers = self.error_markers_outside_outage + self.error_markers_during_outage
        out += [f"  error marker: {x}" for x in markers[:10]]
        out += [f"  console: {x}" for x in self.console_errors[:10]]
        failed = [name for name, ok in self.checks.items() if not ok]
        out.append("PASS" if self.passed else "FAIL: " + "; ".join(failed))
        return out


def summarize(*, servers: str, seed: int, minutes_planned: float, started: datetime, ended: datetime,
              races: list[RaceSeen], unreadable_lines: int, kills: list[Kill], samples: list[Sample],
              markers: list[Sighting], console_errors: list[Sighting],
              restarts: dict[Role, int]) -> Summary:
    """Everything the soak saw -> the figures and the verdict (pure: no clock, no disk)."""
    minutes_run = (ended - started).total_seconds() / 60
    live = [r for r in races if r.source == "live"]
    outages = [(k.killed_at, k.outage_end(races, ended)) for k in kills if k.killed_at]

    def in_outage(a: datetime, b: datetime) -> bool:
        return any(a <= end and b >= start for start, end in outages)

    kill_results = []
    for k in kills:
        after = [r for r in live if k.healthy_at and r.started_at >= k.healthy_at]
        first = first_live_after(races, k.healthy_at) if k.healthy_at else None
        down_until = k.healthy_at or ended
        kill_results.append(KillResult(
            role=k.role, planned_at_s=k.planned_at_s, killed_at_s=k.killed_at_s,
            mid_race=cut_race(races, k.killed_at) is not None if k.killed_at else None,
            tokens_done=k.tokens_done, max_tokens=k.max_tokens,
            kill_to_healthy_s=(k.healthy_at - k.killed_at).total_seconds() if k.killed_at and k.healthy_at else None,
            kill_to_live_s=(first.started_at - k.killed_at).total_seconds() if k.killed_at and first else None,
            recordings_while_down=sum(1 for r in races if r.source == "recording" and k.killed_at
                                      and r.started_at <= down_until and r.ended_at >= k.killed_at),
            live_races_after=len(after), healed=bool(k.killed_at and k.healthy_at and first),
            note=k.note))
    lost = [f"race {r.n} ({r.preset}): its saved file {r.saved} is missing" for r in live
            if r.saved and r.saved_found is False]
    lost += [f"race {r.n} ({r.preset}): ended without a result (outcome {r.outcome}, saved {r.saved})"
             for r in live if r.outcome is None or (r.saved is None and r.outcome != "stopped")]
    failed = [f"race {r.n} ({r.preset}) {r.started_at:%H:%M:%S}-{r.ended_at:%H:%M:%S}: {r.note or 'error'}"
              for r in live if r.outcome == "error" and not in_outage(r.started_at, r.ended_at)]
    outside = [f"{m.at:%H:%M:%S} {m.text}" for m in markers if not in_outage(m.at, m.at)]
    during = [f"{m.at:%H:%M:%S} {m.text}" for m in markers if in_outage(m.at, m.at)]
    speedups = [r.speedup for r in live if r.outcome == "done" and r.speedup is not None]
    app = [(s.t_s, float(s.app_rss_bytes)) for s in samples if s.app_rss_bytes is not None]
    growth = growth_mb_per_h(app)
    judged = minutes_run >= GROWTH_JUDGED_FROM_MIN
    last = samples[-1] if samples else None
    outcomes: dict[str, int] = {}
    for r in races:
        key = f"{r.source} {r.outcome or 'no result'}"
        outcomes[key] = outcomes.get(key, 0) + 1
    checks = {
        "live races ran": any(r.outcome == "done" for r in live),
        "no lost run": not lost,
        "every kill done and healed": all(k.healed for k in kill_results),
        "no live race failed outside an outage": not failed,
        # The booth never shows a failed race (it cuts to the recording): a marker is a fault even
        # during an outage; the two are counted apart to tell where to look.
        "no error marker on the page": not outside and not during,
        "no console error": not console_errors,
        f"app memory growth < {GROWTH_LIMIT_MB_PER_H:g} MB/h": (not judged or growth is None
                                                             or growth < GROWTH_LIMIT_MB_PER_H),
    }
    if judged and growth is None:
        checks[f"app memory growth < {GROWTH_LIMIT_MB_PER_H:g} MB/h"] = False
    if unreadable_lines:
        checks["every booth-race line readable"] = False

    def to_mb(x: int | None) -> float | None:
        return None if x is None else x / MB

    return Summary(
        servers=servers, seed=seed, minutes_planned=minutes_planned, minutes_run=minutes_run,
        races=len(races), live=len(live), recording=sum(r.source == "recording" for r in races),
        none=sum(r.source == "none" for r in races), unreadable_lines=unreadable_lines, outcomes=outcomes,
        live_speedup_median=percentile(speedups, 50), live_speedup_min=min(speedups, default=None),
        live_speedup_max=max(speedups, default=None), restarts=restarts, kills=kill_results,
        app_rss_mb_first=app[0][1] / MB if app else None, app_rss_mb_last=app[-1][1] / MB if app else None,
        app_growth_mb_per_h=growth, growth_judged=judged,
        supervisor_rss_mb_last=to_mb(last.supervisor_rss_bytes) if last else None,
        server_rss_mb_last={r: to_mb(last.server_rss_bytes.get(r)) if last else None for r in ROLES},
        runs_dir_mb_max=max((s.runs_dir_bytes / MB for s in samples), default=None),
        runs_dir_mb_last=last.runs_dir_bytes / MB if last else None,
        runs_files_last=last.runs_files if last else None,
        lost_runs=lost, failed_outside_outage=failed, error_markers_outside_outage=outside,
        error_markers_during_outage=during, console_errors=[f"{c.at:%H:%M:%S} {c.text}" for c in console_errors],
        checks=checks, passed=all(checks.values()))


# ----------------------------------------------------------------------------- the servers


class Timing(BaseModel):
    lead_s: float  # no kill planned before this
    tail_s: float  # nor in the last tail_s of the run: room to heal and race live again
    heal_timeout_s: float  # kill -> healthy
    live_timeout_s: float  # healthy -> a live race started
    mid_race_wait_s: float  # a due kill waits this long at most for a live answer to cut (mid_stream)
    up_timeout_s: float  # `servers up --detach`


TIMINGS = {
    "standin": Timing(lead_s=20, tail_s=60, heal_timeout_s=60, live_timeout_s=60, mid_race_wait_s=20,
                      up_timeout_s=90),
    "cpu": Timing(lead_s=120, tail_s=420, heal_timeout_s=600, live_timeout_s=300, mid_race_wait_s=180,
                  up_timeout_s=1500),
}
# The supervisor's settings for stand-ins: a 8 s restart delay keeps the server down long enough
# for the booth to notice and show a recording (a stand-in itself starts in about a second).
STANDIN_SUPERVISOR = {
    "SPECDEMO_SERVERS_HEALTH_INTERVAL_S": "0.5",
    "SPECDEMO_SERVERS_RESTART_BACKOFF_S": "8",
    "SPECDEMO_SERVERS_HEALTH_TIMEOUT_S": "5",
    "SPECDEMO_SERVERS_STOP_TIMEOUT_S": "3",
    "SPECDEMO_SERVERS_STARTUP_TIMEOUT_S": "30",
}


class Pair:
    """The server pair under the supervisor, through `python -m servers` and its state file."""

    def __init__(self, kind: str, out: Path, log: Callable[[str], None]) -> None:
        self.kind, self.log = kind, log
        self.started_here = False
        self.tmp: tempfile.TemporaryDirectory[str] | None = None
        if kind == "standin":
            self.tmp = tempfile.TemporaryDirectory(prefix="soak-")
            ports = (free_port(), free_port())
            self.cwd = Path(self.tmp.name)  # no .env of a checkout is read
            self.env = {k: v for k, v in os.environ.items() if not k.startswith("SPECDEMO_")}
            self.env.update({
                "PYTHONPATH": str(ROOT),
                "SPECDEMO_SERVERS_RUN_DIR": str(out / "servers"),
                "SPECDEMO_SERVERS_CACHE_DIR": str(self.cwd / "cache"),
                "SPECDEMO_SERVERS_BASELINE_PORT": str(ports[0]),
                "SPECDEMO_SERVERS_SPECULATIVE_PORT": str(ports[1]),
                "SPECDEMO_SERVERS_SERVER_COMMAND": f"{sys.executable} -m benchmarks.soak_standin",
                **STANDIN_SUPERVISOR,
            })
            self.settings = LauncherSettings(_env_file=None, run_dir=out / "servers", host="127.0.0.1",
                                             baseline_port=ports[0], speculative_port=ports[1])
        else:
            self.cwd = ROOT
            self.env = dict(os.environ)
            self.settings = LauncherSettings(_env_file=ROOT / ".env")

    def url(self, role: Role) -> str:
        port = self.settings.baseline_port if role == "baseline" else self.settings.speculative_port
        return f"http://{self.settings.host}:{port}"

    def servers(self, *args: str, timeout_s: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "servers", *args], cwd=self.cwd, env=self.env,
                              capture_output=True, text=True, timeout=timeout_s)

    def state(self) -> LauncherState | None:
        return read_state(self.settings.state_file)

    def record(self, role: Role) -> ServerRecord | None:
        st = self.state()
        return next((r for r in st.servers if r.role == role), None) if st else None

    def healthy(self, role: Role) -> bool:
        return health_ok(self.url(role))

    def supervised(self) -> bool:
        st = self.state()
        return bool(st and st.supervisor and procs.is_running(st.supervisor.pid, st.supervisor.start_ticks))

    def restarts(self) -> dict[str, int]:
        """Each server's restart count, from `python -m servers status --json`."""
        try:
            done = self.servers("status", "--json", timeout_s=60)
            return {str(row["role"]): int(row["restarts"]) for row in json.loads(done.stdout)}
        except (subprocess.TimeoutExpired, ValueError, KeyError, TypeError) as e:
            self.log(f"status --json failed: {e}")
            return {}

    def up(self, timeout_s: float) -> None:
        """Start the pair, or use the CPU pair already running under its supervisor. Anything in
        between (one server up, or no supervisor) is refused untouched: the soak would have to stop
        a pair it did not start."""
        if self.kind == "cpu":
            healthy = [r for r in ROLES if self.healthy(r)]
            if len(healthy) == len(ROLES) and self.supervised():
                self.log("the CPU pair is already running under its supervisor: using it, leaving it running")
                return
            if healthy or self.supervised():
                raise RuntimeError(
                    "the CPU pair is partly running or has no supervisor (`python -m servers status`): the soak "
                    "needs both servers under a supervisor; stop it with `python -m servers down` (the soak then "
                    "starts its own) or bring it up with `python -m servers up --detach`, and rerun")
            self.log("the CPU pair is not running: starting it with `python -m servers up --detach` (a cold start "
                     "takes minutes); it is stopped again at the end")
        self.started_here = True
        try:
            done = self.servers("up", "--detach", timeout_s=timeout_s)
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"`python -m servers up --detach` did not return within {timeout_s:g} s") from None
        if done.returncode != 0:
            raise RuntimeError(f"`python -m servers up --detach` failed (exit {done.returncode}):\n"
                               f"{done.stdout[-2000:]}{done.stderr[-2000:]}")
        if not self.supervised():
            raise RuntimeError("the servers are up but no supervisor watches them: a killed server would not "
                               "come back; stop them (`python -m servers down`) and rerun")

    def close(self) -> None:
        """Stop what this started: `down`, then SIGKILL anything of it still alive."""
        if not self.started_here:
            if self.tmp:
                self.tmp.cleanup()
            return
        st = self.state()
        try:
            done = self.servers("down", timeout_s=90)
            self.log("servers down: " + " ".join(done.stdout.split())[:300])
        except subprocess.TimeoutExpired:
            self.log("`python -m servers down` did not return within 90 s: killing what is left")
        if st:
            if st.supervisor and procs.is_running(st.supervisor.pid, st.supervisor.start_ticks):
                with suppress(ProcessLookupError):
                    os.kill(st.supervisor.pid, signal.SIGKILL)
            for r in st.servers:  # only while its leader is the very process started (a PID is reused)
                if procs.is_running(r.pid, r.start_ticks):
                    procs.stop_group(r.pgid, 3)
        if self.tmp:
            self.tmp.cleanup()


# ----------------------------------------------------------------------------- the page


class Page:
    """Headless Chromium on the booth page: polls and collects console errors."""

    def __init__(self, url: str) -> None:
        from playwright.sync_api import sync_playwright

        from harness.chromium import CHROMIUM, CHROMIUM_ARGS, VIEWPORT

        if not CHROMIUM.exists():
            raise RuntimeError(f"no Chromium at {CHROMIUM}: apt-get install -y chromium")
        self.console: list[Sighting] = []
        self._pw = sync_playwright().start()
        try:
            self._browser = self._pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
            self._page = self._browser.new_context(viewport=VIEWPORT).new_page()
            self._page.on("console", self._on_console)
            # Uncaught exceptions in the page's scripts are not console messages: count them too.
            self._page.on("pageerror", lambda e: self._note(f"uncaught: {e}"))
            self._page.goto(url, wait_until="domcontentloaded", timeout=60_000)
        except BaseException:
            self.close()
            raise

    def _on_console(self, message: Any) -> None:
        if message.type == "error":
            self._note(message.text)

    def _note(self, text: str) -> None:
        self.console.append(Sighting(at=datetime.now(UTC), text=text[:300]))

    def wait_caption(self, timeout_s: float) -> bool:
        try:
            self._page.wait_for_selector(CAPTION_SELECTOR, state="attached", timeout=timeout_s * 1000)
            return True
        except Exception:  # noqa: BLE001 - Playwright's TimeoutError; the caller says what is missing
            return False

    def poll(self) -> dict[str, Any]:
        result: dict[str, Any] = self._page.evaluate(POLL_JS, [ERROR_SELECTOR, CAPTION_SELECTOR,
                                                               RUN_STATUS_SELECTOR])
        return result

    def idle(self, seconds: float) -> None:
        """Sleep while Playwright delivers the page's events (console messages)."""
        self._page.wait_for_timeout(seconds * 1000)

    def close(self) -> None:
        with suppress(Exception):
            self._browser.close()
        with suppress(Exception):
            self._pw.stop()


# ----------------------------------------------------------------------------- the run


class Recorder:
    """The output folder: JSONL files written as things happen, and the console log."""

    def __init__(self, out: Path, stream: TextIO = sys.stdout) -> None:
        self.out, self.stream = out, stream
        out.mkdir(parents=True, exist_ok=True)
        self._files: dict[str, TextIO] = {}

    def write(self, name: str, obj: BaseModel | dict[str, Any]) -> None:
        f = self._files.get(name)
        if f is None:
            f = self._files[name] = open(self.out / name, "a", encoding="utf-8")  # noqa: SIM115 - closed in close()
        f.write((obj.model_dump_json() if isinstance(obj, BaseModel) else json.dumps(obj, default=str)) + "\n")
        f.flush()

    def event(self, kind: str, **fields: Any) -> None:
        self.write("events.jsonl", {"at": datetime.now(UTC).isoformat(), "kind": kind, **fields})

    def say(self, text: str) -> None:
        print(f"[soak {datetime.now(UTC):%H:%M:%S}] {text}", file=self.stream, flush=True)
        self.event("note", text=text)

    def close(self) -> None:
        for f in self._files.values():
            f.close()


class Soak:
    def __init__(self, a: argparse.Namespace, rec: Recorder) -> None:
        self.a, self.rec = a, rec
        self.timing = TIMINGS[a.servers]
        self.duration_s = a.minutes * 60
        self.runs_dir = a.out / "runs"
        self.races: list[RaceSeen] = []
        self.unreadable = 0
        self.samples: list[Sample] = []
        self.markers: list[Sighting] = []
        self.kills = [Kill(role=role, planned_at_s=at) for role, at in
                      plan_kills(a.kills, self.duration_s, random.Random(a.seed), self.timing.lead_s,
                                 self.timing.tail_s)]
        self._shown: tuple[Any, ...] | None = None
        self._errors_shown: list[str] = []
        self.view: dict[str, Any] = {}
        self._due_since: float | None = None  # when the next kill became due (for the mid-race wait)
        self._probes: dict[str, AnswerProbe] = {}
        presets_dir = Path(os.environ.get("SPECDEMO_PRESETS_DIR", ROOT / "presets")) if a.servers == "cpu" \
            else ROOT / "presets"  # the app's (_start_app passes SPECDEMO_* on for the CPU pair only)
        self.max_tokens = {name: p.max_tokens for name, p in load_presets(presets_dir)[0].items()}
        self.t0 = time.monotonic()
        self.app_pid = 0

    def run(self, stack: ExitStack) -> Summary:
        a, rec = self.a, self.rec
        rec.say(f"seed {a.seed}; kills planned: " + (", ".join(f"{k.role} at {k.planned_at_s:.0f} s"
                                                               for k in self.kills) or "none"))
        pair = Pair(a.servers, a.out, rec.say)
        stack.callback(pair.close)
        pair.up(self.timing.up_timeout_s)
        restarts0 = pair.restarts()
        app = self._start_app(pair)
        stack.callback(app.stop)
        self.app_pid = app.proc.pid
        rec.say(f"app (booth mode) on {app.url}, log {app.log_path}; opening the page")
        page = Page(app.url)
        stack.callback(page.close)
        if not page.wait_caption(30):
            rec.say(f"no booth caption ({CAPTION_SELECTOR}) on the page after 30 s: is booth mode in this build?")
        started = datetime.now(UTC)
        self.t0 = time.monotonic()
        tail = LogTail(app.log_path)
        next_poll = next_sample = 0.0
        grace_until: float | None = None
        while True:
            t = time.monotonic() - self.t0
            if t >= self.duration_s:
                if not self._kill_pending():
                    break
                if grace_until is None:
                    grace_until = t + self.timing.heal_timeout_s + self.timing.live_timeout_s
                    rec.say("time is up but a kill has not healed yet: waiting for it (bounded)")
                if t >= grace_until:
                    break
            if app.proc.poll() is not None:
                rec.say(f"the app exited (code {app.proc.returncode}): stopping the soak")
                break
            self._read_races(tail)
            # A due kill waits for a live answer to cut: look at the page at every (short) turn then.
            if t >= next_poll or self._due_since is not None:
                self._poll(page)
                next_poll = t + PAGE_POLL_S
            if t >= next_sample:
                self._sample(pair)
                next_sample = t + SAMPLE_EVERY_S
            self._step_kills(pair, t)
            page.idle(LOOP_S if self._due_since is None else DUE_LOOP_S)
        self._sample(pair)
        self._read_races(tail)
        ended = datetime.now(UTC)
        for k in self.kills:
            if k.killed_at is None and not k.note:
                k.note = "no time left in the run (use more --minutes)"
        restarts1 = pair.restarts()
        restarts = {r: restarts1.get(r, 0) - restarts0.get(r, 0) for r in ROLES}
        for c in page.console:
            rec.event("console-error", text=c.text)
        return summarize(servers=a.servers, seed=a.seed, minutes_planned=a.minutes, started=started, ended=ended,
                         races=self.races, unreadable_lines=self.unreadable, kills=self.kills,
                         samples=self.samples, markers=self.markers, console_errors=page.console,
                         restarts=restarts)

    def _start_app(self, pair: Pair) -> Any:
        from harness.app_process import AppProcess

        env = {k: v for k, v in os.environ.items() if k.startswith("SPECDEMO_")} if pair.kind == "cpu" else {}
        if pair.kind == "standin":  # the booth's "live again in N s" reads the supervisor's state file
            env["SPECDEMO_SERVERS_RUN_DIR"] = str(pair.settings.run_dir)
        env.update({
            "SPECDEMO_BOOTH": "true",
            "SPECDEMO_BOOTH_PAUSE_S": str(self.a.pause_s),
            "SPECDEMO_RUNS_DIR": str(self.runs_dir),
            "SPECDEMO_BASELINE_URL": pair.url("baseline"),
            "SPECDEMO_SPECULATIVE_URL": pair.url("speculative"),
        })
        return AppProcess(env, self.a.out / "app.log")

    # ---- what the soak watches

    def _read_races(self, tail: LogTail) -> None:
        for line in tail.lines():
            try:
                race = parse_booth_line(line)
            except ValueError as e:
                self.unreadable += 1
                self.rec.say(str(e))
                continue
            if race is None:
                continue
            found = None
            if race.source == "live" and race.saved:
                found = saved_path(self.runs_dir, race.saved).is_file()
            seen = RaceSeen(**race.model_dump(), seen_at=datetime.now(UTC), saved_found=found)
            self.races.append(seen)
            self.rec.write("races.jsonl", seen)
            sp = "n/a" if race.speedup is None else f"{race.speedup:.2f}x"
            self.rec.say(f"race {race.n} {race.preset}: {race.source} {race.outcome}, speedup {sp}"
                         + (", SAVED FILE MISSING" if found is False else ""))

    def _poll(self, page: Page) -> None:
        try:
            self.view = page.poll()
        except Exception as e:  # noqa: BLE001 - a navigation or a closed page: say it, keep going
            self.rec.say(f"page poll failed: {type(e).__name__}: {str(e)[:200]}")
            self.view = {}
            return
        shown = (self.view.get("caption"), self.view.get("preset"))
        if shown != self._shown:
            self._shown = shown
            self.rec.event("caption", state=shown[0], preset=shown[1], run=self.view.get("run"))
        errors = list(self.view.get("errors") or [])
        for text in errors:
            if text not in self._errors_shown:  # a marker newly shown
                self.markers.append(Sighting(at=datetime.now(UTC), text=text))
                self.rec.event("error-marker", text=text)
                self.rec.say(f"error marker on the page: {text[:150]}")
        self._errors_shown = errors

    def _sample(self, pair: Pair) -> None:
        st = pair.state()
        sup = st.supervisor if st else None
        servers = {r.role: group_rss_bytes(r.pgid) for r in st.servers} if st else {}
        used, files = dir_usage(self.runs_dir)
        s = Sample(t_s=time.monotonic() - self.t0, at=datetime.now(UTC), app_rss_bytes=tree_rss_bytes(self.app_pid),
                   supervisor_rss_bytes=procs.rss_bytes([sup.pid]) if sup and procs.is_running(sup.pid) else None,
                   server_rss_bytes={r: servers.get(r) for r in ROLES}, runs_dir_bytes=used, runs_files=files)
        self.samples.append(s)
        self.rec.write("samples.jsonl", s)

    # ---- kills

    def _kill_pending(self) -> bool:
        """A kill was done and has not settled (healed and live again, or given up)."""
        return any(k.killed_at and not k.note and not self._settled(k) for k in self.kills)

    def _settled(self, k: Kill) -> bool:
        return bool(k.note or (k.healthy_at and first_live_after(self.races, k.healthy_at)))

    def _step_kills(self, pair: Pair, t: float) -> None:
        """Advance the first kill not yet settled: wait for it to be due, kill, watch it heal."""
        for i, k in enumerate(self.kills):
            if k.killed_at is None and not k.note:
                if i and not self._settled(self.kills[i - 1]):
                    return
                if t < k.planned_at_s or t >= self.duration_s or not recording_exists(self.races):
                    self._due_since = None
                    return
                if self._due_since is None:
                    self._due_since = t
                # Mid-stream: a live race is on (the page) and the server to kill has most of its
                # answer still to come (the server's own figures: the page lags).
                probe = self._probes.setdefault(k.role, AnswerProbe(pair.url(k.role)))
                done = probe.tokens_done()  # every due turn: it also notes the server idle between races
                live = self.view.get("caption") == "live" and self.view.get("run") == "running"
                max_tokens = self.max_tokens.get(str(self.view.get("preset")))
                if live and mid_stream(done, max_tokens):
                    self._kill(pair, k, t, done, max_tokens)
                    self._due_since = None
                elif t - self._due_since >= self.timing.mid_race_wait_s:
                    self._kill(pair, k, t, None, None)
                    self._due_since = None
                return
            if k.killed_at is not None and k.healthy_at is None and not k.note:
                self._check_healed(pair, k)
                return
            if not self._settled(k):
                assert k.healthy_at is not None
                if (datetime.now(UTC) - k.healthy_at).total_seconds() > self.timing.live_timeout_s:
                    k.note = f"no live race within {self.timing.live_timeout_s:g} s of being healthy again"
                    self.rec.say(f"{k.role}: {k.note}")
                return

    def _kill(self, pair: Pair, k: Kill, t: float, done: int | None, max_tokens: int | None) -> None:
        r = pair.record(k.role)
        if r is None or not procs.is_running(r.pid, r.start_ticks):
            k.note = "no running server in the state file to kill"
            self.rec.say(f"cannot kill {k.role}: {k.note}")
            return
        os.kill(r.pid, signal.SIGKILL)  # the group leader, as a crash would: the supervisor does the rest
        k.killed_at, k.killed_at_s, k.pid = datetime.now(UTC), t, r.pid
        k.tokens_done, k.max_tokens = done, max_tokens
        self.rec.event("kill", role=k.role, pid=r.pid, t_s=t, tokens_done=done, max_tokens=max_tokens)
        self.rec.say(f"SIGKILL {k.role} (PID {r.pid}) at {t:.0f} s, "
                     + (f"mid-stream ({done} of at most {max_tokens} tokens out)" if done is not None
                        else f"between races (no live answer to cut within {self.timing.mid_race_wait_s:g} s)"))

    def _check_healed(self, pair: Pair, k: Kill) -> None:
        assert k.killed_at is not None
        r = pair.record(k.role)
        if r is not None and r.pid != k.pid and procs.is_running(r.pid, r.start_ticks) and pair.healthy(k.role):
            k.healthy_at, k.new_pid = datetime.now(UTC), r.pid
            took = (k.healthy_at - k.killed_at).total_seconds()
            self.rec.event("healthy", role=k.role, pid=r.pid, kill_to_healthy_s=took)
            self.rec.say(f"{k.role} healthy again (PID {r.pid}) {took:.1f} s after the kill")
        elif (datetime.now(UTC) - k.killed_at).total_seconds() > self.timing.heal_timeout_s:
            k.note = f"not healthy again within {self.timing.heal_timeout_s:g} s"
            self.rec.say(f"{k.role}: {k.note}")


@contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM unwinds like Ctrl-C, so whatever was started is stopped on the way out."""
    def handler(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.soak", description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, required=True, help="how long the page stays open")
    ap.add_argument("--servers", choices=["cpu", "standin"], default="cpu")
    ap.add_argument("--seed", type=int, help="for the kill times (default: random, printed)")
    ap.add_argument("--kills", default="speculative,baseline",
                    help="servers to kill once each, in this order (comma-separated; empty: none)")
    ap.add_argument("--out", type=Path, help="output folder (default artifacts/soak-<UTC time>)")
    ap.add_argument("--pause-s", type=float, default=2.0, help="the booth's pause between races")
    a = ap.parse_args(argv)
    if a.minutes <= 0:
        ap.error("--minutes must be > 0")
    kills = [k.strip() for k in a.kills.split(",") if k.strip()]
    bad = [k for k in kills if k not in ROLES]
    if bad or len(set(kills)) != len(kills):
        ap.error(f"--kills takes baseline and/or speculative, each once: {a.kills!r}")
    a.kills = kills
    if a.seed is None:
        a.seed = random.SystemRandom().randrange(1_000_000)
    if a.out is None:
        a.out = ROOT / "artifacts" / f"soak-{datetime.now(UTC):%Y%m%d-%H%M%S}"
    a.out = a.out.resolve()
    return a


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    if a.out.exists() and any(a.out.iterdir()):
        print(f"error: the output folder {a.out} is not empty; give a new one with --out", file=sys.stderr)
        return 2
    rec = Recorder(a.out)
    try:
        with sigterm_as_interrupt(), ExitStack() as stack:
            summary = Soak(a, rec).run(stack)
    except KeyboardInterrupt:
        rec.say("interrupted: stopped what the soak started")
        rec.close()
        return 130
    except RuntimeError as e:
        rec.say(f"error: {e}")
        rec.close()
        return 2
    (a.out / "summary.json").write_text(summary.model_dump_json(indent=2), encoding="utf-8")
    rec.close()
    print("\n".join(summary.lines()), flush=True)
    print(f"files: {a.out}", flush=True)
    return 0 if summary.passed else 1


if __name__ == "__main__":
    sys.exit(main())
