"""One source of truth for how a vLLM server of the pair is started.

The launcher (servers/launcher/) and docker-compose.yml both take their flags from
here (a test checks compose against ``vllm_args``), so the two paths cannot drift apart.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from common.sides import Side

# n-gram lookup in the prompt: no second model; wins where the answer copies the prompt.
NGRAM_CONFIG: dict[str, Any] = {
    "method": "ngram",
    "num_speculative_tokens": 4,
    "prompt_lookup_max": 4,
    "prompt_lookup_min": 2,
}

# The default model's chat template with tools (ChatML, vLLM's `hermes` tool-call form): its own
# template renders neither tool definitions nor an assistant turn whose content is null.
SMOLLM2_TOOLS_TEMPLATE = Path(__file__).resolve().parent / "templates" / "smollm2_tools.jinja"
# The tool-call parser of the default model with that template.
SMOLLM2_TOOL_PARSER = "hermes"


class ServerConfig(BaseModel):
    """One vLLM server's settings; ``args()`` turns them into its ``vllm serve`` command line."""
    role: Side
    model: str  # a local model folder or a hub id
    served_model_name: str = "smollm2"
    host: str = "127.0.0.1"
    port: int = Field(8000, ge=1, le=65535)
    # float32 keeps greedy outputs of both servers identical token for token.
    dtype: str = "float32"
    max_model_len: int = 8192
    # Sequences the server batches at once (--max-num-seqs); None: vLLM's default (128 on CPU,
    # 256-1024 on GPUs). A load sweep at the page's most users needs at least that many.
    max_num_seqs: int | None = Field(None, ge=1)
    speculative_config: dict[str, Any] | None = None
    # Per-request acceptance numbers in the response (vLLM >= 0.32); None leaves it off.
    per_request_spec_metrics: Literal["summary", "detailed"] | None = "detailed"
    gpu_memory_utilization: float | None = None
    # --chat-template: a Jinja file replacing the model's own (None: the model's own).
    chat_template: str | None = None
    # --enable-auto-tool-choice --tool-call-parser NAME: how vLLM reads tool calls out of the answer
    # (None: the server refuses requests with tools).
    tool_call_parser: str | None = None
    extra_args: list[str] = Field(default_factory=list)

    def vllm_args(self) -> list[str]:
        """Arguments after ``vllm serve`` (or the api_server module)."""
        args = [
            "--model", self.model,
            "--served-model-name", self.served_model_name,
            "--host", self.host,
            "--port", str(self.port),
            "--dtype", self.dtype,
            "--max-model-len", str(self.max_model_len),
        ]
        if self.max_num_seqs is not None:
            args += ["--max-num-seqs", str(self.max_num_seqs)]
        if self.gpu_memory_utilization is not None:
            args += ["--gpu-memory-utilization", str(self.gpu_memory_utilization)]
        if self.role == "speculative" and self.speculative_config:
            args += ["--speculative-config", json.dumps(self.speculative_config, separators=(",", ":"))]
            if self.per_request_spec_metrics:
                args += ["--per-request-spec-decode-metrics", self.per_request_spec_metrics]
        if self.chat_template:
            args += ["--chat-template", self.chat_template]
        if self.tool_call_parser:
            args += ["--enable-auto-tool-choice", "--tool-call-parser", self.tool_call_parser]
        return args + list(self.extra_args)


# Both servers must run the same model runner: recent builds default to runner V2,
# which falls back to V1 for ngram/draft_model only, so the pair would differ.
COMMON_ENV: dict[str, str] = {
    "VLLM_USE_V2_MODEL_RUNNER": "0",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
}
