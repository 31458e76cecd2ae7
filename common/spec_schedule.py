"""vLLM's dynamic speculation schedule (``num_speculative_tokens_per_batch_size`` in
``--speculative-config``, vLLM >= 0.32): ``[[lo, hi, k], ...]``, each an inclusive range of batch
sizes (running requests) and the k drafted there (0: drafting off).

``check_schedule`` refuses what vLLM's own check refuses (vllm/v1/spec_decode/dynamic/utils.py,
``validate_and_normalize_dynamic_sd_schedule``, which the scheduler runs when the engine starts),
one line each, before anything is started: ranges that overlap, a k below 0, a first range that does
not start at 1, a range whose start is above its end. The recommendation (demo/sweep/schedule.py)
and the adaptive arm's schedule setting (servers/arms.py) both go through it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

Schedule = list[tuple[int, int, int]]
MAX_RANGES = 64  # a schedule longer than this is not one a person wrote or a sweep measured


def _entry(entry: object) -> tuple[int, int, int]:
    """One ``[lo, hi, k]`` as whole numbers; ValueError (one line) otherwise."""
    if not isinstance(entry, (list, tuple)) or len(entry) != 3:
        raise ValueError("each schedule entry must be [lo, hi, k]: three whole numbers")
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in entry):
        raise ValueError("each schedule entry must be [lo, hi, k]: three whole numbers")
    lo, hi, k = entry
    if lo < 1 or hi < 1:
        raise ValueError(f"batch-size range [{lo}, {hi}] must be positive")
    if lo > hi:
        raise ValueError(f"batch-size range [{lo}, {hi}] starts above its end")
    if k < 0:
        raise ValueError(f"k must be >= 0 (0 turns drafting off), got {k} for [{lo}, {hi}]")
    return lo, hi, k


def check_schedule(entries: Sequence[object]) -> Schedule:
    """The schedule sorted by its start, checked as vLLM checks it; ValueError with a one-line reason."""
    if not isinstance(entries, (list, tuple)) or not entries:
        raise ValueError("the schedule must be a non-empty list of [lo, hi, k]")
    if len(entries) > MAX_RANGES:
        raise ValueError(f"the schedule has more than {MAX_RANGES} ranges")
    ranges = sorted((_entry(e) for e in entries), key=lambda r: r[0])
    if ranges[0][0] != 1:
        raise ValueError(f"the first range must start at 1 (every batch size needs a k), not at {ranges[0][0]}")
    for (_, hi, _), (lo, hi2, _) in zip(ranges, ranges[1:], strict=False):
        if lo <= hi:
            raise ValueError(f"ranges overlap: [.., {hi}] and [{lo}, {hi2}]")
    return ranges


def parse_schedule(text: str) -> Schedule:
    """A schedule from its JSON text (``[[1, 2, 4], [3, 256, 0]]``); ValueError with a one-line reason
    that never quotes the text."""
    if len(text) > 10_000:
        raise ValueError("the schedule's JSON is too long")
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"the schedule is not valid JSON ({e.msg} at character {e.pos})") from None
    return check_schedule(value)


def max_k(schedule: Schedule) -> int:
    """The largest k of the schedule: vLLM clamps every k to num_speculative_tokens, so that must be at least this."""
    return max(k for _, _, k in schedule)
