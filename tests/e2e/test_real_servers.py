"""Races against the two real CPU vLLM servers: the product's claims, checked on the real thing.

Slow (a race takes ~10-40 s on 2 cores): run with `pytest -m e2e`. Each race is run once per
module and shared by the checks that read it.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import httpx
import pytest

from common.paths import ROOT
from demo.presets import load_presets
from demo.race import run_race
from demo.results import Message, RaceRequest, RaceResult, SideResult
from demo.settings import Settings

pytestmark = pytest.mark.e2e
# Fallback prompts, used only when the presets folder lacks the named preset.
FALLBACK = {
    "json_reformat": ("Reformat this JSON with 2-space indentation, keep every field and value exactly:\n"
                      + json.dumps({"order": {"id": "A-1",
                                              "items": [{"sku": f"SKU-{i}", "qty": i} for i in range(12)]}}),
                      0.0, 300),
    "poetry": ("Write a poem of about twenty lines about a lighthouse keeper during a storm.", 1.0, 200),
}


def request(settings: Settings, name: str, **over: object) -> RaceRequest:
    presets, _ = load_presets(settings.presets_dir)
    if name in presets:
        p = presets[name]
        fields: dict[str, object] = dict(preset=p.name, messages=p.messages, temperature=p.temperature,
                                         max_tokens=p.max_tokens, api=p.api)
    else:
        prompt, temperature, max_tokens = FALLBACK[name]
        fields = dict(messages=[Message(role="user", content=prompt)], temperature=temperature, max_tokens=max_tokens)
    fields.update(order="sequential")
    fields.update(over)
    return RaceRequest(**fields)


@pytest.fixture(scope="module")
def json_race(real_servers: Settings) -> RaceResult:
    return asyncio.run(run_race(request(real_servers, "json_reformat"), real_servers))


@pytest.fixture(scope="module")
def poetry_race(real_servers: Settings) -> RaceResult:
    # Same length as the JSON race's cap would be unfair to neither; 200 tokens keep it short. Read
    # for its acceptance only (the server's own counts, whatever the timing): both sides at once.
    return asyncio.run(run_race(request(real_servers, "poetry", max_tokens=200, order="simultaneous"), real_servers))


def _retokenized(url: str, model: str, text: str) -> int:
    r = httpx.post(f"{url}/tokenize", json={"model": model, "prompt": text, "add_special_tokens": False}, timeout=30)
    r.raise_for_status()
    return int(r.json()["count"])


def test_json_race_ran_cleanly(json_race: RaceResult) -> None:
    for side in (json_race.baseline, json_race.speculative):
        assert side.error is None, f"{side.side}: {side.error}"
        assert side.complete and side.completion_tokens and side.completion_tokens > 50


def test_greedy_text_is_identical_on_both_sides(json_race: RaceResult) -> None:
    b, s = json_race.baseline, json_race.speculative
    assert json_race.request.temperature == 0.0
    assert json_race.identical_text is True, f"texts differ at character {json_race.first_difference}"
    assert b.text == s.text and b.completion_tokens == s.completion_tokens


@pytest.mark.parametrize("side_name", ["baseline", "speculative"])
def test_token_counts_are_exact(json_race: RaceResult, real_servers: Settings, served_model: str,
                                side_name: str) -> None:
    side: SideResult = getattr(json_race, side_name)
    usage = side.completion_tokens
    # The client's own count: the running usage deltas of every chunk add up to the final usage.
    assert sum(size * n for size, n in side.tokens_per_chunk.items()) == usage
    finals = [e.completion_tokens for e in side.events if e.final_usage]
    assert finals == [usage], "the final usage chunk is the count the side reports"
    # And the server's tokenizer, asked independently, finds that many tokens in the text
    # (a stop token is counted in usage but not shown in the text).
    n = _retokenized(side.url, served_model, side.text)
    if side.finish_reason == "length":
        assert usage == json_race.request.max_tokens and n == usage
    else:
        assert n in (usage, usage - 1)


def test_speculative_side_counts_more_tokens_per_chunk(json_race: RaceResult) -> None:
    """What chunk counting would get wrong: the speculative stream carries several tokens per chunk."""
    s, b = json_race.speculative, json_race.baseline
    assert s.completion_tokens is not None and b.completion_tokens is not None
    spec_per_chunk = s.completion_tokens / s.chunks
    # The baseline sends ~1 token per chunk (vLLM may merge a few steps when the reader lags).
    base_per_chunk = b.completion_tokens / b.chunks
    print(f"\n[e2e] tokens per chunk: baseline {base_per_chunk:.2f}, speculative {spec_per_chunk:.2f}")
    assert base_per_chunk < 1.3
    assert spec_per_chunk > 1.5 * base_per_chunk


def test_acceptance_comes_from_the_real_server(json_race: RaceResult) -> None:
    spec = json_race.speculative.spec
    assert spec is not None and spec.source == "per_request"
    assert spec.acceptance_rate is not None and spec.acceptance_rate > 0
    assert spec.accepted_tokens and spec.draft_tokens and spec.accepted_tokens <= spec.draft_tokens
    assert spec.num_spec_tokens == 4
    assert spec.mean_acceptance_length is not None and 1.0 < spec.mean_acceptance_length <= 5.0


def test_speculative_decode_is_at_least_1_5x_faster_on_json(json_race: RaceResult) -> None:
    b, s = json_race.baseline, json_race.speculative
    assert json_race.order == "sequential"
    assert json_race.speedup is not None, json_race.na_reasons
    print(f"\n[e2e] json_reformat decode: baseline {b.decode_tokens_per_s:.1f} tok/s, "
          f"speculative {s.decode_tokens_per_s:.1f} tok/s, speedup {json_race.speedup:.2f}x")
    assert json_race.speedup >= 1.5


def test_creative_text_at_t1_accepts_less_than_json(json_race: RaceResult, poetry_race: RaceResult) -> None:
    assert poetry_race.request.temperature == 1.0
    assert poetry_race.speculative.error is None, poetry_race.speculative.error
    creative, structured = poetry_race.speculative.spec, json_race.speculative.spec
    assert creative is not None and structured is not None
    assert creative.acceptance_rate is not None and structured.acceptance_rate is not None
    print(f"\n[e2e] acceptance: json_reformat {structured.acceptance_rate:.2f}, "
          f"poetry T=1.0 {creative.acceptance_rate:.2f}")
    assert creative.acceptance_rate < structured.acceptance_rate


def test_cli_race_prints_one_json_object(real_servers: Settings) -> None:
    """The documented race command (docs/cli-and-configuration.md), as a user runs it, against the real servers."""
    done = subprocess.run(
        [sys.executable, "-m", "demo", "race", "--baseline-url", real_servers.baseline_url,
         "--speculative-url", real_servers.speculative_url, "--prompt", "List the numbers 1 to 20, comma separated.",
         "--max-tokens", "48", "--order", "simultaneous", "--no-save", "--json"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["order"] == "simultaneous" and out["baseline"]["error"] is None and out["speculative"]["error"] is None
    # Both at once, greedy, float32: still the same text token for token.
    assert out["identical_text"] is True
    assert out["baseline"]["completion_tokens"] == out["speculative"]["completion_tokens"] <= 48
    assert out["speculative"]["acceptance_rate"] is not None


def test_servers_status_names_the_kernel_build_the_cpu_flags_pick(real_servers: Settings) -> None:
    """`python -m servers status` names the vLLM kernel build each server loaded and its compute
    threads: on this CPU, the build vllm/platforms/cpu.py picks from its flags (issue 52)."""
    from harness import e2e_pair

    done = subprocess.run([sys.executable, "-m", "servers", "status", "--json", "--run-dir", str(e2e_pair.RUN_DIR)],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    rows = [r for r in json.loads(done.stdout) if r["managed"]]
    if not rows:
        pytest.skip(f"the pair at {real_servers.baseline_url} was not started in {e2e_pair.RUN_DIR}")
    flags = set(open("/proc/cpuinfo").read().split("flags", 1)[1].split("\n", 1)[0].split())
    want = ("_C" if {"avx512f", "avx512_bf16"} <= flags else "_C_AVX512" if "avx512f" in flags else "_C_AVX2")
    for row in rows:
        assert row["kernels"] == want, (row["role"], row["kernels"], sorted(f for f in flags if "avx" in f))
        spans = [tuple(map(int, part.split("-"))) for part in str(row["cores"]).split(",")]
        assert row["compute_threads"] == sum(span[-1] - span[0] + 1 for span in spans) >= 1, row
