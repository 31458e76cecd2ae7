"""The end-to-end pair's start and stop, in one place: `scripts/test.sh` starts it beside the fast
tests (``python -m harness.e2e_pair up``), and the e2e fixture (`tests/e2e/conftest.py`,
``real_servers``) starts it when no pair is running. Both get the same command, environment
(timeouts), run dir and ports from here.

    python -m harness.e2e_pair up     # python -m servers up --detach ... (its output as it goes)
    python -m harness.e2e_pair down   # stops exactly the pair started in RUN_DIR
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping

from harness import ROOT

RUN_DIR = ROOT / "logs" / "servers-e2e"  # its own state file and logs: never the user's logs/servers
HOST = "127.0.0.1"
BASELINE_PORT, SPECULATIVE_PORT = 8000, 8001  # the defaults of SPECDEMO_BASELINE_URL / _SPECULATIVE_URL
# Its start and warm-up may take minutes beside the fast tests (scripts/test.sh): wide bounds. A hung
# server is replaced after 10 s without /health, not the product's 30: the e2e hang test waits that long.
ENV: dict[str, str] = {
    "SPECDEMO_SERVERS_STARTUP_TIMEOUT_S": "1200",
    "SPECDEMO_SERVERS_WARMUP_TIMEOUT_S": "900",
    "SPECDEMO_SERVERS_HEALTH_TIMEOUT_S": "10",
}
UP_TIMEOUT_S = 1200 + 900 + 120  # the start and the warm-up's bounds, and the model's conversion
DOWN_TIMEOUT_S = 120


def up_command(baseline_port: int = BASELINE_PORT, speculative_port: int = SPECULATIVE_PORT) -> list[str]:
    """`python -m servers up --detach` for the pair on these ports, in RUN_DIR."""
    return [sys.executable, "-m", "servers", "up", "--detach", "--host", HOST,
            "--baseline-port", str(baseline_port), "--speculative-port", str(speculative_port),
            "--run-dir", str(RUN_DIR)]


def down_command() -> list[str]:
    """`python -m servers down` for exactly the pair started in RUN_DIR."""
    return [sys.executable, "-m", "servers", "down", "--run-dir", str(RUN_DIR)]


def env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of the pair's start: ``base`` (os.environ by default) with ENV over it."""
    return {**(os.environ if base is None else base), **ENV}


def up(baseline_port: int = BASELINE_PORT, speculative_port: int = SPECULATIVE_PORT) -> int:
    """Start the pair (output straight to ours: the progress line shows what happens); its exit code."""
    cmd = up_command(baseline_port, speculative_port)
    print(f"[e2e] starting the servers: {' '.join(cmd[1:])}", flush=True)
    return subprocess.run(cmd, cwd=ROOT, env=env(), timeout=UP_TIMEOUT_S, check=False).returncode


def down() -> int:
    """Stop the pair started in RUN_DIR (nothing if none); the exit code of `servers down`."""
    return subprocess.run(down_command(), cwd=ROOT, timeout=DOWN_TIMEOUT_S, check=False).returncode


def main(argv: list[str] | None = None) -> int:
    """``up`` or ``down``; exit 2 for anything else."""
    args = sys.argv[1:] if argv is None else argv
    if args == ["up"]:
        return up()
    if args == ["down"]:
        return down()
    print("usage: python -m harness.e2e_pair up | down", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
