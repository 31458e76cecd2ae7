"""The stand-in vLLM server itself, over real HTTP with plain httpx: it must speak what the
captured vLLM 0.32 fixtures show, and its truth must match what it really sent."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from itertools import pairwise
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from pydantic import ValidationError

from common.waiting import held_within, wait_for
from harness.standin import Standin, StandinBehavior, plan_chunks
from harness.standin_process import StandinProcess

FIX = Path(__file__).parent / "fixtures"
STREAM_OPTS = {"include_usage": True, "continuous_usage_stats": True}
TIMEOUT = httpx.Timeout(10.0)


def fixture_events(name: str) -> list[dict[str, Any]]:
    return [json.loads(ln[6:]) for ln in (FIX / name).read_text().splitlines()
            if ln.startswith("data: {")]


def chat_body(max_tokens: int = 20, stream: bool = True, **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"model": "smollm2", "messages": [{"role": "user", "content": "Say hi"}],
                            "max_tokens": max_tokens, "stream": stream}
    if stream:
        body["stream_options"] = STREAM_OPTS
    return {**body, **extra}


def stream_lines(url: str, body: dict[str, Any], path: str = "/v1/chat/completions") -> list[str]:
    with httpx.Client(timeout=TIMEOUT) as c, c.stream("POST", url + path, json=body) as r:
        assert r.status_code == 200
        assert r.headers["content-type"] == "text/event-stream; charset=utf-8"
        return [ln for ln in r.iter_lines() if ln]


def events(lines: list[str]) -> list[dict[str, Any]]:
    assert lines[-1] == "data: [DONE]"
    assert all(ln.startswith("data: ") for ln in lines)
    return [json.loads(ln[6:]) for ln in lines[:-1]]


def shape(d: Any) -> Any:
    """Keys (in order) of an object, recursively; lists by their first element."""
    if isinstance(d, dict):
        return [(k, shape(v)) for k, v in d.items()]
    if isinstance(d, list):
        return ["list", shape(d[0])] if d and isinstance(d[0], dict) else "list"
    return None


def metric_samples(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = httpx.get(url + "/metrics", timeout=TIMEOUT).text
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def spec_value(samples: dict, name: str, **labels: str) -> float:
    want = {"engine": "0", "model_name": "smollm2", **labels}
    return samples[(name, tuple(sorted(want.items())))]


# ---------------------------------------------------------------- protocol shape


@pytest.mark.parametrize("speculative", [False, True])
def test_chat_stream_has_the_captured_shape(standin_factory, speculative: bool) -> None:
    s = standin_factory(speculative=speculative, chunk_sizes=[1, 3, 5, 2], tokens_per_s=2000)
    got = events(stream_lines(s.url, chat_body(max_tokens=30)))
    ref = fixture_events(f"stream-chat-{'speculative' if speculative else 'baseline'}.sse")
    assert shape(got[0]) == shape(ref[0])  # role chunk
    assert shape(got[1]) == shape(ref[1])  # content chunk
    assert shape(got[-2]) == shape(ref[-2])  # last content chunk (finish_reason, stop_reason)
    assert shape(got[-1]) == shape(ref[-1])  # final choices: [] usage chunk (+ metrics)
    assert got[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert got[-2]["choices"][0]["finish_reason"] == "length"
    assert got[-1]["choices"] == [] and got[-1]["usage"]["completion_tokens"] == 30
    assert ("metrics" in got[-1]) is speculative


def test_completions_stream_has_the_captured_shape(standin_factory) -> None:
    s = standin_factory(speculative=True, chunk_sizes=[2, 5], tokens_per_s=2000)
    body = {"model": "smollm2", "prompt": "Pretty-print this JSON", "max_tokens": 12, "stream": True,
            "stream_options": STREAM_OPTS}
    got = events(stream_lines(s.url, body, "/v1/completions"))
    ref = fixture_events("stream-completions-speculative.sse")
    assert shape(got[0]) == shape(ref[0])  # no role chunk: the first chunk has a token
    assert shape(got[-2]) == shape(ref[-2])
    assert shape(got[-1]) == shape(ref[-1])
    assert got[0]["object"] == "text_completion" and got[0]["usage"]["completion_tokens"] == 1


def test_usage_only_stream_has_usage_on_the_final_chunk_only(standin_factory) -> None:
    s = standin_factory(speculative=True, chunk_sizes=[3], tokens_per_s=2000)
    got = events(stream_lines(s.url, chat_body(stream_options={"include_usage": True})))
    ref = fixture_events("stream-chat-speculative-usage-only.sse")
    assert [shape(e) for e in (got[0], got[1], got[-1])] == [shape(e) for e in (ref[0], ref[1], ref[-1])]
    assert all("usage" not in e for e in got[:-1])
    # No stream_options at all: no usage anywhere, no final chunk.
    got = events(stream_lines(s.url, chat_body(stream_options=None)))
    assert all("usage" not in e and e["choices"] for e in got)


def test_nonstream_models_and_health_have_the_captured_shape(standin_factory) -> None:
    s = standin_factory(speculative=True, chunk_sizes=[2, 4])
    with httpx.Client(timeout=TIMEOUT) as c:
        r = c.post(s.url + "/v1/chat/completions", json=chat_body(max_tokens=9, stream=False))
        ref = json.loads((FIX / "nonstream-chat-speculative.json").read_text())
        assert shape(r.json()) == shape(ref)
        assert r.json()["usage"]["completion_tokens"] == 9
        assert r.json()["metrics"]["speculative_decoding"]["num_spec_steps"] == len(plan_chunks(9, [2, 4])) - 1
        models = c.get(s.url + "/v1/models").json()
        assert shape(models) == shape(json.loads((FIX / "models-baseline.json").read_text()))
        assert models["data"][0]["max_model_len"] == 2048
        h = c.get(s.url + "/health")
        assert (h.status_code, h.content) == (200, b"")
        s.behavior.health_status = 503
        assert c.get(s.url + "/health").status_code == 503


# ---------------------------------------------------------------- truth


def test_usage_deltas_equal_chunk_sizes_and_truth(standin_factory) -> None:
    s = standin_factory(speculative=True, chunk_sizes=[1, 3, 5, 2], num_spec_tokens=4, tokens_per_s=2000)
    got = events(stream_lines(s.url, chat_body(max_tokens=40)))
    counts = [e["usage"]["completion_tokens"] for e in got if e["choices"]]
    deltas = [b - a for a, b in pairwise(counts)]
    expected = plan_chunks(40, [1, 3, 5, 2])
    assert expected[:5] == [1, 1, 3, 5, 2] and sum(expected) == 40
    assert deltas == expected
    t = s.last_truth
    assert t.outcome == "completed" and t.chunk_sizes_sent == expected and t.completion_tokens == 40
    steps = expected[1:]
    assert t.drafts == len(steps) and t.accepted == sum(n - 1 for n in steps)
    assert t.draft_tokens == 4 * len(steps)
    spec = got[-1]["metrics"]["speculative_decoding"]
    assert spec["num_spec_steps"] == t.drafts
    assert spec["num_accepted_draft_tokens"] == t.accepted
    assert spec["num_draft_tokens"] == t.draft_tokens
    assert spec["per_step_accepted"] == [n - 1 for n in steps]
    assert spec["mean_acceptance_length"] == pytest.approx(1 + t.accepted / t.drafts)
    assert spec["draft_acceptance_rate"] == pytest.approx(t.accepted / t.draft_tokens)
    assert sum(spec["acceptance_histogram"]) == t.drafts
    text = "".join(e["choices"][0]["delta"].get("content", "") for e in got if e["choices"])
    assert text == t.text


def test_truth_rate_is_the_configured_rate(standin_factory) -> None:
    s = standin_factory(tokens_per_s=1000, ttft_s=0.02, chunk_sizes=[1])
    # 1.5 s of tokens: a first token sent 30 ms late (a busy machine) and the rest on schedule
    # moves the rate by 2%, on 0.3 s by 10%.
    stream_lines(s.url, chat_body(max_tokens=1500))
    t = s.last_truth
    assert t.decode_tokens_per_s == pytest.approx(1000, rel=0.05)
    assert t.t_first_token_sent - t.t_request == pytest.approx(0.02, abs=0.015)
    assert t.chunk_send_times == sorted(t.chunk_send_times)


def test_metrics_counters_accumulate_and_parse(standin_factory) -> None:
    s = standin_factory(speculative=True, chunk_sizes=[5, 1, 3], num_spec_tokens=4, tokens_per_s=3000)
    for _ in range(2):
        stream_lines(s.url, chat_body(max_tokens=25))
    m = metric_samples(s.url)
    t1, t2 = s.truth
    assert spec_value(m, "vllm:spec_decode_num_drafts_total") == t1.drafts + t2.drafts
    assert spec_value(m, "vllm:spec_decode_num_accepted_tokens_total") == t1.accepted + t2.accepted
    assert spec_value(m, "vllm:spec_decode_num_draft_tokens_total") == 4 * (t1.drafts + t2.drafts)
    for p in range(4):
        assert spec_value(m, "vllm:spec_decode_num_accepted_tokens_per_pos_total", position=str(p)) == \
            t1.per_position_accepted[p] + t2.per_position_accepted[p]
    assert spec_value(m, "vllm:generation_tokens_total") == 50
    assert spec_value(m, "vllm:request_success_total", finished_reason="length") == 2
    assert spec_value(m, "vllm:num_requests_running") == 0
    assert spec_value(m, "vllm:time_to_first_token_seconds_count") == 2
    # A baseline server has no spec_decode series at all, like the real one.
    b = standin_factory()
    assert not any(name.startswith("vllm:spec_decode") for name, _ in metric_samples(b.url))


def test_running_request_shows_in_gauges(standin_factory) -> None:
    s = standin_factory(tokens_per_s=50)
    with httpx.Client(timeout=TIMEOUT) as c, c.stream("POST", s.url + "/v1/chat/completions",
                                                      json=chat_body(max_tokens=200)) as r:
        lines = r.iter_lines()  # keep it: a dropped httpx line iterator closes the connection
        next(lines)
        m = metric_samples(s.url)
        assert spec_value(m, "vllm:num_requests_running") == 1
        assert spec_value(m, "vllm:kv_cache_usage_perc") > 0


# ---------------------------------------------------------------- abort and faults


def test_client_closing_early_counts_as_abort(standin_factory) -> None:
    s = standin_factory(speculative=True, chunk_sizes=[2], tokens_per_s=100)
    with httpx.Client(timeout=TIMEOUT) as c, c.stream("POST", s.url + "/v1/chat/completions",
                                                      json=chat_body(max_tokens=500)) as r:
        lines = r.iter_lines()
        for _ in range(6):
            next(lines)
    assert s.wait_idle(3.0)
    assert (s.started, s.aborted, s.completed, s.open_streams) == (1, 1, 0, 0)
    t = s.last_truth
    assert t.outcome == "aborted" and 0 < t.completion_tokens < 500
    m = metric_samples(s.url)
    assert spec_value(m, "vllm:generation_tokens_total") == t.completion_tokens
    assert spec_value(m, "vllm:spec_decode_num_drafts_total") == t.drafts
    assert spec_value(m, "vllm:request_success_total", finished_reason="abort") == 0  # as vLLM does


def test_cut_drops_the_connection_without_done(standin_factory) -> None:
    s = standin_factory(fault="cut", fault_after_chunks=4, tokens_per_s=1000)
    seen: list[str] = []
    with pytest.raises(httpx.RemoteProtocolError):
        with httpx.Client(timeout=TIMEOUT) as c, c.stream("POST", s.url + "/v1/chat/completions",
                                                          json=chat_body(max_tokens=50)) as r:
            for ln in r.iter_lines():
                if ln:
                    seen.append(ln)
    assert "data: [DONE]" not in seen
    assert len(seen) == 1 + 4  # role chunk + 4 content chunks
    assert s.wait_idle(3.0) and s.last_truth.outcome == "faulted" and s.last_truth.completion_tokens == 4


def test_stall_stops_sending(standin_factory) -> None:
    s = standin_factory(fault="stall", fault_after_chunks=3, stall_s=5.0, tokens_per_s=1000)
    seen = 0
    with pytest.raises(httpx.ReadTimeout):
        with httpx.Client(timeout=httpx.Timeout(10.0, read=0.4)) as c, \
                c.stream("POST", s.url + "/v1/chat/completions", json=chat_body(max_tokens=50)) as r:
            for ln in r.iter_lines():
                seen += bool(ln)
    assert seen == 1 + 3
    assert s.wait_idle(3.0) and s.aborted == 1  # our timeout closed the connection


def test_hold_waits_for_release_however_long_it_takes(standin_factory) -> None:
    import threading

    s = standin_factory(fault="hold", fault_after_chunks=3, tokens_per_s=1000)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(stream_lines(s.url, chat_body(max_tokens=20))))
    reader.start()
    wait_for(lambda: s.holding == 1, 10, "the stream is held")
    time.sleep(0.5)  # 20 tokens at 1000/s would have gone out in 0.02 s
    assert s.holding == 1 and s.truth[0].completion_tokens == 3 and reader.is_alive()
    s.release()
    reader.join(10)
    assert not reader.is_alive() and s.holding == 0
    assert s.truth[0].completion_tokens == 20 and s.completed == 1 and lines[-1] == "data: [DONE]"
    s.release()  # nothing held: nothing happens, and the next stream holds again
    again = threading.Thread(target=lambda: stream_lines(s.url, chat_body(max_tokens=20)))
    again.start()
    wait_for(lambda: s.holding == 1, 10, "the stream is held")
    s.release()
    again.join(10)
    assert s.completed == 2


def test_garbage_line_then_the_stream_goes_on(standin_factory) -> None:
    s = standin_factory(fault="garbage", fault_after_chunks=2, tokens_per_s=2000)
    lines = stream_lines(s.url, chat_body(max_tokens=6))
    bad = [ln for ln in lines if ln.startswith("data: {") and not _is_json(ln[6:])]
    assert len(bad) == 1 and lines[-1] == "data: [DONE]"


def _is_json(s: str) -> bool:
    try:
        json.loads(s)
        return True
    except ValueError:
        return False


def test_refuse_and_stopped_server(standin_factory) -> None:
    s = standin_factory(fault="refuse")
    with pytest.raises((httpx.RemoteProtocolError, httpx.ReadError)):
        httpx.post(s.url + "/v1/chat/completions", json=chat_body(stream=False), timeout=TIMEOUT)
    url = s.url
    s.stop()
    with pytest.raises(httpx.ConnectError):
        httpx.get(url + "/health", timeout=TIMEOUT)
    s.behavior.fault = None
    s.start()  # same port again: "server restarted between runs"
    assert s.url == url and httpx.get(url + "/health", timeout=TIMEOUT).status_code == 200
    stream_lines(url, chat_body(max_tokens=3))
    s.restart()  # a restarted server starts its counters from zero
    assert spec_value(metric_samples(url), "vllm:generation_tokens_total") == 0
    assert s.started == 1 and len(s.requests) == 2  # records survive; the refused one never started


def test_a_change_to_a_standins_behaviour_is_its_own() -> None:
    # Tests share module-level behaviours (tests/test_methods.LOAD_ARMS): one that faults a stand-in
    # once made every later stand-in built from the same behaviour fault too.
    shared = StandinBehavior(tokens_per_s=50)
    with Standin(shared) as s:
        s.behavior.fault = "server_error"
        assert httpx.post(s.url + "/v1/chat/completions", json=chat_body(stream=False),
                          timeout=TIMEOUT).status_code == 500
    assert shared.fault is None
    with Standin(shared) as again:
        assert httpx.post(again.url + "/v1/chat/completions", json=chat_body(stream=False),
                          timeout=TIMEOUT).status_code == 200
    replaced = StandinBehavior(speculative=True)
    again.behavior = replaced
    again.behavior.fault = "refuse"
    assert replaced.fault is None


def _error_body(fixture: str) -> dict[str, Any]:
    text = (FIX / fixture).read_text()
    return json.loads(next(ln for ln in text.splitlines() if ln.startswith('{"error"')))


def test_error_bodies_are_vllms(standin_factory) -> None:
    s = standin_factory(api_key=None)
    with httpx.Client(timeout=TIMEOUT) as c:
        long = " ".join(["word"] * 2970)
        r = c.post(s.url + "/v1/chat/completions",
                   json=chat_body(messages=[{"role": "user", "content": long}]))
        assert (r.status_code, r.json()) == (400, _error_body("error-too-long.txt"))
        assert r.headers["content-type"] == "application/json"
        r = c.post(s.url + "/v1/chat/completions", json=chat_body(max_tokens=-1, stream=False))
        assert (r.status_code, r.json()) == (400, _error_body("error-bad-max-tokens.txt"))
        r = c.post(s.url + "/v1/chat/completions", json=chat_body(model="no-such-model"))
        assert (r.status_code, r.json()) == (404, _error_body("error-unknown-model.txt"))
        r = c.post(s.url + "/v1/chat/completions", content=(FIX / "requests" / "bad-json.txt").read_bytes(),
                   headers={"content-type": "application/json"})
        assert (r.status_code, r.json()) == (400, _error_body("error-bad-json.txt"))
        s.behavior.fault = "server_error"
        r = c.post(s.url + "/v1/chat/completions", json=chat_body())
        assert r.status_code == 500 and r.json()["error"]["code"] == 500
        s.behavior.fault = "too_long"
        r = c.post(s.url + "/v1/completions", json={"model": "smollm2", "prompt": "hi", "stream": True})
        assert (r.status_code, r.json()) == (400, _error_body("error-too-long-stream.txt"))


def test_api_key_is_required_when_set(standin_factory) -> None:
    s = standin_factory(api_key="sekret", tokens_per_s=2000)
    with httpx.Client(timeout=TIMEOUT) as c:
        assert c.get(s.url + "/v1/models").status_code == 401
        assert c.post(s.url + "/v1/chat/completions", json=chat_body()).status_code == 401
        r = c.post(s.url + "/v1/chat/completions", json=chat_body(stream=False),
                   headers={"Authorization": "Bearer sekret"})
        assert r.status_code == 200
        assert c.get(s.url + "/health").status_code == 200  # like vLLM: only /v1 is guarded
    assert s.requests[-1].headers["authorization"] == "Bearer sekret"
    assert s.requests[-1].body["max_tokens"] == 20


@pytest.mark.parametrize("mode", ["missing", "malformed", "slow"])
def test_metrics_modes(standin_factory, mode: str) -> None:
    s = standin_factory(metrics_mode=mode, metrics_slow_s=0.3)
    t0 = time.perf_counter()
    r = httpx.get(s.url + "/metrics", timeout=TIMEOUT)
    if mode == "missing":
        assert r.status_code == 404
    elif mode == "malformed":
        with pytest.raises(ValueError):
            list(text_string_to_metric_families(r.text))
    else:
        assert time.perf_counter() - t0 >= 0.3
        assert list(text_string_to_metric_families(r.text))


def test_speculative_chunks_cannot_exceed_k_plus_one() -> None:
    with pytest.raises(ValidationError):
        StandinBehavior(speculative=True, num_spec_tokens=2, chunk_sizes=[1, 4])


def test_stop_at_end_of_pieces_finishes_with_stop(standin_factory) -> None:
    s = standin_factory(pieces=["<script>", "alert(1)", "</script>"], stop_at_end_of_pieces=True,
                        tokens_per_s=2000)
    got = events(stream_lines(s.url, chat_body(max_tokens=50)))
    assert got[-2]["choices"][0]["finish_reason"] == "stop"
    assert s.last_truth.text == "<script>alert(1)</script>"


def test_replay_sends_the_capture_byte_exactly(standin_factory) -> None:
    name = "stream-chat-speculative.sse"
    s = standin_factory(replay_fixture=FIX / name, replay_speed=20.0)
    with httpx.Client(timeout=TIMEOUT) as c:
        r = c.post(s.url + "/v1/chat/completions", json=chat_body())
    assert r.content == (FIX / name).read_bytes()
    t = s.last_truth
    assert t.completion_tokens == 200 and t.outcome == "completed"
    assert sorted(set(t.chunk_sizes_sent)) == [1, 2, 3, 4, 5]


def test_pair_and_cli(standin_pair) -> None:
    base, spec = standin_pair
    assert not base.behavior.speculative and spec.behavior.speculative and base.url != spec.url
    with Standin(port=0) as probe:  # find a free port, then release it for the CLI
        port = probe.port
    proc = subprocess.Popen([sys.executable, "-m", "harness.standin", "--port", str(port), "--speculative",
                             "--chunk-sizes", "1,3,5", "--tokens-per-s", "2000"],
                            cwd=Path(__file__).parent.parent, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        def answers() -> bool:
            assert proc.poll() is None, "CLI stand-in exited"
            try:
                return httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200
            except httpx.TransportError:
                return False

        wait_for(answers, 10, "the CLI stand-in answering /health", poll_s=0.05)
        got = events(stream_lines(f"http://127.0.0.1:{port}", chat_body(max_tokens=10)))
        assert got[-1]["metrics"]["speculative_decoding"]["num_spec_steps"] == 3
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_processes_share_one_port_and_their_truths_merge() -> None:
    # StandinProcess(processes=2): two processes on one port (SO_REUSEPORT), each with its own port
    # for /health and its truth records. 24 requests, each on a connection of its own, land on both
    # (the kernel hashes each connection: all 24 on one is a chance of 2 in 2^24), and truth()
    # holds every one of them, once, in the order they came.
    with StandinProcess(StandinBehavior(tokens_per_s=2000), processes=2) as s:
        assert len(s.pids) == len(set(s.pids)) == 2 and len(set(s.own_ports) | {s.port}) == 3
        for i in range(24):
            got = events(stream_lines(s.url, chat_body(max_tokens=3, messages=[{"role": "user", "content": f"q{i}"}])))
            assert got[-1]["usage"]["completion_tokens"] == 3
        per_process = [len(s.truth_at(f"http://127.0.0.1:{p}", 0)) for p in s.own_ports]
        assert sum(per_process) == 24 and min(per_process) > 0, per_process
        merged = s.truth()
        assert len(merged) == 24 and all(t.outcome == "completed" for t in merged)
        assert [t.t_request for t in merged] == sorted(t.t_request for t in merged)
        assert len(s.truth(20)) == 4
        assert (s.cpu_s() or 0.0) > 0
    with pytest.raises(ValueError, match="processes must be at least 1"):
        StandinProcess(processes=0)


def test_awkward_texts_survive_the_fast_path(standin_factory) -> None:
    pieces = ['"quoted"', "é\n", "<img src=x onerror=alert(1)>", "\\", "\t", "日本", " 🙂"]
    s = standin_factory(pieces=pieces, speculative=True, chunk_sizes=[2, 3], tokens_per_s=3000)
    for path, body in (("/v1/chat/completions", chat_body(max_tokens=14)),
                       ("/v1/completions", {"prompt": "x", "max_tokens": 14, "stream": True,
                                            "stream_options": STREAM_OPTS})):
        got = events(stream_lines(s.url, body, path))
        ch = [e["choices"][0] for e in got if e["choices"]]
        text = "".join(c["delta"].get("content", "") if "delta" in c else c["text"] for c in ch)
        assert text == "".join(pieces) * 2 == s.last_truth.text
        assert [e["usage"]["total_tokens"] - e["usage"]["prompt_tokens"] for e in got] == \
            [e["usage"]["completion_tokens"] for e in got]


def test_concurrent_streams_are_all_counted(standin_factory) -> None:
    import concurrent.futures

    s = standin_factory(tokens_per_s=400, chunk_sizes=[2])
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda _: events(stream_lines(s.url, chat_body(max_tokens=40))), range(8)))
    assert all(r[-1]["usage"]["completion_tokens"] == 40 for r in results)
    assert (s.started, s.completed, s.open_streams) == (8, 8, 0)
    assert len({r[0]["id"] for r in results}) == 8
    m = metric_samples(s.url)
    assert spec_value(m, "vllm:generation_tokens_total") == 320
    assert spec_value(m, "vllm:e2e_request_latency_seconds_count") == 8


def test_speed_falls_with_streams_in_flight(standin_factory) -> None:
    """slowdown_in_flight: n streams at once each decode at tokens_per_s / (1 + x*(n-1))."""
    from concurrent.futures import ThreadPoolExecutor

    # Streams of 0.8 s alone and 2 s together: the few milliseconds between the four starts, and a
    # busy machine's scheduling, stay small against them (at 40 tokens, 0.13 s, they did not).
    s = standin_factory(tokens_per_s=300, ttft_s=0.01, slowdown_in_flight=0.5)
    stream_lines(s.url, chat_body(max_tokens=240))
    alone = s.truth[-1].decode_tokens_per_s
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda _: stream_lines(s.url, chat_body(max_tokens=240)), range(4)))
    together = sorted(t.decode_tokens_per_s or 0 for t in s.truth[1:])
    assert alone == pytest.approx(300, rel=0.15)
    # 4 in flight: 300 / 2.5 = 120 each (the ratio is what holds on a busy machine).
    assert together[len(together) // 2] / alone == pytest.approx(1 / 2.5, rel=0.1)


def test_metrics_report_queue_kv_and_preemptions(standin_factory) -> None:
    s = standin_factory(preemptions_total=3)
    m = metric_samples(s.url)
    assert spec_value(m, "vllm:num_requests_waiting") == 0
    assert spec_value(m, "vllm:kv_cache_usage_perc") == 0
    assert spec_value(m, "vllm:num_preemptions_total") == 3


def test_max_num_seqs_queues_the_rest_and_reports_them_waiting(standin_factory) -> None:
    from concurrent.futures import ThreadPoolExecutor

    # Each stream takes 1.5 s, so the four requests are all in before the first two end, however
    # late a busy machine sends them (at 0.3 s each, all four ran and ended before the scrape once,
    # under a load of 15).
    s = standin_factory(tokens_per_s=100, ttft_s=0.01, max_num_seqs=2)
    with ThreadPoolExecutor(4) as pool:
        done = [pool.submit(stream_lines, s.url, chat_body(max_tokens=150)) for _ in range(4)]
        held_within(lambda: s.open_streams >= 4, 5, poll_s=0.01)
        m = metric_samples(s.url)
        for f in done:
            f.result()
    assert spec_value(m, "vllm:num_requests_running") == 2
    assert spec_value(m, "vllm:num_requests_waiting") == 2
    # Two streams at once: the first two started before either ended, and each of the other two
    # only once a slot was free, however late its request came in on a busy machine (measured
    # from its request, the wait shrinks by that lateness: 0.196 s against 0.2 in one CI run).
    starts = sorted(t.t_first_token_sent for t in s.truth)
    ends = sorted(t.t_last_token_sent for t in s.truth)
    assert starts[1] < ends[0]
    assert starts[2] >= ends[0] and starts[3] >= ends[1]
