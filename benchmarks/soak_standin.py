"""The stand-in vLLM server (harness/standin/) behind vLLM's command line, for the soak test.

The launcher appends vLLM's flags to SPECDEMO_SERVERS_SERVER_COMMAND
(``python -m benchmarks.soak_standin``), so the real supervisor starts, watches and restarts
stand-ins exactly as it does vLLM. This takes the flags a stand-in needs (host, port, served model
name, max model len, whether there is a --speculative-config) and ignores the others. The rates
make a booth race last a few seconds, so a kill can land mid-race: baseline 100 tokens/s,
speculative 250 tokens/s in chunks of 1/3/5/2 tokens.
"""

from __future__ import annotations

import argparse

from harness import standin

BASELINE_TOKENS_PER_S = 100.0
SPECULATIVE_TOKENS_PER_S = 250.0
SPECULATIVE_CHUNKS = "1,3,5,2"


def standin_args(argv: list[str] | None) -> list[str]:
    """vLLM's flags -> the stand-in's flags (harness/standin/_cli.py)."""
    p = argparse.ArgumentParser(prog="python -m benchmarks.soak_standin")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--served-model-name", default="smollm2")
    p.add_argument("--max-model-len", type=int, default=8192)
    p.add_argument("--speculative-config")
    a, _ = p.parse_known_args(argv)
    args = ["--host", a.host, "--port", str(a.port), "--model", a.served_model_name,
            "--max-model-len", str(a.max_model_len), "--ttft-s", "0.1"]
    if a.speculative_config:
        return [*args, "--speculative", "--tokens-per-s", str(SPECULATIVE_TOKENS_PER_S),
                "--chunk-sizes", SPECULATIVE_CHUNKS]
    return [*args, "--tokens-per-s", str(BASELINE_TOKENS_PER_S)]


def main(argv: list[str] | None = None) -> None:
    standin.main(standin_args(argv))


if __name__ == "__main__":
    main()
