"""The canary on stage, without Gradio: traffic through the router at a set rate, the live share,
each path's figures from the canary's own Prometheus, the switch to bad traffic and the rollback.

The canary itself (HAProxy, Prometheus, Alertmanager, the receiver) is ``python -m servers canary
up``'s (servers/canary/, docs/canary.md); this module drives it and reads it:

- **Traffic**: open loop (demo/load/arrivals.py ``draw_schedule``: Poisson arrivals at the rate
  asked, drawn a window of TRAFFIC_WINDOW_S at a time), each request streamed and measured by the
  evaluator's ``one_request`` (demo/sweep/runner.py), through the router, with the header the
  canary's default rule reads (``x-specdemo-eligible: 1``), so every request is eligible. It starts
  on a preset speculation does well (json_reformat); ``switch`` moves it to one it does badly
  (poetry at T=1): the next request sent is the new preset. ``run_rate_side`` is not used: it
  measures one fixed schedule and polls the server's /metrics every second, and the view must not.
- **The share, the counts and the last rollback**: ``servers.canary.status_data`` (the same dict as
  ``python -m servers canary status --json``: the router's runtime API and the events file).
- **Requests/s, ITL p95 and acceptance per path**: PromQL on the canary's Prometheus (its URL from
  the status), over the canary's alert window (or DEFAULT_WINDOW): requests/s from HAProxy's
  exporter (job ``canary-router``, backend ``split``), ITL p95 from vLLM's
  ``vllm:inter_token_latency_seconds`` histogram, acceptance from the spec-decode counters, per
  ``arm`` label. Nothing here reads a vLLM server's /metrics.
- **The timeline**: the switch (this app's clock, UTC), the alert firing (Prometheus's ``startsAt``
  as the rollback event carries it; else the first poll that saw it firing), the share at 0 (the
  receiver's event time). Recovery is manual: ``set_share`` (the canary's live share change).

Every failure is one line for the page (``CanaryFrame.problem``): no canary running (with the
command to start it), Prometheus not answering, a canary without its alert path, a bad rate.
"""

from __future__ import annotations

import asyncio
import html
import io
import re
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from common.canary_rules import DEFAULT_HEADER, DEFAULT_HEADER_VALUE
from demo.client import make_http_client
from demo.load.arrivals import draw_schedule
from demo.presets import Preset
from demo.results import SideResult
from demo.settings import Settings
from demo.streaming import ServerHandle
from demo.sweep.runner import one_request
from servers import canary

GOOD_PRESET = "json_reformat"  # copy-heavy: speculation accepts most drafts
BAD_PRESET = "poetry"  # free verse at T=1: drafts rarely match
TRAFFIC_WINDOW_S = 10.0  # arrivals are drawn this many seconds at a time (a rate change takes effect at the next)
MAX_RATE_REQUESTS_PER_S = 50.0
MAX_OPEN_REQUESTS = 64  # a request due when this many are open is not sent (counted as dropped)
DEFAULT_MAX_TOKENS = 128
MAX_TOKENS_LIMIT = 4096
DEFAULT_WINDOW = "30s"  # PromQL range when the canary has no --alert-window
PROMETHEUS_TIMEOUT_S = 2.0
MAX_RULES_SHOWN = 8  # guardrails listed per rule group
START_COMMAND = ("python -m servers canary up --share 50 --rules DIR/guardrails.rules.yml "
                 "--alert-for 15s --alert-window 30s")
ROUTER_RATE = ('sum by (server) (rate(haproxy_server_http_responses_total{{job="{job}", proxy="{backend}"}}'
               '[{w}]))')
# By the path's role (baseline or speculative), which the canary's Prometheus sets on each server
# whatever its arm's name (servers/canary/).
ITL_P95 = 'histogram_quantile(0.95, sum by (le, role) (rate(vllm:inter_token_latency_seconds_bucket[{w}])))'
ACCEPTANCE = ('sum by (role) (rate(vllm:spec_decode_num_accepted_tokens_total[{w}])) / '
              'sum by (role) (rate(vllm:spec_decode_num_draft_tokens_total[{w}]))')
PATHS = ("baseline", "speculative")
PROMETHEUS_FIRED = "Prometheus's startsAt"  # where the firing time came from (Timeline.fired_source)
_RFC3339 = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d+)?(Z|[+-]\d\d:\d\d)$")


def parse_time(text: object) -> datetime | None:
    """An RFC 3339 time (Prometheus's, with up to 9 decimals, or Python's isoformat); None if it is not one."""
    m = _RFC3339.match(str(text or ""))
    if m is None:
        return None
    frac = (m.group(2) or ".0")[:7]
    zone = "+00:00" if m.group(3) == "Z" else m.group(3)
    try:
        return datetime.fromisoformat(m.group(1) + frac + zone)
    except ValueError:
        return None


def parse_rate(value: object) -> float:
    """A traffic rate in requests/s, above 0 and at most MAX_RATE_REQUESTS_PER_S; ValueError in one line."""
    try:
        rate = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ValueError(f"rate: requests per second above 0, got {value!r}") from None
    if not rate > 0 or rate == float("inf"):
        raise ValueError(f"rate must be above 0 requests/s, got {value}")
    if rate > MAX_RATE_REQUESTS_PER_S:
        raise ValueError(f"rate {rate:g} req/s: at most {MAX_RATE_REQUESTS_PER_S:g} req/s from the page")
    return rate


@dataclass
class Traffic:
    """What the traffic did since it started: requests sent, finished, failed, dropped (not sent: too
    many open), the last error, and the preset now sent."""

    rate_requests_per_s: float
    preset: str
    started_at: datetime
    sent: int = 0
    finished: int = 0
    failed: int = 0
    dropped: int = 0
    open: int = 0
    last_error: str | None = None
    problem: str | None = None  # the traffic stopped on this (one line)
    ended_at: datetime | None = None  # stopped (Stop, a new Start, or its problem); None: running


@dataclass
class PathFigures:
    """One path's figures from Prometheus: requests/s through the router, ITL p95, acceptance; None: n/a."""

    requests_per_s: float | None = None
    itl_p95_ms: float | None = None
    acceptance: float | None = None


@dataclass
class Timeline:
    """The switch to bad traffic and what followed, UTC; each step's duration in seconds (None: not yet)."""

    switched_at: datetime | None = None
    fired_at: datetime | None = None
    fired_source: str = ""  # PROMETHEUS_FIRED, or "seen firing by the view's poll"
    share_zero_at: datetime | None = None

    def seconds(self, a: datetime | None, b: datetime | None) -> float | None:
        """Seconds from ``a`` to ``b``; None when either is not known yet."""
        return None if a is None or b is None else (b - a).total_seconds()


@dataclass
class CanaryFrame:
    """What the page shows at one poll."""

    problem: str | None = None  # one line: what is wrong and what to do
    share_percent: int | None = None
    requests: dict[str, int] = field(default_factory=dict)  # the router's own counters
    paths: dict[str, PathFigures] = field(default_factory=dict)
    window: str = DEFAULT_WINDOW
    alerts: list[dict[str, str]] = field(default_factory=list)  # each guardrail: name, state, threshold, value
    rollback: dict[str, Any] | None = None  # the last rollback event after the switch (or ever)
    timeline: Timeline = field(default_factory=Timeline)
    traffic: Traffic | None = None
    prometheus_url: str | None = None


class CanaryStage:
    """The canary view's state, shared by every viewer of the app: one traffic at a time, one timeline."""

    def __init__(self, settings: Settings, presets: dict[str, Preset], run_dir: Path) -> None:
        self.settings, self.presets, self.run_dir = settings, presets, run_dir
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._preset = GOOD_PRESET
        self._max_tokens = DEFAULT_MAX_TOKENS
        self.traffic: Traffic | None = None
        self.timeline = Timeline()
        self._seen_firing: datetime | None = None
        self._note: tuple[str, bool, float] | None = None  # the last action's line, failed, when
        self._last: tuple[float, CanaryFrame] | None = None  # the last poll: when, its frame

    # ------------------------------------------------------------ control

    def line(self, frame: CanaryFrame, said: str | None = None, failed: bool = False) -> tuple[str, str]:
        """The one line above the view and its state (ok, info, problem): an action's own line (``said``,
        ``failed``) for NOTE_KEPT_S, a failed one before the canary's problem, then the frame's."""
        if said is not None:
            self._note = (said, failed, time.monotonic())
        note = self._note if self._note and time.monotonic() - self._note[2] < NOTE_KEPT_S else None
        if note is not None and note[1]:
            return note[0], "problem"
        if frame.problem or note is None or (frame.rollback is not None and frame.share_percent == 0):
            return frame_line(frame)
        return note[0], "info"

    def start(self, rate: object, max_tokens: int = DEFAULT_MAX_TOKENS) -> str:
        """Start the traffic at ``rate`` requests/s on the good preset (a running one is stopped
        first); a one-line answer. ValueError (one line) for a bad rate or max tokens, a missing
        preset; CanaryError (one line, with the command) when no canary runs."""
        r = parse_rate(rate)
        try:
            tokens = int(max_tokens)
        except (TypeError, ValueError, OverflowError):
            tokens = 0
        if not 1 <= tokens <= MAX_TOKENS_LIMIT:
            raise ValueError(f"max tokens: a whole number from 1 to {MAX_TOKENS_LIMIT}, got {max_tokens}")
        for name in (GOOD_PRESET, BAD_PRESET):
            if name not in self.presets:
                raise ValueError(f"preset {name!r} is not in {self.settings.presets_dir}: the canary view needs it")
        router_url = self._status()["router_url"]  # CanaryError when none runs
        self.stop()
        with self._lock:
            self._preset, self._max_tokens = GOOD_PRESET, tokens
            self.timeline, self._seen_firing = Timeline(), None
            self.traffic = Traffic(rate_requests_per_s=r, preset=GOOD_PRESET, started_at=datetime.now(UTC))
            self._stop = threading.Event()
            self._thread = threading.Thread(target=self._run, args=(router_url, r, self.traffic, self._stop),
                                            name="canary-traffic", daemon=True)
            self._thread.start()
        return f"traffic: {r:g} req/s of {GOOD_PRESET}, eligible ({DEFAULT_HEADER}: {DEFAULT_HEADER_VALUE}), " \
               f"through {router_url}"

    def switch(self) -> str:
        """Send what speculation does badly from the next request on; the switch time is now."""
        with self._lock:
            if self.traffic is None or self._thread is None or not self._thread.is_alive():
                raise ValueError("no traffic running: start it first")
            self._preset = BAD_PRESET
            self.traffic.preset = BAD_PRESET
            self.timeline, self._seen_firing = Timeline(switched_at=datetime.now(UTC)), None
        return f"switched to {BAD_PRESET} at T={self.presets[BAD_PRESET].temperature:g}"

    def stop(self) -> None:
        """Stop the traffic: no new request, every open one cancelled (waits up to 10 s)."""
        self._stop.set()
        thread = self._thread
        if thread is not None:
            thread.join(timeout=10)
        self._thread = None

    def set_share(self, share: object) -> str:
        """Set the canary's share live (the canary's own change, logged ``by: page``); a one-line answer.
        Recovery after a rollback is this, by hand: nothing raises the share on its own."""
        value = canary.parse_share(str(share if not isinstance(share, float) or not share.is_integer()
                                       else int(share)))
        out = io.StringIO()
        canary.change_share(self.run_dir, value, out, by="page")
        return out.getvalue().strip()

    # ------------------------------------------------------------ the traffic (its own thread and loop)

    def _run(self, router_url: str, rate: float, traffic: Traffic, stop: threading.Event) -> None:
        try:
            asyncio.run(self._send(router_url, rate, traffic, stop))
        except Exception as e:  # the thread's last word: the view shows it
            traffic.problem = f"traffic stopped: {type(e).__name__}: {str(e)[:160]}"
        finally:
            traffic.ended_at = datetime.now(UTC)

    async def _send(self, router_url: str, rate: float, traffic: Traffic, stop: threading.Event) -> None:
        http = make_http_client(self.settings, "baseline")
        http.headers[DEFAULT_HEADER] = DEFAULT_HEADER_VALUE
        handle = ServerHandle("baseline", router_url, self.settings.endpoint("baseline").model, http)
        open_now: set[asyncio.Task[SideResult]] = set()

        def ended(task: asyncio.Task[SideResult]) -> None:
            open_now.discard(task)
            traffic.open = len(open_now)
            if task.cancelled():
                return
            exc = task.exception()
            result = task.result() if exc is None else None
            error = f"{type(exc).__name__}: {exc}" if exc is not None else (result.error if result else None)
            if error is None and result is not None and result.complete:
                traffic.finished += 1
            else:
                traffic.failed += 1
                traffic.last_error = (error or "the stream ended without [DONE]")[:200]

        try:
            model = await handle.ensure_model(http, self.settings)
            window = 0
            while not stop.is_set():
                schedule = draw_schedule(rate, "poisson", seed=window, duration_s=TRAFFIC_WINDOW_S)
                t0 = time.perf_counter()
                for offset in schedule.offsets_s:
                    while not stop.is_set() and (wait := t0 + offset - time.perf_counter()) > 0:
                        await asyncio.sleep(min(wait, 0.2))
                    if stop.is_set():
                        break
                    if len(open_now) >= MAX_OPEN_REQUESTS:
                        traffic.dropped += 1
                        continue
                    with self._lock:
                        req = self.presets[self._preset].to_request(max_tokens=self._max_tokens)
                    task = asyncio.create_task(one_request(http, handle, model, req, traffic.sent))
                    traffic.sent += 1
                    open_now.add(task)
                    traffic.open = len(open_now)
                    task.add_done_callback(ended)
                while not stop.is_set() and time.perf_counter() < t0 + TRAFFIC_WINDOW_S:
                    await asyncio.sleep(0.2)
                window += 1
        finally:
            for task in list(open_now):
                task.cancel()
            await asyncio.gather(*open_now, return_exceptions=True)
            await http.aclose()

    # ------------------------------------------------------------ reading the canary

    def _status(self) -> dict[str, Any]:
        try:
            return canary.status_data(self.run_dir)
        except canary.CanaryError:
            raise canary.CanaryError(f"no canary is running (state file {canary.state_path(self.run_dir)}): "
                                     f"start it with `{START_COMMAND}`") from None
        except OSError as e:
            raise canary.CanaryError(f"the canary's router does not answer on its admin socket ({e}): "
                                     "`python -m servers canary status`") from None

    def poll(self, max_age_s: float = 0.0) -> CanaryFrame:
        """The view now: the share and counts, each path's figures, the alerts, the timeline. With
        ``max_age_s``, a frame polled that recently is given again (viewers' timers share one poll)."""
        last = self._last
        if max_age_s > 0 and last is not None and time.monotonic() - last[0] < max_age_s:
            return last[1]
        frame = self._poll()
        self._last = (time.monotonic(), frame)
        return frame

    def _poll(self) -> CanaryFrame:
        frame = CanaryFrame(traffic=self.traffic, timeline=self.timeline)
        if self.traffic is not None and self.traffic.problem:
            frame.problem = self.traffic.problem
        try:
            status = self._status()
        except canary.CanaryError as e:
            frame.problem = str(e)
            return frame
        frame.share_percent = status["share_percent"]
        frame.requests = status["requests"]
        frame.window = status.get("alert_window") or DEFAULT_WINDOW
        self._rollback(frame, status)
        prom = (status.get("processes") or {}).get("prometheus")
        if prom is None:
            frame.problem = frame.problem or ("the canary runs without its alert path (no --rules): no figures and "
                                              f"no rollback; restart it with `{START_COMMAND}`")
            return frame
        frame.prometheus_url = prom["url"]
        try:
            self._figures(frame, prom["url"])
        except (httpx.HTTPError, ValueError, KeyError, TypeError) as e:
            frame.problem = frame.problem or (f"Prometheus at {prom['url']} does not answer ({type(e).__name__}: "
                                              f"{str(e)[:100]}): figures n/a, and no rollback while it is down")
        self._firing_time(frame)
        return frame

    def _rollback(self, frame: CanaryFrame, status: dict[str, Any]) -> None:
        rb = status.get("last_rollback")
        switched = self.timeline.switched_at
        if rb is None:
            return
        at = parse_time(rb.get("at"))
        if switched is not None and (at is None or at < switched):
            frame.rollback = None  # an older rollback: not this switch's
            return
        frame.rollback = rb
        if switched is not None and self.timeline.share_zero_at is None and at is not None:
            self.timeline.share_zero_at = at

    def _firing_time(self, frame: CanaryFrame) -> None:
        # Prometheus's own time wins, when the rollback event brings it: a poll may see the alert
        # firing before the event is written, later than it fired.
        t = self.timeline
        if t.switched_at is None or t.fired_source == PROMETHEUS_FIRED:
            return
        starts = parse_time((frame.rollback or {}).get("starts_at"))
        if starts is not None and starts >= t.switched_at:
            t.fired_at, t.fired_source = starts, PROMETHEUS_FIRED
        elif self._seen_firing is not None and t.fired_at is None:
            t.fired_at, t.fired_source = self._seen_firing, "seen firing by the view's poll"

    def _figures(self, frame: CanaryFrame, prom_url: str) -> None:
        w = frame.window
        with httpx.Client(timeout=PROMETHEUS_TIMEOUT_S) as client:
            def query(q: str) -> list[dict[str, Any]]:
                r = client.get(f"{prom_url}/api/v1/query", params={"query": q})
                r.raise_for_status()
                return list(r.json()["data"]["result"])

            paths = {p: PathFigures() for p in PATHS}
            for row in query(ROUTER_RATE.format(job=canary.ROUTER_JOB, backend=canary.SPLIT_BACKEND, w=w)):
                server = row["metric"].get("server", "")
                path = "baseline" if server in ("baseline", canary.FALLBACK) else server
                if path in paths:
                    paths[path].requests_per_s = (paths[path].requests_per_s or 0.0) + _number(row)
            for row in query(ITL_P95.format(w=w)):
                if (role := row["metric"].get("role")) in paths and (v := _number(row)) == v:  # NaN: no tokens
                    paths[role].itl_p95_ms = v * 1000
            for row in query(ACCEPTANCE.format(w=w)):
                if (role := row["metric"].get("role")) in paths and (v := _number(row)) == v:
                    paths[role].acceptance = v
            frame.paths = paths
            # The guardrails as Prometheus holds them: each rule's threshold (the evaluator's
            # annotation), its state (inactive, pending, firing) and its alert's value.
            r = client.get(f"{prom_url}/api/v1/rules", params={"type": "alert"})
            r.raise_for_status()
            for group in r.json()["data"]["groups"]:
                for rule in group.get("rules", [])[:MAX_RULES_SHOWN]:
                    active = (rule.get("alerts") or [{}])[0]
                    state = str(rule.get("state", "?"))
                    threshold = (rule.get("annotations") or {}).get("threshold", "n/a")
                    frame.alerts.append({"name": str(rule.get("name", "?"))[:100], "state": state[:20],
                                         "threshold": str(threshold)[:200], "value": str(active.get("value", ""))[:40]})
                    if state == "firing" and self._seen_firing is None and self.timeline.switched_at:
                        self._seen_firing = datetime.now(UTC)


def _number(row: dict[str, Any]) -> float:
    return float(row["value"][1])


# ---------------------------------------------------------------- the frame as HTML (escaped)

def _fmt(v: float | None, spec: str, unit: str = "") -> str:
    return "n/a" if v is None else f"{v:{spec}}{unit}"


def _clock(t: datetime | None) -> str:
    return "—" if t is None else f"{t:%H:%M:%S}.{t.microsecond // 100_000}"


def status_html(text: str, state: str) -> str:
    """The view's one line: ``state`` is ok, problem or info."""
    return f'<div class="sd-canary-line" data-state="{html.escape(state)}">{html.escape(text)}</div>'


def figure_text(value: object) -> str:
    """A figure Prometheus gives as text ('9.27e-02') in 3 significant digits; other text as it is."""
    try:
        return f"{float(str(value)):.3g}"
    except ValueError:
        return str(value)


def frame_html(frame: CanaryFrame) -> str:
    """The canary view, two columns: the share, the traffic, each path's figures and the guardrails;
    the rollback and the timeline of the switch. Every text from outside is escaped."""
    e = html.escape
    share = "n/a" if frame.share_percent is None else f"{frame.share_percent}%"
    data_share = "" if frame.share_percent is None else str(frame.share_percent)
    left = [f'<div class="sd-canary-share">share of eligible traffic to speculative: <b id="sd-canary-share">'
            f'{e(share)}</b></div>']
    t = frame.traffic
    if t is not None:
        left.append(f'<div class="sd-canary-traffic">traffic: {t.rate_requests_per_s:g} req/s of <b>{e(t.preset)}</b>'
                    f' · sent {t.sent}, finished {t.finished}, failed {t.failed}, open {t.open}'
                    + (f", dropped {t.dropped}" if t.dropped else "")
                    + (f" · stopped at {_clock(t.ended_at)}" if t.ended_at is not None else "")
                    + (f' · last error: {e(t.last_error)}' if t.last_error else "") + "</div>")
    n = frame.requests
    if n:
        left.append(f'<div class="sd-canary-counts">router counts: baseline {n.get("baseline", 0)}, speculative '
                    f'{n.get("speculative", 0)} (eligible {n.get("eligible", 0)}, ineligible '
                    f'{n.get("ineligible", 0)})</div>')
    if frame.paths:
        rows = "".join(
            f'<tr data-path="{p}"><td>{p}</td><td>{_fmt(f.requests_per_s, ".2f")}</td>'
            f'<td>{_fmt(f.itl_p95_ms, ".1f", " ms")}</td>'
            f'<td>{_fmt(None if f.acceptance is None else f.acceptance * 100, ".0f", "%")}</td></tr>'
            for p, f in frame.paths.items())
        left.append(f'<table class="sd-canary-paths"><thead><tr><th>path</th><th>requests/s</th>'
                    f'<th>ITL p95</th><th>acceptance</th></tr></thead><tbody>{rows}</tbody></table>'
                    f'<div class="sd-canary-note">from the canary\'s Prometheus over the last {e(frame.window)}; '
                    'n/a: no data in the window</div>')
    if frame.alerts:
        left.append('<ul class="sd-canary-alerts">' + "".join(
            f'<li data-state="{e(a["state"])}"><b>{e(a["name"])}</b> {e(a["state"])}'
            + (f' at {e(figure_text(a["value"]))}' if a.get("value") else "")
            + f' · fires when {e(a.get("threshold", "n/a"))}</li>' for a in frame.alerts) + "</ul>")
    right = []
    rb = frame.rollback
    if rb is not None:
        right.append(f'<div class="sd-canary-rollback" id="sd-canary-rollback">rollback: <b>{e(str(rb.get("alert")))}'
                     f'</b> fired at value {e(figure_text(rb.get("value")))} '
                     f'(threshold: {e(str(rb.get("threshold", "n/a")))}); share {e(str(rb.get("share_before")))}% '
                     f'→ {e(str(rb.get("share_after")))}% at {e(str(rb.get("at", "")))[11:21]} UTC. '
                     'Recovery is manual: set the share again.</div>')
    tl = frame.timeline
    if tl.switched_at is not None:
        a, b = tl.seconds(tl.switched_at, tl.fired_at), tl.seconds(tl.fired_at, tl.share_zero_at)
        total = tl.seconds(tl.switched_at, tl.share_zero_at)
        right.append(
            '<ol class="sd-canary-timeline">'
            f'<li>switch to bad traffic: {_clock(tl.switched_at)}</li>'
            f'<li>alert firing: {_clock(tl.fired_at)}'
            + (f' (+{a:.1f} s; {e(tl.fired_source)})' if a is not None else "") + '</li>'
            f'<li>share at 0: {_clock(tl.share_zero_at)}' + (f' (+{b:.2f} s after firing)' if b is not None else "")
            + '</li></ol>'
            + (f'<div class="sd-canary-total" id="sd-canary-total">switch to share 0: {total:.1f} s</div>'
               if total is not None else ""))

    return (f'<div class="sd-canary" data-share="{data_share}"><div class="sd-canary-col">{"".join(left)}</div>'
            f'<div class="sd-canary-col">{"".join(right)}</div></div>')


NOTE_KEPT_S = 15.0  # an action's own line stays this long above the view, then the poll's line


def frame_line(frame: CanaryFrame) -> tuple[str, str]:
    """The one line above the view and its state: the problem first, else what is happening."""
    if frame.problem:
        return frame.problem, "problem"
    if frame.rollback is not None and frame.share_percent == 0:
        return f"rolled back by {frame.rollback.get('alert')}: the share is 0; recovery is manual", "info"
    if frame.traffic is None:
        return f"canary running, share {frame.share_percent}%: start the traffic", "ok"
    return f"canary running, share {frame.share_percent}%", "ok"

