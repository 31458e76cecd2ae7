"""Settings for the demo: environment variables with the SPECDEMO_ prefix, or a .env file."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

ROOT = Path(__file__).resolve().parent.parent
# Written by `python -m servers up`: what the speculative server runs (method, k).
LAUNCHER_CLIENT_ENV = ROOT / "logs" / "servers" / "client.env"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="SPECDEMO_", env_file=".env", extra="ignore")

    baseline_url: str = "http://127.0.0.1:8000"
    speculative_url: str = "http://127.0.0.1:8001"
    # Sent as a bearer token to both servers; never logged, shown or saved.
    api_key: SecretStr | None = None
    # Served model name; discovered from /v1/models when empty.
    model: str | None = None

    connect_timeout_s: float = Field(5.0, gt=0)
    # Longest silence allowed between two chunks of a stream (also covers time to first byte).
    read_timeout_s: float = Field(60.0, gt=0)
    # Budget for small calls: /health, /v1/models, /metrics.
    probe_timeout_s: float = Field(3.0, gt=0)

    ui_host: str = "127.0.0.1"
    ui_port: int = Field(7860, ge=1, le=65535)
    ui_share: bool = False
    # "user:password" enables Gradio's login; required to bind beyond localhost or share.
    ui_auth: SecretStr | None = None
    # Races running at once in the page; more wait in a visible queue.
    max_concurrent_races: int = Field(2, ge=1)
    # The page warns when a race shows "Racing…" but nothing has arrived from the app for this long.
    ui_stall_notice_s: float = Field(15.0, ge=2)

    presets_dir: Path = ROOT / "presets"
    runs_dir: Path = ROOT / "runs"
    save_runs: bool = True

    # A workload file (or a folder's .txt/.md files together) larger than this is refused before reading.
    workload_max_bytes: int = Field(20_000_000, ge=1)
    # Price of one GPU-hour for the evaluator's cost per million output tokens; None: no cost shown.
    gpu_hour_price: float | None = Field(None, gt=0)

    # What the speculative server does, for labels ("Speculative (ngram, k=4)"),
    # when the server itself cannot tell us. The launcher writes these.
    spec_method: str | None = None
    spec_num_tokens: int | None = None

    @model_validator(mode="after")
    def _spec_from_launcher(self) -> Settings:
        """Label the speculative pane from the launcher's record when nothing says otherwise.

        Only when the speculative URL is the one the launcher started: never label a
        different server with another one's method.
        """
        if self.spec_method is not None or not LAUNCHER_CLIENT_ENV.is_file():
            return self
        try:
            lines = LAUNCHER_CLIENT_ENV.read_text(encoding="utf-8").splitlines()
        except OSError:
            return self
        found = dict(line.split("=", 1) for line in lines if "=" in line)
        if found.get("SPECDEMO_SPECULATIVE_URL", "").rstrip("/") != self.speculative_url.rstrip("/"):
            return self
        self.spec_method = found.get("SPECDEMO_SPEC_METHOD") or None
        k = found.get("SPECDEMO_SPEC_NUM_TOKENS", "")
        if self.spec_num_tokens is None and k.isdigit():
            self.spec_num_tokens = int(k)
        return self
