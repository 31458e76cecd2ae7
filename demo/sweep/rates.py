"""The evaluator in requests per second: ``python -m demo sweep --workload FILE --rate 0.5,1,2`` and the
Evaluate tab's "requests per second".

The customer's requests go out open-loop through the load engine's one step function
(demo/load/rate.py ``run_rate_sweep``: one seeded schedule per rate, sent to the baseline and then to
each arm, each server alone; arrival i sends request i of the file, wrapping round). The record is
the load engine's own (a ``LoadResult`` whose ``spec.rate`` is set); results.json keeps it as
load.json does (demo/load/rate_view.py ``rate_json``) under ``rate``, and ``load_result`` reads it
back. The report and the tab show it with demo/load/rate_page.py's summary, figures and table
(``rate_section_html``, ``rate_figures``). This module measures and computes no figure of its own.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import plotly.graph_objects as go
from pydantic import ValidationError

from demo.charts import figures_html
from demo.client import ServerClient
from demo.errors import BadInput
from demo.fmt import esc, validation_summary
from demo.load.engine import LoadResult, LoadSpec, finish
from demo.load.rate import run_rate_sweep
from demo.load.rate_models import QUEUE_SOURCE, RUNNING_SOURCE, RateLoad, RateStep
from demo.load.rate_page import goodput_figure, latency_figure, rate_table_html, schedule_html, summary_html
from demo.load.rate_view import rate_json
from demo.settings import Settings
from demo.streaming import Fleet
from demo.sweep.models import SweepResult, SweepSpec
from demo.sweep.runner import describe_servers, make_servers, spec_arms
from demo.workload import Workload

RateStepFn = Callable[[RateStep], None]
ProgressFn = Callable[[str], None]


def check_workload(workload: Workload) -> None:
    """BadInput (one line) when a workload cannot be sent open-loop: session turns that carry each side's
    own answer would have to wait for the turn before, and an open-loop step sends each request at its time."""
    carried = next((r for r in workload.requests if r.carry), None)
    if carried is not None:
        raise BadInput(f"{workload.name}: session turns carry each side's own answer (the first: request "
                       f"{carried.id}); an open-loop step cannot wait for it: measure them with --concurrency")


def new_load_result(spec: SweepSpec, load: RateLoad, workload: Workload, max_tokens: int | None = None) -> LoadResult:
    """The empty record of the open-loop sweep of ``workload``: its spec says the longest request (each is
    sent with its own max_tokens, or ``max_tokens`` for all) and the first request's temperature and API."""
    reqs = workload.requests
    longest = max_tokens or max(r.max_tokens for r in reqs)
    try:
        return LoadResult(spec=LoadSpec(rate=load, workload=workload.name, max_tokens=longest,
                                        temperature=reqs[0].temperature, api=reqs[0].api,
                                        baseline_url=spec.baseline_url, speculative_url=spec.speculative_url,
                                        arms=spec.arms))
    except ValidationError as e:
        raise BadInput(validation_summary(e)) from None


async def run_rate_sweep_of(spec: SweepSpec, load: RateLoad, workload: Workload, settings: Settings,
                            result: SweepResult, rated: LoadResult, *, max_tokens: int | None = None,
                            http: ServerClient | None = None, on_step: RateStepFn | None = None,
                            on_progress: ProgressFn | None = None, fleet: Fleet | None = None) -> LoadResult:
    """Every rate of ``load``, ascending, through demo/load/rate.py ``run_rate_sweep`` (the step function
    ``demo load --rate`` uses): the workload's requests (``max_tokens`` on each, when given), the servers of
    ``spec``. ``rated`` (new_load_result) gains each step as it ends, and ``result.rate`` its JSON (so a
    caller writing the files after each step keeps what was measured); ``on_step`` is then called.
    Cancelled (Ctrl-C, Stop): both are marked interrupted with the steps so far, and it propagates."""
    arms = spec_arms(spec)
    servers = make_servers(settings, spec.baseline_url, arms, http, fleet)
    sent = [r.to_race_request() for r in workload.requests]
    if max_tokens is not None:
        sent = [r.model_copy(update={"max_tokens": max_tokens}) for r in sent]

    def step_done(step: RateStep) -> None:
        result.rate = rate_json(finish(rated))
        if on_step is not None:
            on_step(step)

    try:
        await describe_servers(servers, arms, settings, result)
        rated.rate_summary = await run_rate_sweep(load, servers, sent, settings, rated.rate_steps,
                                                  on_step=step_done, on_progress=on_progress)
    except asyncio.CancelledError:
        rated.interrupted = result.interrupted = True
        result.rate = rate_json(finish(rated))
        raise
    finally:
        if http is None:
            await asyncio.gather(*(s.http.aclose() for s in servers.values()))
    result.rate = rate_json(finish(rated))
    return rated


# --------------------------------------------------------------------------- reading it back, showing it


def load_result(result: SweepResult) -> LoadResult | None:
    """The open-loop sweep a results.json holds (its ``rate``, rate_json's object) as the load engine's
    record, for the figures and table; None for a sweep over concurrency."""
    d = result.rate
    if d is None:
        return None
    arms = d.get("arms") or []
    spec = LoadSpec(rate=d["rate"], workload=d["workload"], max_tokens=d["max_tokens"], temperature=d["temperature"],
                    api=d["api"], baseline_url=d["baseline_url"],
                    speculative_url=arms[0]["url"] if arms else d["baseline_url"], arms=arms)
    return LoadResult(spec=spec, started_at=result.started_at, interrupted=d.get("interrupted", False),
                      rate_steps=d.get("rate_steps") or [], rate_summary=d.get("summary"))


def capacity_text(result: SweepResult) -> str | None:
    """The capacity sentence of an open-loop sweep ("baseline holds 2.1 req/s within ITL p99 ≤ 120 ms;
    ngram 2.9 req/s (+38%)"), as results.json keeps it; None for a sweep over concurrency."""
    rated = load_result(result)
    if rated is None:
        return None
    s = rated.rate_summary
    return s.capacity_text if s is not None else "no step measured yet"


def rate_figures(rated: LoadResult) -> list[tuple[str, go.Figure]]:
    """The chart of the rate steps as (key, figure) pairs: ITL p50/p95/p99 against the offered rate and
    goodput (or completed req/s) against it, one line per server (demo/load/rate_page.py's figures)."""
    return [("rate-latency", latency_figure(rated)), ("rate-goodput", goodput_figure(rated))]


def na_html(rated: LoadResult) -> str:
    """Why each "n/a" of the rate table is unknown: a line per server and step that has a reason."""
    items = [f"{step.label or f'{step.rate_requests_per_s:g} req/s'}, {side.name}: {key}: {why}"
             for step in rated.rate_steps for side in step.servers() for key, why in side.na_reasons.items()]
    items += [f"{step.label or f'{step.rate_requests_per_s:g} req/s'}, {name}: {key}: {why}"
              for step in rated.rate_steps for name, arm in step.arms.items() for key, why in arm.na_reasons.items()]
    if not items:
        return ""
    return '<details class="na"><summary>Why a figure is n/a</summary><ul>' + "".join(
        f"<li>{esc(i)}</li>" for i in items) + "</ul></details>"


def rate_section_html(result: SweepResult) -> str:
    """report.html's section for an open-loop sweep, where a concurrency sweep has its table: the capacity
    sentence and crossovers in req/s, the chart, a row per server per step, the sources and the n/a reasons.
    Computes nothing: demo/load/rate_page.py draws it all."""
    rated = load_result(result)
    if rated is None:
        return ""
    rate = rated.spec.rate
    assert rate is not None
    return (f'<section id="rate"><h2>Requests per second each server holds</h2>{summary_html(rated)}'
            f'<p class="muted">Open loop: {esc(rated.spec.workload)}\'s requests at {schedule_html(rate)}, '
            f"each step bounded at its window plus "
            f"{rate.drain_s:g} s; each server alone, the same schedule. Speedup: per-request decode tokens/s, "
            f"the arm over the baseline; throughput ratio: output tokens/s over output tokens/s. Queue: "
            f"{esc(QUEUE_SOURCE)}. Running: {esc(RUNNING_SOURCE)}.</p>"
            f"{figures_html(rate_figures(rated))}{rate_table_html(rated)}{na_html(rated)}</section>")


def rate_text_html(rated: LoadResult) -> str:
    """The words and the table of the rate steps without the chart (the Evaluate tab draws the chart in
    its own plots): the capacity sentence, the crossovers, a row per server per step, the n/a reasons;
    the same functions as report.html's section."""
    return f'<div class="sd-eval-rate">{summary_html(rated)}{rate_table_html(rated)}{na_html(rated)}</div>'

