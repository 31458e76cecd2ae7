"""Does the client keep up with a fast server? Prints measured vs true decode tokens/s.

Two stand-in servers stream at a high rate (default 5,000 tokens/s per side, the
speculative one in multi-token chunks); a race measures both; the figures are compared
with what each server really sent (its recorded send times).

    python -m benchmarks.bench_client_throughput [--tokens-per-s 5000] [--tokens 10000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics

from demo.race import run_race
from demo.results import Message, RaceRequest
from demo.settings import Settings
from harness.standin import Standin, StandinBehavior


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens-per-s", type=float, default=5000)
    ap.add_argument("--tokens", type=int, default=10000)
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    base_b = StandinBehavior(tokens_per_s=a.tokens_per_s, ttft_s=0.01, max_model_len=100000)
    spec_b = base_b.model_copy(update={"speculative": True, "chunk_sizes": [1, 3, 5, 2]})
    req = RaceRequest(messages=[Message(role="user", content="go")], max_tokens=a.tokens, order="simultaneous")
    errors: list[float] = []
    print(f"{'run':>4} {'side':>12} {'tokens':>7} {'true tok/s':>11} {'measured':>10} {'error %':>8}")
    with Standin(base_b) as base, Standin(spec_b) as spec:
        settings = Settings(baseline_url=base.url, speculative_url=spec.url, save_runs=False)
        for i in range(a.repeats):
            result = asyncio.run(run_race(req, settings))
            for side, server in (("baseline", base), ("speculative", spec)):
                r = getattr(result, side)
                truth = server.last_truth
                assert r.error is None, r.error
                assert r.completion_tokens == truth.completion_tokens, (r.completion_tokens, truth.completion_tokens)
                err = abs(r.decode_tokens_per_s - truth.decode_tokens_per_s) / truth.decode_tokens_per_s * 100
                errors.append(err)
                print(f"{i + 1:>4} {side:>12} {r.completion_tokens:>7} {truth.decode_tokens_per_s:>11.0f} "
                      f"{r.decode_tokens_per_s:>10.0f} {err:>8.3f}")
    print(f"max error {max(errors):.3f} %, median {statistics.median(errors):.3f} % (target: under 1 %)")


if __name__ == "__main__":
    main()
