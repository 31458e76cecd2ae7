"""The evaluator's own probe must not disturb what it measures: while a batch streams, /metrics is
scraped at most once every KV_SAMPLE_INTERVAL_S (>= 1 s), yet still mid-batch, so that the KV peak
is seen. Ten scrapes a second cost a CPU server 4-10% of its throughput (docs/evaluator.md)."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

from demo.client import make_http_client
from demo.metrics import MetricsSample
from demo.results import Message, RaceRequest
from demo.settings import Settings
from demo.sweep import runner
from harness.standin import Standin, StandinBehavior


def test_a_streaming_batch_is_scraped_at_most_once_a_second(monkeypatch: pytest.MonkeyPatch) -> None:
    assert runner.KV_SAMPLE_INTERVAL_S >= 1.0
    scrapes: list[float] = []
    real = runner.scrape_metrics

    async def counted(http: httpx.AsyncClient, url: str, settings: Settings) -> MetricsSample:
        scrapes.append(time.monotonic())
        return await real(http, url, settings)

    monkeypatch.setattr(runner, "scrape_metrics", counted)
    # Two streams of 100 tokens at 40 tokens/s: a batch of about 2.5 s (longer on a busy machine).
    behavior = StandinBehavior(tokens_per_s=40, ttft_s=0.02)
    req = RaceRequest(messages=[Message(role="user", content="hello")], max_tokens=100)
    with Standin(behavior) as s:
        settings = Settings(baseline_url=s.url, speculative_url=s.url, save_runs=False, read_timeout_s=10)

        async def go() -> tuple[float, float]:
            async with make_http_client(settings, "baseline") as http:
                server = runner.ServerHandle("baseline", s.url, None, http)
                t0 = time.monotonic()
                stats, _ = await runner.run_batch(http, server, [req, req], 2, settings)
                assert stats.ok_requests == 2
                return t0, time.monotonic()

        t_start, t_end = asyncio.run(go())
    before, *during, after = scrapes
    assert before >= t_start and after <= t_end
    assert during, "no scrape while the batch streamed: the KV peak would be missed"
    gaps = [b - a for a, b in zip([before, *during], during, strict=False)]
    assert min(gaps) >= 0.95 * runner.KV_SAMPLE_INTERVAL_S, gaps
