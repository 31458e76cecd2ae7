"""The client and the measurements on traffic captured from a real vLLM server (tests/fixtures)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from demo.client import error_from_response, make_http_client, parse_chunk, stream_completion
from demo.measure import SideMeter
from demo.metrics import parse_metrics, spec_stats_from_delta
from demo.results import ChunkEvent, RaceRequest
from demo.settings import Settings
from harness.standin import Standin, StandinBehavior

FIX = Path(__file__).parent / "fixtures"


def replay_offline(name: str) -> SideMeter:
    """Feed a captured stream, with its captured arrival times, into a meter."""
    lines = [ln[5:].strip() for ln in (FIX / f"{name}.sse").read_text().split("\n") if ln.startswith("data:")]
    times = [float(x) for x in (FIX / f"{name}.times").read_text().split()]
    assert len(lines) == len(times)
    meter = SideMeter("speculative", "fixture", t0=0.0)
    for payload, t in zip(lines, times, strict=True):
        meter.feed(ChunkEvent(t_s=t, done=True) if payload == "[DONE]" else parse_chunk(json.loads(payload), t))
    return meter


def test_speculative_chat_capture_counts_tokens_from_usage_not_chunks() -> None:
    r = replay_offline("stream-chat-speculative").result()
    assert r.completion_tokens == 200
    assert r.chunks == 133  # content chunks: counting them would say 133 tokens
    assert r.tokens_per_chunk == {1: 106, 2: 11, 3: 1, 4: 6, 5: 9}
    assert sum(n * c for n, c in r.tokens_per_chunk.items()) == 200
    assert r.finish_reason == "length" and r.complete
    assert r.ttft_s == pytest.approx(2.802357)
    times = [float(x) for x in (FIX / "stream-chat-speculative.times").read_text().split()]
    # first token at line 2, last token at the finish chunk (3rd line from the end)
    assert r.decode_tokens_per_s == pytest.approx(199 / (times[-3] - times[1]))
    assert r.itl_p50_s is not None and r.itl_p95_s is not None and r.itl_p50_s <= r.itl_p95_s


def test_speculative_capture_acceptance_from_per_request_metrics() -> None:
    spec = replay_offline("stream-chat-speculative").result().spec
    assert spec is not None and spec.source == "per_request"
    assert (spec.drafts, spec.draft_tokens, spec.accepted_tokens) == (56, 224, 68)
    assert spec.acceptance_rate == pytest.approx(68 / 224)
    assert spec.mean_acceptance_length == pytest.approx(1 + 68 / 56)
    # histogram [29,11,1,5,10]: position i accepted in steps that accepted > i tokens
    assert spec.per_position_acceptance == pytest.approx([27 / 56, 16 / 56, 15 / 56, 10 / 56])


def test_creative_capture_has_zero_acceptance() -> None:
    spec = replay_offline("stream-chat-speculative-creative").result().spec
    assert spec is not None
    assert spec.acceptance_rate == 0.0 and spec.mean_acceptance_length == 1.0


def test_usage_only_capture_still_counts_tokens_but_not_per_chunk() -> None:
    r = replay_offline("stream-chat-speculative-usage-only").result()
    assert r.completion_tokens == 200
    assert r.decode_tokens_per_s is not None
    assert r.itl_p50_s is None and "continuous_usage_stats" in r.na_reasons["itl_p50_s"]
    assert r.tokens_per_chunk == {}


def test_baseline_and_completions_captures() -> None:
    base = replay_offline("stream-chat-baseline").result()
    assert base.completion_tokens == 200 and base.tokens_per_chunk == {1: 200} and base.spec is None
    comp = replay_offline("stream-completions-speculative").result()
    assert comp.completion_tokens == 200 and comp.tokens_per_chunk == {1: 102, 2: 11, 3: 2, 4: 5, 5: 10}
    assert comp.spec is not None and comp.spec.accepted_tokens == 70


def test_aborted_capture_is_incomplete_with_reasons() -> None:
    r = replay_offline("stream-chat-speculative-aborted-after-10").result()
    assert r.completion_tokens == 9 and not r.complete
    assert r.e2e_s is None and "did not finish" in r.na_reasons["e2e_s"]


def test_metrics_delta_matches_the_captured_counters() -> None:
    before = parse_metrics((FIX / "metrics-speculative-before.txt").read_text())
    after = parse_metrics((FIX / "metrics-speculative-after.txt").read_text())
    stats = spec_stats_from_delta(before, after)
    assert stats is not None and stats.source == "metrics_delta"
    assert (stats.drafts, stats.draft_tokens, stats.accepted_tokens) == (112, 448, 136)
    assert stats.acceptance_rate == pytest.approx(136 / 448)
    assert stats.mean_acceptance_length == pytest.approx(1 + 136 / 112)
    assert stats.per_position_acceptance == pytest.approx([54 / 112, 32 / 112, 30 / 112, 20 / 112])
    assert after.kv_cache_usage_perc is not None


def test_baseline_metrics_have_no_spec_series_and_garbage_is_reported() -> None:
    base_before = parse_metrics((FIX / "metrics-baseline-before.txt").read_text())
    base_after = parse_metrics((FIX / "metrics-baseline-after.txt").read_text())
    assert spec_stats_from_delta(base_before, base_after) is None
    bad = parse_metrics("vllm:kv_cache_usage_perc{a=} nope nope\n{{{")
    assert not bad.ok and "malformed" in (bad.error or "")
    stats = spec_stats_from_delta(bad, bad)
    assert stats is not None and stats.acceptance_rate is None and "malformed" in stats.na_reasons["acceptance_rate"]


@pytest.mark.parametrize(
    ("fixture", "status", "expect"),
    [
        ("error-too-long.txt", 400, "maximum context length is 2048 tokens"),
        ("error-bad-max-tokens.txt", 400, "max_tokens must be at least 1"),
        ("error-unknown-model.txt", 404, "does not exist"),
        ("error-bad-json.txt", 400, "JSON decode error"),
    ],
)
def test_captured_error_bodies_become_one_line(fixture: str, status: int, expect: str) -> None:
    body = next(ln for ln in (FIX / fixture).read_text().splitlines() if ln.startswith('{"error"'))
    err = str(error_from_response(status, body.encode(), "http://x:1"))
    assert expect in err and f"HTTP {status}" in err and "\n" not in err


def test_captured_stream_over_real_http_gives_the_same_figures() -> None:
    """The byte-exact capture replayed by a real HTTP server, read by the real client."""

    async def go() -> SideMeter:
        behavior = StandinBehavior(replay_fixture=FIX / "stream-chat-speculative.sse", replay_speed=5.0)
        with Standin(behavior) as s:
            settings = Settings(baseline_url=s.url, speculative_url=s.url)
            meter = SideMeter("speculative", s.url)
            async with make_http_client(settings) as http:
                async for ev in stream_completion(http, s.url, "smollm2", RaceRequest(prompt="x"), t0=meter.t0):
                    meter.feed(ev)
            return meter

    r = asyncio.run(go()).result()
    assert r.completion_tokens == 200 and r.chunks == 133 and r.complete
    assert r.spec is not None and r.spec.accepted_tokens == 68


@pytest.mark.parametrize("data", [
    {"choices": [{"delta": {"content": 5}}]},  # text that is not text
    {"choices": [{"delta": {"content": "a"}, "finish_reason": 1}]},
    {"choices": [{"delta": {"content": "a"}}], "usage": {"completion_tokens": "7"}},  # a count as text
    {"choices": [{"delta": {"content": "a"}}], "usage": {"completion_tokens": True}},
    {"choices": [{"delta": {"content": "a"}}], "usage": {"prompt_tokens": -1}},
    {"choices": [{"delta": ["a"]}]},
    {"choices": ["a"]},
    {"choices": {"0": {}}},
    {"choices": [], "usage": [1]},
])
def test_a_chunk_with_a_field_of_the_wrong_type_is_bad_data(data: dict[str, object]) -> None:
    """ChunkEvent is a plain dataclass (no validation: it is made for every chunk), so parse_chunk
    checks each field's type itself: a wrong one is the stream's one-line error, never a wrong count
    or a TypeError later."""
    from demo.client import StreamError

    with pytest.raises(StreamError, match="Bad data"):
        parse_chunk(data, 0.1)
    ok = parse_chunk({"choices": [{"delta": {"content": "a"}, "finish_reason": None}],
                      "usage": {"completion_tokens": 3, "prompt_tokens": 9}}, 0.1)
    assert (ok.text, ok.completion_tokens, ok.prompt_tokens, ok.finish_reason) == ("a", 3, 9, None)
