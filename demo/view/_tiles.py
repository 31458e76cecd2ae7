"""A pane's tiles (live figures from a snapshot, final ones from the result), the N-user strip and the
pane's status line."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel

from demo.fmt import NA, esc, fmt_int, fmt_length, fmt_percent, fmt_rate, fmt_seconds
from demo.load.engine import LoadSide, UsersRace
from demo.results import (
    Side,
    SideResult,
    SideSnapshot,
    StreamProgress,
)
from demo.view._common import PENDING

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
