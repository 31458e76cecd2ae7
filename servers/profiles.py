"""Named model pairs (baseline + speculative) for a GPU box or a CPU, as data.

One profile yields the two ``ServerConfig`` of the pair; ``ServerConfig.vllm_args()`` stays
the only flag builder. docker-compose.yml reads the same values through environment
variables (``compose_env``), and tests/test_compose.py checks that compose's interpolated
``command`` equals ``vllm_args()`` for every profile, so compose and the launcher cannot drift.

CLI (no vLLM needed)::

    python -m servers.profiles list
    python -m servers.profiles env llama-draft > .env       # what docker compose reads
    python -m servers.profiles compose-args llama-draft     # the two `command:` lists, as JSON
    python -m servers.profiles serve-cmd llama-draft --role speculative   # without Docker
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from typing import Any, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, model_validator

from common.sides import Side
from servers.config import COMMON_ENV, NGRAM_CONFIG, SMOLLM2_TOOL_PARSER, SMOLLM2_TOOLS_TEMPLATE, ServerConfig

Device = Literal["gpu", "cpu"]

# Above this the two instances plus CUDA context and activations no longer fit one GPU.
MAX_GPU_MEMORY_SUM = 0.9
GPU_DTYPES = frozenset({"auto", "bfloat16", "float16"})
DEFAULT_PROFILE = "llama-eagle3"
DEFAULT_CPU_PROFILE = "cpu-smollm2"
# Inside a container both servers listen on all interfaces; compose publishes them on 127.0.0.1.
CONTAINER_HOST = "0.0.0.0"
# --max-num-seqs of every GPU server: a load sweep at the page's most users (SPECDEMO_MAX_USERS,
# 32) runs that many streams per server, with room for a second viewer. CPU servers keep vLLM's
# CPU default (128), under which the CPU figures were measured.
GPU_MAX_NUM_SEQS = 64
BASELINE_PORT = 8000
SPECULATIVE_PORT = 8001


class ServerPair(NamedTuple):
    """A profile's two servers' configs: the baseline and the speculative server."""
    baseline: ServerConfig
    speculative: ServerConfig


class Profile(BaseModel):
    """A target model and how its speculative twin proposes tokens."""

    model_config = ConfigDict(frozen=True)

    name: str
    device: Device
    summary: str  # one line: what it shows and when to pick it
    model: str  # target: a hub id, or a local folder for the CPU default
    served_model_name: str
    speculative_config: dict[str, Any]
    dtype: str
    max_model_len: int = Field(8192, gt=0)
    max_num_seqs: int | None = Field(None, ge=1)  # None: GPU_MAX_NUM_SEQS on a GPU, vLLM's default on CPU
    # Each instance's share of the GPU; the speculative side also holds the proposer.
    baseline_gpu_memory: float | None = None
    speculative_gpu_memory: float | None = None
    # Smallest GPU this split fits on (two bf16 targets + proposer + KV cache).
    min_gpu_memory_gib: int | None = None
    # vLLM's tool-call parser for the target's family (docs.vllm.ai, "Tool Calling"): how each server
    # reads tool calls out of an answer, with --enable-auto-tool-choice.
    tool_call_parser: str
    # A chat template replacing the model's own (None: the model's own renders tools already).
    chat_template: str | None = None

    @model_validator(mode="after")
    def _fits_device(self) -> Profile:
        shares = (self.baseline_gpu_memory, self.speculative_gpu_memory)
        if self.device == "gpu":
            base, spec = shares
            if base is None or spec is None:
                raise ValueError(f"profile {self.name}: a GPU profile needs both memory shares")
            if base + spec > MAX_GPU_MEMORY_SUM + 1e-9:
                raise ValueError(
                    f"profile {self.name}: memory shares {shares} sum above {MAX_GPU_MEMORY_SUM}; "
                    "lower them so both servers fit one GPU"
                )
            if self.dtype not in GPU_DTYPES:
                raise ValueError(f"profile {self.name}: dtype {self.dtype!r} is not one of {sorted(GPU_DTYPES)}")
        else:
            if shares != (None, None):
                raise ValueError(f"profile {self.name}: a CPU profile takes no GPU memory shares")
            if self.dtype != "float32":
                # bf16 on CPU drifts between the two servers; float32 keeps greedy text identical.
                raise ValueError(f"profile {self.name}: CPU profiles serve float32, not {self.dtype!r}")
        if "method" not in self.speculative_config:
            raise ValueError(f"profile {self.name}: speculative_config needs a 'method'")
        return self

    @property
    def num_seqs(self) -> int | None:
        """--max-num-seqs of this profile's servers (None: vLLM's default)."""
        if self.max_num_seqs is not None:
            return self.max_num_seqs
        return GPU_MAX_NUM_SEQS if self.device == "gpu" else None

    @property
    def method(self) -> str:
        """The speculative server's method, its config's "method" (ngram, eagle3, draft_model)."""
        return str(self.speculative_config["method"])

    @property
    def num_speculative_tokens(self) -> int:
        """k: the tokens the speculative server drafts per step (its config's num_speculative_tokens)."""
        return int(self.speculative_config["num_speculative_tokens"])

    @property
    def proposer(self) -> str | None:
        """The second model the speculative server loads, if any."""
        return self.speculative_config.get("model")

    def server_configs(
        self,
        *,
        host: str = "127.0.0.1",
        baseline_port: int = BASELINE_PORT,
        speculative_port: int = SPECULATIVE_PORT,
        model: str | None = None,
        chat_template: str | None = None,
    ) -> ServerPair:
        """The pair of servers; ``model`` replaces the target (e.g. a prepared local folder),
        ``chat_template`` the profile's template file (e.g. its path inside a container)."""
        common: dict[str, Any] = {
            "chat_template": chat_template or self.chat_template,
            "tool_call_parser": self.tool_call_parser,
            "model": model or self.model,
            "served_model_name": self.served_model_name,
            "host": host,
            "dtype": self.dtype,
            "max_model_len": self.max_model_len,
            "max_num_seqs": self.num_seqs,
        }
        return ServerPair(
            baseline=ServerConfig(
                role="baseline", port=baseline_port,
                gpu_memory_utilization=self.baseline_gpu_memory, **common,
            ),
            speculative=ServerConfig(
                role="speculative", port=speculative_port,
                speculative_config=dict(self.speculative_config),
                gpu_memory_utilization=self.speculative_gpu_memory, **common,
            ),
        )

    def compose_env(self) -> dict[str, str]:
        """The variables docker-compose.yml interpolates into both `command:` lists."""
        if self.device != "gpu":
            raise ValueError(f"profile {self.name} is a CPU profile: its compose services are fixed (profile 'cpu')")
        return {
            "SPEC_PROFILE": self.name,
            "SPEC_MODEL": self.model,
            "SPEC_SERVED_NAME": self.served_model_name,
            "SPEC_CONFIG": json.dumps(self.speculative_config, separators=(",", ":")),
            "SPEC_DTYPE": self.dtype,
            "SPEC_MAX_MODEL_LEN": str(self.max_model_len),
            "SPEC_MAX_NUM_SEQS": str(self.num_seqs),
            "SPEC_BASELINE_GPU_MEM": str(self.baseline_gpu_memory),
            "SPEC_SPECULATIVE_GPU_MEM": str(self.speculative_gpu_memory),
            # Labels for the page ("Speculative (eagle3, k=3)"): compose cannot read them from JSON.
            "SPEC_METHOD": self.method,
            "SPEC_NUM_TOKENS": str(self.num_speculative_tokens),
            "SPEC_TOOL_PARSER": self.tool_call_parser,
        }


# The four GPU profiles on Llama-3.1-8B-Instruct share the target, its served name and what it needs.
LLAMA_8B: dict[str, Any] = {"model": "meta-llama/Llama-3.1-8B-Instruct", "served_model_name": "llama-3.1-8b-instruct",
                            "dtype": "auto", "min_gpu_memory_gib": 48, "tool_call_parser": "llama3_json"}

PROFILES: dict[str, Profile] = {
    p.name: p
    for p in [
        Profile(
            name="llama-eagle3",
            device="gpu",
            summary="Llama-3.1-8B-Instruct + EAGLE-3 head: the strongest speedup; the head is tiny (~1 GB).",
            speculative_config={
                "method": "eagle3",
                "model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
                "num_speculative_tokens": 3,
            },
            baseline_gpu_memory=0.44,
            speculative_gpu_memory=0.46,
            **LLAMA_8B,
        ),
        Profile(
            name="llama-draft",
            device="gpu",
            summary="Llama-3.1-8B-Instruct + Llama-3.2-1B-Instruct draft: the classic pair (same 128k vocabulary).",
            speculative_config={
                "method": "draft_model",
                "model": "meta-llama/Llama-3.2-1B-Instruct",
                "num_speculative_tokens": 5,
            },
            baseline_gpu_memory=0.42,
            speculative_gpu_memory=0.48,
            **LLAMA_8B,
        ),
        Profile(
            name="llama-ngram",
            device="gpu",
            summary="Llama-3.1-8B-Instruct + n-gram prompt lookup: no second model; "
                    "wins only where the answer copies the prompt.",
            speculative_config=dict(NGRAM_CONFIG),
            baseline_gpu_memory=0.45,
            speculative_gpu_memory=0.45,
            **LLAMA_8B,
        ),
        Profile(
            name="llama-whatif",
            device="gpu",
            summary="what-if: the llama-eagle3 pair, k=4, with acceptance forced to a mean length of 3.0 "
                    "(synthetic rejection sampling, vLLM >= 0.32, GPU only): its text is not the target's.",
            speculative_config={
                "method": "eagle3",
                "model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
                "num_speculative_tokens": 4,
                # Accepts each draft position at rates that give this mean acceptance length (in
                # [1, k+1]): the speedup a better drafter would buy, measured on the verifier's side.
                "rejection_sample_method": "synthetic",
                "synthetic_acceptance_length": 3.0,
            },
            baseline_gpu_memory=0.44,
            speculative_gpu_memory=0.46,
            **LLAMA_8B,
        ),
        Profile(
            name="qwen3-draft",
            device="gpu",
            summary="Qwen3-8B + Qwen3-0.6B draft: ungated (no HF token), same 151,936-token vocabulary.",
            model="Qwen/Qwen3-8B",
            served_model_name="qwen3-8b",
            speculative_config={
                "method": "draft_model",
                "model": "Qwen/Qwen3-0.6B",
                "num_speculative_tokens": 5,
            },
            dtype="auto",
            baseline_gpu_memory=0.43,
            speculative_gpu_memory=0.47,
            min_gpu_memory_gib=48,
            tool_call_parser="hermes",
        ),
        Profile(
            name="cpu-smollm2",
            device="cpu",
            summary="SmolLM2-135M-Instruct + n-gram on the CPU: the embedded default (float32, identical greedy text).",
            # A hub id for reference; the launcher and the compose `cpu` profile serve a prepared local folder.
            model="HuggingFaceTB/SmolLM2-135M-Instruct",
            served_model_name="smollm2",
            speculative_config=dict(NGRAM_CONFIG),
            dtype="float32",
            tool_call_parser=SMOLLM2_TOOL_PARSER,
            chat_template=str(SMOLLM2_TOOLS_TEMPLATE),
        ),
    ]
}


def get_profile(name: str) -> Profile:
    """The profile named ``name``; KeyError (one line, listing the known profiles) otherwise."""
    try:
        return PROFILES[name]
    except KeyError:
        raise KeyError(f"unknown profile {name!r}; choose one of: {', '.join(PROFILES)}") from None


# The compose profile of the GPU pair (its two servers and the page); a .env selects it with
# COMPOSE_PROFILES so that a plain `docker compose up` starts it, and a --profile flag replaces it.
PAIR_COMPOSE_PROFILE = "pair"


def env_file_text(profile: Profile) -> str:
    """Lines for a .env file that select this profile in docker compose."""
    lines = [f"# {profile.name}: {profile.summary}"]
    for key, value in profile.compose_env().items():
        # Single quotes: compose's .env parser takes the JSON literally, no interpolation.
        lines.append(f"{key}='{value}'" if "{" in value else f"{key}={value}")
    return "\n".join(lines) + "\n"


def serve_command(profile: Profile, role: Side, host: str = "127.0.0.1") -> str:
    """A shell line that starts one server of the pair without Docker (same flags as compose)."""
    pair = profile.server_configs(host=host)
    config = pair.baseline if role == "baseline" else pair.speculative
    env = " ".join(f"{k}={v}" for k, v in COMMON_ENV.items())
    return f"{env} vllm serve {shlex.join(config.vllm_args())}"


def _main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m servers.profiles", description="Named model pairs.")
    sub = parser.add_subparsers(dest="cmd", required=True)
    sub.add_parser("list", help="the profiles, one a line")
    for cmd, text in [
        ("env", "print .env lines selecting a GPU profile for docker compose"),
        ("compose-args", "print the two servers' vLLM arguments as JSON (container host 0.0.0.0)"),
        ("serve-cmd", "print a shell line starting one server without Docker"),
    ]:
        p = sub.add_parser(cmd, help=text)
        p.add_argument("profile", choices=list(PROFILES))
        if cmd == "serve-cmd":
            p.add_argument("--role", choices=["baseline", "speculative"], required=True)
            p.add_argument("--host", default="127.0.0.1")
    args = parser.parse_args(argv)

    if args.cmd == "list":
        for prof in PROFILES.values():
            mark = " (default)" if prof.name in (DEFAULT_PROFILE, DEFAULT_CPU_PROFILE) else ""
            print(f"{prof.name:<13} {prof.device}  {prof.summary}{mark}")
        return 0
    profile = PROFILES[args.profile]
    if args.cmd == "env":
        if profile.device != "gpu":
            print(f"error: {profile.name} is the CPU default; run `docker compose --profile cpu up app-cpu` instead",
                  file=sys.stderr)
            return 2
        sys.stdout.write(f"COMPOSE_PROFILES={PAIR_COMPOSE_PROFILE}\n" + env_file_text(profile))
    elif args.cmd == "compose-args":
        pair = profile.server_configs(host=CONTAINER_HOST)
        print(json.dumps({"baseline": pair.baseline.vllm_args(), "speculative": pair.speculative.vllm_args()},
                         indent=2))
    else:
        print(serve_command(profile, args.role, args.host))
    return 0


if __name__ == "__main__":
    raise SystemExit(_main())
