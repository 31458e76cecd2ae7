"""The Evaluate tab's upload handling, without a browser: the CLI's loader behind it, one-line
errors, the page's batch count, and what the tab shows (escaped); the tab's Run handler itself
against stand-ins: a sweep of three arms (every arm's verdict, the one line, a row per arm) and
one arm (the tab as before arms)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import cast

import pytest

from demo.fmt import esc, fmt_percent, fmt_speedup
from demo.settings import Settings
from demo.sweep.models import SweepResult
from demo.sweep.runner import sweep_spec
from demo.ui import evaluate_tab
from demo.workload import WorkloadError
from harness.standin import Standin, StandinBehavior


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
    assert 'data-requests="3"' in html and "w: 3 requests read (JSONL), 1 skipped." in html
    assert "skipped w.jsonl:4" in html


def test_a_batch_file_shows_the_loaders_summary_and_its_ignored_fields(tmp_path: Path) -> None:
    f = tmp_path / "batch.jsonl"
    line = {"custom_id": "r1", "method": "POST", "url": "/v1/chat/completions",
            "body": {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}], "top_p": 0.9}}
    emb = {"custom_id": "e", "method": "POST", "url": "/v1/embeddings", "body": {"input": "x"}}
    f.write_text(json.dumps(line) + "\n" + json.dumps(emb) + "\n", encoding="utf-8")
    workload, lines = evaluate_tab.load_upload(str(f), Settings())
    assert workload is not None and workload.requests[0].top_p == 0.9
    html = evaluate_tab.upload_status_html(workload, lines)
    assert "batch: 1 request read (OpenAI batch), 1 skipped." in html
    assert "model: ignored on 1 line: the servers&#x27; own model is used" in html
    assert "skipped batch.jsonl:2: url /v1/embeddings" in html


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
    assert "<b>" not in html and "<i>" not in html and "&lt;b&gt;: 1 request read (JSONL)" in html


def test_the_page_counts_a_workload_cell_by_its_rounds(tmp_path: Path) -> None:
    settings = Settings()
    workload, _ = evaluate_tab.load_upload(str(_jsonl(tmp_path / "w.jsonl", 5)), settings)
    spec = sweep_spec(settings, ["poetry"], "1,2", "", 1, 0, 20, workload=workload)
    # poetry: 2 cells x 1 round; the workload: 5 rounds at c=1, 3 at c=2; x 2 sides x 1 repeat
    assert evaluate_tab.batches_of(spec, workload) == (2 + 5 + 3) * 2
    assert evaluate_tab.batches_of(spec, None) == 2 * 2


# --------------------------------------------------------------------------- several arms


def _run_tab(settings: Settings, concurrency: str, max_tokens: str) -> tuple:
    """The tab's own Run handler, outside a browser: its outputs in run_outputs' order."""
    import asyncio

    import gradio as gr

    with gr.Blocks():
        tab = evaluate_tab.build(settings)
    return asyncio.run(tab.on_run(["json_reformat"], concurrency, "", 1, 0, float(max_tokens), None, 0, 0, None,
                                  None, None, False, progress=cast(gr.Progress, lambda *_a, **_k: None)))


def _arm_servers(arms: dict, base) -> Iterator:
    with ExitStack() as stack:
        yield stack.enter_context(Standin(base)), {n: stack.enter_context(Standin(b)) for n, b in arms.items()}


def test_a_sweep_of_three_arms_shows_every_verdict_and_the_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.test_methods import COUNTS, LOAD_ARMS, LOAD_BASE, LOAD_TOKENS

    monkeypatch.delenv("SPECDEMO_ARMS", raising=False)
    with contextmanager(_arm_servers)(LOAD_ARMS, LOAD_BASE) as (base, arms):
        settings = Settings(baseline_url=base.url, speculative_url=arms["eagle3"].url, save_runs=False,
                            arms=[{"name": n, "url": s.url} for n, s in arms.items()])
        assert "**3 arms**: `eagle3`, `ngram`, `draft`" in evaluate_tab.intro_text(settings)
        out = _run_tab(settings, COUNTS, LOAD_TOKENS)
    status, verdict, table, files = out[0], out[3], out[8], out[9]
    assert 'data-state="done"' in status, status
    result = SweepResult.model_validate_json(Path(next(f for f in files if f.endswith(".json"))).read_text())
    # The one line on top, then each arm's verdict, as the evaluator decided them from what it measured.
    # Which arm wins at which count rests on measured timing here; the designs' verdicts and line are
    # checked on a given clock (tests/test_methods.py,
    # test_the_evaluators_verdict_per_arm_and_one_line_on_a_given_clock), through the same functions.
    (v,) = result.verdicts
    assert v.methods_line is not None and v.methods_line.startswith("for this workload, ")
    assert f"{esc(v.methods_line)}</p>" in verdict
    assert verdict.index('class="sv-methods"') < verdict.index('class="sv-verdict"')
    decided = [(a.arm, a.decision) for a in v.per_arm]
    assert [arm for arm, _ in decided] == ["eagle3", "ngram", "draft"]
    assert all(decision in ("enable", "don't", "depends") for _, decision in decided)
    for arm, decision in decided:
        assert f'data-arm="{arm}" data-decision="{esc(decision)}"' in verdict
    assert verdict.count('class="sv-verdict"') == 3
    # a row per cell and arm, the arm's own figures (the tab computes none of them)
    assert table.headers == [*evaluate_tab.TABLE_HEADERS[:3], "arm", *evaluate_tab.TABLE_HEADERS[3:]]
    rows = table.value["data"]
    assert [(r[2], r[3]) for r in rows] == [(c, a) for c in ("1", "2", "8") for a in ("eagle3", "ngram", "draft")]
    for row in rows:
        cell = next(c for c in result.cells if str(c.settings.concurrency) == row[2])
        got = cell.arms[row[3]]
        assert row[5] == fmt_speedup(got.speedup.median if got.speedup else None)
        assert row[7] == fmt_percent(got.acceptance_rate)
        assert got.side.output_tokens_per_s is not None
        assert row[10] == f"{got.side.output_tokens_per_s.median:.1f}"


def test_one_arm_is_todays_tab(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SPECDEMO_ARMS", raising=False)
    base_b = StandinBehavior(tokens_per_s=60, ttft_s=0.02)
    spec_b = StandinBehavior(tokens_per_s=120, ttft_s=0.02, speculative=True, chunk_sizes=[1, 3])
    with Standin(base_b) as base, Standin(spec_b) as spec:
        settings = Settings(baseline_url=base.url, speculative_url=spec.url, save_runs=False)
        assert evaluate_tab.intro_text(settings) == evaluate_tab.INTRO
        out = _run_tab(settings, "1", "20")
    verdict, table = out[3], out[8]
    assert isinstance(table, list) and all(len(r) == len(evaluate_tab.TABLE_HEADERS) for r in table) and table
    assert 'class="sv-methods"' not in verdict and "data-arm=" not in verdict
    assert verdict.count('class="sv-verdict"') == 1


def test_the_page_counts_each_arms_batches() -> None:
    settings = Settings(speculative_url="http://s:2", arms=[{"name": "a", "url": "http://s:2"},
                                                            {"name": "b", "url": "http://b:3"}])
    spec = sweep_spec(settings, ["poetry"], "1,2", "", 1, 0, 20)
    assert evaluate_tab.batches_of(spec, None) == 2 * 3  # 2 cells: the baseline and two arms each
