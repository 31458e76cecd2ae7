"""The stand-in server (``Standin``): uvicorn in a thread, vLLM's routes, the truth records, and
each request's stream (``_Generation``: chunks on schedule, faults, a fixture replayed). The
generation shares the server's state under its one lock, so the two live in one module.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import re
import secrets
import socket
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from common.waiting import held_within
from harness.standin._behavior import (
    DEFAULT_PIECES,
    FINGERPRINT,
    Outcome,
    RecordedRequest,
    StandinBehavior,
    Truth,
    plan_chunks,
    spec_metrics_for,
    synthetic_behavior,
)
from harness.standin._metrics import Counters
from harness.standin._protocol import dumps, error_response, prompt_words, too_long_response, tools_refused


class _Cut(Exception):
    """Raised inside the emitter to drop the connection (server 'died')."""


class _SSE(Response):
    """Streams what an emitter sends; a client disconnect cancels the emitter (= abort)."""

    def __init__(self, emit: Callable[[Send], Awaitable[None]], end: Callable[[Outcome], None]) -> None:
        super().__init__(status_code=200)
        self._emit, self._end = emit, end  # end("aborted" | "faulted"); no-op once finished

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def watch() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass

        emit = asyncio.ensure_future(self._emit(send))
        watcher = asyncio.ensure_future(watch())
        try:
            await asyncio.wait({emit, watcher}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            if not emit.done():
                emit.cancel()
                self._end("aborted")
            watcher.cancel()
            await asyncio.gather(emit, watcher, return_exceptions=True)
        if not emit.cancelled() and (exc := emit.exception()) is not None:
            self._end("faulted")
            raise exc  # uvicorn logs it and drops the connection


_SSE_HEADERS = [(b"content-type", b"text/event-stream; charset=utf-8")]



class Standin:
    """A stand-in vLLM server on 127.0.0.1, run by uvicorn in a background thread."""

    def __init__(self, behavior: StandinBehavior | None = None, *, port: int = 0,
                 host: str = "127.0.0.1", log_level: str = "warning",
                 ssl_keyfile: Path | None = None, ssl_certfile: Path | None = None,
                 own_port: int | None = None) -> None:
        self.behavior = behavior or StandinBehavior()  # a copy: see the property
        self.host, self.port, self._log_level = host, port, log_level
        # With ``own_port`` (0: any free one), one of several stand-in processes on one port
        # (StandinProcess(processes=N)): ``port`` bound with SO_REUSEPORT, the kernel spreading the
        # connections over the processes, and ``own_port`` this process's alone (its /health and
        # truth records).
        self.own_port = own_port
        self._ssl = (ssl_keyfile, ssl_certfile)  # both set: serve https (TLS tests)
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._server: uvicorn.Server | None = None
        self.requests: list[RecordedRequest] = []  # generation requests
        self.tokenized = 0  # /tokenize requests (the context check before a race)
        self.truth: list[Truth] = []
        self._counters = Counters()  # replaced on every start()
        self._running: dict[int, Truth] = {}
        self._admitted: set[int] = set()  # with max_num_seqs: the running requests that hold a slot
        # Requests in their prefill (start, seconds): their KV fills as it goes, as vLLM's chunked
        # prefill takes blocks chunk by chunk, so /metrics shows a long prefill progressing.
        self._prefill: dict[int, tuple[float, float]] = {}
        # Requests stalled now (fault "stall"): the server does nothing for them, and /metrics shows
        # neither them running nor any progress of theirs.
        self._stalled: set[int] = set()
        self._releases = 0  # release() calls: a held stream goes on once this moves (fault "hold")
        self._holding = 0  # streams held now
        self.app = Starlette(routes=[
            Route("/health", self._health, methods=["GET"]),
            Route("/metrics", self._metrics, methods=["GET"]),
            Route("/v1/models", self._models, methods=["GET"]),
            Route("/tokenize", self._tokenize, methods=["POST"]),
            Route("/v1/chat/completions", self._generate, methods=["POST"]),
            Route("/v1/completions", self._generate, methods=["POST"]),
            # Not vLLM's: the truth records, for a stand-in in another process (StandinProcess).
            Route("/standin/truth", self._truth, methods=["GET"]),
        ])

    @property
    def behavior(self) -> StandinBehavior:
        return self._behavior

    @behavior.setter
    def behavior(self, behavior: StandinBehavior) -> None:
        # Its own copy: a test that changes a stand-in's behaviour (``s.behavior.fault = ...``)
        # must not change the module-level behaviour it was built from, which later tests reuse.
        self._behavior = behavior.model_copy(deep=True)

    # ---- lifecycle

    @property
    def url(self) -> str:
        return f"{'https' if self._ssl[1] else 'http'}://{self.host}:{self.port}"

    def start(self) -> Standin:
        """Start serving. A (re)start resets /metrics like a fresh vLLM process; records stay."""
        self._counters = Counters()
        config = uvicorn.Config(self._asgi, host=self.host, port=self.port, log_level=self._log_level,
                                lifespan="off", access_log=False, http="h11", loop="asyncio",
                                interface="asgi3", proxy_headers=False,
                                ssl_keyfile=self._ssl[0] and str(self._ssl[0]),
                                ssl_certfile=self._ssl[1] and str(self._ssl[1]))
        self._server = server = uvicorn.Server(config)
        ready = threading.Event()

        sockets = self._sockets()

        def serve() -> None:
            asyncio.run(server.serve(sockets))
            ready.set()

        self._thread = threading.Thread(target=serve, name=f"standin:{self.port}", daemon=True)
        self._thread.start()
        def serving() -> bool:
            if server.started:
                return True
            if ready.is_set():  # serve() returned without starting
                raise RuntimeError(f"stand-in server did not start on {self.host}:{self.port} (port in use?)")
            return False

        if not held_within(serving, 10, poll_s=0.005):
            raise RuntimeError(f"stand-in server did not start on {self.host}:{self.port} within 10 s")
        self.port = self._server.servers[0].sockets[0].getsockname()[1]
        if self.own_port is not None:
            self.own_port = self._server.servers[1].sockets[0].getsockname()[1]
        return self

    def _sockets(self) -> list[socket.socket] | None:
        """The listening sockets of a process that shares its port (None: uvicorn binds its own):
        ``port`` with SO_REUSEPORT, then ``own_port``."""
        if self.own_port is None:
            return None
        shared = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        shared.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        shared.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        shared.bind((self.host, self.port))
        own = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        own.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        own.bind((self.host, self.own_port or 0))
        for sock in (shared, own):
            sock.listen(2048)  # uvicorn's own backlog: a thousand streams may connect at once
            sock.set_inheritable(False)
        return [shared, own]

    def stop(self) -> None:
        """Stop at once (open streams are dropped); the port is free afterwards."""
        if self._server is None:
            return
        self._server.should_exit = True
        self._server.force_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._server = self._thread = None

    @property
    def alive(self) -> bool:
        """Whether its server thread still runs (it ends with stop(), or when uvicorn could not start)."""
        return self._thread is not None and self._thread.is_alive()

    def release(self) -> None:
        """Let every stream held now (fault "hold") go on, at the normal pace from here."""
        with self._lock:
            self._releases += 1

    @property
    def holding(self) -> int:
        """Streams held now (fault "hold"), waiting for release()."""
        with self._lock:
            return self._holding

    def restart(self) -> None:
        """Stop and start again on the same port (a server restarted between runs)."""
        self.stop()
        self.start()

    def __enter__(self) -> Standin:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @classmethod
    @contextmanager
    def pair(cls, baseline: StandinBehavior | None = None,
             speculative: StandinBehavior | None = None) -> Iterator[tuple[Standin, Standin]]:
        """Two servers. The default speculative side is the baseline's behaviour with chunks of
        1/3/5/2 tokens (2.75 accepted+bonus per step on average) at 2.5x the baseline's rate."""
        b = baseline or StandinBehavior()
        s = speculative or StandinBehavior(**{**b.model_dump(), "speculative": True,
                                              "chunk_sizes": [1, 3, 5, 2], "tokens_per_s": b.tokens_per_s * 2.5})
        with cls(b) as base, cls(s) as spec:
            yield base, spec

    # ---- records (thread-safe views)

    def _count(self, outcome: str) -> int:
        with self._lock:
            return sum(1 for t in self.truth if t.outcome == outcome)

    @property
    def started(self) -> int:
        with self._lock:
            return len(self.truth)

    @property
    def completed(self) -> int:
        return self._count("completed")

    @property
    def aborted(self) -> int:
        return self._count("aborted")

    @property
    def faulted(self) -> int:
        return self._count("faulted")

    @property
    def open_streams(self) -> int:
        with self._lock:
            return len(self._running)

    @property
    def last_truth(self) -> Truth:
        with self._lock:
            return self.truth[-1]

    def wait_idle(self, timeout_s: float = 5.0) -> bool:
        """Wait until no request is in flight (abort detection is asynchronous)."""
        return held_within(lambda: not self.open_streams, timeout_s, poll_s=0.005)

    # ---- ASGI entry: remember the raw transport so faults can drop the connection

    async def _asgi(self, scope: Scope, receive: Receive, send: Send) -> None:
        cycle = getattr(send, "__self__", None)  # uvicorn's RequestResponseCycle
        scope["standin.transport"] = getattr(cycle, "transport", None)
        await self.app(scope, receive, send)

    # ---- simple endpoints

    async def _health(self, request: Request) -> Response:
        return Response(status_code=self.behavior.health_status)

    async def _metrics(self, request: Request) -> Response:
        b = self.behavior
        if b.metrics_mode == "missing":
            return JSONResponse({"detail": "Not Found"}, status_code=404)
        if b.metrics_mode == "malformed":
            return PlainTextResponse("vllm:spec_decode_num_drafts_total{engine=\"0\" 12 ?\n<html>oops")
        if b.metrics_mode == "slow":
            await asyncio.sleep(b.metrics_slow_s)
        with self._lock:
            now = time.perf_counter()
            holding = self._running.keys() if b.max_num_seqs is None else self._admitted
            running = sum(1 for key in holding if key not in self._stalled)
            kv = sum(self._kv_tokens(key, t, now) for key, t in self._running.items() if key not in self._stalled)
            # Waiting as vLLM's scheduler has it: the requests beyond max_num_seqs. A request that
            # arrived or whose slot just freed is not yet admitted here (_admit polls every 2 ms),
            # but vLLM would admit it at its next step: it is not queued.
            queued = 0 if b.max_num_seqs is None else max(0, len(self._running) - b.max_num_seqs)
            text = self._counters.render(b, running, kv, waiting=queued)
        return PlainTextResponse(text, media_type="text/plain; version=0.0.4; charset=utf-8")

    def _kv_tokens(self, key: int, truth: Truth, now: float) -> float:
        """A running request's tokens in the KV cache: in its prefill, the share of its prompt done."""
        if key in self._prefill:
            start, seconds = self._prefill[key]
            return truth.prompt_tokens * min(1.0, max(0.0, (now - start) / seconds)) if seconds > 0 else 0.0
        return truth.prompt_tokens + truth.completion_tokens

    async def _models(self, request: Request) -> Response:
        if (denied := self._check_auth(request)) is not None:
            return denied
        b, created = self.behavior, int(time.time())
        perm = {"id": f"modelperm-{secrets.token_hex(8)}", "object": "model_permission",
                "created": created, "allow_create_engine": False, "allow_sampling": True,
                "allow_logprobs": True, "allow_search_indices": False, "allow_view": True,
                "allow_fine_tuning": False, "organization": "*", "group": None, "is_blocking": False}
        return JSONResponse({"object": "list", "data": [{
            "id": b.model, "object": "model", "created": created, "owned_by": "vllm",
            "root": f"/models/{b.model}", "parent": None, "max_model_len": b.max_model_len,
            "permission": [perm]}]})

    async def _tokenize(self, request: Request) -> Response:
        """vLLM's /tokenize shape: count (words, like the rejection rule) and max_model_len."""
        with self._lock:
            self.tokenized += 1
        if not self.behavior.tokenize:
            return JSONResponse({"detail": "Not Found"}, status_code=404)
        body = await request.json()
        count = prompt_words(body, "messages" in body)
        return JSONResponse({"count": count, "max_model_len": self.behavior.max_model_len,
                             "tokens": list(range(count)), "token_strs": None})

    async def _truth(self, request: Request) -> Response:
        """``GET /standin/truth?since=N``: the truth of every generation request from the N-th on
        (all of them without ``since``), as JSON. Read it between batches, not while they stream."""
        try:
            since = max(0, int(request.query_params.get("since", "0")))
        except ValueError:
            return JSONResponse({"error": "since must be a whole number"}, status_code=400)
        with self._lock:
            records = [t.model_dump(mode="json") for t in self.truth[since:]]
        return JSONResponse(records)

    def _check_auth(self, request: Request) -> Response | None:
        key = self.behavior.api_key
        if key and request.headers.get("authorization") != f"Bearer {key}":
            return JSONResponse({"error": "Unauthorized"}, status_code=401)  # vLLM's own body
        return None

    # ---- generation

    async def _generate(self, request: Request) -> Response:
        t_request = time.perf_counter()
        chat = request.url.path.endswith("/chat/completions")
        raw = await request.body()
        bad_json: ValueError | None
        try:
            body = json.loads(raw)
        except ValueError as exc:
            body, bad_json = None, exc
        else:
            bad_json = None
        with self._lock:
            self.requests.append(RecordedRequest(method="POST", path=request.url.path,
                                                 headers=dict(request.headers), body=body))
        b = self.behavior.model_copy()  # one request sees one consistent behaviour
        if (refused := self._refusal(request, body, bad_json, b)) is not None:
            return refused
        assert isinstance(body, dict)  # _refusal answered anything else
        prompt_text = json.dumps(body.get("messages") if chat else body.get("prompt"))
        b = self._behavior_for(b, prompt_text)
        prompt_tokens = prompt_words(body, chat)
        if (faulted := self._fault(request, b, prompt_tokens)) is not None:
            return faulted
        room = max(1, b.max_model_len - prompt_tokens)
        max_tokens = body.get("max_tokens", body.get("max_completion_tokens"))
        n = min(max_tokens or room, room)
        pieces = b.pieces or DEFAULT_PIECES
        finish = "length"
        if b.stop_at_end_of_pieces and len(pieces) <= n:
            n, finish = len(pieces), "stop"
        texts = [pieces[i % len(pieces)] for i in range(n)]
        sizes = plan_chunks(n, b.chunk_sizes)
        truth = Truth(path=request.url.path, stream=bool(body.get("stream")), prompt_tokens=prompt_tokens,
                      prompt=prompt_text, t_request=t_request, per_position_accepted=[0] * b.num_spec_tokens)
        with self._lock:
            self.truth.append(truth)
            self._running[id(truth)] = truth
            self._counters.prompt_tokens += prompt_tokens
        gen = _Generation(self, b, truth, chat, body, texts, sizes, finish,
                          request.scope.get("standin.transport"))
        if not truth.stream:
            try:
                return await gen.non_stream()
            except asyncio.CancelledError:
                self._finish(truth, "aborted")
                raise
        return _SSE(gen.stream, lambda outcome: self._finish(truth, outcome))

    def _refusal(self, request: Request, body: Any, bad_json: ValueError | None,
                 b: StandinBehavior) -> Response | None:
        """vLLM's answer to a request it refuses before generating (in its order: the key, the JSON,
        the model, max_tokens, tools without a parser); None when it takes the request."""
        if (denied := self._check_auth(request)) is not None:  # vLLM checks the key first
            return denied
        if bad_json is not None or not isinstance(body, dict):
            # FastAPI's validation error, as vLLM words it (see error-bad-json.txt).
            pos = getattr(bad_json, "pos", 0)
            detail = {"type": "json_invalid", "loc": f"body.{pos}", "msg": "JSON decode error",
                      "input": "<dict of 0 items>",
                      "ctx": {"error": getattr(bad_json, "msg", "Input should be a valid dictionary")}}
            return error_response(400, f"1 validation error:\n  {detail!r}", "Bad Request", f"body.{pos}")
        model = body.get("model")
        if model is not None and model != b.model:
            return error_response(404, f"The model `{model}` does not exist. Valid aliases: {b.model}.",
                                  "NotFoundError", "model")
        max_tokens = body.get("max_tokens", body.get("max_completion_tokens"))
        if max_tokens is not None and (not isinstance(max_tokens, int) or max_tokens < 1):
            return error_response(400, f"max_tokens must be at least 1, got {max_tokens}. "
                                  f"(parameter=max_tokens, value={max_tokens})", "BadRequestError", "max_tokens")
        if not b.tool_parser:
            return tools_refused(body)
        return None

    def _behavior_for(self, b: StandinBehavior, prompt_text: str) -> StandinBehavior:
        """This request's behaviour: a marker's fields in its prompt, a what-if's steps and rate, and the
        slowdown by the requests running now."""
        for marker, fields in b.by_marker.items():
            if marker in prompt_text:
                b = b.model_copy(update=fields)
                StandinBehavior.model_validate(b.model_dump())  # the same checks as any behaviour
                break
        b = synthetic_behavior(b)  # a what-if's steps and rate (b is this request's copy from here on)
        if b.slowdown_per_running:
            with self._lock:
                factor = 1 + b.slowdown_per_running * len(self._running)
            b.ttft_s, b.tokens_per_s = b.ttft_s * factor, b.tokens_per_s / factor
        return b

    def _fault(self, request: Request, b: StandinBehavior, prompt_tokens: int) -> Response | None:
        """The answer of a fault told to fail the request at once (too long, 500, refused), or of a
        prompt over the context; None otherwise."""
        if b.fault == "too_long" or (b.reject_prompt_over_context and prompt_tokens > b.max_model_len):
            return too_long_response(b.max_model_len)
        if b.fault == "server_error":
            return error_response(500, "Internal server error: the stand-in was told to fail (fault=server_error).",
                                  "InternalServerError", None)
        if b.fault == "refuse":
            transport = request.scope.get("standin.transport")
            if transport is not None:
                transport.abort()  # drop the connection without any response
                return _Dropped()
            return error_response(503, "Service unavailable (fault=refuse).", "ServiceUnavailableError", None)
        return None

    # Bookkeeping called from the server loop while chunks go out.
    def _sent(self, truth: Truth, b: StandinBehavior, sizes: list[int], texts: list[str], t: float) -> None:
        """Record chunks that went out in one write at time t (one lock per burst: cheap at 5k tok/s)."""
        if not sizes:
            return
        with self._lock:
            c = self._counters
            prev = truth.chunk_send_times[-1] if truth.chunk_send_times else None
            first = truth.completion_tokens == 0
            if first:
                truth.t_first_token_sent = t
                self._prefill.pop(id(truth), None)
                c.hists["vllm:time_to_first_token_seconds"].observe(t - truth.t_request)
            itl = c.hists["vllm:inter_token_latency_seconds"]
            if prev is not None:
                itl.observe(t - prev)
            itl.observe_many(0.0, len(sizes) - 1)  # the rest of a burst arrives together
            n = truth.completion_tokens + sum(sizes)
            truth.completion_tokens = n
            truth.chunk_sizes_sent.extend(sizes)
            truth.chunk_send_times.extend([t] * len(sizes))
            truth.t_last_token_sent = t
            truth.text += "".join(texts)
            c.generation_tokens += sum(sizes)
            if b.speculative:
                k, per_pos = b.num_spec_tokens, truth.per_position_accepted
                for size in sizes[1:] if first else sizes:  # the prefill token is not a step
                    acc = size - 1
                    truth.drafts += 1
                    truth.draft_tokens += k
                    truth.accepted += acc
                    for pos in range(acc):
                        per_pos[pos] += 1
                    c.add_step(acc, k)
            t1 = truth.t_first_token_sent
            assert t1 is not None  # set by the first burst, above
            if n > 1 and t > t1:
                truth.decode_tokens_per_s = (n - truth.chunk_sizes_sent[0]) / (t - t1)

    def _finish(self, truth: Truth, outcome: Outcome, finish_reason: str | None = None) -> None:
        with self._lock:
            if truth.outcome != "running":
                return
            truth.outcome = outcome
            truth.finish_reason = finish_reason
            truth.t_end = time.perf_counter()
            self._running.pop(id(truth), None)
            self._admitted.discard(id(truth))
            self._prefill.pop(id(truth), None)
            self._stalled.discard(id(truth))
            if outcome == "completed":
                c = self._counters
                c.success[finish_reason or "stop"] = c.success.get(finish_reason or "stop", 0) + 1
                c.hists["vllm:e2e_request_latency_seconds"].observe(time.perf_counter() - truth.t_request)
                c.hists["vllm:request_prompt_tokens"].observe(truth.prompt_tokens)
                c.hists["vllm:request_generation_tokens"].observe(truth.completion_tokens)
                c.hists["vllm:request_queue_time_seconds"].observe(truth.queue_time_s)
                if truth.decode_tokens_per_s:
                    c.hists["vllm:request_time_per_output_token_seconds"].observe(1 / truth.decode_tokens_per_s)


class _Dropped(Response):
    """The connection was aborted: send nothing."""

    def __init__(self) -> None:
        super().__init__(status_code=500)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        for _ in range(20):  # let uvicorn see the connection lost, so it sends no 500
            await asyncio.sleep(0.001)


class _Generation:
    """One request's output: builds vLLM's chunks and sends them on schedule."""

    def __init__(self, server: Standin, b: StandinBehavior, truth: Truth, chat: bool,
                 body: dict[str, Any], texts: list[str], sizes: list[int], finish: str,
                 transport: asyncio.Transport | None) -> None:
        self.s, self.b, self.truth, self.chat = server, b, truth, chat
        self.texts, self.sizes, self.finish, self.transport = texts, sizes, finish, transport
        opts = body.get("stream_options") or {}
        self.include_usage = bool(opts.get("include_usage"))
        self.continuous = self.include_usage and bool(opts.get("continuous_usage_stats"))
        self.id = ("chatcmpl-" if chat else "cmpl-") + secrets.token_hex(8)
        self.created = int(time.time())
        self.object = "chat.completion.chunk" if chat else "text_completion"
        self.prompt_tokens = truth.prompt_tokens
        self._tmpl: list[str] | None = None

    # ---- chunk builders (key order as captured)

    def _head(self) -> dict[str, Any]:
        return {"id": self.id, "object": self.object, "created": self.created, "model": self.b.model}

    def _usage(self, n: int, details: bool) -> dict[str, Any]:
        u: dict[str, Any] = {"prompt_tokens": self.prompt_tokens, "total_tokens": self.prompt_tokens + n,
                             "completion_tokens": n}
        if details:
            u["completion_tokens_details"] = None
        return u

    def role_chunk(self) -> str:
        d = self._head()
        d["choices"] = [{"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
                         "finish_reason": None}]
        if self.continuous:
            d["usage"] = self._usage(0, True)
        d["prompt_token_ids"] = None
        d["prompt_text"] = None
        return dumps(d)

    def content_chunk(self, text: str, n_after: int, last: bool) -> str:
        if last:
            return dumps(self._content_dict(text, n_after, self.prompt_tokens + n_after, True))
        # The hot path at thousands of tokens/s: the same bytes as json.dumps, from a template
        # cut at placeholders (text, total_tokens, completion_tokens, in that order).
        if self._tmpl is None:
            marked = dumps(self._content_dict(
                "@@T@@", "@@N@@", "@@U@@", False))  # type: ignore[arg-type]  # str placeholders where the ints go
            self._tmpl = re.split(r'"@@[TUN]@@"', marked)
        t = self._tmpl
        if len(t) == 2:  # no usage on content chunks
            return t[0] + dumps(text) + t[1]
        return f"{t[0]}{dumps(text)}{t[1]}{self.prompt_tokens + n_after}{t[2]}{n_after}{t[3]}"

    def _content_dict(self, text: str, n_after: int, total: int, last: bool) -> dict[str, Any]:
        d = self._head()
        if self.chat:
            choice: dict[str, Any] = {"index": 0, "delta": {"content": text}, "logprobs": None,
                                      "finish_reason": self.finish if last else None}
            if last:
                choice["stop_reason"] = None
            choice["token_ids"] = None
        else:
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": self.finish if last else None,
                      "stop_reason": None, "prompt_token_ids": None, "token_ids": None}
        d["choices"] = [choice]
        if self.continuous:
            d["usage"] = {"prompt_tokens": self.prompt_tokens, "total_tokens": total, "completion_tokens": n_after}
            if self.chat:
                d["usage"]["completion_tokens_details"] = None
        return d

    def spec_metrics(self) -> dict[str, Any] | None:
        if not (self.b.speculative and self.b.per_request_metrics):
            return None
        return spec_metrics_for(self.truth.chunk_sizes_sent, self.b.num_spec_tokens)

    def final_chunk(self, n: int) -> str:
        d = self._head()
        d["choices"] = []
        d["usage"] = self._usage(n, False)
        d["system_fingerprint"] = FINGERPRINT
        if (m := self.spec_metrics()) is not None:
            d["metrics"] = {"speculative_decoding": m}
        return dumps(d)

    # ---- schedule

    def _due(self, t0: float, last_token_index: int) -> float:
        return t0 + self.b.ttft_s + last_token_index / self.b.tokens_per_s

    async def _admit(self, cap: int) -> float:
        """Wait for one of ``cap`` slots (max_num_seqs); the time it was taken."""
        while True:
            with self.s._lock:
                if len(self.s._admitted) < cap:
                    self.s._admitted.add(id(self.truth))
                    return time.perf_counter()
            await asyncio.sleep(0.002)

    def _rate_now(self) -> float:
        """The decode rate of one stream now (slowdown_in_flight: it falls with the streams in flight)."""
        with self.s._lock:
            n = max(1, len(self.s._running) if self.b.max_num_seqs is None else len(self.s._admitted))
        return self.b.tokens_per_s / (1 + self.b.slowdown_in_flight * (n - 1))

    async def stream(self, send: Send) -> None:
        if self.b.replay_fixture is not None:
            await self._replay(send)
            return
        await send({"type": "http.response.start", "status": 200, "headers": _SSE_HEADERS})
        sizes, texts, b = self.sizes, self.texts, self.b
        ends = list(itertools.accumulate(sizes))  # tokens sent once chunk c is out
        t0, i, last = self.truth.t_request + b.ttft_s, 0, len(sizes) - 1
        if b.max_num_seqs is not None:  # queued until a slot frees; prefill starts then
            admitted = max(self.truth.t_request, await self._admit(b.max_num_seqs))
            self.truth.queue_time_s = admitted - self.truth.t_request
            t0 = admitted + b.ttft_s
        with self.s._lock:
            self.s._prefill[id(self.truth)] = (t0 - b.ttft_s, b.ttft_s)
        fault_at = b.fault_after_chunks if b.fault in ("cut", "stall", "garbage", "hold") else -1
        dynamic, due = b.slowdown_in_flight > 0, t0
        while i <= last:
            if i == fault_at:
                fault_at = -1
                if (held := await self._mid_stream_fault(send)) is None:
                    return
                t0, due = t0 + held, due + held  # then carry on at the normal pace
            if dynamic:  # each chunk's tokens at the rate the streams in flight allow now
                due = t0 if i == 0 else due + sizes[i] / self._rate_now()
            else:  # a chunk is due when its last token is ready: token m at ttft + m / rate
                due = t0 + (ends[i] - 1) / b.tokens_per_s
            now = time.perf_counter()
            while due > now:  # sleep to an absolute target, so lateness never accumulates
                await asyncio.sleep(due - now)
                now = time.perf_counter()
            # Everything already due goes out in one write (as vLLM merges piled-up outputs).
            j = i + 1
            while (not dynamic and j <= last and j != fault_at
                   and t0 + (ends[j] - 1) / b.tokens_per_s <= now):
                j += 1
            parts = [f"data: {self.role_chunk()}\n\n"] if i == 0 and self.chat else []
            chunk_texts = ["".join(texts[ends[c] - sizes[c]:ends[c]]) for c in range(i, j)]
            for c, text in zip(range(i, j), chunk_texts, strict=True):
                parts.append(f"data: {self.content_chunk(text, ends[c], c == last)}\n\n")
            await send({"type": "http.response.body", "body": "".join(parts).encode(), "more_body": True})
            self.s._sent(self.truth, b, sizes[i:j], chunk_texts, time.perf_counter())
            i = j
        tail = ""
        if self.include_usage:
            tail += f"data: {self.final_chunk(self.truth.completion_tokens)}\n\n"
        tail += "data: [DONE]\n\n"
        # Done before [DONE] goes out (as in vLLM, the engine finished first), so a client that
        # has read [DONE] always finds the truth complete.
        self.s._finish(self.truth, "completed", self.finish)
        await send({"type": "http.response.body", "body": tail.encode(), "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _mid_stream_fault(self, send: Send) -> float | None:
        """The behaviour's fault, at its chunk: None when it cut the stream, else the seconds it held
        the stream (the schedule moves by as much)."""
        b = self.b
        if b.fault == "cut":
            await self._cut()
            return None
        if b.fault == "stall":  # doing nothing for the request: /metrics shows it neither running nor moving
            await self._stall(b.stall_s)
            return b.stall_s
        if b.fault == "hold":
            return await self._hold()
        if b.fault == "garbage":
            await send({"type": "http.response.body", "body": b"data: {\"id\": oops not json\n\n",
                        "more_body": True})
        return 0.0

    async def _stall(self, seconds: float) -> None:
        """Do nothing for the request for ``seconds`` (fault "stall"), its prefill put off as long."""
        key = id(self.truth)
        with self.s._lock:
            self.s._stalled.add(key)
            if key in self.s._prefill:
                start, length = self.s._prefill[key]
                self.s._prefill[key] = (start + seconds, length)
        try:
            await asyncio.sleep(seconds)
        finally:
            with self.s._lock:
                self.s._stalled.discard(key)

    async def _hold(self) -> float:
        """Wait for the stand-in's next release() (fault "hold"); the seconds it took."""
        t = time.perf_counter()
        with self.s._lock:
            seen = self.s._releases
            self.s._holding += 1
        try:
            while True:
                with self.s._lock:
                    if self.s._releases != seen:
                        break
                await asyncio.sleep(0.01)
        finally:
            with self.s._lock:
                self.s._holding -= 1
        return time.perf_counter() - t

    async def _cut(self) -> None:
        """Close the connection mid-body, like a server process that died."""
        self.s._finish(self.truth, "faulted")
        if self.transport is not None:
            self.transport.close()  # flush what was sent, then FIN: an incomplete chunked body
            await asyncio.sleep(3600)  # the disconnect watcher ends us
        raise _Cut("fault=cut")  # no transport: uvicorn closes the connection on an exception

    async def _replay(self, send: Send) -> None:
        assert self.b.replay_fixture is not None  # only the replay fault gets here, and it names a fixture
        path = Path(self.b.replay_fixture)
        events = [ln[len("data: "):] for ln in path.read_text().split("\n") if ln.startswith("data: ")]
        times = [float(x) for x in path.with_suffix(".times").read_text().split()]
        if len(times) != len(events):
            raise ValueError(f"{path}: {len(events)} data lines but {len(times)} times")
        await send({"type": "http.response.start", "status": 200, "headers": _SSE_HEADERS})
        t0, i, prev_n = self.truth.t_request, 0, 0
        while i < len(events):
            due = t0 + times[i] / self.b.replay_speed
            now = time.perf_counter()
            while due > now:
                await asyncio.sleep(due - now)
                now = time.perf_counter()
            j = i + 1
            while j < len(events) and times[j] == times[i]:
                j += 1
            payload = "".join(f"data: {e}\n\n" for e in events[i:j]).encode()
            t_sent = time.perf_counter()
            for e in events[i:j]:
                if e == "[DONE]":
                    continue
                d = json.loads(e)
                n = (d.get("usage") or {}).get("completion_tokens")
                ch = (d.get("choices") or [{}])[0]
                text = (ch.get("delta") or {}).get("content") or ch.get("text") or ""
                if d.get("choices") and n is not None and n > prev_n:
                    self.s._sent(self.truth, self.b, [n - prev_n], [text], t_sent)
                    prev_n = n
                if ch.get("finish_reason"):
                    self.finish = ch["finish_reason"]
            if j == len(events):
                self.s._finish(self.truth, "completed", self.finish)
            await send({"type": "http.response.body", "body": payload, "more_body": True})
            i = j
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def non_stream(self) -> Response:
        now = time.perf_counter()
        if self.sizes:
            await asyncio.sleep(max(0.0, self._due(self.truth.t_request, len(self.texts) - 1) - now))
        ends = list(itertools.accumulate(self.sizes))
        self.s._sent(self.truth, self.b, self.sizes, ["".join(self.texts[e - n:e]) for n, e in
                                                      zip(self.sizes, ends, strict=True)], time.perf_counter())
        n, text = self.truth.completion_tokens, self.truth.text
        usage = {**self._usage(n, False), "prompt_tokens_details": None}
        if self.chat:
            usage["completion_tokens_details"] = None
            choice: dict[str, Any] = {"index": 0, "message": {
                "role": "assistant", "content": text, "refusal": None, "annotations": None, "audio": None,
                "function_call": None, "reasoning": None}, "logprobs": None, "finish_reason": self.finish,
                "stop_reason": None, "token_ids": None, "routed_experts": None}
            obj = "chat.completion"
        else:
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": self.finish,
                      "stop_reason": None, "prompt_logprobs": None, "prompt_token_ids": None, "token_ids": None}
            obj = "text_completion"
        spec = self.spec_metrics()
        metrics = None if spec is None else {
            "time_to_first_token_ms": None, "generation_time_ms": None, "queue_time_ms": None,
            "mean_itl_ms": None, "tokens_per_second": None, "speculative_decoding": spec}
        d = {"id": self.id, "object": obj, "created": self.created,
             "model": self.b.model, "choices": [choice], "service_tier": None,
             "system_fingerprint": FINGERPRINT, "usage": usage, "prompt_logprobs": None,
             "prompt_token_ids": None, "prompt_text": None, "kv_transfer_params": None,
             "ec_transfer_params": None, "metrics": metrics}
        self.s._finish(self.truth, "completed", self.finish)
        return Response(dumps(d), media_type="application/json")

