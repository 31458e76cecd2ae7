"""The example workload, sampled, against the two real CPU vLLM servers: it gives a verdict, a
profile of which requests gain, and a capacity table with a cost; the figures are printed.

Slow (~3-5 min on 2 cores): `pytest -m e2e -s tests/e2e/test_workload_e2e.py`.
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
SAMPLE, SEED = 6, 3


def test_the_example_workload_gives_a_verdict_a_profile_and_capacity(real_servers: Settings,
                                                                      tmp_path: Path) -> None:
    out = tmp_path / "workload"
    cmd = [sys.executable, "-m", "demo", "sweep", "--baseline-url", real_servers.baseline_url,
           "--speculative-url", real_servers.speculative_url, "--workload", str(ROOT / "workloads" / "example.jsonl"),
           "--sample", str(SAMPLE), "--seed", str(SEED), "--max-tokens", "64", "--concurrency", "1,2",
           "--repeats", "1", "--warmup", "1", "--slo-ttft-ms", "2000", "--gpu-hour-price", "2.0",
           "--out", str(out), "--no-progress"]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=1200)
    print(done.stdout, done.stderr[-2000:], sep="\n")
    assert done.returncode == 0, done.stderr[-2000:]
    result = SweepResult.model_validate_json((out / "results.json").read_text())
    assert [c.settings.concurrency for c in result.cells] == [1, 2]
    for c in result.cells:
        assert c.settings.kind == "workload" and c.settings.requests == SAMPLE
        assert c.status in ("ok", "partial"), c.errors
        assert len(c.requests) == SAMPLE
        # As the preset sweep's cell (test_sweep_e2e.py), at each concurrency.
        assert c.speedup is not None and c.speedup.n == 1
        assert c.acceptance_rate is not None and c.acceptance_source == "per_request"
        assert c.num_spec_tokens == 4 and c.expected_tokens_per_step is not None
        assert c.speculative.kv_cache_usage_peak_perc is not None
    (verdict,) = result.verdicts
    assert verdict.decision in ("enable", "don't", "depends"), verdict.headline
    (w,) = result.workloads
    assert w.profile.requests == SAMPLE and w.profile.prompt_tokens is not None and w.profile.copyness is not None
    assert w.profile.gain_most, w.profile.na_reasons
    cap = result.capacity
    assert cap is not None and len(cap.points) == 4
    assert all(p.output_tokens_per_s and p.cost_per_million_output_tokens for p in cap.points)
    html = (out / "report.html").read_text()
    assert 'id="customer-summary"' in html and "capacity-points" in html
    # The figures, for the closing note.
    print(f"\n[workload e2e] verdict: {verdict.decision}: {verdict.headline}")
    for c in result.cells:
        sp = c.speedup.median if c.speedup else None
        print(f"[workload e2e] c={c.settings.concurrency}: speedup {sp}, acceptance {c.acceptance_rate}, "
              f"tokens/step {c.mean_acceptance_length}")
    for p in cap.points:
        print(f"[workload e2e] {p.side} c={p.concurrency}: {p.output_tokens_per_s:.1f} tok/s, "
              f"TTFT p95 {p.ttft_p95_s}, ITL p95 {p.itl_p95_s}, ${p.cost_per_million_output_tokens:.2f}/M")
    print(f"[workload e2e] saving: {cap.saving.text}")
    for r in w.profile.gain_most:
        print(f"[workload e2e] gains: {r.id} {r.speedup:.2f}x acceptance {r.acceptance_rate} copy-ness {r.copyness}")
