"""The e2e pair's start is written once (harness/e2e_pair.py): scripts/test.sh and the e2e fixture both
use it, and its command and environment are what the e2e tests rely on. No server is started here."""

from __future__ import annotations

import subprocess
import sys

from common.paths import ROOT
from harness import e2e_pair


def test_the_command_and_its_environment() -> None:
    cmd = e2e_pair.up_command(18000, 18001)
    assert cmd[:5] == [sys.executable, "-m", "servers", "up", "--detach"]
    assert cmd[5:] == ["--host", "127.0.0.1", "--baseline-port", "18000", "--speculative-port", "18001",
                       "--run-dir", str(ROOT / "logs" / "servers-e2e")]
    assert e2e_pair.down_command()[2:] == ["servers", "down", "--run-dir", str(e2e_pair.RUN_DIR)]
    env = e2e_pair.env({"PATH": "/bin", "SPECDEMO_SERVERS_HEALTH_TIMEOUT_S": "30"})
    assert env["PATH"] == "/bin"
    # the e2e hang test waits 10 s for a replacement; the start beside the fast tests may take minutes
    assert env["SPECDEMO_SERVERS_HEALTH_TIMEOUT_S"] == "10"
    assert float(env["SPECDEMO_SERVERS_STARTUP_TIMEOUT_S"]) + float(env["SPECDEMO_SERVERS_WARMUP_TIMEOUT_S"]) \
        < e2e_pair.UP_TIMEOUT_S


def test_test_sh_and_the_fixture_start_the_pair_only_through_it() -> None:
    script = (ROOT / "scripts" / "test.sh").read_text()
    assert "python -m harness.e2e_pair up" in script and "python -m harness.e2e_pair down" in script
    assert "-m servers up" not in script and "-m servers down" not in script
    fixture = (ROOT / "tests" / "e2e" / "conftest.py").read_text()
    assert "e2e_pair.up(" in fixture and "e2e_pair.down()" in fixture
    assert '"servers", "up"' not in fixture and "SPECDEMO_SERVERS_" not in fixture


def test_a_bad_command_is_a_usage_line() -> None:
    run = subprocess.run([sys.executable, "-m", "harness.e2e_pair", "start"], cwd=ROOT, capture_output=True,
                         text=True, timeout=60)
    assert run.returncode == 2 and run.stderr.strip() == "usage: python -m harness.e2e_pair up | down"
