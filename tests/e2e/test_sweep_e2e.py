"""A small sweep against the two real CPU vLLM servers: it completes, and its verdict enables
speculation for the copy-heavy preset and not for poetry at temperature 1.0 while poetry's drafts
are rejected (a T=1 sample that repeats itself may rightly pay).

Slow (~3-5 min on 2 cores): `pytest -m e2e tests/e2e/test_sweep_e2e.py`.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from common.paths import ROOT
from demo.settings import Settings
from demo.sweep.models import SweepResult

pytestmark = pytest.mark.e2e

# An acceptance at which a T=1 sample has repeated itself enough for n-gram drafts to pay.
POETRY_REPEATS_ITSELF = 0.10


@pytest.fixture(scope="module")
def sweep(real_servers: Settings, tmp_path_factory: pytest.TempPathFactory) -> tuple[SweepResult, Path, str]:
    out = tmp_path_factory.mktemp("sweep-e2e")
    cmd = [sys.executable, "-m", "demo", "sweep", "--baseline-url", real_servers.baseline_url,
           "--speculative-url", real_servers.speculative_url, "--presets", "json_reformat,poetry",
           "--concurrency", "1", "--repeats", "2", "--warmup", "1", "--max-tokens", "96", "--out", str(out)]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900)
    print(done.stdout, done.stderr[-2000:], sep="\n")
    assert done.returncode == 0, done.stderr[-2000:]
    return SweepResult.model_validate_json((out / "results.json").read_text()), out, done.stdout


def test_the_sweep_completes_every_cell(sweep: tuple[SweepResult, Path, str]) -> None:
    result, out, _ = sweep
    assert not result.interrupted
    # One concurrency: the workload sweep (test_workload_e2e.py) checks two on these servers.
    assert [(c.settings.preset, c.settings.concurrency) for c in result.cells] == [("json_reformat", 1), ("poetry", 1)]
    for c in result.cells:
        assert c.status == "ok", (c.settings, c.errors)
        assert c.speedup is not None and c.speedup.n == 2
        assert c.acceptance_rate is not None and c.acceptance_source == "per_request"
        assert c.num_spec_tokens == 4 and c.expected_tokens_per_step is not None
        assert c.baseline.ok_requests == c.speculative.ok_requests == 2 * c.settings.concurrency
        assert c.speculative.kv_cache_usage_peak_perc is not None
    assert set(result.server_versions) == {"baseline", "speculative"}  # vLLM's GET /version
    json1 = result.cells[0]
    assert json1.identical_text is True  # greedy and fp32: lossless, token for token
    for name in ("results.json", "results.csv", "report.html"):
        assert (out / name).stat().st_size > 0


def test_the_verdict_enables_copy_heavy_and_not_poetry_at_t1(sweep: tuple[SweepResult, Path, str]) -> None:
    result, out, stdout = sweep
    by = {(v.preset, v.temperature): v for v in result.verdicts}
    json_v, poetry_v = by[("json_reformat", 0.0)], by[("poetry", 1.0)]
    assert json_v.decision == "enable", json_v.headline
    assert json_v.acceptance_rate is not None and poetry_v.acceptance_rate is not None
    assert json_v.acceptance_rate > poetry_v.acceptance_rate
    # Poetry sampled at T=1 is a new text each run (vLLM's seed does not make the speculative side's
    # sample reproducible): mostly its drafts are all rejected (0% in 5 of 7 CI runs on 2026-12-06, a
    # throughput ratio of 0.89-0.96x) and the verdict must not enable it; now and then the small model
    # repeats itself (15%: 1.13x, "depends"; 19%: 1.37x on an AVX-512 host, "enable", rightly so for
    # that sample). The claim held every time: while its drafts are rejected, poetry is not enabled.
    json_ratio, poetry_ratio = (cell.throughput_ratio.median for cell in result.cells if cell.throughput_ratio)
    assert json_ratio > poetry_ratio, (json_ratio, poetry_ratio)
    if poetry_v.acceptance_rate < POETRY_REPEATS_ITSELF:
        assert poetry_v.decision != "enable", poetry_v.headline
    assert "ENABLE  json_reformat (T=0) at concurrency 1:" in stdout
    html = (out / "report.html").read_text()
    assert 'data-preset="json_reformat" data-temperature="0.0" data-decision="enable"' in html
