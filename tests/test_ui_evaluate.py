"""The Evaluate tab's upload handling, without a browser: the CLI's loader behind it, one-line
errors, the page's batch count, and what the tab shows (escaped)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from demo.settings import Settings
from demo.sweep.cli import make_spec
from demo.ui import evaluate_tab
from demo.workload import WorkloadError


def _jsonl(path: Path, n: int) -> Path:
    path.write_text("".join(json.dumps({"id": f"r{i}", "prompt": f"p <b>{i}</b>"}) + "\n" for i in range(n)),
                    encoding="utf-8")
    return path


def test_no_upload_is_no_workload() -> None:
    assert evaluate_tab.load_upload(None, Settings()) == (None, [])


def test_jsonl_with_a_bad_line_loads_the_rest_and_lists_it(tmp_path: Path) -> None:
    f = _jsonl(tmp_path / "w.jsonl", 3)
    f.write_text(f.read_text() + "{not json\n", encoding="utf-8")
    workload, lines = evaluate_tab.load_upload(str(f), Settings())
    assert workload is not None and len(workload.requests) == 3
    assert len(lines) == 1 and lines[0].startswith("skipped w.jsonl:4: ")
    html = evaluate_tab.upload_status_html(workload, lines)
    assert 'data-requests="3"' in html and "w: 3 request(s) loaded." in html and "skipped w.jsonl:4" in html


def test_sample_and_seed_are_the_clis(tmp_path: Path) -> None:
    f = _jsonl(tmp_path / "w.jsonl", 20)
    a, _ = evaluate_tab.load_upload(str(f), Settings(), 5, 3)
    b, _ = evaluate_tab.load_upload(str(f), Settings(), 5, 3)
    c, _ = evaluate_tab.load_upload(str(f), Settings(), 0, 3)  # 0: every request
    assert a is not None and b is not None and c is not None
    assert [r.id for r in a.requests] == [r.id for r in b.requests] and len(a.requests) == 5
    assert a.sample is not None and a.sample.of_requests == 20 and c.sample is None and len(c.requests) == 20
    assert "a sample of 5 drawn with seed 3 from 20" in evaluate_tab.upload_status_html(a, [])
    with pytest.raises(WorkloadError, match="Sample N must be 0"):
        evaluate_tab.load_upload(str(f), Settings(), -1, 0)


def test_one_text_prompt_is_a_workload_of_one(tmp_path: Path) -> None:
    f = tmp_path / "ask.md"
    f.write_text("Summarize this", encoding="utf-8")
    workload, lines = evaluate_tab.load_upload(str(f), Settings())
    assert workload is not None and [r.id for r in workload.requests] == ["ask.md"] and lines == []
    assert workload.requests[0].prompt_text == "Summarize this"
    bad = tmp_path / "latin.txt"
    bad.write_bytes("caf\u00e9".encode("latin-1"))
    with pytest.raises(WorkloadError) as e:
        evaluate_tab.load_upload(str(bad), Settings())
    assert "\n" not in str(e.value) and "latin.txt" in str(e.value)


def test_the_loaders_limits_hold(tmp_path: Path) -> None:
    f = _jsonl(tmp_path / "w.jsonl", 50)
    with pytest.raises(WorkloadError, match="over the"):
        evaluate_tab.load_upload(str(f), Settings(workload_max_bytes=100))
    wrong = tmp_path / "w.csv"
    wrong.write_text("question\nhi\n", encoding="utf-8")
    with pytest.raises(WorkloadError) as e:
        evaluate_tab.load_upload(str(wrong), Settings())
    html = evaluate_tab.upload_error_html(e.value)
    assert 'data-error="true"' in html and "w.csv" in html and "\n" not in str(e.value)


def test_escaped_error_and_status(tmp_path: Path) -> None:
    html = evaluate_tab.upload_error_html(WorkloadError("<img src=x onerror=alert(1)>.csv: bad"))
    assert "<img" not in html and "&lt;img" in html
    f = tmp_path / "<b>.jsonl"
    _jsonl(f, 1)
    workload, _ = evaluate_tab.load_upload(str(f), Settings())
    html = evaluate_tab.upload_status_html(workload, ["skipped <i>x</i>"])
    assert "<b>" not in html and "<i>" not in html and "&lt;b&gt;: 1 request(s)" in html


def test_the_page_counts_a_workload_cell_by_its_rounds(tmp_path: Path) -> None:
    settings = Settings()
    workload, _ = evaluate_tab.load_upload(str(_jsonl(tmp_path / "w.jsonl", 5)), settings)
    spec = make_spec(settings, ["poetry"], "1,2", "", 1, 0, 20, workload=workload)
    # poetry: 2 cells x 1 round; the workload: 5 rounds at c=1, 3 at c=2; x 2 sides x 1 repeat
    assert evaluate_tab.batches_of(spec, workload) == (2 + 5 + 3) * 2
    assert evaluate_tab.batches_of(spec, None) == 2 * 2
