"""Guardrails and drift from a measurement, against stand-in servers whose truth is known.

A small real sweep on a stand-in pair writes results.json and guardrails.rules.yml. The rules'
thresholds are the sweep's figures (checked against results.json by hand); `promtool check rules`
accepts the file and `promtool test rules` shows each rule firing on a synthetic series (only after
its 10 minutes) and staying quiet on a healthy one. `python -m demo check` on the same stand-ins,
with races running through its window, says "holds"; the speculative stand-in restarted with fewer
tokens per step is flagged (exit 1, a line naming acceptance). Bad input: one line, exit 2.
promtool tests skip, saying so, without Debian's prometheus package (scripts/install_prometheus.sh).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from common.paths import ROOT
from common.sides import Side
from common.waiting import wait_for
from demo.race import run_race
from demo.results import Message, RaceRequest
from demo.settings import Settings
from demo.sweep.drift import DriftMargins, LiveFigures, drift
from demo.sweep.guardrails import FILE_NAME, JOB, Margins, guardrails, rules_text
from demo.sweep.measured import Measured, measured_figures, read_results
from harness.ports import free_port
from harness.standin import Standin, StandinBehavior
from servers import monitor

# Streams of 1.5 s and more: the sweep samples KV-cache use once a second while a batch runs.
BASE = StandinBehavior(tokens_per_s=45, ttft_s=0.02)
# k = 4; steps of 1, 3, 5, 2 tokens accept 0, 2, 4, 1 drafts: acceptance 7/16, 2.75 tokens a step.
SPEC = StandinBehavior(tokens_per_s=60, ttft_s=0.02, speculative=True, chunk_sizes=[1, 3, 5, 2])
# Restarted "after a model update": steps of 1 and 2 tokens, acceptance 1/8, 1.5 tokens a step.
WORSE = SPEC.model_copy(update={"chunk_sizes": [1, 2]})
MAX_TOKENS = 89  # the prefill token + 8 whole cycles of 11 tokens (and 22 whole cycles of 1, 2 after restart)
ARM = "speculative"
needs_promtool = pytest.mark.skipif(shutil.which("promtool") is None,
                                    reason="promtool not installed (bash scripts/install_prometheus.sh)")


def run_cli(*args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "demo", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "SPECDEMO_SAVE_RUNS": "false"})


@pytest.fixture(scope="module")
def pair() -> Iterator[tuple[Standin, Standin]]:
    with Standin(BASE) as base, Standin(SPEC) as spec:
        yield base, spec


@pytest.fixture(scope="module")
def swept(pair: tuple[Standin, Standin], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real sweep of the stand-in pair: its --out folder (results.json and guardrails.rules.yml)."""
    base, spec = pair
    out = tmp_path_factory.mktemp("sweep")
    done = run_cli("sweep", "--baseline-url", base.url, "--speculative-url", spec.url, "--presets",
                   "json_reformat", "--concurrency", "1,2", "--repeats", "1", "--warmup", "0",
                   "--max-tokens", str(MAX_TOKENS), "--out", str(out), "--no-progress")
    assert done.returncode == 0, done.stderr
    assert "guardrails: guardrails.rules.yml (4 rule(s), 0 skipped" in done.stdout, done.stdout
    return out


def rules_of(path: Path) -> dict[str, dict[str, Any]]:
    (group,) = yaml.safe_load(path.read_text())["groups"]
    return {r["alert"]: r for r in group["rules"]}


def threshold(rule: dict[str, Any]) -> float:
    return float(rule["expr"].rsplit(" ", 1)[1])


# ---------------------------------------------------------------- the rules from the measurement

def test_thresholds_are_the_sweeps_figures_and_say_where_they_come_from(swept: Path) -> None:
    data = json.loads((swept / "results.json").read_text())
    spec_batches = [b for c in data["cells"] for b in c["speculative"]["batches"]]
    acceptance = sum(b["accepted_tokens"] for b in spec_batches) / sum(b["draft_tokens"] for b in spec_batches)
    assert acceptance == pytest.approx(7 / 16, rel=1e-9)  # the stand-in's truth: whole cycles
    top = [c for c in data["cells"] if c["settings"]["concurrency"] == 2]
    base_itl_p95 = max(c["baseline"]["itl_p95_s"] for c in top)
    kv_peak = max(c["speculative"]["kv_cache_usage_peak_perc"] for c in top)
    rules = rules_of(swept / FILE_NAME)
    m = Margins()
    assert set(rules) == {"SpecAcceptanceBelowFloor", "SpecTokenLatencyP95AboveBaseline", "SpecKvCacheAboveMeasured",
                          "SpecPreemptionsAboveMeasured"}
    assert threshold(rules["SpecAcceptanceBelowFloor"]) == pytest.approx(acceptance * (1 - m.acceptance_drop), rel=1e-3)
    assert threshold(rules["SpecTokenLatencyP95AboveBaseline"]) == pytest.approx(
        base_itl_p95 * (1 + m.itl_p95_over), rel=1e-3)
    assert threshold(rules["SpecKvCacheAboveMeasured"]) == pytest.approx(kv_peak + m.kv_cache_over, rel=1e-3)
    assert threshold(rules["SpecPreemptionsAboveMeasured"]) == 0  # the stand-in never preempts
    day = data["finished_at"][:10]
    for rule in rules.values():
        assert rule["for"] == "10m" and f'arm="{ARM}"' in rule["expr"] and f'job="{JOB}"' in rule["expr"]
        notes = rule["annotations"]
        assert notes["source"] == "results.json" and notes["measured_on"] == day, notes
    assert "0.4375" in rules["SpecAcceptanceBelowFloor"]["annotations"]["measured"]
    assert "at 2 users" in rules["SpecKvCacheAboveMeasured"]["annotations"]["measured"]
    assert (swept / FILE_NAME).read_text().startswith(f"# Guardrails for arm {ARM}")


def test_the_guardrails_command_writes_the_same_file_from_results_json(swept: Path, tmp_path: Path) -> None:
    done = run_cli("guardrails", "--from", str(swept / "results.json"), "--out", str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert (tmp_path / FILE_NAME).read_text() == (swept / FILE_NAME).read_text()
    assert "speculative: SpecAcceptanceBelowFloor: acceptance < 0.3719 = measured 0.4375 - 15%" in done.stdout
    wider = run_cli("guardrails", "--from", str(swept / "results.json"), "--out", str(tmp_path),
                    "--acceptance-margin", "0.5")
    assert wider.returncode == 0 and threshold(rules_of(tmp_path / FILE_NAME)["SpecAcceptanceBelowFloor"]) == 0.2188


def test_a_figure_not_measured_skips_its_rule_with_the_reason(swept: Path) -> None:
    m = measured_figures(read_results(swept / "results.json"), "results.json")
    m = m.model_copy(update={"kv_cache_usage_peak_perc": None, "preemptions_per_s": None,
                             "na_reasons": {"kv_cache_usage_peak_perc": "the server exports no KV-cache use"}})
    g = guardrails(m)
    assert [r["alert"] for r in g.rules] == ["SpecAcceptanceBelowFloor", "SpecTokenLatencyP95AboveBaseline"]
    text = rules_text([g])
    assert "# skipped SpecKvCacheAboveMeasured (speculative): the server exports no KV-cache use" in text
    assert "# skipped SpecPreemptionsAboveMeasured (speculative): no preemptions measured" in text
    full = guardrails(m.model_copy(update={"kv_cache_usage_peak_perc": 0.97}))
    assert "reaches 100%" in full.skipped["SpecKvCacheAboveMeasured"]


def two_arms(swept: Path, tmp_path: Path) -> Path:
    """The sweep's results.json with its arm measured twice, the second named ngram."""
    data = json.loads((swept / "results.json").read_text())
    for cell in data["cells"]:
        cell["arms"]["ngram"] = {**cell["arms"][ARM], "name": "ngram", "side": cell["speculative"]}
    path = tmp_path / "results.json"
    path.write_text(json.dumps(data))
    return path


@needs_promtool
def test_every_arm_gets_its_group_and_for_arm_picks_one(swept: Path, tmp_path: Path) -> None:
    results = two_arms(swept, tmp_path)
    done = run_cli("guardrails", "--from", str(results), "--out", str(tmp_path / "all"))
    assert done.returncode == 0, done.stderr
    groups = yaml.safe_load((tmp_path / "all" / FILE_NAME).read_text())["groups"]
    assert [g["name"] for g in groups] == ["specdemo-guardrails-speculative", "specdemo-guardrails-ngram"]
    assert all('arm="ngram"' in r["expr"] for r in groups[1]["rules"]) and len(groups[1]["rules"]) == 4
    checked = subprocess.run(["promtool", "check", "rules", str(tmp_path / "all" / FILE_NAME)], capture_output=True,
                             text=True, timeout=60)
    assert checked.returncode == 0 and "8 rules found" in checked.stdout, checked.stdout + checked.stderr
    one = run_cli("guardrails", "--from", str(results), "--out", str(tmp_path / "one"), "--for-arm", "ngram")
    assert one.returncode == 0, one.stderr
    assert [g["name"] for g in yaml.safe_load((tmp_path / "one" / FILE_NAME).read_text())["groups"]] == [
        "specdemo-guardrails-ngram"]


def test_the_rules_match_the_scrape_configs_job_and_arm_labels() -> None:
    config = monitor.scrape_config(monitor.COMPOSE_TARGETS, monitor.COMPOSE_ARM_TARGETS)
    assert config["scrape_configs"][0]["job_name"] == JOB
    arms = {g["labels"]["arm"] for g in config["scrape_configs"][0]["static_configs"]}
    assert ARM in arms


# ---------------------------------------------------------------- promtool

@needs_promtool
def test_promtool_accepts_the_generated_rules(swept: Path) -> None:
    done = subprocess.run(["promtool", "check", "rules", str(swept / FILE_NAME)], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "4 rules found" in done.stdout


def series(name: str, values: str, **labels: str) -> dict[str, str]:
    lab = ", ".join(f'{k}="{v}"' for k, v in {"job": JOB, "arm": ARM, "role": "speculative", **labels}.items())
    return {"series": f"{name}{{{lab}}}", "values": values}


def synthetic(rules: dict[str, dict[str, Any]], bad: bool) -> list[dict[str, str]]:
    """30 minutes, one sample a minute: every figure past its threshold (``bad``) or well within it."""
    floor = threshold(rules["SpecAcceptanceBelowFloor"])
    itl = threshold(rules["SpecTokenLatencyP95AboveBaseline"])
    kv = threshold(rules["SpecKvCacheAboveMeasured"])
    accepted_per_min = round(100 * (floor * 0.5 if bad else min(1.0, floor * 1.5)))
    per_bucket = {itl * 0.5: 0 if bad else 600, itl * 2: 0, itl * 4: 600}  # observations a minute, cumulative
    out = [series("vllm:spec_decode_num_draft_tokens_total", "0+100x30"),
           series("vllm:spec_decode_num_accepted_tokens_total", f"0+{accepted_per_min}x30"),
           series("vllm:kv_cache_usage_perc", f"{(kv + 0.02) if bad else kv * 0.5:.4f}x30"),
           series("vllm:num_preemptions_total", "0+1x30" if bad else "0x30")]
    cumulative = 0
    for le, n in per_bucket.items():
        cumulative = n if not bad or le == itl * 4 else 0
        out.append(series("vllm:request_time_per_output_token_seconds_bucket", f"0+{cumulative}x30", le=f"{le:.6g}"))
    out.append(series("vllm:request_time_per_output_token_seconds_bucket", "0+600x30", le="+Inf"))
    return out


def promtool_test(rules_file: Path, rules: dict[str, dict[str, Any]], bad: bool) -> dict[str, Any]:
    """A `promtool test rules` file: at 8 minutes nothing fires (the 10 minutes have not passed); at
    20 minutes every rule fires on the bad series, none on the healthy ones."""
    cases = []
    for name, rule in rules.items():
        firing = [{"exp_labels": {"arm": ARM, **rule["labels"]}, "exp_annotations": rule["annotations"]}]
        cases += [{"eval_time": "8m", "alertname": name, "exp_alerts": []},
                  {"eval_time": "20m", "alertname": name, "exp_alerts": firing if bad else []}]
    return {"rule_files": [rules_file.name], "evaluation_interval": "1m",
            "tests": [{"interval": "1m", "input_series": synthetic(rules, bad), "alert_rule_test": cases}]}


def run_promtool_test(rules_file: Path, rules: dict[str, dict[str, Any]], bad: bool, where: Path) -> str | None:
    """None when `promtool test rules` passes, else its output."""
    test_file = where / f"guardrails.{'bad' if bad else 'healthy'}.test.yml"
    test_file.write_text(yaml.safe_dump(promtool_test(rules_file, rules, bad), sort_keys=False))
    done = subprocess.run(["promtool", "test", "rules", test_file.name], cwd=where, capture_output=True, text=True,
                          timeout=60)
    return None if done.returncode == 0 else done.stdout + done.stderr


@needs_promtool
@pytest.mark.parametrize("bad", [True, False], ids=["fires-on-a-bad-series", "quiet-on-a-healthy-one"])
def test_promtool_rule_tests(swept: Path, tmp_path: Path, bad: bool) -> None:
    rules_file = tmp_path / FILE_NAME
    shutil.copy(swept / FILE_NAME, rules_file)
    rules = rules_of(rules_file)
    assert run_promtool_test(rules_file, rules, bad, tmp_path) is None


@needs_promtool
def test_promtool_rule_tests_can_fail(swept: Path, tmp_path: Path) -> None:
    """A floor that never fires (0) fails the test that expects it to, on the acceptance rule only."""
    rules = rules_of(swept / FILE_NAME)
    rules_file = tmp_path / FILE_NAME
    text = (swept / FILE_NAME).read_text()
    floor = rules["SpecAcceptanceBelowFloor"]["expr"].rsplit(" ", 1)[1]
    rules_file.write_text(text.replace(f"< {floor}", "< 0"))
    failed = run_promtool_test(rules_file, rules, True, tmp_path)
    assert failed is not None and "SpecAcceptanceBelowFloor" in failed
    assert "SpecKvCacheAboveMeasured" not in failed


# ---------------------------------------------------------------- a real Prometheus on the stand-ins

class Races:
    """Races of the stand-in pair, one after another in a thread, until stopped."""

    def __init__(self, base: Standin, spec: Standin) -> None:
        self.settings = Settings(baseline_url=base.url, speculative_url=spec.url, save_runs=False, read_timeout_s=10)
        self.req = RaceRequest(messages=[Message(role="user", content="Reformat this JSON record")],
                               max_tokens=MAX_TOKENS, temperature=0.0, order="simultaneous")
        self.stop = threading.Event()
        self.done = 0
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.is_set():
            asyncio.run(run_race(self.req, self.settings))
            self.done += 1

    def __enter__(self) -> Races:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(timeout=30)



@pytest.fixture
def prometheus(pair: tuple[Standin, Standin], swept: Path, tmp_path: Path) -> Iterator[str]:
    """Debian's Prometheus scraping the stand-in pair every second, loading the sweep's rules."""
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.skip("Prometheus is not installed (bash scripts/install_prometheus.sh)")
    targets: dict[Side, list[str]] = {"baseline": [pair[0].url.removeprefix("http://")],
                                      "speculative": [pair[1].url.removeprefix("http://")]}
    config = monitor.scrape_config(targets, interval_s=1, rule_files=[str(swept / FILE_NAME)])
    (tmp_path / "prometheus.yml").write_text(monitor.config_text(config))
    port = free_port()
    with open(tmp_path / "prometheus.log", "wb") as log:
        proc = subprocess.Popen([binary, f"--config.file={tmp_path / 'prometheus.yml'}",
                                 f"--storage.tsdb.path={tmp_path / 'data'}", f"--web.listen-address=127.0.0.1:{port}"],
                                stdout=log, stderr=subprocess.STDOUT)
        try:
            yield f"http://127.0.0.1:{port}"
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()


def alert_rules(url: str) -> dict[str, dict[str, Any]]:
    """Prometheus's /api/v1/rules: each alerting rule by name (state, health, lastError); {} before it answers."""
    try:
        r = httpx.get(f"{url}/api/v1/rules", params={"type": "alert"}, timeout=10)
    except httpx.HTTPError:
        return {}
    return {rule["name"]: rule for g in r.json()["data"]["groups"] for rule in g["rules"]} if r.is_success else {}


def has_data(url: str, rule: dict[str, Any]) -> bool:
    """The rule's expression without its comparison gives a value: its series have data to judge."""
    expr = rule["query"].rsplit(" ", 2)[0]
    r = httpx.get(f"{url}/api/v1/query", params={"query": expr}, timeout=10)
    return r.is_success and bool(r.json()["data"]["result"])


def test_a_real_prometheus_keeps_the_measured_pair_quiet_and_flags_a_worse_acceptance(
    prometheus: str, pair: tuple[Standin, Standin], swept: Path, tmp_path: Path,
) -> None:
    base, spec = pair
    judged = {"SpecAcceptanceBelowFloor", "SpecTokenLatencyP95AboveBaseline", "SpecKvCacheAboveMeasured"}
    with Races(base, spec):
        wait_for(lambda: (
            len(rules := alert_rules(prometheus)) == 4 and all(r["health"] == "ok" for r in rules.values())
            and all(has_data(prometheus, rules[n]) for n in judged)), 90, "every rule loaded, healthy and judging data",
            poll_s=0.5)
        time.sleep(3)  # a few more evaluations, every second
        states = {n: (r["state"], r["health"]) for n, r in alert_rules(prometheus).items()}
        # demo check reads the same counters from Prometheus: the 6 s just past, at once.
        time.sleep(6)
        held = run_cli("check", "--against", str(swept / "results.json"), "--prometheus", prometheus,
                       "--window-s", "6")
    assert set(states.values()) == {("inactive", "ok")}, states
    assert held.returncode == 0, held.stdout + held.stderr
    assert [line.rsplit(": ", 1)[1] for line in held.stdout.splitlines()] == ["holds"] * 3, held.stdout
    assert figures(held.stdout.splitlines()[0], "acceptance") == (pytest.approx(7 / 16, abs=0.03), 0.44)
    spec.behavior = WORSE
    spec.restart()
    try:
        with Races(base, spec):
            wait_for(lambda: alert_rules(prometheus)["SpecAcceptanceBelowFloor"]["state"] == "pending", 90,
                     "the acceptance rule pending", poll_s=0.5)
            states = {n: r["state"] for n, r in alert_rules(prometheus).items()}
    finally:
        spec.behavior = SPEC
        spec.restart()
    # Pending, not firing: 10 minutes must pass first. Only acceptance moved (the decode rate is the same).
    assert states == {"SpecAcceptanceBelowFloor": "pending", "SpecTokenLatencyP95AboveBaseline": "inactive",
                      "SpecKvCacheAboveMeasured": "inactive", "SpecPreemptionsAboveMeasured": "inactive"}
    # An arm Prometheus has no series of: said, exit 3.
    data = json.loads((swept / "results.json").read_text())
    for cell in data["cells"]:
        cell["arms"] = {"ngram": {**cell["arms"][ARM], "name": "ngram"}}
    other = tmp_path / "ngram.json"
    other.write_text(json.dumps(data))
    missing = run_cli("check", "--against", str(other), "--prometheus", prometheus, "--window-s", "2")
    assert missing.returncode == 3, missing.stdout + missing.stderr
    assert 'has no series {job="vllm", arm="ngram"}' in missing.stderr.splitlines()[-1]


# ---------------------------------------------------------------- drift: python -m demo check

def figures(line: str, name: str) -> tuple[float, float]:
    """(live, measured) out of ``acceptance 0.12, measured 0.44 (-72%, margin -15%): drifted``."""
    m = re.fullmatch(rf"{name} ([\d.]+)( ms)?, measured ([\d.]+)( ms)?.*", line)
    assert m, line
    return float(m.group(1)), float(m.group(3))


def check(spec: Standin, results: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli("check", "--against", str(results), "--speculative-url", spec.url, "--window-s", "6", *args)


def test_check_holds_against_its_own_results_then_flags_a_lower_acceptance(
    pair: tuple[Standin, Standin], swept: Path,
) -> None:
    base, spec = pair
    results = swept / "results.json"
    with Races(base, spec) as races:
        held = check(spec, results)
    assert races.done >= 2, "the races did not run through the window"
    assert held.returncode == 0, held.stdout + held.stderr
    lines = held.stdout.splitlines()
    assert len(lines) == 3 and all(line.endswith(": holds") for line in lines), lines
    assert figures(lines[0], "acceptance") == (pytest.approx(7 / 16, abs=0.03), 0.44)
    assert figures(lines[1], "tokens per step") == (pytest.approx(2.75, abs=0.15), 2.75)
    assert lines[2].startswith("time per output token") and "at 1 users" in lines[2]
    spec.behavior = WORSE
    spec.restart()
    try:
        with Races(base, spec):
            drifted = check(spec, results)
    finally:
        spec.behavior = SPEC
        spec.restart()
    assert drifted.returncode == 1, drifted.stdout + drifted.stderr
    first, per_step, speed = drifted.stdout.splitlines()
    # 1/8 against 7/16 and 1.5 against 2.75 tokens a step, give or take the steps of the streams
    # the window's edges cut.
    assert figures(first, "acceptance") == (pytest.approx(1 / 8, abs=0.01), 0.44) and first.endswith(": drifted")
    assert figures(per_step, "tokens per step") == (pytest.approx(1.5, abs=0.05), 2.75)
    assert per_step.endswith(": drifted")
    assert speed.endswith(": holds"), speed  # the same decode rate: only acceptance moved


def test_check_without_traffic_says_there_is_nothing_to_compare(pair: tuple[Standin, Standin], swept: Path) -> None:
    _base, spec = pair
    done = run_cli("check", "--against", str(swept / "results.json"), "--speculative-url", spec.url,
                   "--window-s", "1")
    assert done.returncode == 3, done.stdout + done.stderr
    assert "acceptance n/a (live: no drafts were proposed in the window)" in done.stdout
    dead = run_cli("check", "--against", str(swept / "results.json"), "--speculative-url", "http://127.0.0.1:9",
                   "--window-s", "1")
    assert dead.returncode == 3 and dead.stderr.splitlines()[-1].startswith("cannot check: /metrics unreachable")
    no_prom = run_cli("check", "--against", str(swept / "results.json"), "--prometheus", "http://127.0.0.1:9")
    assert no_prom.returncode == 3, no_prom.stdout + no_prom.stderr
    assert no_prom.stderr.splitlines()[-1].startswith("cannot check: Prometheus at http://127.0.0.1:9 gave no answer")


def test_check_refuses_a_server_of_another_model_before_its_window(swept: Path) -> None:
    with Standin(SPEC.model_copy(update={"model": "another-model"})) as other:
        done = run_cli("check", "--against", str(swept / "results.json"), "--speculative-url", other.url,
                       "--window-s", "600", timeout=60)  # refused before the window: no 600 s wait
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.splitlines()[-1] == (f"error: the server at {other.url} serves another model than "
                                            "results.json measured: compare it with a sweep of its own model")
    assert done.stdout == ""


def results_without_cells(swept: Path, tmp_path: Path) -> Path:
    data = json.loads((swept / "results.json").read_text())
    data["cells"] = []
    path = tmp_path / "empty.json"
    path.write_text(json.dumps(data))
    return path


# case -> (which results file, check's extra flags, guardrails' extra flags; None: not a guardrails flag)
BAD_INPUT: dict[str, tuple[str, list[str], list[str] | None]] = {
    "missing": ("missing", [], []),
    "not-json": ("garbage", [], []),
    "no-cells": ("no-cells", [], []),
    "unmeasured-users": ("good", ["--users", "3"], None),
    "bad-margin": ("good", ["--acceptance-margin", "1.5"], ["--acceptance-margin", "1.5"]),  # says the flag
    "bad-window": ("good", ["--window-s", "0"], None),
}


@pytest.mark.parametrize("case", list(BAD_INPUT))
def test_bad_input_is_one_line_and_exit_2(swept: Path, tmp_path: Path, case: str) -> None:
    kind, check_flags, guardrails_flags = BAD_INPUT[case]
    (tmp_path / "garbage.json").write_text("{not json SECRET-TEXT")
    results = {"missing": tmp_path / "nope.json", "garbage": tmp_path / "garbage.json",
               "no-cells": results_without_cells(swept, tmp_path), "good": swept / "results.json"}[kind]
    commands = [["check", "--against", str(results), "--speculative-url", "http://127.0.0.1:9", *check_flags]]
    if guardrails_flags is not None:
        commands.append(["guardrails", "--from", str(results), "--out", str(tmp_path / "g"), *guardrails_flags])
    for cmd in commands:
        done = run_cli(*cmd, timeout=60)
        assert done.returncode == 2, (cmd[0], done.stdout, done.stderr)
        assert len(done.stderr.strip().splitlines()) == 1 and done.stdout == "", (cmd[0], done.stderr)
        assert "SECRET-TEXT" not in done.stderr
        assert case != "bad-margin" or done.stderr.startswith("error: --acceptance-margin: "), done.stderr
    assert not (tmp_path / "g").exists()


def test_measured_figures_pool_every_cell_of_the_arm(swept: Path) -> None:
    m: Measured = measured_figures(read_results(swept / "results.json"), "results.json")
    assert (m.arm, m.cells, m.users, m.top_users) == (ARM, 2, 1, 2)
    assert m.acceptance_rate == pytest.approx(7 / 16) and m.tokens_per_step == pytest.approx(2.75)
    assert m.time_per_output_token_s == pytest.approx(1 / 60, rel=0.1)  # the stand-in's true decode rate


def test_drift_lines_by_hand() -> None:
    m = Measured(source="results.json", measured_on="2026-12-01", arm=ARM, cells=4, acceptance_rate=0.7,
                 tokens_per_step=2.0, users=1, time_per_output_token_s=0.020, top_users=8)
    live = LiveFigures(window_s=60, acceptance_rate=0.7 * 0.84, tokens_per_step=2.5, time_per_output_token_s=0.0251)
    acc, per_step, tpot = drift(m, live)
    assert acc.text == "acceptance 0.59, measured 0.70 (-16%, margin -15%): drifted" and acc.drifted
    assert per_step.text == "tokens per step 2.50, measured 2.00 (+25%, margin -15%): holds"  # better holds
    assert tpot.text == "time per output token 25.1 ms, measured 20.0 ms at 1 users (+26%, margin +25%): drifted"
    lenient = drift(m, live, DriftMargins(acceptance_drop=0.2, itl_rise=0.3))
    assert [line.drifted for line in lenient] == [False, False, False]
    unknown = drift(m.model_copy(update={"acceptance_rate": 0.0}),
                    LiveFigures(window_s=60, na_reasons={"tokens_per_step": "no drafts were proposed in the window"}))
    assert [line.text for line in unknown] == [
        "acceptance n/a (live: not measured)", "tokens per step n/a (live: no drafts were proposed in the window)",
        "time per output token n/a (live: not measured)"]
    assert not any(line.drifted for line in unknown)
    zero = drift(m.model_copy(update={"acceptance_rate": 0.0}), live)[0]
    assert zero.text == "acceptance n/a (measured 0: no change to take)" and not zero.drifted
