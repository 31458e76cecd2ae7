"""Scrape vLLM's Prometheus /metrics and turn counter deltas into acceptance figures; the same
counters as a Prometheus server recorded them at a given time (``prometheus_sample``).

Server-wide counters mix every request in the window, so these deltas are exact only
when the demo is the server's only client: the per-request numbers are preferred.
"""

from __future__ import annotations

import httpx
from prometheus_client.parser import text_string_to_metric_families
from pydantic import BaseModel, Field

from demo.measure import acceptance
from demo.results import SpecStats
from demo.settings import Settings

_SPEC = "vllm:spec_decode_"
_TPOT = "vllm:request_time_per_output_token_seconds"
QUEUE_TIME = "vllm:request_queue_time_seconds"  # a histogram: each finished request's time waiting for a slot


class MetricsSample(BaseModel):
    """One scrape of a server's /metrics: its speculative counters, KV cache, queue and preemptions.

    ``ok`` False with ``error`` when the scrape failed; a figure the server does not export is None.
    """

    ok: bool = True
    error: str | None = None
    spec_drafts: float | None = None
    spec_draft_tokens: float | None = None
    spec_accepted_tokens: float | None = None
    accepted_per_pos: dict[int, float] = Field(default_factory=dict)
    kv_cache_usage_perc: float | None = None  # 0..1
    num_requests_running: float | None = None
    num_requests_waiting: float | None = None
    num_preemptions_total: float | None = None  # a counter: the engine's preemptions since start
    generation_tokens_total: float | None = None
    # vllm:request_time_per_output_token_seconds (a histogram of finished requests' decode time per token)
    tpot_seconds_sum: float | None = None
    tpot_seconds_count: float | None = None
    # vllm:request_queue_time_seconds (finished requests' time in the WAITING phase): sum, count and
    # the cumulative bucket counts by upper bound (le; +Inf as math.inf)
    queue_time_seconds_sum: float | None = None
    queue_time_seconds_count: float | None = None
    queue_time_seconds_buckets: dict[float, float] = Field(default_factory=dict)
    # What moves while the engine works on a request before its first token (demo.client's quiet
    # watch): vLLM publishes its scheduler's gauges after every engine step, a chunked prefill's
    # KV blocks among them, while the token counters move only once the first token is out.
    prompt_tokens_total: float | None = None
    iteration_tokens_count: float | None = None  # vllm:iteration_tokens_total_count: steps that produced tokens
    prefix_cache_queries_total: float | None = None  # moves once, when a request is first scheduled


def parse_metrics(text: str) -> MetricsSample:
    """Parse Prometheus text; sums a series over its label sets (engines)."""
    sample = MetricsSample()
    totals: dict[str, float] = {}
    try:
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                if s.name == "vllm:spec_decode_num_accepted_tokens_per_pos_total":
                    pos = int(s.labels.get("position", "-1"))
                    sample.accepted_per_pos[pos] = sample.accepted_per_pos.get(pos, 0.0) + s.value
                elif s.name == QUEUE_TIME + "_bucket":
                    le = float(s.labels["le"])
                    sample.queue_time_seconds_buckets[le] = sample.queue_time_seconds_buckets.get(le, 0.0) + s.value
                elif s.name.startswith("vllm:"):
                    totals[s.name] = totals.get(s.name, 0.0) + s.value
    except (ValueError, TypeError, KeyError) as e:
        what = str(e).splitlines()[0] if str(e) else type(e).__name__
        return MetricsSample(ok=False, error=f"/metrics is malformed: {what}")
    sample.spec_drafts = totals.get(_SPEC + "num_drafts_total")
    sample.spec_draft_tokens = totals.get(_SPEC + "num_draft_tokens_total")
    sample.spec_accepted_tokens = totals.get(_SPEC + "num_accepted_tokens_total")
    sample.kv_cache_usage_perc = totals.get("vllm:kv_cache_usage_perc", totals.get("vllm:gpu_cache_usage_perc"))
    sample.num_requests_running = totals.get("vllm:num_requests_running")
    sample.num_requests_waiting = totals.get("vllm:num_requests_waiting")
    sample.num_preemptions_total = totals.get("vllm:num_preemptions_total")
    sample.generation_tokens_total = totals.get("vllm:generation_tokens_total")
    sample.tpot_seconds_sum = totals.get(_TPOT + "_sum")
    sample.tpot_seconds_count = totals.get(_TPOT + "_count")
    sample.queue_time_seconds_sum = totals.get(QUEUE_TIME + "_sum")
    sample.queue_time_seconds_count = totals.get(QUEUE_TIME + "_count")
    sample.prompt_tokens_total = totals.get("vllm:prompt_tokens_total")
    sample.iteration_tokens_count = totals.get("vllm:iteration_tokens_total_count")
    sample.prefix_cache_queries_total = totals.get("vllm:prefix_cache_queries_total")
    return sample


def in_flight(sample: MetricsSample) -> int:
    """Requests the engine holds (running + waiting, every client's); 0 when not reported."""
    return int((sample.num_requests_running or 0) + (sample.num_requests_waiting or 0))


def progress_signature(sample: MetricsSample) -> tuple[float | None, ...]:
    """What changes between two scrapes when the engine has taken a step (vLLM 0.32).

    The engine sends its scheduler's stats after every step, even a step that produced no token
    (a chunk of a long prefill): the running and waiting gauges and the KV cache's use (each
    prefill chunk takes blocks) move then; the token counters and iteration_tokens_total only
    once a step yields tokens; prefix-cache queries when a request is first scheduled. Not the
    process's CPU (process_cpu_seconds_total): that is the API server's process, not the engine
    core's, and each scrape of /metrics costs it CPU of its own, so it moves because we ask.
    """
    return (sample.num_requests_running, sample.num_requests_waiting, sample.kv_cache_usage_perc,
            sample.prompt_tokens_total, sample.generation_tokens_total, sample.iteration_tokens_count,
            sample.prefix_cache_queries_total)


def tpot_mean_between(before: MetricsSample, after: MetricsSample) -> tuple[float | None, int, str | None]:
    """The server's own mean time per output token over the requests that finished between two scrapes
    (vllm:request_time_per_output_token_seconds: each finished request's decode time over its tokens
    less one, as vllm bench serve computes a request's TPOT), how many finished, and why it is None."""
    if None in (before.tpot_seconds_sum, before.tpot_seconds_count, after.tpot_seconds_sum, after.tpot_seconds_count):
        return None, 0, before.error or after.error or f"the server exports no {_TPOT}"
    n = int((after.tpot_seconds_count or 0) - (before.tpot_seconds_count or 0))
    if n <= 0:
        return None, 0, "no request finished in the window"
    return ((after.tpot_seconds_sum or 0) - (before.tpot_seconds_sum or 0)) / n, n, None


def histogram_quantile(buckets: dict[float, float], q: float) -> float | None:
    """The q-quantile (0..1) of a Prometheus histogram's cumulative buckets (upper bound -> count, +Inf
    included), interpolated linearly inside its bucket as Prometheus' ``histogram_quantile`` does: an
    estimate no finer than the buckets. In the +Inf bucket: the highest finite bound. None: no observations."""
    bounds = sorted(buckets)
    if not bounds or buckets[bounds[-1]] <= 0:
        return None
    rank = q * buckets[bounds[-1]]
    lower, below = 0.0, 0.0
    for le in bounds:
        count = buckets[le]
        if count >= rank:
            if le == float("inf"):
                return lower
            inside = count - below
            return lower + (le - lower) * ((rank - below) / inside if inside > 0 else 1.0)
        lower, below = le, count
    return lower


async def scrape_metrics(http: httpx.AsyncClient, base_url: str, settings: Settings) -> MetricsSample:
    """GET /metrics; never raises: a failed scrape says why in ``error``."""
    return await scrape(http, base_url, settings.probe_timeout_s)


async def scrape(http: httpx.AsyncClient, base_url: str, timeout_s: float) -> MetricsSample:
    """GET /metrics within ``timeout_s``; never raises: a failed scrape says why in ``error``."""
    url = base_url.rstrip("/") + "/metrics"
    try:
        resp = await http.get(url, timeout=timeout_s)
    except httpx.HTTPError as e:
        return MetricsSample(ok=False, error=f"/metrics unreachable at {base_url} ({type(e).__name__})")
    if resp.status_code != 200:
        return MetricsSample(ok=False, error=f"/metrics answered HTTP {resp.status_code} at {base_url}")
    return parse_metrics(resp.text)


def spec_stats_from_delta(before: MetricsSample | None, after: MetricsSample | None) -> SpecStats | None:
    """Acceptance over the window between two scrapes; None when the server has no spec counters."""
    why = None
    if before is None or after is None or not before.ok or not after.ok:
        failed = after if after and not after.ok else before if before and not before.ok else None
        why = (failed.error if failed else None) or "no /metrics scrape"
    elif after.spec_drafts is None or before.spec_drafts is None:
        return None
    if why:
        return SpecStats(
            source="metrics_delta",
            na_reasons={f: why for f in ("acceptance_rate", "mean_acceptance_length", "accepted_tokens")},
        )
    assert before is not None and after is not None
    drafts = (after.spec_drafts or 0) - (before.spec_drafts or 0)
    draft_tokens = (after.spec_draft_tokens or 0) - (before.spec_draft_tokens or 0)
    accepted = (after.spec_accepted_tokens or 0) - (before.spec_accepted_tokens or 0)
    stats = SpecStats(
        source="metrics_delta",
        drafts=int(drafts),
        draft_tokens=int(draft_tokens),
        accepted_tokens=int(accepted),
        note="from server-wide /metrics deltas: exact only when this demo is the server's only client",
    )
    if drafts <= 0 or draft_tokens <= 0:
        reason = "no drafts were proposed in the window"
        stats.na_reasons.update(acceptance_rate=reason, mean_acceptance_length=reason, per_position_acceptance=reason)
        return stats
    positions = sorted(after.accepted_per_pos)
    per_position = [after.accepted_per_pos[p] - before.accepted_per_pos.get(p, 0.0) for p in positions]
    acc = acceptance(accepted, draft_tokens, drafts, per_position or None)
    stats.acceptance_rate, stats.mean_acceptance_length = acc.rate, acc.tokens_per_step
    if positions:
        stats.num_spec_tokens = len(positions)
        stats.per_position_acceptance = acc.per_position
    return stats


# A sample's counters as Prometheus records them (demo check --prometheus): field -> series.
PROMETHEUS_FIELDS = {
    "spec_drafts": _SPEC + "num_drafts_total",
    "spec_draft_tokens": _SPEC + "num_draft_tokens_total",
    "spec_accepted_tokens": _SPEC + "num_accepted_tokens_total",
    "tpot_seconds_sum": _TPOT + "_sum",
    "tpot_seconds_count": _TPOT + "_count",
}


async def prometheus_sample(http: httpx.AsyncClient, prometheus_url: str, selector: str, at_s: float,
                            settings: Settings) -> MetricsSample:
    """The counters of the series ``selector`` picks (e.g. ``{job="vllm", arm="ngram"}``), summed, as
    Prometheus held them at ``at_s`` (Unix time); never raises: a failure says why in ``error``."""
    sample = MetricsSample()
    for field, name in PROMETHEUS_FIELDS.items():
        try:
            value = await _prometheus_value(http, prometheus_url, f"sum({name}{selector})", at_s, settings)
        except (httpx.HTTPError, ValueError, KeyError, TypeError, IndexError) as e:
            return MetricsSample(ok=False, error=f"Prometheus at {prometheus_url} gave no answer to a query "
                                                 f"({type(e).__name__}): is it the server's Prometheus?")
        setattr(sample, field, value)
    if all(getattr(sample, field) is None for field in PROMETHEUS_FIELDS):
        return MetricsSample(ok=False, error=f"Prometheus at {prometheus_url} has no series {selector} "
                                             "(the arm's name and job as its scrape config labels them?)")
    return sample


async def _prometheus_value(http: httpx.AsyncClient, url: str, expr: str, at_s: float,
                            settings: Settings) -> float | None:
    """One instant query's single value; None when no series matches."""
    resp = await http.get(url.rstrip("/") + "/api/v1/query", timeout=settings.probe_timeout_s,
                          params={"query": expr, "time": f"{at_s:.3f}"})
    resp.raise_for_status()
    body = resp.json()
    if body["status"] != "success":
        raise ValueError("query failed")
    result = body["data"]["result"]
    return float(result[0]["value"][1]) if result else None
