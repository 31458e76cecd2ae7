"""Does our open-loop step measure what `vllm bench serve --request-rate R` measures, on the same
servers, requests and arrival law? (The open-loop peer check, beside benchmarks/vs_vllm_bench.py's
closed-loop one.)

Per run, for each rate: our step (``python -m demo load --rate R --requests N --normalize``, the
baseline and then the speculative server, each alone, Poisson arrivals rescaled so that N requests
span N/R seconds, as vLLM rescales its gaps) and `vllm bench serve --request-rate R --num-prompts
N` on each server (its gaps from numpy's seeded generator, rescaled the same way; no concurrency
cap), the tools alternating which goes first, after one untimed request per server. The requests:
one preset's user prompt, ``--max-tokens`` each, greedy. Prints each run and the medians of
completed requests/s, output tokens/s, TPOT p50 and ITL p50/p99 per server and rate, and the
difference. Beside them, each tool's mean TPOT against the server's own mean of it over the same
run (``vllm:request_time_per_output_token_seconds`` before and after: the step's own scrapes for
ours, this check's between runs for vllm bench serve's): on a shared 2-vCPU host the server's
speed moved by up to a third from run to run on the same arrivals, so two tools' medians of a few
runs can differ by as much by chance, while each tool's reading of the server's speed checks to
a fraction of a percent (docs/benchmarks.md, peer checks). ITL differs by definition on a
speculative server: vLLM's is the gap between chunks (one chunk can carry several tokens), ours
the time per token of each chunk (docs/load.md); on the baseline, one token a chunk, the two are
one figure.

    python -m benchmarks.vs_vllm_bench_rate [--preset json_reformat] [--rates 0.25,0.5,1,2]
        [--requests 16] [--max-tokens 160] [--runs 3] [--their-draws]

``--their-draws``: our step replays vLLM's own arrival draws (``vllm_offsets_s``, through ``demo load
--replay``) rather than drawing its own, so that past a server's capacity, where the queue a request
meets sets its TPOT, both tools meet the same queue.

With ``--slo-e2e-ms MS``, the capacity check instead, over ``--rates``: `vllm bench serve
--request-rate R --goodput e2el:MS` at each rate gives the share of requests within the SLO, and its
capacity is the rate at which that share crosses 95%, interpolated linearly. Ours, twice: (1) our
step at each rate replaying vLLM's own arrival draws (numpy seeded with its ``--seed``, gamma gaps,
rescaled to N/R: ``vllm_offsets_s``) through ``demo load --workload --replay``, and our capacity rule
(demo/load/rate.py ``capacity_of``: p95/bound crossing 1, interpolated) over those steps; (2) our own
sweep with our own seeded draws (``demo load --rate R1,R2,... --normalize``). And our rule over
vLLM's own p95s, which isolates the rule from the measurement: the share of requests within the SLO
falls as a cliff (a step's requests have nearly one latency), so its linear crossing sits near the
last rate that met it, where the p95's ratio grows smoothly and crosses mid-way. With N requests a step,
"p95 within the bound" and "at least 95% within it" are one statement when N is a multiple of 20
(the 19th of 20 within), so use ``--requests 20``. With 20 requests, which draw of the same law a
step gets moves its p95 by 10-20%: (1) is the measurement check, (2) what a user's sweep gives.

    python -m benchmarks.vs_vllm_bench_rate --slo-e2e-ms 10000 --rates 0.5,1,1.5,2 --requests 20
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import httpx

from benchmarks.vllm_bench import bench_command
from benchmarks.vs_vllm_bench import served_model_and_path, user_prompt
from demo.load.arrivals import parse_rates
from demo.load.rate_models import RateSide
from demo.load.rate_summary import capacity_of
from demo.metrics import MetricsSample, scrape, tpot_mean_between
from demo.results import SIDES, Side
from demo.settings import Settings
from demo.slo import Slo

FIGURES = ("completed_requests_per_s", "output_tokens_per_s", "tpot_p50_ms", "tpot_mean_ms", "itl_p50_ms",
           "itl_p99_ms")


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


def _ms(d: dict[str, Any], key: str) -> float | None:
    v = d.get(key)
    return None if v is None else v * 1000


def _our_figures(side: dict[str, Any], lead_s: float = 0.0) -> dict[str, Any]:
    """Our step's figures as the check compares them; ``lead_s``: time before the step's first arrival
    that vllm bench serve's clock counts and a replay's does not (its first request waits its first gap)."""
    per_s = 1.0 if not lead_s or not side["duration_s"] else side["duration_s"] / (side["duration_s"] + lead_s)
    return {"completed_requests_per_s": _scaled(side["completed_requests_per_s"], per_s),
            "output_tokens_per_s": _scaled(side["output_tokens_per_s"], per_s),
            "tpot_p50_ms": _ms(side["tpot_s"], "p50"),
            "tpot_mean_ms": _ms(side, "tpot_mean_s"), "server_tpot_mean_ms": _ms(side, "server_tpot_mean_s"),
            "itl_p50_ms": _ms(side["itl_s"], "p50"), "itl_p99_ms": _ms(side["itl_s"], "p99"),
            "ok": side["finished"], "sent": side["sent"]}


def _scaled(v: float | None, by: float) -> float | None:
    return None if v is None else v * by


def bench(url: str, dataset: Path, rate: float, n: int, max_tokens: int, out_dir: Path, tag: str) -> dict[str, Any]:
    """`vllm bench serve --request-rate` on one server: its figures."""
    model, tokenizer = served_model_and_path(url)
    result = out_dir / f"{tag}.json"
    cmd = bench_command(url, model, tokenizer, dataset, n, n, max_tokens, result, "--request-rate", f"{rate:g}",
                        "--seed", "0", "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,99")
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    before = server_metrics(url)
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, env=env)
    if done.returncode != 0 or not result.is_file():
        tail = (done.stderr or done.stdout).strip().splitlines()[-5:]
        raise SystemExit(f"vllm bench serve failed ({done.returncode}):\n" + "\n".join(tail))
    server_tpot_s, _, _ = tpot_mean_between(before, server_metrics(url))
    data = json.loads(result.read_text())
    return {"completed_requests_per_s": data.get("request_throughput"),
            "output_tokens_per_s": data.get("output_throughput"), "tpot_p50_ms": data.get("median_tpot_ms"),
            "tpot_mean_ms": data.get("mean_tpot_ms"),
            "server_tpot_mean_ms": None if server_tpot_s is None else server_tpot_s * 1000,
            "itl_p50_ms": data.get("median_itl_ms"), "itl_p99_ms": data.get("p99_itl_ms"),
            "ok": data.get("completed"), "sent": n}


def server_metrics(url: str) -> MetricsSample:
    """One scrape of the server's /metrics (demo.metrics.scrape: a failure is a sample saying why),
    between runs, never while a tool streams."""
    async def once() -> MetricsSample:
        async with httpx.AsyncClient() as http:
            return await scrape(http, url, 10)

    return asyncio.run(once())


def against_server(fig: dict[str, Any]) -> float | None:
    """A run's mean TPOT over the server's own mean for the same requests, in percent off."""
    mine, server = fig.get("tpot_mean_ms"), fig.get("server_tpot_mean_ms")
    return None if mine is None or not server else (mine / server - 1) * 100


def our_capacity(settings: Settings, prompt: str, rates: str, n: int, max_tokens: int,
                 slo_e2e_ms: float, save: Path | None = None) -> dict[Side, dict[str, Any]]:
    """Our sweep over every rate with the end-to-end SLO (p95): each server's capacity and its steps
    (its load.json saved to ``save`` when given)."""
    cmd = [sys.executable, "-m", "demo", "load", "--rate", rates, "--requests", str(n), "--normalize",
           "--arrivals", "poisson", "--prompt", prompt, "--max-tokens", str(max_tokens), "--temperature", "0",
           "--slo-e2e-ms", f"{slo_e2e_ms:g}", "--baseline-url", settings.baseline_url,
           "--speculative-url", settings.speculative_url, "--json", "--no-progress"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
    if done.returncode != 0:
        raise SystemExit(f"demo load failed ({done.returncode}): {done.stderr.strip()[-800:]}")
    data = json.loads(done.stdout)
    if save:
        save.write_text(done.stdout)
    caps = data["summary"]["capacity"]
    arm = next(n for n in caps if n != "baseline")
    out: dict[Side, dict[str, Any]] = {}
    pairs: tuple[tuple[Side, str], ...] = (("baseline", "baseline"), ("speculative", arm))
    for side, name in pairs:
        steps = [(s["rate_requests_per_s"], s["baseline"] if side == "baseline" else s["arms"][arm]["side"])
                 for s in data["rate_steps"]]
        cap = caps[name]
        out[side] = {"capacity": cap["requests_per_s"], "method": cap["method"] or cap["na_reason"],
                     "steps": {r: {"within": st["good"], "finished": st["finished"], "sent": st["sent"],
                                   "e2e_p95_s": st["e2e_s"].get("p95")} for r, st in steps}}
    print("ours: " + data["summary"]["capacity_text"], flush=True)
    return out


def share_crossing(points: list[tuple[float, float]], share: float) -> tuple[float | None, str]:
    """The rate at which the share of requests within the SLO falls below ``share``: linear between the
    last rate at or above it and the next one (never beyond the rates measured)."""
    pts = sorted(points)
    if not pts or pts[0][1] < share:
        return None, "not even the lowest rate met it"
    k = next((i for i, (_, v) in enumerate(pts) if v < share), None)
    if k is None:
        return pts[-1][0], f"every rate met it: at least {pts[-1][0]:g} req/s"
    (r0, v0), (r1, v1) = pts[k - 1], pts[k]
    return r0 + (v0 - share) * (r1 - r0) / (v0 - v1), f"interpolated between {r0:g} (met) and {r1:g} req/s"


def vllm_offsets_s(rate: float, n: int, seed: int = 0) -> list[float]:
    """The send offsets `vllm bench serve --request-rate R --seed K --num-prompts N` draws (its
    ``get_request``: numpy's global generator seeded with K, gamma gaps of shape 1 (Poisson) and scale
    1/R, summed, rescaled so the last is N/R)."""
    import numpy as np  # noqa: PLC0415 (the check's only numpy use)

    np.random.seed(seed)
    delays = np.cumsum(np.random.gamma(shape=1.0, scale=1.0 / rate, size=n))
    return [float(d) for d in delays * (n / rate) / delays[-1]]


def replay_step(settings: Settings, prompt: str, rate: float, n: int, max_tokens: int, slo_e2e_ms: float | None,
                tmp: Path) -> dict[str, Any]:
    """Our step on vLLM's own arrival draws at ``rate``: the trace replayed (``demo load --replay``),
    judged against ``slo_e2e_ms`` when given."""
    trace = tmp / f"vllm-draws-{rate:g}.jsonl"
    trace.write_text("".join(json.dumps({"timestamp": t * 1000, "messages": [{"role": "user", "content": prompt}],
                                         "output_length": max_tokens}) + "\n" for t in vllm_offsets_s(rate, n)))
    slo = [] if slo_e2e_ms is None else ["--slo-e2e-ms", f"{slo_e2e_ms:g}"]
    cmd = [sys.executable, "-m", "demo", "load", "--workload", str(trace), "--replay", "--max-tokens",
           str(max_tokens), "--temperature", "0", *slo, "--baseline-url",
           settings.baseline_url, "--speculative-url", settings.speculative_url, "--json", "--no-progress"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
    if done.returncode != 0:
        raise SystemExit(f"demo load --replay failed ({done.returncode}): {done.stderr.strip()[-800:]}")
    data = json.loads(done.stdout)
    (step,) = data["rate_steps"]
    return {"slo": data["rate"].get("slo"), "baseline": step["baseline"],
            "speculative": next(iter(step["arms"].values()))["side"]}


def ours_on_their_draws(settings: Settings, prompt: str, rate: float, n: int, max_tokens: int,
                        tmp: Path) -> dict[Side, dict[str, Any]]:
    """``--their-draws``: our step on vLLM's own arrival draws (replay_step), its figures as ``ours``
    gives them: past a server's capacity each request's TPOT is set by the queue it meets, so only the
    same arrivals compare TPOT there. A replay's clock starts at its first arrival, vllm bench serve's a
    first gap before it: the rates per second are taken over vLLM's span (``_our_figures``' lead)."""
    step = replay_step(settings, prompt, rate, n, max_tokens, None, tmp)
    lead_s = vllm_offsets_s(rate, n)[0]
    return {side: _our_figures(step[side], lead_s) for side in SIDES}


def capacity_check(a: argparse.Namespace, settings: Settings, prompt: str, dataset: Path, tmp: Path) -> None:
    """Ours against `vllm bench serve --goodput` over the same rates: each server's capacity under the SLO."""
    rates = parse_rates(a.rates)
    on_their_draws = {r: replay_step(settings, prompt, r, a.requests, a.max_tokens, a.slo_e2e_ms, tmp) for r in rates}
    slo = Slo.model_validate(on_their_draws[rates[0]]["slo"])
    ours_caps = our_capacity(settings, prompt, a.rates, a.requests, a.max_tokens, a.slo_e2e_ms, a.save_ours)
    print(f"\ncapacity within e2e p95 <= {a.slo_e2e_ms:g} ms: {a.requests} x {a.preset} user prompt, "
          f"{a.max_tokens} tokens, Poisson normalized to N/R, rates {a.rates}")
    for side in SIDES:
        model, tokenizer = served_model_and_path(settings.endpoint(side).url)
        shares: list[tuple[float, float]] = []
        p95s: list[tuple[float, float]] = []
        for rate in rates:
            result = tmp / f"goodput-{side}-{rate:g}.json"
            cmd = bench_command(settings.endpoint(side).url, model, tokenizer, dataset, a.requests, a.requests,
                                a.max_tokens, result, "--request-rate", f"{rate:g}", "--seed", "0",
                                "--goodput", f"e2el:{a.slo_e2e_ms:g}", "--percentile-metrics", "e2el",
                                "--metric-percentiles", "95")
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=1800,
                                  env={**os.environ, "HF_HUB_OFFLINE": "1"})
            if done.returncode != 0 or not result.is_file():
                raise SystemExit(f"vllm bench serve failed ({done.returncode}): {(done.stderr or '')[-800:]}")
            data = json.loads(result.read_text())
            share = data["request_goodput"] / data["request_throughput"]
            shares.append((rate, share))
            if data.get("completed") == a.requests and data.get("p95_e2el_ms") is not None:
                p95s.append((rate, data["p95_e2el_ms"]))
            theirs_draws = on_their_draws[rate][side]
            own = ours_caps[side]["steps"].get(rate, {})
            print(f"{side:>11} {rate:>4g} req/s: vllm bench {share * 100:5.1f}% within, e2el p95 "
                  f"{data.get('p95_e2el_ms', float('nan')) / 1000:.2f} s ({data['completed']}/{a.requests}); ours on "
                  f"its draws {theirs_draws['good']}/{theirs_draws['sent']} within, e2e p95 "
                  f"{_fmt(theirs_draws['e2e_s'].get('p95'))} s; ours on our draws {own.get('within')}/"
                  f"{own.get('sent')}, e2e p95 {_fmt(own.get('e2e_p95_s'))} s", flush=True)
        theirs, how = share_crossing(shares, 0.95)
        # The replayed trace's own mean rate runs from its first arrival: its step is the nominal rate's.
        same = capacity_of(side, [RateSide.model_validate({**on_their_draws[r][side], "rate_requests_per_s": r})
                                  for r in rates], slo)
        their_p95 = capacity_of(side, [RateSide(name=side, rate_requests_per_s=r, sent=a.requests, finished=a.requests,
                                                slo_figures_s={"e2e": p95 / 1000})
                                       for r, p95 in p95s], slo)
        own_cap = ours_caps[side]["capacity"]
        print(f"{side:>11}: vllm bench's p95 by our rule {_fmt(their_p95.requests_per_s)} req/s "
              f"({their_p95.method or their_p95.na_reason})", flush=True)
        for label, mine, method in (("ours on its draws", same.requests_per_s, same.method or same.na_reason),
                                    ("ours on our draws", own_cap, ours_caps[side]["method"])):
            diff = "n/a" if mine is None or theirs is None else f"{(mine - theirs) / theirs * 100:+.1f}%"
            print(f"{side:>11}: {label} {_fmt(mine)} req/s ({method}); vllm bench --goodput {_fmt(theirs)} "
                  f"req/s ({how}); difference {diff}", flush=True)


def _fmt(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.3f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="json_reformat")
    ap.add_argument("--rates", default="0.25,0.5,1,2")
    ap.add_argument("--requests", type=int, default=16)
    ap.add_argument("--max-tokens", type=int, default=160)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--slo-e2e-ms", type=float, default=None,
                    help="the capacity check: ours and vllm bench --goodput e2el:MS over --rates, once")
    ap.add_argument("--save-ours", type=Path, default=None, help="the capacity check: save our sweep's JSON here")
    ap.add_argument("--their-draws", action="store_true",
                    help="our steps replay vllm bench serve's own arrival draws (numpy, --seed 0) instead of ours")
    a = ap.parse_args()
    settings = Settings(save_runs=False)
    prompt = user_prompt(settings, a.preset)
    rows: dict[tuple[float, str, Side], list[dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        dataset = Path(tmp) / "dataset.jsonl"
        dataset.write_text("".join(json.dumps({"prompt": prompt}) + "\n" for _ in range(a.requests)))
        ours(settings, prompt, 1.0, 1, 8)  # one untimed request per server: the prefix cache, as the bench's own
        if a.slo_e2e_ms is not None:
            capacity_check(a, settings, prompt, dataset, Path(tmp))
            return
        for run in range(a.runs):
            for rate in parse_rates(a.rates):
                order = ("ours", "bench") if run % 2 == 0 else ("bench", "ours")
                for tool in order:
                    if tool == "ours" and a.their_draws:
                        figs = ours_on_their_draws(settings, prompt, rate, a.requests, a.max_tokens, Path(tmp))
                    elif tool == "ours":
                        figs = ours(settings, prompt, rate, a.requests, a.max_tokens)
                    else:
                        figs = {side: bench(settings.endpoint(side).url, dataset, rate, a.requests, a.max_tokens,
                                            Path(tmp), f"{side}-{rate:g}-{run}") for side in SIDES}
                    for side, fig in figs.items():
                        rows.setdefault((rate, tool, side), []).append(fig)
                        print(f"run {run + 1} rate {rate:g} {side:>11} {tool:>5}: "
                              + ", ".join(f"{k} {_fmt(fig[k])}" for k in FIGURES) + f", ok {fig['ok']}/{fig['sent']}"
                              f", server's own tpot_mean_ms {_fmt(fig['server_tpot_mean_ms'])}", flush=True)
    draws = "ours on vllm bench serve's own draws" if a.their_draws else "each tool its own draws"
    print(f"\nmedians of {a.runs} runs: {a.requests} x {a.preset} user prompt, {a.max_tokens} tokens, Poisson, "
          f"normalized to N/R ({draws})")
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
    print("\nmean TPOT against the server's own over the same run (% off: median, worst), and how far the "
          "server's own moved between runs (max / min)")
    for rate in parse_rates(a.rates):
        for side in SIDES:
            cells = []
            for tool in ("ours", "bench"):
                off = [v for r in rows[(rate, tool, side)] if (v := against_server(r)) is not None]
                own = [r["server_tpot_mean_ms"] for r in rows[(rate, tool, side)] if r["server_tpot_mean_ms"]]
                cells.append(f"{tool} {_pct(off)}, server moved {max(own) / min(own):.2f}x" if own else f"{tool} n/a")
            print(f"{rate:>5g} {side:>11}: " + "; ".join(cells))


def _pct(off: list[float]) -> str:
    if not off:
        return "n/a"
    return f"{statistics.median(off):+.2f}% (worst {max(off, key=abs):+.2f}%)"


if __name__ == "__main__":
    main()
