"""``python -m demo guardrails`` and ``python -m demo check``: after the evaluation, from its results.json.

``guardrails --from results.json --out DIR`` writes DIR/guardrails.rules.yml, Prometheus alerting
rules whose thresholds are the sweep's figures (demo/sweep/guardrails.py; ``sweep --out DIR``
writes the same file beside results.json), and DIR/canary.eligibility.json, the canary's
eligibility rules from the segments that pay (demo/sweep/eligibility.py, docs/canary.md).
``check --against results.json`` reads the arm's counters at the start and at the end of a
window (its /metrics, or ``--prometheus URL``, which looks back over the window at once) and
says, one line per figure, whether acceptance, tokens per step and time per output token still
hold (demo/sweep/drift.py). Exit codes: 0 every figure holds,
1 one drifted, 2 bad input (one line), 3 nothing to compare (a server unreachable, no traffic).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path
from typing import TypeVar

import httpx
from pydantic import BaseModel, ValidationError

from demo.cli.args import UsageError, add_server_args, settings_from_args
from demo.client import StreamError, discover_model, make_http_client
from demo.errors import BadInput
from demo.metrics import MetricsSample, prometheus_sample, scrape_metrics
from demo.settings import Endpoint, Settings
from demo.sweep.drift import DriftMargins, LiveFigures, drift, live_figures
from demo.sweep.eligibility import eligibility_from, write_eligibility
from demo.sweep.guardrails import FILE_NAME, JOB, Margins, guardrails_for, summary_lines, write_guardrails
from demo.sweep.measured import Measured, measured_figures, read_results

WINDOW_S_MAX = 3600.0
M = TypeVar("M", bound=BaseModel)
EXIT_NOTHING_TO_COMPARE = 3


def add_guard_parsers(sub: argparse._SubParsersAction) -> None:
    """The ``guardrails`` and ``check`` subcommands."""
    g = sub.add_parser("guardrails", help="Prometheus alerting rules whose thresholds come from a sweep's results.json",
                       description="Writes DIR/guardrails.rules.yml: acceptance under the measured floor, p95 ITL "
                       "over the baseline's, KV cache and preemptions over the sweep's (docs/monitoring.md).")
    g.add_argument("--from", dest="source", required=True, type=Path, metavar="RESULTS_JSON")
    g.add_argument("--out", required=True, type=Path, help=f"folder for {FILE_NAME}")
    _add_measured_args(g)
    g.add_argument("--acceptance-margin", type=float, default=Margins().acceptance_drop,
                   help="the floor is the measured acceptance less this fraction (default %(default)s)")
    g.add_argument("--itl-margin", type=float, default=Margins().itl_p95_over,
                   help="p95 ITL may exceed the baseline's measured p95 by this fraction (default %(default)s)")
    g.add_argument("--kv-margin", type=float, default=Margins().kv_cache_over,
                   help="KV-cache use may exceed the measured peak by this (0..1, default %(default)s)")
    g.add_argument("--preemptions-margin", type=float, default=Margins().preemptions_over,
                   help="preemptions/s may exceed the measured rate by this fraction (default %(default)s)")
    g.set_defaults(func=cmd_guardrails)
    c = sub.add_parser("check", help="is the live server still where the sweep measured it? (drift after launch)",
                       description="Reads the arm's counters at the start and end of a window and compares "
                       "acceptance, tokens per step and time per output token with results.json. Exit 0: "
                       "holds; 1: drifted; 2: bad input; 3: nothing to compare.")
    add_server_args(c)
    c.add_argument("--against", required=True, type=Path, metavar="RESULTS_JSON")
    _add_measured_args(c)
    c.add_argument("--users", type=int, help="compare time per output token with this measured user count "
                   "(default: the lowest measured)")
    c.add_argument("--window-s", type=float, default=60.0, help="the window in seconds (default %(default)s)")
    c.add_argument("--prometheus", metavar="URL", help="read the counters from this Prometheus (the window just "
                   "past, no waiting) instead of the server's /metrics")
    c.add_argument("--acceptance-margin", type=float, default=DriftMargins().acceptance_drop,
                   help="drifted when acceptance is lower than measured by more than this fraction (default "
                   "%(default)s)")
    c.add_argument("--tokens-per-step-margin", type=float, default=DriftMargins().tokens_per_step_drop,
                   help="the same for tokens per step (default %(default)s)")
    c.add_argument("--itl-margin", type=float, default=DriftMargins().itl_rise,
                   help="drifted when time per output token is longer than measured by more than this "
                   "fraction (default %(default)s)")
    c.set_defaults(func=cmd_check)


def _add_measured_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--for-arm", dest="for_arm", metavar="NAME",
                   help="the sweep's arm whose figures to use (default: guardrails every arm's, check the first)")


def _margins(model: type[M], by_field: dict[str, tuple[str, float]]) -> M:
    """``model`` from {field: (its flag, value)}; UsageError naming the flag when a value is out of bounds."""
    try:
        return model(**{field: value for field, (_flag, value) in by_field.items()})
    except ValidationError as e:
        error = e.errors()[0]
        flag = by_field[str(error["loc"][0])][0]
        raise UsageError(f"{flag}: {error['msg']}") from None


def _measured(path: Path, arm: str | None, users: int | None = None) -> Measured:
    try:
        return measured_figures(read_results(path), path.name, arm, users)
    except BadInput as e:
        raise UsageError(str(e)) from None


def cmd_guardrails(args: argparse.Namespace) -> int:
    """Write the rules file; one line per rule (its threshold) or skipped rule (its reason)."""
    margins = _margins(Margins, {"acceptance_drop": ("--acceptance-margin", args.acceptance_margin),
                                 "itl_p95_over": ("--itl-margin", args.itl_margin),
                                 "kv_cache_over": ("--kv-margin", args.kv_margin),
                                 "preemptions_over": ("--preemptions-margin", args.preemptions_margin)})
    try:
        result = read_results(args.source)
        gs = guardrails_for(result, args.source.name, args.for_arm, margins)
    except BadInput as e:
        raise UsageError(str(e)) from None
    path = write_guardrails(gs, args.out)
    for line in summary_lines(gs):
        print(line)
    print(f"wrote {path} ({sum(len(g.rules) for g in gs)} rule(s), {sum(len(g.skipped) for g in gs)} skipped)")
    # The canary's eligibility from the same results (docs/canary.md): what the segments say pays.
    eligibility, unrouted = eligibility_from(result, args.source.name)
    for line in unrouted:
        print(f"canary eligibility: not routed by a rule: {line}")
    print(f"wrote {write_eligibility(eligibility, args.out)} ({len(eligibility.rules)} rule(s): "
          f"{', '.join(r.name for r in eligibility.rules)})")
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    """Compare the live window with results.json, one line per figure; the exit code says which way."""
    if not 1 <= args.window_s <= WINDOW_S_MAX:
        raise UsageError(f"--window-s must be between 1 and {WINDOW_S_MAX:g} seconds")
    margins = _margins(DriftMargins, {"acceptance_drop": ("--acceptance-margin", args.acceptance_margin),
                                      "tokens_per_step_drop": ("--tokens-per-step-margin", args.tokens_per_step_margin),
                                      "itl_rise": ("--itl-margin", args.itl_margin)})
    m = _measured(args.against, args.for_arm, args.users)
    settings = settings_from_args(args)
    endpoint = _endpoint(settings, m.arm)
    print(f"arm {m.arm} at {args.prometheus or endpoint.url}, {args.window_s:g} s window, against {m.source} "
          f"({m.measured_on})", file=sys.stderr)
    before, after = asyncio.run(_window(settings, endpoint, args.prometheus, m, args.window_s))
    failed = before if not before.ok else after if not after.ok else None
    if failed is not None:
        print(f"cannot check: {failed.error}", file=sys.stderr)
        return EXIT_NOTHING_TO_COMPARE
    return _report(m, live_figures(before, after, args.window_s), margins)


def _report(m: Measured, live: LiveFigures, margins: DriftMargins) -> int:
    lines = drift(m, live, margins)
    for line in lines:
        print(line.text)
    if any(line.drifted for line in lines):
        return 1
    return 0 if any(line.change is not None for line in lines) else EXIT_NOTHING_TO_COMPARE


def _endpoint(settings: Settings, arm: str) -> Endpoint:
    """The settings' arm of that name, else the first arm (the speculative URL)."""
    arms = settings.arm_endpoints()
    return next((e for e in arms if e.arm == arm), arms[0])


async def _window(settings: Settings, endpoint: Endpoint, prometheus: str | None, m: Measured,
                  window_s: float) -> tuple[MetricsSample, MetricsSample]:
    """The counters at the window's start and end: two scrapes ``window_s`` apart (nothing in
    between: the servers stream undisturbed), or Prometheus at now - window_s and now."""
    if prometheus:
        selector = f'{{job="{JOB}", arm="{m.arm}"}}'
        async with httpx.AsyncClient(trust_env=False) as http:
            now = time.time()
            before = await prometheus_sample(http, prometheus, selector, now - window_s, settings)
            return before, await prometheus_sample(http, prometheus, selector, now, settings)
    async with make_http_client(settings, endpoint=endpoint) as http:
        await _check_model(http, endpoint, m, settings)
        before = await scrape_metrics(http, endpoint.url, settings)
        if not before.ok:
            return before, before
        await asyncio.sleep(window_s)
        return before, await scrape_metrics(http, endpoint.url, settings)


async def _check_model(http: httpx.AsyncClient, endpoint: Endpoint, m: Measured, settings: Settings) -> None:
    """UsageError when the server serves another model than the sweep measured (unknown: no check;
    a server that does not answer is left to the scrape, which says so)."""
    if m.model is None:
        return
    try:
        live = endpoint.model or (await discover_model(http, endpoint.url, settings.probe_timeout_s)).id
    except StreamError:
        return
    if live != m.model:
        raise UsageError(f"the server at {endpoint.url} serves another model than {m.source} measured: "
                         "compare it with a sweep of its own model")
