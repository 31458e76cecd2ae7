"""Settings for the demo: environment variables with the SPECDEMO_ prefix, or a .env file."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated

from pydantic import BaseModel, Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from demo.results import Side

ROOT = Path(__file__).resolve().parent.parent
# Written by `python -m servers up`: what the speculative server runs (method, k).
LAUNCHER_CLIENT_ENV = ROOT / "logs" / "servers" / "client.env"


# An HTTP header name (RFC 9110 token); values must not carry line breaks.
_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")


class Endpoint(BaseModel):
    """One side's server as the client sees it: where, which model, and what to send with each request."""

    side: Side
    url: str
    model: str | None = None  # None: discovered from /v1/models
    api_key: SecretStr | None = None
    headers: dict[str, SecretStr] = Field(default_factory=dict)

    def request_headers(self) -> dict[str, str]:
        """The headers to send: the extra ones, then the bearer token (which wins)."""
        out = {k: v.get_secret_value() for k, v in self.headers.items()}
        if self.api_key is not None:
            out["Authorization"] = f"Bearer {self.api_key.get_secret_value()}"
        return out


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="SPECDEMO_", env_file=".env", extra="ignore")

    baseline_url: str = "http://127.0.0.1:8000"
    speculative_url: str = "http://127.0.0.1:8001"
    # Sent as a bearer token to both servers; never logged, shown or saved.
    api_key: SecretStr | None = None
    # Served model name; discovered from /v1/models when empty.
    model: str | None = None
    # Per side (gateways, managed deployments): each wins over the shared value above.
    baseline_model: str | None = None
    speculative_model: str | None = None
    baseline_api_key: SecretStr | None = None
    speculative_api_key: SecretStr | None = None
    # Extra headers sent with every request to that side, as JSON: {"X-Tenant": "acme"}.
    # Treated as secrets (a gateway key often travels in one): never logged, shown or saved.
    baseline_headers: dict[str, SecretStr] = Field(default_factory=dict)
    speculative_headers: dict[str, SecretStr] = Field(default_factory=dict)
    # A PEM file of CA certificates to trust for https endpoints (TLS verification is always on).
    ca_bundle: Path | None = None

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
    # The most users (streams per server at once) a race or a load sweep may ask for.
    max_users: int = Field(32, ge=1, le=1024)
    # Streams open at once for every viewer of the page together (races, load sweeps, the Evaluate
    # tab's sweeps; demo.live.budget); None: enough for one viewer at max_users on both servers.
    max_streams: int | None = Field(None, ge=1, le=65536)
    # The page warns when a race shows "Racing…" but nothing has arrived from the app for this long.
    ui_stall_notice_s: float = Field(15.0, ge=2)

    presets_dir: Path = ROOT / "presets"
    runs_dir: Path = ROOT / "runs"
    save_runs: bool = True
    # A run whose record is larger is not saved (the reason is logged and shown).
    max_run_file_bytes: int = Field(10_000_000, ge=1)
    # After each save, the oldest runs beyond this many, or older than this many days, are deleted
    # (a day at a booth cannot fill the disk); None: no limit. The newest good run of each preset
    # is always kept (the booth's recording).
    runs_keep_count: int | None = Field(1000, ge=1)
    runs_keep_days: float | None = Field(None, gt=0)

    # Booth mode (`python app.py --booth`): the page races a rotation of presets by itself while a
    # browser has it open, pausing between races; a visitor's click or key pauses the rotation
    # until this long without input. A server down: the newest good recording of the preset.
    booth: bool = False
    booth_pause_s: float = Field(6.0, ge=0)
    booth_idle_s: float = Field(60.0, gt=0)
    # The rotation, by preset name; empty: every preset, in the dropdown's order.
    booth_presets: list[str] = Field(default_factory=list)
    # A load turn in the rotation, after its presets: these user counts ("1,8": one user, then 8),
    # swept live with the curves (demo.live.load_stream); empty: no load turn.
    booth_load_users: Annotated[list[int], NoDecode] = Field(default_factory=list)

    # A workload file (or a folder's .txt/.md files together) larger than this is refused before reading.
    workload_max_bytes: int = Field(20_000_000, ge=1)
    # The longest prompt the app sends (a pasted prompt, a workload request, the API), checked before sending.
    max_prompt_chars: int = Field(200_000, ge=1)
    # Price of one GPU-hour for the evaluator's cost per million output tokens; None: no cost shown.
    gpu_hour_price: float | None = Field(None, gt=0)

    # What the speculative server does, for labels ("Speculative (ngram, k=4)"),
    # when the server itself cannot tell us. The launcher writes these.
    spec_method: str | None = None
    spec_num_tokens: int | None = None

    # Grafana with the pair's dashboards (compose profile `monitoring`: http://127.0.0.1:3000);
    # when set, the server panel links to it.
    grafana_url: str | None = Field(None, pattern=r"^https?://[^\s\"'<>]+$", max_length=2000)

    @field_validator("grafana_url", mode="before")
    @classmethod
    def _empty_is_unset(cls, v: object) -> object:
        return None if v == "" else v

    @field_validator("booth_load_users", mode="before")
    @classmethod
    def _users_list(cls, v: object) -> object:
        """'1,8' (or a JSON list) -> [1, 8]; each count is checked against max_users below."""
        if isinstance(v, str):
            parts = [p.strip() for p in v.strip().strip("[]").split(",") if p.strip()]
            try:
                return [int(p) for p in parts]
            except ValueError:
                raise ValueError(f"give user counts such as 1,8, not {v!r}") from None
        return v

    @model_validator(mode="after")
    def _booth_load_users_in_range(self) -> Settings:
        bad = [n for n in self.booth_load_users if not 1 <= n <= self.max_users]
        if bad:
            raise ValueError(f"booth_load_users: each count must be from 1 to max_users ({self.max_users}), "
                             f"got {bad[0]}")
        self.booth_load_users = sorted(set(self.booth_load_users))
        return self

    @field_validator("baseline_headers", "speculative_headers")
    @classmethod
    def _check_headers(cls, v: dict[str, SecretStr]) -> dict[str, SecretStr]:
        for name, value in v.items():
            if not _HEADER_NAME.match(name):
                raise ValueError(f"{name!r} is not a valid HTTP header name")
            if any(c in value.get_secret_value() for c in "\r\n"):
                raise ValueError(f"the value of header {name!r} contains a line break")
        return v

    @field_validator("ca_bundle")
    @classmethod
    def _check_ca_bundle(cls, v: Path | None) -> Path | None:
        if v is not None and not v.is_file():
            raise ValueError(f"CA bundle {v} is not a file: give the path of a PEM file of CA certificates")
        return v

    def stream_budget(self) -> int:
        """The page's budget of streams at once (max_streams, else max_users on each of the two servers)."""
        return self.max_streams if self.max_streams is not None else 2 * self.max_users

    def endpoint(self, side: Side) -> Endpoint:
        """The side's server: its own URL, model, key and headers, else the shared ones."""
        if side == "baseline":
            return Endpoint(side=side, url=self.baseline_url, model=self.baseline_model or self.model,
                            api_key=self.baseline_api_key or self.api_key, headers=self.baseline_headers)
        return Endpoint(side=side, url=self.speculative_url, model=self.speculative_model or self.model,
                        api_key=self.speculative_api_key or self.api_key, headers=self.speculative_headers)

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
