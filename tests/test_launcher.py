"""The launcher's process handling and bad-input messages, with a tiny real HTTP server standing in
for vLLM (no vLLM, no mocks): `python -m servers up/status/down` runs as a real subprocess, starts
real processes, and every test checks that none is left behind.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from common.paths import ROOT
from common.waiting import held_within, wait_for
from harness.ports import free_port
from tests.signals import interruptible

# Answers /health and /v1/models like vLLM. Its behaviour per role comes from FAKE_<ROLE>:
# ok | crash (prints, exits 1) | never-healthy (serves 503) | ignore-term (needs SIGKILL) | forks
# (spawns a grandchild that must die with it) | crash-on-restart (serves at its first start; every
# later start, e.g. by the supervisor, exits with code 3).
FAKE_SERVER = textwrap.dedent('''
    import http.server, json, os, signal, subprocess, sys, time
    args = sys.argv[1:]
    port = int(args[args.index("--port") + 1])
    role = "speculative" if "--speculative-config" in args else "baseline"
    mode = os.environ.get("FAKE_" + role.upper(), "ok")
    print(f"fake {role}: starting on {port} mode={mode}", flush=True)
    print(f"fake {role}: cores={os.environ.get('VLLM_CPU_OMP_THREADS_BIND')}", flush=True)
    if mode == "crash":
        for i in range(30):
            print(f"fake {role}: log line {i}")
        print(f"fake {role}: RuntimeError: boom", flush=True)
        sys.exit(1)
    if mode == "crash-on-restart":
        marker = os.path.join(os.path.dirname(os.path.abspath(__file__)), role + ".started")
        if os.path.exists(marker):
            print(f"fake {role}: RuntimeError: crash on restart", flush=True)
            sys.exit(3)
        open(marker, "w").close()
    if mode == "ignore-term":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if mode == "forks":
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", "fake-grandchild"])
    served = args[args.index("--served-model-name") + 1]
    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            if self.path == "/health":
                code, body = (503, b"") if mode == "never-healthy" else (200, b"")
            elif self.path == "/v1/models":
                code, body = 200, json.dumps({"object": "list", "data": [{"id": served}]}).encode()
            else:
                code, body = 404, b""
            self.send_response(code)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        def do_POST(self):  # the launcher's warm-up: each request is noted in <role>.warmup
            req = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
            with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), role + ".warmup"), "a") as f:
                f.write(self.path + (" stream" if req.get("stream") else "") + "\\n")
            if req.get("stream"):  # the timed request: 8 steps, usage on each chunk (5 tokens a step drafted)
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                step = 1 if role == "baseline" else 5
                self.wfile.write(b'data: {"choices": [], "usage": {"completion_tokens": "many"}}\\n\\n')  # no count
                for i in range(9):
                    usage = {"completion_tokens": 1 + i * step}
                    self.wfile.write(f"data: {json.dumps({'choices': [], 'usage': usage})}\\n\\n".encode())
                    self.wfile.flush()
                    time.sleep(0.005)
                self.wfile.write(b"data: [DONE]\\n\\n")
                return
            body = json.dumps({"choices": [{"text": "ok"}]}).encode()
            self.send_response(200 if self.path == "/v1/completions" else 404)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        def log_message(self, *a):
            pass
    time.sleep(float(os.environ.get("FAKE_DELAY_S", "0.3")))
    http.server.ThreadingHTTPServer(("127.0.0.1", port), H).serve_forever()
''')



class Env:
    """One launcher sandbox: its own run dir, cache dir, ports, and the stand-in server script."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.script = tmp / "fake_vllm_server.py"
        self.script.write_text(FAKE_SERVER)
        self.run_dir = tmp / "run"
        self.ports = (free_port(), free_port())
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("SPECDEMO_")}
        self.env.update({
            "PYTHONPATH": str(ROOT),  # run from tmp: no .env of the checkout is read
            "SPECDEMO_SERVERS_RUN_DIR": str(self.run_dir),
            "SPECDEMO_SERVERS_CACHE_DIR": str(tmp / "cache"),
            "SPECDEMO_SERVERS_BASELINE_PORT": str(self.ports[0]),
            "SPECDEMO_SERVERS_SPECULATIVE_PORT": str(self.ports[1]),
            "SPECDEMO_SERVERS_SERVER_COMMAND": f"{sys.executable} {self.script}",
            "SPECDEMO_SERVERS_STOP_TIMEOUT_S": "3",
            "SPECDEMO_SERVERS_STARTUP_TIMEOUT_S": "30",
        })

    def run(self, *args: str, timeout: float = 60, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "servers", *args], cwd=self.tmp, env={**self.env, **env},
            capture_output=True, text=True, timeout=timeout,
        )

    def state(self) -> dict:
        return json.loads((self.run_dir / "state.json").read_text())

    def leftovers(self) -> list[int]:
        """PIDs of any process still running our stand-in script (or its grandchild)."""
        return [int(entry.name) for entry, argv in self._live_processes()
                if str(self.script) in (cmd := " ".join(argv))
                or ("fake-grandchild" in cmd and str(self.tmp) in self._cwd(entry))]

    def supervisors(self) -> list[int]:
        """PIDs of any launcher (`python -m servers ...`) started in this sandbox that still runs: a
        detached supervisor restarts the stand-ins it watches when they are killed."""
        return [int(entry.name) for entry, argv in self._live_processes()
                if argv[1:3] == ["-m", "servers"] and self._cwd(entry) == str(self.tmp)]

    @staticmethod
    def _live_processes() -> Iterator[tuple[Path, list[str]]]:
        """Each process's /proc entry and command line, zombies and exiting ones left out."""
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                argv = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if stat[stat.rindex(")") + 2] not in "ZX":
                yield entry, argv

    @staticmethod
    def _cwd(entry: Path) -> str:
        try:
            return os.readlink(entry / "cwd")
        except OSError:
            return ""

    def wait_no_leftovers(self, timeout_s: float = 5.0) -> list[int]:
        held_within(lambda: not self.leftovers(), timeout_s)
        return self.leftovers()


@pytest.fixture
def env(tmp_path: Path) -> Iterator[Env]:
    e = Env(tmp_path)
    yield e
    # Whatever a test did, leave nothing running: first a supervisor a failed test left (it would
    # restart the stand-ins killed next), then the stand-ins.
    for pid in e.supervisors():
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    for pid in e.leftovers():
        try:
            os.killpg(os.getpgid(pid), signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def test_up_status_down_starts_and_stops_exactly_its_processes(env: Env) -> None:
    up = env.run("up", "--detach")
    assert up.returncode == 0, up.stdout + up.stderr
    state = env.state()
    pids = {s["role"]: s["pid"] for s in state["servers"]}
    assert set(pids) == {"baseline", "speculative"}
    assert all(Path(f"/proc/{p}").exists() for p in pids.values())
    assert f"log: {env.run_dir / 'baseline.log'}" in up.stdout
    assert (env.run_dir / "client.env").read_text().startswith(f"SPECDEMO_BASELINE_URL=http://127.0.0.1:{env.ports[0]}")

    st = env.run("status", "--json")
    assert st.returncode == 0, st.stderr
    rows = {r["role"]: r for r in json.loads(st.stdout)}
    for role, port in zip(("baseline", "speculative"), env.ports, strict=True):
        r = rows[role]
        assert r["healthy"] and r["managed"] and r["pid"] == pids[role]
        assert r["url"] == f"http://127.0.0.1:{port}"
        assert r["served_model"] == "smollm2" and r["dtype"] == "float32"
        assert r["memory_pss_bytes"] > 1_000_000 and r["uptime_s"] >= 0
        assert r["start_kind"] == "cold" and r["time_to_healthy_s"] is not None

    # Each server was warmed up with real requests (three prompts, then two at once) before `up` said ready.
    for role in ("baseline", "speculative"):
        assert (env.tmp / f"{role}.warmup").read_text().splitlines() == ["/v1/completions"] * 5 + [
            "/v1/completions stream"] * 3
        assert f"{role}: warmed up with 5 requests in" in up.stdout
        assert isinstance(rows[role]["warmup_s"], float)
    text = env.run("status").stdout
    assert text.count(", warmed up in ") == 2
    # Then each server's decode step was timed alone (three streamed requests with usage on each chunk),
    # and what a verification step costs in plain steps went to the app with the pair's URLs.
    base_ms, spec_ms = rows["baseline"]["step_ms"], rows["speculative"]["step_ms"]
    assert base_ms > 0 and spec_ms > 0
    assert rows["speculative"]["step_cost"] == round(spec_ms / base_ms, 2)
    assert f"SPECDEMO_SPEC_STEP_COST={rows['speculative']['step_cost']}\n" in (env.run_dir / "client.env").read_text()
    assert f"decode step at warm-up: {base_ms} ms a plain step" in text
    assert (f"decode step at warm-up: {spec_ms} ms a verification step "
            f"({rows['speculative']['step_cost']}x a plain one)") in text
    # Port and core of each server are stated (CPU: each on its own core), read off the running
    # server, not the settings of whoever asks.
    assert [rows[r]["cores"] for r in ("baseline", "speculative")] == ["0", "1"]
    asked = env.run("status", "--json", SPECDEMO_SERVERS_BASELINE_CORES="1", SPECDEMO_SERVERS_SPECULATIVE_CORES="0")
    assert [r["cores"] for r in json.loads(asked.stdout)] == ["0", "1"], asked.stderr
    # ... and the dtype each was started with (float32 on every CPU).
    assert "model: smollm2 (float32); cores: 0; memory:" in text
    assert "model: smollm2 (float32); cores: 1; memory:" in text
    # ... and the compute threads it was given; a stand-in maps no vLLM kernels, and says so.
    assert [rows[r]["compute_threads"] for r in ("baseline", "speculative")] == [1, 1]
    assert [rows[r]["kernels"] for r in ("baseline", "speculative")] == [None, None]
    assert text.count("kernels: n/a (no vLLM kernel library mapped: not a vLLM CPU server, or still "
                      "starting); compute threads: 1") == 2

    again = env.run("up", "--detach")
    assert again.returncode == 0 and "already running, nothing to start" in again.stdout
    assert {s["pid"] for s in env.state()["servers"]} == set(pids.values()), "a second `up` must not start more"

    down = env.run("down")
    assert down.returncode == 0, down.stdout + down.stderr
    assert "stopped (SIGTERM)" in down.stdout
    assert env.wait_no_leftovers() == []
    assert not (env.run_dir / "state.json").exists()

    # The flags and cores the launcher chose were recorded; the next start counts as warm.
    up2 = env.run("up", "--detach")
    assert up2.returncode == 0 and "(warm start)" in up2.stdout
    assert env.run("down").returncode == 0


def test_port_in_use_is_refused_before_anything_starts(env: Env) -> None:
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", env.ports[1]))
        blocker.listen()
        up = env.run("up", "--detach")
    assert up.returncode == 1
    assert f"port {env.ports[1]} on 127.0.0.1 (speculative) is already in use by PID {os.getpid()}" in up.stderr
    assert "--speculative-port" in up.stderr
    assert env.leftovers() == [] and not (env.run_dir / "state.json").exists()


def test_second_launcher_cannot_take_ports_of_a_pair_still_starting(env: Env) -> None:
    """A pair binds its ports only late in startup: the port lock, held by the starting
    servers, keeps a second launcher (another run dir) off those ports meanwhile."""
    import fcntl

    lock_dir = env.tmp / "cache" / "locks"
    lock_dir.mkdir(parents=True)
    with open(lock_dir / f"port-127.0.0.1-{env.ports[0]}.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        up = env.run("up", "--detach")
    assert up.returncode == 1
    assert (f"port {env.ports[0]} (baseline) is reserved by a server another `python -m servers up` is starting"
            in up.stderr)
    assert env.leftovers() == []
    # Released with its holder: the next start works and its servers hold the lock themselves.
    assert env.run("up", "--detach").returncode == 0
    with open(lock_dir / f"port-127.0.0.1-{env.ports[0]}.lock", "w") as probe:
        with pytest.raises(BlockingIOError):
            fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
        assert env.run("down").returncode == 0
        fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)  # the stopped servers released it


def test_health_answered_by_a_stranger_is_not_taken_for_ours(env: Env) -> None:
    """If another process binds the port after our check and answers /health, `up` must say so,
    not report someone else's server as ours."""
    import http.server
    import threading

    class Ok(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *a: object) -> None:
            pass

    stranger: list[http.server.HTTPServer] = []

    def squat() -> None:  # binds the baseline port once our launcher has spawned its servers
        held_within((env.run_dir / "state.json").exists, 20, poll_s=0.02)
        srv = http.server.HTTPServer(("127.0.0.1", env.ports[0]), Ok)
        stranger.append(srv)
        srv.serve_forever()

    t = threading.Thread(target=squat, daemon=True)
    t.start()
    try:
        up = env.run("up", "--detach", FAKE_BASELINE="never-healthy", FAKE_DELAY_S="1")
    finally:
        held_within(lambda: bool(stranger) or not t.is_alive(), 60, poll_s=0.05)
        if stranger:
            stranger[0].shutdown()
            stranger[0].server_close()
    assert up.returncode == 1
    assert f"another process (PID {os.getpid()}) answers on port {env.ports[0]}" in up.stderr
    assert env.wait_no_leftovers() == []


def test_crash_during_start_shows_the_log_tail_and_stops_the_other_server(env: Env) -> None:
    up = env.run("up", "--detach", FAKE_SPECULATIVE="crash", FAKE_DELAY_S="1")
    assert up.returncode == 1
    assert "the speculative server exited with code 1 during start" in up.stderr
    assert "RuntimeError: boom" in up.stderr
    assert "log line 29" in up.stderr and "log line 5\n" not in up.stderr, "about the last 20 lines only"
    assert "baseline: PID" in up.stdout, "the healthy half must be stopped too"
    assert env.wait_no_leftovers() == []
    assert not (env.run_dir / "state.json").exists()


def test_server_never_healthy_times_out_and_is_stopped(env: Env) -> None:
    up = env.run("up", "--detach", FAKE_BASELINE="never-healthy", SPECDEMO_SERVERS_STARTUP_TIMEOUT_S="3")
    assert up.returncode == 1
    assert "baseline not healthy after 3 s" in up.stderr and "fake baseline: starting" in up.stderr
    assert env.wait_no_leftovers() == []


def test_down_with_nothing_running(env: Env) -> None:
    down = env.run("down")
    assert down.returncode == 0
    assert "no servers started by this launcher are running" in down.stdout
    st = env.run("status")
    assert st.returncode == 1 and "not running" in st.stdout


def test_stale_state_file_is_detected_and_removed(env: Env) -> None:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    env.run_dir.mkdir(parents=True)
    record = {
        "role": "baseline", "url": f"http://127.0.0.1:{env.ports[0]}", "pid": gone.pid, "pgid": gone.pid,
        "start_ticks": 1, "log_path": str(env.run_dir / "baseline.log"), "served_model_name": "smollm2",
        "model": "m", "command": ["x"], "started_at": "2026-01-01T00:00:00Z",
    }
    (env.run_dir / "state.json").write_text(json.dumps({"launcher_pid": 1, "device": "cpu", "servers": [record]}))
    st = env.run("status")
    assert "baseline" in st.stdout and "not running" in st.stdout
    down = env.run("down")
    assert down.returncode == 0 and "removed stale state file" in down.stdout
    assert not (env.run_dir / "state.json").exists()


def test_reused_pid_is_never_killed(env: Env) -> None:
    """A state file naming a live process that is not ours (start time differs) must not stop it."""
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    try:
        env.run_dir.mkdir(parents=True)
        record = {
            "role": "baseline", "url": "http://127.0.0.1:1", "pid": bystander.pid, "pgid": bystander.pid,
            "start_ticks": 1, "log_path": "x.log", "served_model_name": "s", "model": "m", "command": ["x"],
            "started_at": "2026-01-01T00:00:00Z",
        }
        (env.run_dir / "state.json").write_text(json.dumps({"launcher_pid": 1, "device": "cpu", "servers": [record]}))
        down = env.run("down")
        assert down.returncode == 0 and "removed stale state file" in down.stdout
        time.sleep(0.3)
        assert bystander.poll() is None, "down signalled a process it did not start"
    finally:
        bystander.kill()
        bystander.wait()


def test_down_escalates_to_sigkill_and_stops_grandchildren(env: Env) -> None:
    up = env.run("up", "--detach", FAKE_BASELINE="ignore-term", FAKE_SPECULATIVE="forks")
    assert up.returncode == 0, up.stderr
    assert env.leftovers(), "the stand-ins should be running"
    down = env.run("down", SPECDEMO_SERVERS_STOP_TIMEOUT_S="1")
    assert "baseline: PID" in down.stdout and "killed (SIGKILL after 1 s)" in down.stdout
    assert env.wait_no_leftovers() == [], "the grandchild of the speculative server must be gone too"


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_foreground_up_stops_both_on_ctrl_c_or_sigterm(env: Env, sig: signal.Signals) -> None:
    p = subprocess.Popen(
        [sys.executable, "-m", "servers", "up"], cwd=env.tmp, env=env.env,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, preexec_fn=interruptible,
    )
    lines: list[str] = []
    stdout = p.stdout
    assert stdout is not None
    reader = threading.Thread(target=lambda: lines.extend(iter(stdout.readline, "")), daemon=True)
    reader.start()
    try:
        # The line `up` prints once its Ctrl-C and SIGTERM handlers are in place: the foreground wait.
        wait_for(lambda: any("Ctrl-C stops both" in line for line in lines), 30,
                 "`up` in its foreground wait (its 'Ctrl-C stops both' line)", poll_s=0.1)
        p.send_signal(sig)
        p.wait(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
    reader.join(timeout=10)
    out = "".join(lines)
    assert p.returncode == 0, out
    assert "Ctrl-C stops both" in out and "stopping" in out
    assert env.wait_no_leftovers() == []
    assert not (env.run_dir / "state.json").exists()


def test_missing_model_path(env: Env) -> None:
    up = env.run("up", "--detach", "--model", str(env.tmp / "no-such-model"))
    assert up.returncode == 1
    assert f"model path {env.tmp / 'no-such-model'} does not exist" in up.stderr
    assert env.leftovers() == []


def test_missing_vllm_venv_names_the_setup_command(env: Env) -> None:
    e = {k: v for k, v in env.env.items() if k != "SPECDEMO_SERVERS_SERVER_COMMAND"}
    up = subprocess.run(
        [sys.executable, "-m", "servers", "up", "--detach", "--vllm-venv", str(env.tmp / "nope")],
        cwd=env.tmp, env=e, capture_output=True, text=True, timeout=60,
    )
    assert up.returncode == 1
    assert "the vLLM venv is missing" in up.stderr and "scripts/setup_cpu_servers.sh" in up.stderr


def test_bad_speculative_config_json(env: Env) -> None:
    up = env.run("up", "--detach", "--speculative-config", "{method: ngram")
    assert up.returncode == 2
    assert "speculative config is not valid JSON" in up.stderr
    assert env.leftovers() == []


def test_cpu_refuses_a_synthetic_acceptance_config_before_starting_anything(env: Env) -> None:
    """vllm-cpu 0.32.0 starts with rejection_sample_method=synthetic, then its engine dies on the
    first request: the launcher says so in one line and starts nothing."""
    synthetic = json.dumps({"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4,
                            "rejection_sample_method": "synthetic", "synthetic_acceptance_length": 2.5})
    up = env.run("up", "--detach", "--speculative-config", synthetic)
    assert up.returncode == 1
    (line,) = up.stderr.strip().splitlines()
    assert line.startswith("error: not starting: ") and "synthetic" in line
    assert "AssertionError: Synthetic acceptance not supported with CPU sampling" in line
    assert "vllm/utils/cpu_triton_utils.py" in line and "--device gpu" in line
    assert env.leftovers() == [] and not env.run_dir.exists(), "nothing started, no log, no state file"
    # The what-if pair profile is a GPU profile; forced onto the CPU it is refused the same way.
    up = env.run("up", "--detach", "--profile", "llama-whatif", "--device", "cpu")
    assert up.returncode == 1 and "Synthetic acceptance not supported" in up.stderr
    assert env.leftovers() == []


def test_the_synthetic_refusal_is_for_the_cpu_only() -> None:
    from servers import launcher
    from servers.arms import ARM_CONFIGS, refusal
    from servers.settings import LauncherSettings

    synthetic = {"method": "eagle3", "num_speculative_tokens": 4, "rejection_sample_method": "synthetic",
                 "synthetic_acceptance_length": 3.0}
    assert refusal(synthetic, "cpu") and refusal(synthetic, "gpu") is None
    assert refusal({**synthetic, "rejection_sample_method": "standard"}, "cpu") is None
    assert all(refusal(a.speculative_config, "cpu") is None for a in ARM_CONFIGS.values() if not a.what_if)
    launcher.check_speculative_config(LauncherSettings(_env_file=None, device="gpu", speculative_config=synthetic))
    launcher.check_speculative_config(LauncherSettings(_env_file=None))  # the CPU default starts
    with pytest.raises(launcher.LauncherError, match="Synthetic acceptance not supported with CPU sampling"):
        launcher.check_speculative_config(LauncherSettings(_env_file=None, speculative_config=synthetic))


def test_unknown_profile(env: Env) -> None:
    up = env.run("up", "--detach", "--profile", "no-such-pair")
    assert up.returncode == 1 and "unknown profile 'no-such-pair'" in up.stderr


def test_gpu_profile_flags_come_from_the_profile() -> None:
    """--profile maps a named pair onto the launcher's settings; vllm_args stays the only flag source."""
    from servers import launcher
    from servers.__main__ import build_parser, launcher_settings
    from servers.profiles import PROFILES

    s = launcher_settings(build_parser().parse_args(["up", "--profile", "llama-draft", "--baseline-port", "9000"]))
    prof = PROFILES["llama-draft"]
    pair = prof.server_configs(baseline_port=9000)
    assert launcher.server_config(s, "baseline", prof.model).vllm_args() == pair.baseline.vllm_args()
    assert launcher.server_config(s, "speculative", prof.model).vllm_args() == pair.speculative.vllm_args()
    assert "VLLM_CPU_OMP_THREADS_BIND" not in launcher.server_env(s, "baseline")


def test_cpu_binds_each_server_to_its_core(env: Env) -> None:
    up = env.run("up", "--detach", "--baseline-cores", "0", "--speculative-cores", "1")
    assert up.returncode == 0, up.stderr
    assert "fake baseline: cores=0" in (env.run_dir / "baseline.log").read_text()
    assert "fake speculative: cores=1" in (env.run_dir / "speculative.log").read_text()
    assert env.run("down").returncode == 0


def test_spawn_pins_the_server_and_what_it_starts(tmp_path: Path) -> None:
    """procs.spawn(cpus=...) sets the affinity of the server, inherited by the processes it starts
    (vLLM's engine core and worker); the real pair was checked by hand (docs/cpu-servers.md)."""
    from servers import procs

    core = max(os.sched_getaffinity(0))
    code = ("import os, subprocess, sys; print(sorted(os.sched_getaffinity(0)), flush=True); "
            "subprocess.run([sys.executable, '-c', 'import os; print(sorted(os.sched_getaffinity(0)))'])")
    log = tmp_path / "pinned.log"
    proc = procs.spawn([sys.executable, "-c", code], dict(os.environ), log, tmp_path, cpus={core})
    assert proc.wait(30) == 0
    assert log.read_text().splitlines() == [f"[{core}]", f"[{core}]"]


@pytest.mark.skipif(not Path("/proc/self/autogroup").exists(),
                    reason="this kernel schedules no autogroups (CONFIG_SCHED_AUTOGROUP)")
def test_a_niced_launch_keeps_its_servers_sessions_as_nice(tmp_path: Path) -> None:
    """`nice -n 19 python -m servers up`: a server runs in a session of its own, and with Linux's
    autogroups a session is scheduled as one group at its group's nice (0 when made), whatever its
    processes' nice. spawn carries the launcher's nice over to the new session's group."""
    code = ("import os, sys, pathlib; from servers import procs; os.nice(7); "
            "p = procs.spawn([sys.executable, '-c', 'import time; time.sleep(60)'], dict(os.environ), "
            "pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])); print(p.pid)")
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path / "niced.log"), str(tmp_path)], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    pid = int(done.stdout)

    def autogroup() -> tuple[str, str]:  # e.g. "/autogroup-123 nice 7"
        name, _, nice = Path(f"/proc/{pid}/autogroup").read_text().split()
        return name, nice

    try:
        assert os.getpriority(os.PRIO_PROCESS, pid) == 7
        group, nice = autogroup()
        assert nice == "7"
        # A session of its own. The group every process starts in (init's, never made by a setsid)
        # reads empty: so it is for this test wherever the runner never made a session of its own.
        ours = Path("/proc/self/autogroup").read_text().split()
        assert group != (ours[0] if ours else None)
    finally:
        os.kill(pid, signal.SIGKILL)


def test_cores_are_parsed_and_checked() -> None:
    from servers.settings import LauncherSettings, parse_cores

    assert parse_cores("1") == {1} and parse_cores("0-3") == {0, 1, 2, 3} and parse_cores("0,2,4-5") == {0, 2, 4, 5}
    assert parse_cores("auto") == set() == parse_cores("nobind")  # vLLM's words: no pinning
    for bad in ("", "a", "3-1", "1-", "0;1"):
        with pytest.raises(ValueError):
            parse_cores(bad)
    with pytest.raises(ValueError, match="core list"):
        LauncherSettings(speculative_cores="one")


def test_pinning_keeps_to_the_cores_this_process_may_use() -> None:
    """A core the launcher may not use is dropped; with none left the server runs anywhere, and a
    GPU server is never pinned."""
    from servers.launcher import server_cpus
    from servers.settings import LauncherSettings

    ours = os.sched_getaffinity(0)
    one = min(ours)
    assert server_cpus(LauncherSettings(baseline_cores=str(one)), "baseline") == {one}
    assert server_cpus(LauncherSettings(baseline_cores=f"{one},4096"), "baseline") == {one}
    assert server_cpus(LauncherSettings(speculative_cores="4096"), "speculative") is None
    assert server_cpus(LauncherSettings(device="gpu"), "baseline") is None
    assert server_cpus(LauncherSettings(pin_processes=False), "baseline") is None
    assert server_cpus(LauncherSettings(baseline_cores="auto"), "baseline") is None
    assert server_cpus(LauncherSettings(server_command="python stand-in.py"), "baseline") is None


def test_gpu_device_starts_the_speculative_server_after_the_baseline_is_healthy(env: Env) -> None:
    up = env.run("up", "--detach", "--device", "gpu")
    assert up.returncode == 0, up.stderr
    from datetime import datetime

    rec = {r["role"]: r for r in env.state()["servers"]}
    base_started = datetime.fromisoformat(rec["baseline"]["started_at"])
    spec_started = datetime.fromisoformat(rec["speculative"]["started_at"])
    assert (spec_started - base_started).total_seconds() >= rec["baseline"]["time_to_healthy_s"] - 0.5
    assert "cores=None" in (env.run_dir / "baseline.log").read_text(), "no CPU binding on a GPU"
    assert "--gpu-memory-utilization" in " ".join(rec["baseline"]["command"])
    assert env.run("down").returncode == 0
    assert env.wait_no_leftovers() == []


def test_servers_read_tool_calls_with_the_models_parser_and_template() -> None:
    """The default model: our template with tools and the hermes parser; another model: its own
    template; a profile: its family's parser; an empty parser: no tool flags (vLLM then refuses tools)."""
    from servers import launcher
    from servers.__main__ import build_parser, launcher_settings
    from servers.config import SMOLLM2_TOOLS_TEMPLATE

    def args(*flags: str) -> list[str]:
        s = launcher_settings(build_parser().parse_args(["up", *flags]))
        return launcher.server_config(s, "baseline", "/m").vllm_args()

    default = args()
    assert default[default.index("--chat-template") + 1] == str(SMOLLM2_TOOLS_TEMPLATE)
    assert SMOLLM2_TOOLS_TEMPLATE.is_file()
    assert default[-3:] == ["--enable-auto-tool-choice", "--tool-call-parser", "hermes"]
    other = args("--model", "/models/other")
    assert "--chat-template" not in other and other[-1] == "hermes"
    assert args("--chat-template", "/t.jinja")[default.index("--chat-template") + 1] == "/t.jinja"
    llama = args("--profile", "llama-ngram")
    assert "--chat-template" not in llama and llama[-2:] == ["--tool-call-parser", "llama3_json"]
    assert args("--profile", "qwen3-draft")[-1] == "hermes"
    off = args("--tool-call-parser", "")
    assert "--tool-call-parser" not in off and "--enable-auto-tool-choice" not in off


def test_cli_flags_are_the_settings_fields_marked_for_the_cli() -> None:
    """The parser is built from LauncherSettings: every flag sets the field of its name (two keep a
    shorter spelling), and the spellings users and scripts know stay exactly these."""
    from servers.__main__ import build_parser, launcher_settings

    choices = next(a for a in build_parser()._actions if a.dest == "command").choices
    assert isinstance(choices, dict)  # the subparsers action maps each subcommand to its parser
    up = choices["up"]
    flags = {o for a in up._actions for o in a.option_strings if o.startswith("--")}
    assert flags == {
        "--help", "--detach", "--profile", "--host", "--baseline-port", "--speculative-port", "--run-dir",
        "--device", "--model", "--served-model-name", "--speculative-config", "--per-request-spec-metrics",
        "--dtype", "--max-model-len", "--max-num-seqs", "--baseline-cores", "--speculative-cores", "--kv-space",
        "--gpu-memory-utilization", "--extra-args", "--vllm-venv", "--vllm-python", "--cache-dir",
        "--startup-timeout", "--server-command", "--warmup", "--no-warmup", "--pin-processes", "--no-pin-processes",
        "--worker-in-engine-core", "--no-worker-in-engine-core", "--arms", "--share-arm-cores",
        "--no-share-arm-cores", "--adaptive-schedule", "--tool-call-parser", "--chat-template",
    }
    s = launcher_settings(build_parser().parse_args(["up", "--kv-space", "3", "--startup-timeout", "7.5",
                                                     "--baseline-port", "9001", "--per-request-spec-metrics", "off",
                                                     "--run-dir", "/tmp/x"]))
    assert (s.kvcache_space_gib, s.startup_timeout_s, s.baseline_port) == (3, 7.5, 9001)
    assert s.per_request_spec_metrics == "off"
    assert str(s.run_dir) == "/tmp/x"
    assert launcher_settings(build_parser().parse_args(["up", "--no-warmup"])).warmup is False
    assert launcher_settings(build_parser().parse_args(["up"])).warmup is True  # unset: the setting's default
    no_worker = launcher_settings(build_parser().parse_args(["up", "--no-worker-in-engine-core"]))
    assert no_worker.worker_in_engine_core is False
    with pytest.raises(SystemExit):
        build_parser().parse_args(["up", "--device", "tpu"])


def test_a_cpu_server_runs_its_worker_in_the_engine_core_with_openmp_placed_as_vllm_would() -> None:
    """Two processes a server: VLLM_ENABLE_V1_MULTIPROCESSING=0 keeps vLLM's CPU platform on the
    one-process executor, and the OpenMP placement vLLM gives only the workers it spawns is set
    here (docs/cpu-servers.md#processes); --no-worker-in-engine-core is the three-process layout."""
    from servers.launcher import in_process_worker_env, plan, server_env
    from servers.settings import LauncherSettings

    s = LauncherSettings(baseline_cores="0", speculative_cores="1")
    env = server_env(s, "speculative")
    assert env["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0"
    assert env["OMP_NUM_THREADS"] == "1"
    if "libiomp" in env.get("LD_PRELOAD", ""):
        assert env["KMP_AFFINITY"] == "granularity=fine,explicit,proclist=[1]"
    assert in_process_worker_env({3, 2}, iomp=True) == {
        "VLLM_ENABLE_V1_MULTIPROCESSING": "0", "OMP_NUM_THREADS": "2",
        "KMP_AFFINITY": "granularity=fine,explicit,proclist=[2,3]", "KMP_BLOCKTIME": "5", "KMP_TPAUSE": "0"}
    assert in_process_worker_env({0}, iomp=False) == {
        "VLLM_ENABLE_V1_MULTIPROCESSING": "0", "OMP_NUM_THREADS": "1", "OMP_PLACES": "{0}", "OMP_PROC_BIND": "true"}
    assert in_process_worker_env(set(), iomp=True) == {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}  # auto/nobind
    old = LauncherSettings(worker_in_engine_core=False)
    assert not {"VLLM_ENABLE_V1_MULTIPROCESSING", "OMP_NUM_THREADS", "KMP_AFFINITY"} & set(server_env(old, "baseline"))
    assert "VLLM_ENABLE_V1_MULTIPROCESSING" not in server_env(LauncherSettings(device="gpu"), "baseline")
    # The two layouts compile alike only by chance: they keep separate compile caches.
    assert plan(s, "m")[0].cache_key != plan(old, "m")[0].cache_key


def test_a_server_on_more_than_one_core_runs_its_attention_without_the_kv_split(monkeypatch) -> None:
    """vLLM's CPU attention splits one request's KV cache across the compute threads by default, which
    made a two-thread decode step 1.8-2.4x as slow (docs/cpu-servers.md, more than one core): a server
    given more than one core runs with the split off, one core keeps vLLM's default, a value in the
    environment wins, and `status` says which it runs with where it has more than one thread."""
    from servers.launcher import kernels_text, server_env
    from servers.settings import LauncherSettings

    monkeypatch.delenv("VLLM_CPU_ATTN_SPLIT_KV", raising=False)
    s = LauncherSettings(baseline_cores="0-1", speculative_cores="2,3")
    assert [server_env(s, r).get("VLLM_CPU_ATTN_SPLIT_KV") for r in ("baseline", "speculative")] == ["0", "0"]
    one = LauncherSettings(baseline_cores="0", speculative_cores="1")
    assert "VLLM_CPU_ATTN_SPLIT_KV" not in server_env(one, "baseline")
    assert "VLLM_CPU_ATTN_SPLIT_KV" not in server_env(LauncherSettings(device="gpu", baseline_cores="0-1"), "baseline")
    monkeypatch.setenv("VLLM_CPU_ATTN_SPLIT_KV", "1")
    assert server_env(s, "baseline")["VLLM_CPU_ATTN_SPLIT_KV"] == "1"

    row = {"kernels": "_C_AVX2", "compute_threads": 2, "attn_split_kv": False}
    assert kernels_text(row) == "kernels: _C_AVX2 (AVX2); compute threads: 2, KV split off"
    assert kernels_text({**row, "attn_split_kv": True}).endswith("compute threads: 2, KV split on")
    assert kernels_text({**row, "compute_threads": 1}).endswith("compute threads: 1")
    assert kernels_text({**row, "compute_threads": None}).endswith("compute threads: n/a (OMP_NUM_THREADS not set)")


def test_only_a_suffix_server_sees_arctic_inference_and_a_missing_build_names_its_command(tmp_path: Path) -> None:
    """Suffix decoding needs arctic-inference, built into a folder of its own: the launcher puts that
    folder on the PYTHONPATH of a server whose method is "suffix" and of no other (the baseline and
    n-gram run the plain venv), refuses to start a suffix arm before it is built, naming the setup
    command, and a restart by the supervisor reads the method back from the recorded command."""
    from servers import launcher
    from servers.arms import SUFFIX_CONFIG, get_arm_config
    from servers.config import NGRAM_CONFIG
    from servers.settings import LauncherSettings

    built = tmp_path / "suffix"
    (built / "arctic_inference").mkdir(parents=True)
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text("")
    s = LauncherSettings(_env_file=None, arms="ngram,suffix", share_arm_cores=True, suffix_path=built,
                         vllm_venv=venv)
    by_name = {p.name: p for p in launcher.plan(s, "m")}
    assert by_name["suffix"].env["PYTHONPATH"] == str(built.resolve())
    assert "PYTHONPATH" not in by_name["ngram"].env and "PYTHONPATH" not in by_name["baseline"].env
    assert '"method":"suffix"' in " ".join(by_name["suffix"].cmd)
    assert get_arm_config("suffix").speculative_config == SUFFIX_CONFIG
    # The supervisor's restart: the same environment, from the command alone.
    assert launcher.speculative_config_of(by_name["suffix"].cmd) == SUFFIX_CONFIG
    assert launcher.speculative_config_of(by_name["ngram"].cmd) == NGRAM_CONFIG
    assert launcher.speculative_config_of(by_name["baseline"].cmd) is None
    assert launcher.speculative_config_of(["x", "--speculative-config", "{not json"]) is None
    launcher.check_runtime(s)  # built: starts

    missing = s.model_copy(update={"suffix_path": tmp_path / "not-built"})
    with pytest.raises(launcher.LauncherError, match="suffix decoding needs arctic-inference==0.3.0") as e:
        launcher.check_runtime(missing)
    assert "bash scripts/setup_cpu_servers.sh --suffix" in str(e.value) and "suffix:" in str(e.value)
    assert "PYTHONPATH" not in launcher.server_env(missing, "speculative", "1", SUFFIX_CONFIG)
    # A pair without a suffix arm never needs the build.
    launcher.check_runtime(LauncherSettings(_env_file=None, suffix_path=tmp_path / "not-built", vllm_venv=venv))


def test_the_kernel_build_is_read_from_what_the_process_mapped() -> None:
    """`servers status` names vLLM's kernel build from /proc/PID/maps: the three builds vllm-cpu ships."""
    from servers import procs

    site = "/root/.cache/specdemo/venv-vllm/lib/python3.11/site-packages"
    def maps(name: str) -> str:
        return (f"7f00-7f10 r--p 00000000 fe:01 1 {site}/torch/lib/libtorch_cpu.so\n"
                f"7f20-7f30 r-xp 00001000 fe:01 2 {site}/vllm/{name}.abi3.so\n")
    assert [procs.kernels_in_maps(maps(n)) for n in ("_C_AVX2", "_C_AVX512", "_C")] == ["_C_AVX2", "_C_AVX512", "_C"]
    assert procs.kernels_in_maps(maps("_moe_C")) is None and procs.kernels_in_maps("") is None
    assert set(procs.KERNEL_BUILDS) == {"_C_AVX2", "_C_AVX512", "_C"}
    assert procs.kernel_build([os.getpid()]) is None  # this test's process maps no vLLM kernels
    assert procs.environ_values([os.getpid()], ("PATH", "SPECDEMO_NOT_SET_ANYWHERE")) == {"PATH": os.environ["PATH"]}
