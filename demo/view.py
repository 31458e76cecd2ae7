"""Pure formatting: snapshots and results in, strings and escaped HTML out.

The page shows exactly what the measurement core computed (demo/measure.py, demo/race.py);
this module only rounds numbers for display and builds markup. No Gradio here, so every
function is unit-tested on its own. Model output and preset text are untrusted: everything
that did not come from this file goes through ``esc`` (demo/fmt.py) before it lands in HTML. Each
shown figure also carries its exact value in ``data-value`` so tests can compare the page
with the saved RaceResult without rounding.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel

from demo.agent_race import ArmSession, SessionResult
from demo.fmt import NA, csv_cell, esc, fmt_int, fmt_length, fmt_percent, fmt_rate, fmt_seconds, fmt_speedup, or_na
from demo.load.engine import LoadSide, LoadStep, UsersRace
from demo.measure import LOOP_NOTE
from demo.results import (
    ArmResult,
    ArmSnapshot,
    Order,
    RaceRequest,
    RaceResult,
    RaceSnapshot,
    Side,
    SideResult,
    SideSnapshot,
    StreamProgress,
    ToolCall,
)
from demo.sampling import sampling_body
from demo.server_info import ServerInfo, down_message

PENDING = "…"

ORDER_LABELS: dict[str, str] = {
    "simultaneous": "Simultaneous race",
    "sequential": "Sequential A/B",
}
ORDER_NOTES: dict[str, str] = {
    "simultaneous": "Both servers run at the same time. On one GPU they compete for it, "
    "so both speeds are understated; sequential A/B is the fair comparison.",
    "sequential": "Baseline first, then speculative, same prompt: each server has the "
    "machine to itself. The fair comparison.",
}


def na_label(reason: str | None) -> str:
    """'n/a (reason)', or plain 'n/a' when nobody said why."""
    return f"{NA} ({reason})" if reason else NA


# ---------------------------------------------------------------- tiles

TileKey = Literal[
    "tokens_per_s", "ttft_s", "elapsed_s", "tokens", "acceptance_rate", "mean_acceptance_length",
    # an N-user race's (demo.load.engine.LoadSide's figures)
    "per_user_decode_tokens_per_s", "output_tokens_per_s", "ttft_p95_s", "itl_p95_s",
    "num_requests_waiting_peak", "kv_cache_usage_peak_perc", "num_preemptions",
]


class Tile(BaseModel):
    """One figure's tile: its key, label, shown text and unit, the exact value behind it, a small note.

    The note is an n/a reason, "live" or "final".
    """

    key: TileKey
    label: str
    text: str  # the big figure as shown ("97.3", "n/a", "…")
    unit: str = ""
    value: float | int | None = None  # exact figure behind the text, for data-value
    note: str | None = None  # small line under the figure: an n/a reason, "live", "final"


def _tile(key: TileKey, label: str, unit: str, value: float | int | None, text: str | None,
          *, pending: bool, reason: str | None, note: str | None = None) -> Tile:
    if text is not None:
        return Tile(key=key, label=label, text=text, unit=unit, value=value, note=note)
    if pending:
        return Tile(key=key, label=label, text=PENDING, unit="", note=note)
    return Tile(key=key, label=label, text=NA, unit="", note=reason or "not reported")


def _reason(result: SideResult | None, field: str) -> str | None:
    if result is None:
        return None
    if field in result.na_reasons:
        return result.na_reasons[field]
    if result.error:
        return "the request failed"
    return None


def _spec_reason(result: SideResult | None, field: str) -> str | None:
    if result is None:
        return None
    spec = result.spec
    if spec is None:
        return result.na_reasons.get("spec") or _reason(result, field) or "no speculative metrics"
    return spec.na_reasons.get(field) or spec.note or _reason(result, field)


def side_tiles(snap: SideSnapshot, result: SideResult | None, speculative: bool) -> list[Tile]:
    """The tiles of one pane: live figures from the snapshot, final ones from the result."""
    live = result is None
    pending = live and snap.status in ("queued", "waiting", "streaming")
    note = "live" if live and snap.status == "streaming" else None
    elapsed: float | None
    if result is None:
        rate, ttft, elapsed, tokens = snap.tokens_per_s, snap.ttft_s, snap.elapsed_s, snap.completion_tokens
    else:
        rate, ttft, elapsed, tokens = (
            result.decode_tokens_per_s, result.ttft_s, result.e2e_s, result.completion_tokens)
    tiles = [
        _tile("tokens_per_s", "tokens/s", "", rate, fmt_rate(rate), pending=pending,
              reason=_reason(result, "decode_tokens_per_s"), note=note),
        _tile("ttft_s", "first token", "", ttft, fmt_seconds(ttft), pending=pending,
              reason=_reason(result, "ttft_s")),
        _tile("elapsed_s", "elapsed", "", elapsed, fmt_seconds(elapsed), pending=pending,
              reason=_reason(result, "e2e_s")),
        _tile("tokens", "tokens", "", tokens, fmt_int(tokens), pending=pending,
              reason=_reason(result, "completion_tokens")),
    ]
    if speculative:
        spec = result.spec if result is not None else None
        rate_a = spec.acceptance_rate if spec else None
        length = spec.mean_acceptance_length if spec else None
        # Acceptance is known only once the server's per-request metrics (or the
        # /metrics delta) arrive at the end: until then it is pending, not n/a.
        tiles += [
            _tile("acceptance_rate", "acceptance", "", rate_a, fmt_percent(rate_a),
                  pending=live and snap.status != "error" and snap.status != "cancelled",
                  reason=_spec_reason(result, "acceptance_rate") or "known at the end"),
            _tile("mean_acceptance_length", "tokens / step", "", length, fmt_length(length),
                  pending=live and snap.status != "error" and snap.status != "cancelled",
                  reason=_spec_reason(result, "mean_acceptance_length") or "known at the end"),
        ]
    return tiles


STEP_PENDING = "at the step's end"


def users_tiles(figures: LoadSide | None) -> list[Tile]:
    """The tiles of one pane in an N-user race: the side's step figures (None: the step still
    runs, every tile pending), each n/a with the step's reason."""
    pending = figures is None

    def tile(key: TileKey, label: str, value: float | int | None, text: str | None, note: str | None = None) -> Tile:
        reason = figures.na_reasons.get(key) if figures is not None else None
        # Pending, only the first tile says until when (the headline says it too).
        first = key == "per_user_decode_tokens_per_s"
        return _tile(key, label, "", value, text, pending=pending, reason=reason,
                     note=(STEP_PENDING if first else None) if pending else note)

    f = figures or LoadSide(side="baseline", users=0)
    lo, hi = f.per_user_decode_tokens_per_s_min, f.per_user_decode_tokens_per_s_max
    spread = f"{fmt_rate(lo)}-{fmt_rate(hi)} (min-max)" if lo is not None and hi is not None else None
    queue = f.num_requests_waiting_peak
    return [
        tile("per_user_decode_tokens_per_s", "per-user tok/s", f.per_user_decode_tokens_per_s,
             fmt_rate(f.per_user_decode_tokens_per_s), spread or "median over users"),
        tile("output_tokens_per_s", "total tok/s", f.output_tokens_per_s, fmt_rate(f.output_tokens_per_s)),
        tile("ttft_p95_s", "TTFT p95", f.ttft_p95_s, fmt_seconds(f.ttft_p95_s)),
        tile("itl_p95_s", "ITL p95", f.itl_p95_s, fmt_seconds(f.itl_p95_s)),
        tile("num_requests_waiting_peak", "queue peak", queue, None if queue is None else f"{queue:.0f}"),
        tile("kv_cache_usage_peak_perc", "KV peak", f.kv_cache_usage_peak_perc,
             fmt_percent(f.kv_cache_usage_peak_perc)),
        tile("num_preemptions", "preemptions", f.num_preemptions, fmt_int(f.num_preemptions)),
    ]


def users_tiles_html(side: Side, figures: LoadSide | None) -> str:
    """users_tiles as markup, in the compact grid of an N-user pane."""
    return f'<div class="sd-users-tiles">{tiles_html(side, users_tiles(figures))}</div>'


def users_step_html(side: Side, run: UsersRace) -> str:
    """A saved N-user race's step figures for one side (replay, export): every user's, under a
    label saying the text is user 1's."""
    return (f'<div class="sd-users-step" data-users="{run.users}">{run.users} users: the step\'s figures '
            "(the text is user 1's)</div>" + users_tiles_html(side, getattr(run.step, side)))


def users_strip_html(side: Side, users: list[StreamProgress | None], max_tokens: int) -> str:
    """Every user's progress at a glance: one small bar per user (tokens so far out of
    max_tokens; done, error, stopped), and a count; user 1's answer is the pane's text."""
    counts: dict[str, int] = {}
    cells = []
    for i, p in enumerate(users):
        status = p.status if p is not None else "waiting"
        tokens = p.completion_tokens if p is not None else None
        counts[status] = counts.get(status, 0) + 1
        share = min(1.0, (tokens or 0) / max_tokens) if max_tokens > 0 else 0.0
        shown = "?" if tokens is None and status != "waiting" else str(tokens or 0)
        cells.append(f'<i class="sd-u sd-u-{esc(status)}" data-user="{i + 1}" data-status="{esc(status)}" '
                     f'data-tokens="{"" if tokens is None else tokens}" style="--p:{share:.0%}" '
                     f'title="user {i + 1}: {shown}/{max_tokens} tokens, {esc(status)}"></i>')
    summary = ", ".join(f"{n} {state}" for state, n in counts.items())
    return (f'<div class="sd-users" data-side="{esc(side)}" data-users="{len(users)}">'
            f'<div class="sd-users-label">{len(users)} users: {esc(summary)} · the text below is user 1\'s</div>'
            f'<div class="sd-users-bars">{"".join(cells)}</div></div>')


def tiles_html(side: Side, tiles: list[Tile]) -> str:
    """A pane's tiles as escaped HTML; a final figure carries its exact value in data-value."""
    parts = [f'<div class="sd-tiles" data-side="{esc(side)}">']
    for t in tiles:
        # The exact figure goes in data-value once it is final. A live one would change in every
        # frame, and the browser would redraw the tile each time although its text had not.
        live = " sd-live" if t.note == "live" else ""
        value_attr = "" if t.value is None or live else f' data-value="{esc(repr(t.value))}"'
        note = f'<div class="sd-tile-note{live}" title="{esc(t.note)}">{esc(t.note)}</div>' if t.note else ""
        unit = f'<span class="sd-unit">{esc(t.unit)}</span>' if t.unit else ""
        na_class = " sd-na" if t.text == NA else ""
        parts.append(
            f'<div class="sd-tile{na_class}" data-key="{esc(t.key)}" data-side="{esc(side)}"{value_attr}>'
            f'<div class="sd-tile-label">{esc(t.label)}</div>'
            f'<div class="sd-tile-value">{esc(t.text)}{unit}</div>{note}</div>'
        )
    parts.append("</div>")
    return "".join(parts)


def side_status_html(side: Side, snap: SideSnapshot, quiet_s: float | None = None,
                     timeout_s: float | None = None, who: str | None = None, note: str | None = None) -> str:
    """One line over the text: state, and the error in full when the side failed. With
    ``quiet_s`` (seconds without a new token, as the page saw it) a running side says it is
    waiting on the server, so a stall never looks like a frozen page; ``note`` is said in its
    place (demo.live.status: the server says it is working). ``who`` names the pane in an error
    (an arm's name in a race of several; default: the side)."""
    if snap.status == "cancelled":  # stopped on purpose: said plainly, not as a failure
        return (f'<div class="sd-side-status sd-status-cancelled" data-side="{esc(side)}">'
                f'stopped: {esc(snap.error or "before the answer finished")}</div>')
    if snap.error:
        return (f'<div class="sd-side-error" role="alert" data-side="{esc(side)}">'
                f'<b>{esc(who or side.capitalize())} failed:</b> {esc(snap.error)}</div>')
    labels = {"queued": "waiting its turn (not sent yet)", "waiting": "waiting for the first token…",
              "streaming": "streaming",
              "done": "done", "cancelled": "stopped", "error": "failed"}
    label = labels.get(snap.status, snap.status)
    if quiet_s is not None and snap.status in ("waiting", "streaming"):
        if note is not None:
            label = note
        else:
            label += f" — nothing from the server for {quiet_s:.0f} s"
            if timeout_s is not None:
                label += f" (gives up after {timeout_s:g} s)"
        return (f'<div class="sd-side-status sd-status-quiet" data-side="{esc(side)}">'
                f'{esc(label)}</div>')
    return (f'<div class="sd-side-status sd-status-{esc(snap.status)}" data-side="{esc(side)}">'
            f'{esc(label)}</div>')


# ---------------------------------------------------------------- text with burst shading

def burst_class(tokens: int) -> str:
    """CSS class by tokens in one chunk: b1 (one token) ... b5 (five or more), b0 unknown (their
    shading: demo/static/burst.css)."""
    if tokens <= 0:
        return "b0"
    return f"b{min(tokens, 5)}"


def text_html(side: Side, snap: SideSnapshot, shade: bool) -> str:
    """The streamed text, escaped; with ``shade``, each multi-token chunk in a span classed by its
    burst size. Single-token chunks stay plain text: the markup stays small on long answers.

    Append-only while a side streams: the markup ends with the text, no closing tags (the
    browser closes the two divs), so each frame's value starts with the last one's and Gradio
    sends the page only what was added ("append" in its stream diff), not the whole pane."""
    body: list[str] = []
    if snap.bursts:
        for _t, tokens, chunk in snap.bursts:
            if not chunk:
                continue
            if shade and tokens != 1:
                body.append(f'<span class="{burst_class(tokens)}" title="{tokens} tokens in one step">'
                            f"{esc(chunk)}</span>")
            else:
                body.append(esc(chunk))
    elif snap.text:
        body.append(esc(snap.text))
    body.append(tool_calls_html(snap.tool_calls))
    return f'<div class="sd-text" data-side="{esc(side)}"><div class="sd-text-body">{"".join(body)}'


def tool_calls_html(calls: Sequence[ToolCall]) -> str:
    """An answer's tool calls after its text, each a block: its function's name and its arguments'
    JSON as the server streamed it, escaped. Append-only like the text: the last call's block is
    left open, so while its arguments stream each frame only adds to the markup."""
    blocks = [f'<div class="sd-tool-call" data-tool-call="{i}"><span class="sd-tool-call-label">tool call</span> '
              f'<span class="sd-tool-name">{esc(c.name) or NA}</span><code class="sd-tool-args">{esc(c.arguments)}'
              for i, c in enumerate(calls)]
    return "</code></div>".join(blocks)


def burst_legend_html() -> str:
    """The legend of the text's shading: tokens accepted in one verification step, 1 to 5+."""
    cells = "".join(
        f'<span class="{c}">{esc(label)}</span>'
        for c, label in (("b1", "1 token"), ("b2", "2"), ("b3", "3"), ("b4", "4"), ("b5", "5+ per step")))
    return f'<div class="sd-legend">Shading = tokens accepted in one step: {cells}</div>'


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
            f'<div class="sd-speedup-label">{esc(sub)}</div>{loop_note_html(result)}</div>')


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
                f'<div class="sd-speedup-label">{esc(sub)}</div></div>')
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


# ---------------------------------------------------------------- history

class HistoryRow(BaseModel):
    """One row of the Run history table.

    When, preset, order, temperature, each side's tokens/s, speedup, acceptance, identical text, status.
    """

    started_at: str
    preset: str
    order: str
    temperature: float
    baseline_tokens_per_s: float | None
    speculative_tokens_per_s: float | None
    speedup: float | None
    acceptance_rate: float | None
    mean_acceptance_length: float | None
    identical: str
    status: str
    users: int = 1  # an N-user race: its figures are the step's (per-user decode tokens/s, per-user speedup)


HISTORY_HEADERS = ["time (UTC)", "preset", "order", "T", "baseline tok/s", "speculative tok/s",
                   "speedup", "acceptance", "tokens/step", "identical", "status"]


def history_row(result: RaceResult) -> HistoryRow:
    """The Run history row of a finished race (n/a where a figure is unknown)."""
    spec = result.speculative.spec
    identical = {True: "yes", False: "no", None: NA}[result.identical_text]
    status = {"done": "ok"}.get(result.outcome, result.outcome)
    return HistoryRow(
        started_at=result.started_at.strftime("%H:%M:%S"),
        preset=result.preset or "(free prompt)",
        order=ORDER_LABELS[result.order],
        temperature=result.request.temperature,
        baseline_tokens_per_s=result.baseline.decode_tokens_per_s,
        speculative_tokens_per_s=result.speculative.decode_tokens_per_s,
        speedup=result.speedup,
        acceptance_rate=spec.acceptance_rate if spec else None,
        mean_acceptance_length=spec.mean_acceptance_length if spec else None,
        identical=identical,
        status=status,
    )


def users_history_row(run: UsersRace) -> HistoryRow:
    """An N-user race in the history: the step's per-user figures, its order labelled "N users"."""
    race, step = run.race, run.step
    cell = step.cell
    identical = {True: "yes", False: "no", None: NA}[cell.identical_text]
    status = {"done": "ok"}.get(race.outcome, race.outcome)
    return HistoryRow(
        started_at=race.started_at.strftime("%H:%M:%S"), users=run.users,
        preset=race.preset or "(free prompt)",
        order=f"{ORDER_LABELS[race.order]} · {run.users} users",
        temperature=race.request.temperature,
        baseline_tokens_per_s=step.baseline.per_user_decode_tokens_per_s,
        speculative_tokens_per_s=step.speculative.per_user_decode_tokens_per_s,
        speedup=step.speedup, acceptance_rate=cell.acceptance_rate,
        mean_acceptance_length=cell.mean_acceptance_length, identical=identical, status=status,
    )


def history_table(rows: list[HistoryRow]) -> list[list[str]]:
    """Rows for the on-page table: rounded, n/a where unknown, newest first."""
    return [
        [r.started_at, r.preset, r.order, f"{r.temperature:g}", or_na(fmt_rate(r.baseline_tokens_per_s)),
         or_na(fmt_rate(r.speculative_tokens_per_s)), or_na(fmt_speedup(r.speedup)),
         or_na(fmt_percent(r.acceptance_rate)), or_na(fmt_length(r.mean_acceptance_length)), r.identical, r.status]
        for r in reversed(rows)
    ]


def history_csv(rows: list[HistoryRow]) -> str:
    """Full-precision CSV of the session's runs, oldest first."""
    out = io.StringIO()
    fields = list(HistoryRow.model_fields)
    writer = csv.writer(out)
    writer.writerow(fields)
    for r in rows:
        data = r.model_dump()
        writer.writerow([csv_cell(data[f]) for f in fields])
    return out.getvalue()


# ---------------------------------------------------------------- race frame

class PaneView(BaseModel):
    """Everything one pane shows for one snapshot."""

    status_html: str
    tiles_html: str
    text_html: str
    headline_html: str | None = None  # an arm's own headline, in a race of several arms


def pane_key(index: int, name: str) -> str:
    """An arm's pane key (its element ids: ``sd-pane-<key>``): the first arm is "speculative", as
    with one arm; another is its name ("arm-speculative" for a later arm of that name)."""
    if index == 0:
        return "speculative"
    return f"arm-{name}" if name in ("speculative", "baseline") else name


def arm_title(name: str, label: str | None, method: str | None, k: int | None = None) -> str:
    """An arm's pane title in a race of several: 'eagle3 (EAGLE3, k=3)'; what is unknown reads n/a."""
    parts = [method or NA] + ([f"k={k}"] if k is not None else [])
    return f"{label or name} ({', '.join(parts)})"


def saved_pane_titles(result: RaceResult) -> dict[str, str]:
    """Each pane's title (plain text) for a saved race, by pane key (pane_key), in the race's order.

    'Baseline'; then 'Speculative (ngram, k=4)' in a race of one arm, or 'eagle3 (EAGLE3, k=3)'
    for each arm of several: the words the live page uses, from what the run saved. Replay and the
    export take their titles from here.
    """
    arms = list(result.arms.values())
    out = {"baseline": "Baseline"}
    for i, a in enumerate(arms):
        k = a.side.spec.num_spec_tokens if a.side.spec is not None else None
        one = len(arms) == 1
        out[pane_key(i, a.name)] = spec_pane_title(a.method, k) if one else arm_title(a.name, a.label, a.method, k)
    return out


def arm_pane_view(name: str, snapshot: RaceSnapshot) -> PaneView:
    """Everything an arm's pane shows for one snapshot in a race of several arms: its status,
    tiles and text as the speculative pane's, and its own headline against the baseline."""
    arm = snapshot.arms[name]
    result = snapshot.result.arms.get(name) if snapshot.result is not None else None
    side_result = result.side if result is not None else None
    return PaneView(
        status_html=side_status_html("speculative", arm.side, who=arm.label or name),
        tiles_html=tiles_html("speculative", side_tiles(arm.side, side_result, True)),
        text_html=text_html("speculative", arm.side, shade=True),
        headline_html=arm_speedup_html(name, arm, result, running=True),
    )


def arm_left_out_view(name: str, users: int) -> PaneView:
    """An arm's pane while an N-user race runs (a race of several arms): the load engine races the
    first arm only, and the pane says so instead of keeping the last race's figures."""
    note = f"not in this race: {users} users race the first arm only (set Users to 1 to race every arm)"
    return PaneView(
        status_html=f'<div class="sd-side-status sd-status-left-out" data-side="speculative" data-arm="{esc(name)}" '
                    f'title="{esc(note)}">{esc(note)}</div>',
        tiles_html="",
        text_html=(f'<div class="sd-idle" data-side="speculative"><div class="sd-text-body sd-placeholder">'
                   f"{esc(note)}</div></div>"),
        headline_html=(f'<div class="sd-speedup sd-arm-speedup" data-arm="{esc(name)}" data-state="na">'
                       f'<div class="sd-speedup-value sd-na">{esc(NA)}</div>'
                       f'<div class="sd-speedup-label">{esc(f"not raced with {users} users")}</div></div>'),
    )


def pane_view(side: Side, snapshot: RaceSnapshot) -> PaneView:
    """Everything a side's pane shows for one snapshot: its status, tiles and text."""
    snap: SideSnapshot = getattr(snapshot, side)
    result = getattr(snapshot.result, side) if snapshot.result is not None else None
    speculative = side == "speculative"
    return PaneView(
        status_html=side_status_html(side, snap),
        tiles_html=tiles_html(side, side_tiles(snap, result, speculative)),
        text_html=text_html(side, snap, shade=True),
    )


# ---------------------------------------------------------------- servers

def server_banner_html(infos: list[ServerInfo]) -> str:
    """A loud banner for each server that is down, saying what to do; empty when all is well."""
    down = [i for i in infos if not i.healthy]
    if not down:
        return ""
    items = "".join(f"<li>{esc(down_message(i))}</li>" for i in down)
    return f'<div class="sd-banner" role="alert" data-down="{len(down)}"><ul>{items}</ul></div>'


def server_panel_html(infos: list[ServerInfo], grafana_url: str | None = None) -> str:
    """The Servers panel (HTML): each server up or down (and why), its model, method and k, KV cache.

    With ``grafana_url``, a link to the dashboard.
    """
    rows = []
    for i in infos:
        if i.healthy:
            health = '<span class="sd-ok">● up</span>'
        else:
            health = f'<span class="sd-bad">● down</span> {esc(i.error or "")}'
        model = i.model or na_label("unknown")
        if i.max_model_len:
            model += f" · context {i.max_model_len}"
        if i.side == "speculative":
            spec = spec_pane_title(i.spec_method, i.spec_num_tokens).removeprefix("Speculative ")
            if i.spec_source:
                spec += f" from {i.spec_source}"
            note = spec_title_note(i.spec_method, i.spec_num_tokens)
            if note:
                spec += f" (n/a: {note})"
        else:
            spec = "none (baseline)"
        if i.kv_cache_usage_perc is not None:
            kv = fmt_percent(i.kv_cache_usage_perc) or NA
        else:
            kv = na_label(i.metrics_error or ("server down" if not i.healthy else "not reported"))
        rows.append(
            f'<tr data-side="{esc(i.side)}" data-healthy="{str(i.healthy).lower()}">'
            f"<td>{esc(i.arm or i.side)}</td><td>{esc(i.url)}</td><td>{health}</td><td>{esc(model)}</td>"
            f"<td>{esc(spec)}</td><td>{esc(kv)}</td></tr>"
        )
    head = "<tr><th>side</th><th>URL</th><th>health</th><th>model</th><th>speculation</th><th>KV cache</th></tr>"
    link = (f'<p class="sd-grafana"><a href="{esc(grafana_url)}" target="_blank" rel="noopener noreferrer">'
            "Grafana: both servers over time</a></p>") if grafana_url else ""
    return f'<table class="sd-servers">{head}{"".join(rows)}</table>{link}'


def recording_banner_html(result: RaceResult | None, note: str | None = None) -> str:
    """The RECORDING banner over a played-back run; ``note`` is a small line under it (the booth's
    "live again in …")."""
    if result is None:
        return ('<div class="sd-banner sd-recording" data-recording="none">Pick a saved run and press '
                "Play: it is played back at its real timing, labelled as a recording.</div>")
    when = result.started_at.strftime("%Y-%m-%d %H:%M:%S UTC")
    req = result.request
    what = f"{result.preset or 'free prompt'} · {ORDER_LABELS[result.order]} · {sampling_text(req)} · " \
           f"max {req.max_tokens} tokens"
    return (f'<div class="sd-banner sd-recording" role="status" data-recording="true" '
            'style="border:3px solid var(--sd-alert);padding:10px 14px;border-radius:8px;font-size:22px;'
            'font-weight:700">'
            f"● RECORDING of {esc(when)}, not live"
            f'<div style="font-size:15px;font-weight:400">{esc(what)}</div>'
            + (f'<div class="sd-live-again" style="font-size:15px;font-weight:400">{esc(note)}</div>' if note else "")
            + "</div>")
