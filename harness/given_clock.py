"""Event streams on a given clock: the ChunkEvents a client would have seen, their times designed
(a pace: TTFT, tokens/s, chunk sizes) or taken from a stand-in's ``Truth``, never lived.

A figure checked against a stream that really ran depends on the machine's mood; one checked on a
stream whose times are given passes or fails the same anywhere, at any load. So the logic of every
figure (SideMeter's, the pooling's, the rate step's, the crossover's, the schedule's, the verdict's)
is checked here through the product's own functions, fed these events; only the accuracy against
real time is left to the stand-ins' timing checks.

    pace = Pace(tokens_per_s=50, ttft_s=0.1, chunk_sizes=(3, 4), speculative=True)
    result = measure(pace.events(60), "speculative")  # demo.measure.SideMeter, fed the events
    result.decode_tokens_per_s  # 50 (the tokens after the first over the time since it arrived)

The pace is the stand-in's (harness/standin/): the prefill token alone in the first chunk, then
``chunk_sizes`` cycled; token m ready at TTFT + m / tokens_per_s and a chunk sent when its last token
is ready; a speculative request's final usage chunk carries vLLM's per-request metrics for those
chunks (``spec_metrics_for``); a stand-in slowing with the streams in flight is a pace per count
(``Pace.of``).
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from demo.load.arrivals import ArrivalSchedule
from demo.load.engine import LoadResult, LoadSpec, LoadStep, finish
from demo.load.rate import arm_step, side_figures
from demo.load.rate_models import RateSide, RateStep
from demo.measure import SideMeter, same_answer
from demo.metrics import MetricsSample, parse_metrics
from demo.race import compare_arms
from demo.results import ChunkEvent, RaceRequest, RaceResult, Side, SideResult, SpecPerRequest
from demo.settings import Endpoint
from demo.slo import Slo
from demo.sweep.models import ArmSpec, BatchStats, CellResult, CellSettings, SweepResult, SweepSpec
from demo.sweep.pooling import assemble_arms, batch_stats
from demo.sweep.report import finalize
from harness.standin import DEFAULT_PIECES, StandinBehavior, Truth, plan_chunks, spec_metrics_for, synthetic_behavior

BASE_URL = "given://baseline"
PROMPT_TOKENS = 20


@dataclass(frozen=True)
class Pace:
    """A stream's design: its TTFT (request sent -> first token), its decode rate, its chunks.

    ``queued_s`` delays the whole answer (a request waiting for a slot); ``done_after_s`` is the gap
    from the last token to ``[DONE]``. ``continuous_usage`` False: usage on the final chunk only (the
    per-chunk figures are then n/a). ``per_request_metrics`` False: a speculative server that sends no
    per-request acceptance (the /metrics delta is then the source)."""

    tokens_per_s: float
    ttft_s: float = 0.05
    chunk_sizes: tuple[int, ...] = (1,)
    speculative: bool = False
    k: int = 4
    per_request_metrics: bool = True
    continuous_usage: bool = True
    done_after_s: float = 0.0
    queued_s: float = 0.0

    @classmethod
    def of(cls, behavior: StandinBehavior, in_flight: int = 1) -> Pace:
        """A stand-in's designed pace with ``in_flight`` identical streams at once: its decode rate
        over 1 + slowdown_in_flight (n - 1), as its streams decode (a synthetic acceptance length: its
        steps, at its rate of steps times their mean)."""
        b = synthetic_behavior(behavior)
        return cls(tokens_per_s=b.tokens_per_s / (1 + b.slowdown_in_flight * (in_flight - 1)), ttft_s=b.ttft_s,
                   chunk_sizes=tuple(b.chunk_sizes), speculative=b.speculative, k=b.num_spec_tokens,
                   per_request_metrics=b.per_request_metrics)

    def slower(self, factor: float) -> Pace:
        """This pace with its decode rate divided by ``factor``."""
        return replace(self, tokens_per_s=self.tokens_per_s / factor)

    def chunks(self, tokens: int) -> list[int]:
        """Tokens per chunk, as the stand-in plans them: the prefill token alone, then chunk_sizes cycled."""
        return plan_chunks(tokens, list(self.chunk_sizes))

    def e2e_s(self, tokens: int) -> float:
        """Request sent -> [DONE], by design."""
        return self.queued_s + self.ttft_s + (tokens - 1) / self.tokens_per_s + self.done_after_s

    def events(self, tokens: int, pieces: Sequence[str] | None = None) -> list[ChunkEvent]:
        """The events a client reads from this stream of ``tokens`` tokens, times from the request's send."""
        sizes = self.chunks(tokens)
        ends = list(itertools.accumulate(sizes))
        first = self.queued_s + self.ttft_s
        times = [first + (end - 1) / self.tokens_per_s for end in ends]
        return stream_events(sizes, times, k=self.k if self.speculative else None,
                             per_request_metrics=self.per_request_metrics, continuous_usage=self.continuous_usage,
                             done_s=times[-1] + self.done_after_s, pieces=pieces)


def stream_events(sizes: Sequence[int], times: Sequence[float], *, k: int | None = None,
                  per_request_metrics: bool = True, continuous_usage: bool = True, done_s: float | None = None,
                  pieces: Sequence[str] | None = None, finish_reason: str = "length") -> list[ChunkEvent]:
    """The events of one chat stream, as demo.client parses them: the role chunk (with the first
    content chunk, as vLLM and the stand-in send it), a content chunk per entry of ``sizes`` at its
    time (seconds from the request's send) with the running usage, the final usage chunk (with vLLM's
    per-request speculative metrics when ``k`` is given), then ``[DONE]`` at ``done_s``."""
    words = list(pieces or DEFAULT_PIECES)
    tokens = sum(sizes)
    texts = [words[i % len(words)] for i in range(tokens)]
    out = [ChunkEvent(t_s=times[0], completion_tokens=0 if continuous_usage else None,
                      prompt_tokens=PROMPT_TOKENS if continuous_usage else None)]
    n = 0
    for c, (size, t) in enumerate(zip(sizes, times, strict=True)):
        text = "".join(texts[n:n + size])
        n += size
        out.append(ChunkEvent(t_s=t, text=text, completion_tokens=n if continuous_usage else None,
                              prompt_tokens=PROMPT_TOKENS if continuous_usage else None,
                              finish_reason=finish_reason if c == len(sizes) - 1 else None))
    end = times[-1] if done_s is None else done_s
    spec = (SpecPerRequest.model_validate(spec_metrics_for(list(sizes), k))
            if k is not None and per_request_metrics else None)
    out.append(ChunkEvent(t_s=times[-1], completion_tokens=tokens, prompt_tokens=PROMPT_TOKENS, final_usage=True,
                          spec=spec))
    out.append(ChunkEvent(t_s=end, done=True, completion_tokens=tokens))
    return out


def events_from_truth(truth: Truth, *, k: int | None = None, per_request_metrics: bool = True,
                      late_s: float = 0.0) -> list[ChunkEvent]:
    """A stand-in's record of one streamed request as the events a client would have read: each chunk
    at its send time (from the request's ``t_request``) plus ``late_s``, ``[DONE]`` when the stand-in
    ended it. Speculative when it drafted (its k: drafted tokens over drafts, unless given)."""
    if not truth.chunk_sizes_sent:
        raise ValueError("the truth has no chunk sent")
    times = [t - truth.t_request + late_s for t in truth.chunk_send_times]
    if k is None and truth.drafts:
        k = truth.draft_tokens // truth.drafts
    done = (truth.t_end - truth.t_request + late_s) if truth.t_end is not None else times[-1]
    return stream_events(truth.chunk_sizes_sent, times, k=k if truth.drafts else None,
                         per_request_metrics=per_request_metrics, done_s=max(done, times[-1]),
                         finish_reason=truth.finish_reason or "length")


def measure(events: Sequence[ChunkEvent], side: Side = "baseline", url: str | None = None) -> SideResult:
    """One stream's figures: ``events`` fed to demo.measure.SideMeter, as the client feeds it."""
    meter = SideMeter(side, url or f"given://{side}", t0=0.0)
    for ev in events:
        meter.feed(ev)
    return meter.result()


def given_race(base: Pace, arms: Mapping[str, Pace], tokens: int,
               endpoints: Mapping[str, Endpoint] | None = None) -> RaceResult:
    """A race (one user) of the baseline and each arm, every stream ``tokens`` long at its pace,
    measured and compared by demo.race.compare_arms, as a race's end compares them (with the arms'
    ``endpoints``, as the page passes its settings' ones)."""
    sides = {name: measure(pace.events(tokens), "speculative", f"given://{name}") for name, pace in arms.items()}
    return compare_arms(RaceRequest(prompt="given", max_tokens=tokens, order="sequential"),
                        measure(base.events(tokens)), sides, endpoints=endpoints)


# --------------------------------------------------------------------------- /metrics


def spec_metrics_text(chunk_lists: Sequence[Sequence[int]], k: int) -> str:
    """A speculative server's /metrics counters (vLLM's names) after serving requests of these chunk
    sizes (each with its prefill chunk first), as the stand-in counts them."""
    drafts = accepted = 0
    per_pos = [0] * k
    for sizes in chunk_lists:
        for size in sizes[1:]:
            drafts += 1
            accepted += size - 1
            for pos in range(size - 1):
                per_pos[pos] += 1
    lines = [f"vllm:spec_decode_num_drafts_total {drafts}", f"vllm:spec_decode_num_draft_tokens_total {drafts * k}",
             f"vllm:spec_decode_num_accepted_tokens_total {accepted}"]
    lines += [f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{position="{p}"}} {n}'
              for p, n in enumerate(per_pos)]
    return "\n".join(lines) + "\n"


def spec_metrics_sample(chunk_lists: Sequence[Sequence[int]], k: int) -> MetricsSample:
    """``spec_metrics_text`` through demo.metrics.parse_metrics (the scrape's own parser)."""
    return parse_metrics(spec_metrics_text(chunk_lists, k))


# --------------------------------------------------------------------------- a batch, a cell, a load sweep

ServerDesign = StandinBehavior | Pace


def pace_at(design: ServerDesign, users: int) -> Pace:
    """A server's pace with ``users`` streams at once: a Pace as given, a stand-in's by Pace.of."""
    return design if isinstance(design, Pace) else Pace.of(design, users)


def given_batch(side: Side, pace: Pace, users: int, tokens: int, *,
                before: MetricsSample | None = None, after: MetricsSample | None = None,
                url: str | None = None) -> tuple[BatchStats, list[SideResult]]:
    """``users`` streams at ``pace`` started together, measured and pooled as the runner's run_batch pools
    them (demo.sweep.pooling.batch_stats): the batch's wall time from the sends to the last [DONE]."""
    results = [measure(pace.events(tokens), side, url) for _ in range(users)]
    wall = max(r.e2e_s or 0.0 for r in results)
    return batch_stats(side, results, wall, None, before, after), results


def given_cell(users: int, base: ServerDesign, arms: Mapping[str, ServerDesign], tokens: int, *,
               repeats: int = 1, preset: str = "json_reformat", metrics_delta: bool = False,
               about: Mapping[str, ArmSpec] | None = None) -> CellResult:
    """One evaluator cell (a load step) at ``users``: the baseline's batch and each arm's, every repeat,
    put together by demo.sweep.pooling.assemble_arms (with ``about`` each arm as configured).
    ``metrics_delta``: each arm's acceptance from /metrics counters around its batch
    (spec_metrics_sample) instead of per-request metrics."""
    settings = CellSettings(preset=preset, temperature=0.0, concurrency=users, max_tokens=tokens, api="chat",
                            repeats=repeats, warmup=0, order="sequential", baseline_url=BASE_URL,
                            speculative_url=f"given://{next(iter(arms))}")
    base_pace = pace_at(base, users)
    base_batches: list[BatchStats] = []
    arm_batches: dict[str, list[BatchStats]] = {name: [] for name in arms}
    identical: dict[str, bool | None] = {}
    for _ in range(repeats):
        stats, base_results = given_batch("baseline", base_pace, users, tokens)
        base_batches.append(stats)
        for name, design in arms.items():
            pace = pace_at(design, users)
            around: dict[str, MetricsSample] = {}
            if metrics_delta:
                pace = replace(pace, per_request_metrics=False)
                around = {"before": spec_metrics_sample([], pace.k),
                          "after": spec_metrics_sample([pace.chunks(tokens)] * users, pace.k)}
            stats, results = given_batch("speculative", pace, users, tokens, url=f"given://{name}", **around)
            arm_batches[name].append(stats)
            identical.setdefault(name, same_answer(base_results[0], results[0]))
    return assemble_arms(settings, base_batches, arm_batches, identical, about)


def given_load(users: Sequence[int], base: ServerDesign, arms: Mapping[str, ServerDesign], tokens: int, *,
               slo: Slo | None = None, preset: str = "json_reformat") -> LoadResult:
    """A load sweep (``python -m demo load --users``) over ``users``: a given cell per count as its step,
    the crossovers, the SLO's counts and the schedule by demo.load.engine.finish."""
    spec = LoadSpec(users=list(users), workload=preset, max_tokens=tokens, temperature=0.0, slo=slo,
                    baseline_url=BASE_URL, speculative_url=f"given://{next(iter(arms))}",
                    arms=[ArmSpec(name=n, url=f"given://{n}") for n in arms])
    result = LoadResult(spec=spec)
    for n in users:
        result.steps.append(LoadStep(cell=given_cell(n, base, arms, tokens, preset=preset)))
        finish(result)
    return result


def given_sweep(concurrency: Sequence[int], base: ServerDesign, arms: Mapping[str, ServerDesign], tokens: int, *,
                preset: str = "json_reformat", repeats: int = 1) -> SweepResult:
    """An evaluator sweep of one preset over ``concurrency``, its verdicts, capacity and schedule derived
    by demo.sweep.report.finalize, as ``python -m demo sweep`` derives them."""
    spec = SweepSpec(baseline_url=BASE_URL, speculative_url=f"given://{next(iter(arms))}",
                     arms=[ArmSpec(name=n, url=f"given://{n}") for n in arms], presets=[preset],
                     concurrency=list(concurrency), repeats=repeats, warmup=0, max_tokens=tokens)
    result = SweepResult(spec=spec, preset_titles={preset: preset})
    result.cells = [given_cell(c, base, arms, tokens, repeats=repeats, preset=preset) for c in concurrency]
    return finalize(result)


# --------------------------------------------------------------------------- open loop (load --rate)


def given_rate_side(name: str, schedule: ArrivalSchedule, pace: Pace, tokens: int, slo: Slo, *,
                    slots: int | None = None, drain_s: float = 30.0) -> RateSide:
    """One server at one rate step: request i sent at its offset (no send lag) and answered at ``pace``
    once one of ``slots`` is free (first come first served, as the stand-in's max_num_seqs; None: no
    cap), a request still open at the step's bound (arrival window + ``drain_s``) cut; the figures by
    demo.load.rate.side_figures. The step's duration is run_rate_side's: to the last finish, or to
    the bound when a request was cut."""
    bound = schedule.window_s + drain_s
    busy: list[float] = []  # when each running request frees its slot
    results: list[SideResult | None] = []
    cut, last = 0, 0.0
    for offset in schedule.offsets_s:
        start = offset
        if slots is not None:
            while busy and busy[0] <= offset:
                heapq.heappop(busy)
            if len(busy) >= slots:
                start = heapq.heappop(busy)
        mine = replace(pace, queued_s=pace.queued_s + start - offset)
        end = offset + mine.e2e_s(tokens)
        if slots is not None:
            heapq.heappush(busy, end)
        if end > bound:
            results.append(None)
            cut += 1
            continue
        results.append(measure(mine.events(tokens), "speculative" if pace.speculative else "baseline",
                               f"given://{name}"))
        last = max(last, end)
    duration = bound if cut else last
    return side_figures(name, schedule, results, cut, duration, bound, slo, None, None, [], [],
                        [0.0] * len(results), None)


def given_rate_step(schedule: ArrivalSchedule, base: Pace, arms: Mapping[str, Pace], tokens: int, slo: Slo, *,
                    slots: int | None = None, drain_s: float = 30.0) -> RateStep:
    """One rate step: the one schedule to the baseline and to each arm (given_rate_side), each arm's
    ratios by demo.load.rate.arm_step."""
    b = given_rate_side("baseline", schedule, base, tokens, slo, slots=slots, drain_s=drain_s)
    return RateStep(rate_requests_per_s=schedule.rate_requests_per_s, schedule=schedule, baseline=b,
                    arms={n: arm_step(given_rate_side(n, schedule, p, tokens, slo, slots=slots, drain_s=drain_s), b)
                          for n, p in arms.items()})
