"""The stand-in's command line (``python -m harness.standin``): a stand-in vLLM server in the foreground
(``--behavior-json``: a whole StandinBehavior, as StandinProcess starts one)."""

from __future__ import annotations

import argparse
import json
import signal
import time
from pathlib import Path
from typing import get_args

from harness.standin._behavior import Fault, StandinBehavior
from harness.standin._server import Standin


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m harness.standin",
                                description="Run a stand-in vLLM server in the foreground.")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--model", default="smollm2")
    p.add_argument("--max-model-len", type=int, default=2048)
    p.add_argument("--speculative", action="store_true")
    p.add_argument("--num-spec-tokens", type=int, default=4)
    p.add_argument("--tokens-per-s", type=float, default=200.0)
    p.add_argument("--ttft-s", type=float, default=0.05)
    p.add_argument("--chunk-sizes", default="1", help="comma-separated, e.g. 1,3,5")
    p.add_argument("--pieces-file", type=Path, help="JSON list of token texts, or one text per line")
    p.add_argument("--stop-at-end-of-pieces", action="store_true")
    p.add_argument("--fault", choices=[f for f in get_args(Fault) if f != "hold"])  # nothing releases it
    p.add_argument("--fault-after-chunks", type=int, default=5)
    p.add_argument("--stall-s", type=float, default=30.0)
    p.add_argument("--metrics-mode", choices=["ok", "missing", "malformed", "slow"], default="ok")
    p.add_argument("--api-key")
    p.add_argument("--replay-fixture", type=Path)
    p.add_argument("--replay-speed", type=float, default=1.0)
    p.add_argument("--own-port", type=int,
                   help="share --port with other stand-in processes (SO_REUSEPORT: the kernel spreads the "
                        "connections), this port being this process's alone (its /health, its truth records)")
    p.add_argument("--behavior-json", help="a whole StandinBehavior as JSON (the behaviour flags above are then "
                                           "ignored); StandinProcess passes its behaviour so")
    a = p.parse_args(argv)
    if a.behavior_json:
        _serve_until_stopped(StandinBehavior.model_validate_json(a.behavior_json), a.host, a.port, a.own_port)
        return
    pieces = None
    if a.pieces_file:
        raw = a.pieces_file.read_text()
        pieces = json.loads(raw) if raw.lstrip().startswith("[") else raw.splitlines(keepends=True)
    behavior = StandinBehavior(
        model=a.model, max_model_len=a.max_model_len, speculative=a.speculative,
        num_spec_tokens=a.num_spec_tokens, tokens_per_s=a.tokens_per_s, ttft_s=a.ttft_s,
        chunk_sizes=[int(x) for x in a.chunk_sizes.split(",")], pieces=pieces,
        stop_at_end_of_pieces=a.stop_at_end_of_pieces, fault=a.fault,
        fault_after_chunks=a.fault_after_chunks, stall_s=a.stall_s, metrics_mode=a.metrics_mode,
        api_key=a.api_key, replay_fixture=a.replay_fixture, replay_speed=a.replay_speed)
    _serve_until_stopped(behavior, a.host, a.port, a.own_port)


def _serve_until_stopped(behavior: StandinBehavior, host: str, port: int, own_port: int | None) -> None:
    # Its imports out of the collector's reach, as the client's are: a full collection between a
    # chunk's write and its send time, on a busy machine, would move the truth the tests check.
    # Before it serves: once /health answers, nothing but requests holds the process's GIL (an import
    # and a collection after it held a busy machine's first requests 10-75 ms before their handler).
    from demo.client import settle_heap  # here: the in-process Standin needs none of the client

    settle_heap()
    s = Standin(behavior, host=host, port=port, log_level="info", own_port=own_port).start()
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))  # stop cleanly
    own = f" (shared; this process's own port {s.own_port})" if s.own_port is not None else ""
    print(f"stand-in vLLM server ({'speculative' if behavior.speculative else 'baseline'}) on {s.url}{own}; "
          "Ctrl+C to stop", flush=True)
    try:
        while s.alive:
            time.sleep(0.5)
    except KeyboardInterrupt:
        pass
    finally:
        s.stop()


