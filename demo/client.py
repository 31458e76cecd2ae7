"""Async client for vLLM's OpenAI-compatible API: streams typed ChunkEvents.

Tokens are counted from the server's ``usage`` (asked for with continuous_usage_stats),
never from chunks: a speculative chunk often carries several tokens.

One client per server (``ServerClient``, from make_http_client): httpx for the small calls (the
model, a prompt's token count, /metrics), aiohttp under the streams. At 256 streams of 100 tokens/s
from one stand-in, aiohttp read a token for 31-36 µs of CPU with the event loop 1-3 ms late at
p95, httpx for 40 µs with it 59 ms late (benchmarks/bench_client_candidates.py, docs/benchmarks.md
"Which HTTP client"): the streams are where the client's time goes. ``run_streams`` runs a measurement
on uvloop where it is installed (as vLLM's own server does), which took another tenth off.
"""

from __future__ import annotations

import asyncio
import functools
import gc
import json
import ssl
import threading
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import aiohttp
import httpx
import orjson
from pydantic import BaseModel, ValidationError

from demo.errors import ServerError, tool_parser_hint
from demo.metrics import MetricsSample, in_flight, progress_signature, scrape
from demo.results import ChunkEvent, RaceRequest, ServerWait, Side, SpecPerRequest, ToolCallDelta
from demo.sampling import sampling_body
from demo.settings import Endpoint, Settings

T = TypeVar("T")


def settle_heap() -> None:
    """Collect once, then put every object alive now out of the garbage collector's reach.

    Called once the imports are done (the page, the CLI, a test worker). A chunk's arrival time is
    taken when the client reads it, so a pause of the client's process at a stream's first or last
    token moves a measured rate. A full collection over the page's imports (~176,000 objects) took
    ~100 ms on a 2-core VM: 10% of a 1 s stream's rate, twice what the tests allow;
    over what is left after this, well under 1 ms. The frozen objects are the imports, alive to the
    end anyway.
    """
    gc.collect()
    gc.freeze()


def run_streams(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(main)``, on uvloop where it is installed (the requirements install it on Linux
    and macOS; Windows has none): the loop does in C what asyncio's does in Python for every read of
    every stream. The CLI's measurements and the benchmarks run through this; the page's loop is
    uvicorn's (which picks uvloop itself when it is installed)."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(main)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(main)


# The collector is off while any measured run streams: one count for the whole process (several
# viewers' races overlap on a shared page), under a lock (Gradio runs handlers on threads too).
_pause = {"runs": 0, "since": 0.0, "ours": False}
_pause_lock = threading.Lock()
MAX_COLLECTOR_PAUSE_S = 600.0  # overlapping runs for longer than this: collect once as the next one starts


@contextmanager
def collector_paused() -> Iterator[None]:
    """No automatic garbage collection while the streams inside are measured, as ``timeit`` times.

    settle_heap() takes the imports out of reach, but what a long-running page or a sweep keeps
    alive grows, and an automatic full collection at a stream's first or last token moves its rate
    (50-170 ms in a test worker on a busy 2-core VM). Objects freed by reference
    counting are freed as always; only cycles wait for the collector, which is on again as soon as
    no measured run is left (or stays off if someone else had turned it off). Runs that overlap
    without a gap for MAX_COLLECTOR_PAUSE_S get one collection as the next run starts.
    """
    with _pause_lock:
        if _pause["runs"] == 0:
            _pause["ours"], _pause["since"] = gc.isenabled(), time.monotonic()
            gc.disable()
        elif time.monotonic() - _pause["since"] > MAX_COLLECTOR_PAUSE_S:
            gc.collect()
            _pause["since"] = time.monotonic()
        _pause["runs"] += 1
    try:
        yield
    finally:
        with _pause_lock:
            _pause["runs"] -= 1
            if _pause["runs"] == 0 and _pause["ours"]:
                gc.enable()


# An answer's tool calls are numbered 0..MAX_TOOL_CALLS-1; a higher index is refused (bad data).
MAX_TOOL_CALLS = 64


class StreamError(ServerError):
    """A request failed; the message is one line that says what failed and what to do."""


class ModelInfo(BaseModel):
    """A served model as GET /v1/models reports it: its id and max_model_len (None: not reported)."""
    id: str
    max_model_len: int | None = None


@functools.cache
def _tls_context(ca_bundle: str | None = None) -> ssl.SSLContext:
    """The CA bundle (the system's, or ``ca_bundle``), loaded once per process and path. httpx
    loads it again for every new client: ~10 ms of CPU, a tenth of the app's CPU in the load
    test, where the page makes a client per race."""
    if ca_bundle:
        return ssl.create_default_context(cafile=ca_bundle)
    return httpx.create_ssl_context(verify=True, trust_env=False)


# While a quiet stream waits on a server that says it is working, its /metrics is asked this often
# (at most: every quiet stream to one server shares one answer per interval).
PROBE_EVERY_S = 5.0


@dataclass
class QuietPolicy:
    """How a stream's silence is judged (the settings' read_timeout_s, prefill_wait_max_s, probe_timeout_s).

    After ``read_timeout_s`` without data the server's /metrics is asked, then every
    ``probe_every_s`` while the stream stays quiet: it is working when it holds requests (running +
    waiting) and something moved within the last ``read_timeout_s``; otherwise the stream stalled.
    However busy it says it is, a silence of ``wait_max_s`` ends the stream.
    """

    read_timeout_s: float
    wait_max_s: float
    probe_timeout_s: float
    probe_every_s: float = PROBE_EVERY_S

    def stream_timeout(self, connect_s: float) -> aiohttp.ClientTimeout:
        """A stream's timeout: ``connect_s`` to connect. Its reads are bounded by the watch
        (_QuietWatch: a silence is judged after ``read_timeout_s`` and ended by ``wait_max_s`` at the
        most), not by aiohttp's sock_read, which would move a timer on every read of every stream
        (4% of the client's CPU at 1,024 streams, benchmarks/bench_client_streams.py)."""
        return aiohttp.ClientTimeout(total=None, connect=connect_s, sock_connect=connect_s, sock_read=None)


class ServerClient(httpx.AsyncClient):
    """The client for the servers (make_http_client): httpx for the small calls, an aiohttp session
    under the streams (``streams``, made on the first one, in its event loop), a judge of a quiet
    stream (``quiet``), and the /metrics probes its streams to one server share. Closing it closes both."""

    def __init__(self, *args: Any, quiet: QuietPolicy, tls: ssl.SSLContext, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.quiet = quiet
        self.probes: dict[str, _ServerProbe] = {}
        self._tls = tls
        self._session: aiohttp.ClientSession | None = None

    def streams(self) -> aiohttp.ClientSession:
        """The session the streams go through: no cap on connections (the callers bound the streams),
        never a proxy from the environment, this client's CA bundle. Each stream sends this client's
        headers as they are then (a caller may add one after making the client)."""
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=0, ssl=self._tls), trust_env=False,
                json_serialize=lambda body: orjson.dumps(body).decode())
        return self._session

    async def _close_streams(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def aclose(self) -> None:
        """Close the streams' session, then httpx's."""
        await self._close_streams()
        await super().aclose()

    async def __aexit__(self, *exc: Any) -> None:
        await self._close_streams()
        await super().__aexit__(*exc)


def make_http_client(settings: Settings, side: Side | None = None, *,
                     endpoint: Endpoint | None = None) -> ServerClient:
    """A client for one server: ``endpoint``'s (an arm's), else one side's (its key and extra
    headers), or, with neither, for all when they share them (the shared ``api_key`` only)."""
    if endpoint is not None:
        headers = endpoint.request_headers()
    elif side is not None:
        headers = settings.endpoint(side).request_headers()
    else:
        headers = {}
        if settings.api_key is not None:
            headers["Authorization"] = f"Bearer {settings.api_key.get_secret_value()}"
    # httpx's read timeout bounds each read of the small calls; a stream's silence is watched by
    # stream_completion itself (QuietPolicy), which asks the server before calling it stalled.
    timeout = httpx.Timeout(
        connect=settings.connect_timeout_s,
        read=settings.read_timeout_s,
        write=settings.connect_timeout_s,
        pool=settings.connect_timeout_s,
    )
    tls = _tls_context(str(settings.ca_bundle) if settings.ca_bundle else None)
    return ServerClient(
        quiet=QuietPolicy(read_timeout_s=settings.read_timeout_s, wait_max_s=settings.prefill_wait_max_s,
                          probe_timeout_s=settings.probe_timeout_s,
                          probe_every_s=min(PROBE_EVERY_S, settings.read_timeout_s)),
        tls=tls,
        headers=headers,
        timeout=timeout,
        # No cap on connections: the callers bound the streams (users <= max_users, a sweep's
        # concurrency <= 1024, the page's stream budget). A cap below them made the streams past it
        # wait for another's end: 256 users were 200 at once, then 56 (bench_client_streams).
        limits=httpx.Limits(max_connections=None, max_keepalive_connections=50),
        trust_env=False,  # never route local servers through a proxy from the environment
        verify=tls,
    )


def _one_line(text: str, limit: int = 300) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def error_from_response(status: int, body: bytes, base_url: str) -> StreamError:
    """Turn vLLM's ``{"error": {"message": ...}}`` (or any body) into one clear line."""
    message = ""
    try:
        data = json.loads(body)
        err = data.get("error", data) if isinstance(data, dict) else data
        message = err.get("message", "") if isinstance(err, dict) else str(err)
        if not message and isinstance(data, dict):
            message = str(data.get("detail", "") or data.get("message", ""))
    except (ValueError, AttributeError):
        message = body.decode("utf-8", "replace")
    hint = tool_parser_hint(message) or {
        401: "check SPECDEMO_API_KEY",
        404: "check the model name and the URL",
        429: "the server is overloaded; try again",
    }.get(status, "the server refused the request" if status < 500 else "the server failed; see its log")
    return StreamError(f"HTTP {status} from {base_url}: {_one_line(message) or 'no message'} ({hint})")


def error_from_exception(exc: Exception, base_url: str, tokens: int | None = None) -> StreamError:
    """The one-line StreamError for an HTTP failure talking to ``base_url`` (after ``tokens`` streamed, if any)."""
    got = f" after {tokens} tokens" if tokens else ""
    if isinstance(exc, (httpx.ConnectTimeout, aiohttp.ConnectionTimeoutError)):
        return StreamError(f"Timed out connecting to {base_url}: is the server running and the URL right?")
    if isinstance(exc, (httpx.ConnectError, aiohttp.ClientConnectorError)) and "CERTIFICATE_VERIFY_FAILED" in str(exc):
        return StreamError(
            f"The TLS certificate of {base_url} is not trusted (CERTIFICATE_VERIFY_FAILED): set "
            "SPECDEMO_CA_BUNDLE (or --ca-bundle) to the PEM file of the CA that signed it."
        )
    if isinstance(exc, (httpx.ConnectError, aiohttp.ClientConnectorError)):
        return StreamError(
            f"Cannot reach {base_url}: connection refused or host unknown. Start the server "
            "(python -m servers up) or fix the URL in settings."
        )
    if isinstance(exc, (httpx.ReadTimeout, aiohttp.SocketTimeoutError)):
        return stalled_error(base_url, tokens)
    if isinstance(exc, (httpx.RemoteProtocolError, httpx.ReadError, aiohttp.ServerDisconnectedError,
                        aiohttp.ClientPayloadError, aiohttp.ClientOSError)):
        return StreamError(f"Stream from {base_url} was cut{got}: the server closed the connection before finishing.")
    if isinstance(exc, (httpx.HTTPError, aiohttp.ClientError)):
        return StreamError(f"Request to {base_url} failed{got}: {_one_line(str(exc)) or type(exc).__name__}.")
    return StreamError(f"Request to {base_url} failed{got}: {type(exc).__name__}: {_one_line(str(exc))}")


def stalled_error(base_url: str, tokens: int | None = None, *, waited_s: float | None = None) -> StreamError:
    """The stall's one line: nothing within the read timeout and the server not working on it; with
    ``waited_s``, the hard bound ended a wait on a server that said it was working."""
    got = f" after {tokens} tokens" if tokens else ""
    if waited_s is not None:
        return StreamError(f"{base_url} stalled{got}: no data for {waited_s:.0f} s, though its /metrics said it "
                           "was working (SPECDEMO_PREFILL_WAIT_MAX_S).")
    return StreamError(f"{base_url} stalled{got}: no data within the read timeout (SPECDEMO_READ_TIMEOUT_S).")


class _ServerProbe:
    """One server's /metrics as the quiet streams to it see it: one scrape serves every stream that
    asks within half a probe interval, and ``moved_at`` is when its progress signature last changed
    (or when a new series of probes began)."""

    def __init__(self) -> None:
        self.lock = asyncio.Lock()
        self.sample: MetricsSample | None = None
        self.at = float("-inf")  # perf_counter of the last scrape's answer
        self.moved_at = float("-inf")
        self.signature: tuple[float | None, ...] | None = None

    async def ask(self, http: httpx.AsyncClient, base_url: str, policy: QuietPolicy) -> tuple[MetricsSample, float]:
        """The server's /metrics now (or from a moment ago) and when it last moved."""
        async with self.lock:
            now = time.perf_counter()
            if self.sample is not None and now - self.at < policy.probe_every_s / 2:
                return self.sample, self.moved_at
            sample = await scrape(http, base_url, policy.probe_timeout_s)
            t = time.perf_counter()
            sig = progress_signature(sample) if sample.ok else None
            # A new series (nothing asked for two intervals): what changed since is unknown, so it counts as moved.
            if sig is None or sig != self.signature or now - self.at > 2 * policy.probe_every_s:
                self.moved_at = t
            self.sample, self.at, self.signature = sample, t, sig
            return sample, self.moved_at


class _QuietWatch:
    """Watches one stream's silence beside it, at no cost per chunk: the stream notes when data
    came (``seen``) and when its consumer holds it (``paused``: that silence is not the server's).

    After read_timeout_s of silence it asks the server (_ServerProbe); a server that is working on
    requests keeps the stream waiting (``on_wait`` hears a ServerWait, then None when data comes
    again), one that is not, or after wait_max_s, ends it: ``verdict`` is set and the task reading
    the stream is cancelled, which stream_completion turns into the stall's StreamError.
    """

    def __init__(self, http: ServerClient, base_url: str, task: asyncio.Task[Any],
                 on_wait: Callable[[ServerWait | None], None] | None) -> None:
        self.http, self.base_url, self.task, self.on_wait = http, base_url, task, on_wait
        self.policy = http.quiet
        self.probe = http.probes.setdefault(base_url.rstrip("/"), _ServerProbe())
        self.seen = time.perf_counter()
        self.paused = False
        self.waiting = False  # on_wait was told the server is working, and not yet that data came
        self.verdict: StreamError | None = None
        self.cancelling = task.cancelling()

    def data(self) -> None:
        """Data came again after a wait the page was told about."""
        self.waiting = False
        if self.on_wait is not None:
            self.on_wait(None)

    async def run(self, tokens: Callable[[], int | None]) -> None:
        p = self.policy
        while True:
            delay = self.seen + p.read_timeout_s - time.perf_counter()
            if delay > 0 or self.paused:
                await asyncio.sleep(delay if delay > 0 else p.read_timeout_s)
                continue
            quiet_since = self.seen
            quiet = time.perf_counter() - quiet_since
            verdict = None
            if quiet >= p.wait_max_s:
                verdict = stalled_error(self.base_url, tokens(), waited_s=quiet)
            else:
                sample, moved_at = await self.probe.ask(self.http, self.base_url, p)
                if self.seen != quiet_since or self.paused:
                    continue  # data came while we asked
                now = time.perf_counter()
                if not sample.ok or in_flight(sample) <= 0 or now - moved_at > p.read_timeout_s:
                    verdict = stalled_error(self.base_url, tokens())
                else:
                    self.waiting = True
                    if self.on_wait is not None:
                        self.on_wait(ServerWait(quiet_s=now - quiet_since,
                                                running=int(sample.num_requests_running or 0),
                                                waiting=int(sample.num_requests_waiting or 0)))
                    await asyncio.sleep(max(0.0, min(p.probe_every_s, quiet_since + p.wait_max_s - now)))
                    continue
            self.verdict = verdict
            self.task.cancel()
            return


async def discover_model(http: httpx.AsyncClient, base_url: str, timeout_s: float = 5.0) -> ModelInfo:
    """The first model the server serves, from /v1/models."""
    url = base_url.rstrip("/") + "/v1/models"
    try:
        resp = await http.get(url, timeout=timeout_s)
    except httpx.HTTPError as e:
        raise error_from_exception(e, base_url) from e
    if resp.status_code != 200:
        raise error_from_response(resp.status_code, resp.content, base_url)
    try:
        first = resp.json()["data"][0]
    except (ValueError, KeyError, IndexError, TypeError) as e:
        raise StreamError(f"{url} did not list a model: is this a vLLM / OpenAI-compatible server?") from e
    return ModelInfo(id=first["id"], max_model_len=first.get("max_model_len"))


async def count_prompt_tokens(
    http: httpx.AsyncClient, base_url: str, model: str, req: RaceRequest, timeout_s: float = 5.0
) -> tuple[int, int | None] | None:
    """Prompt tokens and the context length from vLLM's /tokenize; None when it can't tell."""
    body: dict[str, Any] = {"model": model}
    if req.api == "chat":
        body["messages"] = request_body(req, model)["messages"]
    else:
        body["prompt"] = completion_prompt(req)
    try:
        resp = await http.post(base_url.rstrip("/") + "/tokenize", json=body, timeout=timeout_s)
        data = resp.json() if resp.status_code == 200 else None
    except (httpx.HTTPError, ValueError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("count"), int):
        return None
    return data["count"], data.get("max_model_len")


def completion_prompt(req: RaceRequest) -> str:
    """The plain prompt for /v1/completions: the request's own, else the messages joined."""
    if req.prompt is not None:
        return req.prompt
    return "\n\n".join(m.text for m in req.messages or []) + "\n"


def request_body(req: RaceRequest, model: str) -> dict[str, Any]:
    """The JSON body of a streamed completion (chat or completions) for ``req`` on ``model``, usage on every chunk."""
    body: dict[str, Any] = {
        "model": model,
        "temperature": req.temperature,
        "max_tokens": req.max_tokens,
        "stream": True,
        # Running usage on every chunk: the only honest token count of a chunk.
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    }
    if req.seed is not None:
        body["seed"] = req.seed
    body.update(sampling_body(req))
    if req.api == "chat":
        if req.messages:
            body["messages"] = [m.model_dump() for m in req.messages]
        else:
            body["messages"] = [{"role": "user", "content": req.prompt or ""}]
    else:
        body["prompt"] = completion_prompt(req)
    return body


def parse_chunk(data: dict[str, Any], t_s: float) -> ChunkEvent:
    """One decoded SSE JSON object -> ChunkEvent (chat and completions shapes). It runs for every
    chunk of every stream, so it checks each field's type itself (ChunkEvent is a plain dataclass)
    and makes the event in one call; a field of the wrong type raises StreamError."""
    if "error" in data and "choices" not in data:
        err = data["error"]
        msg = err.get("message", "") if isinstance(err, dict) else str(err)
        raise StreamError(f"The server reported an error mid-stream: {_one_line(msg)}")
    usage = data.get("usage") or {}
    choices = data.get("choices") or []
    if type(usage) is not dict or type(choices) is not list:
        raise StreamError(f"Bad data: a chunk's usage or choices is not what vLLM sends ({_one_line(repr(data), 99)}).")
    completion_tokens, prompt_tokens = usage.get("completion_tokens"), usage.get("prompt_tokens")
    if not (_count(completion_tokens) and _count(prompt_tokens)):
        raise StreamError(f"Bad data: a chunk's token counts are not whole numbers ({_one_line(repr(usage), 120)}).")
    text, finish_reason, calls = "", None, None
    if choices:
        choice = choices[0]
        if type(choice) is not dict:
            raise StreamError(f"Bad data: a chunk's choice is not an object ({_one_line(repr(choice), 120)}).")
        if "delta" in choice:
            delta = choice.get("delta") or {}
            if type(delta) is not dict:
                raise StreamError(f"Bad data: a chunk's delta is not an object ({_one_line(repr(delta), 120)}).")
            text = delta.get("content") or ""
            if delta.get("tool_calls"):
                calls = tool_call_deltas(delta["tool_calls"])
        else:
            text = choice.get("text") or ""
        finish_reason = choice.get("finish_reason")
        if type(text) is not str or not (finish_reason is None or type(finish_reason) is str):
            raise StreamError(f"Bad data: a chunk's text or finish reason is not text ({_one_line(repr(choice), 99)}).")
    metrics = data.get("metrics")
    spec = None
    if isinstance(metrics, dict) and (per_request := metrics.get("speculative_decoding")):
        spec = SpecPerRequest.model_validate(per_request)
    return ChunkEvent(t_s=t_s, text=text, completion_tokens=completion_tokens, prompt_tokens=prompt_tokens,
                      finish_reason=finish_reason, final_usage="choices" in data and not choices, spec=spec,
                      tool_calls=calls)


def _count(value: object) -> bool:
    """A token count as vLLM sends it: a whole number (not a bool), or absent."""
    return value is None or (type(value) is int and value >= 0)


def tool_call_deltas(items: Any) -> list[ToolCallDelta]:
    """``delta.tool_calls`` of a chat chunk as typed pieces: the call's index, its id and function
    name (sent once, in the call's first piece) and a piece of its JSON arguments text. Anything
    else (not a list of objects, a name or arguments that are not text, an index outside
    0..MAX_TOOL_CALLS-1) raises StreamError: the answer cannot be read."""
    if not isinstance(items, list):
        raise StreamError(f"Bad data: a chunk's delta.tool_calls is not a list ({_one_line(repr(items), 80)}).")
    out = []
    for item in items:
        piece = _tool_call_delta(item)
        if piece is None:
            raise StreamError(f"Bad data: a tool call piece the client cannot read ({_one_line(repr(item), 120)}).")
        out.append(piece)
    return out


def _tool_call_delta(item: Any) -> ToolCallDelta | None:
    """One item of ``delta.tool_calls``, checked field by field; None when it is not one."""
    if not isinstance(item, dict):
        return None
    function = item.get("function") or {}
    index, call_id = item.get("index", 0), item.get("id")
    if not isinstance(function, dict) or type(index) is not int or not 0 <= index < MAX_TOOL_CALLS:
        return None
    name, args = function.get("name"), function.get("arguments")
    if not all(isinstance(v, str | None) for v in (call_id, name, args)):
        return None
    return ToolCallDelta(index=index, id=call_id, name=name, arguments=args or "")


async def _sse_payloads(content: aiohttp.StreamReader, t0: float,
                        watch: _QuietWatch) -> AsyncIterator[tuple[float, bytes]]:
    """Each SSE event's data (its data lines joined) and when it arrived, in seconds since ``t0``.

    Lines are split on LF (CRLF) only, as bytes: vLLM sends U+2028, U+2029, U+0085 and other Unicode
    line breaks unescaped inside JSON when the model writes them, and a split on those would cut an
    event in two. Every read, an event's or a comment's, tells ``watch`` that the server is not
    silent. One generator from the socket's blocks to the events: each layer between costs every
    chunk of every stream a step."""
    pending = b""
    data_lines: list[bytes] = []
    async for block in content.iter_any():
        watch.seen = time.perf_counter()
        if watch.waiting:
            watch.data()
        *lines, pending = (pending + block).split(b"\n")
        for line in lines:
            if line.startswith(b"data:"):
                data_lines.append(line[5:].lstrip(b" ").removesuffix(b"\r"))
            elif (not line or line == b"\r") and data_lines:  # a blank line ends an event
                # Its time is when it is read, as vllm bench serve times each chunk: several events
                # in one read of the socket are read one after another, never all at one instant.
                yield time.perf_counter() - t0, b"\n".join(data_lines)
                data_lines = []
            # comments (": ...") and other fields are skipped
    # An event the body ends inside (no blank line after it) is not dispatched (the SSE rule).


def _event_of(payload: bytes, now: float, base_url: str) -> ChunkEvent:
    """The chunk event an SSE event's data holds; StreamError when it is not JSON."""
    try:
        data = orjson.loads(payload)
    except orjson.JSONDecodeError as e:
        raise StreamError(f"Bad data from {base_url}: an event was not JSON "
                          f"({_one_line(payload.decode('utf-8', 'replace'), 80)!r}).") from e
    if not isinstance(data, dict):
        raise StreamError(f"Bad data from {base_url}: an event was not a JSON object "
                          f"({_one_line(payload.decode('utf-8', 'replace'), 80)!r}).")
    try:
        return parse_chunk(data, now)
    except ValidationError as e:  # the speculative_decoding metrics not as vLLM sends them
        raise StreamError(f"Bad data from {base_url}: an event the client cannot read "
                          f"({_one_line(payload.decode('utf-8', 'replace'), 80)!r}).") from e


async def stream_completion(
    http: ServerClient,
    base_url: str,
    model: str,
    req: RaceRequest,
    *,
    t0: float | None = None,
    on_wait: Callable[[ServerWait | None], None] | None = None,
) -> AsyncIterator[ChunkEvent]:
    """Stream one request; yields events with arrival times relative to ``t0`` (perf_counter).

    Raises StreamError with a one-line message on any failure. Closing the generator
    (or cancelling its consumer) closes the connection, and vLLM aborts the request.

    A silence of the read timeout is not the end: the server's /metrics is asked (_QuietWatch), and
    while it is working on requests the stream waits, telling ``on_wait`` (a ServerWait each time it
    asks, None once data comes again), up to the settings' prefill_wait_max_s. Consume the generator
    from one task: that task is cancelled when the watch gives up.
    """
    url = base_url.rstrip("/") + ("/v1/chat/completions" if req.api == "chat" else "/v1/completions")
    t0 = time.perf_counter() if t0 is None else t0
    tokens: int | None = None
    task = asyncio.current_task()
    if task is None:
        raise RuntimeError("stream_completion runs in a task")
    watch = _QuietWatch(http, base_url, task, on_wait)
    watcher = asyncio.create_task(watch.run(lambda: tokens))
    timeout = http.quiet.stream_timeout(http.timeout.connect or http.quiet.read_timeout_s)
    try:
        async with http.streams().post(url, json=request_body(req, model), headers=dict(http.headers),
                                       timeout=timeout) as resp:
            if resp.status != 200:
                raise error_from_response(resp.status, await resp.read(), base_url)
            async for now, payload in _sse_payloads(resp.content, t0, watch):
                if payload.strip() == b"[DONE]":
                    watcher.cancel()  # the stream is over: no silence to watch
                    yield ChunkEvent(t_s=now, done=True, completion_tokens=tokens)
                    return
                event = _event_of(payload, now, base_url)
                if event.completion_tokens is not None:
                    tokens = event.completion_tokens
                watch.paused = True  # the consumer's time is not the server's silence
                yield event
                watch.paused, watch.seen = False, time.perf_counter()
            got = f" after {tokens} tokens" if tokens else ""
            raise StreamError(f"Stream from {base_url} ended{got} without [DONE]: the server stopped early.")
    except StreamError:
        raise
    except (aiohttp.ClientError, httpx.HTTPError) as e:
        raise error_from_exception(e, base_url, tokens) from e
    except asyncio.CancelledError:
        # The watch's cancel (as asyncio.timeout tells its own from another's): the stall's line.
        if watch.verdict is not None and watch.task.uncancel() <= watch.cancelling:
            raise watch.verdict from None
        raise
    finally:
        watcher.cancel()
