"""The one home of the small display helpers every surface shares (page, CLI, report, Evaluate tab):
HTML escaping, number / percent / speedup formatting (one symbol for "times": ×), CSV cells, and
a pydantic ValidationError as one line (from common/validation.py, which servers/ shares).
Formatting only: no figure is computed here.
"""

from __future__ import annotations

from html import escape

# Re-exported: every surface of demo/ takes them from here.
from common.validation import validation_errors as validation_errors
from common.validation import validation_summary as validation_summary

NA = "n/a"
TIMES = "×"


def esc(text: object) -> str:
    """Escape anything for HTML text and attribute values (quotes included)."""
    return escape(str(text), quote=True)


# ---------------------------------------------------------------- numbers (None: unknown)


def fmt_rate(tokens_per_s: float | None) -> str | None:
    """Tokens/s for a tile: '245' at 100 and over, '24.5' below; None when unknown."""
    if tokens_per_s is None:
        return None
    return f"{tokens_per_s:.0f}" if tokens_per_s >= 100 else f"{tokens_per_s:.1f}"


def fmt_seconds(seconds: float | None) -> str | None:
    """Seconds for a tile: '734 ms' under a second, '2.41 s' under 10, '12.3 s' above; None when unknown."""
    if seconds is None:
        return None
    if seconds < 1.0:
        return f"{seconds * 1000:.0f} ms"
    return f"{seconds:.2f} s" if seconds < 10 else f"{seconds:.1f} s"


def fmt_int(n: int | None) -> str | None:
    """A count as text; None when unknown."""
    return None if n is None else f"{n:d}"


def fmt_percent(fraction: float | None, digits: int = 0) -> str | None:
    """0.734 -> '73%' (``digits`` after the point)."""
    return None if fraction is None else f"{fraction * 100:.{digits}f}%"


def fmt_length(x: float | None) -> str | None:
    """A mean acceptance length (tokens per step), two decimals: '3.26'; None when unknown."""
    return None if x is None else f"{x:.2f}"


def fmt_speedup(x: float | None) -> str | None:
    """1.734 -> '1.73×'."""
    return None if x is None else f"{x:.2f}{TIMES}"


def fmt_temperature(t: float | None) -> str:
    """'T=0.7', or 'T=own' for a workload file whose requests each carry their own."""
    return "T=own" if t is None else f"T={t:g}"


def fmt_number(v: float | None, digits: int = 2, unit: str = "") -> str | None:
    """A float to ``digits`` after the point, an int as it is, then ``unit`` ('0.12 s', '50')."""
    if v is None:
        return None
    return f"{v:.{digits}f}{unit}" if isinstance(v, float) else f"{v}{unit}"


def or_na(text: str | None) -> str:
    """A formatted figure, or 'n/a' when it is unknown."""
    return NA if text is None else text


# ---------------------------------------------------------------- CSV


def is_number(value: object) -> bool:
    """An int or float, or text that reads as one ('-1.5', '1e3', 'nan')."""
    if isinstance(value, bool):
        return False
    if isinstance(value, int | float):
        return True
    try:
        float(str(value))
    except ValueError:
        return False
    return True


def csv_cell(value: object) -> str:
    """One CSV cell: empty for None; text a spreadsheet would run as a formula (it starts with
    = + - @ and is not a number, e.g. a server's error message) is quoted with a leading '."""
    text = "" if value is None else str(value)
    return "'" + text if text[:1] in ("=", "+", "-", "@") and not is_number(value) else text
