"""The evaluator in requests per second (``python -m demo sweep --workload FILE --rate``, demo/sweep/rates.py,
the Evaluate tab's "requests per second") against stand-ins whose requests slow down with the requests
already running: results.json's rate steps agree with what the stand-ins recorded, the report and the tab
say the same capacity sentence, and bad input is one line. Steps are short (10 requests, or 4 on the tab).
"""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import cast

import pytest

from demo.cli import main
from demo.fmt import esc
from demo.load.rate_models import RateStep
from demo.settings import Settings
from demo.sweep.models import SweepResult
from demo.sweep.rates import capacity_text, load_result
from harness.margins import within
from harness.standin import Standin, StandinBehavior
from harness.standin_process import process_pair
from tests.test_load_rate import split, truth_completed_per_s

TOKENS = 24
# Unloaded 10 ms a token on the baseline, 4 ms on the speculative side; a request arriving with r running
# is slowed by 1 + x r for its whole life, so ten requests at once (40 req/s) pile up on both.
BASE = StandinBehavior(tokens_per_s=100, ttft_s=0.02, slowdown_per_running=0.5, slowdown_in_flight=0.05)
SPEC = StandinBehavior(tokens_per_s=250, ttft_s=0.02, slowdown_per_running=1.0, slowdown_in_flight=0.05,
                       speculative=True, chunk_sizes=[1, 3, 2])
RATES = [4, 40]  # below both capacities, then ten times over
REQUESTS = 10  # per step: 2.5 s of arrivals at 4 req/s


@pytest.fixture(autouse=True)
def _no_saved_runs(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SPECDEMO_RUNS_DIR", str(tmp_path / "runs"))
    monkeypatch.setenv("SPECDEMO_SAVE_RUNS", "false")
    monkeypatch.delenv("SPECDEMO_ARMS", raising=False)


def workload(path: Path, n: int = 3, tokens: int = TOKENS) -> Path:
    path.write_text("".join(json.dumps({"id": f"r{i}", "prompt": f"say something {i}", "max_tokens": tokens,
                                        "temperature": 0}) + "\n" for i in range(n)), encoding="utf-8")
    return path


def capacity_in(html: str) -> str:
    """The capacity sentence a page shows (rate_page.summary_html's ``id="capacity"`` paragraph)."""
    found = re.search(r'<p class="lead" id="capacity">(.*?)</p>', html, re.S)
    assert found is not None, html[:2000]
    return found.group(1)


def test_sweep_rate_matches_the_truth_and_the_report_says_its_capacity(tmp_path: Path, capsys) -> None:
    file = workload(tmp_path / "mine.jsonl")
    out = tmp_path / "out"
    with process_pair(BASE, SPEC) as (base, spec):
        assert main(["sweep", "--baseline-url", base.url, "--speculative-url", spec.url, "--workload", str(file),
                     "--rate", ",".join(map(str, RATES)), "--requests", str(REQUESTS), "--drain-s", "8",
                     "--arrival-seed", "1", "--slo-e2e-ms", "1500", "--slo-e2e-p", "90", "--out", str(out),
                     "--no-progress"]) == 0
        truths = {"baseline": base.truth(), "speculative": spec.truth()}
    printed = capsys.readouterr().out
    result = SweepResult.model_validate_json((out / "results.json").read_text())
    assert result.rate is not None and not result.cells
    steps = [RateStep.model_validate(s) for s in result.rate["rate_steps"]]
    assert [s.rate_requests_per_s for s in steps] == RATES
    per = {name: split(t, steps) for name, t in truths.items()}
    assert steps[0].schedule.offsets_s == draw_offsets(result, 0)  # the seeded schedule, the same to every server
    for k, step in enumerate(steps):
        first = step.schedule.offsets_s[0]
        for side in step.servers():
            tr = per[side.name][k]
            assert side.accounted and side.sent == REQUESTS == len(tr)
            # arrival i sent request i of the file, wrapping round: the stand-in saw each prompt that often
            assert [sum(f"say something {i}" in t.prompt for t in tr) for i in range(3)] == [4, 3, 3]
            assert within(side.completed_requests_per_s, truth_completed_per_s(tr, first), 0.05,
                          f"completed req/s, {side.name}"), (
                step.rate_requests_per_s, side.name, side.completed_requests_per_s, truth_completed_per_s(tr, first))
    # Ten times over: every server fell behind, and the step says so (the truth: finishes trail arrivals).
    top = steps[-1]
    for side in top.servers():
        tr = per[side.name][-1]
        arrivals_s = top.schedule.offsets_s[-1] - top.schedule.offsets_s[0]
        finishes_s = max(t.t_last_token_sent or 0 for t in tr) - min(t.t_request for t in tr)
        assert finishes_s > 2 * arrivals_s and side.saturated, (side.name, finishes_s, arrivals_s, side.saturation_note)
    # speedup keeps docs/measurement.md's meaning: per-request decode tokens/s, the arm over the baseline
    arm, base_rate = steps[0].arms["speculative"], steps[0].baseline.decode_tokens_per_s_p50
    assert arm.side.decode_tokens_per_s_p50 is not None and base_rate is not None
    assert arm.speedup == pytest.approx(arm.side.decode_tokens_per_s_p50 / base_rate)
    # One capacity sentence: results.json's, the report's, the printed table's; the crossover in req/s.
    sentence = capacity_text(result)
    assert sentence and sentence.startswith("baseline holds") and "end-to-end latency p90 ≤ 1500 ms" in sentence
    assert result.rate["summary"]["capacity_text"] == sentence
    assert "req/s" in result.rate["summary"]["crossovers"]["speculative"]["text"]
    report = (out / "report.html").read_text()
    assert capacity_in(report) == esc(sentence) + "."
    assert 'id="chart-rate-latency"' in report and 'id="chart-rate-goodput"' in report
    assert f"Capacity: {sentence}" in printed
    # The schedule's bands name the rates that produced their batch sizes.
    bands = result.rate["recommendation"]["bands"]
    assert sorted(r for b in bands for r in b["rates_requests_per_s"]) == RATES
    assert "seen at (req/s)" in report
    assert main(["schedule", str(out / "results.json")]) == 0  # keyed by batch size, naming the rates
    assert f"(seen at {RATES[0]:g}" in capsys.readouterr().out


def draw_offsets(result: SweepResult, index: int) -> list[float]:
    """Step ``index``'s send offsets drawn afresh from results.json's own settings (law, seed, length)."""
    rated = load_result(result)
    assert rated is not None and rated.spec.rate is not None
    return rated.spec.rate.schedule(index).offsets_s


def test_the_tab_shows_the_reports_capacity_sentence(tmp_path: Path) -> None:
    import gradio as gr

    from demo.ui import evaluate_tab

    file = workload(tmp_path / "mine.jsonl", tokens=8)
    fast = StandinBehavior(tokens_per_s=400, ttft_s=0.01)
    with Standin.pair(fast) as (base, spec):
        settings = Settings(baseline_url=base.url, speculative_url=spec.url, save_runs=False)
        with gr.Blocks():
            tab = evaluate_tab.build(settings)
        out = asyncio.run(tab.on_run([], "1", "", 1, 0, 8, str(file), 0, 0, None, 400, None, False,
                                     "requests per second", "10,20", 4, 50,
                                     progress=cast(gr.Progress, lambda *_a, **_k: None)))
    assert len(out) == len(tab.run_outputs)
    status, files, view, latency = out[0], out[9], out[10], out[11]  # run_outputs' order
    assert 'data-state="done"' in status and "2 rate step(s)" in status, status
    report = Path(next(f for f in files if f.endswith(".html"))).read_text()
    result = SweepResult.model_validate_json(Path(next(f for f in files if f.endswith(".json"))).read_text())
    sentence = capacity_text(result)
    assert sentence and "ITL p50 ≤ 400 ms" in sentence
    assert capacity_in(view) == capacity_in(report) == esc(sentence) + "."
    assert view.count("<tr>") == 1 + 2 * 2 + 2  # the header, a row per server per step, each step's ratios
    assert [t.name for t in latency.data][:3] == ["baseline ITL p50", "baseline ITL p95", "baseline ITL p99"]


@pytest.mark.parametrize(("flags", "words"), [
    (["--rate", "0", "--requests", "4"], "--rate must be requests per second above 0"),
    (["--rate", "1", "--requests", "4", "--slo-itl-ms", "50", "--slo-itl-p", "100"], "--slo-itl-p must be"),
    (["--rate", "1", "--requests", "4", "--concurrency", "2"], "--concurrency is for closed-loop users"),
    (["--concurrency", "2", "--duration", "3"], "--duration is for --rate"),
    (["--rate", "1"], "--rate needs each step's length"),
    (["--rate", "1", "--requests", "4", "--repeats", "2"], "--repeats is for --concurrency"),
])
def test_bad_input_is_one_line(flags: list[str], words: str, tmp_path: Path, capsys) -> None:
    with pytest.raises(SystemExit) as e:
        main(["sweep", "--baseline-url", "http://127.0.0.1:9", "--speculative-url", "http://127.0.0.1:9",
              "--workload", str(workload(tmp_path / "w.jsonl")), "--out", str(tmp_path / "out"), *flags])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip()
    assert words in err and len(err.splitlines()) == 1, err
    assert not (tmp_path / "out").exists()  # refused before anything is sent or written


@pytest.mark.parametrize(("rates", "percentile", "words"), [
    ("0.5,0", 95, "Rate must be requests per second above 0, got 0"),
    ("1", 100, "SLO percentile must be a whole percentile from 1 to 99, got 100"),
    ("1", 0, "SLO percentile must be a whole percentile from 1 to 99, got 0"),
])
def test_the_tab_says_bad_input_in_one_line(rates: str, percentile: float, words: str, tmp_path: Path) -> None:
    import gradio as gr

    from demo.ui import evaluate_tab

    settings = Settings(baseline_url="http://127.0.0.1:9", speculative_url="http://127.0.0.1:9", save_runs=False)
    with gr.Blocks():
        tab = evaluate_tab.build(settings)
    out = asyncio.run(tab.on_run([], "1", "", 1, 0, 8, str(workload(tmp_path / "w.jsonl")), 0, 0, None, 50, None,
                                 False, "requests per second", rates, 4, percentile,
                                 progress=cast(gr.Progress, lambda *_a, **_k: None)))
    status = out[0]
    assert 'data-state="error"' in status and words in status and "\n" not in status, status
