"""Guardrails from a measurement: a Prometheus rules file whose thresholds are the sweep's figures.

Four alerting rules for one arm (its series carry the ``arm`` label our scrape config sets,
servers/monitor.py), each with the figure, the date and the file it came from in its annotations:

- SpecAcceptanceBelowFloor: acceptance under the measured acceptance less a margin, for 10 minutes;
- SpecTokenLatencyP95AboveBaseline: the arm's p95 time per output token (each request's decode time
  per token, vLLM's ``vllm:request_time_per_output_token_seconds``) above the baseline's measured
  p95 inter-token latency at the highest measured user count, plus a margin;
- SpecKvCacheAboveMeasured, SpecPreemptionsAboveMeasured: KV-cache use and preemptions above what
  the sweep saw at its highest measured user count.

A figure the sweep did not measure skips its rule; the reason is a comment at the top of the file
(and in ``Guardrails.skipped``). ``guardrails_for`` builds every measured arm's (a group each),
``rules_text`` is the file's text, ``write_guardrails`` writes it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field

from common.files import atomic_write
from demo.errors import BadInput
from demo.sweep.measured import Measured, arm_names, measured_figures
from demo.sweep.models import SweepResult

JOB = "vllm"  # servers/monitor.py's scrape job (tests/test_guardrails.py checks they agree)
FOR = "10m"  # how long a figure must stay out of bounds before the alert fires
RATE_WINDOW = "5m"
# Each finished request's decode time per token: the latency a user sees per token on either server.
# (vllm:inter_token_latency_seconds observes one gap per engine step; a speculative step brings
# several tokens, so its p95 is longer than the baseline's even where speculation pays.)
TPOT = "vllm:request_time_per_output_token_seconds"
ALERT_PREFIX = "Spec"  # every alert's name starts with it (the Grafana panel selects ALERTS{alertname=~"Spec.*"})
FILE_NAME = "guardrails.rules.yml"


class Margins(BaseModel):
    """How far a live figure may stray from the measured one before a rule fires."""

    model_config = ConfigDict(frozen=True)

    acceptance_drop: float = Field(0.15, gt=0, lt=1)  # floor = measured acceptance x (1 - this)
    # threshold = baseline's p95 x (1 + this); wide, as histogram_quantile interpolates inside
    # vLLM's buckets (25 ms wide from 25 to 100 ms).
    itl_p95_over: float = Field(0.5, gt=0, le=10)
    kv_cache_over: float = Field(0.05, gt=0, lt=1)  # threshold = measured peak + this (0..1)
    preemptions_over: float = Field(0.5, ge=0, le=100)  # threshold = measured rate x (1 + this)


class Guardrails(BaseModel):
    """The alerting rules of one arm and the rules skipped, each with its reason."""

    measured: Measured
    margins: Margins
    rules: list[dict[str, Any]] = Field(default_factory=list)
    skipped: dict[str, str] = Field(default_factory=dict)  # alert name -> why it is not in the file


def guardrails(m: Measured, margins: Margins | None = None) -> Guardrails:
    """The rules for ``m``'s arm; a rule whose figure is n/a is skipped with the reason."""
    g = Guardrails(measured=m, margins=margins or Margins())
    for build in (_acceptance, _itl, _kv_cache, _preemptions):
        name, rule_or_reason = build(m, g.margins)
        if isinstance(rule_or_reason, str):
            g.skipped[name] = rule_or_reason
        else:
            g.rules.append(rule_or_reason)
    return g


def guardrails_for(result: SweepResult, source: str, arm: str | None = None,
                   margins: Margins | None = None) -> list[Guardrails]:
    """Every measured arm's rules (or ``arm``'s only); BadInput (one line) as measured_figures."""
    names = [arm] if arm else arm_names(result)
    if not names:
        raise BadInput(f"{source} has no measured cell: nothing to take thresholds from")
    return [guardrails(measured_figures(result, source, name), margins) for name in names]


def rules_text(gs: list[Guardrails]) -> str:
    """The Prometheus rules file: a group per arm, each headed by where its thresholds come from."""
    head: list[str] = []
    for g in gs:
        m = g.measured
        head += [f"# Guardrails for arm {m.arm} from {m.source} (the sweep of {m.measured_on}; {m.cells} measured "
                 f"cell(s), {m.users} to {m.top_users} users); written by `python -m demo guardrails` or `sweep`."]
        head += [f"# skipped {name} ({m.arm}): {why}" for name, why in g.skipped.items()]
    doc = {"groups": [{"name": f"specdemo-guardrails-{g.measured.arm}", "rules": g.rules} for g in gs]}
    return "\n".join(head) + "\n" + yaml.safe_dump(doc, sort_keys=False, default_flow_style=False, width=1000)


def write_guardrails(gs: list[Guardrails], out: Path) -> Path:
    """DIR/guardrails.rules.yml, written whole; returns its path."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / FILE_NAME
    atomic_write(path, rules_text(gs))
    return path


def summary_lines(gs: list[Guardrails]) -> list[str]:
    """One line per rule (its threshold) and per skipped rule (its reason), for the command line."""
    lines = []
    for g in gs:
        arm = g.measured.arm
        lines += [f"{arm}: {r['alert']}: {r['annotations']['threshold']}" for r in g.rules]
        lines += [f"{arm}: {name}: skipped ({why})" for name, why in g.skipped.items()]
    return lines


def _selector(arm: str, extra: str = "") -> str:
    return f'{{job="{JOB}", arm="{arm}"{extra}}}'


def _rule(name: str, expr: str, summary: str, threshold: str, m: Measured, measured: str) -> dict[str, Any]:
    return {
        "alert": name, "expr": expr, "for": FOR, "labels": {"severity": "warning", "arm": m.arm},
        "annotations": {
            "summary": summary, "threshold": threshold, "measured": measured,
            "measured_on": m.measured_on, "source": m.source,
        },
    }


def _acceptance(m: Measured, mg: Margins) -> tuple[str, dict[str, Any] | str]:
    name = f"{ALERT_PREFIX}AcceptanceBelowFloor"
    if m.acceptance_rate is None:
        return name, m.na_reasons.get("acceptance_rate", "no acceptance measured")
    floor = m.acceptance_rate * (1 - mg.acceptance_drop)
    sel = _selector(m.arm)
    expr = (f"sum by (arm) (rate(vllm:spec_decode_num_accepted_tokens_total{sel}[{RATE_WINDOW}]))\n"
            f"  / sum by (arm) (rate(vllm:spec_decode_num_draft_tokens_total{sel}[{RATE_WINDOW}]))\n"
            f"  < {floor:.4g}")
    return name, _rule(name, expr, f"arm {m.arm}: acceptance under {floor:.2f} for {FOR}",
                       f"acceptance < {floor:.4g} = measured {m.acceptance_rate:.4g} - {mg.acceptance_drop:.0%}",
                       m, f"acceptance {m.acceptance_rate:.4g} over {m.cells} cell(s)")


def _itl(m: Measured, mg: Margins) -> tuple[str, dict[str, Any] | str]:
    name = f"{ALERT_PREFIX}TokenLatencyP95AboveBaseline"
    if m.baseline_itl_p95_s is None:
        return name, m.na_reasons.get("baseline_itl_p95_s", "no baseline p95 ITL measured")
    limit_s = m.baseline_itl_p95_s * (1 + mg.itl_p95_over)
    expr = (f"histogram_quantile(0.95, sum by (arm, le) "
            f"(rate({TPOT}_bucket{_selector(m.arm)}[{RATE_WINDOW}])))\n"
            f"  > {limit_s:.4g}")
    return name, _rule(name, expr, f"arm {m.arm}: p95 time per output token over {limit_s * 1000:.0f} ms for {FOR}",
                       f"p95 time per output token > {limit_s:.4g} s = the baseline's measured p95 ITL "
                       f"{m.baseline_itl_p95_s:.4g} s + {mg.itl_p95_over:.0%}", m,
                       f"baseline p95 ITL {m.baseline_itl_p95_s:.4g} s at {m.top_users} users")


def _kv_cache(m: Measured, mg: Margins) -> tuple[str, dict[str, Any] | str]:
    name = f"{ALERT_PREFIX}KvCacheAboveMeasured"
    peak = m.kv_cache_usage_peak_perc
    if peak is None:
        return name, m.na_reasons.get("kv_cache_usage_peak_perc", "no KV-cache use measured")
    if peak + mg.kv_cache_over >= 1:
        return name, (f"the sweep's peak KV-cache use at {m.top_users} users ({peak:.0%}) plus the margin "
                      f"reaches 100%: no higher use to alert on")
    limit = peak + mg.kv_cache_over
    expr = f"max by (arm) (vllm:kv_cache_usage_perc{_selector(m.arm)})\n  > {limit:.4g}"
    return name, _rule(name, expr, f"arm {m.arm}: KV-cache use over {limit:.0%} for {FOR}",
                       f"KV-cache use > {limit:.4g} = the measured peak {peak:.4g} + {mg.kv_cache_over:g}",
                       m, f"KV-cache peak {peak:.4g} at {m.top_users} users")


def _preemptions(m: Measured, mg: Margins) -> tuple[str, dict[str, Any] | str]:
    name = f"{ALERT_PREFIX}PreemptionsAboveMeasured"
    rate = m.preemptions_per_s
    if rate is None:
        return name, m.na_reasons.get("preemptions_per_s", "no preemptions measured")
    limit = rate * (1 + mg.preemptions_over)
    expr = (f"sum by (arm) (rate(vllm:num_preemptions_total{_selector(m.arm)}[{RATE_WINDOW}]))\n"
            f"  > {limit:.4g}")
    return name, _rule(name, expr, f"arm {m.arm}: preemptions above {limit:.3g}/s for {FOR}",
                       f"preemptions > {limit:.4g}/s = the measured {rate:.4g}/s + {mg.preemptions_over:.0%}",
                       m, f"{rate:.4g} preemptions/s at {m.top_users} users")
