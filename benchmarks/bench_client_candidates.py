"""Which HTTP client keeps up? Candidate transports reading the same N streams from one stand-in.

Each candidate reads the same streams (chat, include_usage and continuous_usage_stats) and does the
least our meter needs per chunk: the SSE line, its JSON, the usage's completion_tokens, the first
token's time. ``ours`` is the engine itself (demo/sweep/runner.py ``run_batch``). One JSON line per
candidate: client and truth tokens/s, the client's CPU share and CPU per token, event-loop lag p95,
TTFT p50. docs/benchmarks.md "Which HTTP client" has the figures.

    python -m benchmarks.bench_client_candidates --streams 256 --tps 100 --tokens 1000 \
        --candidates ours,httpx,httpx-orjson,aiohttp,aiohttp-orjson,aiohttp-orjson-uvloop

aiohttp and uvloop are not in the project's requirements (``pip install aiohttp uvloop`` for them);
a candidate whose library is missing is skipped with a line saying so.
"""
from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import statistics
import time
from typing import Any

from harness.standin import StandinBehavior
from harness.standin_process import StandinProcess

PROMPT = "Stream {i}: tell me about the sea, the wind and the boats."


def body(i: int, model: str, max_tokens: int) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": PROMPT.format(i=i)}], "max_tokens": max_tokens,
            "stream": True, "stream_options": {"include_usage": True, "continuous_usage_stats": True}}


class Probe:
    """Event-loop lag: how late a 10 ms sleep wakes."""

    def __init__(self) -> None:
        self.lags: list[float] = []

    async def tick(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            due = loop.time() + 0.01
            await asyncio.sleep(0.01)
            self.lags.append(max(0.0, loop.time() - due))


class Tally:
    """What one stream has said so far: its tokens (from usage) and when the first one came."""

    def __init__(self, loads: Any) -> None:
        self.loads, self.t0, self.tokens = loads, time.perf_counter(), 0
        self.first: float | None = None

    def take(self, payload: str | bytes) -> bool:
        """One SSE data payload; False at [DONE]."""
        if payload in ("[DONE]", b"[DONE]"):
            return False
        usage = self.loads(payload).get("usage")
        if usage:
            self.tokens = usage.get("completion_tokens") or self.tokens
            if self.first is None and self.tokens:
                self.first = time.perf_counter() - self.t0
        return True


async def httpx_stream(client: Any, url: str, b: dict[str, Any], loads: Any, out: list[Any]) -> None:
    """One stream through httpx: tokens and first-token time appended to ``out``."""
    tally = Tally(loads)
    async with client.stream("POST", url, json=b) as r:
        async for line in r.aiter_lines():
            if line.startswith("data:") and not tally.take(line[5:].strip()):
                break
    out.append((tally.tokens, tally.first))


async def aiohttp_stream(session: Any, url: str, b: dict[str, Any], loads: Any, out: list[Any]) -> None:
    """One stream through aiohttp (its bytes split into SSE events here)."""
    tally = Tally(loads)
    async with session.post(url, json=b) as r:
        buf = b""
        async for chunk in r.content.iter_any():
            buf += chunk
            while b"\n\n" in buf:
                ev, buf = buf.split(b"\n\n", 1)
                for line in ev.split(b"\n"):
                    if line.startswith(b"data:") and not tally.take(line[5:].strip()):
                        out.append((tally.tokens, tally.first))
                        return
    out.append((tally.tokens, tally.first))


async def run_candidate(name: str, url: str, model: str, n: int, max_tokens: int) -> dict[str, Any]:
    """One candidate's run of ``n`` streams: its figures (the truth is added by the caller)."""
    probe = Probe()
    out: list[Any] = []
    cpu0, wall0 = time.process_time(), time.perf_counter()
    ticker = asyncio.create_task(probe.tick())
    if name == "ours":
        from demo.client import make_http_client
        from demo.results import Message, RaceRequest
        from demo.settings import Settings
        from demo.streaming import ServerHandle
        from demo.sweep.runner import run_batch
        settings = Settings(baseline_url=url, speculative_url=url, save_runs=False)
        reqs = [RaceRequest(messages=[Message(role="user", content=PROMPT.format(i=i))], max_tokens=max_tokens)
                for i in range(n)]
        async with make_http_client(settings, "baseline") as http:
            server = ServerHandle("baseline", url, model, http)
            _stats, results = await run_batch(http, server, reqs, len(reqs), settings, keep_text=False)
        out = [(r.completion_tokens or 0, r.ttft_s) for r in results]
    elif name.startswith("httpx"):
        import httpx
        loads: Any = json.loads
        if "orjson" in name:
            import orjson
            loads = orjson.loads
        limits = httpx.Limits(max_connections=n + 8, max_keepalive_connections=n + 8)
        async with httpx.AsyncClient(limits=limits, timeout=600, trust_env=False) as c:
            await asyncio.gather(*(httpx_stream(c, url + "/v1/chat/completions", body(i, model, max_tokens), loads, out)
                                   for i in range(n)))
    else:
        import aiohttp
        loads = json.loads
        if "orjson" in name:
            import orjson
            loads = orjson.loads
        conn = aiohttp.TCPConnector(limit=n + 8)
        async with aiohttp.ClientSession(connector=conn, timeout=aiohttp.ClientTimeout(total=600)) as s:
            await asyncio.gather(*(aiohttp_stream(s, url + "/v1/chat/completions", body(i, model, max_tokens), loads,
                                                  out) for i in range(n)))
    wall = time.perf_counter() - wall0
    cpu = time.process_time() - cpu0
    ticker.cancel()
    tokens = sum(t for t, _ in out)
    ttfts = [f for _, f in out if f is not None]
    lags = sorted(probe.lags)
    return {"candidate": name, "wall_s": wall, "tokens": tokens, "client_tokens_per_s": tokens / wall,
            "cpu_share": cpu / wall, "cpu_us_per_token": cpu / max(tokens, 1) * 1e6,
            "lag_p95_ms": lags[int(len(lags) * 0.95)] * 1000 if lags else None,
            "ttft_p50_ms": statistics.median(ttfts) * 1000 if ttfts else None}


MODULES = {"aiohttp": "aiohttp", "orjson": "orjson", "uvloop": "uvloop"}


def missing(name: str) -> list[str]:
    """The libraries candidate ``name`` needs that are not installed."""
    return [m for part, m in MODULES.items() if part in name and importlib.util.find_spec(m) is None]


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m benchmarks.bench_client_candidates")
    p.add_argument("--streams", type=int, default=256)
    p.add_argument("--tps", type=float, default=100)
    p.add_argument("--tokens", type=int, default=1000)
    p.add_argument("--candidates", default="ours,httpx,aiohttp")
    a = p.parse_args()
    beh = StandinBehavior(tokens_per_s=a.tps, ttft_s=0.05)
    with StandinProcess(beh) as s:
        for name in a.candidates.split(","):
            if lacking := missing(name):
                print(json.dumps({"candidate": name, "skipped": f"not installed: {', '.join(lacking)}"}), flush=True)
                continue
            since = len(s.truth())
            if name.endswith("uvloop"):
                import uvloop

                res = uvloop.run(run_candidate(name.removesuffix("-uvloop"), s.url, beh.model, a.streams, a.tokens))
                res["candidate"] = name
            else:
                res = asyncio.run(run_candidate(name, s.url, beh.model, a.streams, a.tokens))
            truths = s.truth(since)
            done = [t for t in truths if t.t_last_token_sent is not None]
            if done:
                span = max(t.t_last_token_sent or 0.0 for t in done) - min(t.t_request for t in done)
                res["truth_tokens_per_s"] = sum(t.completion_tokens for t in done) / span
                rates = [t.decode_tokens_per_s for t in done if t.decode_tokens_per_s]
                res["standin_rate_share"] = statistics.median(rates) / a.tps if rates else None
            print(json.dumps({k: (round(v, 3) if isinstance(v, float) else v) for k, v in res.items()}), flush=True)


if __name__ == "__main__":
    main()
