"""The customer's workload on the page (issue 10), in real headless Chromium against stand-ins:
an uploaded file measured in the Evaluate tab, its requests raced in the Race tab, and a race
exported from the Replay tab (and after a race) as a self-contained page."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from html import unescape
from pathlib import Path

import pytest
from playwright.sync_api import expect

from demo.race import run_race
from demo.results import RaceRequest
from demo.runs.export import content_security_policy
from demo.runs.store import save_run
from demo.settings import Settings
from harness.app_process import AppProcess
from harness.page_driver import open_evaluate, run_evaluate, screenshot
from harness.standin import Standin, StandinBehavior
from tests.browser.conftest import pair_app

pytestmark = pytest.mark.browser

# Five requests; the COPY ones make the speculative stand-in accept long drafts (a spread of
# acceptance), and <b> in an id and a prompt checks the page escapes what came from the file.
# Tags give the segments: "copy" has 2 requests (too few for a verdict), "<i>chat</i>" 3.
REQUESTS = [
    {"id": "copy-1", "messages": [{"role": "system", "content": "Reformat."},
                                   {"role": "user", "content": "COPY this JSON: {\"a\": 1}"}],
     "max_tokens": 20, "temperature": 0.0, "tag": "copy"},
    {"id": "copy-2", "prompt": "COPY the table below <b>bold</b>", "max_tokens": 20, "tag": "copy"},
    {"id": "poem-<b>1</b>", "messages": [{"role": "user", "content": "Write a poem about tea"}],
     "max_tokens": 16, "temperature": 0.7, "tag": "<i>chat</i>"},
    {"id": "chat-1", "messages": [{"role": "user", "content": "How are you today?"}], "max_tokens": 16,
     "tag": "<i>chat</i>"},
    {"id": "sql-1", "messages": [{"role": "user", "content": "SELECT the orders of last week"}], "max_tokens": 18,
     "tag": "<i>chat</i>"},
]


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[AppProcess, Path, Path]]:
    tmp = tmp_path_factory.mktemp("workloadapp")
    base = Standin(StandinBehavior(tokens_per_s=300, ttft_s=0.02)).start()
    spec = Standin(StandinBehavior(tokens_per_s=600, ttft_s=0.02, speculative=True, chunk_sizes=[1, 2],
                                   by_marker={"COPY": {"chunk_sizes": [5], "tokens_per_s": 900}})).start()
    settings = Settings(baseline_url=base.url, speculative_url=spec.url, save_runs=False)
    req = RaceRequest(preset="poetry", prompt="Write <b>a poem</b>", max_tokens=30, order="sequential")
    # Playwright's session-wide browser holds an event loop in this thread: race in another one.
    with ThreadPoolExecutor(1) as pool:
        race = pool.submit(asyncio.run, run_race(req, settings)).result()
    saved = save_run(race, tmp / "runs")
    workload = tmp / "my_traffic.jsonl"
    workload.write_text("".join(json.dumps(r) + "\n" for r in REQUESTS), encoding="utf-8")
    app = pair_app(base, spec, tmp)
    try:
        yield app, saved, workload
    finally:
        app.stop()
        base.stop()
        spec.stop()


def _upload(page, path: Path) -> None:
    page.set_input_files("#sd-eval-upload input[type=file]", str(path))


def _self_contained(html: str) -> dict:
    """The page has the strict CSP meta and embeds the run; the embedded data is returned."""
    csp = re.search(r'<meta http-equiv="Content-Security-Policy" content="([^"]+)">', html)
    assert csp is not None, html[:500]
    assert unescape(csp.group(1)) == content_security_policy()
    assert content_security_policy().startswith("default-src 'none';")
    m = re.search(r'<script type="application/json" id="race-data">(.*?)</script>', html, re.S)
    assert m is not None
    data = json.loads(m.group(1))
    assert data["format"] == "specdemo-race-export/1"
    assert "<link" not in html and 'src="http' not in html  # nothing fetched from elsewhere
    return data


def test_an_openai_batch_upload_says_what_was_read(setup, page, tmp_path: Path) -> None:
    """The loader's summary line on the page: the form read, the skipped line, the ignored fields."""
    app, _, _ = setup
    example = Path(__file__).resolve().parents[2] / "workloads" / "openai-batch.jsonl"
    embeddings = {"custom_id": "emb-1", "method": "POST", "url": "/v1/embeddings", "body": {"input": "x"}}
    upload = tmp_path / "batch_input.jsonl"
    upload.write_text(example.read_text(encoding="utf-8") + json.dumps(embeddings) + "\n", encoding="utf-8")
    open_evaluate(page, app)
    _upload(page, upload)
    page.wait_for_selector('#sd-eval-upload-status [data-requests="6"]', timeout=15_000)
    for needle in ("batch_input: 6 requests read (OpenAI batch), 1 skipped.",
                   "model: ignored on 6 lines: the servers' own model is used",
                   "skipped batch_input.jsonl:7: url /v1/embeddings"):
        expect(page.locator("#sd-eval-upload-status")).to_contain_text(needle, use_inner_text=True)
    assert page.console_errors == []


def test_uploaded_workload_is_measured_and_shown(setup, page) -> None:
    app, _, workload = setup
    open_evaluate(page, app)
    _upload(page, workload)
    page.wait_for_selector('#sd-eval-upload-status [data-requests="5"]', timeout=15_000)
    expect(page.locator("#sd-eval-upload-status")).to_contain_text("my_traffic: 5 requests read (JSONL), 0 skipped",
                                                                   use_inner_text=True)
    # The workload alone: no preset ticked.
    for box in page.locator("#sd-eval-presets input[type=checkbox]").all():
        if box.is_checked():
            box.uncheck()
    run_evaluate(page, "1,2", 20, "failure-workload-evaluate", timeout_ms=120_000, slo_ttft="5000", price="2")
    summary = page.locator("#sd-eval-summary #customer-summary")
    for needle in ("For my_traffic", "the measured answer is"):
        expect(summary).to_contain_text(needle, use_inner_text=True)
    verdicts = page.locator("#sd-eval-verdict .sv-verdict")
    expect(verdicts).to_have_count(1)  # the workload only
    expect(verdicts.first).to_have_attribute("data-decision", re.compile("^(enable|depends|don't|unknown)$"))
    # The 5 requests, all among the top 5: their rows waited for, then read.
    ranked_rows = "#sd-eval-workloads .workload-profile .gain-most tr[data-request]"
    expect(page.locator(ranked_rows)).to_have_count(len(REQUESTS))
    ranked = page.eval_on_selector_all(ranked_rows, "els => els.map(e => e.dataset.request)")
    assert sorted(ranked) == sorted(str(r["id"]) for r in REQUESTS), ranked
    # Escaped: the id with <b> shows as text, and no <b> element came from the file.
    expect(page.locator("#sd-eval-workloads .workload-profile")).to_contain_text("poem-<b>1</b>", use_inner_text=True)
    assert page.locator("#sd-eval-workloads .workload-profile td b").count() == 0
    point_rows = "#sd-eval-workloads .capacity-points tr[data-side]"
    expect(page.locator(point_rows)).to_have_count(4)
    points = page.eval_on_selector_all(point_rows, "els => els.map(e => [e.dataset.side, e.dataset.concurrency])")
    assert sorted(points) == [["baseline", "1"], ["baseline", "2"], ["speculative", "1"], ["speculative", "2"]]
    expect(page.locator("#sd-eval-workloads .capacity")).to_contain_text("per million output tokens",
                                                                         use_inner_text=True)
    # Results by segment: a row per tag (the file's tag escaped: no <i> element from it), the
    # too-few rule, and the routing sentence above them.
    tag_rows = '#sd-eval-workloads table.segments tr[data-dimension="tag"]'
    expect(page.locator(tag_rows)).to_have_count(2)
    tags = dict(page.eval_on_selector_all(tag_rows, "els => els.map(e => [e.dataset.label, e.dataset.verdict])"))
    assert set(tags) == {"copy", "<i>chat</i>"} and tags["copy"] == "n/a", tags
    expect(page.locator('#sd-eval-workloads table.segments tr[data-label="copy"]')).to_contain_text(
        "too few", use_inner_text=True)
    assert page.locator("#sd-eval-workloads table.segments td i").count() == 0
    # the routing sentence says something (not blank)
    expect(page.locator("#sd-eval-workloads .segments #routing")).to_have_text(re.compile(r"\S"), use_inner_text=True)
    for name in ("report.html", "results.json"):
        expect(page.locator("#sd-eval-report")).to_contain_text(name, use_inner_text=True)
    # the theme styles it
    expect(page.locator("#sd-eval-workloads .capacity-points")).to_have_css("border-collapse", "collapse")
    screenshot(page, "workload-evaluate")
    assert page.console_errors == []

    # The same upload in the Race tab: pick a request, see its text, race it.
    page.get_by_role("tab", name="Race").click()
    page.click("#sd-preset input")
    page.get_by_role("option", name="workload: copy-1").click()
    page.wait_for_function(
        "() => (document.querySelector('#sd-prompt textarea') || {}).value === 'COPY this JSON: {\"a\": 1}'",
        timeout=10_000)
    expect(page.locator("#sd-expect")).to_contain_text("From the uploaded workload my_traffic: request copy-1",
                                                       use_inner_text=True)
    expect(page.locator("#sd-max-tokens input")).to_have_value("20")
    page.click("#sd-start")
    page.wait_for_selector('#sd-run-status [data-state="done"]', timeout=60_000)
    # the answer is there (not blank)
    expect(page.locator("#sd-text-speculative .sd-text")).to_have_text(re.compile(r"\S"), use_inner_text=True)
    # ... and export it.
    with page.expect_download(timeout=30_000) as dl:
        page.click("#sd-export")
        page.wait_for_selector("#sd-export-file a", timeout=30_000)
        page.click("#sd-export-file a")
    html = Path(dl.value.path()).read_text(encoding="utf-8")
    data = _self_contained(html)
    assert data["run"]["preset"] == "workload:copy-1"
    assert data["run"]["request"]["messages"][0]["content"] == "Reformat."  # the request's own messages
    assert page.console_errors == []


@pytest.mark.parametrize("name,content,message", [
    ("wrong.csv", b"question,answer\nhi,there\n", "wrong.csv"),
    ("latin.jsonl", '{"prompt": "caf\u00e9"}\n'.encode("latin-1"), "latin.jsonl"),
])
def test_bad_upload_says_one_line(setup, page, tmp_path: Path, name: str, content: bytes, message: str) -> None:
    app, _, _ = setup
    bad = tmp_path / name
    bad.write_bytes(content)
    open_evaluate(page, app)
    _upload(page, bad)
    page.wait_for_selector('#sd-eval-upload-status [data-error="true"]', timeout=15_000)
    expect(page.locator("#sd-eval-upload-status")).to_have_text(re.compile(r"^\s*" + re.escape(message)),
                                                               use_inner_text=True)
    shown = page.inner_text("#sd-eval-upload-status").strip()  # read once it says so: one line
    assert shown.startswith(message) and "\n" not in shown, shown
    assert "Traceback" not in page.content()
    # Run refuses it too, in the status line, with the same one line.
    page.click("#sd-eval-run")
    page.wait_for_selector('#sd-eval-status [data-state="error"]', timeout=15_000)
    expect(page.locator("#sd-eval-status")).to_contain_text(message, use_inner_text=True)
    status = page.inner_text("#sd-eval-status").strip()  # read once it says so
    assert message in status and "Traceback" not in status, status
    assert page.locator("#sd-eval-verdict .sv-verdict").count() == 0
    assert page.console_errors == []


def test_replay_tab_exports_a_self_contained_page(setup, page) -> None:
    app, saved, _ = setup
    page.set_viewport_size({"width": 1400, "height": 1000})
    page.goto(app.url, timeout=30_000)
    page.get_by_role("tab", name="Replay").click()
    page.wait_for_selector("#sd-replay-export", timeout=15_000)
    page.click("#sd-replay-export")
    page.wait_for_selector("#sd-replay-export-file a", timeout=30_000)
    expect(page.locator("#sd-replay-status [data-state]")).to_have_attribute("data-state", "done")
    with page.expect_download(timeout=30_000) as dl:
        page.click("#sd-replay-export-file a")
    html = Path(dl.value.path()).read_text(encoding="utf-8")
    data = _self_contained(html)
    saved_run = json.loads(saved.read_text(encoding="utf-8"))
    assert data["run"]["started_at"] == saved_run["started_at"]
    assert data["run"]["speculative"]["text"] == saved_run["speculative"]["text"]
    assert page.console_errors == []
