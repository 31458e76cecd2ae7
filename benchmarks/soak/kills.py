"""Kill planning: when each server is killed, whether a live answer is mid-stream (from the
server's /metrics), and which race a kill cut."""

from __future__ import annotations

import random
from datetime import datetime

import httpx
from pydantic import BaseModel

from benchmarks.soak.logs import RaceSeen
from common.sides import Side
from demo.metrics import parse_metrics

# A due kill lands only while the server has at least this share of the live answer to come.
MID_STREAM_TO_COME = 0.5


def plan_kills(roles: list[Side], duration_s: float, rng: random.Random, lead_s: float,
               tail_s: float) -> list[tuple[Side, float]]:
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
    role: Side
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
