"""Warm-up before "ready": real requests to a server that just answered /health, so the page's
first race does not pay for the first-call costs (kernel selection and compilation for new shapes,
the n-gram proposer's first drafts, the first batch of two).

The speculative server gets prompts that make the n-gram proposer draft different lengths (a
text to copy: long drafts; free text: few or none; a half-copy in between) and two requests at
once; the baseline gets the same prompts, so both sides are equally warm. Each request has a
timeout; a failed warm-up is reported and never stops the launch (the server is healthy).
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import httpx

# A table to copy (the proposer finds every n-gram in the prompt: full-length drafts), a free
# question (nothing to copy), and an edit of a copied text (drafts that break off part-way).
_TABLE = "\n".join(f"| {i} | item-{i} | {i * 7 % 13} kg | shelf {chr(65 + i % 5)} |" for i in range(24))
PROMPTS = (
    f"Copy this table exactly, line by line:\n{_TABLE}\n",
    "Write a short poem about the sea at night.",
    f"Rewrite this table with the weight in grams, keeping everything else:\n{_TABLE}\n",
)
MAX_TOKENS = 48


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


def warm_up(url: str, model: str, timeout_s: float) -> Warmup:
    """Send the warm-up requests (each prompt alone, then two at once); stop at the first failure."""
    result = Warmup()
    t0 = time.monotonic()

    def one(prompt: str) -> None:
        body = {"model": model, "prompt": prompt, "max_tokens": MAX_TOKENS, "temperature": 0.0}
        with httpx.Client(timeout=httpx.Timeout(timeout_s, connect=5.0), trust_env=False) as http:
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
        result.error = f"warm-up request failed: {type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"
    result.seconds = round(time.monotonic() - t0, 1)
    return result
