"""report.html's workload sections: the plain-language paragraph for the customer, the workload
file, each workload's profile (who gains: the 5 requests that gain most and least), and capacity
and cost. They print what demo.sweep.pooling.summarize_workloads computed; nothing is computed here.
Every text that came from a user file or a server is escaped.
"""

from __future__ import annotations

from demo.fmt import TIMES, fmt_temperature
from demo.fmt import esc as _e
from demo.measure import LOOP_NOTE
from demo.results import SIDES
from demo.sweep.capacity import Capacity, capacity_summary
from demo.sweep.models import Segment, SweepResult, WorkloadSpec, WorkloadSummary
from demo.sweep.profile import Distribution, RankedRequest
from demo.sweep.segments import DIMENSION_NAMES, buckets_text
from demo.sweep.tables import num_td as _num

DECISION_WORDS = {"enable": "turn speculative decoding on", "don't": "leave speculative decoding off",
                  "depends": "it depends", "unknown": "no verdict"}


def workload_label(w: WorkloadSummary) -> str:
    """A workload's label, its name and temperature, e.g. "json_reformat (T=0)"."""
    return f"{w.preset} ({fmt_temperature(w.temperature)})"


def summary_paragraph(result: SweepResult) -> str:
    """A short paragraph a customer can read: the decision, the gain, and what it means per GPU-hour."""
    if not result.verdicts:
        return '<p class="lead muted">No cell was measured, so there is no answer yet.</p>'
    mine = [v for v in result.verdicts if result.spec.workload is not None and v.preset == result.spec.workload.name]
    verdict = mine[0] if mine else result.verdicts[0]
    parts = [f"For <b>{_e(verdict.title)}</b>, the measured answer is: <b>{_e(DECISION_WORDS[verdict.decision])}</b>. "
             f"{_e(verdict.headline)}" + (f" {_e(verdict.reconcile)}" if verdict.reconcile else "")]
    if verdict.methods_line:  # several arms: which one to enable where, first
        parts = [f'<span class="methods-line">{_e(verdict.methods_line[0].upper() + verdict.methods_line[1:])}.</span>',
                 *parts]
    summary = next((w for w in result.workloads if w.preset == verdict.preset and w.temperature == verdict.temperature),
                   None)
    if summary is not None:
        prof = summary.profile
        if prof.gain_most:
            top = ", ".join(_e(r.id) for r in prof.gain_most[:3])
            parts.append(f"The requests that gain most: {top}.")
        parts.append(_e(capacity_summary(summary.capacity)))
    if result.routing:
        parts.append(f'<span class="routing">By segment: {_e(result.routing)}</span>')
    if result.interrupted:
        parts.append("The sweep was interrupted: this rests on the cells measured before it stopped.")
    return '<p class="lead" id="customer-summary">' + " ".join(parts) + "</p>"


def workload_file_html(w: WorkloadSpec | None, redacted: bool) -> str:
    """The "Your workload" section as escaped HTML: the file, what was measured and the skipped lines.

    Lists at most 50 skipped lines; empty for a sweep without a workload file."""
    if w is None:
        return ""
    sample = (f"a sample of {w.sample.n} drawn with seed {w.sample.seed} from {w.sample.of_requests} requests"
              if w.sample else "every request")
    skipped = ""
    if w.issues:
        items = "".join(f"<li>{_e(str(i))}</li>" for i in w.issues[:50])
        more = f"<li>… and {len(w.issues) - 50} more</li>" if len(w.issues) > 50 else ""
        skipped = f'<p>{len(w.issues)} line(s) were skipped:</p><ul class="skipped">{items}{more}</ul>'
    note = " No prompt or answer text is kept in this report (redacted): ids, token counts and hashes only." \
        if redacted else ""
    return (f'<h2>Your workload</h2><p data-workload="{_e(w.name)}"><b>{_e(w.name)}</b> '
            f"({_e(w.format)}, {_e(w.source)}): {w.requests} request(s) measured, {sample}.{note}</p>{skipped}")


def _dist_row(name: str, d: Distribution | None, fmt: str, unit: str, why: str | None) -> str:
    if d is None:
        return f'<tr><th class="l">{_e(name)}</th><td class="na" colspan="3">n/a: {_e(why or "not measured")}</td></tr>'
    return (f'<tr><th class="l">{_e(name)}</th>' + _num(d.p50, fmt, unit) + _num(d.p95, fmt, unit)
            + _num(d.max, fmt, unit) + "</tr>")


def _loop_note(loop: bool) -> str:
    return f'<div class="loop" data-loop="true">⟳ {_e(LOOP_NOTE)}</div>' if loop else ""


def ranked_rows_html(rows: list[RankedRequest], redacted: bool) -> str:
    """The rows of a gain-most or gain-least table: each request's id, preview (unless redacted) and figures."""
    out = []
    for r in rows:
        text = "redacted" if redacted or r.prompt_preview is None else r.prompt_preview
        out.append(f'<tr data-request="{_e(r.id)}"><td class="l">{_e(r.id)}</td>' + _num(r.speedup, ".2f", TIMES)
                   + _num(r.efficiency, ".2f")
                   + _num(None if r.acceptance_rate is None else r.acceptance_rate * 100, ".0f", "%")
                   + _num(None if r.copyness is None else r.copyness * 100, ".0f", "%")
                   + f'<td class="l">{_e(text)}{_loop_note(r.loop)}</td>'
                   f'<td class="l mono">{_e(r.prompt_sha256[:12])}</td></tr>')
    return "".join(out)


def profile_html(w: WorkloadSummary) -> str:
    """A workload's profile as escaped HTML: the per-request distributions and the most- and least-gain lists."""
    p = w.profile
    pct = None if p.prefill_share is None else p.prefill_share.model_copy(
        update={k: getattr(p.prefill_share, k) * 100 for k in ("p50", "p95", "max")})
    cop = None if p.copyness is None else p.copyness.model_copy(
        update={k: getattr(p.copyness, k) * 100 for k in ("p50", "p95", "max")})
    acc = None if p.acceptance_rate is None else p.acceptance_rate.model_copy(
        update={k: getattr(p.acceptance_rate, k) * 100 for k in ("p50", "p95", "max")})
    dist = ("<table class=\"profile\"><tr><th class=\"l\">per request</th><th>p50</th><th>p95</th><th>max</th></tr>"
            + _dist_row("prompt tokens", p.prompt_tokens, ".0f", "", p.na_reasons.get("prompt_tokens"))
            + _dist_row("output tokens", p.output_tokens, ".0f", "", p.na_reasons.get("output_tokens"))
            + _dist_row("prefill share (TTFT / end to end)", pct, ".0f", "%", p.na_reasons.get("prefill_share"))
            + _dist_row("copy-ness (answer 3-grams found in the prompt)", cop, ".0f", "%", p.na_reasons.get("copyness"))
            + _dist_row("measured acceptance rate", acc, ".0f", "%", p.na_reasons.get("acceptance_rate"))
            + "".join(_dist_row(f"{name}, as logged by the gateway (not measured here)", d, fmt, unit, None)
                      for name, d, fmt, unit in (("output tokens", p.logged_output_tokens, ".0f", ""),
                                                 ("time to first token", p.logged_ttft_s, ".2f", " s"),
                                                 ("end to end", p.logged_e2e_s, ".2f", " s")) if d is not None)
            + "</table>")
    r = ("n/a: " + p.na_reasons.get("copyness_acceptance_r", "not measured")) if p.copyness_acceptance_r is None \
        else f"{p.copyness_acceptance_r:+.2f}"
    corr = (f'<p class="muted">Copy-ness predicts what n-gram speculation can gain; its correlation with the '
            f"measured acceptance over these requests: <b>{_e(r)}</b>.</p>")
    head = ('<tr><th class="l">id</th><th>speedup</th><th title="speedup / tokens per verification step: '
            '1.0 is the bound">efficiency</th><th>acceptance</th><th>copy-ness</th>'
            '<th class="l">prompt</th><th class="l">sha256</th></tr>')
    ranked = ""
    if p.gain_most:
        ranked = (f"<h3>Gain most</h3><table class=\"gain-most\">{head}"
                  f"{ranked_rows_html(p.gain_most, p.redacted)}</table>"
                  f"<h3>Gain least</h3><table class=\"gain-least\">{head}"
                  f"{ranked_rows_html(p.gain_least, p.redacted)}</table>")
    else:
        ranked = f'<p class="muted">No per-request ranking: {_e(p.na_reasons.get("gain_most", "not measured"))}.</p>'
    unranked = (f'<p class="muted">Not ranked (no speedup measured): {_e(", ".join(p.unranked[:20]))}'
                f'{" …" if len(p.unranked) > 20 else ""}</p>') if p.unranked else ""
    return (f'<section class="workload-profile" data-workload="{_e(w.preset)}"><h3>{_e(workload_label(w))}: '
            f"{p.requests} request(s), measured at concurrency {w.profile_concurrency}</h3>"
            f"{dist}{corr}{ranked}{unranked}</section>")


def capacity_html(w: WorkloadSummary, capacity: Capacity | None = None, arm: str | None = None) -> str:
    """One workload's capacity and cost: the first arm's (``w.capacity``), or ``capacity``, arm ``arm``'s."""
    c: Capacity = capacity or w.capacity
    cur = _e(c.currency)
    rows = []
    for p in c.points:
        meets = {True: "yes", False: "no", None: "n/a"}[p.meets_slo]
        why = "; ".join(p.slo_misses)
        cost = (f'<td data-value="{_e(repr(p.cost_per_million_output_tokens))}">{cur}'
                f"{p.cost_per_million_output_tokens:,.2f}</td>" if p.cost_per_million_output_tokens is not None
                else f'<td class="na">n/a: {_e(p.na_reasons.get("cost_per_million_output_tokens", ""))}</td>')
        shown = arm if arm and p.side == "speculative" else p.side
        rows.append(f'<tr data-side="{_e(p.side)}" data-concurrency="{p.concurrency}">'
                    f'<td class="l">{_e(shown)}</td><td>{p.concurrency}</td>'
                    + _num(p.output_tokens_per_s, ".1f")
                    + _num(None if p.ttft_p50_s is None else p.ttft_p50_s * 1000, ".0f", " ms")
                    + _num(None if p.ttft_p95_s is None else p.ttft_p95_s * 1000, ".0f", " ms")
                    + _num(None if p.itl_p50_s is None else p.itl_p50_s * 1000, ".1f", " ms")
                    + _num(None if p.itl_p95_s is None else p.itl_p95_s * 1000, ".1f", " ms")
                    + f'<td class="l" data-meets="{_e(meets)}">{_e(meets)}{(" (" + _e(why) + ")") if why else ""}</td>'
                    + cost + "</tr>")
    head = ('<tr><th class="l">server</th><th>concurrency</th><th>output tok/s</th><th>TTFT p50</th>'
            '<th>TTFT p95</th><th>ITL p50</th><th>ITL p95</th><th class="l">meets the target</th>'
            f'<th>{cur} per million output tokens</th></tr>')
    best = []
    for side in SIDES:
        b = getattr(c.best, side)
        who = arm if arm and side == "speculative" else side
        if b is None:
            best.append(f"<li>{_e(who)}: n/a: {_e(c.best.na_reasons.get(side, 'not measured'))}</li>")
        else:
            cost = (f", {cur}{b.cost_per_million_output_tokens:,.2f} per million output tokens"
                    if b.cost_per_million_output_tokens is not None else "")
            best.append(f'<li data-best="{_e(side)}" data-concurrency="{b.concurrency}">{_e(who)}: concurrency '
                        f"{b.concurrency}, {b.output_tokens_per_s:.1f} output tokens/s "
                        f"({b.output_tokens_per_gpu_hour:,.0f} per GPU-hour){cost}</li>")
    title = workload_label(w) + (f": {arm} against the baseline" if arm else "")
    share = f' data-price-share="{_e(c.price_share)}"' if c.price_share is not None else ""
    return (f'<section class="capacity" data-workload="{_e(w.preset)}"{_arm_attr(arm)}{share}>'
            f"<h3>{_e(title)}</h3>"
            f"<p>Latency target: <b>{_e(c.slo.describe())}</b>.</p>"
            f'<div class="scroll"><table class="capacity-points">{head}{"".join(rows)}</table></div>'
            f'<ul class="capacity-best">{"".join(best)}</ul>'
            f'<p class="saving" data-saving="{_e(c.saving.more_tokens_per_gpu_hour_pct)}">'
            f"<b>{_e(c.saving.text)}</b></p>"
            f'<p class="muted">{_e(c.price_note)} {_e(c.note)}</p></section>')


def _arm_attr(arm: str | None) -> str:
    return f' data-arm="{_e(arm)}"' if arm else ""


def workload_sections(result: SweepResult) -> str:
    """Everything the report adds for workloads: the file, its segments, profiles, capacity and cost."""
    if not result.workloads:
        return ""
    profiles = "".join(profile_html(w) for w in result.workloads)
    capacities = "".join("".join(capacity_html(w, c, arm) for arm, c in w.arm_capacity.items()) if w.arm_capacity
                         else capacity_html(w) for w in result.workloads)
    return (workload_file_html(result.spec.workload, result.spec.redact)
            + segments_html(result)
            + "<h2>Which requests gain</h2>" + profiles
            + "<h2>Capacity and cost</h2><p class=\"muted\">From measured cells only: per server and concurrency, "
              "the output tokens/s of all streams together and the latency percentiles; nothing is extrapolated "
              "beyond the concurrencies run.</p>" + capacities)


def _segment_row(s: Segment) -> str:
    speedup = ('<td class="na">n/a</td>' if s.speedup is None else
               f'<td data-value="{_e(repr(s.speedup))}">{s.speedup:.2f}{TIMES}<br><span class="muted">'
               f"{s.speedup_min:.2f}-{s.speedup_max:.2f}</span></td>")
    return (f'<tr data-dimension="{_e(s.dimension)}" data-label="{_e(s.label)}" data-verdict="{_e(s.verdict)}">'
            f'<td class="l">{_e(DIMENSION_NAMES[s.dimension])}</td><td class="l">{_e(s.label)}</td>'
            f"<td>{s.measured}/{s.requests}</td>{speedup}"
            + _num(None if s.acceptance_rate is None else s.acceptance_rate * 100, ".0f", "%")
            + _num(s.tokens_per_step, ".2f")
            + f'<td class="l">{_e(s.verdict)}</td><td class="l">{_e(s.reason)}</td></tr>')


def segments_html(result: SweepResult) -> str:
    """The "By segment" section: the routing sentence, the buckets as stated, a row per segment
    (demo/sweep/segments.py built them; nothing is computed here). Empty without segments."""
    if not result.segments:
        return ""
    c = result.segments[0].concurrency
    head = ('<tr><th class="l">dimension</th><th class="l">segment</th><th>requests (measured)</th>'
            '<th>decode speedup (range)</th><th>acceptance</th><th>tokens/step</th><th class="l">verdict</th>'
            '<th class="l">why</th></tr>')
    rows = "".join(_segment_row(s) for s in result.segments)
    return (f'<section class="segments"><h2>By segment</h2><p class="routing" id="routing"><b>'
            f"{_e(result.routing or '')}</b></p>"
            f'<p class="muted">Per request, decode speedup = speculative decode tokens/s over the baseline\'s; '
            f"each segment's median and range over its requests (the first arm, at concurrency {c}). "
            f"Buckets: {_e(buckets_text())}</p>"
            f'<div class="scroll"><table class="segments">{head}{rows}</table></div>{turns_html(result)}</section>')


def _turn_cells(s: Segment | None) -> str:
    if s is None:
        return '<td class="na" colspan="3">n/a</td>'
    speedup = ('<td class="na">n/a</td>' if s.speedup is None else
               f'<td data-value="{_e(repr(s.speedup))}">{s.speedup:.2f}{TIMES}</td>')
    return (speedup + _num(None if s.acceptance_rate is None else s.acceptance_rate * 100, ".0f", "%")
            + _num(s.tokens_per_step, ".2f"))


def turns_html(result: SweepResult) -> str:
    """The "Per turn" table of a workload with sessions: per turn index, the median decode speedup,
    acceptance and tokens per step (the turn segments; with several arms, a column group per arm),
    under the history mode it was replayed in and, when each side carried its own answers, how many
    turns followed a call other than the logged one. Empty without sessions."""
    turns = [s for s in result.segments if s.dimension == "turn"]
    replay = result.sessions
    if not turns or replay is None:
        return ""
    arms = replay.arms or [""]
    by_arm = [{s.label: s for s in turns}, *({s.label: s for s in replay.arm_turns.get(a, [])} for a in arms[1:])]
    figures = "<th>decode speedup</th><th>acceptance</th><th>tokens/step</th>"
    head = ('<tr><th class="l">turn</th><th>requests (measured)</th>'
            + "".join(figures if not a else figures.replace("<th>", f"<th>{_e(a)}: ", 1) for a in arms) + "</tr>")
    rows = "".join(f'<tr data-turn="{_e(s.label)}"><td class="l">{_e(s.label)}</td><td>{s.measured}/{s.requests}</td>'
                   + "".join(_turn_cells(one.get(s.label)) for one in by_arm) + "</tr>" for s in turns)
    differed = f' <span class="differed">{_e(replay.differed)}.</span>' if replay.differed else ""
    return (f'<h3 id="per-turn">Per turn: does speculation gain as the history grows?</h3>'
            f'<p class="history" data-history="{_e(replay.history)}">History: <b>{_e(replay.history)}</b>: '
            f"{_e(replay.how)}.{differed}</p>"
            f'<div class="scroll"><table class="turns">{head}{rows}</table></div>')
