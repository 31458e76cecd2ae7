"""Settings for the demo: environment variables with the SPECDEMO_ prefix, or a .env file."""

from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from common.arm_name import ARM_NAME, ARM_NAME_MAX_CHARS, check_arm_name
from common.paths import ROOT
from demo.limits import CONCURRENCY_LIMIT
from demo.results import Side

# Written by `python -m servers up`: what the speculative server runs (method, k).
LAUNCHER_CLIENT_ENV = ROOT / "logs" / "servers" / "client.env"


# An HTTP header name (RFC 9110 token); values must not carry line breaks.
_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")


MAX_ARMS = 3  # speculative servers raced against one baseline
FIRST_ARM_DEFAULT = "speculative"  # the first arm's name when nothing names its method


class Endpoint(BaseModel):
    """One side's server as the client sees it: where, which model, and what to send with each request.

    ``side`` stays baseline | speculative (the role); every arm (speculative server) is a
    ``speculative`` endpoint and carries its own ``arm`` name and page ``label``."""

    side: Side
    url: str
    arm: str | None = None  # the arm's name (speculative endpoints from arm_endpoints())
    label: str | None = None  # the arm's label for the page; None: its name
    method: str | None = None  # the arm's speculative method, when known (labels only)
    # The arm's verification step in the baseline's plain steps, timed by `servers up` at warm-up;
    # None: not known (a server the launcher did not start). Under 1 it lifts the efficiency bound.
    step_cost: float | None = None
    model: str | None = None  # None: discovered from /v1/models
    api_key: SecretStr | None = None
    headers: dict[str, SecretStr] = Field(default_factory=dict)

    def request_headers(self) -> dict[str, str]:
        """The headers to send: the extra ones, then the bearer token (which wins)."""
        out = {k: v.get_secret_value() for k, v in self.headers.items()}
        if self.api_key is not None:
            out["Authorization"] = f"Bearer {self.api_key.get_secret_value()}"
        return out


def arm_slug(text: str) -> str:
    """A method's name as an arm name: 'EAGLE3' -> 'eagle3', 'draft_model' -> 'draft-model'."""
    slug = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")[:ARM_NAME_MAX_CHARS]
    return slug if slug and ARM_NAME.match(slug) and slug != "baseline" else FIRST_ARM_DEFAULT


def arm_key_env(name: str) -> str:
    """The environment variable holding an arm's API key: SPECDEMO_ARM_<NAME>_API_KEY ('-' as '_')."""
    return f"SPECDEMO_ARM_{name.upper().replace('-', '_')}_API_KEY"


class ArmSetting(BaseModel):
    """One arm of SPECDEMO_ARMS: a speculative server raced against the baseline. Its API key is
    never here: SPECDEMO_ARM_<NAME>_API_KEY, else the shared SPECDEMO_API_KEY."""

    model_config = {"extra": "forbid"}

    name: str
    url: str = Field(min_length=1)
    model: str | None = None  # served model name; None: SPECDEMO_MODEL, else discovered
    headers: dict[str, SecretStr] = Field(default_factory=dict)
    label: str | None = Field(None, max_length=60)
    method: str | None = Field(None, max_length=40)
    step_cost: float | None = Field(None, gt=0)  # as Endpoint.step_cost: the launcher writes it

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        return check_arm_name(v)

    @field_validator("headers")
    @classmethod
    def _headers(cls, v: dict[str, SecretStr]) -> dict[str, SecretStr]:
        return check_headers(v)


def check_headers(v: dict[str, SecretStr]) -> dict[str, SecretStr]:
    """Return ``v`` when every name is a valid HTTP header name and no value has a line break.

    Raises ValueError (one line) otherwise.
    """
    for name, value in v.items():
        if not _HEADER_NAME.match(name):
            raise ValueError(f"{name!r} is not a valid HTTP header name")
        if any(c in value.get_secret_value() for c in "\r\n"):
            raise ValueError(f"the value of header {name!r} contains a line break")
    return v


def same_url(a: str, b: str) -> bool:
    """True when ``a`` and ``b`` are the same URL up to a trailing slash."""
    return a.rstrip("/") == b.rstrip("/")


class Settings(BaseSettings):
    """The demo's settings (SPECDEMO_* variables and .env).

    The servers, the arms, timeouts, limits, booth mode and where runs are saved.

    ``endpoint(side)`` and ``arm_endpoints()`` give each server as the client sees it.
    """
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
    # More speculative servers (arms) to race against the baseline, as JSON: [{"name": "eagle3", "url":
    # "http://gpu:8002", "model": ..., "headers": {...}, "label": ..., "method": ...}]. The first arm is always
    # SPECDEMO_SPECULATIVE_URL (an entry with that URL names it); at most 3 arms in all (arm_endpoints).
    arms: list[ArmSetting] = Field(default_factory=list)
    # A PEM file of CA certificates to trust for https endpoints (TLS verification is always on).
    ca_bundle: Path | None = None
    # A Ray cluster to send the load, rate and evaluator sweeps' requests from (--ray ADDRESS; "auto":
    # the cluster this machine belongs to): its workers share each step out (demo/load/fleet.py).
    # None: this process sends them. Needs requirements-ray.txt; the page never uses it.
    ray_address: str | None = None
    ray_workers: int | None = Field(None, ge=1, le=256)  # default: one per node of the cluster

    connect_timeout_s: float = Field(5.0, gt=0)
    # Longest silence allowed between two chunks of a stream (also covers time to first byte) before
    # the client asks the server's /metrics whether it is working on the request (demo.client).
    read_timeout_s: float = Field(60.0, gt=0)
    # The longest a quiet stream waits on a server whose /metrics says it is working on it (a long
    # prefill, a JSON schema's grammar being built): past this, stalled however busy it says it is.
    prefill_wait_max_s: float = Field(600.0, gt=0)
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
    max_users: int = Field(32, ge=1, le=CONCURRENCY_LIMIT)
    # Streams open at once for every viewer of the page together (races, load sweeps, the Evaluate
    # tab's sweeps; demo.live.budget); None: enough for one viewer at max_users on both servers.
    max_streams: int | None = Field(None, ge=1, le=65536)
    # The page warns when a race shows "Racing…" but nothing has arrived from the app for this long.
    ui_stall_notice_s: float = Field(15.0, ge=2)

    presets_dir: Path = ROOT / "presets"
    # The canary's run dir (`python -m servers canary up --run-dir`, default logs/canary): the Canary tab reads it.
    canary_run_dir: Path = ROOT / "logs" / "canary"
    # The preset the Race tab opens on (app.py --preset; scripts/demo.sh --agents: agent_session);
    # None: json_reformat, the copy-heavy one. A name that is no preset is said in the page's banner.
    ui_preset: str | None = None
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

    # What the servers run on. On a CPU the servers share the machine's cores: a race of two or more
    # arms then defaults to sequential order on the page (a simultaneous one would measure the sharing).
    # `python -m servers up` starts CPU servers (its default device); set "gpu" for GPU servers.
    server_device: Literal["cpu", "gpu"] = "cpu"

    # What the speculative server does, for labels ("Speculative (ngram, k=4)"),
    # when the server itself cannot tell us. The launcher writes these.
    spec_method: str | None = None
    spec_num_tokens: int | None = None
    # A verification step in the baseline's plain steps on the servers' host, timed by the launcher at
    # warm-up (servers/warmup.py): under 1, a race's efficiency may exceed 1 without being unfair
    # (demo.measure.over_bound). Read only for the speculative URL the launcher started.
    spec_step_cost: float | None = Field(None, gt=0)

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
        return check_headers(v)

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

    def arm_endpoints(self) -> list[Endpoint]:
        """Every arm (speculative server) in its order, each with its name: the first is
        SPECDEMO_SPECULATIVE_URL (named by an ``arms`` entry with that URL, else by spec_method, else
        "speculative"), then the other entries of ``arms``. An arm's key: SPECDEMO_ARM_<NAME>_API_KEY,
        else (first arm) SPECDEMO_SPECULATIVE_API_KEY, else SPECDEMO_API_KEY."""
        first = self.endpoint("speculative")
        mine = next((a for a in self.arms if same_url(a.url, self.speculative_url)), None)
        first.arm = mine.name if mine else arm_slug(self.spec_method) if self.spec_method else FIRST_ARM_DEFAULT
        first.method = (mine.method if mine else None) or self.spec_method
        first.step_cost = (mine.step_cost if mine else None) or self.spec_step_cost
        if mine is not None:
            first.label = mine.label
            first.model = mine.model or first.model
            first.headers = mine.headers or first.headers
        out = [first]
        for a in self.arms:
            if a is mine:
                continue
            out.append(Endpoint(side="speculative", url=a.url, arm=a.name, label=a.label, method=a.method,
                                step_cost=a.step_cost, model=a.model or self.model, api_key=self.api_key,
                                headers=a.headers))
        for e in out:
            assert e.arm is not None
            key = os.environ.get(arm_key_env(e.arm))
            if key:
                e.api_key = SecretStr(key)
        return out

    @model_validator(mode="after")
    def _spec_from_launcher(self) -> Settings:
        """Label the speculative pane from the launcher's record when nothing says otherwise.

        Only when the speculative URL is the one the launcher started: never label a
        different server with another one's method. When it started arms (`up --arms`) and no
        arms are set, its SPECDEMO_ARMS line gives them. Its verification step cost
        (SPECDEMO_SPEC_STEP_COST, timed at warm-up) is taken the same way.
        """
        if (self.spec_method is not None and self.arms) or not LAUNCHER_CLIENT_ENV.is_file():
            return self
        try:
            lines = LAUNCHER_CLIENT_ENV.read_text(encoding="utf-8").splitlines()
        except OSError:
            return self
        found = dict(line.split("=", 1) for line in lines if "=" in line)
        if found.get("SPECDEMO_SPECULATIVE_URL", "").rstrip("/") != self.speculative_url.rstrip("/"):
            return self
        if not self.arms and found.get("SPECDEMO_ARMS"):
            try:
                self.arms = [ArmSetting.model_validate(a) for a in json.loads(found["SPECDEMO_ARMS"])]
            except (ValueError, TypeError):
                pass  # a hand-edited line: the arms are not picked up, the pair still is
        if self.spec_step_cost is None:
            try:
                cost = float(found.get("SPECDEMO_SPEC_STEP_COST", ""))
            except ValueError:
                cost = math.nan  # absent (not timed) or hand-edited: the bound stays 1
            self.spec_step_cost = cost if math.isfinite(cost) and cost > 0 else None
        if self.spec_method is not None:
            return self
        self.spec_method = found.get("SPECDEMO_SPEC_METHOD") or None
        k = found.get("SPECDEMO_SPEC_NUM_TOKENS", "")
        if self.spec_num_tokens is None and k.isdigit():
            self.spec_num_tokens = int(k)
        return self

    @model_validator(mode="after")
    def _check_arms(self) -> Settings:
        """At most MAX_ARMS arms, each name once (the first arm's name counted)."""
        names = [e.arm for e in self.arm_endpoints()]
        if len(names) > MAX_ARMS:
            raise ValueError(f"{len(names)} arms ({', '.join(map(str, names))}): at most {MAX_ARMS} speculative "
                             "servers can race one baseline")
        dup = next((n for i, n in enumerate(names) if n in names[:i]), None)
        if dup is not None:
            raise ValueError(f"two arms are called {dup!r}: give each arm its own name")
        return self
