"""The soak's run: the output folder, the loop that watches the booth and kills the servers, the
command line (python -m benchmarks.soak)."""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

from pydantic import BaseModel

import benchmarks.soak
from benchmarks.soak.kills import AnswerProbe, Kill, first_live_after, mid_stream, plan_kills, recording_exists
from benchmarks.soak.logs import LogTail, RaceSeen, parse_booth_line, saved_path
from benchmarks.soak.memory import Sample, dir_usage, group_rss_bytes, tree_rss_bytes
from benchmarks.soak.page import CAPTION_SELECTOR, Page
from benchmarks.soak.pair import TIMINGS, Pair
from benchmarks.soak.summary import Sighting, Summary, summarize
from common.paths import ROOT
from common.sides import SIDES
from demo.presets import load_presets
from servers import procs

SAMPLE_EVERY_S = 60.0
PAGE_POLL_S = 3.0
LOOP_S = 0.25
DUE_LOOP_S = 0.05  # while a kill is due: a stand-in streams a short answer in about a second


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
        restarts = {r: restarts1.get(r, 0) - restarts0.get(r, 0) for r in SIDES}
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
                   server_rss_bytes={r: servers.get(r) for r in SIDES}, runs_dir_bytes=used, runs_files=files)
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
    ap = argparse.ArgumentParser(prog="python -m benchmarks.soak",
                                 description=(benchmarks.soak.__doc__ or "").splitlines()[0])
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
    bad = [k for k in kills if k not in SIDES]
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

