"""Stop on the real CPU servers: vLLM really aborts both requests (run with `pytest -m e2e`).

vLLM does not count an abort in request_success_total (tests/fixtures/abort.txt: no
finished_reason grows), so the evidence is the engine itself: num_requests_running back to 0
within a few seconds of Stop, and generation_tokens_total grown by far less than max_tokens
(a request that kept running would generate all of them: the servers are shared, so the
test first waits for them to be idle and skips, saying so, when someone keeps them busy).
"""

from __future__ import annotations

import asyncio
import contextlib
import time

import httpx
import pytest

from benchmarks.load_test import run_async
from demo.metrics import MetricsSample, scrape_metrics
from demo.race import stream_race
from demo.results import Message, RaceRequest
from demo.settings import Settings

pytestmark = pytest.mark.e2e
MAX_TOKENS = 1000
STOP_AFTER_TOKENS = 5
REQ = RaceRequest(messages=[Message(role="user", content="Count from 1 to 500, one number per line.")],
                  temperature=0.0, max_tokens=MAX_TOKENS)


async def _scrape(http: httpx.AsyncClient, settings: Settings) -> dict[str, MetricsSample]:
    urls = {"baseline": settings.baseline_url, "speculative": settings.speculative_url}
    samples = await asyncio.gather(*(scrape_metrics(http, u, settings) for u in urls.values()))
    for side, s in zip(urls, samples, strict=True):
        assert s.ok and s.num_requests_running is not None and s.generation_tokens_total is not None, (side, s)
    return dict(zip(urls, samples, strict=True))


async def _wait_idle(http: httpx.AsyncClient, settings: Settings, timeout_s: float) -> tuple[float, dict]:
    t0 = time.monotonic()
    while True:  # each look is a scrape over HTTP, awaited: the poll cannot be a plain condition
        now = await _scrape(http, settings)
        if all(s.num_requests_running == 0 for s in now.values()):
            return time.monotonic() - t0, now
        if time.monotonic() - t0 > timeout_s:
            return -1.0, now
        await asyncio.sleep(0.2)


def test_stop_mid_stream_makes_vllm_abort_both_requests(real_servers: Settings) -> None:
    settings = real_servers

    async def go() -> None:
        async with httpx.AsyncClient(timeout=10, trust_env=False) as http:
            waited, before = await _wait_idle(http, settings, timeout_s=60)
            if waited < 0:
                pytest.skip("the real servers stayed busy with other requests for 60 s")
            stop = asyncio.Event()
            final = None
            async with contextlib.aclosing(stream_race(REQ, settings, stop=stop)) as snaps:
                async for snap in snaps:
                    if all((getattr(snap, s).completion_tokens or 0) >= STOP_AFTER_TOKENS
                           for s in ("baseline", "speculative")):
                        stop.set()
                    final = snap.result or final
            assert final is not None and final.cancelled
            received = {s: getattr(final, s).completion_tokens or 0 for s in ("baseline", "speculative")}
            took, after = await _wait_idle(http, settings, timeout_s=5)
            grown = {s: after[s].generation_tokens_total - before[s].generation_tokens_total
                     for s in after}
            print(f"\n[abort] received {received} tokens before Stop; num_requests_running 0 after "
                  f"{took:.1f} s; generation_tokens_total grew {grown} (max_tokens {MAX_TOKENS})")
            assert took >= 0, f"vLLM still running requests 5 s after Stop: {after}"
            for side in grown:
                assert received[side] >= STOP_AFTER_TOKENS
                # The engine stopped soon after the client left: far from the 1000 it was asked for.
                assert grown[side] < MAX_TOKENS / 4, (side, grown[side])

    run_async(go())
