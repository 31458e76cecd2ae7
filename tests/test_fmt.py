"""The shared display helpers (demo/fmt.py) and the atomic write (common/files.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from pydantic import BaseModel, Field, ValidationError

from common.files import atomic_write
from demo.fmt import (
    TIMES,
    csv_cell,
    esc,
    fmt_number,
    fmt_percent,
    fmt_speedup,
    or_na,
    validation_errors,
    validation_summary,
)


def test_one_symbol_for_times() -> None:
    assert TIMES == "×" and fmt_speedup(2.914) == "2.91×" and fmt_speedup(None) is None


def test_percent_and_numbers() -> None:
    assert fmt_percent(0.734) == "73%" and fmt_percent(0.734, 1) == "73.4%" and fmt_percent(None) is None
    assert fmt_number(0.1234, 3, " s") == "0.123 s" and fmt_number(50) == "50" and fmt_number(None) is None
    assert or_na(None) == "n/a" and or_na("1") == "1"


def test_esc_escapes_text_and_attributes() -> None:
    assert esc('<b a="1">\'&') == "&lt;b a=&quot;1&quot;&gt;&#x27;&amp;"


@pytest.mark.parametrize(("value", "cell"), [
    (None, ""), (1.5, "1.5"), (-2, "-2"), ("-2.5", "-2.5"), ("plain", "plain"),
    ("=cmd|' /C calc'!A0", "'=cmd|' /C calc'!A0"), ("+1+1", "'+1+1"), ("-x", "'-x"), ("@SUM(A1)", "'@SUM(A1)"),
    (True, "True"),
])
def test_csv_cells_neutralise_formulas_but_not_numbers(value: object, cell: str) -> None:
    assert csv_cell(value) == cell


class _M(BaseModel):
    n: int = Field(ge=1)
    name: str


def test_a_validation_error_in_one_line() -> None:
    with pytest.raises(ValidationError) as info:
        _M.model_validate({"n": 0})
    e = info.value
    assert validation_errors(e) == [("n", "Input should be greater than or equal to 1"), ("name", "Field required")]
    assert validation_summary(e) == "n: Input should be greater than or equal to 1"
    assert validation_summary(e, every=True) == "n: Input should be greater than or equal to 1; name: Field required"
    assert "\n" not in validation_summary(e, every=True)


def test_atomic_write_replaces_whole_and_leaves_nothing_behind(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    path.write_text("old")
    atomic_write(path, "néw")
    assert path.read_text(encoding="utf-8") == "néw" and os.listdir(tmp_path) == ["state.json"]
