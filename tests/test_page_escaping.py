"""The whole pages are Jinja2 templates with autoescape on (demo/pages.py): markup in any user-supplied
field (an id, a tag, a prompt, a file name, a server's or an arm's name, a preset's, a model's, a label,
an error's text) reaches report.html, load.html (users and req/s) and the exported race page as text,
never as markup. Every field carries its own payload, so each is checked on its own: its raw form is
nowhere in the page and its escaped form (demo.fmt.esc, as every fragment escapes) is there.

With autoescape switched off these fail (checked by hand when the pages moved to templates): the
templates themselves put the names, ids, errors and titles in the page.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from demo.fmt import esc
from demo.load.arrivals import Replay
from demo.load.engine import LoadResult, LoadSpec, finish
from demo.load.page import load_html
from demo.load.rate_models import RateLoad
from demo.load.rate_page import rate_html
from demo.runs.export import export_html
from demo.runs.store import read_run
from demo.server_info import ServerInfo
from demo.slo import Slo, SloBound
from demo.sweep.machine import machine_info
from demo.sweep.models import WorkloadSpec
from demo.sweep.report import report_html
from harness.given_clock import Pace, given_load, given_rate_step, given_sweep

MARKUP = '<script>alert(1)</script>"><img src=x onerror=alert(1)>&amp;'
MADE_AT = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)
LEGACY_RUN = Path(__file__).parent / "fixtures" / "legacy-run-mode-race.json"
BASE = Pace(tokens_per_s=40, ttft_s=0.05)
ARM = Pace(tokens_per_s=100, ttft_s=0.05, chunk_sizes=(2, 3), speculative=True)


def evil(field: str) -> str:
    """The payload of one field: its name first, so that each field is found on its own."""
    return f"{field}{MARKUP}"


def check(page: str, fields: list[str], shown: list[str] | None = None) -> None:
    """No field's raw payload anywhere in ``page``; the escaped form of each of ``shown`` (default: all) in it."""
    for f in fields:
        assert evil(f) not in page, f"{f}: raw markup in the page"
    for f in fields if shown is None else shown:
        assert esc(evil(f)) in page, f"{f}: not shown escaped"
    assert "<script>alert(1)" not in page and "<img src=x" not in page


def test_the_report_escapes_every_user_field() -> None:
    result = given_sweep([1, 2], BASE, {"ngram": ARM, "eagle3": ARM}, 40, preset=evil("preset"))
    cells = []
    for i, c in enumerate(result.cells):
        arms = {evil(f"arm{i}-{j}"): a for j, a in enumerate(c.arms.values())}
        baseline = c.baseline.model_copy(update={"sample_text": evil(f"answer{i}")})
        cells.append(c.model_copy(update={"arms": arms, "baseline": baseline, "errors": [evil(f"error{i}")]}))
    workload = WorkloadSpec(name=evil("file"), source=evil("path"), format="jsonl", requests=2)
    spec = result.spec.model_copy(update={"presets": [evil("preset")], "workload": workload})
    servers = [ServerInfo(side="baseline", url=evil("url"), healthy=False, error=evil("server-error"),
                          model=evil("model")),
               ServerInfo(side="speculative", arm=evil("server-arm"), url="http://x", healthy=True,
                          spec_method=evil("method"))]
    machine = machine_info().model_copy(update={"platform": evil("platform"), "gpus": [evil("gpu")]})
    page = report_html(result.model_copy(update={"cells": cells, "spec": spec, "servers": servers,
                                                 "machine": machine, "routing": evil("routing")}))
    fields = ["file", "preset", "arm0-0", "arm0-1", "arm1-0", "answer0", "answer1", "error0", "error1", "url",
              "server-error", "model", "server-arm", "method", "platform", "gpu"]
    check(page, fields)


def test_the_load_page_escapes_every_user_field() -> None:
    result = given_load([1, 4], BASE, {"ngram": ARM, "eagle3": ARM}, 40, preset=evil("workload"))
    steps = [s.model_copy(update={"cell": s.cell.model_copy(update={
        "arms": {evil(f"arm-{j}"): a for j, a in enumerate(s.cell.arms.values())},
        "errors": [evil(f"error{i}")]})}) for i, s in enumerate(result.steps)]
    result = result.model_copy(update={"steps": steps, "arms_text": evil("arms-text")})
    finish(result)
    page = load_html(result)
    check(page, ["workload", "arm-0", "arm-1", "error0", "error1"], shown=["workload", "arm-0", "error0", "error1"])


def rate_result(workload: str, replay: Replay | None = None) -> LoadResult:
    slo = Slo(itl=SloBound(ms=100))
    load = (RateLoad(rates=[1.0, 2.0], arrivals="constant", requests=4, slo=slo) if replay is None
            else RateLoad(rates=[2.0], slo=slo, replay=replay))
    steps = []
    for i, _ in enumerate(load.rates):
        step = given_rate_step(load.schedule(i), BASE, {evil("arm"): ARM}, 20, slo)
        base = step.baseline.model_copy(update={"errors": [evil(f"error{i}")]})
        steps.append(step.model_copy(update={"baseline": base}))
    spec = LoadSpec(rate=load, workload=workload, max_tokens=20, temperature=0.0, baseline_url="http://b",
                    speculative_url="http://s")
    return finish(LoadResult(spec=spec, rate_steps=steps))


def test_the_rate_page_escapes_every_user_field() -> None:
    check(rate_html(rate_result(evil("workload"))), ["workload", "arm", "error0", "error1"])
    replayed = rate_result("trace", Replay(file=evil("trace-file"), trace_offsets_s=[0.0, 0.5, 1.0, 1.5]))
    check(rate_html(replayed), ["trace-file"])


@pytest.fixture(scope="module")
def race():  # noqa: ANN201 - a RaceResult
    return read_run(LEGACY_RUN)


def test_the_exported_page_escapes_every_user_field(race) -> None:  # noqa: ANN001
    req = race.request.model_copy(update={"preset": evil("request-preset")})
    baseline = race.baseline.model_copy(update={"model": evil("model"), "error": evil("error")})
    run = race.model_copy(update={"preset": evil("preset"), "request": req, "baseline": baseline})
    page = export_html(run, made_at=MADE_AT)
    check(page, ["preset", "model", "error", "request-preset"], shown=["preset", "model"])


def test_the_exported_page_of_several_arms_escapes_their_names_and_labels(race) -> None:  # noqa: ANN001
    first = next(iter(race.arms.values()))
    arms = {evil(f"arm{i}"): first.model_copy(update={"name": evil(f"arm{i}"), "label": evil(f"label{i}")})
            for i in range(2)}
    page = export_html(race.model_copy(update={"arms": arms}), made_at=MADE_AT)
    check(page, ["arm0", "arm1", "label0", "label1"], shown=["arm1", "label0", "label1"])
