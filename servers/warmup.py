"""Warm-up before "ready": real requests to a server that just answered /health, so the page's
first race does not pay for the first-call costs (kernel selection and compilation for new shapes,
the n-gram proposer's first drafts, the first batch of two).

The speculative server gets prompts that make the n-gram proposer draft different lengths (a
text to copy: long drafts; free text: few or none; a half-copy in between) and two requests at
once; the baseline gets the same prompts, so both sides are equally warm. Each request has a
timeout; a failed warm-up is reported and never stops the launch (the server is healthy).
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import httpx

from common.decode_step import median_step_s, step_gaps_s

# A table to copy (the proposer finds every n-gram in the prompt: full-length drafts), a free
# question (nothing to copy), and an edit of a copied text (drafts that break off part-way).
_TABLE = "\n".join(f"| {i} | item-{i} | {i * 7 % 13} kg | shelf {chr(65 + i % 5)} |" for i in range(24))
PROMPTS = (
    f"Copy this table exactly, line by line:\n{_TABLE}\n",
    "Write a short poem about the sea at night.",
    f"Rewrite this table with the weight in grams, keeping everything else:\n{_TABLE}\n",
)
MAX_TOKENS = 48
# The timed requests: a short table to copy (a short context, where a verification step costs least
# against a plain one), 32 tokens, STEP_ROUNDS times a server in turn: about 30 plain steps a round on
# a baseline, about 7 verification steps at k = 4, in about 7 s for the pair on a CPU.
STEP_PROMPT = "Copy this table exactly, line by line:\n" + "\n".join(_TABLE.splitlines()[:8]) + "\n"
STEP_TOKENS = 32
STEP_ROUNDS = 3


@dataclass
class Warmup:
    """What one server's warm-up did: requests answered, its wall time in seconds, the first failure."""
    requests: int = 0
    seconds: float = 0.0
    error: str | None = None  # the first failure, one line

    def line(self, role: str) -> str:
        """One line for the launcher's output: ``role``'s warm-up, and its failure if it had one."""
        text = f"{role}: warmed up with {self.requests} requests in {self.seconds:.1f} s"
        return text + (f" ({self.error}; the first race may be slower)" if self.error else "")


def _client(timeout_s: float) -> httpx.Client:
    """The launcher's client for a server on this machine: each request bounded, no proxy from the environment."""
    return httpx.Client(timeout=httpx.Timeout(timeout_s, connect=5.0), trust_env=False)


def warm_up(url: str, model: str, timeout_s: float) -> Warmup:
    """Send the warm-up requests (each prompt alone, then two at once); stop at the first failure."""
    result = Warmup()
    t0 = time.monotonic()

    def one(prompt: str) -> None:
        body = {"model": model, "prompt": prompt, "max_tokens": MAX_TOKENS, "temperature": 0.0}
        with _client(timeout_s) as http:
            resp = http.post(url.rstrip("/") + "/v1/completions", json=body)
            resp.raise_for_status()

    try:
        for prompt in PROMPTS:
            one(prompt)
            result.requests += 1
        with ThreadPoolExecutor(max_workers=2) as pool:  # a batch of two
            list(pool.map(one, PROMPTS[:2]))
        result.requests += 2
    except httpx.HTTPError as e:
        result.error = f"warm-up request failed: {_one_line(e)}"
    result.seconds = round(time.monotonic() - t0, 1)
    return result


def _one_line(e: BaseException) -> str:
    """An error as one short line: its type and the first line of its message."""
    return f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"


@dataclass
class StepTime:
    """One server's decode step as timed at warm-up: the median in ms, or why there is none."""
    ms: float | None = None
    na_reason: str | None = None


def _stream_chunks(http: httpx.Client, url: str, model: str) -> list[tuple[float, int | None]]:
    """The short table copied, streamed with usage on every chunk: (arrival s, completion tokens so far)."""
    body = {"model": model, "prompt": STEP_PROMPT, "max_tokens": STEP_TOKENS, "temperature": 0.0,
            "ignore_eos": True, "stream": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True}}
    t0 = time.monotonic()
    chunks: list[tuple[float, int | None]] = []
    with http.stream("POST", url.rstrip("/") + "/v1/completions", json=body) as resp:
        resp.raise_for_status()
        for line in resp.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                usage = json.loads(line[6:]).get("usage") or {}
                n = usage.get("completion_tokens")  # a count, or nothing this chunk (never trusted further)
                chunks.append((time.monotonic() - t0, n if isinstance(n, int) and not isinstance(n, bool) else None))
    return chunks


def time_steps(servers: Sequence[tuple[str, str, bool]], timeout_s: float) -> list[StepTime]:
    """Each server's decode step: (URL, served model, speculative) in order, each streamed alone,
    STEP_ROUNDS times in turn; a round's step is the median of its gaps (common.decode_step: every
    step on a baseline, the steps that accepted a draft on a speculative server), and a server's step
    its quickest round's: a neighbour or a drift of the machine only ever adds time, and each server
    gets the same treatment."""
    rounds: list[list[float]] = [[] for _ in servers]
    failed: list[str | None] = [None for _ in servers]
    with _client(timeout_s) as http:  # one client (and a kept-alive connection a server) for every round
        for _ in range(STEP_ROUNDS):
            for i, (url, model, speculative) in enumerate(servers):
                if failed[i] is not None:
                    continue
                try:
                    chunks = _stream_chunks(http, url, model)
                except (httpx.HTTPError, ValueError, AttributeError) as e:
                    failed[i] = f"the timed request failed: {_one_line(e)}"
                    continue
                step_s = median_step_s(step_gaps_s(chunks, min_tokens=2 if speculative else 1))
                if step_s is not None:
                    rounds[i].append(step_s)
    out = []
    for (_url, _model, speculative), steps, why in zip(servers, rounds, failed, strict=True):
        if why is None and not steps:
            what = "a draft accepted" if speculative else "a token each"
            why = f"too few steps with {what} in each timed request (the server sent no usage per chunk?)"
        out.append(StepTime(ms=round(min(steps) * 1000, 1) if steps and why is None else None, na_reason=why))
    return out
