"""Table cells for report.html: the rounded figure shown, the exact one in ``data-value`` (tests
compare the page with results.json without rounding); n/a when unknown."""

from __future__ import annotations

from demo.fmt import esc, fmt_percent


def num_td(v: float | int | None, fmt: str, unit: str = "") -> str:
    """A table cell: the rounded figure shown, the exact one in data-value; n/a when unknown."""
    if v is None:
        return '<td class="na">n/a</td>'
    return f'<td data-value="{esc(repr(v))}">{esc(format(v, fmt))}{esc(unit)}</td>'


def pct_td(v: float | None) -> str:
    return '<td class="na">n/a</td>' if v is None else f'<td data-value="{esc(repr(v))}">{fmt_percent(v)}</td>'


def ms_td(v: float | None) -> str:
    if v is None:
        return '<td class="na">n/a</td>'
    ms = v * 1000
    return f'<td data-value="{esc(repr(v))}">{ms:.{1 if ms < 10 else 0}f} ms</td>'
