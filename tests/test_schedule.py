"""The recommended speculation schedule (demo/sweep/schedule.py, common/spec_schedule.py): the core on
hand-made points (bands, merging, SLO, the last band, configured-but-off), bad schedules one line each,
and real load sweeps over stand-ins of a baseline and two arms (k=4, k=2) whose per-user speed falls
with load: the recommended k in every band is the one the run's own figures give (the designed bands
on a given clock: tests/test_given_clock.py)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from html import escape
from pathlib import Path

import pytest

from common.spec_schedule import check_schedule, parse_schedule
from demo.cli import main
from demo.load.engine import LoadResult, LoadSpec
from demo.server_info import ServerInfo
from demo.slo import Slo
from demo.sweep.models import SweepResult, SweepSpec
from demo.sweep.schedule import (
    NoRecommendation,
    Recommendation,
    ServerPoint,
    deploy_snippets,
    off_cost,
    recommend,
    server_points,
)
from demo.sweep.tables import schedule_html
from harness.standin import StandinBehavior
from harness.standin_process import StandinProcess, processes


def pts(rows: dict[int, dict[str, float]], k: dict[str, int]) -> list[ServerPoint]:
    """Points from {users: {server: per-user tok/s}}."""
    return [ServerPoint(users=u, server=s, k=k[s], per_user_decode_tokens_per_s=v)
            for u, row in rows.items() for s, v in row.items()]


K = {"baseline": 0, "k4": 4, "k2": 2}


def rec_of(points: list[ServerPoint], slo: Slo | None = None) -> Recommendation:
    rec = recommend(points, {"k4": {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4},
                             "k2": {"method": "ngram", "num_speculative_tokens": 2}}, slo)
    assert isinstance(rec, Recommendation), rec
    return rec


# --------------------------------------------------------------------------- the core


def test_bands_at_measured_counts_merge_and_never_extrapolate() -> None:
    rec = rec_of(pts({1: {"baseline": 40, "k4": 160, "k2": 70}, 2: {"baseline": 38, "k4": 72, "k2": 56},
                      4: {"baseline": 35, "k4": 35, "k2": 40}, 8: {"baseline": 30, "k4": 16, "k2": 25},
                      16: {"baseline": 25, "k4": 8, "k2": 15}}, K))
    assert [(b.users_from, b.users_to, b.k) for b in rec.bands] == [(1, 3, 4), (4, 7, 2), (8, 16, 0)]
    cfg = rec.speculative_config
    assert cfg["num_speculative_tokens_per_batch_size"] == [[1, 3, 4], [4, 7, 2], [8, 16, 0]]
    # the method config of the arm with the largest k, num_speculative_tokens at least the largest k
    assert (cfg["method"], cfg["num_speculative_tokens"], cfg["prompt_lookup_max"]) == ("ngram", 4, 4)
    assert rec.bands[2].measured_users == [8, 16] and "above 16 users (not measured)" in rec.bands[2].why
    assert "at 1 user k4 (k=4) was fastest" in rec.bands[0].why
    assert "above 16 the last k (not measured)" in rec.text and "batch size = users" in rec.text
    assert check_schedule(cfg["num_speculative_tokens_per_batch_size"])  # what vLLM's own check accepts


def test_a_schedule_runs_one_method_and_says_which_arms_it_left_out() -> None:
    rows: dict[int, dict[str, float]] = {1: {"baseline": 40, "eagle3": 150, "ngram": 120, "ngram-k2": 80},
                                         4: {"baseline": 35, "eagle3": 60, "ngram": 30, "ngram-k2": 45}}
    k = {"baseline": 0, "eagle3": 3, "ngram": 4, "ngram-k2": 2}
    configs = {"eagle3": {"method": "eagle3", "model": "h"}, "ngram": {"method": "ngram"},
               "ngram-k2": {"method": "ngram"}}
    rec = recommend(pts(rows, k), configs)
    assert isinstance(rec, Recommendation)
    assert [(b.k, b.server) for b in rec.bands] == [(3, "eagle3")] and rec.speculative_config["method"] == "eagle3"
    assert rec.notes == ["arms of another method than eagle3 left out (a schedule runs one method): ngram, ngram-k2"]
    rows[1]["eagle3"] = 100.0  # n-gram fastest at 1 user: the n-gram arms, eagle3 left out
    rec = recommend(pts(rows, k), configs)
    assert isinstance(rec, Recommendation)
    assert [(b.k, b.server) for b in rec.bands] == [(4, "ngram"), (2, "ngram-k2")]
    assert "left out (a schedule runs one method): eagle3" in rec.notes[0]
    unknown = recommend(pts({1: {"baseline": 40, "k4": 160}}, K))
    assert isinstance(unknown, Recommendation) and "method is not known" in unknown.notes[0]


def test_first_band_starts_at_1_even_when_the_lowest_count_is_higher() -> None:
    rec = rec_of(pts({2: {"baseline": 38, "k4": 72}, 8: {"baseline": 30, "k4": 16}}, K))
    assert [(b.users_from, b.users_to, b.k) for b in rec.bands] == [(1, 7, 4), (8, 8, 0)]
    assert "1-1 users not measured: the k of 2" in rec.bands[0].why


def test_an_slo_picks_the_best_that_meets_it() -> None:
    points = [ServerPoint(users=1, server="baseline", k=0, per_user_decode_tokens_per_s=40, itl_p95_s=0.020),
              ServerPoint(users=1, server="k4", k=4, per_user_decode_tokens_per_s=160, itl_p95_s=0.090),
              ServerPoint(users=1, server="k2", k=2, per_user_decode_tokens_per_s=70, itl_p95_s=0.040)]
    assert rec_of(points).bands[0].k == 4
    assert rec_of(points, Slo.of_ms(itl_ms=50)).bands[0].k == 2
    none = rec_of(points, Slo.of_ms(itl_ms=5)).bands[0]
    assert none.k == 4 and "none meets ITL p95 ≤ 5 ms: the fastest" in none.why
    assert rec_of(points, Slo(min_user_tokens_per_s=100)).bands[0].k == 4


def test_configured_but_off_says_when_to_route_to_a_plain_server() -> None:
    base = pts({8: {"baseline": 100.0}, 16: {"baseline": 80.0}}, K)
    assert "no 'adaptive' arm" in off_cost(base).text
    drafting = [*base, ServerPoint(users=16, server="adaptive", k=4, per_user_decode_tokens_per_s=70, drafts=12)]
    assert "drafted at every count" in off_cost(drafting).text
    slow = [*base, ServerPoint(users=8, server="adaptive", k=4, per_user_decode_tokens_per_s=94, drafts=0),
            ServerPoint(users=16, server="adaptive", k=4, per_user_decode_tokens_per_s=75, drafts=0)]
    cost = off_cost(slow)
    assert (cost.users, cost.ratio, cost.route_to_baseline) == (16, pytest.approx(75 / 80), True)
    assert "route the k=0 band to a server without speculation" in cost.text
    free = [*base, ServerPoint(users=16, server="adaptive", k=4, per_user_decode_tokens_per_s=79.5, drafts=0)]
    assert off_cost(free).route_to_baseline is False
    # the adaptive arm is never a candidate: its k changes with load
    rec = rec_of([*slow, *pts({8: {"k4": 50.0}, 16: {"k4": 40.0}}, K)])
    assert all(b.server != "adaptive" for b in rec.bands) and rec.configured_but_off.users == 16


def test_configured_but_off_is_read_at_every_off_count_not_only_the_top() -> None:
    # The CPU pair's load sweep of 2026-12-03 (docs/benchmarks.md, "An adaptive arm on the CPU"): the
    # default schedule turned drafting off from 3 users, and "off" cost most at 4-8 users (0.69x,
    # 0.86x), where the recommendation keeps k=4; at the top counts, the k=0 band, it cost nothing.
    rows: dict[int, dict[str, float]] = {1: {"baseline": 17.5, "k4": 57.2}, 2: {"baseline": 13.8, "k4": 36.8},
                                         4: {"baseline": 20.2, "k4": 30.1}, 8: {"baseline": 15.3, "k4": 17.9},
                                         16: {"baseline": 10.0, "k4": 9.1}, 32: {"baseline": 4.9, "k4": 4.8}}
    adaptive = {1: (46.7, 58), 2: (42.3, 116), 4: (13.9, 0), 8: (13.2, 0), 16: (10.1, 0), 32: (5.2, 0)}
    points = pts(rows, K) + [ServerPoint(users=u, server="adaptive", k=4, per_user_decode_tokens_per_s=v, drafts=d)
                             for u, (v, d) in adaptive.items()]
    rec = rec_of(points)
    assert [(b.users_from, b.users_to, b.k) for b in rec.bands] == [(1, 15, 4), (16, 32, 0)]
    off = rec.configured_but_off
    assert [(o.users, round(o.ratio, 2)) for o in off.by_users] == [(4, 0.69), (8, 0.86), (16, 1.01), (32, 1.06)]
    assert off.costs_at_users == [4, 8]
    assert (off.users, off.route_to_baseline) == (16, False)  # the worst of the k=0 band: it costs nothing there
    assert "off costs at 4, 8 users" in off.text and "in the k=0 band (16, 32 users" in off.text
    # The same, with the k=0 band slow: then route it to a server without speculation.
    adaptive[32] = (4.0, 0)
    slow = pts(rows, K) + [ServerPoint(users=u, server="adaptive", k=4, per_user_decode_tokens_per_s=v, drafts=d)
                           for u, (v, d) in adaptive.items()]
    off = rec_of(slow).configured_but_off
    assert (off.users, off.route_to_baseline, off.costs_at_users) == (32, True, [4, 8, 32])
    assert "route the k=0 band to a server without speculation" in off.text


def test_the_adaptive_line_is_read_from_the_measurement() -> None:
    k = {"baseline": 0, "ngram": 4, "adaptive": 4}
    rows: dict[int, dict[str, float]] = {1: {"baseline": 40, "ngram": 100, "adaptive": 98},
                                         8: {"baseline": 30, "ngram": 24, "adaptive": 29.5}}
    line = rec_of(pts(rows, k)).adaptive_text
    assert line == ("adaptive keeps ngram's gain at 1 user (speedup 2.45× vs 2.50×); where ngram loses (8 users) "
                    "adaptive stays at or above the baseline (speedup 0.98× at worst)")
    rows[8]["adaptive"] = 25.0
    assert "adaptive falls below the baseline (speedup 0.83× at worst)" in rec_of(pts(rows, k)).adaptive_text
    rows[1]["adaptive"] = 60.0
    assert rec_of(pts(rows, k)).adaptive_text.startswith(
        "adaptive loses ngram's gain at 1 user (speedup 1.50× vs 2.50×)")
    assert rec_of(pts({1: {"baseline": 40, "k4": 160}}, K)).adaptive_text.startswith("n/a: the sweep needs")


def test_nothing_to_recommend_is_one_reason() -> None:
    assert isinstance(recommend([]), NoRecommendation)
    only_base = pts({1: {"baseline": 40.0}}, K)
    assert "no arm with a known k" in recommend(only_base).reason  # type: ignore[union-attr]
    unknown_k = [*only_base, ServerPoint(users=1, server="x", k=None, per_user_decode_tokens_per_s=90)]
    assert isinstance(recommend(unknown_k), NoRecommendation)


def test_deploy_snippets_carry_the_same_json() -> None:
    rec = rec_of(pts({1: {"baseline": 40, "k4": 160}, 4: {"baseline": 35, "k4": 20}}, K))
    text = json.dumps(rec.speculative_config, separators=(",", ":"))
    snip = deploy_snippets(rec)
    assert snip["flag"] == f"--speculative-config '{text}'"
    assert snip["compose_env"] == f"SPEC_CONFIG='{text}'" and json.dumps(text) in snip["helm"]


@pytest.mark.parametrize(("schedule", "message"), [
    ("[[1, 4, 4], [3, 8, 0]]", "ranges overlap"),
    ("[[1, 4, -1]]", "k must be >= 0"),
    ("[[2, 4, 4]]", "the first range must start at 1"),
    ("[[1, 4, 4], [6, 5, 0]]", "starts above its end"),
    ("[]", "non-empty list"),
    ("[[1, 2]]", "three whole numbers"),
    ("[[1, 2, true]]", "three whole numbers"),
    ("{not json", "not valid JSON"),
])
def test_bad_schedules_are_one_line_each(schedule: str, message: str) -> None:
    with pytest.raises(ValueError, match=message) as e:
        parse_schedule(schedule)
    assert "\n" not in str(e.value)


def test_a_good_schedule_is_sorted() -> None:
    assert parse_schedule("[[3, 256, 0], [1, 2, 4]]") == [(1, 2, 4), (3, 256, 0)]


# --------------------------------------------------------------------------- on stand-ins

USERS = [1, 2, 4, 8]
TOKENS = 60
# Per stream: rate / (1 + slowdown (n - 1)) at n streams in flight, so that the bands differ by count
# (designed: k=4 at 1 and 2 users, k=2 at 4, off at 8; tests/test_given_clock.py's SCHEDULE).
BEHAVIORS = {
    "baseline": StandinBehavior(tokens_per_s=40, ttft_s=0.02, slowdown_in_flight=0.05),
    "k4": StandinBehavior(tokens_per_s=160, ttft_s=0.02, slowdown_in_flight=1.2, speculative=True,
                          num_spec_tokens=4, chunk_sizes=[1, 3, 5, 2]),
    "k2": StandinBehavior(tokens_per_s=70, ttft_s=0.02, slowdown_in_flight=0.25, speculative=True,
                          num_spec_tokens=2, chunk_sizes=[1, 3, 2]),
}


@pytest.fixture(scope="module")
def three() -> Iterator[dict[str, StandinProcess]]:
    with processes(*BEHAVIORS.values()) as servers:
        yield dict(zip(BEHAVIORS, servers, strict=True))


def fastest_k(points: list[ServerPoint]) -> dict[int, int]:
    """Per count, the k of the server measured fastest per user there (the schedule's rule without an SLO)."""
    by: dict[int, list[ServerPoint]] = {}
    for p in points:
        by.setdefault(p.users, []).append(p)
    return {u: int(max(ps, key=lambda p: (p.per_user_decode_tokens_per_s or 0.0, -(p.k or 0))).k or 0)
            for u, ps in by.items()}


# Which k wins at which count rests on measured timing in these two: the designed bands (k=4 for 1-3,
# k=2 for 4-7, off from 8) are tests/test_given_clock.py's test_the_schedule_picks_the_fastest_k_in_
# every_band, on the same designs; the measured rates' accuracy is the timing stage's (the load sweep's
# speedups against the stand-ins' truth). Here: the schedule is the one the run's own figures give, and
# the file, the page and `python -m demo schedule` say that one.


def test_a_load_sweeps_recommended_k_is_the_fastest_measured_in_every_band(
        three: dict[str, StandinProcess], capsys: pytest.CaptureFixture[str], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECDEMO_SAVE_RUNS", "false")
    monkeypatch.delenv("SPECDEMO_ARMS", raising=False)
    args = ["load", "--baseline-url", three["baseline"].url, "--arm", f"k4={three['k4'].url}",
            "--arm", f"k2={three['k2'].url}", "--users", ",".join(map(str, USERS)), "--preset", "json_reformat",
            "--max-tokens", str(TOKENS), "--json", "--no-progress", "--out", str(tmp_path)]
    assert main(args) == 0
    out = json.loads(capsys.readouterr().out)
    rec = out["recommendation"]
    raw = (tmp_path / "load.json").read_text()
    saved = LoadResult.model_validate_json(raw)
    fastest = fastest_k(server_points([s.cell for s in saved.steps]))
    assert sorted(fastest) == USERS
    by_band = {u: next(b["k"] for b in rec["bands"] if b["users_from"] <= u <= b["users_to"]) for u in USERS}
    assert by_band == fastest, [(s["users"], s["arms"]) for s in out["steps"]]
    schedule = rec["speculative_config"]["num_speculative_tokens_per_batch_size"]
    assert schedule == [[b["users_from"], b["users_to"], b["k"]] for b in rec["bands"]]
    assert rec["speculative_config"]["num_speculative_tokens"] == max(max(fastest.values()), 1)
    assert "n/a: the sweep has no 'adaptive' arm" in rec["configured_but_off"]["text"]
    assert json.loads(raw)["recommendation"]["bands"] == rec["bands"]
    compact = json.dumps(schedule, separators=(",", ":"))
    assert f'<div class="sd-schedule" data-schedule="{compact}">' in (tmp_path / "load.html").read_text()


def test_the_evaluator_s_concurrency_cells_give_the_same_schedule_in_results_json_and_the_report(
        three: dict[str, StandinProcess], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("SPECDEMO_SAVE_RUNS", "false")
    monkeypatch.delenv("SPECDEMO_ARMS", raising=False)
    code = main(["sweep", "--baseline-url", three["baseline"].url, "--arm", f"k4={three['k4'].url}",
                 "--arm", f"k2={three['k2'].url}", "--presets", "json_reformat", "--concurrency",
                 ",".join(map(str, USERS)), "--repeats", "1", "--warmup", "0", "--max-tokens", str(TOKENS),
                 "--out", str(tmp_path), "--no-progress"])
    capsys.readouterr()
    assert code == 0
    result = SweepResult.model_validate_json((tmp_path / "results.json").read_text())
    rec = result.recommendation
    assert isinstance(rec, Recommendation) and rec.workload == "json_reformat"
    by_band = {u: next(b.k for b in rec.bands if b.users_from <= u <= b.users_to) for u in USERS}
    assert by_band == fastest_k(server_points(result.cells))
    page = (tmp_path / "report.html").read_text()
    schedule = rec.speculative_config["num_speculative_tokens_per_batch_size"]
    assert f'<div class="sd-schedule" data-schedule="{json.dumps(schedule, separators=(",", ":"))}">' in page
    assert page.count('<tr data-k="') == len(rec.bands) and escape(rec.text) in page
    # python -m demo schedule reads the same file and prints the same schedule, with an SLO too
    model = next(s.model for s in result.servers if s.model)
    assert main(["schedule", str(tmp_path / "results.json"), "--json", "--model", model]) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["speculative_config"] == rec.speculative_config and again["deploy"]["flag"].startswith("--spec")
    assert main(["schedule", str(tmp_path / "results.json"), "--min-user-tokens-per-s", "1000"]) == 0
    assert "none meets per-user decode ≥ 1000 tokens/s" in capsys.readouterr().out


def test_the_page_shows_the_core_s_schedule_and_escapes_it() -> None:
    rec = rec_of(pts({1: {"baseline": 40, "k4": 160}, 4: {"baseline": 35, "k4": 20}}, K))
    rec.bands[0].server = "<b>k4</b>"
    html = schedule_html(rec)
    assert "<b>k4</b>" not in html and "&lt;b&gt;k4&lt;/b&gt;" in html
    assert html.count("<tr data-k=") == 2 and escape(rec.text) in html
    assert "n/a (no concurrency cells" in schedule_html(NoRecommendation(reason="no concurrency cells"))



def _bad(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    with pytest.raises(SystemExit) as e:
        main(["schedule", *args])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err, err
    return err


def test_schedule_cli_bad_input_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = SweepSpec(baseline_url="http://127.0.0.1:9", speculative_url="http://127.0.0.1:9", presets=["x"])
    other = tmp_path / "results.json"
    other.write_text(SweepResult(spec=spec, servers=[ServerInfo(side="baseline", url="u", model="llama-8b")])
                     .model_dump_json())
    assert "measured on another model than --model" in _bad(capsys, str(other), "--model", "qwen3-8b")
    assert "no concurrency cells" in _bad(capsys, str(other), "--model", "llama-8b")
    steps = tmp_path / "load.json"
    steps.write_text(LoadResult(spec=LoadSpec(users=[1], workload="x", max_tokens=8, temperature=0,
                                              baseline_url="u", speculative_url="v")).model_dump_json())
    assert "fewer than two measured load steps" in _bad(capsys, str(steps))
    junk = tmp_path / "junk.json"
    junk.write_text("<script>secret</script>")
    assert "not a JSON object" in (err := _bad(capsys, str(junk))) and "secret" not in err
    junk.write_text('{"kind": "load", "steps": "secret"}')
    assert "not a valid load.json" in (err := _bad(capsys, str(junk))) and "secret" not in err
    assert "no such file" in _bad(capsys, str(tmp_path / "missing.json")).lower()
    assert "greater than 0" in _bad(capsys, str(steps), "--max-itl-ms", "-1")
