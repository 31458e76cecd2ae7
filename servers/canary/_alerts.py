"""The alert path: the guardrails staged for the canary, Alertmanager's and Prometheus's configs."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from servers import monitor
from servers.canary._haproxy import host_port
from servers.canary._state import ROUTER_JOB, CanaryError

# ---------------------------------------------------------------- the alert path (stage rules)

def stage_rules(text: str, *, arm: str, alert_for: str | None, window: str | None) -> tuple[str, list[str]]:
    """The guardrails as the canary's Prometheus loads them, and the alert names it acts on.

    Each rule of ``arm`` keeps its expression and threshold; ``alert_for`` replaces its ``for`` and
    ``window`` every range in its expression (the evaluator writes 10m and 5m: a test or a stage
    wants seconds), and an annotation carries the value that fired it (``{{ $value }}``).
    Rules of other arms are left out: the canary routes to one speculative server.
    """
    try:
        doc = yaml.safe_load(text)
        groups = doc["groups"]
        assert isinstance(groups, list)
    except (yaml.YAMLError, KeyError, TypeError, AssertionError):
        raise CanaryError("the rules file is not a Prometheus rules file (no `groups:` list)") from None
    known: list[str] = []
    kept = []
    for g in groups:
        rules = []
        for r in g.get("rules") or []:
            if "alert" not in r or r.get("labels", {}).get("arm", arm) != arm:
                continue
            r = dict(r)
            if alert_for is not None:
                r["for"] = alert_for
            if window is not None:
                r["expr"] = _WINDOW.sub(f"[{window}]", r["expr"])
            r["annotations"] = {**r.get("annotations", {}), "value": "{{ $value }}"}
            rules.append(r)
            known.append(str(r["alert"]))
        if rules:
            kept.append({**g, "rules": rules})
    if not known:
        raise CanaryError(f"the rules file has no alerting rule for arm {arm!r}: nothing would roll the canary back")
    head = (f"# The guardrails for the canary (arm {arm}): for {alert_for or 'as written'}, "
            f"window {window or 'as written'}; written by `python -m servers canary up`.\n")
    return head + yaml.safe_dump({"groups": kept}, sort_keys=False, width=1000), known

_WINDOW = re.compile(r"\[(\d+(?:ms|s|m|h|d))\]")  # a rate window in a rule's expression


def alertmanager_config(receiver_url: str) -> dict[str, Any]:
    """Every alert to the canary's receiver at once (group_wait 0 s), resolved ones too."""
    return {
        "route": {"receiver": "canary", "group_by": ["alertname", "arm"], "group_wait": "0s",
                  "group_interval": "5s", "repeat_interval": "1h"},
        "receivers": [{"name": "canary", "webhook_configs": [
            {"url": f"{receiver_url}/alert", "send_resolved": True, "max_alerts": 0}]}],
    }


def prometheus_config(baseline: str, speculative: str, arm: str, rules: Path, alertmanager: str,
                      interval_s: int, router_metrics: str | None = None) -> dict[str, Any]:
    """servers/monitor.py's scrape config for the pair (its labels, so the rules' selectors match),
    loading ``rules`` and sending alerts to ``alertmanager``; with ``router_metrics`` (host:port),
    HAProxy's exporter too, as job ``canary-router`` (requests per server: the split as it runs)."""
    if arm == "speculative":  # the pair's own labels: role and arm speculative
        config = monitor.scrape_config({"baseline": [host_port(baseline)], "speculative": [host_port(speculative)]},
                                       interval_s=interval_s, rule_files=[str(rules)])
    else:  # a named arm (`up --arms`): role speculative, arm NAME
        config = monitor.scrape_config({"baseline": [host_port(baseline)]}, {arm: [host_port(speculative)]},
                                       interval_s=interval_s, rule_files=[str(rules)])
    config["alerting"] = {"alertmanagers": [{"static_configs": [{"targets": [host_port(alertmanager)]}]}]}
    if router_metrics is not None:
        config["scrape_configs"].append({"job_name": ROUTER_JOB, "scrape_interval": f"{interval_s}s",
                                         "scrape_timeout": f"{max(1, interval_s - 1)}s",
                                         "static_configs": [{"targets": [router_metrics]}]})
    return config
