"""A load sweep as the page shows it, computing nothing: the crossover's line (escaped HTML),
a table row per step (speedup, throughput ratio, both sides' speeds and pressure: queue, KV-cache
peak, preemptions; "n/a" with its reason in the step's note) and the sweep's status words.
The Race tab's load panel (demo/ui/load_panel.py, through demo/live/load_stream.py) and the
booth's load turn draw these.
"""

from __future__ import annotations

from demo.fmt import esc, fmt_number, fmt_percent, fmt_speedup, or_na
from demo.load.engine import SIDES, LoadResult, LoadSide, LoadStep
from demo.sweep.crossover import GAIN_NONE, GAIN_WORTH
from demo.sweep.tables import schedule_html

STEP_HEADERS = ["users", "status", "speedup (per-user decode)", "throughput ratio (total)",
                "per-user tok/s (base / spec)", "total tok/s (base / spec)", "queue peak (base / spec)",
                "KV-cache peak (base / spec)", "preemptions (base / spec)", "notes"]
# The figures shown per side, by LoadSide field: their n/a reasons go into the notes.
_SHOWN = {"per_user_decode_tokens_per_s": "per-user tok/s", "output_tokens_per_s": "total tok/s",
          "num_requests_waiting_peak": "queue", "kv_cache_usage_peak_perc": "KV-cache peak",
          "num_preemptions": "preemptions"}
THRESHOLDS_NOTE = (f"Thresholds: the verdict's own, GAIN_WORTH {fmt_speedup(GAIN_WORTH)} (at or above: pays) and "
                   f"GAIN_NONE {fmt_speedup(GAIN_NONE)} (below: loses), on the per-user decode speedup; read "
                   "off the counts measured, never extrapolated.")


def _pair(a: str | None, b: str | None) -> str:
    return f"{or_na(a)} / {or_na(b)}"


def _notes(step: LoadStep) -> str:
    notes = [*step.errors]
    notes += [f"{name.replace('_', ' ')} n/a: {why}" for name, why in step.na_reasons.items()
              if name in ("speedup", "throughput_ratio")]
    sides: list[LoadSide] = [getattr(step, side) for side in SIDES]
    for field, label in _SHOWN.items():
        why = {s.side: s.na_reasons[field] for s in sides
               if getattr(s, field) is None and field in s.na_reasons and s.na_reasons[field] not in step.errors}
        if len(why) == len(sides) and len(set(why.values())) == 1:  # the same reason on both: said once
            notes.append(f"{label} n/a (both sides): {next(iter(why.values()))}")
        else:
            notes += [f"{side} {label} n/a: {reason}" for side, reason in why.items()]
    notes += [f"{s.side} client-limited: {s.client_note}" for s in sides if s.client_limited and s.client_note]
    seen: list[str] = []
    for n in notes:  # the same reason for several figures is said once
        if n not in seen:
            seen.append(n)
    return "; ".join(seen)


def step_row(step: LoadStep) -> list[str]:
    """One step as a table row of display strings: users, status, speedups, the pairs baseline / speculative, notes."""
    b, s = step.baseline, step.speculative
    return [str(step.users), step.status, or_na(fmt_speedup(step.speedup)), or_na(fmt_speedup(step.throughput_ratio)),
            _pair(fmt_number(b.per_user_decode_tokens_per_s, 1), fmt_number(s.per_user_decode_tokens_per_s, 1)),
            _pair(fmt_number(b.output_tokens_per_s, 1), fmt_number(s.output_tokens_per_s, 1)),
            _pair(fmt_number(b.num_requests_waiting_peak, 0), fmt_number(s.num_requests_waiting_peak, 0)),
            _pair(fmt_percent(b.kv_cache_usage_peak_perc), fmt_percent(s.kv_cache_usage_peak_perc)),
            _pair(fmt_number(b.num_preemptions, 0), fmt_number(s.num_preemptions, 0)),
            _notes(step)]


def step_rows(result: LoadResult) -> list[list[str]]:
    """Every step as a table row (``step_row``)."""
    return [step_row(s) for s in result.steps]


def crossover_html(result: LoadResult | None) -> str:
    """The crossover's sentence (demo/sweep/crossover.py, the evaluator's too) and the thresholds it uses."""
    if result is None or not result.steps:
        text = "Press Run sweep: the crossover is read off the steps as they are measured."
        attrs = 'data-state="idle"'
    else:
        c = result.crossover
        text = (f"So far: {c.text}." if _running(result) else c.text[0].upper() + c.text[1:] + ".")
        attrs = (f'data-state="{"final" if not _running(result) else "so-far"}" '
                 f'data-pays-up-to="{c.pays_up_to_users or ""}" data-loses-from="{c.loses_from_users or ""}" '
                 f'data-measured="{",".join(map(str, c.measured_users))}"')
    schedule = schedule_html(result.recommendation) if result is not None and result.steps else ""
    return (f'<div class="sd-load-crossover" {attrs}><div class="sd-load-sentence">{esc(text)}</div>'
            f'<div class="sd-load-thresholds">{esc(THRESHOLDS_NOTE)}</div>{schedule}</div>')


def _running(result: LoadResult) -> bool:
    return len(result.steps) < len(result.spec.users) and not result.interrupted


def order_words(result: LoadResult) -> str:
    """The sweep's order in words, for the status line."""
    return ("sequential A/B (each server alone)" if result.spec.order == "sequential"
            else "simultaneous (the servers compete)")


def step_label(result: LoadResult, users: int) -> str:
    """'step 2 of 5: 2 users' for the step about to run or running."""
    n = result.spec.users.index(users) + 1 if users in result.spec.users else len(result.steps) + 1
    return f"step {n} of {len(result.spec.users)}: {users} user" + ("" if users == 1 else "s")


def finished_text(result: LoadResult) -> str:
    """The status line for a finished sweep: how many steps, the order, and how many failed."""
    failed = sum(s.status == "failed" for s in result.steps)
    out = f"{len(result.steps)} step(s), {order_words(result)}"
    return out + (f"; {failed} failed (see the table)" if failed else "")
