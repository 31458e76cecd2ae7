"""Does the client keep up with many fast streams? Ours and `vllm bench serve` against the truth.

A fast stand-in (harness/standin/, in its own process so that it shares neither the GIL nor
the CPU count of the clients) serves ``--streams`` concurrent streams (default 256 x 100
tokens/s: 25,600 tokens/s in all). First our batch engine (demo/sweep/runner.py ``run_batch``,
the engine of the page's users, the load sweep and the evaluator) sends them; then
`vllm bench serve` (through scripts/vllm_bench.sh: custom dataset with --skip-chat-template, the
same prompts, max tokens and concurrency, --ignore-eos) sends the same to the same stand-in. One
table: output tokens/s, TPOT mean and median, ITL p50 and p95, TTFT p50 as each client measured
them, next to the stand-in's own record of the same run (its truth: real send times), with the
differences in %; then each client's headroom (our event-loop lag and CPU, as every batch
reports it; vllm bench serve's CPU) and the stand-in's own CPU and rate, so that a figure limited
by a client, or by the stand-in, says so.

    python -m benchmarks.bench_client_streams [--streams 256] [--tokens-per-s 100] [--max-tokens 1000]
        [--chunk-tokens 1] [--standin-processes 1] [--ray ADDRESS|auto|local [--ray-workers 2]]
        [--no-vllm] [--tokenizer DIR] [--json]

Definitions, the same for the three columns (vLLM's own, benchmarks/serve.py):
- output tokens/s: all completion tokens / the run's wall time (truth: first request accepted to
  last token sent);
- TPOT: per request, (last token - first token) / (tokens - 1); mean and median over requests;
- ITL: every gap between two token-bearing chunks, pooled over the run (ours and the truth spread
  a chunk's gap over its tokens; vLLM counts one gap per chunk: the same with 1-token chunks);
- TTFT: request sent (truth: accepted) to the first token.

Without vLLM's venv (scripts/setup_cpu_servers.sh) its column is n/a with the reason.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from benchmarks.vllm_bench import bench_command
from common.procstat import cpu_seconds
from demo.client import make_http_client, run_streams
from demo.load.fleet import RayFleet, fleet_at
from demo.measure import percentile, spread_gaps_s
from demo.results import Message, RaceRequest, SideResult
from demo.settings import Settings
from demo.streaming import Fleet, ServerHandle
from demo.sweep.headroom import ClientHeadroom
from demo.sweep.models import BatchStats
from demo.sweep.runner import run_batch
from harness import ROOT
from harness.standin import StandinBehavior, Truth
from harness.standin_process import StandinProcess

VLLM_BENCH_TIMEOUT_S = 900.0  # imports, tokenizer, the run itself
# The stand-in keeps up when its median stream decodes within this share of the designed rate.
STANDIN_RATE_MIN = 0.95
STANDIN_CPU_LIMIT = 0.9  # of one core, per stand-in process
CPU_SAMPLE_S = 0.1
FIGURES = [  # (field, label, unit)
    ("output_tokens_per_s", "output tokens/s", ""),
    ("tpot_mean_ms", "TPOT mean", "ms"),
    ("tpot_median_ms", "TPOT median", "ms"),
    ("itl_p50_ms", "ITL p50", "ms"),
    ("itl_p95_ms", "ITL p95", "ms"),
    ("ttft_p50_ms", "TTFT p50", "ms"),
]


class Figures(BaseModel):
    """One column of the table: what one source says about one run."""

    source: str  # "truth", "ours", "vllm bench serve"
    requests: int = 0  # finished
    completion_tokens: int | None = None
    output_tokens_per_s: float | None = None
    tpot_mean_ms: float | None = None
    tpot_median_ms: float | None = None
    itl_p50_ms: float | None = None
    itl_p95_ms: float | None = None
    ttft_p50_ms: float | None = None
    na_reasons: dict[str, str] = Field(default_factory=dict)


class Run(BaseModel):
    """One client's run: its figures, the stand-in's truth of the same run, and who kept up."""

    client: Figures
    truth: Figures
    wall_s: float | None = None
    client_cpu_share: float | None = None  # the client process's CPU / the run's wall time (1.0 = a core)
    client_headroom: ClientHeadroom | None = None  # ours: as every batch reports it
    standin_cpu_share: float | None = None  # all its processes' (1.0 = one core)
    standin_rate_share: float | None = None  # the truth's median stream decode rate / the designed rate
    na_reasons: dict[str, str] = Field(default_factory=dict)


class Report(BaseModel):
    streams: int
    tokens_per_s_per_stream: float
    max_tokens: int
    standin_processes: int = 1
    chunk_tokens: int = 1  # tokens a chunk: 1 as a baseline server sends, more as speculation does
    sender: str = "this process"  # who sent our streams: this process, or a Ray fleet (--ray)
    ours: Run
    vllm: Run | None = None
    vllm_na: str | None = None  # why vllm bench serve has no column
    notes: list[str] = Field(default_factory=list)  # a client or the stand-in was the limit


# --------------------------------------------------------------------------- figures


def tpots_ms(decode_tokens_per_s: list[float]) -> list[float]:
    """TPOT (time per output token after the first) of each request: the inverse of its decode rate."""
    return [1000 / r for r in decode_tokens_per_s if r > 0]


def _ms(value_s: float | None) -> float | None:
    return None if value_s is None else value_s * 1000


def _fill_tpot(f: Figures, rates: list[float]) -> None:
    tp = tpots_ms(rates)
    if tp:
        f.tpot_mean_ms, f.tpot_median_ms = statistics.fmean(tp), statistics.median(tp)
    else:
        f.na_reasons["tpot_mean_ms"] = f.na_reasons["tpot_median_ms"] = "no request had two tokens"


def truth_figures(truths: list[Truth]) -> Figures:
    """The stand-in's own record of a run: real send times, tokens actually sent."""
    f = Figures(source="truth")
    done = [t for t in truths if t.outcome == "completed" and t.t_first_token_sent is not None
            and t.t_last_token_sent is not None]
    f.requests = len(done)
    if not done:
        f.na_reasons["output_tokens_per_s"] = "no request completed"
        return f
    f.completion_tokens = sum(t.completion_tokens for t in done)
    span_s = max(t.t_last_token_sent or 0.0 for t in done) - min(t.t_request for t in done)
    f.output_tokens_per_s = f.completion_tokens / span_s if span_s > 0 else None
    _fill_tpot(f, [t.decode_tokens_per_s for t in done if t.decode_tokens_per_s])
    gaps = [g for t in done for g in spread_gaps_s(list(zip(t.chunk_send_times, t.chunk_sizes_sent, strict=True)))]
    f.itl_p50_ms, f.itl_p95_ms = _ms(percentile(gaps, 50)), _ms(percentile(gaps, 95))
    f.ttft_p50_ms = _ms(percentile([(t.t_first_token_sent or 0.0) - t.t_request for t in done], 50))
    return f


def our_figures(stats: BatchStats, results: list[SideResult]) -> Figures:
    """What our batch engine measured (its BatchStats, and each request's decode rate)."""
    ok = [r for r in results if r.complete]
    f = Figures(source="ours", requests=len(ok), completion_tokens=stats.completion_tokens_total,
                output_tokens_per_s=stats.output_tokens_per_s, itl_p50_ms=_ms(stats.itl_p50_s),
                itl_p95_ms=_ms(stats.itl_p95_s), ttft_p50_ms=_ms(stats.ttft_p50_s), na_reasons=dict(stats.na_reasons))
    _fill_tpot(f, [r.decode_tokens_per_s for r in ok if r.decode_tokens_per_s])
    return f


def vllm_figures(result: dict[str, Any]) -> Figures:
    """What `vllm bench serve --save-result` wrote (its own names, in ms)."""
    def get(key: str) -> float | None:
        v = result.get(key)
        return float(v) if isinstance(v, int | float) else None

    f = Figures(source="vllm bench serve", requests=int(result.get("completed") or 0),
                completion_tokens=int(result["total_output_tokens"]) if "total_output_tokens" in result else None,
                output_tokens_per_s=get("output_throughput"), tpot_mean_ms=get("mean_tpot_ms"),
                tpot_median_ms=get("median_tpot_ms"), itl_p50_ms=get("p50_itl_ms"), itl_p95_ms=get("p95_itl_ms"),
                ttft_p50_ms=get("median_ttft_ms"))
    for field, _, _ in FIGURES:
        if getattr(f, field) is None:
            f.na_reasons[field] = "not in vllm bench serve's result file"
    return f


def diff_pct(value: float | None, truth: float | None) -> float | None:
    """(value - truth) / truth in %; None when either is unknown."""
    if value is None or truth is None or truth == 0:
        return None
    return (value - truth) / truth * 100


# --------------------------------------------------------------------------- CPU of other processes


class _CpuTrace:
    """Samples processes' CPU time every CPU_SAMPLE_S in a thread: (perf_counter, cpu_s) per pid."""

    def __init__(self) -> None:
        self.samples: dict[int, list[tuple[float, float]]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cpu-trace", daemon=True)

    def watch(self, pid: int) -> None:
        self.samples.setdefault(pid, [])

    def _run(self) -> None:
        while not self._stop.wait(CPU_SAMPLE_S):
            for pid, out in list(self.samples.items()):
                if (cpu := cpu_seconds(pid)) is not None:
                    out.append((time.perf_counter(), cpu))

    def share(self, pid: int, t0: float, t1: float) -> float | None:
        """CPU share (1.0 = one core) over the samples inside [t0, t1]. The stand-in's truth times
        are its time.perf_counter(): on Linux the same system-wide monotonic clock as ours."""
        inside = [(t, c) for t, c in self.samples.get(pid, []) if t0 <= t <= t1]
        if len(inside) < 2 or inside[-1][0] <= inside[0][0]:
            return None
        return (inside[-1][1] - inside[0][1]) / (inside[-1][0] - inside[0][0])

    def __enter__(self) -> _CpuTrace:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


def _window(truths: list[Truth]) -> tuple[float, float] | None:
    done = [t for t in truths if t.t_last_token_sent is not None]
    return (min(t.t_request for t in done), max(t.t_last_token_sent or 0.0 for t in done)) if done else None


def _standin_checks(run: Run, truths: list[Truth], designed_tokens_per_s: float, trace: _CpuTrace,
                    pids: list[int]) -> None:
    rates = [t.decode_tokens_per_s for t in truths if t.decode_tokens_per_s]
    if rates:
        run.standin_rate_share = statistics.median(rates) / designed_tokens_per_s
    if (w := _window(truths)) is not None:
        shares = [trace.share(pid, *w) for pid in pids]
        run.standin_cpu_share = None if None in shares else sum(x or 0.0 for x in shares)
    if run.standin_cpu_share is None:
        run.na_reasons["standin_cpu_share"] = "no CPU samples of the stand-in inside the run (/proc unreadable?)"


# --------------------------------------------------------------------------- the two clients


def prompts_for(streams: int) -> list[str]:
    return [f"Stream {i}: tell me about the sea, the wind and the boats." for i in range(streams)]


async def _our_batch(url: str, model: str, prompts: list[str], max_tokens: int,
                     fleet: Fleet | None = None) -> tuple[BatchStats, list[SideResult]]:
    settings = Settings(baseline_url=url, speculative_url=url, save_runs=False)
    reqs = [RaceRequest(messages=[Message(role="user", content=p)], max_tokens=max_tokens) for p in prompts]
    async with make_http_client(settings, "baseline") as http:
        server = ServerHandle("baseline", url, model, http, fleet=fleet)
        return await run_batch(http, server, reqs, len(reqs), settings, keep_text=False)


def run_ours(standin: StandinProcess, prompts: list[str], max_tokens: int, trace: _CpuTrace,
             fleet: Fleet | None = None) -> Run:
    """Our batch engine's run; with a ``fleet`` (``--ray``), its workers send the streams."""
    # One untimed request first: the first batch of a process imports half of httpx and anyio while
    # it streams (~0.6 s of CPU); vllm bench serve has imported everything before its run starts.
    # Through a fleet, as many as it has workers: each worker's first batch imports the same.
    warm = fleet.workers if fleet is not None else 1
    run_streams(_our_batch(standin.url, standin.behavior.model, prompts[:warm], 2, fleet))
    since = len(standin.truth())
    t0 = time.perf_counter()
    stats, results = run_streams(_our_batch(standin.url, standin.behavior.model, prompts, max_tokens, fleet))
    truths = standin.truth(since)
    run = Run(client=our_figures(stats, results), truth=truth_figures(truths), wall_s=time.perf_counter() - t0,
              client_headroom=stats.client)
    if stats.client is not None:
        run.client_cpu_share = stats.client.cpu_share
    if stats.errors:
        run.na_reasons["errors"] = "; ".join(stats.errors[:3])
    _standin_checks(run, truths, standin.behavior.tokens_per_s, trace, standin.pids)
    return run


# Written by the CPU venv's Python: a word-level tokenizer (whitespace words, like the stand-in's
# token count), so vllm bench serve needs no model hub and no model.
_TOKENIZER_PY = """
import json, sys
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast
words = sorted({w for p in json.load(open(sys.argv[2])) for w in p.split()})
tok = Tokenizer(models.WordLevel(vocab={"[UNK]": 0, **{w: i + 1 for i, w in enumerate(words)}}, unk_token="[UNK]"))
tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]").save_pretrained(sys.argv[1])
open(sys.argv[1] + "/config.json", "w").write('{"model_type": "gpt2"}')
"""


def _vllm_venv() -> Path:
    return Path(os.environ.get("SPECDEMO_VLLM_VENV", ROOT / ".venv-vllm"))


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[-1][:300] if lines else "no output"


def word_tokenizer(directory: Path, prompts: list[str]) -> str | None:
    """Write the word-level tokenizer into ``directory``; None, or why it could not."""
    py = _vllm_venv() / "bin" / "python"
    words = directory / "prompts.json"
    directory.mkdir(parents=True, exist_ok=True)
    words.write_text(json.dumps(prompts))
    p = subprocess.run([str(py), "-c", _TOKENIZER_PY, str(directory), str(words)], capture_output=True, text=True,
                       timeout=300)
    return None if p.returncode == 0 else f"writing a tokenizer failed: {_last_line(p.stderr)}"


def run_vllm(standin: StandinProcess, prompts: list[str], max_tokens: int, trace: _CpuTrace, workdir: Path,
             tokenizer: Path | None) -> tuple[Run | None, str | None]:
    """`vllm bench serve` on the same stand-in with the same requests; (run, None) or (None, why not)."""
    if not (_vllm_venv() / "bin" / "vllm").exists():
        return None, f"no vLLM in {_vllm_venv()} (run scripts/setup_cpu_servers.sh)"
    if tokenizer is None:
        tokenizer = workdir / "tokenizer"
        if (why := word_tokenizer(tokenizer, prompts)) is not None:
            return None, why
    dataset = workdir / "prompts.jsonl"
    dataset.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in prompts))
    n = len(prompts)
    cmd = bench_command(standin.url, standin.behavior.model, tokenizer, dataset, n, n, max_tokens,
                        workdir / "vllm.json", "--request-rate", "inf", "--ready-check-timeout-sec", "0",
                        "--ignore-eos", "--percentile-metrics", "ttft,tpot,itl", "--metric-percentiles", "50,95")
    since = len(standin.truth())
    log = workdir / "vllm_bench.log"
    with open(log, "w") as out:
        # The script ends in `exec vllm bench serve`: this pid becomes vllm's client.
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
        trace.watch(proc.pid)
        try:
            rc = proc.wait(timeout=VLLM_BENCH_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
            return None, f"vllm bench serve did not finish within {VLLM_BENCH_TIMEOUT_S:g} s"
    if rc != 0 or not (workdir / "vllm.json").exists():
        return None, f"vllm bench serve exited with {rc}: {_last_line(log.read_text(errors='replace'))}"
    result = json.loads((workdir / "vllm.json").read_text())
    # (--ready-check-timeout-sec 0: no test request before the run; the last n are the run's all the same.)
    truths = standin.truth(since)[-n:]
    run = Run(client=vllm_figures(result), truth=truth_figures(truths),
              wall_s=float(result["duration"]) if "duration" in result else None)
    if (w := _window(truths)) is not None:
        run.client_cpu_share = trace.share(proc.pid, *w)
    _standin_checks(run, truths, standin.behavior.tokens_per_s, trace, standin.pids)
    return run, None


# --------------------------------------------------------------------------- the benchmark


def fast_standin(tokens_per_s: float, ttft_s: float, max_tokens: int, chunk_tokens: int = 1) -> StandinBehavior:
    """The fast stand-in at ``tokens_per_s`` per stream, with room for the prompts and ``max_tokens``:
    a baseline server (one token a chunk), or with ``chunk_tokens`` above 1 a speculative one whose
    every verification step sends that many (the same tokens/s in fewer, larger chunks)."""
    return StandinBehavior(tokens_per_s=tokens_per_s, ttft_s=ttft_s, max_model_len=max_tokens + 1000,
                           chunk_sizes=[chunk_tokens], speculative=chunk_tokens > 1,
                           num_spec_tokens=max(4, chunk_tokens - 1))


@contextmanager
def _standin(behavior: StandinBehavior, processes: int) -> Iterator[tuple[StandinProcess, _CpuTrace]]:
    with StandinProcess(behavior, processes=processes) as s, _CpuTrace() as trace:
        for pid in s.pids:
            trace.watch(pid)
        yield s, trace


def _notes(report: Report) -> list[str]:
    notes: list[str] = []
    for name, run in (("our run", report.ours), ("vllm bench serve's run", report.vllm)):
        if run is None:
            continue
        if run.standin_rate_share is not None and run.standin_rate_share < STANDIN_RATE_MIN:
            notes.append(f"{name}: the stand-in's streams decoded at {run.standin_rate_share:.0%} of the designed "
                         "rate: the stand-in, not the client, was the limit")
        if run.standin_cpu_share is not None and run.standin_cpu_share > STANDIN_CPU_LIMIT * report.standin_processes:
            notes.append(f"{name}: the stand-in's {report.standin_processes} process(es) used "
                         f"{run.standin_cpu_share:.0%} of a core: it may be the limit")
    h = report.ours.client_headroom
    if h is not None and h.limited and h.note:
        notes.append(f"our client: {h.note}")
    return notes


def measure(streams: int, tokens_per_s: float, max_tokens: int, *, ttft_s: float = 0.05, with_vllm: bool = True,
            tokenizer: Path | None = None, standin_processes: int = 1, fleet: RayFleet | None = None,
            chunk_tokens: int = 1) -> Report:
    """Our client (through ``fleet``'s workers, if one), then vllm bench serve (unless ``with_vllm``
    is False), on one fast stand-in."""
    prompts = prompts_for(streams)
    behavior = fast_standin(tokens_per_s, ttft_s, max_tokens, chunk_tokens)
    with _standin(behavior, standin_processes) as (standin, trace), \
            tempfile.TemporaryDirectory(prefix="bench-client-streams-") as tmp:
        report = Report(streams=streams, tokens_per_s_per_stream=tokens_per_s, max_tokens=max_tokens,
                        standin_processes=standin_processes, chunk_tokens=chunk_tokens,
                        sender="this process" if fleet is None else fleet.describe(),
                        ours=run_ours(standin, prompts, max_tokens, trace, fleet))
        if with_vllm:
            report.vllm, report.vllm_na = run_vllm(standin, prompts, max_tokens, trace, Path(tmp), tokenizer)
        else:
            report.vllm_na = "not run (--no-vllm)"
    report.notes = _notes(report)
    return report


# --------------------------------------------------------------------------- printing


def _num(v: float | None) -> str:
    if v is None:
        return "n/a"
    return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.2f}"


def _pct(v: float | None) -> str:
    return "n/a" if v is None else f"{v:+.1f}%"


def _share(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.0%}"


def table(report: Report) -> str:
    v = report.vllm
    vllm_head = "vllm bench serve" if v is not None else f"vllm bench serve: n/a ({report.vllm_na})"
    out = [f"{report.streams} streams x {report.tokens_per_s_per_stream:g} tokens/s "
           f"(designed {report.streams * report.tokens_per_s_per_stream:,.0f} tokens/s in all), "
           f"{report.max_tokens} tokens each in chunks of {report.chunk_tokens}, one stand-in in "
           f"{report.standin_processes} process(es) of its own; "
           f"ours sent from {report.sender}",
           f"{'figure':<18} {'truth':>9} {'ours':>9} {'ours Δ':>8} | {'truth':>9} {'vllm':>9} {'vllm Δ':>8} | "
           f"{'ours vs vllm':>12}"]
    for field, label, unit in FIGURES:
        name = f"{label} ({unit})" if unit else label
        t, o = getattr(report.ours.truth, field), getattr(report.ours.client, field)
        tv, ov = (getattr(v.truth, field), getattr(v.client, field)) if v is not None else (None, None)
        out.append(f"{name:<18} {_num(t):>9} {_num(o):>9} {_pct(diff_pct(o, t)):>8} | {_num(tv):>9} {_num(ov):>9} "
                   f"{_pct(diff_pct(ov, tv)):>8} | {_pct(diff_pct(o, ov)):>12}")
    toks = (f"tokens: ours {report.ours.client.completion_tokens} of {report.ours.truth.completion_tokens} sent, "
            f"{report.ours.client.requests}/{report.streams} requests")
    if v is not None:
        toks += (f"; vllm {v.client.completion_tokens} of {v.truth.completion_tokens} sent, "
                 f"{v.client.requests}/{report.streams} requests")
    out.append(toks)
    if v is None:
        out.append(vllm_head)
    h = report.ours.client_headroom
    if h is not None:
        lag = "n/a" if h.loop_lag_p95_ms is None else f"{h.loop_lag_p95_ms:.1f} ms"
        lag_max = "n/a" if h.loop_lag_max_ms is None else f"{h.loop_lag_max_ms:.0f} ms"
        out.append(f"our client's headroom: event-loop lag p95 {lag} (max {lag_max}), CPU {_share(h.cpu_share)} of a "
                   f"core: {'LIMITED' if h.limited else 'keeping up'}")
    else:
        out.append("our client's headroom: n/a (the batch reported none)")
    if v is not None:
        out.append(f"vllm bench serve's client: CPU {_share(v.client_cpu_share)} of a core during its run")
    for name, run in (("our run", report.ours), ("vllm's run", v)):
        if run is not None:
            out.append(f"stand-in during {name}: CPU {_share(run.standin_cpu_share)} of a core, median stream at "
                       f"{_share(run.standin_rate_share)} of the designed rate")
    out += [f"NOTE {n}" for n in report.notes]
    return "\n".join(out)


@contextmanager
def _fleet(address: str | None, workers: int) -> Iterator[RayFleet | None]:
    """No fleet without ``--ray``; ``local``: a cluster of ``workers`` nodes here (harness/ray_cluster.py)."""
    if address is None:
        yield None
        return
    if address != "local":
        yield fleet_at(address, workers)
        return
    from harness.ray_cluster import local_cluster
    with local_cluster(workers) as local:
        yield fleet_at(local, workers)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--streams", type=int, default=256)
    ap.add_argument("--tokens-per-s", type=float, default=100.0, help="per stream")
    ap.add_argument("--max-tokens", type=int, default=1000)
    ap.add_argument("--ttft-s", type=float, default=0.05)
    ap.add_argument("--chunk-tokens", type=int, default=1,
                    help="tokens a chunk (1: a baseline server; 3: speculation's, at the same tokens/s)")
    ap.add_argument("--standin-processes", type=int, default=1,
                    help="the stand-in's processes on its one port (a few hundred fast streams a process)")
    ap.add_argument("--ray", metavar="ADDRESS", help="our streams sent by a Ray fleet (demo/load/fleet.py): a "
                    "cluster's address, auto, or local (a cluster of --ray-workers nodes on this machine)")
    ap.add_argument("--ray-workers", type=int, default=2)
    ap.add_argument("--no-vllm", action="store_true", help="our client against the truth only")
    ap.add_argument("--tokenizer", type=Path, help="a local tokenizer folder for vllm bench serve "
                                                   "(default: a word-level one written for the run)")
    ap.add_argument("--json", action="store_true", help="print the report as JSON")
    a = ap.parse_args(argv)
    if a.streams < 1 or a.max_tokens < 2 or a.tokens_per_s <= 0 or a.standin_processes < 1 or a.chunk_tokens < 1:
        ap.error("--streams must be at least 1, --max-tokens at least 2, --tokens-per-s above 0, "
                 "--standin-processes and --chunk-tokens at least 1")
    with _fleet(a.ray, a.ray_workers) as fleet:
        report = measure(a.streams, a.tokens_per_s, a.max_tokens, ttft_s=a.ttft_s, with_vllm=not a.no_vllm,
                         tokenizer=a.tokenizer, standin_processes=a.standin_processes, fleet=fleet,
                         chunk_tokens=a.chunk_tokens)
    print(report.model_dump_json(indent=2) if a.json else table(report))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
