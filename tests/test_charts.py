"""demo/charts.py: figures carry the measured numbers, and say n/a when there are none."""

from __future__ import annotations

from demo import charts
from tests.test_view import sample_result, sample_snapshot


def test_race_figure_plots_cumulative_tokens() -> None:
    fig = charts.race_figure(sample_snapshot())
    by_name = {t.name: t for t in fig.data}
    assert list(by_name["speculative"].y) == [0, 1, 4]
    assert list(by_name["speculative"].x) == [0.0, 0.06, 0.09]
    assert list(by_name["baseline"].y) == [0, 1, 2]


def test_empty_figures_before_a_run() -> None:
    for fig in (charts.race_figure(None), charts.position_acceptance_figure(None), charts.chunk_figure(None)):
        assert not fig.data and fig.layout.annotations


def test_acceptance_and_chunk_figures_from_result() -> None:
    r = sample_result()
    acc = charts.position_acceptance_figure(r)
    assert [round(v, 6) for v in acc.data[0].y] == [90.0, 70.0, 50.0, 30.0]
    chunks = charts.chunk_figure(r)
    spec = [t for t in chunks.data if t.name == "speculative"][0]
    assert list(spec.x) == ["1", "3", "5"] and list(spec.y) == [20, 30, 16]


def test_acceptance_figure_na_reason() -> None:
    r = sample_result()
    r.speculative.spec = None
    r.speculative.na_reasons["spec"] = "metrics missing"
    fig = charts.position_acceptance_figure(r)
    assert not fig.data and "metrics missing" in fig.layout.annotations[0].text
