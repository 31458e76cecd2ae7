"""Metric names out of PromQL and Grafana dashboards, and the names a /metrics page exposes.

Enough PromQL for the queries a dashboard holds: string literals, label matchers `{...}`, range and
subquery brackets `[...]`, grouping label lists (`by (...)`, `on (...)`, ...) and function calls are
set aside; what is left that looks like an identifier is a metric name.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

# Series Prometheus makes itself (the alerts' state), not a server's /metrics.
PROMETHEUS_SERIES = {"ALERTS", "ALERTS_FOR_STATE"}
KEYWORDS = {"and", "or", "unless", "by", "without", "on", "ignoring", "group_left", "group_right",
            "bool", "offset", "inf", "nan", "atan2"}
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_GROUPING = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)")
_IDENT = re.compile(r"(?<![\w:$.])([A-Za-z_:][A-Za-z0-9_:]*)(\s*\()?")


def _strip(expr: str, open_: str, close: str) -> str:
    out, depth = [], 0
    for c in expr:
        if c == open_:
            depth += 1
        elif c == close and depth:
            depth -= 1
        elif not depth:
            out.append(c)
    return "".join(out)


def metric_names(expr: str) -> set[str]:
    """Metric names a PromQL expression selects (Grafana's $variables are not names)."""
    s = _STRING.sub('""', expr)
    s = _GROUPING.sub(" ", s)
    s = _strip(_strip(s, "{", "}"), "[", "]")
    s = re.sub(r"\$\{?\w+\}?", " ", s)  # Grafana variables outside brackets
    s = re.sub(r"\b\d+(\.\d+)?([eE][+-]?\d+)?\b", " ", s)
    names = set()
    for m in _IDENT.finditer(s):
        name, call = m.group(1), m.group(2)
        if call or name.lower() in KEYWORDS:
            continue
        names.add(name)
    return names


_LABEL_VALUES = re.compile(r"label_values\(\s*([A-Za-z_:][A-Za-z0-9_:]*)")


def dashboard_queries(node: Any) -> Iterator[str]:
    """Every PromQL expression of a dashboard: panel targets (nested rows too) and query variables."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "expr" and isinstance(value, str):
                yield value
            elif key in ("query", "definition") and isinstance(value, str) and "label_values(" in value:
                for m in _LABEL_VALUES.finditer(value):
                    yield m.group(1)
            else:
                yield from dashboard_queries(value)
    elif isinstance(node, list):
        for item in node:
            yield from dashboard_queries(item)


def exposed_names(metrics_text: str) -> set[str]:
    """Every sample name a Prometheus text page exposes (histograms: _bucket, _sum, _count)."""
    return {sample.name for family in text_string_to_metric_families(metrics_text) for sample in family.samples}
