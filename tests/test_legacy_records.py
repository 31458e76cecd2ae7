"""Records written before the one simultaneous/sequential vocabulary, and before the two ratios got
one name each (results.json schema 3), still load, with the new words and their old meanings.

The fixtures were written by the code of that time (tests/fixtures/README.md): a saved race with
``"mode": "race"``, an evaluator results.json of schema 1 and one of schema 2, and a load.json of
that time.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from demo.cli.race import add_race_parser
from demo.load.engine import LoadResult
from demo.results import RaceRequest, RaceResult, RaceSnapshot, SideSnapshot
from demo.runs.replay import run_label
from demo.runs.store import read_run, save_run
from demo.sweep.models import ARM_FIELDS, OLD_RATIO_NAMES, SCHEMA_VERSION, CellResult, SweepResult
from demo.sweep.report import cell_row

FIXTURES = Path(__file__).parent / "fixtures"
LEGACY_RUN = FIXTURES / "legacy-run-mode-race.json"


def test_a_race_saved_with_mode_race_loads_as_simultaneous(tmp_path: Path) -> None:
    raw = json.loads(LEGACY_RUN.read_text())
    assert raw["mode"] == "race" and raw["request"]["mode"] == "race" and "order" not in raw  # truly old
    result = read_run(LEGACY_RUN)
    assert result.order == "simultaneous" and result.request.order == "simultaneous"
    assert result.preset == raw["preset"] and result.speedup == raw["speedup"]
    assert result.speculative.text == raw["speculative"]["text"]
    assert len(result.speculative.events) == len(raw["speculative"]["events"]) > 0
    # Saved again, it is written in the new words only, and reads back the same.
    again = save_run(result, tmp_path)
    assert again.name.endswith("-simultaneous.json")
    rewritten = json.loads(again.read_text())
    assert rewritten["order"] == "simultaneous" and "mode" not in rewritten and "mode" not in rewritten["request"]
    assert read_run(again) == result


def test_a_sequential_race_saved_with_mode_loads_as_sequential(tmp_path: Path) -> None:
    raw = json.loads(LEGACY_RUN.read_text())
    raw["mode"] = raw["request"]["mode"] = "sequential"
    path = tmp_path / "20261130T153449761253-json_reformat-sequential.json"
    path.write_text(json.dumps(raw))
    result = read_run(path)
    assert result.order == "sequential" and result.request.order == "sequential"


@pytest.mark.parametrize("old", [{"mode": "race"}, {"order": "race"}, {"mode": "sequential"}])
def test_the_old_key_and_value_are_accepted_everywhere(old: dict[str, str]) -> None:
    want = "sequential" if "sequential" in old.values() else "simultaneous"
    assert RaceRequest.model_validate(old).order == want
    side = SideSnapshot(side="baseline")
    assert RaceSnapshot.model_validate({**old, "baseline": side, "speculative": side}).order == want


def test_an_unknown_order_is_still_refused() -> None:
    with pytest.raises(ValueError, match="order"):
        RaceRequest.model_validate({"mode": "fast"})
    with pytest.raises(ValueError, match="order"):
        RaceResult.model_validate_json(LEGACY_RUN.read_text().replace('"mode": "race"', '"mode": "parallel"', 1))


def test_an_old_run_file_name_is_labelled_in_the_new_words() -> None:
    old = run_label(Path("20261130T153449761253-json_reformat-race.json"))
    assert old.endswith("· json_reformat · Simultaneous race")
    assert run_label(Path("20261130T153449-json_reformat-simultaneous.json")).endswith("· Simultaneous race")


def test_an_old_results_json_loads() -> None:
    raw = json.loads((FIXTURES / "legacy-results.json").read_text())
    result = SweepResult.model_validate(raw)
    assert raw["schema_version"] == 1 and result.schema_version == SCHEMA_VERSION == 3
    assert result.spec.order == "sequential" and [c.settings.order for c in result.cells] == ["sequential"]
    # Schema 1-2: a cell's "speedup" was the throughput ratio and "decode_speedup" the speedup.
    cell, old = result.cells[0], raw["cells"][0]
    assert cell.throughput_ratio is not None and cell.throughput_ratio.median == old["speedup"]["median"]
    assert cell.speedup is not None and cell.speedup.median == old["decode_speedup"]["median"]
    assert result.verdicts and result.verdicts[0].headline == raw["verdicts"][0]["headline"]


@pytest.mark.parametrize(("flags", "want"), [
    ([], "simultaneous"),
    (["--order", "simultaneous"], "simultaneous"),
    (["--order", "sequential"], "sequential"),
    (["--mode", "race"], "simultaneous"),  # the old flag and value
    (["--mode", "sequential"], "sequential"),
    (["--order", "race"], "simultaneous"),
])
def test_the_race_command_takes_order_and_the_old_mode_flag(flags: list[str], want: str) -> None:
    parser = argparse.ArgumentParser()
    add_race_parser(parser.add_subparsers())
    assert parser.parse_args(["race", "--prompt", "x", *flags]).order == want


def test_the_race_command_refuses_an_unknown_order(capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser()
    add_race_parser(parser.add_subparsers())
    with pytest.raises(SystemExit):
        parser.parse_args(["race", "--prompt", "x", "--order", "fast"])
    assert "invalid choice: 'fast'" in capsys.readouterr().err


def test_a_race_saved_before_the_sampling_fields_loads_and_says_what_it_sent(tmp_path: Path) -> None:
    from demo import view
    from demo.cli.race import result_json
    from demo.runs.export import export_html
    from demo.sampling import SAMPLING_FIELDS, sampling_body

    raw = json.loads(LEGACY_RUN.read_text())
    assert not set(SAMPLING_FIELDS) & set(raw["request"]) and raw["request"]["seed"] is None  # truly old
    result = read_run(LEGACY_RUN)
    assert sampling_body(result.request) == {} and result.request.seed is None
    # It sent temperature and max tokens only: that is what --json, Replay and the export say.
    assert result_json(result)["sampling"] == {"temperature": raw["request"]["temperature"],
                                               "max_tokens": raw["request"]["max_tokens"]}
    line = view.sampling_text(result.request)
    assert line == f"T={raw['request']['temperature']:g}"
    assert f"{line} · max {raw['request']['max_tokens']} tokens" in view.recording_banner_html(result)
    assert f"{line} · max {raw['request']['max_tokens']} tokens" in export_html(result)
    # Saved again (its sampling fields written as null: not sent), it reads back the same.
    again = save_run(result, tmp_path)
    assert read_run(again) == result


V2_RESULTS = FIXTURES / "legacy-results-v2.json"
V2_LOAD = FIXTURES / "legacy-load-v2.json"


def test_a_results_json_of_schema_2_is_read_with_its_meanings_and_written_in_todays_names(tmp_path: Path) -> None:
    raw = json.loads(V2_RESULTS.read_text())
    assert raw["schema_version"] == 2 and all("decode_speedup" in c for c in raw["cells"])  # truly old
    result = SweepResult.model_validate(raw)
    assert result.schema_version == 3 and len(result.cells) == len(raw["cells"]) == 2
    for cell, old in zip(result.cells, raw["cells"], strict=True):
        # The two ratios differ in this file, so a swap could not pass.
        assert old["speedup"]["median"] != old["decode_speedup"]["median"]
        for got in (cell, cell.arms["speculative"]):
            assert got.speedup is not None and got.speedup.median == old["decode_speedup"]["median"]
            assert got.throughput_ratio is not None and got.throughput_ratio.median == old["speedup"]["median"]
        assert cell.efficiency == old["efficiency"]  # computed from the speedup then as now
        assert cell_row(cell)["speedup_median"] == old["decode_speedup"]["median"]
    # Written again: today's version and names, the old name gone, the same figures.
    again = json.loads(result.model_dump_json())
    assert again["schema_version"] == 3 and all("decode_speedup" not in c for c in again["cells"])
    back = SweepResult.model_validate(again)
    assert [c.speedup for c in back.cells] == [c.speedup for c in result.cells]
    assert [c.throughput_ratio for c in back.cells] == [c.throughput_ratio for c in result.cells]


def test_a_load_json_of_that_time_reads_its_cells_with_their_meanings() -> None:
    """A load step's own figures were named as today; the evaluator's cell inside it was not."""
    raw = json.loads(V2_LOAD.read_text())
    result = LoadResult.model_validate(raw)
    for step, old in zip(result.steps, raw["steps"], strict=True):
        assert "decode_speedup" in old["cell"]  # truly old
        assert step.speedup == old["speedup"] == old["cell"]["decode_speedup"]["median"]
        assert step.cell.speedup is not None and step.cell.speedup.median == step.speedup
        assert step.cell.throughput_ratio is not None
        assert step.cell.throughput_ratio.median == step.throughput_ratio == old["cell"]["speedup"]["median"]


def test_a_load_step_is_a_view_over_its_cell_and_writes_the_same_json() -> None:
    """Loading reads a step's cell alone (a figure beside it that disagrees is not believed); writing
    puts every figure of that time back beside the cell, equal to the file's, for readers of the JSON."""
    raw = json.loads(V2_LOAD.read_text())
    written = json.loads(LoadResult.model_validate(raw).model_dump_json())
    for old, new in zip(raw["steps"], written["steps"], strict=True):
        assert {k: v for k, v in new.items() if k != "cell"} == {k: v for k, v in old.items() if k != "cell"}
    tampered = json.loads(V2_LOAD.read_text())
    step = tampered["steps"][0]
    step["speedup"], step["users"], step["baseline"]["per_user_decode_tokens_per_s"] = 99.0, 99, 99.0
    read = LoadResult.model_validate(tampered).steps[0]
    assert read.speedup == raw["steps"][0]["speedup"] != 99.0
    assert read.users == step["cell"]["settings"]["concurrency"] != 99
    assert read.baseline.per_user_decode_tokens_per_s == raw["steps"][0]["baseline"]["per_user_decode_tokens_per_s"]
    (name,) = read.arms
    assert read.arm_view(name).speedup == read.arms[name].speedup == read.speedup


def test_a_race_holds_arms_only_and_writes_the_pairs_keys_beside_them() -> None:
    """A pair's race (saved before arms) loads as one arm; written again, its first arm's figures
    stand beside ``arms`` as before, the side once; read back, a figure there that disagrees with
    the arm is not believed: the arm is the record."""
    assert {"speculative", "speedup", "na_reasons"}.isdisjoint(RaceResult.model_fields)
    raw = json.loads(LEGACY_RUN.read_text())
    result = RaceResult.model_validate(raw)
    assert list(result.arms) == ["speculative"] and result.speculative is result.arms["speculative"].side
    written = json.loads(result.model_dump_json())
    for key in ("speculative", "speedup", "e2e_speedup", "identical_text", "first_difference", "na_reasons"):
        assert key in written, key
    assert written["speedup"] == raw["speedup"] and written["arms"]["speculative"]["side"] is None
    assert written["speculative"]["text"] == raw["speculative"]["text"]
    written["speedup"], written["identical_text"] = 99.0, False
    again = RaceResult.model_validate(written)
    assert again.speedup == raw["speedup"] != 99.0 and again.identical_text == raw["identical_text"]
    assert again.speculative.text == raw["speculative"]["text"]  # the side, from `speculative`


CELL_FIELDS_SINCE_V2 = {"arm_requests"}


def test_a_cell_holds_arms_only_and_writes_the_pairs_keys_beside_them() -> None:
    """A sweep's cell of schema 2 (a pair's figures beside one arm) loads as its arms; written again,
    every key of the file stands beside ``arms`` under today's name, with the file's figures, the
    first arm's side once; the first arm's n/a reasons are written within the cell's, and read back
    into the arm; a figure beside ``arms`` that disagrees with the arm is not believed."""
    assert {"speculative", *ARM_FIELDS}.isdisjoint(CellResult.model_fields)
    raw = json.loads(V2_RESULTS.read_text())
    written = json.loads(SweepResult.model_validate(raw).model_dump_json())
    for old, new in zip(raw["cells"], written["cells"], strict=True):
        renamed = {OLD_RATIO_NAMES.get(k, k): v for k, v in old.items()}
        # A field added since (each arm's own per-request outcomes, for the per-turn table per arm)
        # is written empty for a file that had none: nothing else is added, nothing lost.
        assert all(new[k] == {} for k in CELL_FIELDS_SINCE_V2), {k: new[k] for k in CELL_FIELDS_SINCE_V2}
        assert set(renamed) == set(new) - CELL_FIELDS_SINCE_V2, set(renamed) ^ set(new)
        for key in ("speculative", *ARM_FIELDS):
            assert new[key] == renamed[key], key
        assert new["arms"]["speculative"]["side"] is None  # written once, as `speculative`
    cell = CellResult.model_validate(written["cells"][0])
    cell.first_arm.na_reasons["acceptance_rate"] = "the server reports no speculative metrics"
    cell.na_reasons["status"] = "stopped after 1 of 2 repeats"
    out = json.loads(cell.model_dump_json())
    assert out["na_reasons"] == {"acceptance_rate": "the server reports no speculative metrics",
                                 "status": "stopped after 1 of 2 repeats"}
    out["speedup"], out["acceptance_rate"] = {"median": 99.0, "min": 99.0, "max": 99.0, "n": 1}, 0.99
    back = CellResult.model_validate(out)
    assert back.na_reasons == {"status": "stopped after 1 of 2 repeats"}
    assert back.first_arm.na_reasons == {"acceptance_rate": "the server reports no speculative metrics"}
    assert back.speedup == cell.speedup and back.speedup is not None and back.speedup.median != 99.0
    assert back.acceptance_rate == cell.acceptance_rate != 0.99
    assert back.speculative == cell.speculative == back.arms["speculative"].side
