"""A real Prometheus (Debian package) scrapes the two real CPU vLLM servers during a race, with the
scrape config `python -m servers monitor` writes; the speculative server's acceptance computed
from Prometheus' recorded counters equals the race's per-request figure. And every metric our
Grafana dashboards query exists in the live servers' /metrics.

Skipped with a reason when Prometheus is not installed (bash scripts/install_prometheus.sh).
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import httpx
import pytest
import yaml

from common.paths import ROOT
from common.sides import Side
from common.waiting import held_within, wait_for
from demo.race import run_race
from demo.results import Message, RaceRequest, RaceResult
from demo.settings import Settings
from harness.ports import free_port
from servers import monitor
from tests.promql import PROMETHEUS_SERIES, dashboard_queries, exposed_names, metric_names

pytestmark = pytest.mark.e2e
# Scrape every second here (compose: every 5 s) so the test waits seconds, not tens of seconds.
INTERVAL_S = 1
ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"
DRAFTED = "vllm:spec_decode_num_draft_tokens_total"
DRAFTS = "vllm:spec_decode_num_drafts_total"


def _host_port(url: str) -> str:
    u = urlparse(url)
    return f"{u.hostname}:{u.port}"


class Prom:
    def __init__(self, url: str) -> None:
        self.url = url

    def query(self, expr: str, at: float | None = None) -> list[dict]:
        params = {"query": expr, **({"time": f"{at:.3f}"} if at is not None else {})}
        r = httpx.get(f"{self.url}/api/v1/query", params=params, timeout=10)
        r.raise_for_status()
        body = r.json()
        assert body["status"] == "success", body
        return list(body["data"]["result"])

    def scalar(self, expr: str, at: float | None = None) -> float | None:
        result = self.query(expr, at)
        return float(result[0]["value"][1]) if result else None

    def wait_for_scrape_after(self, t: float, timeout_s: float = 60) -> None:
        """Until Prometheus holds a sample of the speculative server scraped after time ``t``."""
        def sampled() -> bool:
            ts = self.scalar(f'timestamp({DRAFTED}{{role="speculative"}})')
            return ts is not None and ts > t

        wait_for(sampled, timeout_s, "a Prometheus sample of the speculative server", poll_s=0.3)

    def counters(self) -> dict[str, float]:
        out = {}
        for name in (ACCEPTED, DRAFTED, DRAFTS):
            value = self.scalar(f'sum({name}{{job="vllm", role="speculative"}})')
            assert value is not None, f"Prometheus has no {name} for role=speculative"
            out[name] = value
        return out


@pytest.fixture(scope="module")
def guardrails_file(real_servers: Settings, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """guardrails.rules.yml as a small sweep of the real pair writes it (before Prometheus starts, so
    the race below is still the only traffic between its two counter readings)."""
    if monitor.find_prometheus() is None:
        pytest.skip("Prometheus is not installed (bash scripts/install_prometheus.sh, i.e. apt-get install prometheus)")
    out = tmp_path_factory.mktemp("guardrails-sweep")
    cmd = [sys.executable, "-m", "demo", "sweep", "--baseline-url", real_servers.baseline_url,
           "--speculative-url", real_servers.speculative_url, "--presets", "json_reformat", "--concurrency", "1",
           "--repeats", "1", "--warmup", "0", "--max-tokens", "48", "--out", str(out), "--no-progress"]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    path = out / "guardrails.rules.yml"
    assert path.exists(), done.stdout
    print(f"\n[e2e] {path.read_text()}")
    return path


@pytest.fixture(scope="module")
def prometheus(real_servers: Settings, guardrails_file: Path,
               tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prom]:
    binary = monitor.find_prometheus()
    if binary is None:
        pytest.skip("Prometheus is not installed (bash scripts/install_prometheus.sh, i.e. apt-get install prometheus)")
    tmp = tmp_path_factory.mktemp("prometheus")
    targets: dict[Side, list[str]] = {"baseline": [_host_port(real_servers.baseline_url)],
                                      "speculative": [_host_port(real_servers.speculative_url)]}
    config = monitor.scrape_config(targets, interval_s=INTERVAL_S, rule_files=[str(guardrails_file)])
    (tmp / "prometheus.yml").write_text(monitor.config_text(config))
    port = free_port()
    log = open(tmp / "prometheus.log", "wb")
    proc = subprocess.Popen([binary, f"--config.file={tmp / 'prometheus.yml'}", f"--storage.tsdb.path={tmp / 'data'}",
                             f"--web.listen-address=127.0.0.1:{port}"], stdout=log, stderr=subprocess.STDOUT)
    prom = Prom(f"http://127.0.0.1:{port}")
    try:
        def both_up() -> bool:
            if proc.poll() is not None:
                pytest.fail(f"prometheus exited ({proc.returncode}): {(tmp / 'prometheus.log').read_text()[-2000:]}")
            try:
                up = prom.query('up{job="vllm"}')
            except httpx.HTTPError:
                return False
            return len(up) == 2 and all(r["value"][1] == "1" for r in up)

        wait_for(both_up, 60, "Prometheus seeing both servers up", poll_s=0.5)
        yield prom
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def test_prometheus_counters_give_the_races_per_request_acceptance(
    prometheus: Prom, real_servers: Settings,
) -> None:
    # Nothing else talks to the servers during this test: the counters' growth is this race.
    t0 = time.time()
    prometheus.wait_for_scrape_after(t0)
    before = prometheus.counters()
    prompt = "Repeat this list exactly, one item per line: " + ", ".join(f"item-{i}" for i in range(30))
    req = RaceRequest(messages=[Message(role="user", content=prompt)], temperature=0.0, max_tokens=120,
                      order="sequential")
    result: RaceResult = asyncio.run(run_race(req, real_servers))
    prometheus.wait_for_scrape_after(time.time())
    after = prometheus.counters()
    spec = result.speculative.spec
    assert result.speculative.error is None and spec is not None and spec.source == "per_request", result.speculative
    accepted, drafted, drafts = (int(after[n] - before[n]) for n in (ACCEPTED, DRAFTED, DRAFTS))
    print(f"\n[e2e] Prometheus: accepted {accepted} / drafted {drafted} over {drafts} drafts; "
          f"per request: {spec.accepted_tokens} / {spec.draft_tokens} over {spec.drafts}")
    assert drafted > 0
    assert (accepted, drafted, drafts) == (spec.accepted_tokens, spec.draft_tokens, spec.drafts)
    assert spec.acceptance_rate == pytest.approx(accepted / drafted, abs=1e-9)
    # (Not compared: rate()/increase() over the race, which Prometheus extrapolates to the window's
    # edges; the raw counters above are the exact record.)


def test_prometheus_loads_the_generated_guardrails_and_evaluates_them_healthy(
    prometheus: Prom, guardrails_file: Path,
) -> None:
    (group,) = yaml.safe_load(guardrails_file.read_text())["groups"]
    want = {r["alert"] for r in group["rules"]}
    assert "SpecAcceptanceBelowFloor" in want and "SpecTokenLatencyP95AboveBaseline" in want, want
    loaded: dict[str, Any] = {}

    def healthy() -> bool:  # health is "unknown" until a rule's first evaluation (every INTERVAL_S here)
        nonlocal loaded
        r = httpx.get(f"{prometheus.url}/api/v1/rules", params={"type": "alert"}, timeout=10)
        r.raise_for_status()
        loaded = {rule["name"]: rule for g in r.json()["data"]["groups"] for rule in g["rules"]}
        return set(loaded) == want and all(rule["health"] == "ok" for rule in loaded.values())

    if not held_within(healthy, 60, poll_s=0.5):
        pytest.fail(f"rules not loaded and healthy within 60 s: "
                    f"{ {n: (x['health'], x.get('lastError')) for n, x in loaded.items()} }, want {sorted(want)}")
    print(f"\n[e2e] guardrails loaded, healthy: {sorted(loaded)} "
          f"(states: { {n: x['state'] for n, x in loaded.items()} })")
    for rule in loaded.values():
        assert rule["annotations"]["source"] == "results.json" and rule["duration"] == 600


def test_every_dashboard_metric_is_in_the_live_servers_metrics(real_servers: Settings) -> None:
    live: set[str] = set()
    for url in (real_servers.baseline_url, real_servers.speculative_url):
        live |= exposed_names(httpx.get(f"{url}/metrics", timeout=10).text)
    for path in sorted((ROOT / "monitoring" / "grafana" / "dashboards").glob("*.json")):
        names = set().union(*(metric_names(q) for q in dashboard_queries(json.loads(path.read_text()))))
        names -= PROMETHEUS_SERIES
        assert names and names <= live, f"{path.name}: not in the live /metrics: {sorted(names - live)}"


def test_prometheus_binary_is_the_one_monitor_finds() -> None:
    if shutil.which("prometheus") is None:
        pytest.skip("Prometheus is not installed (bash scripts/install_prometheus.sh)")
    assert monitor.find_prometheus() == shutil.which("prometheus")
