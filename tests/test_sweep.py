"""The evaluator against stand-in servers whose truth is known: figures, report, bad input."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest

from common.waiting import wait_for
from demo.cli import main
from demo.errors import BadInput
from demo.settings import ROOT, Settings
from demo.sweep.models import SCHEMA_VERSION, CellResult, SweepResult, SweepSpec
from demo.sweep.plan import resolve_presets
from demo.sweep.report import finalize, write_outputs
from demo.sweep.runner import SweepProgress, new_result, run_sweep, sweep_spec
from harness.standin import Standin, StandinBehavior, Truth
from tests.signals import interruptible

BASE = StandinBehavior(tokens_per_s=80, ttft_s=0.03)
SPEC = StandinBehavior(tokens_per_s=200, ttft_s=0.03, speculative=True, chunk_sizes=[1, 3, 5, 2])
MAX_TOKENS = 60
# The figures against the truth: the client reads each token a little after the stand-in sent it
# (more so on a busy machine); on answers of 150 tokens (0.75 s speculative) a 20 ms lag moves a
# speedup by under 3%, on 60 tokens by 7%, past the 5% the test allows.
TRUTH_TOKENS = 150


def sweep(base: Standin, spec: Standin, out: Path | None = None, on_cell=None, **fields: object) -> SweepResult:
    spec_fields = dict(presets=["json_reformat"], concurrency=[1, 2], repeats=2, warmup=0, max_tokens=MAX_TOKENS)
    spec_fields.update(fields)
    sw = SweepSpec(baseline_url=base.url, speculative_url=spec.url, **spec_fields)
    settings = Settings(baseline_url=base.url, speculative_url=spec.url, save_runs=False, read_timeout_s=10)
    presets = resolve_presets(sw.presets, settings.presets_dir)
    result = new_result(sw, presets)
    asyncio.run(run_sweep(sw, settings, result, presets, on_cell=on_cell))
    finalize(result)
    if out is not None:
        write_outputs(result, out)
    return result


def batches(truths: list[Truth], size: int) -> list[list[Truth]]:
    assert len(truths) % size == 0
    return [truths[i:i + size] for i in range(0, len(truths), size)]


def throughput(batch: list[Truth]) -> float:
    """The truth of a batch's aggregate output tokens/s: tokens over first request to last token."""
    ends = [t.t_last_token_sent for t in batch if t.t_last_token_sent is not None]
    assert len(ends) == len(batch)  # every request sent its last token
    wall = max(ends) - min(t.t_request for t in batch)
    return sum(t.completion_tokens for t in batch) / wall


def decode_rates(batch: list[Truth]) -> list[float]:
    rates = [t.decode_tokens_per_s for t in batch if t.decode_tokens_per_s is not None]
    assert len(rates) == len(batch)  # every request decoded more than one token
    return rates


def report_value(html: str, concurrency: int, key: str) -> float:
    row = re.search(rf'<tr data-preset="json_reformat"[^>]*data-concurrency="{concurrency}".*?</tr>', html, re.S)
    assert row, f"no report row for concurrency {concurrency}"
    m = re.search(rf'data-key="{key}" data-value="([^"]+)"', row.group(0))
    assert m, f"no {key} in the report row"
    return float(m.group(1))


@pytest.mark.parametrize("per_request", [True, False], ids=["per-request-metrics", "metrics-delta"])
def test_speedups_and_acceptance_match_the_truth(tmp_path: Path, per_request: bool) -> None:
    marks: list[tuple[int, int]] = []
    with Standin(BASE) as base, Standin(SPEC.model_copy(update={"per_request_metrics": per_request})) as spec:
        result = sweep(base, spec, tmp_path, on_cell=lambda _c: marks.append((len(base.truth), len(spec.truth))),
                       max_tokens=TRUTH_TOKENS)
        base_truth, spec_truth = list(base.truth), list(spec.truth)
    assert [c.status for c in result.cells] == ["ok", "ok"]
    saved = SweepResult.model_validate_json((tmp_path / "results.json").read_text())
    html = (tmp_path / "report.html").read_text()
    csv_rows = (tmp_path / "results.csv").read_text().splitlines()
    assert len(csv_rows) == 3  # header + one row per cell
    start = (0, 0)
    for cell, mark in zip(saved.cells, marks, strict=True):
        c = cell.settings.concurrency
        bt = batches(base_truth[start[0]:mark[0]], c)
        st = batches(spec_truth[start[1]:mark[1]], c)
        start = mark
        assert len(bt) == len(st) == 2  # two repeats, each a batch of c requests per side
        assert all(t.completion_tokens == TRUTH_TOKENS for b in bt + st for t in b)
        true_ratio = statistics.median(throughput(s) / throughput(b) for b, s in zip(bt, st, strict=True))
        true_speedup = statistics.median(
            statistics.median(decode_rates(s)) / statistics.median(decode_rates(b))
            for b, s in zip(bt, st, strict=True))
        spec_all = [t for b in st for t in b]
        true_acceptance = sum(t.accepted for t in spec_all) / sum(t.draft_tokens for t in spec_all)
        true_length = 1 + sum(t.accepted for t in spec_all) / sum(t.drafts for t in spec_all)
        # results.json and the report say the same, and both match the truth.
        # speedup: the decode ratio (as a race's); throughput_ratio: the aggregate output tokens/s ratio.
        assert cell.speedup is not None and cell.throughput_ratio is not None
        assert cell.speedup.median == pytest.approx(true_speedup, rel=0.05)
        assert cell.throughput_ratio.median == pytest.approx(true_ratio, rel=0.05)
        assert report_value(html, c, "speedup") == pytest.approx(cell.speedup.median, rel=1e-12)
        assert report_value(html, c, "throughput_ratio") == pytest.approx(cell.throughput_ratio.median, rel=1e-12)
        assert cell.acceptance_rate == pytest.approx(true_acceptance, rel=1e-9)
        assert cell.mean_acceptance_length == pytest.approx(true_length, rel=1e-9)
        assert cell.acceptance_source == ("per_request" if per_request else "metrics_delta")
        assert cell.num_spec_tokens == 4
        a = true_acceptance
        assert cell.expected_tokens_per_step == pytest.approx((1 - a ** 5) / (1 - a))
        # Tokens counted from usage, not chunks: the aggregate rate is the true tokens over the wall.
        assert cell.speculative.output_tokens_per_s is not None
        assert cell.speculative.output_tokens_per_s.median == pytest.approx(
            statistics.median(throughput(s) for s in st), rel=0.05)
        assert cell.identical_text is True
    assert saved.verdicts and saved.verdicts[0].decision == "enable"
    assert 'data-decision="enable"' in html


def test_a_server_failing_mid_sweep_is_recorded_and_the_sweep_goes_on(tmp_path: Path) -> None:
    with Standin(BASE) as base, Standin(SPEC) as spec:
        # The speculative server dies once the first cell is done.
        result = sweep(base, spec, tmp_path, on_cell=lambda _c: spec.stop(), concurrency=[1, 2, 3], repeats=1)
    assert [c.settings.concurrency for c in result.cells] == [1, 2, 3]  # every cell was attempted
    first, *rest = result.cells
    assert first.status == "ok" and first.speedup is not None
    for c in rest:
        assert c.status == "failed" and c.speedup is None
        assert c.baseline.ok_requests == c.settings.concurrency  # the healthy side was still measured
        assert any(e.startswith("speculative: Cannot reach") for e in c.errors), c.errors
        assert "\n" not in c.errors[0]
    html = (tmp_path / "report.html").read_text()
    assert "Cannot reach" in html and 'data-status="failed"' in html
    # The verdict uses what was measured and says so.
    assert result.verdicts[0].checklist[2].text.startswith("measured at concurrency 1 only")


def test_a_server_failing_mid_batch_keeps_the_good_requests(tmp_path: Path) -> None:
    with Standin(BASE) as base, Standin(SPEC.model_copy(update={"fault": "cut", "fault_after_chunks": 3})) as spec:
        result = sweep(base, spec, concurrency=[2], repeats=1)
    (cell,) = result.cells
    assert cell.status == "failed"
    assert any("was cut" in e for e in cell.errors), cell.errors
    assert (cell.reason("throughput_ratio") or "").startswith("speculative:")
    assert cell.reason("speedup")  # n/a, with its reason


def test_unknown_preset_exits_2_with_the_known_list(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["sweep", "--presets", "json_reformat,nope", "--out", str(tmp_path / "o"),
              "--baseline-url", "http://127.0.0.1:9", "--speculative-url", "http://127.0.0.1:9"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "unknown preset 'nope'" in err and "json_reformat" in err and "poetry" in err
    assert not (tmp_path / "o").exists()  # nothing measured, nothing written


@pytest.mark.parametrize("args", [["--concurrency", "1,x"], ["--concurrency", "0"], ["--repeats", "0"],
                                  ["--temperatures", "3"]])
def test_bad_numbers_exit_2(tmp_path: Path, args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["sweep", "--presets", "poetry", "--out", str(tmp_path), *args])
    assert exc.value.code == 2
    assert capsys.readouterr().err.startswith("error: ")


@pytest.mark.parametrize(("args", "said"), [
    (["--concurrency", "0"], "error: --concurrency values must be between 1 and 1024"),
    (["--concurrency", "1,x"], "error: --concurrency must be comma-separated numbers, got '1,x'"),
    (["--temperatures", "3"], "error: --temperatures must be between 0 and 2")])
def test_bad_numbers_name_their_flag_on_the_command_line(tmp_path: Path, args: list[str], said: str,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["sweep", "--presets", "poetry", "--out", str(tmp_path), *args])
    assert capsys.readouterr().err.strip() == said


def test_bad_numbers_are_said_without_flags_for_the_page() -> None:
    with pytest.raises(BadInput) as exc:
        sweep_spec(Settings(), ["poetry"], "0", "", 1, 0, 20)
    assert str(exc.value) == "concurrency values must be between 1 and 1024"
    with pytest.raises(BadInput, match="^temperatures must be between 0 and 2$"):
        sweep_spec(Settings(), ["poetry"], "1", "3", 1, 0, 20)


def test_ctrl_c_writes_partial_results(tmp_path: Path) -> None:
    out = tmp_path / "out"
    with Standin(BASE) as base, Standin(SPEC) as spec:
        cmd = [sys.executable, "-m", "demo", "sweep", "--baseline-url", base.url, "--speculative-url", spec.url,
               "--presets", "json_reformat,poetry,sql", "--concurrency", "1", "--repeats", "3", "--warmup", "0",
               "--max-tokens", "30", "--out", str(out)]
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                    preexec_fn=interruptible)
        try:
            def written() -> bool:  # the first cell is done and written
                assert proc.poll() is None, proc.communicate()
                return (out / "results.json").exists()

            wait_for(written, 60, "results.json written", poll_s=0.05)
            time.sleep(0.5)  # into the second cell
            proc.send_signal(signal.SIGINT)
            stdout, stderr = proc.communicate(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert proc.returncode == 130, stderr
    assert "interrupted: partial results" in stderr
    saved = SweepResult.model_validate_json((out / "results.json").read_text())
    assert saved.interrupted is True
    assert saved.cells[0].status == "ok" and saved.cells[0].speedup is not None
    assert len(saved.cells) < 3
    assert saved.cells[-1].status in ("interrupted", "ok")
    statuses = [c.status for c in saved.cells]
    assert "interrupted" in statuses, statuses  # the cell in progress is kept, marked
    assert 'data-interrupted="true"' in (out / "report.html").read_text()
    assert (out / "results.csv").read_text().count("\n") == len(saved.cells) + 1
    assert not list(out.glob("*.tmp"))


def test_results_json_is_schemad_and_round_trips(tmp_path: Path) -> None:
    with Standin(BASE) as base, Standin(SPEC) as spec:
        result = sweep(base, spec, tmp_path, concurrency=[1], repeats=1, temperatures=[0.0, 0.7])
    data = json.loads((tmp_path / "results.json").read_text())
    assert data["schema_version"] == SCHEMA_VERSION == 3
    assert [c["settings"]["temperature"] for c in data["cells"]] == [0.0, 0.7]
    cell = CellResult.model_validate(data["cells"][0])
    assert cell.settings.max_tokens == MAX_TOKENS and cell.settings.order == "sequential"
    assert cell.settings.baseline_url == result.spec.baseline_url
    assert {s["side"] for s in data["servers"]} == {"baseline", "speculative"}
    assert data["machine"]["python"]
    assert data["server_versions"] == {}  # the stand-in has no GET /version: left out, not guessed


def test_simultaneous_order_starts_both_batches_together() -> None:
    with Standin(BASE) as base, Standin(SPEC) as spec:
        result = sweep(base, spec, concurrency=[2], repeats=1, order="simultaneous")
        starts = [t.t_request for t in base.truth + spec.truth]
    assert max(starts) - min(starts) < 0.1  # four requests, both servers, one instant
    assert result.cells[0].settings.order == "simultaneous" and result.cells[0].speedup is not None


def test_progress_counts_every_batch() -> None:
    seen: list[SweepProgress] = []
    with Standin(BASE) as base, Standin(SPEC) as spec:
        sw = SweepSpec(baseline_url=base.url, speculative_url=spec.url, presets=["poetry"], concurrency=[1, 2],
                       repeats=2, warmup=1, max_tokens=8)
        settings = Settings(baseline_url=base.url, speculative_url=spec.url)
        presets = resolve_presets(sw.presets, settings.presets_dir)
        asyncio.run(run_sweep(sw, settings, new_result(sw, presets), presets, on_progress=seen.append))
    assert seen[-1].done == seen[-1].total == 2 * 2 * 2
    assert [p.done for p in seen] == sorted(p.done for p in seen)
    assert any("warm-up" in p.label for p in seen)


def test_terminal_progress_bar_redraws_one_line() -> None:
    import io

    from demo.cli.sweep import ProgressBar

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    out = Tty()
    bar = ProgressBar(out)
    bar.update(SweepProgress(done=0, total=4, label="json_reformat T=0 c=1: baseline, repeat 1/2"))
    bar.update(SweepProgress(done=2, total=4, label="json_reformat T=0 c=1: speculative, repeat 1/2"))
    bar.close()
    text = out.getvalue()
    assert text.count("\r") == 2 and text.endswith("\n") and text.count("\n") == 1
    assert "[###############...............] 2/4 json_reformat T=0 c=1: speculative" in text
