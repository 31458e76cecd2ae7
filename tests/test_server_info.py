"""demo/server_info.py against stand-in servers: what the server panel and banner show."""

from __future__ import annotations

import asyncio

from demo.server_info import down_message, probe_servers, terminal_report
from demo.settings import Settings
from harness.ports import free_port


def test_probe_reports_model_context_kv_and_spec_config(standin_factory) -> None:
    base = standin_factory(max_model_len=4096)
    spec = standin_factory(speculative=True, metrics_mode="malformed")
    s = Settings(baseline_url=base.url, speculative_url=spec.url, spec_method="ngram", spec_num_tokens=4,
                 probe_timeout_s=2)
    b, sp = asyncio.run(probe_servers(s))
    assert b.healthy and b.model == "smollm2" and b.max_model_len == 4096
    assert b.kv_cache_usage_perc == 0.0 and b.metrics_error is None
    assert sp.healthy and (sp.spec_method, sp.spec_num_tokens, sp.spec_source) == ("ngram", 4, "settings")
    assert sp.kv_cache_usage_perc is None and "malformed" in (sp.metrics_error or "")


def test_down_server_says_what_to_do(standin_factory) -> None:
    base = standin_factory()
    dead = f"http://127.0.0.1:{free_port()}"
    b, sp = asyncio.run(probe_servers(Settings(baseline_url=base.url, speculative_url=dead, probe_timeout_s=1)))
    assert b.healthy and not sp.healthy and sp.error == "connection refused"
    assert "python -m servers up" in down_message(sp) and dead in down_message(sp)
    assert "DOWN" in terminal_report([b, sp]) and "python -m servers up" in terminal_report([b, sp])


def test_unhealthy_status_is_reported(standin_factory) -> None:
    sick = standin_factory(health_status=503)
    spec = standin_factory(speculative=True)
    b, _ = asyncio.run(probe_servers(Settings(baseline_url=sick.url, speculative_url=spec.url, probe_timeout_s=1)))
    assert not b.healthy and b.error == "/health answered HTTP 503"
