"""The verdict: per workload (a preset at a temperature), enable / don't / depends, in words.

It follows the talk's checklist, each item from measured figures:
- structuredness: acceptance rate (and tokens per step next to the theory's expectation);
- memory headroom: the speculative server's peak KV-cache use during the batches;
- concurrency: how the gain holds as more requests share the server;
- prefill share: time to first token over end-to-end, which caps any decode gain.
The decision itself rests on the throughput ratio (aggregate output tokens/s, speculative over
baseline) at every concurrency tried; the checklist explains it. A gain counts at most up to the
tokens per step speculation delivered (``bounded_gain``), and a cell whose speedup is more than that
allows (``ArmCell.over_bound``: the baseline was slowed) is named in the headline with the reason, a
cell to run again. Every ratio is said by its one name (docs/measurement.md): ``speedup`` for the
decode ratio, ``throughput ratio`` for the aggregate one. Where the two would give different
decisions, ``reconcile`` says why in one sentence.

With several arms, each arm gets its own verdict (its cells seen through ``CellResult.arm_view``)
and one line on top says which arm to enable up to which concurrency (``choose_arms``, beside the
crossover it uses).
"""

from __future__ import annotations

from demo.fmt import fmt_percent as pct
from demo.fmt import fmt_speedup as times
from demo.fmt import fmt_temperature
from demo.measure import median
from demo.sweep.crossover import GAIN_NONE, GAIN_WORTH, choose_arms, find_crossover
from demo.sweep.models import CellResult, ChecklistItem, Decision, SweepResult, WorkloadVerdict
from demo.sweep.pooling import expected_tokens_per_step, pooled_acceptance, workload_groups

# GAIN_WORTH (a gain that pays) and GAIN_NONE (below it, no gain worth the name) live with the
# crossover (demo/sweep/crossover.py), which the load sweep shares; imported here as the verdict's own.
__all__ = ["GAIN_NONE", "GAIN_WORTH", "VERDICT_BASIS", "bounded_gain", "credible_gain", "credible_gains", "decide",
           "decide_arms", "reconcile", "verdicts"]
ACCEPT_HIGH = 0.5
ACCEPT_LOW = 0.25
KV_TIGHT = 0.8  # speculation needs KV blocks for the drafts; above this the batch shrinks
KV_EASY = 0.5
PREFILL_HEAVY = 0.4
PREFILL_LIGHT = 0.2
# Speculation cannot speed decoding beyond the tokens each step delivers: a measured gain above
# that (by this margin) is noise from a busy machine, and counts only up to that bound.
NOISE_MARGIN = 1.1
# Which figure the one recommendation rests on, and why: said once under the report's title, the
# Evaluate tab's summary and the CLI's verdicts.
VERDICT_BASIS = ("speedup = decode tokens/s (the tokens after the first, over the time after the first token), "
                 "speculative over baseline: what speculation does to generating an answer. throughput ratio = "
                 "aggregate output tokens/s, speculative over baseline, prefill and waiting included: what the "
                 "servers deliver. The verdict rests on the throughput ratio, since that is what a deployment "
                 "gets; the segments, judged per request, on the speedup.")


def _label(preset: str, temperature: float | None) -> str:
    return f"{preset} ({fmt_temperature(temperature)})"


def _pooled_acceptance(cells: list[CellResult]) -> tuple[float | None, float | None, int | None]:
    """Acceptance rate, tokens per step and k over every speculative batch of the workload."""
    batches = [b for c in cells for b in c.speculative.batches if b.draft_tokens and b.accepted_tokens is not None]
    acc = pooled_acceptance(batches)
    return acc.rate, acc.tokens_per_step, next((b.num_spec_tokens for b in batches if b.num_spec_tokens), None)


def _structuredness(a: float | None, measured: float | None, expected: float | None, k: int | None,
                    reason: str | None) -> ChecklistItem:
    if a is None:
        return ChecklistItem(name="structuredness", status="unknown",
                             text=f"acceptance n/a ({reason or 'no speculative figures'})")
    steps = ""
    if measured is not None:
        steps = f"; {measured:.2f} tokens per verification step measured"
        if expected is not None and k is not None:
            steps += f", theory (1 - a^(k+1)) / (1 - a) with a={a:.2f}, k={k}: {expected:.2f}"
    if a >= ACCEPT_HIGH:
        return ChecklistItem(name="structuredness", status="good",
                             text=f"acceptance {pct(a)}{steps}: the answer is predictable (structured or copied "
                                  "from the prompt), so most drafts are kept")
    if a < ACCEPT_LOW:
        return ChecklistItem(name="structuredness", status="bad",
                             text=f"acceptance {pct(a)}{steps}: free-form output, most drafts are thrown away")
    return ChecklistItem(name="structuredness", status="mixed",
                         text=f"acceptance {pct(a)}{steps}: partly predictable output")


def _memory(cells: list[CellResult]) -> ChecklistItem:
    spec = [c.speculative.kv_cache_usage_peak_perc for c in cells if c.speculative.kv_cache_usage_peak_perc is not None]
    base = [c.baseline.kv_cache_usage_peak_perc for c in cells if c.baseline.kv_cache_usage_peak_perc is not None]
    if not spec:
        why = next((c.speculative.na_reasons.get("kv_cache_usage_peak_perc") for c in cells
                    if "kv_cache_usage_peak_perc" in c.speculative.na_reasons), None)
        return ChecklistItem(name="memory headroom", status="unknown",
                             text=f"KV-cache use n/a ({why or 'not reported by the server'})")
    peak = max(spec)
    also = f" (baseline {pct(max(base))})" if base else ""
    text = f"KV cache peaked at {pct(peak)} on the speculative server{also}"
    if peak >= KV_TIGHT:
        return ChecklistItem(name="memory headroom", status="bad",
                             text=text + ": little headroom; draft tokens take KV space that a larger batch would use")
    if peak < KV_EASY:
        return ChecklistItem(name="memory headroom", status="good", text=text + ": memory to spare")
    return ChecklistItem(name="memory headroom", status="mixed", text=text + ": some headroom; watch it under load")


def _concurrency(gains: list[tuple[int, float]]) -> ChecklistItem:
    listed = ", ".join(f"{times(g)} at {c}" for c, g in gains)
    if len(gains) == 1:
        c, g = gains[0]
        status = "good" if g >= GAIN_WORTH else "bad" if g < GAIN_NONE else "mixed"
        return ChecklistItem(name="concurrency", status=status,
                             text=f"measured at concurrency {c} only (throughput ratio {times(g)}); try higher "
                                  "concurrency to see where the gain stops")
    cross = find_crossover(gains, noun="concurrent request")
    if cross.stops_paying_from_users is None:
        status, why = "good", "the gain holds as the batch grows"
    elif all(g < GAIN_NONE for _, g in gains):
        status, why = "bad", "no gain at any concurrency"
    else:
        status, why = "mixed", ("speculation spends spare compute, and a fuller batch leaves less of it"
                                if gains[0][1] > gains[-1][1] else "the gain varies with concurrency")
    return ChecklistItem(name="concurrency", status=status,
                         text=f"throughput ratio {listed} (by concurrency): {why}; {cross.text}")


def _prefill(cells: list[CellResult]) -> ChecklistItem:
    share = median(c.baseline.prefill_share for c in cells)
    if share is None:
        return ChecklistItem(name="prefill share", status="unknown", text="prefill share n/a (no request finished)")
    lowest = min(cells, key=lambda c: c.settings.concurrency)
    text = f"prefill (time to first token) is {pct(share)} of a request's time on the baseline"
    d, e = lowest.speedup, lowest.e2e_speedup
    if share >= PREFILL_HEAVY:
        extra = (f", so a speedup of {times(d.median)} shows as {times(e)} end to end" if d and e else "")
        return ChecklistItem(name="prefill share", status="bad",
                             text=text + extra + ": prefill dominates, and speculation does not speed it up")
    if share < PREFILL_LIGHT:
        return ChecklistItem(name="prefill share", status="good",
                             text=text + ": decode dominates, which is where speculation acts")
    return ChecklistItem(name="prefill share", status="mixed",
                         text=text + (f"; speedup {times(d.median)}, end to end {times(e)}" if d and e else ""))


def bounded_gain(gain: float, tokens_per_step: float | None) -> float:
    """A measured gain as the verdict counts it: at most the tokens per step speculation delivered
    when the gain exceeds them by more than NOISE_MARGIN (the excess is noise); else as measured."""
    if tokens_per_step is not None and gain > tokens_per_step * NOISE_MARGIN:
        return tokens_per_step
    return gain


def credible_gain(cell: CellResult) -> tuple[float, str | None]:
    """The cell's gain, bounded by the tokens per step speculation delivered; and why, if bounded."""
    assert cell.throughput_ratio is not None
    g, steps = cell.throughput_ratio.median, cell.mean_acceptance_length
    if steps is not None and bounded_gain(g, steps) != g:
        return steps, (f"a throughput ratio of {times(g)} measured at concurrency {cell.settings.concurrency} is "
                       f"more than the "
                       f"{steps:.2f} tokens per step speculation delivered, so the excess is noise: "
                       f"counted as {times(steps)}")
    return g, None


def decide(cells: list[CellResult], title: str) -> WorkloadVerdict:
    """The verdict for one workload's cells (one preset, one temperature, any concurrencies)."""
    first = cells[0].settings
    label = _label(first.preset, first.temperature)
    a, measured, k = _pooled_acceptance(cells)
    expected = expected_tokens_per_step(a, k)
    verdict = WorkloadVerdict(preset=first.preset, title=title, temperature=first.temperature,
                              decision="unknown", headline="", acceptance_rate=a, num_spec_tokens=k,
                              expected_tokens_per_step=expected, measured_tokens_per_step=measured)
    known = sorted(((c.settings.concurrency, c) for c in cells if c.throughput_ratio is not None), key=lambda x: x[0])
    # A cell whose speedup is over the bound (the baseline was slowed), or over its tokens per step by a
    # cheap verification step (step_cost_note): named, with the reason.
    bound_notes = "".join(f" (concurrency {c}: {note})" for c, cell in known
                          if (note := cell.first_arm.over_bound or cell.first_arm.step_cost_note) is not None)
    reason = next((why for c in cells if (why := c.reason("acceptance_rate"))), None)
    verdict.checklist = [_structuredness(a, measured, expected, k, reason), _memory(cells)]
    if not known:
        err = next((e for c in cells for e in c.errors), None) or next(
            (why for c in cells if (why := c.reason("throughput_ratio"))), "not measured")
        verdict.headline = f"{label}: no verdict, no cell produced a throughput ratio ({err})"
        return verdict
    credible = {c: credible_gain(cell) for c, cell in known}
    gains = [(c, credible[c][0]) for c, _cell in known]
    verdict.checklist += [_concurrency(gains), _prefill([cell for _, cell in known])]

    def at(c: int, cell: CellResult) -> str:
        sp = f" (speedup {times(cell.speedup.median)})" if cell.speedup is not None else ""
        acc = f", acceptance {pct(cell.acceptance_rate)}" if cell.acceptance_rate is not None else ""
        return f"at concurrency {c}: throughput ratio {times(credible[c][0])}{sp}{acc}"

    c0, cell0 = known[0]
    cn, _celln = known[-1]
    tail = ""
    if len(known) > 1:
        gn = credible[cn][0]
        tail = (f"; at concurrency {cn} the throughput ratio falls to {times(gn)}" if gn < gains[0][1] * 0.9
                else f"; at concurrency {cn} still {times(gn)}")
    noise = "".join(f" ({why})" for _g, why in credible.values() if why)
    numbers = f"{label} {at(c0, cell0)}{tail}{noise}{bound_notes}"
    verdict.reconcile = reconcile(cell0)
    verdict.decision, advice = _judge(gains, a, memory_bad=verdict.checklist[1].status == "bad")
    verdict.headline = f"{numbers}.{advice}"
    return verdict


def _judge(gains: list[tuple[int, float]], acceptance: float | None, *, memory_bad: bool) -> tuple[Decision, str]:
    """The decision on the credible gains per concurrency, and the advice that follows the figures."""
    lo = min(g for _, g in gains)
    hi = max(g for _, g in gains)
    if lo >= GAIN_WORTH:
        if memory_bad:
            return "depends", " Faster, but the KV cache is nearly full: enable only with memory to spare."
        return "enable", " Enable: it pays at every concurrency measured."
    if hi < GAIN_NONE:
        why = " Drafts are mostly rejected." if acceptance is not None and acceptance < ACCEPT_LOW else ""
        return "don't", f" Don't: no gain, speculation only adds work.{why}"
    cross = find_crossover(gains, noun="concurrent request")
    if cross.pays_up_to_users is not None:  # it stops paying above it: this is "depends"
        return "depends", f" Enable for concurrency up to {cross.pays_up_to_users}, not beyond."
    span = times(lo) if times(lo) == times(hi) else f"{times(lo)} to {times(hi)}"
    return "depends", f" The gain is small (throughput ratio {span}): measure on your own traffic."


def _decision_of(gain: float) -> str:
    """What a gain alone would decide, on the verdict's thresholds."""
    return "enable" if gain >= GAIN_WORTH else "don't" if gain < GAIN_NONE else "depends"


def reconcile(cell: CellResult) -> str | None:
    """One sentence when the cell's speedup and its throughput ratio would decide differently: what
    each is, why they part (prefill's share of a request, or waiting), and that the verdict rests on
    the throughput ratio. None when both decide alike, or one of them is not known."""
    if cell.speedup is None or cell.throughput_ratio is None:
        return None
    d = bounded_gain(cell.speedup.median, cell.mean_acceptance_length)
    t = credible_gain(cell)[0]
    if _decision_of(d) == _decision_of(t):
        return None
    share = cell.baseline.prefill_share
    why = (f"prefill is {pct(share)} of each request, and speculation does not speed it up"
           if share is not None and share >= PREFILL_LIGHT else
           "the time before and between answers (waiting, the first token) is not decoding")
    if d < t:
        return (f"The speedup is {times(d)} but the throughput ratio is {times(t)} (more requests finished per "
                f"second than decoding alone explains): the verdict rests on the throughput ratio.")
    return (f"Decode gains a speedup of {times(d)} but {why}: end to end the throughput ratio is {times(t)}, "
            f"and the verdict rests on it.")


def credible_gains(cells: list[CellResult]) -> list[tuple[int, float]]:
    """(concurrency, credible gain) of the cells that have a gain, as the verdict weighs them."""
    return sorted((c.settings.concurrency, credible_gain(c)[0]) for c in cells if c.throughput_ratio is not None)


def decide_arms(cells: list[CellResult], title: str) -> WorkloadVerdict:
    """The verdict for one workload's cells over every arm: one arm, ``decide``; several, each arm's
    verdict in ``per_arm`` and the one line saying which to enable where (choose_arms, the load
    sweep's function), the first arm's verdict on top."""
    arms = list(dict.fromkeys(a for c in cells for a in c.arms))
    if len(arms) <= 1:
        return decide(cells, title)
    per_arm = []
    points = {}
    for a in arms:
        mine = [c.arm_view(a) for c in cells if a in c.arms]
        v = decide(mine, title)
        v.arm = a
        v.headline = f"{a}: {v.headline}"
        per_arm.append(v)
        points[a] = credible_gains(mine)
    top = per_arm[0].model_copy(update={"per_arm": per_arm})
    top.methods_line = choose_arms(points, noun="concurrent request").text
    return top


def verdicts(result: SweepResult) -> list[WorkloadVerdict]:
    """One verdict per workload (a preset at a temperature, or the workload file), in the order the sweep ran them."""
    return [decide_arms(cells, result.preset_titles.get(p, p))
            for (p, _t), cells in workload_groups(result.cells).items()]
