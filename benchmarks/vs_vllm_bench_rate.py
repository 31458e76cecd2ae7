"""Does our open-loop step measure what `vllm bench serve --request-rate R` measures, on the same
servers, requests and arrival law? (issue 41's peer check, beside benchmarks/vs_vllm_bench.py's
closed-loop one.)

Per run, for each rate: our step (``python -m demo load --rate R --requests N --normalize``, the
baseline and then the speculative server, each alone, Poisson arrivals rescaled so that N requests
span N/R seconds, as vLLM rescales its gaps) and `vllm bench serve --request-rate R --num-prompts
N` on each server (its gaps from numpy's seeded generator, rescaled the same way; no concurrency
cap), the tools alternating which goes first, after one untimed request per server. The requests:
one preset's user prompt, ``--max-tokens`` each, greedy. Prints each run and the medians of
completed requests/s, output tokens/s, TPOT p50 and ITL p50/p99 per server and rate, and the
difference. ITL differs by definition on a speculative server: vLLM's is the gap between chunks
(one chunk can carry several tokens), ours the time per token of each chunk (docs/load.md); on the
baseline, one token a chunk, the two are one figure.

    python -m benchmarks.vs_vllm_bench_rate [--preset json_reformat] [--rates 0.25,0.5,1,2]
        [--requests 16] [--max-tokens 160] [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.vllm_bench import bench_command
from benchmarks.vs_vllm_bench import _served_model, user_prompt
from demo.load.arrivals import parse_rates
from demo.results import SIDES, Side
from demo.settings import Settings

FIGURES = ("completed_requests_per_s", "output_tokens_per_s", "tpot_p50_ms", "itl_p50_ms", "itl_p99_ms")


def ours(settings: Settings, prompt: str, rate: float, n: int, max_tokens: int) -> dict[Side, dict[str, Any]]:
    """One open-loop step of ours at ``rate`` on both servers (the CLI, as a user runs it)."""
    cmd = [sys.executable, "-m", "demo", "load", "--rate", f"{rate:g}", "--requests", str(n), "--normalize",
           "--arrivals", "poisson", "--prompt", prompt, "--max-tokens", str(max_tokens), "--temperature", "0",
           "--baseline-url", settings.baseline_url, "--speculative-url", settings.speculative_url,
           "--json", "--no-progress"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        raise SystemExit(f"demo load failed ({done.returncode}): {done.stderr.strip()[-800:]}")
    data = json.loads(done.stdout)
    (step,) = data["rate_steps"]
    arm = next(iter(step["arms"].values()))["side"]
    return {"baseline": _our_figures(step["baseline"]), "speculative": _our_figures(arm)}


def _ms(d: dict[str, float | None], key: str) -> float | None:
    v = d.get(key)
    return None if v is None else v * 1000


def _our_figures(side: dict[str, Any]) -> dict[str, Any]:
    return {"completed_requests_per_s": side["completed_requests_per_s"],
            "output_tokens_per_s": side["output_tokens_per_s"], "tpot_p50_ms": _ms(side["tpot_s"], "p50"),
            "itl_p50_ms": _ms(side["itl_s"], "p50"), "itl_p99_ms": _ms(side["itl_s"], "p99"),
            "ok": side["finished"], "sent": side["sent"]}


def bench(url: str, dataset: Path, rate: float, n: int, max_tokens: int, out_dir: Path, tag: str) -> dict[str, Any]:
    """`vllm bench serve --request-rate` on one server: its figures."""
    model, tokenizer = _served_model(url)
    result = out_dir / f"{tag}.json"
    cmd = bench_command(url, model, tokenizer, dataset, n, n, max_tokens, result, "--request-rate", f"{rate:g}",
                        "--seed", "0", "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,99")
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, env=env)
    if done.returncode != 0 or not result.is_file():
        tail = (done.stderr or done.stdout).strip().splitlines()[-5:]
        raise SystemExit(f"vllm bench serve failed ({done.returncode}):\n" + "\n".join(tail))
    data = json.loads(result.read_text())
    return {"completed_requests_per_s": data.get("request_throughput"),
            "output_tokens_per_s": data.get("output_throughput"), "tpot_p50_ms": data.get("median_tpot_ms"),
            "itl_p50_ms": data.get("median_itl_ms"), "itl_p99_ms": data.get("p99_itl_ms"),
            "ok": data.get("completed"), "sent": n}


def _fmt(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.3f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="json_reformat")
    ap.add_argument("--rates", default="0.25,0.5,1,2")
    ap.add_argument("--requests", type=int, default=16)
    ap.add_argument("--max-tokens", type=int, default=160)
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()
    settings = Settings(save_runs=False)
    prompt = user_prompt(settings, a.preset)
    rows: dict[tuple[float, str, Side], list[dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        dataset = Path(tmp) / "dataset.jsonl"
        dataset.write_text("".join(json.dumps({"prompt": prompt}) + "\n" for _ in range(a.requests)))
        ours(settings, prompt, 1.0, 1, 8)  # one untimed request per server: the prefix cache, as the bench's own
        for run in range(a.runs):
            for rate in parse_rates(a.rates):
                order = ("ours", "bench") if run % 2 == 0 else ("bench", "ours")
                for tool in order:
                    if tool == "ours":
                        figs = ours(settings, prompt, rate, a.requests, a.max_tokens)
                    else:
                        figs = {side: bench(settings.endpoint(side).url, dataset, rate, a.requests, a.max_tokens,
                                            Path(tmp), f"{side}-{rate:g}-{run}") for side in SIDES}
                    for side, fig in figs.items():
                        rows.setdefault((rate, tool, side), []).append(fig)
                        print(f"run {run + 1} rate {rate:g} {side:>11} {tool:>5}: "
                              + ", ".join(f"{k} {_fmt(fig[k])}" for k in FIGURES) + f", ok {fig['ok']}/{fig['sent']}",
                              flush=True)
    print(f"\nmedians of {a.runs} runs: {a.requests} x {a.preset} user prompt, {a.max_tokens} tokens, Poisson, "
          "normalized to N/R")
    print(f"{'rate':>5} {'side':>11} {'figure':>24} {'ours':>9} {'vllm bench':>11} {'diff %':>7}")
    for rate in parse_rates(a.rates):
        for side in SIDES:
            for key in FIGURES:
                o = [r[key] for r in rows[(rate, "ours", side)] if r[key] is not None]
                b = [r[key] for r in rows[(rate, "bench", side)] if r[key] is not None]
                if not o or not b:
                    continue
                mo, mb = statistics.median(o), statistics.median(b)
                print(f"{rate:>5g} {side:>11} {key:>24} {mo:>9.3f} {mb:>11.3f} {(mo - mb) / mb * 100:>+7.1f}")


if __name__ == "__main__":
    main()
