"""The customer's workload by segment, and the routing decision it leads to.

Pure functions on the per-request outcomes the sweep measured (``CellResult.requests``, the
first arm against the baseline, from the workload's cell at its lowest concurrency, as the
profile): the requests are grouped by each dimension below, and each segment gets its requests,
the median and range of their decode speedups (speculative decode tokens/s over the baseline's,
per request: ``RequestOutcome.speedup``), the median acceptance and tokens per step, and a
verdict with the evaluator's own thresholds (``GAIN_WORTH``, ``GAIN_NONE``, ``ACCEPT_LOW`` and
the noise bound of demo/sweep/verdict.py). A segment with fewer than ``MIN_SEGMENT_REQUESTS``
measured requests is "too few" (verdict n/a). One sentence then says which segments to send to
the speculative server and which to keep on the baseline. A workload with sessions also gets how its
turns were replayed (``session_replay``: the history mode, each other arm's per-turn segments, and
per side the turns that followed a call other than the logged one), for the per-turn table.

Dimensions and buckets (stated in the report through ``buckets_text``):
- tag: the file's own label per request, when any request has one;
- session and turn: a file with sessions (a session's id; its turn index, from 1: does speculation
  gain as the history grows?);
- answer: a tool call (the server's parser ended the answer as one) or prose, when any answer was a
  tool call;
- output format: JSON (``response_format`` json_object / json_schema) or free text;
- temperature: greedy (T=0) or sampled (T>0);
- prompt tokens and output tokens (the baseline's usage): ``PROMPT_TOKEN_EDGES``, ``OUTPUT_TOKEN_EDGES``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from demo.fmt import fmt_percent, fmt_speedup
from demo.measure import median
from demo.sweep.models import CellResult, Segment, SegmentDimension, SegmentVerdict, SessionReplay, SweepResult
from demo.sweep.profile import RequestOutcome
from demo.sweep.verdict import ACCEPT_LOW, GAIN_NONE, GAIN_WORTH, bounded_gain

MIN_SEGMENT_REQUESTS = 3  # fewer measured requests than this: "too few", no verdict
PROMPT_TOKEN_EDGES = (256, 1024)  # buckets: < 256, 256-1023, >= 1024
OUTPUT_TOKEN_EDGES = (128, 512)  # buckets: < 128, 128-511, >= 512
MAX_TOO_FEW_NAMED = 4  # too-few segments named in the routing sentence; the rest counted
MAX_TAG_SEGMENTS = 12  # the most frequent tags; the rest together as OTHER_TAGS
NO_TAG = "(no tag)"
OTHER_TAGS = "(other tags)"
GREEDY, SAMPLED = "greedy (T=0)", "sampled (T>0)"
JSON_OUTPUT, FREE_TEXT = "JSON", "free text"
# In the report's table and in this order in the routing sentence.
TOOL_CALL, PROSE = "tool call", "prose"
DIMENSION_NAMES: dict[SegmentDimension, str] = {
    "tag": "tag", "session": "session", "turn": "turn", "answer": "answer", "output_format": "output",
    "temperature": "temperature",
    "prompt_tokens": "prompt tokens", "output_tokens": "output tokens"}


# --------------------------------------------------------------------------- buckets


def bucket_labels(edges: Sequence[int]) -> list[str]:
    """The buckets of ascending ``edges``, as stated: (256, 1024) -> ["< 256", "256-1023", "≥ 1024"]."""
    inner = [f"{lo}-{hi - 1}" for lo, hi in zip(edges, edges[1:], strict=False)]
    return [f"< {edges[0]}", *inner, f"≥ {edges[-1]}"]


def bucket_of(tokens: int, edges: Sequence[int]) -> str:
    """The bucket (one of bucket_labels(edges)) that holds ``tokens``."""
    labels = bucket_labels(edges)
    below = sum(tokens >= e for e in edges)
    return labels[below]


def buckets_text() -> str:
    """The buckets in one line, for the report: what each segment of each dimension holds."""
    return (f"prompt tokens: {', '.join(bucket_labels(PROMPT_TOKEN_EDGES))}; output tokens: "
            f"{', '.join(bucket_labels(OUTPUT_TOKEN_EDGES))} (both from the baseline's usage); temperature: "
            f"{GREEDY} or {SAMPLED}; output: {JSON_OUTPUT} (response_format json_object or json_schema) or "
            f"{FREE_TEXT}; tag: the file's own label, when it gives one; session, turn (its index, from 1) and "
            f"answer ({TOOL_CALL} or {PROSE}): in a file with sessions or tool calls. Verdict per segment on its "
            f"median decode speedup: enable at ≥ {fmt_speedup(GAIN_WORTH)}, don't below {fmt_speedup(GAIN_NONE)}, "
            f"depends between; fewer than {MIN_SEGMENT_REQUESTS} measured requests: too few.")


def _tag_labels(outcomes: Sequence[RequestOutcome]) -> dict[str, str]:
    """Each tag -> its segment's label: itself for the MAX_TAG_SEGMENTS - 1 most frequent (all of
    them when there are no more than MAX_TAG_SEGMENTS), OTHER_TAGS for the rest."""
    counts: dict[str, int] = {}
    for o in outcomes:
        counts[o.tag or NO_TAG] = counts.get(o.tag or NO_TAG, 0) + 1
    ranked = sorted(counts, key=lambda t: (-counts[t], t))
    kept = ranked if len(ranked) <= MAX_TAG_SEGMENTS else ranked[:MAX_TAG_SEGMENTS - 1]
    return {t: t if t in kept else OTHER_TAGS for t in ranked}


def _labelers(outcomes: Sequence[RequestOutcome]
              ) -> list[tuple[SegmentDimension, Callable[[RequestOutcome], str | None], list[str] | None]]:
    """Per dimension: the label of a request (None: unknown, left out) and the labels' order (None: by size)."""
    dims: list[tuple[SegmentDimension, Callable[[RequestOutcome], str | None], list[str] | None]] = []
    if any(o.tag for o in outcomes):
        tags = _tag_labels(outcomes)
        dims.append(("tag", lambda o: tags[o.tag or NO_TAG], None))
    if any(o.turn for o in outcomes):
        sessions = sorted({o.session for o in outcomes if o.session})
        if len(sessions) > 1:
            dims.append(("session", lambda o: o.session, sessions[:MAX_TAG_SEGMENTS]))
        turns = sorted({o.turn for o in outcomes if o.turn})
        dims.append(("turn", lambda o: None if o.turn is None else f"turn {o.turn}", [f"turn {t}" for t in turns]))
    if any(o.answer_kind == "tool_call" for o in outcomes):
        dims.append(("answer", lambda o: None if o.answer_kind is None else TOOL_CALL if o.answer_kind == "tool_call"
                     else PROSE, [TOOL_CALL, PROSE]))
    dims += [
        ("output_format", lambda o: None if o.structured is None else JSON_OUTPUT if o.structured else FREE_TEXT,
         [JSON_OUTPUT, FREE_TEXT]),
        ("temperature", lambda o: None if o.temperature is None else GREEDY if o.temperature == 0 else SAMPLED,
         [GREEDY, SAMPLED]),
        ("prompt_tokens", lambda o: None if o.prompt_tokens is None else bucket_of(o.prompt_tokens, PROMPT_TOKEN_EDGES),
         bucket_labels(PROMPT_TOKEN_EDGES)),
        ("output_tokens", lambda o: None if o.output_tokens is None else bucket_of(o.output_tokens, OUTPUT_TOKEN_EDGES),
         bucket_labels(OUTPUT_TOKEN_EDGES)),
    ]
    return dims


def group_outcomes(outcomes: Sequence[RequestOutcome]) -> list[tuple[SegmentDimension, str, list[RequestOutcome]]]:
    """(dimension, label, its requests) for every non-empty segment, dimensions in DIMENSION_NAMES'
    order, buckets in their stated order (tags: largest first). A request whose figure for a
    dimension is unknown (e.g. no usage) is in no segment of that dimension."""
    out = []
    for dim, label_of, order in _labelers(outcomes):
        groups: dict[str, list[RequestOutcome]] = {}
        for o in outcomes:
            if (label := label_of(o)) is not None:
                groups.setdefault(label, []).append(o)
        labels = order or sorted(groups, key=lambda t: (t == OTHER_TAGS, -len(groups[t]), t))
        out += [(dim, label, groups[label]) for label in labels if label in groups]
    return out


# --------------------------------------------------------------------------- one segment


def segment_verdict(speedup: float | None, tokens_per_step: float | None, acceptance_rate: float | None,
                    measured: int) -> tuple[SegmentVerdict, str]:
    """A segment's verdict and its one-line reason, with the evaluator's thresholds; n/a when too few."""
    if speedup is None or measured < MIN_SEGMENT_REQUESTS:
        return "n/a", f"too few: {measured} request(s) with a speedup, {MIN_SEGMENT_REQUESTS} needed"
    gain = bounded_gain(speedup, tokens_per_step)
    said = f"decode {fmt_speedup(speedup)}"
    if gain != speedup:
        said += f", more than the {tokens_per_step:.2f} tokens per step: counted as {fmt_speedup(gain)}"
    if gain >= GAIN_WORTH:
        return "enable", f"{said}: it pays (≥ {fmt_speedup(GAIN_WORTH)})"
    if gain < GAIN_NONE:
        rejected = (f"; drafts mostly rejected (acceptance {fmt_percent(acceptance_rate)})"
                    if acceptance_rate is not None and acceptance_rate < ACCEPT_LOW else "")
        return "don't", f"{said}: no gain (< {fmt_speedup(GAIN_NONE)}){rejected}"
    return "depends", f"{said}: a small gain ({fmt_speedup(GAIN_NONE)} to {fmt_speedup(GAIN_WORTH)})"


def build_segment(dimension: SegmentDimension, label: str, outcomes: Sequence[RequestOutcome],
                  concurrency: int) -> Segment:
    """One segment from its requests' outcomes: medians, the speedup's range, the verdict."""
    speedups = [o.speedup for o in outcomes if o.speedup is not None]
    seg = Segment(dimension=dimension, label=label, concurrency=concurrency, requests=len(outcomes),
                  measured=len(speedups), speedup=median(speedups),
                  speedup_min=min(speedups) if speedups else None, speedup_max=max(speedups) if speedups else None,
                  acceptance_rate=median([o.acceptance_rate for o in outcomes]),
                  tokens_per_step=median([o.tokens_per_step for o in outcomes]))
    for field in ("speedup", "acceptance_rate", "tokens_per_step"):
        if getattr(seg, field) is None:
            seg.na_reasons[field] = next((o.na_reasons[field] for o in outcomes if field in o.na_reasons),
                                         "not measured")
    seg.verdict, seg.reason = segment_verdict(seg.speedup, seg.tokens_per_step, seg.acceptance_rate, seg.measured)
    return seg


def segments_of(outcomes: Sequence[RequestOutcome], concurrency: int) -> list[Segment]:
    """Every non-empty segment of one cell's request outcomes (group_outcomes' order)."""
    return [build_segment(dim, label, group, concurrency) for dim, label, group in group_outcomes(outcomes)]


def workload_segments(result: SweepResult) -> list[Segment]:
    """The customer's workload file by segment, from its cell at the lowest measured concurrency
    (the profile's); empty without a workload file."""
    lowest = _workload_cell(result)
    return [] if lowest is None else segments_of(lowest.requests, lowest.settings.concurrency)


# --------------------------------------------------------------------------- the routing sentence


def segment_phrase(seg: Segment) -> str:
    """The segment as the routing sentence names it: 'tag "code"', 'JSON output', 'prompts of < 256 tokens'."""
    if seg.dimension == "tag":
        return {NO_TAG: "untagged requests", OTHER_TAGS: "the other tags"}.get(seg.label, f'tag "{seg.label}"')
    if seg.dimension == "output_format":
        return "JSON output" if seg.label == JSON_OUTPUT else "free-text output"
    if seg.dimension == "temperature":
        return f"{seg.label} requests"
    if seg.dimension == "session":
        return f'session "{seg.label}"'
    if seg.dimension == "turn":
        return f"{seg.label} of the sessions"
    if seg.dimension == "answer":
        return "tool-call answers" if seg.label == TOOL_CALL else "prose answers"
    noun = "prompts" if seg.dimension == "prompt_tokens" else "answers"
    return f"{noun} of {seg.label} tokens"


def _listed(segments: Sequence[Segment]) -> str:
    """'A', 'A and B', 'A, B and C'."""
    names = [segment_phrase(s) for s in segments]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def _whole_traffic(verdicts: set[SegmentVerdict]) -> str:
    """The sentence when no dimension splits the traffic into segments of different verdicts."""
    if verdicts == {"enable"}:
        return (f"Send all of this traffic to the speculative server: every segment's speedup is at least "
                f"{fmt_speedup(GAIN_WORTH)}.")
    if verdicts == {"don't"}:
        return f"Keep all of this traffic on the baseline: no segment's speedup reaches {fmt_speedup(GAIN_NONE)}."
    if verdicts == {"depends"}:
        return (f"No segment gains enough to route on (speedup between {fmt_speedup(GAIN_NONE)} and "
                f"{fmt_speedup(GAIN_WORTH)}): keep it on the baseline, or measure more of it.")
    return "No dimension splits this traffic into segments that gain and segments that do not: see the table."


def routing_sentence(segments: Sequence[Segment]) -> str:
    """Which segments to send to the speculative server and which to keep on the baseline, from the
    segment verdicts. Only dimensions whose segments got different verdicts are named (a dimension
    where every segment agrees routes nothing); too-few segments are listed at the end."""
    decided = [s for s in segments if s.verdict != "n/a"]
    too_few = [s for s in segments if s.verdict == "n/a"]
    if not decided:
        return (f"No routing decision: no segment has {MIN_SEGMENT_REQUESTS} requests with a measured "
                "decode speedup.")
    split = {d for d in DIMENSION_NAMES if len({s.verdict for s in decided if s.dimension == d}) > 1}
    named = [s for s in decided if s.dimension in split]
    send = [s for s in named if s.verdict == "enable"]
    keep = [s for s in named if s.verdict == "don't"]
    small = [s for s in named if s.verdict == "depends"]
    parts = []
    if send:
        parts.append(f"send {_listed(send)} to the speculative server")
    if keep:
        parts.append(f"keep {_listed(keep)} on the baseline")
    if small:
        parts.append(f"{_listed(small)} gain{'s' if len(small) == 1 else ''} too little to route "
                     f"(speedup {fmt_speedup(GAIN_NONE)} to {fmt_speedup(GAIN_WORTH)})")
    sentence = (parts[0][0].upper() + "; ".join(parts)[1:] + ".") if parts else _whole_traffic(
        {s.verdict for s in decided})
    if too_few:
        more = len(too_few) - MAX_TOO_FEW_NAMED
        sentence += (f" Too few requests to tell: {_listed(too_few[:MAX_TOO_FEW_NAMED])}"
                     + (f" and {more} more segment(s)." if more > 0 else "."))
    return sentence


HOW_HISTORY = {
    "own": ("each side carried its own answer (its text and tool calls) into its next turn, followed by the "
            "turn's logged tool results (their ids rewritten to that side's calls), as an agent would"),
    "logged": ("each turn's history as logged in the file, the same on both sides: the answers the log "
               "recorded, not the servers' own"),
}


def _workload_cell(result: SweepResult) -> CellResult | None:
    """The workload file's cell at the lowest measured concurrency (the profile's); None without one."""
    cells = [c for c in result.cells if c.settings.kind == "workload"]
    measured = [c for c in cells if c.status != "interrupted"] or cells
    return min(measured, key=lambda c: c.settings.concurrency) if measured else None


def differed_sentence(after: dict[str, int], other: dict[str, int]) -> str | None:
    """'n of m turns followed a call that differed from the logged one' per side (said once when the
    sides agree); None when no turn followed a logged call."""
    if not any(after.values()):
        return None
    counts = {side: (other.get(side, 0), m) for side, m in after.items()}
    if len(set(counts.values())) == 1:
        n, m = next(iter(counts.values()))
        return f"{n} of {m} turn{'' if m == 1 else 's'} followed a call that differed from the logged one (each side)"
    parts = [f"{side}: {n} of {m} turn{'' if m == 1 else 's'}" for side, (n, m) in counts.items()]
    return "; ".join(parts) + " followed a call that differed from the logged one"


def session_replay(result: SweepResult) -> SessionReplay | None:
    """How the workload's sessions were replayed, and (own history) per side how many of its measured
    turns followed a logged call and of them how many followed a different own call; None without
    sessions."""
    w = result.spec.workload
    cell = _workload_cell(result)
    if w is None or w.history is None or cell is None:
        return None
    after: dict[str, int] = {}
    other: dict[str, int] = {}
    first = next(iter(cell.arms), "speculative") if len(cell.arms) > 1 else "speculative"
    # the first arm's outcomes hold the baseline's and its own; each other arm's, its own ("speculative")
    for outcomes, sides in ((cell.requests, {"baseline": "baseline", "speculative": first}),
                            *((o, {"speculative": a}) for a, o in cell.arm_requests.items())):
        for o in outcomes:
            for side, differed in o.other_call.items():
                if (who := sides.get(side)) is not None:
                    after[who] = after.get(who, 0) + 1
                    other[who] = other.get(who, 0) + differed
    arm_turns = {a: [build_segment(dim, label, group, cell.settings.concurrency)
                     for dim, label, group in group_outcomes(o) if dim == "turn"]
                 for a, o in cell.arm_requests.items()}
    return SessionReplay(history=w.history, how=HOW_HISTORY[w.history], after_logged_call=after, other_call=other,
                         differed=differed_sentence(after, other), arm_turns=arm_turns,
                         arms=list(cell.arms) if len(cell.arms) > 1 else [])


def workload_routing(result: SweepResult) -> tuple[list[Segment], str | None]:
    """The customer's workload by segment and its routing sentence; ([], None) without a workload file."""
    segments = workload_segments(result)
    return segments, routing_sentence(segments) if segments else None
