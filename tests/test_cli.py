"""``python -m demo race`` as a user runs it: a real process against stand-in servers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from common.paths import ROOT
from demo.cli.race import result_json, result_table
from harness.given_clock import Pace, given_race
from harness.standin import Standin, StandinBehavior

SIDE_KEYS = {"completion_tokens", "ttft_s", "decode_tokens_per_s", "e2e_s", "itl_p50_s", "itl_p95_s", "text", "error"}
SPEC_KEYS = SIDE_KEYS | {"acceptance_rate", "mean_acceptance_length", "accepted_tokens", "draft_tokens", "drafts"}


def run_cli(*args: str, runs_dir: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SPECDEMO_RUNS_DIR": str(runs_dir)}
    return subprocess.run([sys.executable, "-m", "demo", "race", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)


def test_json_output_is_one_object_with_the_documented_keys(tmp_path: Path) -> None:
    # Streams of 0.5 s and 1 s (50 tokens at 100 and 50 tokens/s).
    spec_b = StandinBehavior(tokens_per_s=100, ttft_s=0.01, speculative=True, chunk_sizes=[1, 3, 5])
    with Standin.pair(StandinBehavior(tokens_per_s=50, ttft_s=0.01), spec_b) as (base, spec):
        p = run_cli("--baseline-url", base.url, "--speculative-url", spec.url, "--preset", "json_reformat",
                    "--max-tokens", "50", "--order", "sequential", "--json", runs_dir=tmp_path)
        truth = spec.last_truth
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)  # exactly one JSON object: anything else fails to parse
    assert out["order"] == "sequential" and out["preset"] == "json_reformat"
    assert SIDE_KEYS <= set(out["baseline"]) and SPEC_KEYS <= set(out["speculative"])
    assert out["speculative"]["completion_tokens"] == 50
    assert abs(out["speculative"]["acceptance_rate"] - truth.acceptance_rate) < 1e-9
    # the speedup is the two sides' own decode rates (how close they are to the truth is the timing
    # stage's: tests/test_sweep.py, tests/test_methods.py)
    rates = [out[side]["decode_tokens_per_s"] for side in ("speculative", "baseline")]
    assert out["speedup"] == pytest.approx(rates[0] / rates[1]) and out["identical_text"] is True
    # the run was saved, with both timelines
    saved = list(tmp_path.glob("*.json"))
    assert len(saved) == 1 and json.loads(saved[0].read_text())["speculative"]["events"]



def test_json_carries_the_loop_an_answer_ends_in(tmp_path: Path) -> None:
    """An answer that ends in '"book", ' repeated (cycled pieces) carries ``repetition`` on both
    sides, as the page labels it; a side with no loop carries null."""
    loop = StandinBehavior(tokens_per_s=400, ttft_s=0.01, pieces=['"book", '])
    with Standin.pair(loop, StandinBehavior(tokens_per_s=400, ttft_s=0.01, speculative=True,
                                            pieces=['"book", '])) as (base, spec):
        p = run_cli("--baseline-url", base.url, "--speculative-url", spec.url, "--prompt", "tags?",
                    "--max-tokens", "30", "--order", "sequential", "--json", "--no-save", runs_dir=tmp_path)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    for side in ("baseline", "speculative"):
        rep = out[side]["repetition"]
        assert rep["unit"] == '"book", ' and rep["repeats"] == 30 and rep["share"] == 1.0, rep
        assert rep["tail_chars"] == 30 * len('"book", ') and rep["tail_tokens"] == 30, rep
    assert [a["repetition"] for a in out["arms"].values()] == [out["speculative"]["repetition"]]
    with Standin.pair(StandinBehavior(tokens_per_s=400, ttft_s=0.01),
                      StandinBehavior(tokens_per_s=400, ttft_s=0.01, speculative=True)) as (base, spec):
        p = run_cli("--baseline-url", base.url, "--speculative-url", spec.url, "--prompt", "hi",
                    "--max-tokens", "30", "--json", "--no-save", runs_dir=tmp_path)
    out = json.loads(p.stdout)
    assert out["baseline"]["repetition"] is None and out["speculative"]["repetition"] is None, out

def test_table_output_and_a_dead_side_still_exit_zero(tmp_path: Path) -> None:
    with Standin(StandinBehavior(tokens_per_s=300, ttft_s=0.01)) as spec:
        p = run_cli("--baseline-url", "http://127.0.0.1:1", "--speculative-url", spec.url,
                    "--prompt", "Say hi", "--max-tokens", "20", runs_dir=tmp_path)
    assert p.returncode == 0, p.stderr
    assert "decode tokens/s" in p.stdout and "baseline error: Cannot reach http://127.0.0.1:1" in p.stdout
    assert "Speedup (decode tokens/s): n/a" in p.stdout


def test_a_speedup_over_the_bound_is_not_headlined_in_the_table_and_json_says_why() -> None:
    """Issue 52 (a given clock): 4x at 2.95 tokens per step is printed with "not headlined" and the
    reason beside it, per arm with several; --json carries efficiency and over_bound, per arm too."""
    base = Pace(tokens_per_s=30)
    over = Pace(tokens_per_s=120, chunk_sizes=(3,), speculative=True)
    fair = Pace(tokens_per_s=60, chunk_sizes=(3,), speculative=True)
    one = given_race(base, {"speculative": over}, 60)
    assert one.over_bound is not None and one.efficiency is not None
    table = result_table(one)
    assert f"Speedup (decode tokens/s): 4.00×  [not headlined: {one.over_bound}]" in table.splitlines()
    out = json.loads(json.dumps(result_json(one)))
    assert out["over_bound"] == one.over_bound and out["efficiency"] == one.efficiency
    assert out["arms"]["speculative"]["over_bound"] == one.over_bound
    several = given_race(base, {"eagle3": fair, "ngram": over}, 60)
    lines = {line.split(":")[0]: line for line in result_table(several).splitlines()}
    assert f"4.00×  [not headlined: {several.arms['ngram'].over_bound}], end-to-end" in lines["ngram"]
    assert "2.00×, end-to-end" in lines["eagle3"] and "not headlined" not in lines["eagle3"]
    out = result_json(several)
    assert out["over_bound"] is None and out["arms"]["eagle3"]["over_bound"] is None
    assert out["arms"]["ngram"]["over_bound"] == several.arms["ngram"].over_bound
    assert out["arms"]["ngram"]["efficiency"] == several.arms["ngram"].efficiency
    fair_one = given_race(base, {"speculative": fair}, 60)
    assert "not headlined" not in result_table(fair_one) and result_json(fair_one)["over_bound"] is None


def test_bad_arguments_exit_non_zero_with_a_clear_message(tmp_path: Path) -> None:
    cases = {
        ("--preset", "nope"): "unknown preset 'nope'; known presets:",
        ("--prompt", "   "): "The prompt is empty",
        ("--prompt", "x", "--temperature", "9"): "--temperature: Input should be less than or equal to 2",
        ("--prompt", "x", "--max-tokens", "0"): "--max-tokens: Input should be greater than or equal to 1",
        ("--prompt", "x", "--mode", "fast"): "invalid choice",
        (): "one of the arguments --preset --prompt is required",
    }
    # One process per case, all at once: each is a Python start and an argument check.
    with ThreadPoolExecutor(len(cases)) as pool:
        done = {args: pool.submit(run_cli, *args, runs_dir=tmp_path) for args in cases}
    for args, message in cases.items():
        p = done[args].result()
        assert p.returncode == 2, (args, p.stdout, p.stderr)
        assert message in p.stderr, (args, p.stderr)
        assert p.stdout == ""
