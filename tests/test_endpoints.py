"""Each side has its own endpoint: URL, model, API key and extra headers (gateways, managed
deployments), with TLS verification always on and a CA-bundle setting. Real HTTP on 127.0.0.1."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

from common.paths import ROOT
from demo.race import run_race
from demo.results import Message, RaceRequest
from demo.server_info import probe_servers
from demo.settings import Settings
from demo.sweep.models import SweepSpec
from demo.sweep.runner import new_result, run_sweep
from harness.standin import Standin, StandinBehavior

FAST = StandinBehavior(tokens_per_s=400, ttft_s=0.01)
REQ = RaceRequest(messages=[Message(role="user", content="hello")], max_tokens=12)


def _generation_requests(s: Standin) -> list:
    return [q for q in s.requests if q.path.endswith("completions")]


def test_each_side_gets_its_own_key_headers_and_model() -> None:
    with Standin(FAST.model_copy(update={"api_key": "base-key", "model": "m-base"})) as base, \
            Standin(FAST.model_copy(update={"api_key": "spec-key", "model": "m-spec", "speculative": True})) as spec:
        settings = Settings(baseline_url=base.url, speculative_url=spec.url, save_runs=False,
                            baseline_api_key="base-key", speculative_api_key="spec-key",
                            baseline_model="m-base", speculative_model="m-spec",
                            baseline_headers={"X-Tenant": "blue"}, speculative_headers={"X-Tenant": "green"})
        result = asyncio.run(run_race(REQ, settings))
        assert result.baseline.complete and result.speculative.complete
        (b,), (s,) = _generation_requests(base), _generation_requests(spec)
        sent = [(q.headers["authorization"], q.headers["x-tenant"], q.body["model"]) for q in (b, s)]
        assert sent == [("Bearer base-key", "blue", "m-base"), ("Bearer spec-key", "green", "m-spec")]
        # the server panel's probes go with each side's own key too
        infos = asyncio.run(probe_servers(settings))
        assert all(i.healthy for i in infos), [i.error for i in infos]
    for secret in ("base-key", "spec-key", "blue", "green"):
        assert secret not in result.model_dump_json()
        assert secret not in repr(settings)


def test_a_key_meant_for_one_side_is_not_sent_to_the_other() -> None:
    with Standin(FAST.model_copy(update={"api_key": "base-key"})) as base, \
            Standin(FAST.model_copy(update={"api_key": "spec-key"})) as spec:
        settings = Settings(baseline_url=base.url, speculative_url=spec.url, save_runs=False,
                            baseline_api_key="base-key")
        result = asyncio.run(run_race(REQ, settings))
    assert result.baseline.complete
    assert result.speculative.error is not None and "HTTP 401" in result.speculative.error


def test_the_shared_key_still_serves_both_sides_and_a_side_key_wins() -> None:
    s = Settings(api_key="shared", speculative_api_key="own", model="m")
    assert s.endpoint("baseline").request_headers() == {"Authorization": "Bearer shared"}
    assert s.endpoint("speculative").request_headers() == {"Authorization": "Bearer own"}
    assert s.endpoint("speculative").model == "m"


def test_sweep_sends_each_side_its_own_headers(tmp_path: Path) -> None:
    from demo.presets import load_presets

    presets, _ = load_presets(ROOT / "presets")
    with Standin(FAST.model_copy(update={"api_key": "base-key"})) as base, \
            Standin(FAST.model_copy(update={"api_key": "spec-key", "speculative": True})) as spec:
        settings = Settings(baseline_url=base.url, speculative_url=spec.url, save_runs=False,
                            baseline_api_key="base-key", speculative_api_key="spec-key",
                            speculative_headers={"X-Route": "spec-pool"})
        sw = SweepSpec(baseline_url=base.url, speculative_url=spec.url, presets=["json_reformat"],
                       concurrency=[1], repeats=1, warmup=0, max_tokens=8)
        chosen = {"json_reformat": presets["json_reformat"]}
        result = asyncio.run(run_sweep(sw, settings, new_result(sw, chosen), chosen))
        assert result.cells[0].status == "ok", result.cells[0].errors
        assert all(q.headers.get("x-route") == "spec-pool" for q in _generation_requests(spec))
        assert not any("x-route" in q.headers for q in _generation_requests(base))


@pytest.mark.parametrize(("env", "value", "says"), [
    ("SPECDEMO_BASELINE_HEADERS", '{"Bad Name": "zq-secret"}', "not a valid HTTP header name"),
    ("SPECDEMO_SPECULATIVE_HEADERS", '{"X-A": "zq-secret\\r\\nX-B: 1"}', "line break"),
    ("SPECDEMO_CA_BUNDLE", "/no/such/ca.pem", "is not a file"),
])
def test_bad_endpoint_settings_are_one_clear_line(monkeypatch: pytest.MonkeyPatch, env: str, value: str,
                                                   says: str) -> None:
    monkeypatch.setenv(env, value)
    out = subprocess.run([sys.executable, "-m", "demo", "race", "--prompt", "hi"], cwd=ROOT,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0], out.stderr
    assert "zq-secret" not in out.stderr + out.stdout  # a header value may be a credential


def test_header_flags_reach_the_server_and_are_checked() -> None:
    with Standin(FAST) as base, Standin(FAST) as spec:
        out = subprocess.run(
            [sys.executable, "-m", "demo", "race", "--prompt", "hi", "--max-tokens", "4", "--no-save", "--json",
             "--baseline-url", base.url, "--speculative-url", spec.url,
             "--baseline-header", "X-Team: a", "--speculative-header", "X-Team: b"],
            cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        assert _generation_requests(base)[0].headers["x-team"] == "a"
        assert _generation_requests(spec)[0].headers["x-team"] == "b"
    bad = subprocess.run([sys.executable, "-m", "demo", "race", "--prompt", "hi", "--baseline-header",
                          "Authorization Bearer zq-secret"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "'NAME: VALUE'" in bad.stderr
    assert "zq-secret" not in bad.stderr  # a header value may be a credential: never echoed


def test_tls_verification_uses_the_ca_bundle(tmp_path: Path) -> None:
    """An https endpoint with a self-signed certificate: refused without the CA, accepted with it."""
    trustme = pytest.importorskip("trustme")
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    ca_file = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    key_file, cert_file = tmp_path / "server.key", tmp_path / "server.pem"
    cert.private_key_pem.write_to_path(str(key_file))
    cert.cert_chain_pems[0].write_to_path(str(cert_file))
    with Standin(FAST, ssl_keyfile=key_file, ssl_certfile=cert_file) as base, \
            Standin(FAST, ssl_keyfile=key_file, ssl_certfile=cert_file) as spec:
        assert base.url.startswith("https://")
        untrusted = asyncio.run(run_race(REQ, Settings(baseline_url=base.url, speculative_url=spec.url,
                                                       save_runs=False)))
        assert untrusted.baseline.error is not None and "SPECDEMO_CA_BUNDLE" in untrusted.baseline.error
        infos = asyncio.run(probe_servers(Settings(baseline_url=base.url, speculative_url=spec.url)))
        assert "not trusted" in (infos[0].error or "")
        trusted = asyncio.run(run_race(REQ, Settings(baseline_url=base.url, speculative_url=spec.url,
                                                     save_runs=False, ca_bundle=ca_file)))
        assert trusted.baseline.complete and trusted.speculative.complete
