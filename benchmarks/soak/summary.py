"""The summary: everything the soak saw -> its figures, the checks and PASS or FAIL (pure)."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel

from benchmarks.soak.kills import Kill, cut_race, first_live_after
from benchmarks.soak.logs import RaceSeen
from benchmarks.soak.memory import MB, Sample, growth_mb_per_h
from common.sides import SIDES, Side
from demo.measure import percentile

GROWTH_LIMIT_MB_PER_H = 50.0
GROWTH_JUDGED_FROM_MIN = 20.0


class KillResult(BaseModel):
    role: Side
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
    restarts: dict[Side, int]  # per server, during the soak (from status)
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
              restarts: dict[Side, int]) -> Summary:
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
        server_rss_mb_last={r: to_mb(last.server_rss_bytes.get(r)) if last else None for r in SIDES},
        runs_dir_mb_max=max((s.runs_dir_bytes / MB for s in samples), default=None),
        runs_dir_mb_last=last.runs_dir_bytes / MB if last else None,
        runs_files_last=last.runs_files if last else None,
        lost_runs=lost, failed_outside_outage=failed, error_markers_outside_outage=outside,
        error_markers_during_outage=during, console_errors=[f"{c.at:%H:%M:%S} {c.text}" for c in console_errors],
        checks=checks, passed=all(checks.values()))
