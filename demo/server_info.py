"""What each server is, for the page's server panel: health, model, spec config, KV-cache use.

Every call is bounded by ``settings.probe_timeout_s``; a probe never raises, it reports
what failed in ``error`` so the page can show a banner that says what to do.
"""

from __future__ import annotations

import asyncio

import httpx
from pydantic import BaseModel

from demo.client import StreamError, discover_model, make_http_client
from demo.metrics import scrape_metrics
from demo.results import Side
from demo.settings import Endpoint, Settings

START_HINT = "python -m servers up"


class ServerInfo(BaseModel):
    """What a probe found of one server: healthy (or why not), model, context length, method and k.

    Also its KV cache and queue, when its /metrics answered.
    """

    side: Side
    url: str
    arm: str | None = None  # a speculative server's arm name (a sweep of several arms)
    healthy: bool = False
    error: str | None = None  # why the server is not usable, one line with what to do
    model: str | None = None
    max_model_len: int | None = None
    spec_method: str | None = None
    spec_num_tokens: int | None = None
    spec_source: str | None = None  # "settings" | "server /metrics"
    kv_cache_usage_perc: float | None = None  # 0..1
    num_requests_running: float | None = None
    num_requests_waiting: float | None = None
    metrics_error: str | None = None


def down_message(info: ServerInfo) -> str:
    """The page's message for a server that does not answer: its error, and how to start the servers."""
    return (f"The {info.side} server at {info.url} is not answering ({info.error}). "
            f"Start the servers with `{START_HINT}` (or fix SPECDEMO_{info.side.upper()}_URL), "
            "then press Refresh.")


async def _health(http: httpx.AsyncClient, url: str, timeout_s: float) -> str | None:
    """None when /health answers 200, else a one-line reason."""
    try:
        resp = await http.get(url.rstrip("/") + "/health", timeout=timeout_s)
    except httpx.ConnectError as e:
        if "CERTIFICATE_VERIFY_FAILED" in str(e):
            return "its TLS certificate is not trusted: set SPECDEMO_CA_BUNDLE to its CA's PEM file"
        return "connection refused"
    except httpx.TimeoutException:
        return f"no answer within {timeout_s:g} s"
    except httpx.HTTPError as e:
        return f"{type(e).__name__}"
    if resp.status_code != 200:
        return f"/health answered HTTP {resp.status_code}"
    return None


async def healthy_sides(settings: Settings) -> set[Side]:
    """The sides whose server answers /health now (both asked at once, each within probe_timeout_s)."""
    async def one(side: Side) -> Side | None:
        async with make_http_client(settings, side) as http:
            return side if await _health(http, settings.endpoint(side).url, settings.probe_timeout_s) is None else None
    return {s for s in await asyncio.gather(one("baseline"), one("speculative")) if s is not None}


async def probe_server(http: httpx.AsyncClient, side: Side, url: str, settings: Settings, *, arm: str | None = None,
                       method: str | None = None, first_arm: bool = True) -> ServerInfo:
    """One server's state. The settings' spec_method and spec_num_tokens describe the first arm only;
    another arm (``first_arm`` False) is described by its own ``method``."""
    info = ServerInfo(side=side, url=url, arm=arm)
    why = await _health(http, url, settings.probe_timeout_s)
    if why is not None:
        info.error = why
        return info
    info.healthy = True
    model_task = discover_model(http, url, settings.probe_timeout_s)
    metrics_task = scrape_metrics(http, url, settings)
    model, metrics = await asyncio.gather(model_task, metrics_task, return_exceptions=True)
    if isinstance(model, StreamError):
        info.error = str(model)
        info.healthy = False
    elif isinstance(model, BaseException):
        raise model
    else:
        info.model, info.max_model_len = model.id, model.max_model_len
    if isinstance(metrics, BaseException):
        raise metrics
    if not metrics.ok:
        info.metrics_error = metrics.error
    else:
        info.kv_cache_usage_perc = metrics.kv_cache_usage_perc
        info.num_requests_running = metrics.num_requests_running
        info.num_requests_waiting = metrics.num_requests_waiting
    if side == "speculative":
        # The launcher's settings say what was configured; the server's per-position
        # counters tell k once it has speculated at least once. vLLM has no metric for the method.
        told = (settings.spec_method, settings.spec_num_tokens) if first_arm else (method, None)
        if told[0] or told[1]:
            info.spec_method, info.spec_num_tokens = told
            info.spec_source = "settings"
        if info.spec_num_tokens is None and metrics.ok and metrics.accepted_per_pos:
            info.spec_num_tokens = len(metrics.accepted_per_pos)
            info.spec_source = info.spec_source or "server /metrics"
    return info


async def probe_servers(settings: Settings, http: httpx.AsyncClient | None = None) -> list[ServerInfo]:
    """Both servers, probed at once: [baseline, speculative]."""
    base_http = http or make_http_client(settings, "baseline")
    spec_http = http or make_http_client(settings, "speculative")
    try:
        return list(await asyncio.gather(
            probe_server(base_http, "baseline", settings.baseline_url, settings),
            probe_server(spec_http, "speculative", settings.speculative_url, settings),
        ))
    finally:
        if http is None:
            await asyncio.gather(base_http.aclose(), spec_http.aclose())


async def probe_arms(settings: Settings) -> list[ServerInfo]:
    """The baseline and every arm (Settings.arm_endpoints()), probed at once: [baseline, arm 1, ...],
    each arm's ``arm`` set to its name."""
    base = settings.endpoint("baseline")
    arms = settings.arm_endpoints()

    async def one(e: Endpoint, first: bool) -> ServerInfo:
        async with make_http_client(settings, endpoint=e) as http:
            return await probe_server(http, e.side, e.url, settings, arm=e.arm, method=e.method, first_arm=first)

    return list(await asyncio.gather(one(base, True), *(one(e, i == 0) for i, e in enumerate(arms))))


def terminal_report(infos: list[ServerInfo]) -> str:
    """What `python app.py` prints at start-up about the servers."""
    lines = []
    for i in infos:
        if i.healthy:
            lines.append(f"  {i.side:<12} {i.url}  ok  model={i.model} max_model_len={i.max_model_len}")
        else:
            lines.append(f"  {i.side:<12} {i.url}  DOWN ({i.error})")
    if any(not i.healthy for i in infos):
        lines.append(f"  -> start the servers with:  {START_HINT}")
        lines.append("     (the page starts anyway and shows a banner until they answer)")
    return "\n".join(lines)
