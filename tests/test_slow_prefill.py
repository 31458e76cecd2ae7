"""A slow first token is not a stall (issue 51): past the read timeout the client asks the server's
/metrics, and waits on while the server is working on requests, saying so; a server doing nothing
for the request is called stalled at the read timeout as before; SPECDEMO_PREFILL_WAIT_MAX_S ends
any wait. Real HTTP on 127.0.0.1 with the stand-in; short read timeouts so that it runs fast, and
only generous upper bounds on time (never tight ones: the machine may be busy).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
import pytest

from common.waiting import held_within, wait_for
from demo import view
from demo.client import StreamError, make_http_client, stream_completion
from demo.live.frame_stream import quiet_status, race_frames
from demo.live.session import RaceControl
from demo.live.status import server_working_text
from demo.metrics import in_flight, parse_metrics, progress_signature
from demo.race import run_race
from demo.results import Message, RaceRequest, RaceSnapshot, ServerWait, SideSnapshot
from demo.settings import Settings
from harness.standin import FIXTURES, Standin, StandinBehavior

READ_TIMEOUT_S = 1.0
SLACK_S = 15.0  # a generous bound past what is waited for: a busy machine is late, never this late
REQ = RaceRequest(messages=[Message(role="user", content="Hello there, a long document")], max_tokens=20)
FAST = StandinBehavior(tokens_per_s=400, ttft_s=0.01)


def _settings(base: Standin, spec: Standin, **kw: Any) -> Settings:
    fields: dict[str, Any] = {"read_timeout_s": READ_TIMEOUT_S, "probe_timeout_s": 2.0, "save_runs": False}
    fields.update(kw)
    return Settings(baseline_url=base.url, speculative_url=spec.url, **fields)


async def _stream(s: Standin, settings: Settings, waits: list[ServerWait | None] | None = None,
                  consumer_pause_s: float = 0.0) -> tuple[int | None, float]:
    """Stream REQ from ``s``; (the last completion_tokens, seconds it took). Raises StreamError."""
    t = time.monotonic()
    tokens = None
    async with make_http_client(settings) as http:
        async for ev in stream_completion(http, s.url, "smollm2", REQ,
                                          on_wait=None if waits is None else waits.append):
            tokens = ev.completion_tokens if ev.completion_tokens is not None else tokens
            if consumer_pause_s:  # the consumer holds the stream once, after its first event
                await asyncio.sleep(consumer_pause_s)
                consumer_pause_s = 0.0
    return tokens, time.monotonic() - t


def _fails(s: Standin, settings: Settings, waits: list[ServerWait | None] | None = None) -> tuple[str, float]:
    """The StreamError's line of a stream from ``s`` that must fail, and the seconds it took."""
    t = time.monotonic()
    with pytest.raises(StreamError) as err:
        asyncio.run(_stream(s, settings, waits))
    return str(err.value), time.monotonic() - t


# ---------------------------------------------------------------- a long prefill is waited for


def test_a_prefill_longer_than_the_read_timeout_finishes_with_the_right_figures() -> None:
    slow = FAST.model_copy(update={"ttft_s": 3.5})
    with Standin(slow) as base, Standin(FAST.model_copy(update={"speculative": True})) as spec:
        r = asyncio.run(run_race(REQ, _settings(base, spec)))
        truth = base.last_truth
    assert r.baseline.error is None and r.baseline.complete, r.baseline.error
    assert r.baseline.completion_tokens == 20 == truth.completion_tokens
    assert truth.outcome == "completed"
    # The first token really took the long prefill, and the client measured it so.
    assert truth.t_first_token_sent is not None and truth.t_first_token_sent - truth.t_request >= 3.5
    assert r.baseline.ttft_s is not None and r.baseline.ttft_s >= 3.5
    assert r.speculative.complete and r.speedup is not None


def test_the_client_says_it_is_waiting_on_a_working_server() -> None:
    waits: list[ServerWait | None] = []
    with Standin(FAST.model_copy(update={"ttft_s": 3.5})) as s:
        tokens, _ = asyncio.run(_stream(s, _settings(s, s), waits))
    assert tokens == 20
    told = [w for w in waits if w is not None]
    assert told, "no ServerWait while the prefill ran past the read timeout"
    assert all(w.running == 1 and w.waiting == 0 and w.quiet_s >= READ_TIMEOUT_S for w in told)
    assert waits[-1] is None  # and that the wait was over once the first token came


@pytest.mark.asyncio
async def test_the_page_shows_the_prefill_and_that_the_server_is_working(standin_factory) -> None:
    base = standin_factory(tokens_per_s=400, ttft_s=5.0)
    spec = standin_factory(speculative=True, tokens_per_s=400)
    frames = [f async for f in race_frames(REQ, _settings(base, spec), RaceControl())]
    notices = [f.side_status["baseline"] for f in frames if f.side_status and "baseline" in f.side_status]
    working = [n for n in notices if "the server is working" in n]
    assert working, f"no 'the server is working' notice: {notices[-3:]}"
    assert "prefill: " in working[-1] and "waits up to 600 s" in working[-1]
    final = frames[-1].result
    assert final is not None and final.baseline.complete and final.baseline.error is None


def test_a_consumer_slower_than_the_read_timeout_is_not_a_stall() -> None:
    with Standin(FAST) as s:
        tokens, _ = asyncio.run(_stream(s, _settings(s, s), consumer_pause_s=1.5 * READ_TIMEOUT_S))
    assert tokens == 20


# ---------------------------------------------------------------- a server doing nothing is stalled


def test_a_server_that_never_answers_is_stalled_at_the_read_timeout() -> None:
    never = FAST.model_copy(update={"fault": "stall", "fault_after_chunks": 0, "stall_s": 120})
    with Standin(never) as s:
        line, took = _fails(s, _settings(s, s))
        assert s.wait_idle(10) and s.aborted == 1  # the client closed it: the server aborts it
    assert "stalled: no data within the read timeout (SPECDEMO_READ_TIMEOUT_S)." in line
    assert READ_TIMEOUT_S <= took < READ_TIMEOUT_S + SLACK_S


def test_a_stall_mid_stream_in_a_race_keeps_its_one_line() -> None:
    stall = FAST.model_copy(update={"fault": "stall", "fault_after_chunks": 3, "stall_s": 120})
    with Standin(FAST) as base, Standin(stall) as spec:
        t = time.monotonic()
        r = asyncio.run(run_race(REQ, _settings(base, spec)))
        took = time.monotonic() - t
    assert r.speculative.error is not None and "stalled after 3 tokens: no data within the read timeout" in \
        r.speculative.error
    assert r.baseline.complete and took < READ_TIMEOUT_S + SLACK_S


def test_a_server_holding_the_request_without_progress_is_stalled() -> None:
    # Running, but nothing moves (a hung engine): one read timeout of benefit of the doubt, then stalled.
    held = FAST.model_copy(update={"fault": "hold", "fault_after_chunks": 3})
    with Standin(held) as s:
        waits: list[ServerWait | None] = []
        line, took = _fails(s, _settings(s, s), waits)
    assert "stalled after 3 tokens: no data within the read timeout" in line
    assert 2 * READ_TIMEOUT_S <= took < 2 * READ_TIMEOUT_S + SLACK_S
    assert any(w is not None for w in waits)  # it was waited for once


def test_without_metrics_a_silence_is_a_stall_as_before() -> None:
    slow = FAST.model_copy(update={"ttft_s": 60.0, "metrics_mode": "missing"})
    with Standin(slow) as s:
        line, took = _fails(s, _settings(s, s))
    assert "SPECDEMO_READ_TIMEOUT_S" in line
    assert READ_TIMEOUT_S <= took < READ_TIMEOUT_S + SLACK_S


def test_the_hard_bound_ends_a_wait_that_never_ends() -> None:
    endless = FAST.model_copy(update={"ttft_s": 600.0})
    with Standin(endless) as s:
        waits: list[ServerWait | None] = []
        line, took = _fails(s, _settings(s, s, prefill_wait_max_s=3.0), waits)
        assert s.wait_idle(10) and s.aborted == 1
    assert "stalled: no data for 3 s, though its /metrics said it was working (SPECDEMO_PREFILL_WAIT_MAX_S)." \
        in line
    assert 3.0 <= took < 3.0 + SLACK_S
    assert any(w is not None for w in waits)


# ---------------------------------------------------------------- the stand-in's /metrics


def _metrics(s: Standin) -> Any:
    return parse_metrics(httpx.get(s.url + "/metrics", timeout=5).text)


def _post_stream(s: Standin, prompt: str) -> None:
    """One streamed chat request to ``s``, read to its end (a thread's target)."""
    body = {"model": "smollm2", "max_tokens": 5, "stream": True, "messages": [{"role": "user", "content": prompt}]}
    with httpx.stream("POST", s.url + "/v1/chat/completions", json=body, timeout=30) as r:
        r.read()


def test_standin_metrics_show_a_long_prefill_running_and_progressing(standin_factory) -> None:
    import threading

    s = standin_factory(ttft_s=6.0, tokens_per_s=400)
    reader = threading.Thread(target=_post_stream, args=(s, "a b c d e f g h"))
    reader.start()
    try:
        wait_for(lambda: in_flight(_metrics(s)) == 1, 10, "the request shows running")
        first = _metrics(s)
        assert held_within(lambda: progress_signature(_metrics(s)) != progress_signature(first), 5), \
            "nothing moved during the prefill"
        assert first.num_requests_running == 1 and first.generation_tokens_total == 0
    finally:
        reader.join(30)


def test_standin_metrics_show_nothing_for_a_stalled_request(standin_factory) -> None:
    import threading

    s = standin_factory(fault="stall", fault_after_chunks=0, stall_s=3.0)
    reader = threading.Thread(target=_post_stream, args=(s, "a b c"))
    reader.start()
    try:
        wait_for(lambda: s.open_streams == 1, 10, "the request arrived")
        m = _metrics(s)
        assert in_flight(m) == 0 and m.kv_cache_usage_perc == 0  # doing nothing for it
    finally:
        reader.join(30)
    assert s.completed == 1  # after the stall it carries on


# ---------------------------------------------------------------- vLLM's /metrics, the words


def test_the_progress_signature_reads_vllms_own_metrics() -> None:
    before = parse_metrics((FIXTURES / "metrics-baseline-before.txt").read_text())
    after = parse_metrics((FIXTURES / "metrics-baseline-after.txt").read_text())
    assert (after.prompt_tokens_total, after.iteration_tokens_count, after.prefix_cache_queries_total) == \
        (824.0, 400.0, 824.0)
    assert progress_signature(before) != progress_signature(after)
    assert in_flight(after) == 0


def test_the_working_line_says_prefill_or_quiet_and_the_bound() -> None:
    wait = ServerWait(quiet_s=48.0, running=1)
    snap = SideSnapshot(side="baseline", status="waiting", elapsed_s=48.2, server_wait=wait)
    assert server_working_text(snap, 48.0, 600.0) == "prefill: 48 s, the server is working (waits up to 600 s)"
    streaming = snap.model_copy(update={"status": "streaming"})
    assert server_working_text(streaming, 12.0, 600.0) == \
        "nothing new for 12 s, the server is working (waits up to 600 s)"
    queued = snap.model_copy(update={"server_wait": ServerWait(quiet_s=5.0, waiting=1)})
    assert "(queued, or its grammar being built)" in (server_working_text(queued, 5.0, 600.0) or "")
    assert server_working_text(snap.model_copy(update={"server_wait": None}), 5.0, 600.0) is None


def test_a_side_not_sent_yet_waits_its_turn_with_no_quiet_line() -> None:
    # A sequential A/B: the baseline is quiet for 40 s (a long prefill), the speculative request is not
    # sent yet. Only the baseline gets the quiet line; the other pane says it waits its turn.
    base = SideSnapshot(side="baseline", status="waiting", elapsed_s=40.0)
    spec = SideSnapshot(side="speculative", status="queued")
    shown = RaceSnapshot(order="sequential", baseline=base, speculative=spec)
    long_ago = time.monotonic() - 40.0
    lines = quiet_status(shown, {"baseline": long_ago, "speculative": long_ago}, Settings(save_runs=False))
    assert list(lines) == ["baseline"] and "nothing from the server for 40 s" in lines["baseline"]
    assert "waiting its turn (not sent yet)" in view.side_status_html("speculative", spec)
