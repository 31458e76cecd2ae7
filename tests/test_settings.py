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
