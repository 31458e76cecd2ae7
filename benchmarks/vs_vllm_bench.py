"""Does our engine measure what `vllm bench serve` measures, on the same servers and requests?

The check that our probes do not disturb the servers ("no observer effect"): the same
requests (one prompt, ``--requests`` times, ``--max-tokens`` each, greedy) at ``--concurrency``
streams, through our batch engine (demo/sweep/runner.py ``run_batch``, with its /metrics
sampling, exactly as the evaluator and the load sweep run it) and through `vllm bench serve`
(its custom dataset, ``--skip-chat-template``, via scripts/vllm_bench.sh), alternating the two
tools ``--runs`` times per server, because the host drifts (after one untimed request per server:
the bench's own test request warms the prefix cache for it, so ours is warmed once too). Prints
each run and the medians:
output tokens/s, TPOT (ms, median over requests), and for the speculative server the acceptance
rate (ours from the per-request spec metrics; the bench's from the /metrics counters it reads).

    python -m benchmarks.vs_vllm_bench [--preset json_reformat] [--requests 8] [--concurrency 4]
        [--max-tokens 160] [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import httpx

from benchmarks.vllm_bench import bench_command
from demo.client import make_http_client, run_streams
from demo.presets import load_presets
from demo.results import SIDES, Message, RaceRequest, Side
from demo.settings import Settings
from demo.streaming import ServerHandle
from demo.sweep.runner import run_batch


async def ours(settings: Settings, side: Side, prompt: str, n: int, concurrency: int,
               max_tokens: int) -> dict[str, Any]:
    url = settings.endpoint(side).url
    http = make_http_client(settings, side)
    try:
        server = ServerHandle(side, url, settings.endpoint(side).model, http)
        req = RaceRequest(messages=[Message(role="user", content=prompt)], max_tokens=max_tokens, temperature=0.0)
        stats, results = await run_batch(http, server, [req] * n, concurrency, settings)
    finally:
        await http.aclose()
    decode = sorted(r.decode_tokens_per_s for r in results if r.decode_tokens_per_s)
    acc = None
    if stats.accepted_tokens is not None and stats.draft_tokens:
        acc = stats.accepted_tokens / stats.draft_tokens
    return {"output_tokens_per_s": stats.output_tokens_per_s,
            "tpot_ms": 1000 / statistics.median(decode) if decode else None,
            "acceptance_rate": acc, "ok": stats.ok_requests, "errors": stats.errors}


def bench(url: str, model: str, tokenizer: str, dataset: Path, n: int, concurrency: int, max_tokens: int,
          out_dir: Path, tag: str) -> dict[str, Any]:
    result = out_dir / f"{tag}.json"
    cmd = bench_command(url, model, tokenizer, dataset, n, concurrency, max_tokens, result)
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}  # the tokenizer is the server's own local copy
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, env=env)
    if done.returncode != 0 or not result.is_file():
        tail = (done.stderr or done.stdout).strip().splitlines()[-5:]
        raise SystemExit(f"vllm bench serve failed ({done.returncode}):\n" + "\n".join(tail))
    data = json.loads(result.read_text())
    acc = data.get("spec_decode_acceptance_rate")
    return {"output_tokens_per_s": data.get("output_throughput"), "tpot_ms": data.get("median_tpot_ms"),
            "acceptance_rate": acc / 100 if isinstance(acc, (int, float)) else None,
            "ok": data.get("completed"), "errors": []}


def _fmt(v: float | None, spec: str) -> str:
    return "n/a" if v is None else format(v, spec)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="json_reformat")
    ap.add_argument("--requests", type=int, default=8)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=160)
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()
    settings = Settings(save_runs=False)
    prompt = user_prompt(settings, a.preset)
    rows: dict[tuple[str, Side], list[dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        dataset = Path(tmp) / "dataset.jsonl"
        dataset.write_text("".join(json.dumps({"prompt": prompt}) + "\n" for _ in range(a.requests)))
        # `vllm bench serve` sends one test request before it measures; so do we, once per server
        # before the first run, so neither tool's first batch pays the cold prefill (prefix cache).
        for side in SIDES:
            run_streams(ours(settings, side, prompt, 1, 1, 8))
        for run in range(a.runs):
            for side in SIDES:
                ep = settings.endpoint(side)
                model, tokenizer = served_model_and_path(ep.url)
                first_ours = run % 2 == 0  # alternate which tool goes first
                for tool in (("ours", "bench") if first_ours else ("bench", "ours")):
                    if tool == "ours":
                        fig = run_streams(ours(settings, side, prompt, a.requests, a.concurrency, a.max_tokens))
                    else:
                        fig = bench(ep.url, model, tokenizer, dataset, a.requests, a.concurrency,
                                    a.max_tokens, Path(tmp), f"{side}-{run}")
                    rows.setdefault((tool, side), []).append(fig)
                    print(f"run {run + 1} {side:>11} {tool:>5}: "
                          f"{_fmt(fig['output_tokens_per_s'], '.1f')} output tok/s, "
                          f"TPOT {_fmt(fig['tpot_ms'], '.1f')} ms, acceptance {_fmt(fig['acceptance_rate'], '.3f')}",
                          flush=True)
    print(f"\nmedians of {a.runs} runs: {a.requests} x {a.preset} user prompt, {a.max_tokens} tokens, "
          f"concurrency {a.concurrency}")
    print(f"{'side':>11} {'figure':>20} {'ours':>8} {'vllm bench':>11} {'diff %':>7}")
    for side in SIDES:
        for key in ("output_tokens_per_s", "tpot_ms", "acceptance_rate"):
            o = [r[key] for r in rows[("ours", side)] if r[key] is not None]
            b = [r[key] for r in rows[("bench", side)] if r[key] is not None]
            if not o or not b:
                continue
            mo, mb = statistics.median(o), statistics.median(b)
            print(f"{side:>11} {key:>20} {mo:>8.3f} {mb:>11.3f} {(mo - mb) / mb * 100:>+7.1f}")


def user_prompt(settings: Settings, preset: str) -> str:
    """The preset's user prompt: what both tools send (the bench's custom dataset has no system turn)."""
    p = load_presets(settings.presets_dir)[0][preset]
    return next(m.text for m in p.messages or [] if m.role == "user")


def served_model_and_path(url: str) -> tuple[str, str]:
    """The served model's name and its local path (the tokenizer, read offline)."""
    first = httpx.get(f"{url.rstrip('/')}/v1/models", timeout=5).json()["data"][0]
    return str(first["id"]), str(first.get("root") or first["id"])


if __name__ == "__main__":
    main()
