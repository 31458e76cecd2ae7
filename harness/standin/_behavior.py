"""What a stand-in does (``StandinBehavior``) and what it knows of every request (``Truth``): the
behaviour a test sets, the truth its measurements are checked against, and the acceptance model
(``plan_chunks``, ``synthetic_steps``, ``spec_metrics_for``).
"""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

FIXTURES = Path(__file__).resolve().parents[2] / "tests" / "fixtures"
FINGERPRINT = "vllm-0.32.0-5a7d1e00"
# A hermes tool call streamed by vLLM 0.32 on the CPU default (get_weather {"city": "Paris"}):
# StandinBehavior(replay_fixture=TOOL_CALL_FIXTURE) answers every request with it (tests/fixtures/README.md).
TOOL_CALL_FIXTURE = FIXTURES / "stream-chat-tool-call.sse"
# "hold": after fault_after_chunks, the stream waits until Standin.release() (in-process stand-ins only).
Fault = Literal["too_long", "server_error", "refuse", "cut", "stall", "garbage", "hold"]

# A deterministic word-ish token sequence (leading spaces like a BPE vocabulary).
DEFAULT_PIECES: list[str] = [
    " The", " quick", " brown", " fox", " jumps", " over", " the", " lazy", " dog", ".",
    " Speculative", " decoding", " drafts", " several", " tokens", ",", " and", " the",
    " target", " model", " verifies", " them", " in", " one", " pass", ".", "\n",
]


class StandinBehavior(BaseModel):
    """What the server does. Mutable between requests: ``s.behavior.tokens_per_s = 500``."""

    model_config = ConfigDict(validate_assignment=True)

    model: str = "smollm2"
    max_model_len: int = 2048
    pieces: list[str] | None = None  # token texts, cycled to max_tokens; None = DEFAULT_PIECES
    stop_at_end_of_pieces: bool = False  # emit `pieces` once and finish with "stop" (EOS)
    tokens_per_s: float = Field(200.0, gt=0)  # true decode rate: token i ready at ttft_s + i/rate
    ttft_s: float = Field(0.05, ge=0)
    # Tokens per chunk after the first (prefill) token's own chunk, cycled; last one cut to max_tokens.
    chunk_sizes: list[int] = Field(default_factory=lambda: [1])
    speculative: bool = False
    per_request_metrics: bool = True  # final usage chunk carries metrics.speculative_decoding
    num_spec_tokens: int = Field(4, ge=1)  # k
    metrics_mode: Literal["ok", "missing", "malformed", "slow"] = "ok"
    metrics_slow_s: float = 10.0
    kv_cache_tokens: int = 16384  # capacity used for vllm:kv_cache_usage_perc
    health_status: int = 200
    fault: Fault | None = None
    fault_after_chunks: int = 5  # content chunks sent before cut/stall/garbage/hold
    stall_s: float = 30.0
    reject_prompt_over_context: bool = True  # 400 when prompt words > max_model_len
    api_key: str | None = None  # require "Authorization: Bearer <api_key>" on /v1/*
    tokenize: bool = True  # serve /tokenize (vLLM does); False answers 404 like older servers
    replay_fixture: Path | None = None  # a captured .sse file, sent byte-exactly with its .times timing
    replay_speed: float = Field(1.0, gt=0)  # 2.0 = replay twice as fast
    # Per-request variety (workload tests): a prompt containing a marker gets that marker's behaviour
    # fields, e.g. {"COPY": {"chunk_sizes": [5], "tokens_per_s": 400}}; the first marker found wins.
    by_marker: dict[str, dict[str, Any]] = Field(default_factory=dict)
    # False: a server started without --enable-auto-tool-choice --tool-call-parser; a request offering
    # tools with tool_choice "auto" (the default with tools) gets vLLM 0.32's 400.
    tool_parser: bool = True
    # Load (capacity tests): with r requests already running, a new one gets ttft_s * (1 + x*r)
    # and tokens_per_s / (1 + x*r): latency grows and per-request speed falls with concurrency.
    slowdown_per_running: float = Field(0.0, ge=0)
    # Load (load sweep tests): every stream's decode rate follows the streams in flight *now*:
    # tokens_per_s / (1 + x*(n_in_flight - 1)), re-read before each chunk (n counts this one).
    # A batch of n identical streams then decodes at exactly that rate each: the truth to check.
    slowdown_in_flight: float = Field(0.0, ge=0)
    preemptions_total: int = Field(0, ge=0)  # vllm:num_preemptions_total as /metrics reports it
    # At most this many streams decode at once (vLLM's --max-num-seqs); later ones wait, counted in
    # vllm:num_requests_waiting, and their prefill (ttft_s) starts when a slot frees. None: no cap.
    max_num_seqs: int | None = Field(None, ge=1)
    # What-if (speculative only): every step delivers this many tokens on average (1 to k+1), in
    # place of chunk_sizes, and tokens_per_s counts verification steps (decode rate = it * L).
    synthetic_acceptance_length: float | None = None

    @model_validator(mode="after")
    def _check_chunks(self) -> StandinBehavior:
        if not self.chunk_sizes or min(self.chunk_sizes) < 1:
            raise ValueError("chunk_sizes must be a non-empty list of positive ints")
        L = self.synthetic_acceptance_length
        if L is not None and (not self.speculative or not 1 <= L <= self.num_spec_tokens + 1):
            raise ValueError(f"synthetic_acceptance_length {L}: needs speculative=True and a length in "
                             f"[1, num_spec_tokens+1 = {self.num_spec_tokens + 1}] (as vLLM checks it)")
        if self.speculative and max(self.chunk_sizes) > self.num_spec_tokens + 1:
            raise ValueError(
                f"chunk_sizes {self.chunk_sizes}: a verification step emits at most "
                f"num_spec_tokens+1 = {self.num_spec_tokens + 1} tokens"
            )
        return self


Outcome = Literal["running", "completed", "aborted", "faulted"]


class Truth(BaseModel):
    """What the stand-in really did for one generation request."""

    path: str
    stream: bool
    prompt_tokens: int
    prompt: str = ""  # the request's messages or prompt, as JSON text (to match a request to its truth)
    completion_tokens: int = 0  # tokens actually sent
    t_request: float  # time.perf_counter() when the request was accepted
    # Waiting for a slot (max_num_seqs) before its prefill started: admitted - t_request; 0 without
    # a cap. vllm:request_queue_time_seconds observes it when the request completes (as vLLM does).
    queue_time_s: float = 0.0
    t_first_token_sent: float | None = None
    t_last_token_sent: float | None = None
    t_end: float | None = None  # when the stand-in saw it end: completed, or aborted (the client cut it)
    decode_tokens_per_s: float | None = None  # (N - first chunk's)/(t_last - t_first), from real send times
    accepted: int = 0
    drafts: int = 0
    draft_tokens: int = 0
    per_position_accepted: list[int] = Field(default_factory=list)
    chunk_sizes_sent: list[int] = Field(default_factory=list)
    chunk_send_times: list[float] = Field(default_factory=list)
    text: str = ""
    finish_reason: str | None = None
    outcome: Outcome = "running"

    @property
    def acceptance_rate(self) -> float | None:
        return self.accepted / self.draft_tokens if self.draft_tokens else None

    @property
    def mean_acceptance_length(self) -> float | None:
        return 1 + self.accepted / self.drafts if self.drafts else None


class RecordedRequest(BaseModel):
    method: str
    path: str
    headers: dict[str, str]
    body: Any = None  # parsed JSON, or None



def plan_chunks(n_tokens: int, chunk_sizes: list[int]) -> list[int]:
    """Chunk sizes for n tokens: the prefill token alone, then chunk_sizes cycled, last one cut."""
    if n_tokens <= 0:
        return []
    sizes, left, i = [1], n_tokens - 1, 0
    while left > 0:
        s = min(chunk_sizes[i % len(chunk_sizes)], left)
        sizes.append(s)
        left -= s
        i += 1
    return sizes


def synthetic_steps(length: float) -> list[int]:
    """Tokens per step for a forced mean acceptance length: the shortest cycle of whole steps whose
    mean is ``length`` (as a fraction of denominator at most 100), spread evenly: 1.5 -> [1, 2],
    3 -> [3], 2.25 -> [2, 2, 2, 3]."""
    f = Fraction(length).limit_denominator(100)
    return [int((i + 1) * f) - int(i * f) for i in range(f.denominator)]


def synthetic_behavior(b: StandinBehavior) -> StandinBehavior:
    """``b`` as it serves one request: with a synthetic acceptance length, its steps in chunk_sizes
    and its decode rate (steps per second times tokens per step) in tokens_per_s."""
    L = b.synthetic_acceptance_length
    if L is None:
        return b
    return b.model_copy(update={"chunk_sizes": synthetic_steps(L), "tokens_per_s": b.tokens_per_s * L})


def spec_metrics_for(chunk_sizes: list[int], k: int) -> dict[str, Any]:
    """metrics.speculative_decoding (``detailed``) for the chunks of one request."""
    steps = [n - 1 for n in chunk_sizes[1:]]
    drafts, accepted = len(steps), sum(steps)
    hist = [0] * (k + 1)
    for a in steps:
        hist[a] += 1
    return {
        "mean_acceptance_length": 1 + accepted / drafts if drafts else 1.0,
        "draft_acceptance_rate": accepted / (drafts * k) if drafts else 0.0,
        "acceptance_histogram": hist,
        "num_spec_steps": drafts,
        "num_accepted_draft_tokens": accepted,
        "num_draft_tokens": drafts * k,
        "num_spec_tokens": k,
        "per_step_accepted": steps,
        "per_step_drafted": [k] * drafts,
    }


