"""The headline (the speedup, or why there is none), the identical-text badge, the order, sampling and
loop notes, and the run's status line."""

from __future__ import annotations

from collections.abc import Sequence

from demo.agent_race import ArmSession, SessionResult
from demo.fmt import NA, esc, fmt_length, fmt_percent, fmt_speedup
from demo.load.engine import LoadStep
from demo.measure import LOOP_NOTE
from demo.results import (
    ArmResult,
    ArmSnapshot,
    Order,
    RaceRequest,
    RaceResult,
    RaceSnapshot,
    ToolCall,
)
from demo.sampling import sampling_body
from demo.view._common import ORDER_LABELS, ORDER_NOTES, PENDING, na_label
from demo.view._tiles import STEP_PENDING

# ---------------------------------------------------------------- headline

def speedup_html(snapshot: RaceSnapshot | None) -> str:
    """The big multiple: live while streaming (from the core's snapshot), final at the finish; a
    final speedup over the bound (RaceResult.over_bound) is not headlined: over_bound_html."""
    result = snapshot.result if snapshot is not None else None
    if result is None:
        running = snapshot is not None
        live = snapshot.live_speedup if snapshot is not None else None
        if live is not None:
            # No exact figure while live (it changes every frame; the text changes far less
            # often): the page redraws the headline only when what it shows changes.
            return ('<div class="sd-speedup sd-live" data-state="running">'
                    f'<div class="sd-speedup-value">{esc(fmt_speedup(live))}</div>'
                    '<div class="sd-speedup-label">live decode speedup · final at the finish</div></div>')
        text = PENDING if running else "—"
        sub = "speedup at the finish" if running else "speedup (decode tokens/s)"
        return (f'<div class="sd-speedup" data-state="{"running" if running else "idle"}">'
                f'<div class="sd-speedup-value">{esc(text)}</div>'
                f'<div class="sd-speedup-label">{esc(sub)}</div></div>')
    if result.speedup is None:
        reason = result.na_reasons.get("speedup")
        return ('<div class="sd-speedup" data-state="na">'
                f'<div class="sd-speedup-value sd-na">{esc(NA)}</div>'
                f'<div class="sd-speedup-label">{esc(reason or "speedup unknown")}</div></div>')
    if result.over_bound is not None:
        return over_bound_html(result.speedup, result.over_bound, extra=loop_note_html(result))
    e2e = fmt_speedup(result.e2e_speedup)
    sub = "decode speedup" + (f" · end to end {e2e}" if e2e else "")
    cls = speedup_class(result.speedup)
    return (f'<div class="sd-speedup {cls}" data-state="final" data-value="{esc(repr(result.speedup))}">'
            f'<div class="sd-speedup-value">{esc(fmt_speedup(result.speedup))}</div>'
            f'<div class="sd-speedup-label">{esc(sub)}</div>{step_cost_note_html(result.step_cost_note)}'
            f'{loop_note_html(result)}</div>')


def step_cost_note_html(note: str | None) -> str:
    """Under a speedup over its tokens per step that this host's cheap verification step explains
    (demo.measure.step_cost_note): why. Empty otherwise."""
    return f'<div class="sd-step-cost" title="{esc(note)}">{esc(note)}</div>' if note else ""


OVER_BOUND_HEAD = "run again"  # where the multiple would be when the speedup is more than speculation can give


def over_bound_html(speedup: float, reason: str, *, classes: str = "sd-speedup", attrs: str = "",
                    extra: str = "") -> str:
    """A final headline whose speedup is over the bound (demo.measure.over_bound): no multiple as the
    headline, "run again" in its place and the reason under it (the measured figure is in the reason,
    the exact one in data-value). ``classes`` and ``attrs`` (escaped already): the element's own."""
    return (f'<div class="{classes} sd-over-bound"{attrs} data-state="over-bound" data-value="{esc(repr(speedup))}">'
            f'<div class="sd-speedup-value">{esc(OVER_BOUND_HEAD)}</div>'
            '<div class="sd-speedup-label">decode speedup not headlined</div>'
            f'<div class="sd-over-bound-reason" title="{esc(reason)}">{esc(reason)}</div>{extra}</div>')


def speedup_class(speedup: float) -> str:
    """The headline's colour class: a win from 1.05x, a loss under 0.95x, even between."""
    return "sd-win" if speedup >= 1.05 else ("sd-loss" if speedup < 0.95 else "sd-even")


def users_speedup_html(users: int, step: LoadStep | None, running: bool = True) -> str:
    """The headline of an N-user race: the per-user decode speedup and the throughput ratio,
    labelled "N users". Nothing while the step runs (a per-user median needs every user's end:
    a live figure would be a different number), then the step's own figures."""
    label = f"{users} users"
    if step is None:
        text = PENDING if running else NA
        sub = f"per-user speedup, {label} · {STEP_PENDING}" if running else f"per-user speedup, {label}"
        return (f'<div class="sd-speedup" data-state="{"running" if running else "na"}" data-users="{users}">'
                f'<div class="sd-speedup-value">{esc(text)}</div>'
                f'<div class="sd-speedup-label">{esc(sub)}</div></div>')
    ratio = fmt_speedup(step.throughput_ratio) or na_label(step.na_reasons.get("throughput_ratio"))
    ratio_attr = "" if step.throughput_ratio is None else f' data-value="{esc(repr(step.throughput_ratio))}"'
    ratio_html = (f'<div class="sd-speedup-ratio" data-key="throughput_ratio"{ratio_attr}>'
                  f"throughput ratio {esc(ratio)} (total output tokens/s)</div>")
    if step.speedup is None:
        reason = step.na_reasons.get("speedup") or "speedup unknown"
        return (f'<div class="sd-speedup" data-state="na" data-users="{users}">'
                f'<div class="sd-speedup-value sd-na">{esc(NA)}</div>'
                f'<div class="sd-speedup-label">{esc(f"per-user speedup, {label}: {reason}")}</div>'
                f"{ratio_html}</div>")
    cls = speedup_class(step.speedup)
    return (f'<div class="sd-speedup {cls}" data-state="final" data-users="{users}" '
            f'data-value="{esc(repr(step.speedup))}">'
            f'<div class="sd-speedup-value">{esc(fmt_speedup(step.speedup))}</div>'
            f'<div class="sd-speedup-label">{esc(f"per-user decode speedup · {label}")}</div>{ratio_html}</div>')


def arm_speedup_html(name: str, arm: ArmSnapshot | None, result: ArmResult | None, running: bool) -> str:
    """One arm's headline in a race of several (in its pane): its decode speedup over the
    baseline, live while it streams (from the core's snapshot), final at the finish with its exact
    figure in data-value; n/a with the reason; not headlined when over the bound (over_bound_html).
    ``arm`` None: no race yet."""
    def head(cls: str = "") -> str:
        return f'class="sd-speedup sd-arm-speedup{cls}" data-arm="{esc(name)}"'

    if result is not None:
        if result.speedup is None:
            reason = result.na_reasons.get("speedup") or "speedup unknown"
            return (f'<div {head()} data-state="na"><div class="sd-speedup-value sd-na">{esc(NA)}</div>'
                    f'<div class="sd-speedup-label">{esc(reason)}</div></div>')
        if result.over_bound is not None:
            return over_bound_html(result.speedup, result.over_bound, classes="sd-speedup sd-arm-speedup",
                                   attrs=f' data-arm="{esc(name)}"')
        e2e = fmt_speedup(result.e2e_speedup)
        sub = "decode speedup" + (f" · end to end {e2e}" if e2e else "")
        cls = " " + speedup_class(result.speedup)
        return (f'<div {head(cls)} data-state="final" data-value="{esc(repr(result.speedup))}">'
                f'<div class="sd-speedup-value">{esc(fmt_speedup(result.speedup))}</div>'
                f'<div class="sd-speedup-label">{esc(sub)}</div>{step_cost_note_html(result.step_cost_note)}</div>')
    live = arm.live_speedup if arm is not None else None
    if live is not None:  # no exact figure while live: it would change the markup every frame
        return (f'<div {head(" sd-live")} data-state="running">'
                f'<div class="sd-speedup-value">{esc(fmt_speedup(live))}</div>'
                '<div class="sd-speedup-label">live decode speedup</div></div>')
    state = "running" if running else "idle"
    sub = "speedup at the finish" if running else "speedup (decode tokens/s)"
    return (f'<div {head()} data-state="{state}">'
            f'<div class="sd-speedup-value">{esc(PENDING if running else "—")}</div>'
            f'<div class="sd-speedup-label">{esc(sub)}</div></div>')


def session_speedup_html(name: str | None, arm: ArmSession | None, landed: int, total: int) -> str:
    """The headline of a session (a multi-turn preset), an arm's (``name``) or the pair's (None): its
    decode speedup over every turn landed so far, labelled "N of M turns"; final (exact figure in
    data-value) once every turn has landed; n/a with the reason."""
    arm_attr = f' data-arm="{esc(name)}"' if name is not None else ""
    cls = "sd-speedup sd-arm-speedup" if name is not None else "sd-speedup"
    state = "final" if landed == total else "running"
    turns = f"{landed} of {total} turns"
    if arm is None or arm.speedup is None:
        reason = (arm.na_reasons.get("speedup") if arm is not None else None) or "no turn landed yet"
        return (f'<div class="{cls}"{arm_attr} data-state="na" data-session="{landed}">'
                f'<div class="sd-speedup-value sd-na">{esc(NA)}</div>'
                f'<div class="sd-speedup-label">{esc(f"session, {turns}: {reason}")}</div></div>')
    return (f'<div class="{cls} {speedup_class(arm.speedup)}"{arm_attr} data-state="{state}" '
            f'data-session="{landed}" data-value="{esc(repr(arm.speedup))}">'
            f'<div class="sd-speedup-value">{esc(fmt_speedup(arm.speedup))}</div>'
            f'<div class="sd-speedup-label">{esc(f"session decode speedup · {turns}")}</div></div>')


def session_status_text(session: SessionResult) -> str:
    """A session's words in its final status line: the turns that landed, and that the saved run is the last's."""
    return f"session: {session.landed} of {session.turns_total} turns"


def turns_strip_html(session: SessionResult | None, racing: int | None = None,
                     labels: dict[str, str] | None = None) -> str:
    """A session's per-turn strip under the headline: a column per turn (its number and label), a
    row per arm: the turn's decode speedup, acceptance and tokens per step as each turn lands (exact
    speedup in data-value), "≠" where its answer differs from the baseline's; the turn ``racing``
    marked. Empty for a race that is not a session."""
    if session is None:
        return '<div class="sd-turns" data-turns="0"></div>'
    labels = labels or {}
    landed = {t.index: t for t in session.turns}
    names = list(session.turns[0].race.arms) if session.turns else list(labels)
    marked = ' data-racing="true"'
    head = "".join(
        f'<th data-turn="{i}"{marked if i == racing and i not in landed else ""}>'
        f"{i}{esc(' · ' + label) if (label := (session.labels[i - 1:i] or [''])[0]) else ''}</th>"
        for i in range(1, session.turns_total + 1))
    rows = []
    for name in names:
        cells = []
        for i in range(1, session.turns_total + 1):
            turn = landed.get(i)
            arm = turn.race.arms.get(name) if turn is not None else None
            if arm is None:
                text = PENDING if i == racing else ""
                cells.append(f'<td data-turn="{i}" data-state="{"running" if i == racing else "pending"}">'
                             f"{esc(text)}</td>")
                continue
            if turn is not None and turn.race.outcome != "done":  # stopped, or a side failed: no figures
                word = "stopped" if turn.race.outcome == "stopped" else "failed"
                why = arm.side.error or turn.race.baseline.error or word
                cells.append(f'<td data-turn="{i}" data-state="{turn.race.outcome}" title="{esc(why)}">'
                             f"{esc(word)}</td>")
                continue
            spec = arm.side.spec
            speed = fmt_speedup(arm.speedup) or na_label(arm.na_reasons.get("speedup"))
            value = f' data-value="{esc(repr(arm.speedup))}"' if arm.speedup is not None else ""
            acc = fmt_percent(spec.acceptance_rate if spec else None) or NA
            steps = fmt_length(spec.mean_acceptance_length if spec else None) or NA
            differs = ('<span class="sd-turn-differs" title="the answer differs from the baseline&#x27;s">≠</span>'
                       if arm.identical_text is False else "")
            cells.append(f'<td data-turn="{i}" data-state="landed"{value} data-identical="{arm.identical_text}">'
                         f'<span class="sd-turn-speedup">{esc(speed)}</span>{differs}'
                         f'<span class="sd-turn-acc">{esc(acc)} · {esc(steps)}/step</span></td>')
        rows.append(f'<tr data-arm="{esc(name)}"><th>{esc(labels.get(name, name))}</th>{"".join(cells)}</tr>')
    return (f'<div class="sd-turns" data-turns="{session.landed}" data-total="{session.turns_total}">'
            f'<table><thead><tr><th>turn</th>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>'
            '<div class="sd-turns-legend">per turn: decode speedup, acceptance · tokens per step</div></div>')


def reference_speedup_html() -> str:
    """The baseline pane's line in a race of several arms, where each arm's pane has its headline:
    "1×, the reference", so the panes stay aligned."""
    return ('<div class="sd-speedup sd-arm-speedup" data-state="reference">'
            '<div class="sd-speedup-value">1×</div>'
            '<div class="sd-speedup-label">the reference</div></div>')


def loop_note_html(result: RaceResult) -> str:
    """Under the speedup when an answer ends in a loop (demo.measure.repetition): the model stuck,
    not the method working. Empty otherwise."""
    loops = [(side, r.repetition) for side, r in (("baseline", result.baseline), ("speculative", result.speculative))
             if r.repetition is not None]
    if not loops:
        return ""
    side, rep = max(loops, key=lambda sr: sr[1].tail_chars)
    tokens = f", {rep.tail_tokens} tokens" if rep.tail_tokens is not None else ""
    detail = (f"{side}'s answer ends in “{rep.unit.strip() or rep.unit}” repeated {rep.repeats:.0f} times "
              f"({rep.share:.0%} of it{tokens})")
    return (f'<div class="sd-loop" data-loop="{esc(side)}" title="{esc(detail)}">⟳ {esc(LOOP_NOTE)}'
            f'<div class="sd-loop-detail">{esc(detail)}</div></div>')


MAX_STOP_SHOWN_CHARS = 60  # a stop list longer than this is cut in the sampling line (the saved run has it all)
_RESPONSE_FORMAT_WORDS = {"json_object": "JSON object", "text": "free text (response_format text)"}


def sampling_text(req: RaceRequest) -> str:
    """The sampling a request was sent with, as one short line of plain text (escape it before HTML,
    as every caller does): ``T=0 · top_p 0.9 · stop ['\\n\\n'] · JSON schema 'record'``. Only the
    fields that were set, in the order they are sent (a field not set was not sent: the server's
    default applied); the stop list and the schema's name as Python writes them (escapes visible,
    one line), the stop list cut at MAX_STOP_SHOWN_CHARS. The one place the page, the Replay tab,
    the exported page and the CLI's table say it."""
    parts = [f"T={req.temperature:g}"]
    for name in ("top_p", "top_k", "min_p"):
        if (value := getattr(req, name)) is not None:
            parts.append(f"{name} {value:g}")
    if req.stop:
        stop = repr(req.stop)
        parts.append("stop " + (stop if len(stop) <= MAX_STOP_SHOWN_CHARS else stop[:MAX_STOP_SHOWN_CHARS - 1] + "…"))
    for name in ("presence_penalty", "frequency_penalty", "repetition_penalty"):
        if (value := getattr(req, name)) is not None:
            parts.append(f"{name} {value:g}")
    if req.seed is not None:
        parts.append(f"seed {req.seed}")
    rf = req.response_format
    if rf is not None:
        parts.append(f"JSON schema {rf.json_schema.name!r}" if rf.json_schema is not None
                     else _RESPONSE_FORMAT_WORDS.get(rf.type, rf.type))
    return " · ".join(parts)


def sampling_note(req: RaceRequest) -> str:
    """`` (sent to both sides: <sampling_text>)`` when ``req`` sets a seed or a sampling field beyond
    temperature and max tokens (what a preset's "what to expect" line adds), else ''. Plain text."""
    if req.seed is None and not sampling_body(req):
        return ""
    return f" (sent to both sides: {sampling_text(req)})"


def cpu_arms_order_note(arms: int) -> str:
    """Why a race of several arms on CPU servers is sequential by default (the page says it)."""
    return (f"Sequential by default: the baseline and the {arms} speculative servers run on CPU cores of one "
            "machine, so a simultaneous race would measure them sharing the cores, not the methods.")


def order_html(order: Order, why: str | None = None) -> str:
    """The order's label and what it means; ``why`` says why the page defaults to it (a race of
    several arms on CPU servers: demo.live.request.default_order)."""
    why_html = f'<div class="sd-order-why" role="note">{esc(why)}</div>' if why else ""
    return (f'<div class="sd-mode" data-order="{esc(order)}">'
            f'<div class="sd-mode-label">{esc(ORDER_LABELS[order])}</div>'
            f'<div class="sd-mode-note">{esc(ORDER_NOTES[order])}</div>{why_html}</div>')


def identical_badge_html(result: RaceResult | None, arm: str | None = None) -> str:
    """Under greedy decoding, the proof that speculation is lossless (or where it is not). With
    ``arm`` (a race of several arms), that arm's against the baseline, labelled with its name."""
    attr = f' data-arm="{esc(arm)}"' if arm is not None else ""
    if result is None or (arm is not None and arm not in result.arms):
        return f'<div class="sd-badge sd-badge-idle" data-identical="pending"{attr}></div>'
    if arm is None:
        identical, at, spec_text = result.identical_text, result.first_difference, result.speculative.text
        reason = result.na_reasons.get("identical_text")
    else:
        one = result.arms[arm]
        identical, at, spec_text = one.identical_text, one.first_difference, one.side.text
        reason = one.na_reasons.get("identical_text")
    if result.request.temperature > 0:
        return (f'<div class="sd-badge sd-badge-neutral" data-identical="not-compared"{attr}>'
                f"Sampling at T={result.request.temperature:g}: outputs are expected to differ</div>")
    if identical is None:
        return (f'<div class="sd-badge sd-badge-neutral" data-identical="na"{attr}>'
                f"Identical outputs: {esc(na_label(reason or 'a side did not finish'))}</div>")
    if identical:
        return (f'<div class="sd-badge sd-badge-ok" data-identical="true"{attr}>'
                '✓ Identical outputs<div class="sd-badge-sub">lossless: only the speed changed</div></div>')
    if at is None:  # the same text: the tool calls differ (name or arguments)
        return (f'<div class="sd-badge sd-badge-warn" data-identical="false"{attr}>'
                f"✗ Tool calls differ{_calls_diff_html(result, arm)}</div>")
    where = f" at character {at}"
    ctx = ""
    if at is not None:
        a = result.baseline.text[max(0, at - 12): at + 12]
        b = spec_text[max(0, at - 12): at + 12]
        ctx = (f'<div class="sd-diff"><span>baseline: “{esc(a)}”</span>'
               f'<span>{esc(arm or "speculative")}: “{esc(b)}”</span></div>')
    return (f'<div class="sd-badge sd-badge-warn" data-identical="false"{attr}>'
            f"✗ Outputs differ{esc(where)}{ctx}</div>")


def session_badge_html(session: SessionResult, arm: str | None = None) -> str:
    """A session's identical-output badge (``arm``: an arm's, in a race of several; None: the first
    arm's): which turns' answers differed from the baseline's, when any did (the per-turn strip marks
    them ≠); else the last turn's badge (identical, sampled, or n/a), as a race's."""
    last = session.turns[-1].race if session.turns else None
    name = arm if arm is not None else (next(iter(last.arms)) if last is not None else None)
    differ = [t.index for t in session.turns
              if name in t.race.arms and t.race.arms[name].identical_text is False]
    if last is None or not differ or last.request.temperature > 0:
        return identical_badge_html(last, arm)
    attr = f' data-arm="{esc(arm)}"' if arm is not None else ""
    which = ", ".join(str(i) for i in differ)
    return (f'<div class="sd-badge sd-badge-warn" data-identical="false" data-turns="{esc(which)}"{attr}>'
            f"✗ Outputs differ in turn{'s' if len(differ) > 1 else ''} {esc(which)}"
            '<div class="sd-badge-sub">each side carried its own answer on (≠ in the strip)</div></div>')


def _calls_diff_html(result: RaceResult, arm: str | None) -> str:
    """The two sides' tool calls, one line each (name and arguments), escaped."""
    spec = result.speculative if arm is None else result.arms[arm].side

    def line(calls: Sequence[ToolCall]) -> str:
        return "; ".join(c.signature() for c in calls) or "no call"

    return (f'<div class="sd-diff"><span>baseline: “{esc(line(result.baseline.tool_calls))}”</span>'
            f'<span>{esc(arm or "speculative")}: “{esc(line(spec.tool_calls))}”</span></div>')


def spec_pane_title(method: str | None, k: int | None) -> str:
    """'Speculative (ngram, k=4)'; an unknown part reads n/a (spec_title_note says why)."""
    kk = f"k={k}" if k is not None else "k n/a"
    return f"Speculative ({method or NA}, {kk})"


def spec_title_note(method: str | None, k: int | None) -> str | None:
    """Why a part of the speculative title is n/a, or None when both are known."""
    why = []
    if not method:
        why.append("method not reported by vLLM: set SPECDEMO_SPEC_METHOD")
    if k is None:
        why.append("k: set SPECDEMO_SPEC_NUM_TOKENS, or run once")
    return "; ".join(why) or None


def pane_title_html(title: str, note: str | None = None) -> str:
    """One line, never wrapping (the panes must stay aligned); the n/a reason in small print."""
    small = f' <span class="sd-pane-note">n/a: {esc(note)}</span>' if note else ""
    hover = esc(title + (f" (n/a: {note})" if note else ""))
    return f'<div class="sd-pane-title" title="{hover}">{esc(title)}{small}</div>'


def run_status_html(state: str, detail: str = "", text: str | None = None) -> str:
    """Page-level status: idle | waiting | running | done | stopped | error, in the state's own
    words unless ``text`` says it (the Evaluate tab's)."""
    text = text if text is not None else {
        "idle": "Ready: pick a preset and press Start",
        "waiting": "Waiting for a free race slot…",
        "running": "Racing…",
        "done": "Finished",
        "stopped": "Stopped: both requests were aborted",
        "error": "Failed",
    }.get(state, state)
    extra = f' <span class="sd-run-detail">{esc(detail)}</span>' if detail else ""
    return f'<div class="sd-run-status" data-state="{esc(state)}">{esc(text)}{extra}</div>'
