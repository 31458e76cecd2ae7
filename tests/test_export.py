"""One race as a file (demo/runs/export.py): escaping, the embedded data, the CSP, the size cap,
export_file for the page's buttons, and ``python -m demo export`` run as a process."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import os
import re
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from common.paths import ROOT
from demo.fmt import esc
from demo.live.pane_title import recorded_arm_titles
from demo.measure import SideMeter, efficiency
from demo.race import run_race
from demo.results import Message, RaceRequest, RaceResult
from demo.runs.export import (
    MAX_EXPORT_BYTES,
    ExportError,
    ExportTooLarge,
    efficiency_html,
    embed_json,
    export_file,
    export_html,
    player_data,
)
from demo.runs.store import RunTooLarge, read_run, run_stem, save_run
from demo.settings import Settings
from demo.view import spec_pane_title
from harness.page_driver import settled_state
from harness.ports import free_port
from harness.standin import Standin, StandinBehavior

EVIL = '</script><img src=x onerror="window.__pwned=1"><!--'
PIECES = [" <b>bold</b>", " " + EVIL, " &amp;", " done", "."]
MADE_AT = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)


def make_run(out_dir: Path, base_url: str | None = None, max_tokens: int = 40) -> Path:
    """A real race against stand-ins whose answer and prompt carry an HTML/script payload; saved."""
    req = RaceRequest(preset="json_reformat", messages=[Message(role="user", content="Repeat " + EVIL)],
                      max_tokens=max_tokens, order="simultaneous")
    base_b = StandinBehavior(tokens_per_s=100, ttft_s=0.05, pieces=PIECES)
    # 2x at ~2.7 tokens per step: under the bound with room for a busy machine (demo.measure.over_bound)
    spec_b = StandinBehavior(tokens_per_s=200, ttft_s=0.05, pieces=PIECES, speculative=True, chunk_sizes=[3, 1, 4])
    with Standin(base_b) as base, Standin(spec_b) as spec:
        settings = Settings(baseline_url=base_url or base.url, speculative_url=spec.url, save_runs=False)
        result = asyncio.run(run_race(req, settings))
    return save_run(result, out_dir)


@pytest.fixture(scope="module")
def run_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_run(tmp_path_factory.mktemp("runs"))


@pytest.fixture(scope="module")
def result(run_path: Path) -> RaceResult:
    r = read_run(run_path)
    assert EVIL in r.baseline.text and EVIL in r.speculative.text  # the payload really is in the answers
    return r


def data_block(html: str) -> str:
    m = re.search(r'<script type="application/json" id="race-data">(.*?)</script>', html, re.S)
    assert m, "no data block"
    return m.group(1)


def sha256_source(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


def test_model_output_and_prompt_cannot_break_out(result: RaceResult) -> None:
    html = export_html(result, made_at=MADE_AT)
    assert EVIL not in html
    assert "<img" not in html and "onerror=\"window" not in html  # the page itself has no <img> at all
    assert html.count("</script>") == 2  # the data block's and the player's own
    assert html.count("<script") == 2
    block = data_block(html)
    assert "<" not in block and ">" not in block and "&" not in block
    # U+2028/9 end a line in older JavaScript: escaped too, and the JSON still reads back the same.
    odd = {"t": "a\u2028b\u2029</SCRIPT >"}
    assert json.loads(embed_json(odd)) == odd and "\u2028" not in embed_json(odd) and "<" not in embed_json(odd)
    # A label built from untrusted text (the preset name) is escaped too.
    bad = result.model_copy(update={"preset": "<script>alert(1)</script>"})
    assert "<script>alert(1)" not in export_html(bad, made_at=MADE_AT)


def test_embedded_data_round_trips_to_the_saved_run(result: RaceResult) -> None:
    data = json.loads(data_block(export_html(result, made_at=MADE_AT)))
    assert RaceResult.model_validate(data["run"]) == result  # the whole run, exactly
    for side in ("baseline", "speculative"):
        saved = getattr(result, side)
        chunks = data["player"]["sides"][side]["chunks"]
        assert "".join(c[4] for c in chunks) == saved.text  # the panes end on the final texts
        assert [c[0] for c in chunks] == sorted(c[0] for c in chunks)
        assert chunks[-1][2] == saved.completion_tokens  # running count ends on the server's usage
        assert data["player"]["sides"][side]["end_state"] == "done"
    assert data["player"]["prompt"] == [["user", "Repeat " + EVIL]]


def test_chunk_tokens_and_shading_are_the_live_meters(result: RaceResult) -> None:
    spec = player_data(result)["sides"]["speculative"]
    meter = SideMeter("speculative", result.speculative.url, t0=0.0)
    for ev in result.speculative.events:
        meter.feed(ev)
    bursts = [(t, n) for t, n, _ in meter.snapshot().bursts]
    assert [(c[0], c[1]) for c in spec["chunks"] if c[1]] == bursts
    classes = {c[3] for c in spec["chunks"]}
    assert {"b3", "b4"} <= classes  # chunk_sizes [3, 1, 4]
    assert all(c[3] == "" for c in spec["chunks"] if c[1] == 1)  # single tokens stay plain, as on the page
    base = player_data(result)["sides"]["baseline"]
    assert {c[3] for c in base["chunks"]} == {""}  # one token a chunk: no shading


def test_csp_is_strict_and_its_hashes_match(result: RaceResult) -> None:
    html = export_html(result, made_at=MADE_AT)
    m = re.search(r'<meta http-equiv="Content-Security-Policy" content="([^"]+)">', html)
    assert m
    csp = dict(d.strip().split(" ", 1) for d in m.group(1).replace("&#x27;", "'").split(";"))
    assert csp["default-src"] == "'none'"
    assert "unsafe" not in m.group(1)
    script = re.search(r"<script>(.*?)</script>", html, re.S)
    style = re.search(r"<style>(.*?)</style>", html, re.S)
    assert script and style
    assert csp["script-src"] == sha256_source(script.group(1))
    assert csp["style-src"] == sha256_source(style.group(1))
    assert " style=" not in html  # no style attribute the CSP would block


def test_labels_say_recording_when_and_order(result: RaceResult) -> None:
    html = export_html(result, made_at=MADE_AT)
    when = result.started_at.strftime("%Y-%m-%d %H:%M:%S UTC")
    assert f"RECORDING of {when}, not live" in html
    assert "exported 2026-11-30 12:00:00 UTC" in html
    assert "Simultaneous race" in html and 'data-order="simultaneous"' in html
    seq = result.model_copy(update={"order": "sequential"})
    assert "Sequential A/B" in export_html(seq, made_at=MADE_AT)


def test_final_figures_are_the_saved_ones(result: RaceResult) -> None:
    html = export_html(result, made_at=MADE_AT)
    assert result.speedup is not None  # its state as saved: a busy machine may slow the baseline (over the bound)
    assert f'data-state="{settled_state(result.over_bound)}" data-value="{result.speedup!r}"' in html
    for side in ("baseline", "speculative"):
        rate = getattr(result, side).decode_tokens_per_s
        assert f'data-key="tokens_per_s" data-side="{side}" data-value="{rate!r}"' in html
    spec = result.speculative.spec
    assert spec and spec.acceptance_rate is not None
    assert f'data-key="acceptance_rate" data-side="speculative" data-value="{spec.acceptance_rate!r}"' in html
    eff = efficiency(result.speedup, spec.mean_acceptance_length)
    assert eff is not None and f'data-key="efficiency" data-value="{eff!r}"' in html


def test_efficiency_and_its_na_reason() -> None:
    assert efficiency(2.0, 4.0) == 0.5
    assert efficiency(None, 3.0) is None and efficiency(2.0, None) is None and efficiency(2.0, 0.0) is None


def test_a_failed_side_says_so_and_figures_say_na(tmp_path: Path) -> None:
    r = read_run(make_run(tmp_path, base_url=f"http://127.0.0.1:{free_port()}"))
    assert r.baseline.error and r.speedup is None
    side = player_data(r)["sides"]["baseline"]
    assert side["chunks"] == [] and side["end_state"] == "error" and r.baseline.error in side["end_text"]
    html = export_html(r, made_at=MADE_AT)
    assert 'data-state="na"' in html  # the headline speedup is n/a, with its reason
    assert "efficiency n/a (" in efficiency_html(r)


def test_oversize_runs_are_refused_with_a_clear_message(result: RaceResult) -> None:
    with pytest.raises(ExportTooLarge, match=r"over the export limit of 0.001 MB"):
        export_html(result, max_bytes=1000)
    assert len(export_html(result).encode()) < MAX_EXPORT_BYTES


def test_export_file_writes_where_the_ui_asks(result: RaceResult, tmp_path: Path) -> None:
    path = export_file(result, tmp_path / "exports" / "new")
    assert path == tmp_path / "exports" / "new" / f"{run_stem(result)}.html"
    text = path.read_text(encoding="utf-8")
    assert text.startswith("<!DOCTYPE html>")
    assert RaceResult.model_validate(json.loads(data_block(text))["run"]) == result
    assert not list(path.parent.glob("*.tmp"))
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    with pytest.raises(ExportError, match="cannot create the folder"):
        export_file(result, blocker / "sub")


# --------------------------------------------------------------------------- the command, as a process


def run_export(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "demo", "export", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)


def test_cli_writes_a_page_that_holds_the_run(run_path: Path, result: RaceResult, tmp_path: Path) -> None:
    out = tmp_path / "race.html"
    p = run_export(str(run_path), "--out", str(out))
    assert p.returncode == 0, p.stderr
    assert str(out) in p.stdout and p.stderr == ""
    assert RaceResult.model_validate(json.loads(data_block(out.read_text()))["run"]) == result
    p = run_export(str(run_path), "--out", str(tmp_path))  # a folder: the run's own name in it
    assert p.returncode == 0, p.stderr
    assert (tmp_path / f"{run_stem(result)}.html").is_file()


@pytest.mark.parametrize("case", ["missing", "not-json", "not-a-run", "folder", "unwritable"])
def test_cli_errors_are_one_line_and_exit_2(case: str, run_path: Path, tmp_path: Path) -> None:
    target, out = tmp_path / "run.json", tmp_path / "race.html"
    expect = {
        "missing": "no such file",
        "not-json": "is not a saved race: not valid JSON",
        "not-a-run": "is not a saved race: order: Field required",
        "folder": "is not a file",
        "unwritable": "cannot write",
    }[case]
    if case == "not-json":
        target.write_text("this is { not json")
    elif case == "not-a-run":
        target.write_text('{"preset": "x"}')
    elif case == "folder":
        target = tmp_path
    elif case == "unwritable":
        target, out = run_path, tmp_path / "no-such-folder" / "race.html"
    p = run_export(str(target), "--out", str(out))
    assert p.returncode == 2
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and expect in lines[0], p.stderr
    assert "Traceback" not in p.stderr and not out.exists()


def test_an_oversize_run_file_is_refused_before_it_is_read(run_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import demo.runs.export

    monkeypatch.setattr(demo.runs.export, "MAX_EXPORT_BYTES", 1000)
    with pytest.raises(RunTooLarge, match=r"MB, over the export limit of 0.001 MB"):
        demo.runs.export.run_for_export(run_path)


def test_a_run_without_a_timeline_shows_its_answer_whole(result: RaceResult) -> None:
    bare = result.baseline.model_copy(update={"events": []})
    side = player_data(result.model_copy(update={"baseline": bare}))["sides"]["baseline"]
    assert [c[4] for c in side["chunks"]] == [result.baseline.text]
    assert side["chunks"][0][2] == result.baseline.completion_tokens
    assert "no timeline was saved" in side["end_text"]


def test_the_pages_download_is_one_handler_with_errors_in_the_status(run_path: Path, tmp_path: Path) -> None:
    import demo.runs.export

    out, status = demo.runs.export.export_to_temp(lambda: demo.runs.export.run_for_export(run_path))
    assert out is not None and Path(out).is_file() and "exported" in status
    out, status = demo.runs.export.export_to_temp(lambda: demo.runs.export.run_for_export(tmp_path / "gone.json"))
    assert out is None and "cannot export" in status and "no such file" in status


# --------------------------------------------------------------------------- several arms

# Each arm's speedup well under its tokens per step (3.0x at 4, 2.0x at 2.5, 1.2x at 2), as a real server's
# must be: one over it is flagged instead of headlined (demo.measure.over_bound). A busy machine that
# slows the baseline can still push one over; the tests read the state the record saved (settled_state).
ARMS = {"eagle3": StandinBehavior(tokens_per_s=300, ttft_s=0.05, pieces=PIECES, speculative=True,
                                  chunk_sizes=[3, 5, 4]),
        "ngram": StandinBehavior(tokens_per_s=200, ttft_s=0.05, pieces=PIECES, speculative=True, chunk_sizes=[2, 3]),
        "draft": StandinBehavior(tokens_per_s=120, ttft_s=0.05, pieces=PIECES, speculative=True, chunk_sizes=[1, 2, 3])}


def make_arms_run(out_dir: Path, max_tokens: int = 40) -> Path:
    """A real race of a baseline and three stand-in arms, the payload in every answer; saved."""
    req = RaceRequest(preset="json_reformat", messages=[Message(role="user", content="Repeat " + EVIL)],
                      max_tokens=max_tokens, order="simultaneous")
    with Standin(StandinBehavior(tokens_per_s=100, ttft_s=0.05, pieces=PIECES)) as base, \
            Standin(ARMS["eagle3"]) as eagle, Standin(ARMS["ngram"]) as ngram, Standin(ARMS["draft"]) as draft:
        urls = {"eagle3": eagle.url, "ngram": ngram.url, "draft": draft.url}
        settings = Settings(baseline_url=base.url, speculative_url=eagle.url, save_runs=False,
                            arms=[{"name": n, "url": u, "label": f"{n} <i>k</i>"} for n, u in urls.items()])
        result = asyncio.run(run_race(req, settings))
    return save_run(result, out_dir)


@pytest.fixture(scope="module")
def arms_result(tmp_path_factory: pytest.TempPathFactory) -> RaceResult:
    r = read_run(make_arms_run(tmp_path_factory.mktemp("arms-runs")))
    assert list(r.arms) == ["eagle3", "ngram", "draft"] and all(EVIL in a.side.text for a in r.arms.values())
    return r


def test_a_race_of_three_arms_exports_every_arm(arms_result: RaceResult) -> None:
    r = arms_result
    html = export_html(r, made_at=MADE_AT)
    data = player_data(r)
    assert data["panes"] == ["baseline", "speculative", "ngram", "draft"]  # demo.view.pane_key, as on the page
    # every pane's timeline is its own arm's answer, chunk by chunk
    for pane, name in zip(data["panes"][1:], r.arms, strict=True):
        assert "".join(c[4] for c in data["sides"][pane]["chunks"]) == r.arms[name].side.text
    assert 'data-panes="4"' in html
    for pane, name in zip(data["panes"][1:], r.arms, strict=True):
        arm = r.arms[name]
        assert f'<section class="x-pane" data-side="{pane}" data-arm="{name}">' in html
        assert f'title="{name} &lt;i&gt;k&lt;/i&gt; (' in html  # the arm's label, escaped
        # its saved figures: decode tokens/s in its pane, speedup and acceptance under its name
        rate = arm.side.decode_tokens_per_s
        assert f'<div id="final-{pane}" hidden><div class="sd-tiles" data-side="speculative">' in html
        pane_html = html.split(f'id="final-{pane}"')[1].split("</section>")[0]
        assert f'data-key="tokens_per_s" data-side="speculative" data-value="{rate!r}"' in pane_html
        block = html.split(f'<div class="x-arm" data-arm="{name}">')[1].split('<div class="x-arm" ')[0]
        state = settled_state(arm.over_bound)  # as saved: a busy machine may slow the baseline (over the bound)
        assert arm.speedup is not None and f'data-state="{state}" data-value="{arm.speedup!r}"' in block
        spec = arm.side.spec
        assert spec is not None and spec.acceptance_rate is not None and spec.mean_acceptance_length is not None
        assert f'data-key="acceptance_rate" data-side="speculative" data-value="{spec.acceptance_rate!r}"' in block
        assert f'data-value="{spec.mean_acceptance_length!r}"' in block
        eff = efficiency(arm.speedup, spec.mean_acceptance_length)
        assert f'data-key="efficiency" data-value="{eff!r}"' in block
    # at the end, a line per server of tokens over time, ending on its token count
    lines = re.findall(r'<polyline class="x-line x-line-\d" data-pane="([^"]+)" data-tokens="(\d+)"', html)
    assert lines == [(p, str(s.completion_tokens)) for p, s in [("baseline", r.baseline), ("speculative",
                     r.speculative), ("ngram", r.arms["ngram"].side), ("draft", r.arms["draft"].side)]]
    # every pane's title in the live page's words, the same Replay shows (one builder: view.saved_pane_titles)
    divs = re.findall(r'<section class="x-pane"[^>]*>(<div class="sd-pane-title"[^>]*>[^<]*</div>)', html)
    assert divs[1:] == recorded_arm_titles(r) and divs[0].endswith(">Baseline</div>")
    # the arms differ (their stand-ins' rates): each block above showed its own arm's figures, three
    # different ones (their order is measured timing here: a race's figures against their truth are the
    # timing stage's, tests/test_methods.py)
    assert len({r.arms[n].speedup for n in r.arms}) == 3
    assert "<img" not in markup(html)  # model output in the markup is escaped (the loop note quotes it)


def markup(html: str) -> str:
    """The page without its stylesheet, player and data blocks."""
    return re.sub(r"<style>.*?</style>|<script[^>]*>.*?</script>", "", html, flags=re.S)


def test_one_arm_exports_as_before(result: RaceResult) -> None:
    html = markup(export_html(result, made_at=MADE_AT))
    assert player_data(result)["panes"] == ["baseline", "speculative"]
    assert "data-arm=" not in html and "data-panes=" not in html and 'class="x-arm"' not in html
    assert "<svg" not in html and "x-chart" not in html
    arm = next(iter(result.arms.values()))
    k = arm.side.spec.num_spec_tokens if arm.side.spec is not None else None
    assert f'title="{esc(spec_pane_title(arm.method, k))}"' in html  # the live page's words
    assert html.count('<section class="x-pane"') == 2
    assert f'class="x-rec-sub">{esc(result.baseline.model or "")} · ' in html  # the model, once, at the top


def test_an_n_user_race_of_two_arms_exports_each_arms_step(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    from demo.cli import main
    from demo.load.engine import UsersRace
    from demo.runs.store import read_record

    monkeypatch.setenv("SPECDEMO_RUNS_DIR", str(tmp_path / "runs"))
    monkeypatch.setenv("SPECDEMO_SAVE_RUNS", "true")
    monkeypatch.delenv("SPECDEMO_ARMS", raising=False)
    with Standin(StandinBehavior(tokens_per_s=100, ttft_s=0.02)) as base, \
            Standin(ARMS["eagle3"]) as eagle, Standin(ARMS["ngram"]) as ngram:
        assert main(["race", "--baseline-url", base.url, "--arm", f"eagle3={eagle.url}", "--arm",
                     f"ngram={ngram.url}", "--users", "2", "--prompt", "Say hi", "--max-tokens", "20",
                     "--json"]) == 0
    capsys.readouterr()
    (path,) = (tmp_path / "runs").glob("*.json")
    record = read_record(path)
    assert isinstance(record, UsersRace) and list(record.step.arms) == ["eagle3", "ngram"]
    html = export_html(record, made_at=MADE_AT)
    # the recording holds user 1 of the baseline and the first arm: those are the panes, and it says so
    assert player_data(record.race)["panes"] == ["baseline", "speculative"] == list(panes_of(html))
    assert "The panes replay user 1 of the baseline and of eagle3" in html
    for name, arm in record.step.arms.items():  # every arm's step figures, in the arms' order
        block = html.split(f'<div class="x-arm" data-arm="{name}">')[1].split('<div class="x-arm" ')[0]
        assert arm.speedup is not None and f'data-users="2" data-value="{arm.speedup!r}"' in block
        assert arm.throughput_ratio is not None and f'data-value="{arm.throughput_ratio!r}"' in block
        assert "per-user decode speedup · 2 users" in block
        rate = arm.side.per_user_decode_tokens_per_s
        assert rate is not None and f'data-value="{rate!r}"' in block
    assert html.index('data-arm="eagle3"') < html.index('data-arm="ngram"')


def panes_of(html: str) -> list[str]:
    return re.findall(r'<section class="x-pane" data-side="([^"]+)"', html)
