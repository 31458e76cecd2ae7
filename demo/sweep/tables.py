"""Table cells for report.html: the rounded figure shown, the exact one in ``data-value`` (tests
compare the page with results.json without rounding); n/a when unknown."""

from __future__ import annotations

import json

from demo.fmt import esc, fmt_percent
from demo.sweep.schedule import BATCH_NOTE, NoRecommendation, Recommendation, config_json


def num_td(v: float | int | None, fmt: str, unit: str = "") -> str:
    """A table cell: the rounded figure shown, the exact one in data-value; n/a when unknown."""
    if v is None:
        return '<td class="na">n/a</td>'
    return f'<td data-value="{esc(repr(v))}">{esc(format(v, fmt))}{esc(unit)}</td>'


def pct_td(v: float | None) -> str:
    """A table cell for a fraction shown as a percentage; "n/a" for None."""
    return '<td class="na">n/a</td>' if v is None else f'<td data-value="{esc(repr(v))}">{fmt_percent(v)}</td>'


def ms_td(v: float | None) -> str:
    """A table cell for seconds shown in ms (one decimal below 10 ms); "n/a" for None."""
    if v is None:
        return '<td class="na">n/a</td>'
    ms = v * 1000
    return f'<td data-value="{esc(repr(v))}">{ms:.{1 if ms < 10 else 0}f} ms</td>'


def schedule_html(rec: Recommendation | NoRecommendation | None) -> str:
    """The recommended schedule (demo/sweep/schedule.py) as escaped HTML: its one line, a row per band
    with the figures behind it, and the ready --speculative-config; or why there is none. Computes nothing."""
    if rec is None:
        return ""
    if isinstance(rec, NoRecommendation):
        return f'<div class="sd-schedule" data-schedule=""><p>Recommended schedule: n/a ({esc(rec.reason)})</p></div>'
    rated = any(b.rates_requests_per_s for b in rec.bands)  # an open-loop sweep's: the rates behind each band

    def seen(rates: list[float]) -> str:
        return f'<td>{esc(", ".join(f"{r:g}" for r in rates) or "n/a")}</td>' if rated else ""
    rows = "".join(
        f'<tr data-k="{b.k}"><td>{b.users_from}-{b.users_to}</td>{seen(b.rates_requests_per_s)}<td>{b.k}</td>'
        f'<td class="l">{esc(b.server)}</td>'
        f'{num_td(b.per_user_decode_tokens_per_s, ".1f")}{num_td(b.baseline_tokens_per_s, ".1f")}'
        f'<td class="l">{esc(b.why)}</td></tr>' for b in rec.bands)
    schedule = json.dumps(rec.speculative_config.get("num_speculative_tokens_per_batch_size"), separators=(",", ":"))
    return (f'<div class="sd-schedule" data-schedule="{esc(schedule)}"><p class="sd-schedule-line">{esc(rec.text)}</p>'
            f'<p class="sd-schedule-adaptive">{esc(rec.adaptive_text)}</p>'
            '<table><tr><th>users (batch size)</th>'
            + ('<th>seen at (req/s)</th>' if rated else '') + '<th>k</th><th class="l">from</th><th>per-user tok/s</th>'
            f'<th>baseline tok/s</th><th class="l">why</th></tr>{rows}</table>'
            f'<p class="muted">{esc(BATCH_NOTE)}. Configured but off: {esc(rec.configured_but_off.text)}</p>'
            + "".join(f'<p class="muted">Note: {esc(n)}</p>' for n in rec.notes) +
            f'<p><code>--speculative-config {esc(config_json(rec))}</code></p></div>')
