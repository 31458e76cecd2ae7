"""Tool calls on the two real CPU vLLM servers (the e2e stage): both take a request with tools and a
history of calls (tests/fixtures/requests/chat-tool-call.json) and answer with the same hermes tool
call as the capture, read by the client's parser: get_weather {"city": "Paris"}. The request goes
to each server one after the other (no timing is read), as its body, tools and all."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from demo.client import discover_model, make_http_client, parse_chunk
from demo.measure import SideMeter, same_answer
from demo.results import ChunkEvent, Side, SideResult, ToolCall
from demo.settings import Settings

pytestmark = pytest.mark.e2e

FIX = Path(__file__).resolve().parents[1] / "fixtures"


def tool_body(model: str) -> dict[str, Any]:
    body: dict[str, Any] = json.loads((FIX / "requests" / "chat-tool-call.json").read_text())
    return {**body, "model": model}


async def answer(settings: Settings, side: Side) -> SideResult:
    """The captured tool request streamed to one server; its events through the client's parser."""
    endpoint = settings.endpoint(side)
    url = endpoint.url
    async with make_http_client(settings, side) as http:
        model = endpoint.model or (await discover_model(http, url)).id
        meter = SideMeter(side, url)
        async with http.stream("POST", url.rstrip("/") + "/v1/chat/completions", json=tool_body(model),
                               timeout=httpx.Timeout(300.0, connect=10.0)) as resp:
            assert resp.status_code == 200, (await resp.aread())[:500]
            async for line in resp.aiter_lines():
                if not line.startswith("data:"):
                    continue
                payload = line[5:].strip()
                t = time.perf_counter() - meter.t0
                meter.feed(ChunkEvent(t_s=t, done=True) if payload == "[DONE]" else parse_chunk(json.loads(payload), t))
    return meter.result()


@pytest.fixture(scope="module")
def answers(real_servers: Settings) -> dict[str, SideResult]:
    return {side: asyncio.run(answer(real_servers, side)) for side in ("baseline", "speculative")}


def test_both_servers_answer_the_captured_tool_call(answers: dict[str, SideResult]) -> None:
    for side, r in answers.items():
        assert r.complete and r.error is None, (side, r.error)
        assert [(c.name, json.loads(c.arguments)) for c in r.tool_calls] == [("get_weather", {"city": "Paris"})], side
        assert r.finish_reason == "tool_calls" and r.text == "", side
        assert r.completion_tokens == 31, side  # as captured: the same model, template and parser
    assert same_answer(answers["baseline"], answers["speculative"])
    assert answers["baseline"].tool_calls[0].model_copy(update={"id": None}) == ToolCall(
        name="get_weather", arguments='{"city": "Paris"}')
