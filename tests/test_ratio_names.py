"""Every ratio a sweep shows is named by its one name (docs/measurement.md): ``speedup`` for the
decode ratio, ``throughput ratio`` for the aggregate one, in report.html, the Evaluate tab's result
and the CLI summary of one sweep, and each shown figure is results.json's field of that name. A
prefill-heavy workload (decode gains 3x, but the first token takes most of each request) gets the
one sentence that reconciles its two figures, and the verdict says which one it rests on."""

from __future__ import annotations

import contextlib
import io
import json
import re
from pathlib import Path

import pytest

from demo.cli import main
from demo.sweep.models import SweepResult
from demo.sweep.report_workload import summary_paragraph
from demo.sweep.verdict import GAIN_NONE, GAIN_WORTH, VERDICT_BASIS
from demo.ui import evaluate_tab
from harness.standin import Standin, StandinBehavior

# Prefill 1.9 s, then 60 tokens: the baseline decodes them in 0.3 s, the speculative side (4 tokens a
# step, each step 1.33x a plain one) in 0.1 s. Decode speedup ~3x at an efficiency of 0.75, under the
# bound (demo.measure.over_bound); end to end 2.2 s against 2.0 s: a throughput ratio of 1.10, in the
# middle of "depends" (1.05 to 1.15). The verdict rests on measured figures landing in those bands,
# so the module runs in the timing stage (tests/conftest.py: TIMING_LANES), as every accuracy check
# does: beside a loaded machine's other work a 0.1 s decode window can read 2.3x.
TTFT_S = 1.9
RATE = 200.0
MAX_TOKENS = 60
# A labelled figure: the name, at most a few words, then the number with its × (a second number
# after "to" or "and" is a range's other end, the same name's).
LABELLED = re.compile(r"(speedup|throughput ratio)(?:'s)?(?: [a-z]+){0,3} (\d+\.\d\d)×(?:,? (?:to|and) (\d+\.\d\d)×)?")
ANY_RATIO = re.compile(r"(\d+\.\d\d)×")
# The verdict's own thresholds, stated beside the figures ("no segment's speedup reaches 1.05×").
THRESHOLDS = {f"{GAIN_NONE:.2f}", f"{GAIN_WORTH:.2f}"}


def _text(html: str) -> str:
    """The words a reader sees: tags dropped, entities that matter here unescaped, spaces folded."""
    text = re.sub(r"<[^>]+>", " ", html).replace("&quot;", '"').replace("&#x27;", "'").replace("&amp;", "&")
    return re.sub(r"\s+", " ", text)


def _first(pattern: str, html: str) -> str:
    """The first match of ``pattern`` in the page (it must be there)."""
    m = re.search(pattern, html, re.S)
    assert m is not None, pattern
    return m.group(0)


def _check_named(text: str, result: SweepResult) -> list[tuple[str, str]]:
    """Every ratio in ``text`` carries its name, and equals the cell's field of that name."""
    (cell,) = result.cells
    assert cell.speedup is not None and cell.throughput_ratio is not None
    truth = {"speedup": f"{cell.speedup.median:.2f}", "throughput ratio": f"{cell.throughput_ratio.median:.2f}"}
    named = [(name, v) for name, *values in LABELLED.findall(text) for v in values if v]
    assert named, text
    for name, value in named:
        assert value == truth[name] or value in THRESHOLDS, (name, value, truth, text)
    # no unnamed ratio: every "N.NN×" is one of the named ones
    assert len(ANY_RATIO.findall(text)) == len(named), (named, text)
    return [(n, v) for n, v in named if v not in THRESHOLDS]


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> tuple[SweepResult, str, Path]:
    """One sweep of a prefill-heavy workload file through the CLI: its result, its printed summary, its folder."""
    tmp = tmp_path_factory.mktemp("ratios")
    wl = tmp / "rag.jsonl"
    wl.write_text("".join(json.dumps({"id": f"q{i}", "messages": [{"role": "user", "content": f"Long document {i}"}],
                                      "max_tokens": MAX_TOKENS, "temperature": 0}) + "\n" for i in range(3)))
    out = tmp / "out"
    with Standin(StandinBehavior(ttft_s=TTFT_S, tokens_per_s=RATE)) as base, \
            Standin(StandinBehavior(ttft_s=TTFT_S, tokens_per_s=RATE * 3, chunk_sizes=[4], speculative=True,
                                    num_spec_tokens=4)) as spec:
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            code = main(["sweep", "--baseline-url", base.url, "--speculative-url", spec.url, "--workload", str(wl),
                         "--concurrency", "1", "--repeats", "1", "--warmup", "0", "--out", str(out),
                         "--no-progress"])
    assert code == 0, printed.getvalue()
    result = SweepResult.model_validate_json((out / "results.json").read_text())
    return result, printed.getvalue(), out


def test_the_prefill_heavy_workload_gets_the_one_reconciling_sentence(sweep: tuple[SweepResult, str, Path]) -> None:
    result, _printed, _out = sweep
    (cell,) = result.cells
    assert cell.speedup is not None and cell.throughput_ratio is not None
    assert cell.speedup.median > 2.5 and cell.throughput_ratio.median < 1.15  # the two decide apart
    (verdict,) = result.verdicts
    assert verdict.decision == "depends"
    assert verdict.reconcile is not None
    assert verdict.reconcile.startswith(f"Decode gains a speedup of {cell.speedup.median:.2f}× but prefill is ")
    assert verdict.reconcile.endswith(f"end to end the throughput ratio is {cell.throughput_ratio.median:.2f}×, "
                                      "and the verdict rests on it.")


def test_the_report_names_every_ratio(sweep: tuple[SweepResult, str, Path]) -> None:
    result, _printed, out = sweep
    html = (out / "report.html").read_text()
    assert "aggregate output tokens/s, speculative over baseline" in html
    assert "Speedup = aggregate" not in html  # the old, wrong name
    assert _text(VERDICT_BASIS) in _text(html)
    lead = _text(_first(r'<p class="lead" id="customer-summary">.*?</p>', html))
    named = _check_named(lead, result)
    assert {n for n, _v in named} == {"speedup", "throughput ratio"}
    verdict = _text(_first(r'<div class="sv-verdict".*?</div>', html))
    _check_named(verdict.split("structuredness:")[0], result)  # the headline and its sentence


def test_the_evaluate_tab_names_every_ratio(sweep: tuple[SweepResult, str, Path]) -> None:
    result, _printed, _out = sweep
    shown = _text(summary_paragraph(result))  # the tab's summary is the report's
    _check_named(shown, result)
    verdicts = _text(evaluate_tab.verdicts_html(result))
    assert _text(VERDICT_BASIS) in verdicts
    _check_named(verdicts.split("structuredness:")[0], result)
    (row,) = evaluate_tab.cell_rows(result)
    headers = evaluate_tab.TABLE_HEADERS
    cell = result.cells[0]
    assert cell.speedup is not None and cell.throughput_ratio is not None
    assert row[headers.index("speedup")] == f"{cell.speedup.median:.2f}×"
    assert row[headers.index("throughput ratio")] == f"{cell.throughput_ratio.median:.2f}×"


def test_the_cli_summary_names_every_ratio(sweep: tuple[SweepResult, str, Path]) -> None:
    result, printed, _out = sweep
    assert VERDICT_BASIS in printed
    verdict_line = next(line for line in printed.splitlines() if line.strip().startswith("DEPENDS"))
    _check_named(verdict_line, result)
    assert "the verdict rests on it" in verdict_line
