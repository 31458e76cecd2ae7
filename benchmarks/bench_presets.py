"""Baseline vs speculative decode speed per preset, on the servers that are running now.

    python -m benchmarks.bench_presets                     # every preset, sequential order
    python -m benchmarks.bench_presets --presets json_reformat rag_long --repeat 3
    python -m benchmarks.bench_presets --restart           # also time a warm restart of the pair, and
                                                           # its first race's time to first token

Sequential order (one request at a time on an idle server) is the fair A/B. Prints per preset:
tokens, decode tokens/s of each side, speedup, end-to-end speedup, acceptance, tokens per step
(len: the mean acceptance length), efficiency (speedup / tokens per step; 1.0 is the bound), identical text;
then each server's time to healthy (cold/warm) and memory, from `python -m servers status`. With
--restart, the first two races after the restart (the first preset, no warm-up request of our
own: `servers up` has warmed the servers up; the second prompt differs at its start, so the prefix
cache does not help it) show whether the first race pays for compilation: each side's time to
first token in race 1 and race 2.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import time
from typing import Any

from demo.measure import efficiency, median
from demo.presets import load_presets
from demo.race import run_race
from demo.results import SIDES, RaceRequest, RaceResult
from demo.settings import Settings
from servers.launcher import status_rows
from servers.settings import ROOT, LauncherSettings


def preset_request(settings: Settings, name: str, max_tokens: int | None, warmup: bool) -> RaceRequest:
    presets, _ = load_presets(settings.presets_dir)
    p = presets[name]
    return p.to_request(max_tokens=max_tokens or p.max_tokens, order="sequential", warmup=warmup)


def preset_row(name: str, runs: list[RaceResult]) -> dict[str, Any]:
    last = runs[-1]
    spec = [r.speculative.spec for r in runs]
    return {
        "preset": name,
        "temperature": last.request.temperature,
        "runs": len(runs),
        "completion_tokens": last.speculative.completion_tokens,
        "prompt_tokens": last.baseline.prompt_tokens,
        "baseline_decode_tokens_per_s": median([r.baseline.decode_tokens_per_s for r in runs]),
        "speculative_decode_tokens_per_s": median([r.speculative.decode_tokens_per_s for r in runs]),
        "speedup": median([r.speedup for r in runs]),
        "e2e_speedup": median([r.e2e_speedup for r in runs]),
        "baseline_ttft_s": median([r.baseline.ttft_s for r in runs]),
        "speculative_ttft_s": median([r.speculative.ttft_s for r in runs]),
        "acceptance_rate": median([s.acceptance_rate if s else None for s in spec]),
        "mean_acceptance_length": median([s.mean_acceptance_length if s else None for s in spec]),
        "efficiency": median([efficiency(r.speedup, s.mean_acceptance_length if s else None)
                           for r, s in zip(runs, spec, strict=True)]),
        "identical_text": all(r.identical_text for r in runs),
        "errors": sorted({e for r in runs for e in (r.baseline.error, r.speculative.error) if e}),
    }


def _f(v: Any, fmt: str) -> str:
    return "-" if v is None else format(v, fmt)


def print_table(rows: list[dict[str, Any]]) -> None:
    head = f"{'preset':<15} {'T':>3} {'tokens':>6} {'prompt':>6} {'base tok/s':>10} {'spec tok/s':>10} " \
           f"{'speedup':>7} {'e2e':>5} {'accept':>6} {'len':>4} {'eff':>4} {'same':>4}"
    print(head)
    print("-" * len(head))
    for r in rows:
        print(f"{r['preset']:<15} {r['temperature']:>3.1f} {_f(r['completion_tokens'], 'd'):>6} "
              f"{_f(r['prompt_tokens'], 'd'):>6} {_f(r['baseline_decode_tokens_per_s'], '.1f'):>10} "
              f"{_f(r['speculative_decode_tokens_per_s'], '.1f'):>10} {_f(r['speedup'], '.2f'):>6}x "
              f"{_f(r['e2e_speedup'], '.2f'):>4}x {_f(r['acceptance_rate'], '.2f'):>6} "
              f"{_f(r['mean_acceptance_length'], '.2f'):>4} {_f(r['efficiency'], '.2f'):>4} "
              f"{'yes' if r['identical_text'] else 'no':>4}")
        for e in r["errors"]:
            print(f"    error: {e}")


def first_races(settings: Settings, name: str) -> None:
    """Time to first token of each side in the first and second race after a restart. The second
    prompt starts with two more words, so vLLM's prefix cache cannot serve it the first one's
    prefill: both races prefill the same length from scratch."""
    first = preset_request(settings, name, None, warmup=False)
    if first.messages:
        head, *rest = first.messages
        head = head.model_copy(update={"content": f"Once more: {head.content}"})
        second = first.model_copy(update={"messages": [head, *rest]})
    else:
        second = first.model_copy(update={"prompt": f"Once more: {first.prompt or ''}"})
    races = [asyncio.run(run_race(req, settings)) for req in (first, second)]
    print(f"first races after the restart ({name}): time to first token, race 1 / race 2")
    for side in SIDES:
        t1, t2 = (getattr(r, side).ttft_s for r in races)
        ratio = f"{t1 / t2:.2f}x" if t1 is not None and t2 else "n/a (a side failed)"
        print(f"  {side:<12} {_f(t1, '.3f')} s / {_f(t2, '.3f')} s  (race 1 = {ratio} race 2)")
    print()


def restart_pair() -> float:
    """Stop and start the launcher's pair; seconds until both are healthy again."""
    py = sys.executable
    subprocess.run([py, "-m", "servers", "down"], cwd=ROOT, check=True, timeout=180)
    t0 = time.monotonic()
    subprocess.run([py, "-m", "servers", "up", "--detach"], cwd=ROOT, check=True, timeout=1800)
    return time.monotonic() - t0


def print_servers() -> list[dict[str, Any]]:
    rows = status_rows(LauncherSettings())
    print(f"\n{'server':<12} {'healthy':>7} {'start':>5} {'to healthy':>10} {'memory PSS':>10} {'RSS':>8}")
    for r in rows:
        pss, rss = r["memory_pss_bytes"], r["memory_rss_bytes"]
        pss_gb = pss / 1e9 if isinstance(pss, int) and pss else None
        rss_gb = rss / 1e9 if isinstance(rss, int) and rss else None
        print(f"{r['role']:<12} {'yes' if r['healthy'] else 'no':>7} {r['start_kind'] or '-':>5} "
              f"{_f(r['time_to_healthy_s'], '.0f'):>9}s {_f(pss_gb, '.2f'):>7} GB {_f(rss_gb, '.2f'):>5} GB")
    pss_all = [v for r in rows if isinstance(v := r["memory_pss_bytes"], int) and v]
    if len(pss_all) == 2:
        print(f"{'pair':<12} {'':>7} {'':>5} {'':>10} {sum(pss_all) / 1e9:>7.2f} GB")
    if not any(r["managed"] for r in rows):
        print("(servers not started by `python -m servers up`: no start time or memory to show)")
    return rows


def main(argv: list[str] | None = None) -> int:
    settings = Settings(save_runs=False)
    presets, _ = load_presets(settings.presets_dir)
    ap = argparse.ArgumentParser(prog="python -m benchmarks.bench_presets", description=__doc__.splitlines()[0])
    ap.add_argument("--presets", nargs="+", default=sorted(presets), choices=sorted(presets))
    ap.add_argument("--repeat", type=int, default=1, help="races per preset; the median is shown")
    ap.add_argument("--max-tokens", type=int, help="override every preset's max_tokens")
    ap.add_argument("--restart", action="store_true", help="first restart the pair and time a warm start")
    ap.add_argument("--json", action="store_true", help="also print all figures as one JSON object")
    args = ap.parse_args(argv)

    restart_s = restart_pair() if args.restart else None
    print(f"baseline {settings.baseline_url} vs speculative {settings.speculative_url}, sequential order\n")
    if restart_s is not None:
        first_races(settings, args.presets[0])
    rows = []
    for i, name in enumerate(args.presets):
        runs = []
        for j in range(args.repeat):
            req = preset_request(settings, name, args.max_tokens, warmup=(i == 0 and j == 0))
            runs.append(asyncio.run(run_race(req, settings)))
        rows.append(preset_row(name, runs))
    print_table(rows)
    servers = print_servers()
    if restart_s is not None:
        print(f"\nrestart (down, then up until both healthy): {restart_s:.0f} s")
    if args.json:
        print(json.dumps({"presets": rows, "servers": servers, "restart_s": restart_s}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
