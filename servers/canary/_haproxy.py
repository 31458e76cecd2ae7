"""Eligibility as HAProxy ACLs (a rule HAProxy cannot express is refused in one line) and the router's
config."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlparse

from common.canary_rules import (
    Condition,
    Eligibility,
)
from servers.canary._state import (
    BACKEND_HEADER,
    BASELINE_BACKEND,
    BODY_BUFFER_BYTES,
    FALLBACK,
    REQUEST_ID_HEADER,
    SPLIT_BACKEND,
    STREAM_TIMEOUT,
    CanaryError,
)

# ---------------------------------------------------------------- eligibility -> HAProxy ACLs

# Names HAProxy takes safely in a config line (anything else is refused, never quoted into it).
_HEADER_NAME = re.compile(r"^[A-Za-z0-9-]{1,64}$")
_FIELD = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}(\.[A-Za-z_][A-Za-z0-9_]{0,63}){0,4}$")
_VALUE = re.compile(r"^[A-Za-z0-9_.:/+-]{1,64}$")

EXPRESSIBLE = ("header: a request header equal to a value",
               "body: a JSON body field (dotted path) equal to a number, string or boolean")


def _text_value(v: str | int | float | bool | None) -> str | None:
    """The text HAProxy's json_query gives for a JSON value (0.0 -> "0", true -> "1"); None: not a scalar."""
    if isinstance(v, bool):
        return "1" if v else "0"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return str(int(v)) if v.is_integer() else repr(v)
    return v


def expressible(c: Condition) -> str | None:
    """Why HAProxy cannot express ``c`` (one line), or None when it can."""
    value = _text_value(c.equals)
    if c.kind == "header":
        if c.name is None or not _HEADER_NAME.match(c.name):
            return f"header condition needs a header name of letters, digits and '-' (got {c.name!r})"
    elif c.kind == "body":
        if c.field is None or not _FIELD.match(c.field):
            return f"body condition needs a dotted field path such as 'temperature' (got {c.field!r})"
    else:
        what = f" ({c.note})" if c.note else ""
        return (f"a {c.kind!r} condition{what}: HAProxy reads headers and JSON body fields, "
                f"not this; it can express only {'; '.join(EXPRESSIBLE)}")
    if value is None or not _VALUE.match(value):
        return f"{c.kind} condition needs a short value of letters, digits and ._:/+- (got {c.equals!r})"
    return None


def check_eligibility(e: Eligibility) -> None:
    """CanaryError naming the first rule HAProxy cannot express."""
    for rule in e.rules:
        for c in rule.when:
            if (why := expressible(c)) is not None:
                raise CanaryError(f"eligibility rule {rule.name!r} cannot be routed: {why}")


def _acl(c: Condition) -> str:
    value = _text_value(c.equals)
    if c.kind == "header":
        return f"req.hdr({c.name}) -m str {value}"
    return f"req.body,json_query('$.{c.field}') -m str {value}"


def _routes(eligibility: Eligibility) -> list[str]:
    """The frontend's ACLs, one per condition, and one use_backend per rule: all its conditions hold."""
    acls: list[str] = []
    uses: list[str] = []
    for i, rule in enumerate(eligibility.rules):
        names = []
        for j, c in enumerate(rule.when):
            acls.append(f"    acl r{i}c{j} {_acl(c)}")
            names.append(f"r{i}c{j}")
        uses.append(f"    use_backend {SPLIT_BACKEND} if {' '.join(names)}  # {rule.name}")
    return acls + uses


def _global_and_defaults(admin_socket: Path) -> list[str]:
    """HAProxy's process settings (the admin socket the share is set through) and the HTTP defaults."""
    return [
        "global",
        "    log stdout format raw local0 info",
        f"    stats socket {admin_socket} mode 600 level admin",
        "    stats timeout 10s",
        "    nbthread 1",
        f"    tune.bufsize {BODY_BUFFER_BYTES}",
        "defaults",
        "    mode http",
        "    log global",
        "    timeout connect 5s",
        f"    timeout client {STREAM_TIMEOUT}",
        f"    timeout server {STREAM_TIMEOUT}",
        "    timeout http-request 30s",
        "    option http-no-delay  # forward each SSE chunk at once (no waiting for a fuller packet)",
        "    retries 2",
        "    option redispatch 1  # a connection refused by one server of the split: retried on the other",
        "    timeout queue 30s",
    ]


def _frontend(host: str, port: int, eligibility: Eligibility) -> list[str]:
    """The router's frontend: each request's id and backend in its response headers and log line,
    eligible requests to the split, the rest to the baseline."""
    return [
        "frontend canary",
        f"    bind {host}:{port}",
        "    option http-buffer-request",
        "    unique-id-format %{+X}o%ci%cp%fp%Ts%rt",
        f"    unique-id-header {REQUEST_ID_HEADER}",
        f"    http-response set-header {REQUEST_ID_HEADER} %[unique-id]",
        f"    http-response set-header {BACKEND_HEADER} %s",
        '    log-format "canary rid=%ID backend=%s route=%b status=%ST duration_ms=%Ta bytes=%B %HM %HP"',
        *_routes(eligibility),
        f"    default_backend {BASELINE_BACKEND}",
    ]


def _backends(baseline: str, speculative: str, share: int) -> list[str]:
    """The weighted split (the speculative server at ``share`` percent, the baseline as its fallback)
    and the baseline's own backend, each server health-checked."""
    check = "check inter 2s fall 2 rise 2"
    return [
        f"backend {SPLIT_BACKEND}",
        "    balance roundrobin",
        "    option httpchk GET /health",
        f"    server baseline {host_port(baseline)} weight {100 - share} {check}",
        # A refused connection marks it down at once (not after the next checks), and the request
        # is retried on the other server, or on the fallback when the share is 100.
        f"    server speculative {host_port(speculative)} weight {share} {check} "
        "observe layer4 error-limit 1 on-error mark-down",
        # Only when no server of the split can serve (the share at 100 and the speculative down).
        f"    server {FALLBACK} {host_port(baseline)} backup {check}",
        f"backend {BASELINE_BACKEND}",
        "    option httpchk GET /health",
        f"    server baseline {host_port(baseline)} {check}",
    ]


def _metrics_frontend(host: str, metrics_port: int) -> list[str]:
    """HAProxy's built-in Prometheus exporter on ``/metrics`` of its own port."""
    return [
        "frontend metrics",
        f"    bind {host}:{metrics_port}",
        "    no log",
        "    http-request use-service prometheus-exporter if { path /metrics }",
        "    http-request return status 404",
    ]


def haproxy_config(*, host: str, port: int, admin_socket: Path, baseline: str, speculative: str,
                   share: int, eligibility: Eligibility, metrics_port: int | None = None) -> str:
    """The router's config: eligible requests to the weighted split, the rest to the baseline;
    with ``metrics_port``, HAProxy's built-in Prometheus exporter on it (``/metrics``)."""
    check_eligibility(eligibility)
    return "\n".join([
        f"# Written by `python -m servers canary up` at {datetime.now(UTC):%Y-%m-%dT%H:%M:%SZ}: do not edit,",
        "# the share lives in the runtime weights (`--share P`), not here.",
        *_global_and_defaults(admin_socket),
        *_frontend(host, port, eligibility),
        *_backends(baseline, speculative, share),
        *([] if metrics_port is None else _metrics_frontend(host, metrics_port)),
        "",
    ])


def host_port(url: str) -> str:
    u = urlparse(url)
    if u.scheme != "http" or not u.hostname or not u.port:
        raise CanaryError(f"{url!r}: the canary routes to http://HOST:PORT servers")
    return f"{u.hostname}:{u.port}"
