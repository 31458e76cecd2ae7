"""Turn one stream's ChunkEvents into the figures of a side. The only place they are computed.

Token counts come from the server's running ``usage.completion_tokens``; the token
count of a chunk is the difference between two chunks' running counts.
"""

from __future__ import annotations

import json
import statistics
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from demo.fmt import fmt_length, fmt_number, fmt_speedup
from demo.results import (
    ChunkEvent,
    Repetition,
    ServerWait,
    Side,
    SideResult,
    SideSnapshot,
    SpecPerRequest,
    SpecStats,
    StreamProgress,
    ToolCall,
    ToolCallDelta,
)

NO_CONTINUOUS_USAGE = "the server sent no per-chunk usage (continuous_usage_stats), so per-chunk tokens are unknown"


def median(values: Iterable[float | None]) -> float | None:
    """The median of the known values (None skipped: a figure not measured); None when none is known."""
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def percentile(values: list[float], q: float) -> float | None:
    """Linear-interpolated percentile (q in 0..100); None for no values."""
    if not values:
        return None
    if len(values) == 1:
        return values[0]
    if not 1 <= q <= 99:
        return min(values) if q <= 0 else max(values)
    # statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1], the one cut asked for
    # (the same arithmetic, so the same float) rather than all 99.
    data = sorted(values)
    j, delta = divmod(int(q) * (len(data) - 1), 100)
    return (data[j] * (100 - delta) + data[j + 1] * delta) / 100


def efficiency(speedup: float | None, mean_acceptance_length: float | None) -> float | None:
    """Measured decode speedup over tokens per verification step: 1.0 is the bound for that
    acceptance (every step cost no more than a plain decode step). None when either is unknown."""
    if speedup is None or not mean_acceptance_length:
        return None
    return speedup / mean_acceptance_length


# How far over 1 an efficiency must be before it says the race was unfair, not noise: our decode
# speedups agree with their truth within 5% (docs/measurement.md), and the tokens per step are the
# server's own count. A race at the bound (every step as cheap as a plain one) may measure 1.03.
OVER_BOUND_NOISE = 0.05
# How far a step cost timed at the servers' warm-up may be off: on one pair, timings minutes apart read
# 0.86-0.89 (docs/benchmarks.md), and a race's context differs from the timed one. A bound that a timed
# cost lifts above 1 gets this on top of OVER_BOUND_NOISE.
STEP_COST_NOISE = 0.05


def over_bound(speedup: float | None, mean_acceptance_length: float | None, what: str = "race",
               step_cost: float | None = None) -> str | None:
    """Why a measured speedup is not a result, or None: its efficiency exceeds its bound by more than
    a measurement may be off (OVER_BOUND_NOISE).

    A verification step yields ``mean_acceptance_length`` tokens; where it costs at least a plain
    decode step, speculation cannot speed decoding up by more than that, so the bound is 1 and a
    larger speedup means the baseline was slowed. ``step_cost``: a verification step in plain steps
    as timed on the servers' host (the launcher's warm-up); under 1 (on a CPU, vLLM's matmuls can
    take longer for one row than for five) the bound is 1 / step_cost, with STEP_COST_NOISE more room.
    ``what`` names the measurement in the reason (a race, a cell)."""
    eff = efficiency(speedup, mean_acceptance_length)
    bound = max(1.0, 1.0 / step_cost) if step_cost else 1.0
    noise = OVER_BOUND_NOISE + (STEP_COST_NOISE if bound > 1.0 else 0.0)
    if eff is None or speedup is None or eff <= bound * (1.0 + noise):
        return None
    cheaper = (f" even with a verification step timed at {fmt_number(step_cost, 2)}x a plain one here"
               if step_cost and bound > 1.0 else "")
    limit = fmt_number(bound, 2) if bound > 1.0 else "1"
    return (f"efficiency {fmt_number(eff, 2)} > {limit}: speedup {fmt_speedup(speedup)} at "
            f"{fmt_length(mean_acceptance_length)} tokens per step is more than speculation can give{cheaper}; "
            f"the baseline was slowed (threads, a neighbour, a cold cache): a {what} to run again, not a result")


def step_cost_note(speedup: float | None, mean_acceptance_length: float | None,
                   step_cost: float | None) -> str | None:
    """Why an efficiency over 1 (by more than OVER_BOUND_NOISE) is a result all the same, or None: a
    verification step was timed cheaper than a plain one on the servers' host (``step_cost`` < 1), and
    the efficiency is within what that allows (over_bound is None). Said beside the headline, which stays."""
    eff = efficiency(speedup, mean_acceptance_length)
    if (eff is None or speedup is None or step_cost is None or eff <= 1.0 + OVER_BOUND_NOISE
            or over_bound(speedup, mean_acceptance_length, step_cost=step_cost) is not None):
        return None
    return (f"efficiency {fmt_number(eff, 2)} > 1: {fmt_speedup(speedup)} at {fmt_length(mean_acceptance_length)} "
            f"tokens per step, since a verification step here was timed at {fmt_number(step_cost, 2)}x a plain "
            "one (the servers' warm-up)")


@dataclass(frozen=True)
class Acceptance:
    """Acceptance figures; None where a divisor is zero (nothing was drafted)."""

    rate: float | None  # accepted / drafted tokens
    tokens_per_step: float | None  # 1 + accepted / drafts: tokens per verification step, bonus token included
    per_position: list[float] | None  # rate at which draft position i was accepted, per draft


def acceptance(accepted: float, drafted: float, drafts: float,
               accepted_per_position: Sequence[float] | None = None) -> Acceptance:
    """The acceptance formula, for one request, a /metrics window, a batch, a cell or a workload.

    ``accepted`` draft tokens kept out of ``drafted`` proposed over ``drafts`` verification steps
    that had a draft; ``accepted_per_position[i]``: drafts whose position i was accepted.
    """
    return Acceptance(
        rate=accepted / drafted if drafted else None,
        tokens_per_step=1 + accepted / drafts if drafts else None,
        per_position=[a / drafts for a in accepted_per_position] if accepted_per_position is not None and drafts
        else None,
    )


def spec_stats_from_request(m: SpecPerRequest) -> SpecStats:
    """Acceptance figures from vLLM's per-request ``metrics.speculative_decoding``."""
    stats = SpecStats(
        source="per_request",
        accepted_tokens=m.num_accepted_draft_tokens,
        draft_tokens=m.num_draft_tokens,
        drafts=m.num_spec_steps,
        num_spec_tokens=m.num_spec_tokens,
        acceptance_histogram=m.acceptance_histogram,
    )
    steps, accepted, drafted = m.num_spec_steps, m.num_accepted_draft_tokens, m.num_draft_tokens
    if not steps or not drafted or accepted is None:
        reason = "no drafts were proposed for this request (nothing to verify)"
        stats.na_reasons.update(acceptance_rate=reason, mean_acceptance_length=reason, per_position_acceptance=reason)
        return stats
    # Position i was accepted in every step that accepted more than i tokens.
    per_position: list[int] | None = None
    if m.acceptance_histogram:
        hist = m.acceptance_histogram
        per_position = [sum(hist[i + 1 :]) for i in range(len(hist) - 1)]
    elif m.per_step_accepted:
        k = m.num_spec_tokens or max(m.per_step_accepted)
        per_position = [sum(1 for a in m.per_step_accepted if a > i) for i in range(k)]
    else:
        stats.na_reasons["per_position_acceptance"] = "the server sent no histogram or per-step counts"
    acc = acceptance(accepted, drafted, steps, per_position)
    stats.acceptance_rate, stats.mean_acceptance_length = acc.rate, acc.tokens_per_step
    stats.per_position_acceptance = acc.per_position
    return stats


def spread_gaps_s(chunks: Sequence[tuple[float, int]]) -> list[float]:
    """Inter-token gaps from (arrival s, tokens) per token-bearing chunk, in order: a chunk's gap
    since the previous one is spread over its tokens (n gaps of gap / n). The first chunk has no gap."""
    gaps: list[float] = []
    for (prev, _), (t, n) in zip(chunks, chunks[1:], strict=False):
        if n == 1:  # most chunks: no list made for one gap
            gaps.append(t - prev)
        else:
            gaps.extend([(t - prev) / n] * n)
    return gaps


class SideMeter:
    """Accumulates one side's stream; gives live snapshots and the final result."""

    def __init__(self, side: Side, url: str, t0: float | None = None, *, keep_events: bool = True) -> None:
        self.side = side
        self.url = url
        self.t0 = time.perf_counter() if t0 is None else t0
        self.model: str | None = None
        # Every event, for the result's timeline (a race's replay and export); a sweep keeps figures
        # only (keep_events=False), so a thousand streams do not hold a million events.
        self.keep_events = keep_events
        self.events: list[ChunkEvent] = []
        self.n_events = 0
        self.text_parts: list[str] = []
        self.tokens = 0  # running completion_tokens seen so far
        self.has_usage = False
        # (arrival s, tokens in chunk or None, text) per content chunk
        self.chunks: list[tuple[float, int | None, str]] = []
        self.t_first: float | None = None
        # Tokens the first token-bearing chunk brought: 1 (the prefill token) unless the server held
        # tokens back, as vLLM's tool parser does until a call's name is complete (14 in the capture).
        self.first_chunk_tokens = 1
        self.t_last: float | None = None  # arrival of the chunk that brought the last token so far
        self.final_tokens: int | None = None
        self.prompt_tokens: int | None = None
        self.finish_reason: str | None = None
        self.calls: dict[int, ToolCall] = {}  # the answer's tool calls by index, their pieces joined
        self.spec_request: SpecPerRequest | None = None
        self.spec_delta: SpecStats | None = None
        self.done = False
        self.error: str | None = None
        self.status = "waiting"
        self.server_wait: ServerWait | None = None  # a quiet stream's server working on it (demo.streaming)
        self.started = t0 is not None  # the request has been sent (a given t0 says when)
        self.t_end: float | None = None

    def start(self, t0: float) -> None:
        """The request goes out now: elapsed time counts from ``t0``."""
        self.t0 = t0
        self.started = True

    def feed(self, ev: ChunkEvent) -> None:
        """Take one streamed event: its text, its token count (from usage), its acceptance numbers, the times."""
        self.n_events += 1
        if self.keep_events:
            self.events.append(ev)
        self.status = "streaming"
        if ev.prompt_tokens is not None:
            self.prompt_tokens = ev.prompt_tokens
        if ev.spec is not None:
            self.spec_request = ev.spec
        if ev.done:
            self.done = True
            self.t_end = ev.t_s
            self.status = "done"
            return
        if ev.final_usage:
            if ev.completion_tokens is not None:
                self.final_tokens = ev.completion_tokens
                if self.has_usage:  # only a running count can place tokens in time
                    self._advance(ev, ev.completion_tokens, "")
            return
        if ev.finish_reason:
            self.finish_reason = ev.finish_reason
        if ev.tool_calls:
            self._add_tool_calls(ev.tool_calls)
        if ev.completion_tokens is not None:
            self.has_usage = True
            self._advance(ev, ev.completion_tokens, ev.text)
        elif ev.text:
            # No running usage: the chunk holds at least one token, but how many is unknown.
            self.chunks.append((ev.t_s, None, ev.text))
            self.text_parts.append(ev.text)
            if self.t_first is None:
                self.t_first = ev.t_s
            self.t_last = ev.t_s

    def _advance(self, ev: ChunkEvent, running: int, text: str) -> None:
        n = running - self.tokens
        if text:
            self.text_parts.append(text)
        if n <= 0:
            return
        self.tokens = running
        self.chunks.append((ev.t_s, n, text))
        if self.t_first is None:
            self.t_first, self.first_chunk_tokens = ev.t_s, n
        self.t_last = ev.t_s

    def _add_tool_calls(self, pieces: Sequence[ToolCallDelta]) -> None:
        """Join each piece to its call: the id and name when the server sends them, the arguments' text appended."""
        for piece in pieces:
            call = self.calls.setdefault(piece.index, ToolCall())
            call.id = piece.id or call.id
            call.name = piece.name or call.name
            call.arguments += piece.arguments

    @property
    def tool_calls(self) -> list[ToolCall]:
        """The answer's tool calls so far, by their index (copies: the meter keeps joining its own)."""
        return [self.calls[i].model_copy() for i in sorted(self.calls)]

    def fail(self, message: str) -> None:
        """Mark the side failed with ``message`` (one line), at the time of the failure."""
        self.error = message
        self.status = "error"
        self.t_end = time.perf_counter() - self.t0

    def cancel(self) -> None:
        """Mark the side stopped by the user, unless it already finished or failed."""
        if not self.done and not self.error:
            self.status = "cancelled"
            self.error = "Stopped by the user before the answer finished."
            self.t_end = time.perf_counter() - self.t0

    @property
    def text(self) -> str:
        """The answer so far, every chunk's text joined."""
        return "".join(self.text_parts)

    def _decode_rate(self, tokens: int | None) -> tuple[float | None, str | None]:
        if tokens is None:
            return None, "the token count is unknown (the server sent no usage)"
        if tokens < 2 or self.t_first is None or self.t_last is None:
            return None, "fewer than two tokens arrived"
        if self.t_last <= self.t_first:
            return None, "all tokens arrived in one chunk"
        # The tokens that arrived after the first chunk, over the time since it arrived.
        return (tokens - self.first_chunk_tokens) / (self.t_last - self.t_first), None

    def snapshot(self) -> SideSnapshot:
        """The side as the page draws it now: status, tokens, elapsed time, rates, text, bursts (n/a with reasons)."""
        if not self.started and self.t_end is None:
            now = 0.0  # still waiting its turn (sequential A/B) or for the start line
        else:
            now = self.t_end if self.t_end is not None else time.perf_counter() - self.t0
        count = self.tokens if self.has_usage else (self.final_tokens if self.final_tokens is not None else None)
        rate, _ = self._decode_rate(count)
        return SideSnapshot(
            side=self.side,
            text=self.text,
            completion_tokens=count,
            elapsed_s=max(0.0, now),
            ttft_s=self.t_first,
            tokens_per_s=rate,
            bursts=[(t, n if n is not None else 1, txt) for t, n, txt in self.chunks],
            tool_calls=self.tool_calls,
            done=self.done,
            error=self.error,
            # Not sent yet (its turn in a sequential A/B, or the start line): queued, not waiting on a server.
            status="queued" if not self.started and self.status == "waiting" else self.status,
            server_wait=self.server_wait,
        )

    def progress(self) -> StreamProgress:
        """Tokens so far and the status: what the N-user strip shows of each user."""
        count = self.tokens if self.has_usage else self.final_tokens
        return StreamProgress(completion_tokens=count, status=self.status)

    def _gaps_and_sizes(self, na: dict[str, str]) -> tuple[list[float], dict[int, int]]:
        """The inter-token gaps (each chunk's gap spread over its tokens) and the tokens-per-chunk
        histogram, from the chunks' usage counts; their n/a reasons into ``na`` when unknown."""
        if not self.has_usage:
            na["itl_p50_s"] = na["itl_p95_s"] = na["tokens_per_chunk"] = NO_CONTINUOUS_USAGE
            return [], {}
        counted = [(t, n) for t, n, _ in self.chunks if n is not None]
        itl = spread_gaps_s(counted)
        if not itl:
            na["itl_p50_s"] = na["itl_p95_s"] = "fewer than two token-bearing chunks"
        return itl, dict(sorted(Counter(n for _, n in counted).items()))

    def result(self) -> SideResult:
        """The side's final figures (SideResult): tokens from usage, TTFT, decode rate, ITL, acceptance.

        What is unknown is None with its reason in ``na_reasons``.
        """
        na: dict[str, str] = {}
        tokens = self.final_tokens if self.final_tokens is not None else (self.tokens if self.has_usage else None)
        if self.error and not self.n_events:
            failed = "the request failed before any token arrived (see error)"
            return SideResult(
                side=self.side, url=self.url, model=self.model, error=self.error,
                na_reasons={f: failed for f in ("completion_tokens", "ttft_s", "decode_tokens_per_s", "e2e_s",
                                                 "itl_p50_s", "itl_p95_s", "tokens_per_chunk")},
            )
        if tokens is None:
            na["completion_tokens"] = "the server sent no usage"
        rate, why = self._decode_rate(tokens)
        if why:
            na["decode_tokens_per_s"] = why
        if self.t_first is None:
            na["ttft_s"] = "no token arrived"
        e2e = self.t_end if self.done else None
        if e2e is None:
            na["e2e_s"] = "the stream did not finish"
        itl, sizes = self._gaps_and_sizes(na)
        spec = spec_stats_from_request(self.spec_request) if self.spec_request is not None else self.spec_delta
        return SideResult(
            side=self.side,
            url=self.url,
            model=self.model,
            completion_tokens=tokens,
            prompt_tokens=self.prompt_tokens,
            ttft_s=self.t_first,
            decode_tokens_per_s=rate,
            e2e_s=e2e,
            itl_p50_s=percentile(itl, 50),
            itl_p95_s=percentile(itl, 95),
            itl_s=itl,
            chunks=len(self.chunks),
            tokens_per_chunk=sizes,
            finish_reason=self.finish_reason,
            text=self.text,
            tool_calls=self.tool_calls,
            error=self.error,
            complete=self.done and self.error is None,
            spec=spec,
            repetition=repetition(self.text, [(n, txt) for _, n, txt in self.chunks] if self.has_usage else None),
            events=list(self.events),
            na_reasons=na,
        )


def decode_window(result: SideResult) -> tuple[int, float] | None:
    """A finished answer's decode tokens and decode seconds (the tokens after its first chunk, the
    time since that chunk): the two terms of its ``decode_tokens_per_s``, from its events through the
    meter. None when that rate is unknown."""
    if result.decode_tokens_per_s is None or result.error:
        return None
    meter = SideMeter(result.side, result.url, t0=0.0)
    for ev in result.events:
        meter.feed(ev)
    tokens = meter.final_tokens if meter.final_tokens is not None else meter.tokens
    if meter.t_first is None or meter.t_last is None or meter.t_last <= meter.t_first:
        return None
    return tokens - meter.first_chunk_tokens, meter.t_last - meter.t_first


def pooled_decode_rate(results: Sequence[SideResult]) -> tuple[float | None, str | None]:
    """One side's decode tokens/s over several answers (a session's turns): every answer's decode
    tokens over every answer's decode seconds, so a long turn weighs as much as its tokens. (None, why)
    when an answer's rate is unknown: a session figure over some of its turns would be another number."""
    tokens, seconds = 0, 0.0
    for i, r in enumerate(results):
        window = decode_window(r)
        if window is None:
            why = r.error or r.na_reasons.get("decode_tokens_per_s") or "not measured"
            return None, f"turn {i + 1}: {why}"
        tokens, seconds = tokens + window[0], seconds + window[1]
    if not results or seconds <= 0:
        return None, "no turn measured"
    return tokens / seconds, None


# --------------------------------------------------------------------------- tool calls

def same_answer(a: SideResult, b: SideResult) -> bool:
    """Two sides gave the same answer: the same text and the same tool calls (same_tool_calls)."""
    return a.text == b.text and same_tool_calls(a.tool_calls, b.tool_calls)


def same_tool_calls(a: Sequence[ToolCall], b: Sequence[ToolCall]) -> bool:
    """Two answers made the same tool calls: as many, in the same order, each with the same name and
    the same arguments, compared as parsed JSON (so spacing and key order do not count); arguments
    that do not parse are compared as text."""
    return len(a) == len(b) and all(x.name == y.name and _arguments(x) == _arguments(y)
                                    for x, y in zip(a, b, strict=True))


def _arguments(call: ToolCall) -> object:
    """A call's arguments as parsed JSON, or its text when that is not JSON."""
    try:
        return json.loads(call.arguments)
    except ValueError:
        return call.arguments


# --------------------------------------------------------------------------- copy-ness

COPY_NGRAM = 3  # word 3-grams: long enough that "of the" does not count as copying
_WORD = r"\w+|[^\w\s]"


def words(text: str) -> list[str]:
    """Tokenizer-free word tokens: runs of letters/digits/underscore, and each other non-space character.

    Case is kept (the n-gram drafter matches exact tokens) and punctuation counts, so JSON and code
    (``"id": 7,``) are tokens too.
    """
    import re  # here, not at the top: keeps this section one self-contained hunk (re caches the pattern)

    return re.findall(_WORD, text)


def copyness(prompt: str, answer: str, n: int = COPY_NGRAM) -> tuple[float | None, str | None]:
    """Fraction of the answer's word n-grams that also appear in the prompt (0..1), with an n/a reason.

    Counted over the answer's n-gram positions (a repeated n-gram counts each time), against the set
    of the prompt's n-grams. It measures copying from the prompt only: the n-gram drafter also
    matches the answer's own earlier text, which this figure does not count. Deterministic and
    independent of any model's tokenizer.
    """
    a = words(answer)
    if not a:
        return None, "the answer is empty"
    if len(a) < n:
        return None, f"the answer has fewer than {n} words"
    p = words(prompt)
    seen = {tuple(p[i : i + n]) for i in range(len(p) - n + 1)}
    grams = [tuple(a[i : i + n]) for i in range(len(a) - n + 1)]
    return sum(1 for g in grams if g in seen) / len(grams), None


# --------------------------------------------------------------------------- repetition

# An answer "ends in a loop" when its last LOOP_MIN_CHARS or more characters are one span of at most
# LOOP_MAX_UNIT_CHARS repeated at least LOOP_MIN_REPEATS times: a word or a short phrase (SmolLM2-135M
# ends json_reformat with '"book", ' x 19, 153 characters, ~57 tokens) or a whole sentence or line
# of code (asked for a 150-word summary, it ended in one 100-character sentence x 7). Three whole
# repeats is where a person calls it a loop; honest repetition (a JSON array of similar records, a
# table, parallel lines of code) differs in its values, so it has no exact period.
LOOP_MIN_CHARS = 100
LOOP_MIN_REPEATS = 3
LOOP_MAX_UNIT_CHARS = 400
LOOP_SCAN_CHARS = 4000
LOOP_NOTE = "the model repeated itself: n-gram drafts repetition well; this speedup is not typical"


def repetition(text: str, chunks: Sequence[tuple[int | None, str]] | None = None) -> Repetition | None:
    """The loop the answer ends in, or None. The span is the period of the answer's longest
    periodic tail that counts as a loop (the shortest period on a tie), so '"book", "book", "bo' is
    '"book", ' repeated, cut. ``chunks`` (tokens, text) in arrival order, when the server sent usage,
    give the tail's tokens. Tokenizer-free and deterministic: characters only."""
    n = len(text)

    def periodic_tail(unit: int, limit: int) -> int:
        """Characters at the end that repeat with this period (at most ``limit``): the longest
        suffix equal to the text one unit earlier, plus that unit. A shorter suffix of an equal one
        is equal too, so a binary search over slice comparisons finds it."""
        lo, hi = 0, max(0, limit - unit)
        while lo < hi:
            m = (lo + hi + 1) // 2
            if text[n - m:] == text[n - m - unit: n - unit]:
                lo = m
            else:
                hi = m - 1
        return lo + unit

    # Choose the unit over the last LOOP_SCAN_CHARS at most (a 100,000-character 'aaaa…' would
    # otherwise be read 400 times), then measure the whole tail for that unit alone.
    # Two exact shortcuts: a unit whose shortest qualifying tail does not repeat is skipped with one
    # comparison (a longer tail cannot repeat if a shorter one does not), and once a tail spans the
    # whole scan no later unit can be longer.
    scan = min(n, LOOP_SCAN_CHARS)
    best_len, best_unit = 0, 0
    for unit in range(1, min(LOOP_MAX_UNIT_CHARS, n // LOOP_MIN_REPEATS) + 1):
        if best_len >= scan:
            break
        need = max(LOOP_MIN_CHARS, LOOP_MIN_REPEATS * unit) - unit
        if need > scan - unit or text[n - need:] != text[n - need - unit: n - unit]:
            continue
        length = periodic_tail(unit, scan)
        if length > best_len and length >= max(LOOP_MIN_CHARS, LOOP_MIN_REPEATS * unit):
            best_len, best_unit = length, unit
    if not best_unit:
        return None
    best_len = periodic_tail(best_unit, n)
    tail_tokens = None
    if chunks:
        covered, tokens = 0, 0
        for count, piece in reversed(chunks):
            if covered >= best_len:
                break
            covered += len(piece)
            tokens += count or 0
        tail_tokens = tokens
    return Repetition(unit=text[n - best_len: n - best_len + best_unit], tail_chars=best_len,
                      repeats=best_len / best_unit, share=best_len / n, tail_tokens=tail_tokens)
