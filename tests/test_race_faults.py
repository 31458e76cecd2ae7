"""Bad input and faults: one side's clear one-line error, the other side unaffected, no hang."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from common.waiting import wait_for_async
from demo.race import run_race, stream_race
from demo.results import Message, RaceRequest, RaceResult
from demo.settings import Settings
from harness.ports import free_port
from harness.standin import Standin, StandinBehavior

REQ = RaceRequest(messages=[Message(role="user", content="Hello there")], max_tokens=40)
FAST = StandinBehavior(tokens_per_s=400, ttft_s=0.01)



def race(base_url: str, spec_url: str, req: RaceRequest = REQ, **kw: Any) -> RaceResult:
    settings = Settings(baseline_url=base_url, speculative_url=spec_url, save_runs=False, **kw)
    return asyncio.run(run_race(req, settings))


def assert_one_line(err: str | None, *needles: str) -> None:
    assert err is not None and "\n" not in err, err
    for n in needles:
        assert n in err, err


def test_unreachable_url_fails_that_side_only() -> None:
    with Standin(FAST.model_copy(update={"speculative": True, "chunk_sizes": [2]})) as spec:
        r = race(f"http://127.0.0.1:{free_port()}", spec.url)
    assert_one_line(r.baseline.error, "Cannot reach", "python -m servers up")
    assert r.speculative.error is None and r.speculative.completion_tokens == 40
    assert r.speedup is None and r.na_reasons["speedup"] == "baseline failed"


@pytest.mark.parametrize(
    ("fault", "needles"),
    [
        ("too_long", ("HTTP 400", "maximum context length")),
        ("server_error", ("HTTP 500",)),
        ("cut", ("cut after 5 tokens",)),
        ("garbage", ("not JSON",)),
    ],
)
def test_server_faults_fail_that_side_only(fault: str, needles: tuple[str, ...]) -> None:
    with Standin(FAST) as base, Standin(FAST.model_copy(update={"fault": fault, "fault_after_chunks": 5})) as spec:
        r = race(base.url, spec.url)
    assert_one_line(r.speculative.error, *needles)
    assert not r.speculative.complete
    assert r.baseline.error is None and r.baseline.complete and r.baseline.completion_tokens == 40
    if fault == "cut":  # what arrived before the cut is kept, marked incomplete
        assert r.speculative.completion_tokens == 5 and r.speculative.text


def test_stall_hits_the_read_timeout_not_a_hang() -> None:
    stall = FAST.model_copy(update={"fault": "stall", "fault_after_chunks": 3, "stall_s": 30})
    with Standin(FAST) as base, Standin(stall) as spec:
        t = time.monotonic()
        r = race(base.url, spec.url, read_timeout_s=0.5)
        took = time.monotonic() - t
    assert_one_line(r.speculative.error, "stalled", "after 3 tokens")
    assert r.baseline.complete
    assert took < 10


def test_no_metrics_at_all_says_why_acceptance_is_unknown() -> None:
    spec_b = FAST.model_copy(update={"speculative": True, "chunk_sizes": [3], "per_request_metrics": False,
                                     "metrics_mode": "missing"})
    with Standin(FAST) as base, Standin(spec_b) as spec:
        r = race(base.url, spec.url)
    s = r.speculative
    assert s.error is None and s.completion_tokens == 40
    assert s.spec is not None and s.spec.acceptance_rate is None
    assert "HTTP 404" in s.spec.na_reasons["acceptance_rate"]


def test_malformed_metrics_says_so() -> None:
    spec_b = FAST.model_copy(update={"speculative": True, "chunk_sizes": [3], "per_request_metrics": False,
                                     "metrics_mode": "malformed"})
    with Standin(FAST) as base, Standin(spec_b) as spec:
        r = race(base.url, spec.url)
    assert r.speculative.spec is not None and "malformed" in r.speculative.spec.na_reasons["acceptance_rate"]


def test_empty_prompt_is_refused_before_sending() -> None:
    with pytest.raises(ValueError, match="prompt is empty"):
        race("http://127.0.0.1:1", "http://127.0.0.1:1", RaceRequest(messages=[Message(role="user", content=" ")]))


def test_stop_closes_both_streams_and_the_servers_see_the_abort() -> None:
    slow = StandinBehavior(tokens_per_s=20, ttft_s=0.01)

    async def go(base: Standin, spec: Standin) -> RaceResult:
        settings = Settings(baseline_url=base.url, speculative_url=spec.url, save_runs=False)
        stop = asyncio.Event()
        last = None
        async for snap in stream_race(REQ.model_copy(update={"max_tokens": 500}), settings, stop=stop):
            last = snap
            if (snap.baseline.completion_tokens or 0) >= 3 and (snap.speculative.completion_tokens or 0) >= 3:
                stop.set()
        assert last is not None and last.result is not None
        # Closed by the race itself, not by this event loop's end (asyncio.run cancels what is left).
        await wait_for_async(lambda: base.open_streams == spec.open_streams == 0, 10,
                             "both streams closed once the stopped race has ended")
        return last.result

    with Standin(slow) as base, Standin(slow.model_copy(update={"speculative": True, "chunk_sizes": [2]})) as spec:
        result = asyncio.run(go(base, spec))
        assert base.wait_idle() and spec.wait_idle()
        assert base.aborted == 1 and spec.aborted == 1
    assert result.cancelled
    assert "Stopped" in (result.baseline.error or "") and not result.baseline.complete
    assert result.baseline.completion_tokens and result.baseline.completion_tokens < 500


def test_cancelling_the_consumer_closes_both_streams() -> None:
    slow = StandinBehavior(tokens_per_s=20, ttft_s=0.01)

    async def consume(settings: Settings) -> None:
        async for _ in stream_race(REQ.model_copy(update={"max_tokens": 500}), settings):
            pass

    async def go(base: Standin, spec: Standin) -> None:
        settings = Settings(baseline_url=base.url, speculative_url=spec.url, save_runs=False)
        task = asyncio.create_task(consume(settings))
        await asyncio.sleep(0.4)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    with Standin(slow) as base, Standin(slow) as spec:
        asyncio.run(go(base, spec))
        assert base.wait_idle() and spec.wait_idle()
        assert base.aborted == 1 and spec.aborted == 1


def test_live_snapshots_stream_while_tokens_arrive() -> None:
    async def go(base: Standin, spec: Standin) -> list[int]:
        settings = Settings(baseline_url=base.url, speculative_url=spec.url, save_runs=False)
        counts = []
        async for snap in stream_race(REQ.model_copy(update={"max_tokens": 200}), settings):
            counts.append(snap.speculative.completion_tokens or 0)
        return counts

    # 200 tokens at 100/s: 2 s of tokens, so a busy machine's late wake-ups (0.2 s and more seen at load
    # 20) stay small against the stream, and snapshots every 0.05 s show it growing.
    with Standin.pair(StandinBehavior(tokens_per_s=100, ttft_s=0.01)) as (base, spec):
        counts = asyncio.run(go(base, spec))
    assert counts == sorted(counts) and counts[-1] == 200
    assert len({c for c in counts if 0 < c < 200}) >= 3, counts  # counts between none and all: live


def test_live_speedup_and_a_heartbeat_while_a_side_is_silent() -> None:
    async def go(base: Standin, spec: Standin) -> list:
        settings = Settings(baseline_url=base.url, speculative_url=spec.url, save_runs=False, read_timeout_s=3)
        return [snap async for snap in stream_race(REQ.model_copy(update={"max_tokens": 30}), settings)]

    stall = FAST.model_copy(update={"fault": "stall", "fault_after_chunks": 3, "stall_s": 30})
    with Standin(FAST) as base, Standin(stall) as spec:
        snaps = asyncio.run(go(base, spec))
    live = [s for s in snaps if s.live_speedup is not None and s.result is None]
    assert live and all(
        s.live_speedup == s.speculative.tokens_per_s / s.baseline.tokens_per_s for s in live)
    # while the speculative server says nothing, snapshots still come and its elapsed time moves
    silent = [s.speculative.elapsed_s for s in snaps if s.speculative.completion_tokens == 3 and s.result is None]
    assert len(silent) >= 3 and silent[-1] - silent[0] > 1.0
    assert "stalled" in (snaps[-1].result.speculative.error or "")


def test_api_key_is_sent_as_bearer_token() -> None:
    keyed = FAST.model_copy(update={"api_key": "s3cret"})
    with Standin(keyed) as base, Standin(keyed) as spec:
        bad = race(base.url, spec.url)
        good = race(base.url, spec.url, api_key="s3cret")
    assert_one_line(bad.baseline.error, "HTTP 401", "SPECDEMO_API_KEY")
    assert good.baseline.complete and good.speculative.complete
    assert "s3cret" not in good.model_dump_json()  # never in a saved run


def test_prompt_over_the_context_is_refused_before_sending() -> None:
    small = FAST.model_copy(update={"max_model_len": 50})
    long_prompt = RaceRequest(messages=[Message(role="user", content="word " * 80)], max_tokens=10)
    with Standin(small) as base, Standin(small.model_copy(update={"tokenize": False})) as spec:
        r = race(base.url, spec.url, long_prompt)
        # checked before sending where /tokenize answers: no generation request reached the server
        assert not any(q.path.endswith("completions") for q in base.requests)
        # without /tokenize the server's own 400 says it, in the same place
        assert any(q.path.endswith("completions") for q in spec.requests)
    assert_one_line(r.baseline.error, "prompt is", "at most 50", "max_model_len")
    assert_one_line(r.speculative.error, "HTTP 400", "maximum context length")


def test_sequential_second_side_waits_at_zero_elapsed() -> None:
    async def go(base: Standin, spec: Standin) -> list:
        settings = Settings(baseline_url=base.url, speculative_url=spec.url, save_runs=False)
        req = REQ.model_copy(update={"max_tokens": 30, "order": "sequential"})
        return [snap async for snap in stream_race(req, settings)]

    with Standin.pair(StandinBehavior(tokens_per_s=60, ttft_s=0.01)) as (base, spec):
        snaps = asyncio.run(go(base, spec))
    # while the baseline streams, the speculative request has not been sent yet
    waiting = [s.speculative for s in snaps if s.baseline.status == "streaming" and s.baseline.completion_tokens]
    assert all(w.status == "queued" and not w.completion_tokens for w in waiting)  # not sent: no quiet-server line
    assert len(waiting) >= 3 and all(w.elapsed_s == 0.0 for w in waiting)
    final = snaps[-1].result
    assert final is not None and final.speculative.complete
    assert snaps[-1].speculative.elapsed_s < snaps[-1].baseline.elapsed_s + 1.0  # its own clock, not the race's
