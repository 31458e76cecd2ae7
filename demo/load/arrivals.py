"""Open-loop arrivals: when each request of a rate step is sent, as offsets from the step's start.

A schedule is a list of send offsets in seconds (``ArrivalSchedule.offsets_s``), drawn once per
rate step and sent unchanged to the baseline and to every arm, so the servers see the same traffic.
It is built here from an arrival law, or from a trace's own timestamps (``Replay``, from a workload
whose requests carry ``arrival_s``; ``ArrivalSchedule.from_offsets``): the engine only reads the offsets.

The laws, as ``vllm bench serve`` draws them (vllm/benchmarks/serve.py ``get_request``): the gaps
between arrivals are independent, with mean 1/rate:

- ``poisson``: exponential gaps (a gamma of shape 1);
- ``gamma``: gamma gaps of shape ``burstiness`` and scale 1/(rate x burstiness): below 1 burstier
  than Poisson, above 1 steadier;
- ``constant``: every gap exactly 1/rate.

The first request arrives one gap after the step starts (a process that was already running).
Randomness: Python's ``random.Random(seed)`` (Mersenne Twister; ``expovariate``, ``gammavariate``),
one generator per schedule, seeded from the sweep's ``--seed`` and the step's index, so a sweep
re-run with the same seed sends the same times. vLLM draws its gaps from numpy's global seed and
then rescales them so that N requests span exactly N/rate seconds; ``normalized`` does the same
(for a side-by-side check), otherwise the gaps are left as drawn.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, Field

from demo.workload import WorkloadRequest

Arrivals = Literal["poisson", "constant", "gamma"]
ARRIVALS: tuple[Arrivals, ...] = ("poisson", "constant", "gamma")
# A step's arrivals must fit in this many seconds (--duration, or --requests N at rate R: N/R): the
# sweep's time bound per step. Past it, the step would tie the servers up for more than 10 minutes.
MAX_ARRIVAL_WINDOW_S = 600.0
MAX_STEP_REQUESTS = 10_000  # requests per step (a schedule's length)


class ArrivalSchedule(BaseModel):
    """One rate step's send times: offsets from the step's start, ascending, shared by every server."""

    source: Arrivals | Literal["trace"]  # the law it was drawn from, or a trace's own times
    rate_requests_per_s: float = Field(gt=0)  # the rate asked for (a trace: its mean rate)
    burstiness: float = Field(1.0, gt=0)  # the gamma shape (1: Poisson); 1 for constant and trace
    seed: int | None = None  # the generator's seed; None for constant arrivals and traces
    normalized: bool = False  # rescaled so that N requests span N/rate seconds (as vllm bench serve)
    window_s: float = Field(gt=0)  # the arrival window: --duration, else the last offset
    offsets_s: list[float] = Field(default_factory=list)  # ascending, each in [0, window_s]

    @property
    def offered_requests_per_s(self) -> float:
        """Requests offered per second: the schedule's own, its requests over its window."""
        return len(self.offsets_s) / self.window_s

    @classmethod
    def from_offsets(cls, offsets_s: list[float], window_s: float | None = None) -> ArrivalSchedule:
        """A trace's own send times (ascending offsets in seconds); ValueError when they go backwards."""
        if not offsets_s:
            raise ValueError("a trace with no requests has no arrivals")
        back = next((i for i in range(1, len(offsets_s)) if offsets_s[i] < offsets_s[i - 1]), None)
        if back is not None or offsets_s[0] < 0:
            at = back if back is not None else 0
            raise ValueError(f"arrival times go backwards at request {at + 1} ({offsets_s[at]:g} s)")
        window = window_s or max(offsets_s[-1], 1e-3)
        return cls(source="trace", rate_requests_per_s=len(offsets_s) / window, window_s=window,
                   offsets_s=list(offsets_s))


def step_seed(seed: int, step_index: int) -> int:
    """The seed of a sweep's step: the sweep's seed and the step's index, so each step draws afresh."""
    return seed * 1_000_003 + step_index


def draw_schedule(rate: float, arrivals: Arrivals = "poisson", *, burstiness: float = 1.0, seed: int = 0,
                  duration_s: float | None = None, requests: int | None = None,
                  normalized: bool = False) -> ArrivalSchedule:
    """The send times of one step at ``rate`` requests/s: every arrival before ``duration_s``, or the
    first ``requests`` arrivals (exactly one of the two). ValueError (one line) on a bad input."""
    if rate <= 0:
        raise ValueError(f"a rate must be above 0 requests/s, got {rate:g}")
    if (duration_s is None) == (requests is None):
        raise ValueError("give a duration or a number of requests, not both")
    if burstiness <= 0:
        raise ValueError(f"burstiness must be above 0, got {burstiness:g}")
    window = duration_s if duration_s is not None else (requests or 0) / rate
    if duration_s is not None and duration_s <= 0:
        raise ValueError(f"a duration must be above 0 s, got {duration_s:g}")
    if requests is not None and requests < 1:
        raise ValueError(f"requests must be at least 1, got {requests}")
    if window > MAX_ARRIVAL_WINDOW_S:
        raise ValueError(f"a step at {rate:g} req/s would send for {window:g} s: past the sweep's time bound of "
                         f"{MAX_ARRIVAL_WINDOW_S:g} s of arrivals per step (shorten --duration or --requests)")
    expected = rate * window
    if expected > MAX_STEP_REQUESTS:
        raise ValueError(f"a step at {rate:g} req/s for {window:g} s would send about {expected:.0f} requests: "
                         f"more than {MAX_STEP_REQUESTS} per step")
    shape = 1.0 if arrivals != "gamma" else burstiness
    rng = random.Random(seed)

    def gap() -> float:
        if arrivals == "constant":
            return 1.0 / rate
        if arrivals == "poisson":
            return rng.expovariate(rate)
        return rng.gammavariate(shape, 1.0 / (rate * shape))

    offsets: list[float] = []
    t = 0.0
    while len(offsets) < MAX_STEP_REQUESTS:
        t += gap()
        if duration_s is not None and t >= duration_s:
            break
        offsets.append(t)
        if requests is not None and len(offsets) == requests:
            break
    if requests is not None and normalized and offsets:
        scale = window / offsets[-1]
        offsets = [o * scale for o in offsets]
    if requests is not None:
        window = max(window, offsets[-1]) if normalized else max(offsets[-1], 1e-3)
    return ArrivalSchedule(source=arrivals, rate_requests_per_s=rate, burstiness=shape,
                           seed=None if arrivals == "constant" else seed,
                           normalized=normalized and requests is not None,
                           window_s=window, offsets_s=offsets)


def parse_rates(text: str) -> list[float]:
    """'0.5,1,2' -> [0.5, 1.0, 2.0] (ascending, distinct); ValueError (one line) on a bad rate."""
    parts = [p.strip() for p in str(text).split(",") if p.strip()]
    if not parts:
        raise ValueError("rate is empty: give requests per second such as 0.5,1,2,4")
    values: list[float] = []
    for p in parts:
        try:
            v = float(p)
        except ValueError:
            raise ValueError(f"rate must be requests per second above 0, got {p!r}") from None
        if not v > 0 or v == float("inf"):
            raise ValueError(f"rate must be requests per second above 0, got {p}")
        values.append(v)
    return sorted(set(values))


class Replay(BaseModel):
    """A trace replayed on its own clock: each request sent at its offset from the trace's first arrival,
    divided by ``speed`` (2: twice as fast), one step, the same send times to every server."""

    file: str  # the workload's name, as the label shows it
    speed: float = Field(1.0, gt=0)
    trace_offsets_s: list[float] = Field(min_length=1)  # as logged, from the first arrival, before --speed

    @property
    def label(self) -> str:
        """'replay of agents at speed 2': what a step's row says instead of a rate."""
        return f"replay of {self.file} at speed {self.speed:g}"

    def schedule(self) -> ArrivalSchedule:
        """The send times: the trace's offsets over the speed (its window: the last one)."""
        return ArrivalSchedule.from_offsets([o / self.speed for o in self.trace_offsets_s])


def replay_of(file: str, requests: Sequence[WorkloadRequest], speed: float = 1.0) -> Replay:
    """The replay of a workload's requests, in file order, at ``speed``; ValueError (one line) when a
    request has no arrival time, a session's turn needs its side's answer, the times go backwards, or
    the replay would send past the sweep's time bound."""
    if not speed > 0 or speed == float("inf"):
        raise ValueError(f"--speed must be above 0 (2 replays twice as fast), got {speed:g}")
    if not requests:
        raise ValueError(f"{file} has no requests to replay")
    if carried := next((r for r in requests if r.carry), None):
        raise ValueError(f"{file}: session turns that carry each side's own answer (the first: {_where(carried)}) "
                         "are not replayed: a turn would have to wait for its side's answer to the turn before, "
                         "and a replay sends every request at its time; measure them with sweep --workload")
    untimed = [r for r in requests if r.arrival_s is None]
    if len(untimed) == len(requests):
        raise ValueError(f"{file} has no arrival times (AIPerf timestamp, LiteLLM startTime): use --rate")
    if untimed:
        r = untimed[0]
        raise ValueError(f"{file}: {len(untimed)} of {len(requests)} requests carry no arrival time (the first: "
                         f"{_where(r)}): give every request a timestamp, or use --rate")
    times = [r.arrival_s or 0.0 for r in requests]
    if back := next((i for i in range(1, len(times)) if times[i] < times[i - 1]), None):
        raise ValueError(f"{file}: the timestamps go backwards at {_where(requests[back])} ({times[back]:g} s, "
                         f"after {times[back - 1]:g} s): sort the trace by time")
    if len(requests) > MAX_STEP_REQUESTS:
        raise ValueError(f"{file}: {len(requests)} requests, more than {MAX_STEP_REQUESTS} per step")
    span = (times[-1] - times[0]) / speed
    if span > MAX_ARRIVAL_WINDOW_S:
        raise ValueError(f"{file} spans {times[-1] - times[0]:g} s: at speed {speed:g} it would send for "
                         f"{span:g} s, past the sweep's time bound of {MAX_ARRIVAL_WINDOW_S:g} s of arrivals per "
                         f"step; raise --speed to at least {(times[-1] - times[0]) / MAX_ARRIVAL_WINDOW_S:.3g}")
    return Replay(file=file, speed=speed, trace_offsets_s=[t - times[0] for t in times])


def _where(r: WorkloadRequest) -> str:
    return f"request {r.id}" + (f" (line {r.line})" if r.line is not None else "")
