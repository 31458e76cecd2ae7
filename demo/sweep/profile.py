"""A workload's profile and its per-request ranking: which of the customer's prompts gain.

Pure functions on per-request figures the sweep measured (``RequestOutcome``, one per request of
the workload): the distribution of prompt and output tokens (from the server's usage), the
prefill share, copy-ness (demo.measure.copyness) next to the measured acceptance, and the 5
requests that gain most and the 5 that gain least. With ``redact`` no prompt text is kept; ids,
token counts and the prompt's sha256 stay.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, Field

from demo.measure import copyness, efficiency, median, percentile
from demo.race import compare
from demo.results import SIDES, SideResult
from demo.workload import LoggedAnswer, WorkloadRequest

AnswerKind = Literal["tool_call", "prose"]
RANKED = 5  # requests listed as gaining most, and as gaining least
PREVIEW_CHARS = 120


class RequestOutcome(BaseModel):
    """One workload request, both sides measured (speedup and acceptance per request)."""

    id: str
    prompt_sha256: str
    prompt_text: str | None = None  # None when redacted
    # What the file asked for, for the results by segment (demo/sweep/segments.py); None in a file without it.
    temperature: float | None = None
    structured: bool | None = None  # JSON output asked (response_format json_object / json_schema)
    tag: str | None = None  # the file's segment label (not redacted: a label, not the prompt)
    session: str | None = None  # the session it is a turn of (the file's id: a label, not the prompt)
    turn: int | None = None  # its turn in the session, from 1
    # What the baseline answered: a tool call (finish_reason "tool_calls") or prose; None: not finished.
    answer_kind: AnswerKind | None = None
    # A session turn after a call the log recorded, per side ("baseline", "speculative": the first arm):
    # True when that side's own call, carried into this turn, differed from the logged one (the logged
    # result followed it all the same). Empty: the turn followed no logged call.
    other_call: dict[str, bool] = Field(default_factory=dict)
    logged: LoggedAnswer | None = None  # a gateway log's own figures for it, as logged (never pooled into ours)
    prompt_tokens: int | None = None  # baseline usage.prompt_tokens
    output_tokens: int | None = None  # baseline usage.completion_tokens
    prefill_share: float | None = None  # baseline ttft_s / e2e_s
    speedup: float | None = None  # speculative decode tokens/s over the baseline's (demo.race.compare)
    acceptance_rate: float | None = None  # speculative accepted / drafted tokens
    tokens_per_step: float | None = None  # speculative tokens per verification step (mean acceptance length)
    # speedup / tokens per step: 1.0 is the bound; well above 1 means the two streams were not comparable
    # (a noisy measurement), not a gain speculation can make.
    efficiency: float | None = None
    copyness: float | None = None  # word 3-gram overlap of the prompt and the baseline's answer
    loop: bool = False  # an answer ended in a loop (demo.measure.repetition): the speedup is not typical
    error: str | None = None
    na_reasons: dict[str, str] = Field(default_factory=dict)


class Distribution(BaseModel):
    """The p50, p95 and max of a per-request figure over ``n`` requests."""

    p50: float
    p95: float
    max: float
    n: int


class RankedRequest(BaseModel):
    """One request in the most- or least-gain list: its speedup and the figures that may explain it.

    Fractions are 0..1; ``prompt_preview`` is None when redacted and must be escaped before HTML."""

    id: str
    speedup: float
    efficiency: float | None = None  # speedup / tokens per step (1.0 is the bound)
    acceptance_rate: float | None = None
    copyness: float | None = None
    loop: bool = False  # an answer ended in a loop: n-gram drafts it perfectly, so the speedup is not typical
    prompt_sha256: str
    prompt_preview: str | None = None  # the prompt's opening, one line; None when redacted (escape before HTML)


class WorkloadProfile(BaseModel):
    """The shape of a workload: per-request distributions, and the requests that gain most and least.

    A None distribution or correlation was not measured; ``na_reasons`` says why."""

    requests: int
    prompt_tokens: Distribution | None = None
    output_tokens: Distribution | None = None
    prefill_share: Distribution | None = None
    copyness: Distribution | None = None
    acceptance_rate: Distribution | None = None
    # A gateway log's own figures for the same requests, as logged (None: the file logs none), beside ours.
    logged_output_tokens: Distribution | None = None
    logged_ttft_s: Distribution | None = None
    logged_e2e_s: Distribution | None = None
    # Pearson correlation of copy-ness and acceptance over the requests that have both.
    copyness_acceptance_r: float | None = None
    gain_most: list[RankedRequest] = Field(default_factory=list)  # highest speedup first
    gain_least: list[RankedRequest] = Field(default_factory=list)  # lowest speedup first
    unranked: list[str] = Field(default_factory=list)  # ids without a speedup (failed or not measured)
    redacted: bool = False
    na_reasons: dict[str, str] = Field(default_factory=dict)


# --------------------------------------------------------------------------- per request


def answer_kind(side: SideResult) -> AnswerKind | None:
    """A finished answer's kind: a tool call when the server's parser ended it as one (finish_reason
    "tool_calls"), else prose; None for an answer that did not finish."""
    if not side.complete or side.error:
        return None
    return "tool_call" if side.finish_reason == "tool_calls" else "prose"


def request_outcome(req: WorkloadRequest, base: SideResult, spec: SideResult, *, redact: bool = False
                    ) -> RequestOutcome:
    """One request's two sides -> its outcome. Copy-ness is computed here, before any text is dropped."""
    race = compare(req.to_race_request(), base, spec)
    out = RequestOutcome(id=req.id, prompt_sha256=req.prompt_sha256,
                         prompt_text=None if redact else req.prompt_text,
                         temperature=req.temperature, structured=req.structured, tag=req.tag,
                         session=req.session, turn=req.turn, answer_kind=answer_kind(base), logged=req.logged,
                         prompt_tokens=base.prompt_tokens, output_tokens=base.completion_tokens,
                         speedup=race.speedup, loop=base.repetition is not None or spec.repetition is not None,
                         error=base.error or spec.error,
                         other_call={side: r.followed_other_call for side, r in zip(SIDES, (base, spec), strict=True)
                                     if r.followed_other_call is not None})
    if race.speedup is None:
        out.na_reasons["speedup"] = race.na_reasons.get("speedup", "not measured")
    if base.ttft_s is not None and base.e2e_s:
        out.prefill_share = base.ttft_s / base.e2e_s
    else:
        out.na_reasons["prefill_share"] = base.na_reasons.get("e2e_s") or base.na_reasons.get("ttft_s") or (
            base.error or "not measured")
    if spec.spec is not None and spec.spec.acceptance_rate is not None:
        out.acceptance_rate = spec.spec.acceptance_rate
        out.tokens_per_step = spec.spec.mean_acceptance_length
        out.efficiency = efficiency(out.speedup, out.tokens_per_step)
    else:
        out.na_reasons["acceptance_rate"] = (spec.spec.na_reasons.get("acceptance_rate") if spec.spec else None) or (
            spec.error or "the speculative server reported no per-request acceptance")
    if base.complete:
        out.copyness, why = copyness(req.prompt_text, base.text)
        if why:
            out.na_reasons["copyness"] = why
    else:
        out.na_reasons["copyness"] = "the baseline answer did not finish"
    return out


def pool_outcomes(outcomes: Sequence[RequestOutcome]) -> list[RequestOutcome]:
    """Several measurements of the same request (repeats, concurrencies) -> one, by medians, first-seen order.

    Token counts and copy-ness take the median too (equal at T=0; at T>0 the answers differ).
    """
    groups: dict[str, list[RequestOutcome]] = {}
    for o in outcomes:
        groups.setdefault(o.id, []).append(o)
    pooled: list[RequestOutcome] = []
    for rid, group in groups.items():
        first = group[0]
        out = RequestOutcome(id=rid, prompt_sha256=first.prompt_sha256, prompt_text=first.prompt_text,
                             temperature=first.temperature, structured=first.structured, tag=first.tag,
                             session=first.session, turn=first.turn, logged=first.logged,
                             answer_kind=next((g.answer_kind for g in group if g.answer_kind), None),
                             loop=any(g.loop for g in group), error=next((g.error for g in group if g.error), None),
                             other_call={side: any(g.other_call.get(side, False) for g in group)
                                         for side in dict.fromkeys(k for g in group for k in g.other_call)})
        for f in ("prompt_tokens", "output_tokens", "prefill_share", "speedup", "acceptance_rate", "tokens_per_step",
                  "efficiency", "copyness"):
            value = median(getattr(g, f) for g in group)
            if value is None:
                out.na_reasons[f] = next((g.na_reasons[f] for g in group if f in g.na_reasons), "not measured")
            elif f in ("prompt_tokens", "output_tokens"):
                setattr(out, f, round(value))
            else:
                setattr(out, f, value)
        pooled.append(out)
    return pooled


# --------------------------------------------------------------------------- the profile


def distribution(values: Sequence[float | int | None]) -> Distribution | None:
    """p50, p95 (interpolated, demo.measure.percentile) and max of the known values; None when none."""
    known = [float(v) for v in values if v is not None]
    p50, p95 = percentile(known, 50), percentile(known, 95)
    if p50 is None or p95 is None:
        return None
    return Distribution(p50=p50, p95=p95, max=max(known), n=len(known))


def pearson(xs: Sequence[float], ys: Sequence[float]) -> float | None:
    """Pearson's r; None for fewer than 3 pairs or a constant series."""
    if len(xs) != len(ys) or len(xs) < 3:
        return None
    try:
        return statistics.correlation(xs, ys)
    except statistics.StatisticsError:  # a constant series
        return None


def _preview(text: str | None) -> str | None:
    if text is None:
        return None
    one_line = " ".join(text.split())
    return one_line if len(one_line) <= PREVIEW_CHARS else one_line[: PREVIEW_CHARS - 1] + "…"


def _ranked(o: RequestOutcome) -> RankedRequest:
    return RankedRequest(id=o.id, speedup=o.speedup or 0.0, efficiency=o.efficiency, acceptance_rate=o.acceptance_rate,
                         copyness=o.copyness, loop=o.loop,
                         prompt_sha256=o.prompt_sha256, prompt_preview=_preview(o.prompt_text))


def rank_requests(outcomes: Sequence[RequestOutcome], n: int = RANKED
                  ) -> tuple[list[RankedRequest], list[RankedRequest], list[str]]:
    """(gain most, gain least, unranked ids). Ties by id; no request is in both lists.

    Most: the n highest speedups, highest first. Least: the n lowest of the rest, lowest first
    (with fewer than 2n measured requests the least list is shorter).
    """
    measured = [o for o in outcomes if o.speedup is not None]
    unranked = [o.id for o in outcomes if o.speedup is None]
    by_gain = sorted(measured, key=lambda o: (-(o.speedup or 0.0), o.id))
    most = by_gain[:n]
    rest = by_gain[len(most):]
    least = sorted(rest, key=lambda o: (o.speedup or 0.0, o.id))[:n]
    return [_ranked(o) for o in most], [_ranked(o) for o in least], unranked


def workload_profile(outcomes: Sequence[RequestOutcome], *, redacted: bool = False) -> WorkloadProfile:
    """The profile of one workload from its requests' outcomes (pool repeats first: pool_outcomes)."""
    ids = [o.id for o in outcomes]
    if len(ids) != len(set(ids)):
        raise ValueError("one outcome per request: pool repeated measurements with pool_outcomes first")
    prof = WorkloadProfile(requests=len(outcomes), redacted=redacted)
    for f in ("prompt_tokens", "output_tokens", "prefill_share", "copyness", "acceptance_rate"):
        d = distribution([getattr(o, f) for o in outcomes])
        setattr(prof, f, d)
        if d is None:
            prof.na_reasons[f] = next((o.na_reasons[f] for o in outcomes if f in o.na_reasons), "no request")
    logs = [o.logged for o in outcomes if o.logged is not None]
    prof.logged_output_tokens = distribution([g.completion_tokens for g in logs])
    prof.logged_ttft_s = distribution([g.ttft_s for g in logs])
    prof.logged_e2e_s = distribution([g.e2e_s for g in logs])
    pairs = [(o.copyness, o.acceptance_rate) for o in outcomes if o.copyness is not None
             and o.acceptance_rate is not None]
    prof.copyness_acceptance_r = pearson([p[0] for p in pairs], [p[1] for p in pairs])
    if prof.copyness_acceptance_r is None:
        prof.na_reasons["copyness_acceptance_r"] = (
            f"{len(pairs)} request(s) have both copy-ness and acceptance; 3 are needed" if len(pairs) < 3
            else "copy-ness or acceptance is the same for every request")
    if redacted:
        outcomes = [o.model_copy(update={"prompt_text": None}) for o in outcomes]
    prof.gain_most, prof.gain_least, prof.unranked = rank_requests(outcomes)
    if not prof.gain_most:
        prof.na_reasons["gain_most"] = prof.na_reasons["gain_least"] = "no request has a speedup"
    return prof
