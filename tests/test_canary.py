"""The canary's router (servers/canary/, Debian's HAProxy) in front of a stand-in pair.

Stand-in truth: each stand-in records every request it got, with its headers and body. Through
the router, with the share at 10%, 50% and 100%, 400 eligible requests split within one request of
the share (HAProxy's weighted round robin is deterministic), and ineligible ones (no header, T > 0)
never reach the speculative stand-in. A race through the router gives the same chunks and the same
decode tokens/s (within 3%) as a race direct to the servers. The share changes live, `status
--json` reads it back with the counts, `down` leaves no process. Bad input is one line each.
Skipped, saying so, without haproxy (bash scripts/install_canary.sh); fast stage.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from common.canary_rules import DEFAULT_HEADER, Condition, Eligibility, EligibilityRule
from common.paths import ROOT
from demo.race import run_race
from demo.results import Message, RaceRequest
from demo.settings import Settings
from harness.ports import free_port
from harness.standin import Standin, StandinBehavior
from servers import canary, procs

pytestmark = pytest.mark.skipif(shutil.which("haproxy") is None,
                                reason="haproxy not installed (bash scripts/install_canary.sh)")

FAST = StandinBehavior(tokens_per_s=5000, ttft_s=0.0)
# The streaming check: 100 tokens/s for 0.6 s, chunks of 1, 3, 5, 2 tokens on the speculative side.
BASE = StandinBehavior(tokens_per_s=100, ttft_s=0.01)
SPEC = StandinBehavior(tokens_per_s=100, ttft_s=0.01, speculative=True, chunk_sizes=[1, 3, 5, 2])
GREEDY_OR_HEADER = Eligibility(source="test", rules=[
    EligibilityRule(name="client-header", when=[Condition(kind="header", name=DEFAULT_HEADER, equals="1")]),
    EligibilityRule(name="greedy", when=[Condition(kind="body", field="temperature", equals=0)]),
])


def cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """``python -m servers canary ARGS`` in a subprocess."""
    return subprocess.run([sys.executable, "-m", "servers", "canary", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout, env=dict(os.environ))


class Canary:
    """A canary started by the CLI in a run dir of its own, in front of two stand-ins."""

    def __init__(self, run_dir: Path, base: Standin, spec: Standin, eligibility: Eligibility) -> None:
        self.run_dir, self.base, self.spec = run_dir, base, spec
        self.port, self.receiver_port, self.metrics_port = free_port(), free_port(), free_port()
        self.eligibility_file = run_dir.parent / f"{run_dir.name}.eligibility.json"
        self.eligibility_file.write_text(eligibility.model_dump_json())

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __call__(self, *args: str) -> subprocess.CompletedProcess[str]:
        return cli(*args, "--run-dir", str(self.run_dir))

    def up(self, *extra: str) -> subprocess.CompletedProcess[str]:
        return self("up", "--port", str(self.port), "--receiver-port", str(self.receiver_port),
                    "--metrics-port", str(self.metrics_port),
                    "--baseline-url", self.base.url, "--speculative-url", self.spec.url,
                    "--eligibility", str(self.eligibility_file), *extra)

    def status(self) -> dict[str, Any]:
        done = self("status", "--json")
        assert done.returncode == 0, done.stderr
        return dict(json.loads(done.stdout))


@pytest.fixture(scope="module")
def fast_pair() -> Iterator[tuple[Standin, Standin]]:
    with Standin(FAST) as base, Standin(FAST.model_copy(update={"speculative": True})) as spec:
        yield base, spec


@pytest.fixture(scope="module")
def router(fast_pair: tuple[Standin, Standin], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Canary]:
    c = Canary(tmp_path_factory.mktemp("canary") / "run", *fast_pair, GREEDY_OR_HEADER)
    done = c.up("--share", "10")
    assert done.returncode == 0, done.stderr
    try:
        yield c
    finally:
        state = canary.read_canary(c.run_dir)
        stopped = c("down")
        assert stopped.returncode == 0, stopped.stderr
        assert state is not None and not any(procs.is_running(p.pid, p.start_ticks) for p in state.processes)


def send(client: httpx.Client, url: str, n: int, *, eligible: bool, temperature: float = 0.7) -> list[str]:
    """n non-streamed requests; the backend that answered each (the router's response header)."""
    headers = {DEFAULT_HEADER: "1"} if eligible else {}
    got = []
    for _ in range(n):
        r = client.post(f"{url}/v1/completions", headers=headers,
                        json={"model": "smollm2", "prompt": "hi", "max_tokens": 1, "temperature": temperature})
        assert r.status_code == 200, r.text
        got.append(r.headers[canary.BACKEND_HEADER])
    return got


# ---------------------------------------------------------------- the split, on the stand-ins' truth

@pytest.mark.parametrize("share", [10, 50, 100])
def test_the_split_of_400_eligible_requests_is_the_share_within_one_request(router: Canary, share: int) -> None:
    done = router("--share", str(share))
    assert done.returncode == 0, done.stderr
    assert router.status()["share_percent"] == share
    b0, s0 = len(router.base.requests), len(router.spec.requests)
    with httpx.Client(timeout=10) as client:
        answered = send(client, router.url, 400, eligible=True)
    to_spec = len(router.spec.requests) - s0
    to_base = len(router.base.requests) - b0
    assert to_spec + to_base == 400
    assert abs(to_spec - 400 * share / 100) <= 1, (share, to_spec)  # deterministic weighted round robin
    assert answered.count("speculative") == to_spec  # the router's header says the truth


def test_ineligible_requests_never_reach_the_speculative_server(router: Canary) -> None:
    assert router("--share", "100").returncode == 0
    s0 = len(router.spec.requests)
    before = router.status()["requests"]
    with httpx.Client(timeout=10) as client:
        assert set(send(client, router.url, 50, eligible=False)) == {"baseline"}  # no header, T = 0.7
        assert set(send(client, router.url, 20, eligible=False, temperature=0.0)) == {"speculative"}  # greedy
    assert len(router.spec.requests) - s0 == 20
    for r in router.spec.requests:  # every request it ever got was eligible by one rule
        assert r.headers.get(DEFAULT_HEADER) == "1" or r.body["temperature"] == 0, r
    after = router.status()["requests"]
    assert after["ineligible"] - before["ineligible"] == 50
    assert after["speculative"] - before["speculative"] == 20


def test_status_json_has_what_a_view_needs_and_a_log_line_per_request(router: Canary) -> None:
    data = router.status()
    assert set(data) >= {"share_percent", "requests", "last_rollback", "last_event", "router_url", "processes"}
    assert data["requests"]["baseline"] == len(router.base.requests)
    assert data["requests"]["speculative"] == len(router.spec.requests)
    assert data["last_rollback"] is None and data["last_event"]["kind"] == "share"
    exported = httpx.get(data["router_metrics_url"], timeout=10).text  # HAProxy's own exporter
    spec_2xx = [ln for ln in exported.splitlines() if ln.startswith("haproxy_server_http_responses_total{")
                and 'proxy="split"' in ln and 'server="speculative"' in ln and 'code="2xx"' in ln]
    assert len(spec_2xx) == 1 and float(spec_2xx[0].rsplit(" ", 1)[1]) == len(router.spec.requests), spec_2xx
    lines = [ln for ln in (router.run_dir / "router.log").read_text().splitlines() if ln.startswith("canary rid=")]
    assert len(lines) == len(router.base.requests) + len(router.spec.requests)
    assert all(" backend=" in ln and " status=200 " in ln and " duration_ms=" in ln for ln in lines)


@pytest.mark.parametrize(("share", "answered_by"), [(100, canary.FALLBACK), (50, "baseline")])
def test_a_speculative_server_that_goes_down_sends_eligible_traffic_to_the_baseline(
        tmp_path: Path, share: int, answered_by: str) -> None:
    """No request fails: the first refused connection marks the server down and is retried on the
    baseline (at share 100, the split's fallback), without waiting for the health checks."""
    with Standin(FAST) as base, Standin(FAST.model_copy(update={"speculative": True})) as spec:
        c = Canary(tmp_path / "run", base, spec, GREEDY_OR_HEADER)
        assert (done := c.up("--share", str(share))).returncode == 0, done.stderr
        try:
            with httpx.Client(timeout=10) as client:
                assert "speculative" in send(client, c.url, 4, eligible=True)
                spec.stop()
                b0 = len(base.requests)
                assert set(send(client, c.url, 20, eligible=True)) == {answered_by}  # each answered 200
                assert len(base.requests) - b0 == 20
                assert c.status()["requests"]["fallback"] == (20 if share == 100 else 0)
        finally:
            assert c("down").returncode == 0


# ---------------------------------------------------------------- streaming passes unchanged

def test_a_race_through_the_router_streams_the_same_chunks_at_the_same_rate(tmp_path: Path) -> None:
    """The race's speculative side through the router (greedy: eligible; share 100) against the same
    race direct: the same text and chunks, decode tokens/s within 3% (median of 3 each)."""
    with Standin(BASE) as base, Standin(SPEC) as spec:
        c = Canary(tmp_path / "run", base, spec, GREEDY_OR_HEADER)
        assert (done := c.up("--share", "100")).returncode == 0, done.stderr
        try:
            req = RaceRequest(messages=[Message(role="user", content="Reformat this JSON record")], max_tokens=60,
                              temperature=0.0, order="sequential")
            direct = Settings(baseline_url=base.url, speculative_url=spec.url, save_runs=False)
            routed = Settings(baseline_url=base.url, speculative_url=c.url, save_runs=False)
            rates: dict[str, list[float]] = {"direct": [], "routed": []}
            sides = {}
            for _ in range(3):
                for name, settings in (("direct", direct), ("routed", routed)):
                    n0 = len(spec.requests)
                    side = asyncio.run(run_race(req, settings)).speculative
                    assert len(spec.requests) == n0 + 1 and side.complete, side.error
                    assert side.decode_tokens_per_s is not None
                    rates[name].append(side.decode_tokens_per_s)
                    sides[name] = side
        finally:
            assert c("down").returncode == 0
    assert sides["routed"].text == sides["direct"].text
    assert sides["routed"].tokens_per_chunk == sides["direct"].tokens_per_chunk
    assert set(sides["routed"].tokens_per_chunk) == {1, 2, 3, 5}  # multi-token chunks kept whole
    assert sides["routed"].chunks == sides["direct"].chunks
    d, r = statistics.median(rates["direct"]), statistics.median(rates["routed"])
    print(f"decode tokens/s: direct {d:.2f}, through the router {r:.2f} ({r / d - 1:+.2%})")
    assert r == pytest.approx(d, rel=0.03)


# ---------------------------------------------------------------- bad input, one line each

def one_line_error(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 1, (done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    return lines[0]


def test_a_share_outside_0_to_100_is_one_line(router: Canary) -> None:
    before = router.status()["share_percent"]
    assert "outside 0-100" in one_line_error(router("--share", "101"))
    assert "outside 0-100" in one_line_error(router("--share", "-5"))
    assert "whole percentage" in one_line_error(router("--share", "ten"))
    assert router.status()["share_percent"] == before


def test_a_canary_with_no_pair_running_is_one_line(tmp_path: Path) -> None:
    line = one_line_error(cli("up", "--run-dir", str(tmp_path / "run"), "--pair-run-dir", str(tmp_path / "none"),
                              "--port", str(free_port())))
    assert "no pair running" in line
    dead = f"http://127.0.0.1:{free_port()}"
    line = one_line_error(cli("up", "--run-dir", str(tmp_path / "run"), "--baseline-url", dead,
                              "--speculative-url", dead, "--port", str(free_port())))
    assert "no pair running" in line and "does not answer /health" in line
    assert not (tmp_path / "run" / "state.json").exists()
    assert "no canary is running" in one_line_error(cli("status", "--run-dir", str(tmp_path / "run")))
    assert "no canary is running" in one_line_error(cli("--share", "5", "--run-dir", str(tmp_path / "run")))


def test_a_second_up_on_a_running_canary_is_one_line(router: Canary) -> None:
    assert "a canary is already running" in one_line_error(router.up())
    assert router.status()["processes"]["router"]["running"]


def test_a_router_port_in_use_is_one_line(fast_pair: tuple[Standin, Standin], tmp_path: Path) -> None:
    c = Canary(tmp_path / "run", *fast_pair, GREEDY_OR_HEADER)
    c.port = fast_pair[0].port  # the baseline stand-in listens there
    line = one_line_error(c.up())
    assert f"port {c.port} on 127.0.0.1 is in use" in line and "--port" in line
    assert canary.read_canary(c.run_dir) is None


def test_an_eligibility_rule_the_router_cannot_express_is_one_line(fast_pair: tuple[Standin, Standin],
                                                                   tmp_path: Path) -> None:
    short_prompts = Eligibility(rules=[EligibilityRule(name="short-prompts", when=[
        Condition(kind="prompt_tokens", equals=256, note="prompts under 256 tokens")])])
    line = one_line_error(Canary(tmp_path / "run", *fast_pair, short_prompts).up())
    assert "'short-prompts' cannot be routed" in line and "'prompt_tokens'" in line and "can express only" in line
    injected = Eligibility(rules=[EligibilityRule(name="sneaky", when=[
        Condition(kind="header", name="x-a", equals="1\n    use_backend split")])])
    assert "needs a short value" in one_line_error(Canary(tmp_path / "run2", *fast_pair, injected).up())
    (tmp_path / "bad.json").write_text('{"rules": []}')
    line = one_line_error(cli("up", "--run-dir", str(tmp_path / "run3"), "--eligibility", str(tmp_path / "bad.json")))
    assert "is not an eligibility file: rules:" in line


def test_an_alert_the_canary_does_not_know_is_logged_and_leaves_the_share(router: Canary) -> None:
    assert router("--share", "50").returncode == 0
    body = {"version": "4", "status": "firing", "alerts": [
        {"status": "firing", "labels": {"alertname": "SpecSomethingElse", "arm": "speculative"},
         "annotations": {"value": "3"}, "startsAt": "2026-12-04T19:00:00Z"}]}
    r = httpx.post(f"http://127.0.0.1:{router.receiver_port}/alert", json=body, timeout=10)
    assert r.status_code == 200
    assert router.status()["share_percent"] == 50
    log = (router.run_dir / "receiver.log").read_text().splitlines()
    (line,) = [ln for ln in log if "SpecSomethingElse" in ln]
    assert "unknown alert SpecSomethingElse" in line and "share untouched" in line
    bad = httpx.post(f"http://127.0.0.1:{router.receiver_port}/alert", content=b"not json", timeout=10)
    assert bad.status_code == 400 and router.status()["share_percent"] == 50
