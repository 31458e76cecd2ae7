"""Settings: environment, defaults, and the pane label taken from the launcher's record."""

from __future__ import annotations

from pathlib import Path

import pytest

import demo.settings as settings_mod
from demo.settings import Settings


def test_defaults_bind_localhost_and_the_two_ports(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)  # no .env here
    monkeypatch.setattr(settings_mod, "LAUNCHER_CLIENT_ENV", tmp_path / "none.env")
    s = Settings()
    assert (s.baseline_url, s.speculative_url) == ("http://127.0.0.1:8000", "http://127.0.0.1:8001")
    assert (s.ui_host, s.ui_port, s.ui_share, s.ui_auth) == ("127.0.0.1", 7860, False, None)
    assert s.api_key is None and s.spec_method is None


def test_environment_wins_and_the_key_stays_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECDEMO_BASELINE_URL", "http://10.0.0.5:9000")
    monkeypatch.setenv("SPECDEMO_API_KEY", "k-123")
    s = Settings()
    assert s.baseline_url == "http://10.0.0.5:9000"
    assert "k-123" not in repr(s) and "k-123" not in s.model_dump_json()


def test_spec_label_from_the_launcher_record_only_for_its_server(monkeypatch: pytest.MonkeyPatch,
                                                                  tmp_path: Path) -> None:
    record = tmp_path / "client.env"
    record.write_text("SPECDEMO_BASELINE_URL=http://127.0.0.1:8000\nSPECDEMO_SPECULATIVE_URL=http://127.0.0.1:8001\n"
                      "SPECDEMO_SPEC_METHOD=ngram\nSPECDEMO_SPEC_NUM_TOKENS=4\n")
    monkeypatch.setattr(settings_mod, "LAUNCHER_CLIENT_ENV", record)
    s = Settings()
    assert (s.spec_method, s.spec_num_tokens) == ("ngram", 4)
    other = Settings(speculative_url="http://127.0.0.1:9001")
    assert (other.spec_method, other.spec_num_tokens) == (None, None)
    explicit = Settings(spec_method="eagle3", spec_num_tokens=3)
    assert (explicit.spec_method, explicit.spec_num_tokens) == ("eagle3", 3)


def test_the_verification_step_cost_comes_from_the_launcher_record_for_its_server(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    record = tmp_path / "client.env"
    monkeypatch.setattr(settings_mod, "LAUNCHER_CLIENT_ENV", record)
    pair = "SPECDEMO_BASELINE_URL=http://127.0.0.1:8000\nSPECDEMO_SPECULATIVE_URL=http://127.0.0.1:8001\n"
    record.write_text(pair + "SPECDEMO_SPEC_METHOD=ngram\nSPECDEMO_SPEC_STEP_COST=0.87\n")
    s = Settings()
    assert s.spec_step_cost == 0.87 and s.arm_endpoints()[0].step_cost == 0.87
    assert Settings(speculative_url="http://127.0.0.1:9001").spec_step_cost is None  # not the launcher's server
    for bad in ("", "fast", "0", "-1", "nan", "inf"):  # not timed, or a hand-edited line: the bound stays 1
        record.write_text(pair + f"SPECDEMO_SPEC_STEP_COST={bad}\n")
        assert Settings().spec_step_cost is None, bad
    # With arms, each arm's own cost from its SPECDEMO_ARMS entry.
    arms = ('[{"name":"ngram","url":"http://127.0.0.1:8001","step_cost":0.87},'
            '{"name":"ngram-k2","url":"http://127.0.0.1:8002","step_cost":0.95}]')
    record.write_text(pair + f"SPECDEMO_ARMS={arms}\nSPECDEMO_SPEC_STEP_COST=0.87\n")
    assert [e.step_cost for e in Settings().arm_endpoints()] == [0.87, 0.95]


def test_grafana_url_from_the_environment_must_be_http(monkeypatch: pytest.MonkeyPatch) -> None:
    from pydantic import ValidationError

    monkeypatch.setenv("SPECDEMO_GRAFANA_URL", "http://127.0.0.1:3000/d/specdemo-pair")
    assert Settings(_env_file=None).grafana_url == "http://127.0.0.1:3000/d/specdemo-pair"
    for bad in ("javascript:alert(1)", 'http://x/"><b>', "ftp://host/"):
        monkeypatch.setenv("SPECDEMO_GRAFANA_URL", bad)
        with pytest.raises(ValidationError, match="grafana_url"):
            Settings(_env_file=None)
    monkeypatch.setenv("SPECDEMO_GRAFANA_URL", "")  # compose passes an empty value through
    assert Settings(_env_file=None).grafana_url is None
