"""The suffix arm on real CPU vLLM servers: suffix decoding (arctic-inference) raced against n-gram
on the agent loop, where the answer re-sends an earlier tool call.

Opt-in, as the arm is: build arctic-inference and start the three servers, then point this at them:

    bash scripts/setup_cpu_servers.sh --suffix
    python -m servers up --detach --host 127.0.0.1 --arms ngram,suffix --share-arm-cores
    SPECDEMO_BASELINE_URL=http://127.0.0.1:8000 SPECDEMO_SPECULATIVE_URL=http://127.0.0.1:8001 \\
      SPECDEMO_E2E_SUFFIX_URL=http://127.0.0.1:8002 pytest -m e2e tests/e2e/test_suffix_arm.py

Skipped (with that reason) without SPECDEMO_E2E_SUFFIX_URL: CI runs the default pair only.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from common.paths import ROOT
from demo.settings import Settings

SUFFIX_URL = os.environ.get("SPECDEMO_E2E_SUFFIX_URL")
pytestmark = [pytest.mark.e2e, pytest.mark.skipif(
    not SUFFIX_URL, reason="no suffix server: set SPECDEMO_E2E_SUFFIX_URL (the module's docstring says how)")]
# n-gram with k=4 verifies at most 5 tokens a step; the suffix tree drafts the re-sent call in longer runs.
NGRAM_STEP_BOUND = 5


def test_suffix_drafts_the_resent_tool_call_in_longer_runs_than_ngram_can(real_servers: Settings) -> None:
    cmd = [sys.executable, "-m", "demo", "race", "--preset", "agent_loop", "--order", "sequential", "--json",
           "--no-save", "--arm", f"ngram={real_servers.speculative_url}", "--arm", f"suffix={SUFFIX_URL}"]
    env = {**os.environ, "SPECDEMO_BASELINE_URL": str(real_servers.baseline_url)}
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    race = json.loads(done.stdout)
    ngram, suffix = race["arms"]["ngram"], race["arms"]["suffix"]
    for arm in (ngram, suffix):
        assert arm["error"] is None and arm["identical_text"] is True, arm
    assert ngram["mean_acceptance_length"] <= NGRAM_STEP_BOUND
    assert suffix["mean_acceptance_length"] > NGRAM_STEP_BOUND, suffix
    print(f"\n[e2e] agent_loop: n-gram {ngram['speedup']:.2f}x ({ngram['mean_acceptance_length']:.2f} tokens/step), "
          f"suffix {suffix['speedup']:.2f}x ({suffix['mean_acceptance_length']:.2f} tokens/step)")
