"""Sampling end to end: what a preset, the page or a CLI flag says is what both sides receive.

The stand-ins record every request's body (harness/standin/ ``RecordedRequest``): each test
compares those bodies with the preset or the flags, never with what the client meant to send.
The saved run keeps the sampling, and the page, Replay and the export say it in one line.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from common.paths import ROOT
from demo import view
from demo.cli import main
from demo.fmt import esc
from demo.live.request import build_request, preset_user_text
from demo.live.status import final_status
from demo.presets import load_presets
from demo.race import run_race
from demo.results import Message, RaceRequest
from demo.runs.export import export_html
from demo.runs.store import read_run, save_run
from demo.sampling import sampling_body
from demo.settings import Settings
from demo.workload import Workload, WorkloadRequest
from harness.standin import Standin, StandinBehavior

SHIPPED, _ = load_presets(ROOT / "presets")
_FORMAT = SHIPPED["json_reformat_schema"].response_format
assert _FORMAT is not None and _FORMAT.json_schema is not None
SCHEMA = _FORMAT  # the shipped schema preset's response_format
RECORD_SCHEMA: dict[str, Any] = _FORMAT.json_schema.schema_
FAST = StandinBehavior(tokens_per_s=400, ttft_s=0.01)
SENT = ("top_p", "stop", "seed", "response_format")  # the fields the issue names; the others checked whole


def bodies(server: Standin) -> list[dict[str, Any]]:
    """The bodies of the generation requests ``server`` received, in order."""
    return [q.body for q in server.requests if q.path.endswith("completions")]


def assert_both_received(base: Standin, spec: Standin, want: dict[str, Any], n: int = 1) -> None:
    """Each side received ``n`` requests, each carrying exactly ``want`` for the SENT fields, and both
    sides' bodies are the same but for the model."""
    got = bodies(base) + bodies(spec)
    assert len(got) == 2 * n, [b.get("messages") for b in got]
    for body in got:
        assert {k: body.get(k) for k in SENT} == {k: want.get(k) for k in SENT}, body
    same = [{k: v for k, v in b.items() if k != "model"} for b in got]
    assert all(b == same[0] for b in same)


# --------------------------------------------------------------------------- the page's race path


def preset_folder(tmp_path: Path) -> Path:
    """The shipped schema preset, with a top_p, a stop list and a seed beside its response_format."""
    folder = tmp_path / "presets"
    folder.mkdir()
    text = (ROOT / "presets" / "json_reformat_schema.yaml").read_text(encoding="utf-8")
    (folder / "schema_sampled.yaml").write_text(
        text + 'top_p: 0.9\nstop: ["\\n\\n\\n", "END"]\nseed: 11\n', encoding="utf-8")
    return folder


@pytest.mark.parametrize("order", ["simultaneous", "sequential"])
def test_the_pages_race_of_a_preset_sends_its_sampling_to_both_sides(tmp_path: Path, order: str) -> None:
    presets, errors = load_presets(preset_folder(tmp_path))
    assert errors == []
    preset = presets["schema_sampled"]
    req = build_request(presets, "schema_sampled", preset_user_text(preset), 0.0, 24, order)
    with Standin.pair(FAST) as (base, spec):
        settings = Settings(baseline_url=base.url, speculative_url=spec.url, save_runs=False)
        result = asyncio.run(run_race(req, settings))
    assert result.order == order and result.baseline.completion_tokens == 24
    want = {"top_p": 0.9, "stop": ["\n\n\n", "END"], "seed": 11, "response_format": SCHEMA.body()}
    assert_both_received(base, spec, want)
    # The run saved keeps them, and the page's final status says them in the one line.
    path = save_run(result, tmp_path / "runs")
    again = read_run(path)
    assert sampling_body(again.request) == sampling_body(req) and again.request.seed == 11
    status = final_status(again, path.name)
    assert esc("T=0 · top_p 0.9 · stop ['\\n\\n\\n', 'END'] · seed 11 · JSON schema 'order_record'") in status


def test_an_edited_prompt_is_a_free_prompt_without_the_presets_sampling(tmp_path: Path) -> None:
    presets, _ = load_presets(preset_folder(tmp_path))
    req = build_request(presets, "schema_sampled", "Say hi", 0.0, 24, "simultaneous")
    assert req.preset is None and sampling_body(req) == {} and req.seed is None


def test_a_workload_request_raced_on_the_page_keeps_its_lines_sampling() -> None:
    line = WorkloadRequest(id="j1", api="chat", messages=[Message(role="user", content="JSON please")], top_p=0.5,
                           stop=["}"], seed=4, response_format={"type": "json_object"})
    workload = Workload(name="mine", source="mine.jsonl", format="jsonl", requests=[line])
    req = build_request({}, "workload:j1", "JSON please", 0.3, 30, "sequential", workload)
    assert (req.preset, req.temperature, req.max_tokens, req.order) == ("workload:j1", 0.3, 30, "sequential")
    assert sampling_body(req) == {"top_p": 0.5, "stop": ["}"], "response_format": {"type": "json_object"}}
    assert req.seed == 4


# --------------------------------------------------------------------------- the race CLI


@pytest.fixture
def runs_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SPECDEMO_RUNS_DIR", str(tmp_path / "runs"))
    monkeypatch.setenv("SPECDEMO_SAVE_RUNS", "true")
    return tmp_path / "runs"


@pytest.mark.parametrize("order", ["simultaneous", "sequential"])
def test_race_flags_reach_both_sides_the_json_and_the_saved_run(
        runs_dir: Path, tmp_path: Path, order: str, capsys: pytest.CaptureFixture[str]) -> None:
    schema_file = tmp_path / "my record.json"  # a bare JSON schema: named after the file
    schema_file.write_text(json.dumps(RECORD_SCHEMA, indent=2), encoding="utf-8")
    with Standin.pair(FAST) as (base, spec):
        code = main(["race", "--baseline-url", base.url, "--speculative-url", spec.url, "--preset", "json_reformat",
                     "--max-tokens", "20", "--order", order, "--json", "--top-p", "0.8", "--top-k", "40",
                     "--min-p", "0.05", "--stop", "\n\n", "--stop", "<END>", "--seed", "5",
                     "--presence-penalty", "0.25", "--frequency-penalty", "-0.5", "--repetition-penalty", "1.1",
                     "--response-format", str(schema_file)])
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    rf = {"type": "json_schema", "json_schema": {"name": "my_record", "schema": RECORD_SCHEMA}}
    want = {"temperature": 0.0, "max_tokens": 20, "seed": 5, "top_p": 0.8, "top_k": 40, "min_p": 0.05,
            "stop": ["\n\n", "<END>"], "presence_penalty": 0.25, "frequency_penalty": -0.5,
            "repetition_penalty": 1.1, "response_format": rf}
    assert_both_received(base, spec, want)
    body = bodies(base)[0]
    assert {k: body[k] for k in want} == want  # every flag, not only the four the issue names
    assert out["order"] == order and out["sampling"] == want  # --json says what was sent
    (saved,) = runs_dir.glob("*.json")
    run = read_run(saved)
    assert run.request == RaceRequest.model_validate(json.loads(saved.read_text())["request"])
    not_sampling = ("temperature", "max_tokens", "seed")
    assert sampling_body(run.request) == {k: v for k, v in want.items() if k not in not_sampling}
    assert run.request.seed == 5 and run.request.response_format is not None
    # Replay's banner and the exported page say the sampling, escaped (a stop of "<END>").
    line = view.sampling_text(run.request)
    assert line == ("T=0 · top_p 0.8 · top_k 40 · min_p 0.05 · stop ['\\n\\n', '<END>'] · presence_penalty 0.25 · "
                    "frequency_penalty -0.5 · repetition_penalty 1.1 · seed 5 · JSON schema 'my_record'")
    for html in (view.recording_banner_html(run), export_html(run)):
        assert esc(line) in html and "'<END>'" not in html.split("<script", 1)[0]


def test_a_preset_flag_on_top_keeps_the_presets_other_sampling(runs_dir: Path) -> None:
    with Standin.pair(FAST) as (base, spec):
        assert main(["race", "--baseline-url", base.url, "--speculative-url", spec.url, "--preset",
                     "json_reformat_schema", "--max-tokens", "12", "--top-p", "0.95", "--no-save"]) == 0
    assert_both_received(base, spec, {"top_p": 0.95, "response_format": SCHEMA.body()})


def test_race_users_sends_the_sampling_with_every_users_request(runs_dir: Path) -> None:
    with Standin.pair(FAST) as (base, spec):
        assert main(["race", "--baseline-url", base.url, "--speculative-url", spec.url, "--prompt", "Count",
                     "--max-tokens", "12", "--users", "2", "--order", "sequential", "--top-p", "0.7", "--seed", "3",
                     "--stop", "STOP", "--response-format", "json_object", "--no-save", "--json"]) == 0
    assert_both_received(base, spec, {"top_p": 0.7, "seed": 3, "stop": ["STOP"],
                                      "response_format": {"type": "json_object"}}, n=2)


SECRET = "sk-do-not-echo"


@pytest.mark.parametrize(("flags", "message"), [
    (["--top-p", "1.5"], "--top-p: Input should be less than or equal to 1"),
    (["--top-p", "x"], "argument --top-p: invalid float value"),
    (["--top-k", "-5"], "--top-k: Input should be greater than or equal to -1"),
    (["--min-p", "2"], "--min-p: Input should be less than or equal to 1"),
    (["--stop", ""], "--stop.0: String should have at least 1 character"),
    (["--stop", "x" * 201], "--stop.0: String should have at most 200 characters"),
    (["--presence-penalty", "3"], "--presence-penalty: Input should be less than or equal to 2"),
    (["--repetition-penalty", "0"], "--repetition-penalty: Input should be greater than 0"),
    (["--seed", "1.5"], "argument --seed: invalid int value"),
    (["--response-format", "xml"], "--response-format xml: cannot read it"),
    (["--response-format", "FILE:not json " + SECRET], "--response-format FILE: not JSON (line 1, column 1"),
    (["--response-format", "FILE:" + json.dumps([SECRET])], "must hold a JSON object"),
    (["--response-format", "FILE:" + json.dumps({"type": "xml", "x": SECRET})],
     "--response-format FILE: type: Input should be 'text', 'json_object' or 'json_schema'"),
    (["--response-format", "FILE:" + json.dumps({"type": "json_schema"})], "json_schema"),
    (["--response-format", "FILE:" + json.dumps({"type": "object", "description": SECRET * 20_000})],
     "the file is over 262,144 bytes"),
    (["--response-format", "FILE:" + json.dumps({"type": "object", "description": SECRET * 6_000})],
     "json_schema.schema: Value error, the JSON schema is over 65,536 bytes"),
    (["--response-format", "FILE:" + "[" * 100_000], "nested too deeply"),
])
def test_a_bad_sampling_flag_is_a_usage_error_naming_it_and_nothing_is_sent(
        runs_dir: Path, tmp_path: Path, flags: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    if flags[-1].startswith("FILE:"):
        path = tmp_path / "rf.json"
        path.write_text(flags[-1].removeprefix("FILE:"), encoding="utf-8")
        flags = [*flags[:-1], str(path)]
        message = message.replace("FILE", str(path))
    with Standin.pair(FAST) as (base, spec), pytest.raises(SystemExit) as exit_:
        main(["race", "--baseline-url", base.url, "--speculative-url", spec.url, "--preset", "json_reformat",
              "--max-tokens", "8", *flags])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert message in err, err
    assert SECRET not in err  # never the file's text
    assert bodies(base) == bodies(spec) == [] and not runs_dir.exists()


# --------------------------------------------------------------------------- the one sampling line


def test_the_sampling_line_shows_only_what_was_set_on_one_escaped_line() -> None:
    assert view.sampling_text(RaceRequest(prompt="x", temperature=0.8)) == "T=0.8"
    req = RaceRequest(prompt="x", stop=["<b>\n", "a" * 80], response_format={"type": "json_object"})
    line = view.sampling_text(req)
    assert "\n" not in line and len(line) < 100 and line.endswith("… · JSON object")
    assert line.startswith("T=0 · stop ['<b>\\n', 'aaa")
    banner = view.recording_banner_html(asyncio.run(_finished(req)))
    assert "&lt;b&gt;" in banner and "<b>" not in banner


def test_a_preset_that_sets_sampling_says_so_beside_what_to_expect() -> None:
    assert view.sampling_note(SHIPPED["json_reformat"].to_request()) == ""
    assert view.sampling_note(SHIPPED["json_reformat_schema"].to_request()) == (
        " (sent to both sides: T=0 · JSON schema 'order_record')")
    assert view.sampling_note(RaceRequest(prompt="x", seed=3)) == " (sent to both sides: T=0 · seed 3)"


async def _finished(req: RaceRequest):  # a race over two stand-ins, for its RaceResult
    with Standin.pair(FAST) as (base, spec):
        return await run_race(req.model_copy(update={"max_tokens": 4}),
                              Settings(baseline_url=base.url, speculative_url=spec.url, save_runs=False))
