"""Where a decode step's time goes on the running pair: py-spy on each server's processes.

    python -m benchmarks.profile_step                          # json_reformat, both servers
    python -m benchmarks.profile_step --preset code_edit --roles speculative --rate 200

Needs the launcher's pair (`python -m servers up`) and py-spy (requirements-dev.txt). For each
server in turn, one request of the preset is streamed to it alone while py-spy samples its three
processes (API server, engine core, worker; non-blocking, idle samples included). Each main
thread's samples are sorted into the parts of a step: the model forward (k+1 positions on the
speculative server), the logits, sampling and rejection sampling, the n-gram proposer, input
preparation, the engine core's scheduling and output handling, the hop between the engine core
and the worker, and waiting. Printed per server: decode steps (tokens, or verification steps from
vLLM's per-request metrics), milliseconds per step, and each part's share in ms per step; the
speculative server's step divided by the baseline's is the cost a step of speculation adds.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from benchmarks.bench_presets import preset_request
from common.sides import Side
from demo.client import make_http_client, stream_completion
from demo.measure import SideMeter
from demo.settings import Settings
from servers import procs
from servers.settings import LauncherSettings
from servers.state import read_state

# (part, substrings of a sampled stack); the first rule any frame matches wins, so specific
# parts come before the loops that contain them.
WORKER_PARTS = [
    ("n-gram proposer", ("ngram_proposer", "propose_draft_token_ids")),
    ("rejection sampling", ("rejection_sampler",)),
    ("logits (lm_head)", ("compute_logits",)),
    ("sampling", ("sample_tokens", "/sampler.py")),
    ("model forward", ("_model_forward",)),
    ("input preparation", ("_prepare_inputs", "_update_states", "_bookkeeping_sync", "_preprocess")),
    ("hop: send output", ("handle_output", "enqueue_output")),
    ("waiting for the engine core", ("MessageQueue.dequeue", "acquire_read")),
]
# The worker's compute parts, without its hops to a separate engine core process.
IN_ENGINE_WORKER_PARTS = WORKER_PARTS[:-2]
ENGINE_PARTS = [
    ("waiting for the worker (spins)", ("MessageQueue.dequeue", "acquire_read")),
    ("scheduling", ("Scheduler.schedule (",)),
    ("output handling", ("update_from_output",)),
    ("waiting for requests", ("_process_input_queue", "process_input_sockets")),
]
API_PARTS = [
    ("streaming the response", ("serving_chat", "serving_completion", "chat_completion_stream_generator",
                                "completion_stream_generator", "RequestResponseCycle")),
    ("output processing", ("output_processor", "process_outputs", "detokeniz")),
    ("event loop (mostly idle)", ("Runner.run",)),
]


def parts_by_kind(kinds: set[str]) -> dict[str, list[tuple[str, tuple[str, ...]]]]:
    """The parts each process kind's stacks are read with, for a server made of ``kinds``.

    With the worker inside the engine core (no "worker" process: the launcher's default layout)
    the engine core's main thread runs the model too, so its stacks are read with the worker's
    compute parts first.
    """
    engine = ENGINE_PARTS if "worker" in kinds else IN_ENGINE_WORKER_PARTS + ENGINE_PARTS
    return {"worker": WORKER_PARTS, "engine core": engine, "API server": API_PARTS}


def process_kind(pid: int) -> str | None:
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return None
    if "VLLM::Worker" in cmd:
        return "worker"
    if "VLLM::EngineCore" in cmd:
        return "engine core"
    if "vllm.entrypoints" in cmd or "vllm serve" in cmd:
        return "API server"
    return None


def classify(stack: str, parts: list[tuple[str, tuple[str, ...]]]) -> str:
    for name, keys in parts:
        if any(k in stack for k in keys):
            return name
    return "other"


def read_samples(path: Path, parts: list[tuple[str, tuple[str, ...]]]) -> Counter[str]:
    """py-spy's raw output (``thread (tid): Name;frame;frame count``), main thread only."""
    out: Counter[str] = Counter()
    for line in path.read_text(errors="replace").splitlines():
        stack, _, n = line.rpartition(" ")
        if not stack or ": MainThread;" not in stack or not n.isdigit():
            continue
        out[classify(stack, parts)] += int(n)
    return out


async def one_request(role: Side, url: str, model: str, preset: str, settings: Settings) -> tuple[int, int, float]:
    """(completion tokens, decode steps, decode seconds) of one streamed request, as the race
    measures them (demo.measure.SideMeter: tokens from usage, decode from first to last token)."""
    req = preset_request(settings, preset, None, warmup=False)
    meter = SideMeter(role, url)
    # A profiled server is slow (py-spy samples it): 300 s between chunks before it counts as silent.
    slow = settings.model_copy(update={"read_timeout_s": 300.0})
    async with make_http_client(slow, role) as http:
        async for ev in stream_completion(http, url, model, req, t0=meter.t0):
            meter.feed(ev)
    tokens = meter.final_tokens if meter.final_tokens is not None else meter.tokens
    if meter.t_first is None or meter.t_last is None or tokens < 2:
        raise RuntimeError(f"{url}: too few tokens to profile")
    spec = meter.spec_request
    steps = spec.num_spec_steps if spec is not None and spec.num_spec_steps else tokens - 1
    return tokens, steps, meter.t_last - meter.t_first


def profile(role: Side, url: str, pgid: int, model: str, preset: str, rate: int, settings: Settings,
            spy: str, out_dir: Path) -> None:
    kinds = {pid: k for pid in procs.group_pids(pgid) if (k := process_kind(pid))}
    spies = {}
    for pid, kind in kinds.items():
        path = out_dir / f"{role}-{kind.replace(' ', '_')}-{pid}.txt"
        spies[kind] = (path, subprocess.Popen(
            [spy, "record", "--pid", str(pid), "--rate", str(rate), "--format", "raw", "--idle", "--threads",
             "--nonblocking", "--output", str(path)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    time.sleep(1.0)  # py-spy attached
    try:
        tokens, steps, decode_s = asyncio.run(one_request(role, url, model, preset, settings))
    finally:
        for _, p in spies.values():
            p.send_signal(signal.SIGINT)
        for _, p in spies.values():
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
    ms_step = decode_s / steps * 1000
    print(f"\n{role}: {tokens} tokens in {steps} decode steps, {decode_s:.2f} s of decode: "
          f"{ms_step:.1f} ms per step, {tokens / steps:.2f} tokens per step")
    table = parts_by_kind(set(kinds.values()))
    for kind, (path, _) in spies.items():
        if not path.exists():
            print(f"  {kind}: py-spy wrote nothing (permissions? see `py-spy record --help`)")
            continue
        counts = read_samples(path, table[kind])
        total = sum(counts.values())
        if not total:
            continue
        print(f"  {kind} (main thread, {total} samples over the request):")
        for name, n in counts.most_common():
            print(f"    {name:<30} {100 * n / total:5.1f}%  {ms_step * n / total:6.1f} ms per step")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.profile_step", description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="json_reformat")
    ap.add_argument("--roles", nargs="+", default=["baseline", "speculative"], choices=["baseline", "speculative"])
    ap.add_argument("--rate", type=int, default=100, help="py-spy samples per second")
    ap.add_argument("--keep", type=Path, help="keep py-spy's raw stacks in this folder")
    a = ap.parse_args(argv)
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not os.access(spy, os.X_OK):
        print("error: py-spy not found: pip install -r requirements-dev.txt", file=sys.stderr)
        return 2
    ls = LauncherSettings()
    state = read_state(ls.state_file)
    records = {r.role: r for r in state.servers} if state else {}
    settings = Settings(save_runs=False)
    out_dir = a.keep or Path(tempfile.mkdtemp(prefix="profile-step-"))
    out_dir.mkdir(parents=True, exist_ok=True)
    print(f"preset {a.preset}; py-spy at {a.rate} Hz; raw stacks in {out_dir}")
    for role in a.roles:
        rec = records.get(role)
        if rec is None:
            print(f"error: no {role} server started by `python -m servers up`", file=sys.stderr)
            return 2
        profile(role, rec.url, rec.pgid, rec.served_model_name, a.preset, a.rate, settings, spy, out_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
