"""Every vLLM command line this project generates, for every profile and role, from each path:

- ``compose``: docker-compose.yml's `command:` interpolated with each profile block of .env.example
  (GPU profiles) or as written (the `cpu` and `methods` profiles' services; a methods server's role
  is its arm's name, or baseline);
- ``launcher``: what `python -m servers up --profile NAME` runs (servers/launcher/_plan.py server_config);
- ``helm``: the `vllm serve` line the production-stack chart renders from deploy/kubernetes/NAME/values.yaml.

Each is the argv after `vllm serve` (the model positional or ``--model``). tests/test_kubernetes.py
checks the three agree; tests/vllm_args_check.py parses each with vLLM's own parser.
"""

from __future__ import annotations

import os
import re
from typing import Any

import yaml

from common.paths import ROOT
from servers import launcher
from servers.__main__ import profile_overrides
from servers.profiles import CONTAINER_HOST, PROFILES
from servers.settings import LauncherSettings
from tests.test_compose import (
    CPU_CHAT_TEMPLATE,
    CPU_MODEL_DIR,
    CPU_SERVERS,
    ENV_EXAMPLE,
    GPU_SERVERS,
    METHODS_SERVERS,
    compose,
    parse_dotenv,
)

DEPLOY = ROOT / "deploy" / "kubernetes"
Command = dict[str, Any]  # {"source", "profile", "role", "argv"}


def env_example_blocks() -> dict[str, dict[str, str]]:
    """Each profile block of .env.example (the active one and the commented alternatives) as a .env."""
    text = ENV_EXAMPLE.read_text()
    base = parse_dotenv(text)
    blocks: dict[str, dict[str, str]] = {}
    for m in re.finditer(r"^## ([\w.-]+): .*\n((?:# [A-Z_]+=.*\n)+)", text, re.M):
        lines = "\n".join(line[2:] for line in m.group(2).splitlines())
        blocks[m.group(1)] = {**base, **parse_dotenv(lines)}
    blocks[base["SPEC_PROFILE"]] = base
    return blocks


def compose_commands() -> list[Command]:
    out: list[Command] = []
    for name, env in env_example_blocks().items():
        services = compose(env)["services"]
        for role, svc in GPU_SERVERS.items():
            out.append({"source": "compose", "profile": name, "role": role, "argv": services[svc]["command"]})
    services = compose()["services"]
    for role, svc in CPU_SERVERS.items():
        out.append({"source": "compose", "profile": "cpu-smollm2", "role": role, "argv": services[svc]["command"]})
    for name, svc in METHODS_SERVERS.items():
        out.append({"source": "compose", "profile": "methods", "role": name, "argv": services[svc]["command"]})
    return out


def launcher_commands() -> list[Command]:
    saved = {k: os.environ.pop(k) for k in list(os.environ) if k.startswith("SPECDEMO_SERVERS_")}
    try:
        out: list[Command] = []
        for p in PROFILES.values():
            # A CPU server in compose reads the tool template from its mount, the launcher from the checkout.
            overrides = profile_overrides(p.name)
            if p.device == "cpu":
                overrides["chat_template"] = CPU_CHAT_TEMPLATE
            s = LauncherSettings(_env_file=None, host=CONTAINER_HOST, **overrides)
            model = p.model if p.device == "gpu" else CPU_MODEL_DIR
            for role in ("baseline", "speculative"):
                argv = launcher.server_config(s, role, model).vllm_args()
                out.append({"source": "launcher", "profile": p.name, "role": role, "argv": argv})
        return out
    finally:
        os.environ.update(saved)


def helm_commands() -> list[Command]:
    from servers.kubernetes import chart_command

    out: list[Command] = []
    for values_file in sorted(DEPLOY.glob("*/values.yaml")):
        values = yaml.safe_load(values_file.read_text())
        for spec in values["servingEngineSpec"]["modelSpec"]:
            argv = chart_command(spec)[2:]  # after `vllm serve`
            out.append({"source": "helm", "profile": values_file.parent.name, "role": spec["name"], "argv": argv})
    return out


def all_commands() -> list[Command]:
    return compose_commands() + launcher_commands() + helm_commands()
