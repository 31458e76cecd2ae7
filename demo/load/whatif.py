"""``python -m demo whatif``: the speedup that a drafter reaching a given acceptance length would buy
on *these servers at this load*, measured with vLLM's synthetic rejection sampling.

vLLM >= 0.32 can force a mean acceptance length L on a speculative server (speculative_config
``"rejection_sample_method": "synthetic"``, ``"synthetic_acceptance_length": L``): drafts are kept
by a coin at rates that give L tokens per verification step, whatever the target would have said.
One such server per length (``--length-url L=URL``), each raced against the same baseline, answers
"is a better drafter worth training or buying?": per length, the speedup (decode), the throughput
ratio, the measured tokens per step and the efficiency (speedup / tokens per step), and one line
saying what each length would buy. The command's flags, table and JSON are demo/cli/whatif.py.

Each length is one step of the load engine (demo/load/engine.py: ``run_load``, one evaluator cell of
``--users`` users) with that server as its one arm: no measuring loop of its own. What it does not
measure: the text of a what-if server is not the target's (accepted tokens are the drafter's, kept
by a coin), and the drafter's cost stays the real one; with n-gram the forced acceptance applies
only on steps where n-gram finds a draft. It measures the verifier's side (docs/whatif.md).
"""

from __future__ import annotations

import math
from typing import Any

from pydantic import BaseModel, Field

from demo.errors import BadInput
from demo.fmt import fmt_speedup
from demo.limits import parse_numbers
from demo.load.engine import LoadSpec, LoadStep, request_from_race, run_load
from demo.results import RaceRequest
from demo.settings import Settings
from demo.sweep.models import ArmSpec, CellStatus

DEFAULT_LENGTHS = "1.5,2,3,4,5"
# How far the measured tokens per step may be from the forced length before the output asks whether
# the server really runs with that length (synthetic acceptance is a coin per position: a request's
# mean wanders around L, and max_tokens cuts the last step).
LENGTH_TOLERANCE = 0.1

NOT_THE_TARGET = ("what-if: the acceptance is forced (vLLM's synthetic rejection sampling), so a what-if "
                  "server's answers are not the target model's text: never show them as its output")
VERIFIER_SIDE = ("with n-gram, the forced acceptance applies only on steps where n-gram finds a draft, and the "
                 "drafter's cost stays the real one (n-gram's, or the EAGLE head's): the what-if measures the "
                 "verifier's side")


class WhatifPoint(BaseModel):
    """One forced acceptance length, measured against the baseline (units in the names)."""

    length: float  # the forced mean acceptance length (synthetic_acceptance_length)
    url: str
    status: CellStatus
    speedup: float | None = None  # per-user decode tokens/s over the baseline's
    # Aggregate output tokens/s, the what-if server over the baseline.
    throughput_ratio: float | None = None
    tokens_per_step: float | None = None  # measured mean acceptance length
    acceptance_rate: float | None = None  # accepted / drafted tokens
    efficiency: float | None = None  # speedup / tokens per step (1.0: a step costs no more than a plain one)
    baseline_decode_tokens_per_s: float | None = None  # per user, median
    whatif_decode_tokens_per_s: float | None = None
    errors: list[str] = Field(default_factory=list)
    na_reasons: dict[str, str] = Field(default_factory=dict)
    note: str | None = None  # the measured tokens per step is far from the forced length


class WhatifResult(BaseModel):
    """A what-if run: its settings, a point per acceptance length, and the one-line answer.

    ``interrupted`` marks a run stopped before its last length; ``notes`` are the caveats printed with it."""

    users: int
    order: str
    workload: str
    max_tokens: int
    temperature: float
    repeats: int
    warmup: int
    baseline_url: str
    points: list[WhatifPoint] = Field(default_factory=list)
    answer: str = ""  # "a drafter reaching acceptance length 3 would buy 2.1× here; 5 would buy 2.9×"
    notes: list[str] = Field(default_factory=lambda: [NOT_THE_TARGET, VERIFIER_SIDE])
    interrupted: bool = False


# --------------------------------------------------------------------------- the lengths


def check_length(value: float, what: str) -> float:
    """An acceptance length: at least 1 (1 = every draft rejected); BadInput about ``what`` otherwise."""
    if not (value >= 1 and math.isfinite(value)):  # NaN fails the first test
        raise BadInput.about(what, "takes acceptance lengths of at least 1 (1: no draft token kept; at most k+1, "
                                   f"which the server checks), got {value:g}")
    return value


def parse_lengths(text: str) -> list[float]:
    """'1.5,2,3' -> [1.5, 2.0, 3.0]: ascending, distinct, each at least 1; BadInput about ``lengths``."""
    values = [check_length(v, "lengths") for v in parse_numbers(text, float, "lengths")]
    return sorted(set(values))


def arm_name(length: float) -> str:
    """The length as an arm's name (a slug): 1.5 -> 'l1-5', 3 -> 'l3'."""
    return "l" + f"{length:g}".replace(".", "-")


# --------------------------------------------------------------------------- measuring


def length_spec(spec: LoadSpec, length: float, url: str) -> LoadSpec:
    """The load step of one length: ``spec`` with that length's server as its one arm."""
    return spec.model_copy(update={"speculative_url": url, "arms": [
        ArmSpec(name=arm_name(length), url=url, label=f"what-if L={length:g}", method="synthetic")]})


def point_from_step(length: float, url: str, step: LoadStep) -> WhatifPoint:
    """A length's figures, as the evaluator's cell of its step has them (computed there, not here)."""
    cell = step.cell
    point = WhatifPoint(
        length=length, url=url, status=step.status,
        speedup=cell.speedup.median if cell.speedup else None,
        throughput_ratio=cell.throughput_ratio.median if cell.throughput_ratio else None,
        tokens_per_step=cell.mean_acceptance_length, acceptance_rate=cell.acceptance_rate,
        efficiency=cell.efficiency, baseline_decode_tokens_per_s=step.baseline.per_user_decode_tokens_per_s,
        whatif_decode_tokens_per_s=step.speculative.per_user_decode_tokens_per_s, errors=list(step.errors))
    for field, key in (("speedup", "speedup"), ("throughput_ratio", "throughput_ratio"),
                       ("tokens_per_step", "mean_acceptance_length"), ("acceptance_rate", "acceptance_rate"),
                       ("efficiency", "efficiency")):
        if getattr(point, field) is None:
            point.na_reasons[field] = cell.reason(key) or (step.errors[0] if step.errors else "not measured")
    m = point.tokens_per_step
    if m is not None and abs(m - length) > LENGTH_TOLERANCE * length:
        point.note = (f"measured {m:.2f} tokens per step, not the {length:g} forced: is {url} started with "
                      f'"rejection_sample_method": "synthetic" and "synthetic_acceptance_length": {length:g}?')
    return point


def answer_line(points: list[WhatifPoint], users: int) -> str:
    """What each length would buy, in one line (the speedup: the race's headline figure)."""
    known = [p for p in points if p.speedup is not None]
    if not known:
        why = next((p.na_reasons.get("speedup") for p in points), None) or "nothing measured"
        return f"no length produced a speedup ({why})"
    parts = []
    for i, p in enumerate(points):
        head = f"a drafter reaching acceptance length {p.length:g}" if i == 0 else f"{p.length:g}"
        if p.speedup is None:
            bought = "n/a (" + ("its server failed: see the table" if p.errors
                                else p.na_reasons.get("speedup", "not measured")) + ")"
        else:
            bought = f"would buy {fmt_speedup(p.speedup)}"
            if p.note and p.tokens_per_step is not None:
                bought += f" (but {p.tokens_per_step:.2f} tokens per step were measured, not {p.length:g})"
        parts.append(f"{head} {bought}" + (" here" if i == 0 else ""))
    many = f"{users} user" + ("" if users == 1 else "s")
    return "; ".join(parts) + f" (speedup over the baseline, {many})"


async def run_whatif(spec: LoadSpec, req: RaceRequest, servers: dict[float, str], settings: Settings,
                     result: WhatifResult, on_progress: Any = None) -> WhatifResult:
    """Every length in order, each a load step of its server against the baseline (run_load),
    appended to ``result`` as it ends; a failing server fails only its own length."""
    request = request_from_race(req)
    for length, url in servers.items():
        if on_progress is not None:
            on_progress(f"length {length:g}: {url}")
        load = await run_load(length_spec(spec, length, url), request, settings,
                              on_progress=on_progress)
        result.points.append(point_from_step(length, url, load.steps[0]))
        result.answer = answer_line(result.points, result.users)
    return result
