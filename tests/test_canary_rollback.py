"""The canary's rollback end to end, the real path: Prometheus evaluates the evaluator's acceptance
rule, Alertmanager routes the alert to the canary's webhook receiver, the share goes to 0.

The rules are the evaluator's own (demo/sweep/guardrails.py) for the stand-in's measured acceptance
(7/16), loaded by `python -m servers canary up --rules` with ``--alert-for 2s --alert-window 5s``
and a 1 s scrape. Eligible streams run through the router at share 50 all along; the speculative
stand-in then degrades (every step accepts nothing: acceptance 0), the rule fires, the share goes to
0; no request fails meanwhile, and none reaches the speculative stand-in after. The time from the
degradation to share 0 is printed and bounded. A resolved alert leaves the share at 0 (recovery is
manual). Skipped, saying so, without haproxy, prometheus or prometheus-alertmanager
(scripts/install_prometheus.sh, scripts/install_canary.sh); fast stage.
"""

from __future__ import annotations

import shutil
import threading
import time
from pathlib import Path

import httpx
import pytest

from common.canary_rules import DEFAULT_HEADER
from common.waiting import wait_for
from demo.sweep.guardrails import guardrails, rules_text
from demo.sweep.measured import Measured
from harness.ports import free_port
from harness.standin import Standin, StandinBehavior
from tests.test_canary import GREEDY_OR_HEADER, Canary

# The canary's whole alert path on this machine, or the module is skipped with the reason (the view's too).
NEEDS_ALERT_PATH = pytest.mark.skipif(
    any(shutil.which(b) is None for b in ("haproxy", "prometheus", "prometheus-alertmanager")),
    reason="haproxy, prometheus or prometheus-alertmanager not installed "
           "(bash scripts/install_prometheus.sh; bash scripts/install_canary.sh)")
pytestmark = NEEDS_ALERT_PATH

# k = 4; steps of 1, 3, 5, 2 tokens accept 0, 2, 4, 1 drafts: acceptance 7/16.
SPEC = StandinBehavior(tokens_per_s=400, ttft_s=0.01, speculative=True, chunk_sizes=[1, 3, 5, 2])
BASE = StandinBehavior(tokens_per_s=200, ttft_s=0.01)
DEGRADED = [1]  # every step accepts none of its 4 drafts: acceptance 0
ROLLBACK_BOUND_S = 60.0  # 5 s window, 2 s for, 1 s scrapes and evaluations, Alertmanager's 0 s group wait


class Traffic:
    """Eligible streamed requests through the router, one after another in a thread, until stopped;
    counts each answer, and each failure with its reason."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.ok = 0
        self.failures: list[str] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with httpx.Client(timeout=10) as client:
            while not self.stop.is_set():
                try:
                    with client.stream("POST", f"{self.url}/v1/completions", headers={DEFAULT_HEADER: "1"},
                                       json={"model": "smollm2", "prompt": "hi", "max_tokens": 24,
                                             "temperature": 0.7, "stream": True}) as r:
                        body = r.read().decode()
                    if r.status_code != 200 or not body.rstrip().endswith("data: [DONE]"):
                        self.failures.append(f"status {r.status_code}: {body[-80:]!r}")
                    else:
                        self.ok += 1
                except httpx.HTTPError as e:
                    self.failures.append(repr(e))

    def __enter__(self) -> Traffic:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(timeout=20)


def test_a_fired_guardrail_rolls_the_share_to_0_through_prometheus_and_alertmanager(tmp_path: Path) -> None:
    measured = Measured(source="results.json", measured_on="2026-12-04", arm="speculative", cells=1,
                        acceptance_rate=7 / 16, users=1, top_users=1)
    rules = tmp_path / "guardrails.rules.yml"
    rules.write_text(rules_text([guardrails(measured)]))  # the acceptance rule; the others have no figure
    with Standin(BASE) as base, Standin(SPEC) as spec:
        c = Canary(tmp_path / "run", base, spec, GREEDY_OR_HEADER)
        prom_port, am_port = free_port(), free_port()
        done = c.up("--share", "50", "--rules", str(rules), "--alert-for", "2s", "--alert-window", "5s",
                    "--prometheus-port", str(prom_port), "--alertmanager-port", str(am_port))
        assert done.returncode == 0, done.stderr
        assert "SpecAcceptanceBelowFloor" in done.stdout and "recovery is manual" in done.stdout
        prom = f"http://127.0.0.1:{prom_port}"
        try:
            staged = (c.run_dir / "guardrails.rules.yml").read_text()
            assert "for: 2s" in staged and "[5s]" in staged and "[5m]" not in staged
            with Traffic(c.url) as traffic:
                def judged_healthy() -> bool:  # the rule has data, and it holds: inactive
                    r = httpx.get(f"{prom}/api/v1/query", timeout=5, params={"query": (
                        'sum(rate(vllm:spec_decode_num_accepted_tokens_total{arm="speculative"}[5s]))'
                        ' / sum(rate(vllm:spec_decode_num_draft_tokens_total{arm="speculative"}[5s]))')})
                    result = r.json()["data"]["result"]
                    return bool(result) and float(result[0]["value"][1]) == pytest.approx(7 / 16, abs=0.05)
                wait_for(judged_healthy, 60, "Prometheus reads the stand-in's acceptance 7/16 through the router")
                assert c.status()["share_percent"] == 50

                spec.behavior.chunk_sizes = DEGRADED
                t_degraded = time.monotonic()
                wait_for(lambda: c.status()["share_percent"] == 0, ROLLBACK_BOUND_S,
                         "the guardrail fired and the receiver set the share to 0")
                took_s = time.monotonic() - t_degraded
                print(f"degradation to share 0: {took_s:.1f} s (window 5s, for 2s, scrape 1s; bound "
                      f"{ROLLBACK_BOUND_S:g} s)")
                n_spec = len(spec.requests)
                ok_at_rollback = traffic.ok
                wait_for(lambda: traffic.ok >= ok_at_rollback + 20, 30, "20 more requests after the rollback")
            assert traffic.failures == [], traffic.failures[:3]
            assert len(spec.requests) <= n_spec + 1  # at most the one in flight when the weight changed
            status = c.status()
            rb = status["last_rollback"]
            assert rb["alert"] == "SpecAcceptanceBelowFloor" and rb["share_before"] == 50 and rb["share_after"] == 0
            assert float(rb["value"]) < 7 / 16 * 0.85 and rb["by"] == "alertmanager" and rb["starts_at"]
            # The canary's Prometheus scrapes the router's exporter too: the split as it ran, per server.
            r = httpx.get(f"{prom}/api/v1/query", timeout=5, params={
                "query": 'sum by (server) (haproxy_server_http_responses_total{job="canary-router", proxy="split"})'})
            served = {x["metric"]["server"]: float(x["value"][1]) for x in r.json()["data"]["result"]}
            assert served.get("speculative", 0) > 0 and served.get("baseline", 0) > 0, served
            log = (c.run_dir / "receiver.log").read_text()
            assert "rollback: SpecAcceptanceBelowFloor fired" in log and "share 50% -> 0%" in log
            # No traffic reaches the speculative stand-in now: its acceptance has no data, the alert
            # resolves, Alertmanager says so, and the share stays at 0.
            wait_for(lambda: "resolved SpecAcceptanceBelowFloor" in (c.run_dir / "receiver.log").read_text(), 60,
                     "Alertmanager's resolved notice at the receiver")
            assert c.status()["share_percent"] == 0 and c.status()["last_event"]["kind"] == "resolved"
        finally:
            assert c("down").returncode == 0
