"""Security defaults of the page, checked on the real process (app.py in a subprocess).

- It listens on 127.0.0.1 unless told otherwise (the listening socket, read from /proc).
- A login from settings (SPECDEMO_UI_AUTH) guards the page and its API: without it nothing
  is served and no request reaches a server.
- The vLLM API key reaches the servers as a bearer token but never the app's logs, the page's
  HTML or config, the frames sent to the browser, or saved runs.
- Preset files are data: YAML tags that would run code are refused.
The launch arguments and the exposure warning are unit-tested in tests/test_ui_app.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from benchmarks.load_test import PageApi, RaceOutcome, race_once, run_async
from demo.presets import load_presets
from harness.app_process import AppProcess, start_together
from harness.standin import Standin, StandinBehavior

API_KEY = "sk-specdemo-TEST-7f3a9c1e5b"
USER, PASSWORD = "stage", "pw-Q8v2-secret"


def _keyed_pair() -> tuple[Standin, Standin]:
    """Two stand-ins that refuse any request without ``Authorization: Bearer API_KEY``."""
    return (Standin(StandinBehavior(tokens_per_s=400, api_key=API_KEY)).start(),
            Standin(StandinBehavior(speculative=True, tokens_per_s=800, chunk_sizes=[1, 3], api_key=API_KEY)).start())


@dataclass
class Setup:
    """One test's own pair of keyed stand-ins and its own app, configured for it."""

    base: Standin
    spec: Standin
    app: AppProcess
    tmp: Path


@pytest.fixture(scope="module")
def setups(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Setup]]:
    """Per test its own stand-in pair (fresh counters) and app, all apps started together before
    the first test (harness/app_process.py, start_together); each test stops its app."""
    pairs: dict[str, tuple[Standin, Standin]] = {}
    try:
        tmp = {name: tmp_path_factory.mktemp(name) for name in ("bind", "login", "key", "limits")}
        for name in tmp:
            pairs[name] = _keyed_pair()
        apps = start_together({
            # no SPECDEMO_UI_HOST at all: the real default binding
            "bind": {"env": _env(*pairs["bind"], SPECDEMO_SAVE_RUNS="false"), "log_path": tmp["bind"] / "app.log",
                     "pin_host": False},
            "login": {"env": _env(*pairs["login"], SPECDEMO_UI_AUTH=f"{USER}:{PASSWORD}", SPECDEMO_SAVE_RUNS="false"),
                      "log_path": tmp["login"] / "app.log"},
            "key": {"env": _env(*pairs["key"], SPECDEMO_RUNS_DIR=str(tmp["key"] / "runs")),
                    "log_path": tmp["key"] / "app.log"},
            "limits": {"env": _env(*pairs["limits"], SPECDEMO_SAVE_RUNS="false"),
                       "log_path": tmp["limits"] / "app.log"},
        })
        yield {name: Setup(*pairs[name], apps[name], tmp[name]) for name in tmp}
        for app in apps.values():
            app.stop()
    finally:
        for pair in pairs.values():
            for server in pair:
                server.stop()


def _env(base: Standin, spec: Standin, **extra: str) -> dict[str, str]:
    return {"SPECDEMO_BASELINE_URL": base.url, "SPECDEMO_SPECULATIVE_URL": spec.url,
            "SPECDEMO_API_KEY": API_KEY, **extra}


def _listen_addresses(port: int) -> set[str]:
    """Hex local addresses of sockets listening on ``port`` (Linux /proc/net/tcp and tcp6)."""
    found = set()
    for name in ("tcp", "tcp6"):
        path = Path("/proc/net") / name
        if path.exists():
            for line in path.read_text().splitlines()[1:]:
                fields = line.split()
                host, port_hex = fields[1].rsplit(":", 1)
                if fields[3] == "0A" and int(port_hex, 16) == port:  # 0A = LISTEN
                    found.add(host)
    return found


async def _race_via_api(client: httpx.AsyncClient, prompt: str) -> tuple[RaceOutcome, str]:
    """One race through the page's own Gradio API; returns the outcome and the raw event stream."""
    raw: list[str] = []
    page = PageApi((await client.get("/config")).json())
    out = RaceOutcome(user=0, index=0, prompt=prompt)
    await race_once(client, page, out, max_tokens=20, timeout_s=60)
    # The same race once more, read raw, for the secret check on what the browser receives.
    join = await client.post("/gradio_api/queue/join", json={
        "data": [None, prompt, 0.0, 20, "simultaneous", None, 1], "fn_index": page.race_id,
        "session_hash": "rawcheck", "event_data": None, "trigger_id": None})
    join.raise_for_status()
    async with client.stream("GET", "/gradio_api/queue/data", params={"session_hash": "rawcheck"}) as resp:
        async for line in resp.aiter_lines():
            raw.append(line)
            if "process_completed" in line:
                break
    return out, "\n".join(raw)


@pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="reads the listening socket from Linux /proc")
def test_default_bind_is_localhost_only(setups: dict[str, Setup]) -> None:
    app = setups["bind"].app  # started with no SPECDEMO_UI_HOST at all: the real default binding
    try:
        addrs = _listen_addresses(app.port)
        assert addrs == {"0100007F"}, f"expected only 127.0.0.1 listening, got {addrs}"
        assert "WARNING" not in app.output()  # no exposure warning for a local page
    finally:
        app.stop()


def test_login_from_settings_guards_the_page_and_its_api(setups: dict[str, Setup]) -> None:
    base, spec, app = setups["login"].base, setups["login"].spec, setups["login"].app  # SPECDEMO_UI_AUTH set
    try:
        url = app.url.rstrip("/")
        with httpx.Client(base_url=url, trust_env=False, timeout=10) as anon:
            assert anon.get("/config").status_code == 401
            join = anon.post("/gradio_api/queue/join", json={
                "data": [None, "hi", 0.0, 10, "simultaneous", None, 1], "fn_index": 2, "session_hash": "anon",
                "event_data": None, "trigger_id": None})
            assert join.status_code in (401, 403), join.text
            bad = anon.post("/login", data={"username": USER, "password": "wrong"})
            assert bad.status_code in (400, 401), bad.text
            assert anon.get("/config").status_code == 401
        assert (base.started, spec.started) == (0, 0)  # nothing reached a server
        assert PASSWORD not in app.output()

        async def logged_in() -> RaceOutcome:
            async with httpx.AsyncClient(base_url=url, trust_env=False, timeout=30) as client:
                r = await client.post("/login", data={"username": USER, "password": PASSWORD})
                assert r.status_code == 200, r.text
                config = (await client.get("/config")).text
                assert PASSWORD not in config and API_KEY not in config
                out, _raw = await _race_via_api(client, "Logged in: say hello.")
                return out

        assert run_async(logged_in()).state == "done"
        assert base.started >= 1 and spec.started >= 1
    finally:
        app.stop()


def test_api_key_reaches_the_servers_and_nowhere_else(setups: dict[str, Setup]) -> None:
    base, spec, app = setups["key"].base, setups["key"].spec, setups["key"].app
    runs = setups["key"].tmp / "runs"  # the app's SPECDEMO_RUNS_DIR
    try:
        url = app.url.rstrip("/")

        async def go() -> tuple[RaceOutcome, str, str, str]:
            async with httpx.AsyncClient(base_url=url, trust_env=False, timeout=30) as client:
                html = (await client.get("/")).text
                config = (await client.get("/config")).text
                out, raw = await _race_via_api(client, "Say hello to the key test.")
                return out, html, config, raw

        out, html, config, raw = run_async(go())
        # A wrong key on one side: the error path (HTTP 401) must not echo the key either.
        base.behavior = base.behavior.model_copy(update={"api_key": "some-other-key"})

        async def refused() -> tuple[RaceOutcome, str]:
            async with httpx.AsyncClient(base_url=url, trust_env=False, timeout=30) as client:
                return await _race_via_api(client, "Say hello with a refused key.")

        bad, bad_raw = run_async(refused())
    finally:
        app.stop()
    assert out.state == "done", out.detail  # the servers accepted the key: it was passed through
    assert bad.state == "error" and "HTTP 401" in bad_raw and "SPECDEMO_API_KEY" in bad_raw
    for s in (base, spec):
        sent = {r.headers.get("authorization") for r in s.requests}
        assert f"Bearer {API_KEY}" in sent
    log = app.log_path.read_text(encoding="utf-8", errors="replace")
    saved = "\n".join(p.read_text(encoding="utf-8") for p in sorted(runs.rglob("*")) if p.is_file())
    assert saved, "no run was saved"
    # The places searched hold real content (a search of nothing proves nothing).
    assert "checking the servers" in log and "process_completed" in raw and "<html" in html.lower()
    for where, text in (("the app's stdout/stderr", log), ("the page HTML", html), ("the config JSON", config),
                        ("the frames sent to the browser", raw + bad_raw), ("the saved runs", saved)):
        assert API_KEY not in text, f"the API key leaked into {where}"
    for where, text in (("the app's stdout/stderr", log), ("the frames", raw + bad_raw), ("the saved runs", saved)):
        assert "Bearer" not in text and "authorization" not in text.lower(), f"auth header data in {where}"


def test_presets_are_loaded_as_data_never_code(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    (tmp_path / "evil.yaml").write_text(
        f"!!python/object/apply:os.system [\"touch {marker}\"]\n", encoding="utf-8")
    (tmp_path / "evil_field.yaml").write_text(
        "title: !!python/object/apply:os.getcwd []\nexpect: x\nmessages: [{role: user, content: hi}]\n",
        encoding="utf-8")
    (tmp_path / "fine.yaml").write_text(
        "title: Fine\nexpect: x\nmessages: [{role: user, content: hi}]\n", encoding="utf-8")
    presets, errors = load_presets(tmp_path)
    assert set(presets) == {"fine"}
    assert {e.file for e in errors} == {"evil.yaml", "evil_field.yaml"}
    assert all("python/object" in e.message for e in errors), errors
    assert not marker.exists()  # the tag was refused, not run


def test_the_api_cannot_bypass_the_input_limits(setups: dict[str, Setup]) -> None:
    """A script posting straight to the page's API gets the same limits as the page's controls."""
    base, spec, app = setups["limits"].base, setups["limits"].spec, setups["limits"].app

    async def race_with(temperature: float, max_tokens: int, prompt: str = "hi") -> str:
        async with httpx.AsyncClient(base_url=app.url.rstrip("/"), trust_env=False, timeout=30) as client:
            page = PageApi((await client.get("/config")).json())
            session = f"limits{temperature}{max_tokens}".replace(".", "").replace("-", "m")
            join = await client.post("/gradio_api/queue/join", json={
                "data": [None, prompt, temperature, max_tokens, "simultaneous", None, 1], "fn_index": page.race_id,
                "session_hash": session, "event_data": None, "trigger_id": None})
            join.raise_for_status()
            lines = []
            async with client.stream("GET", "/gradio_api/queue/data", params={"session_hash": session}) as resp:
                async for line in resp.aiter_lines():
                    lines.append(line)
                    if "process_completed" in line:
                        break
            return "\n".join(lines)

    try:
        too_hot = run_async(race_with(5.0, 10))
        too_long = run_async(race_with(0.0, 10**6))
        empty = run_async(race_with(0.0, 10, prompt=""))
        huge = run_async(race_with(0.0, 10, prompt="x" * 2_000_000))
    finally:
        app.stop()
    assert "maximum value 2" in too_hot, too_hot[-500:]
    assert "Invalid max_tokens" in too_long, too_long[-500:]
    assert "prompt is empty" in empty, empty[-500:]
    assert "over the limit of 200,000" in huge and "SPECDEMO_MAX_PROMPT_CHARS" in huge, huge[-500:]
    assert (base.started, spec.started) == (0, 0)  # nothing reached a server
    assert (base.tokenized, spec.tokenized) == (0, 0)
