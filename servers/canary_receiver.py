"""The canary's alert receiver: Alertmanager's webhook sets the share to 0 (servers/canary/).

``POST /alert`` takes Alertmanager's webhook body (version 4: ``{"alerts": [{"status", "labels",
"annotations", "startsAt"}, ...]}``), checked by a pydantic model (WebhookBody) as every other
outside input is: a body that is not one is refused with 400 and one line in the log. A firing
alert the canary knows (an alerting rule of its arm in the rules file ``up --rules`` loaded) sets
the share to 0 through the router's runtime API and is logged with its rule and its value (the
``value`` annotation the canary's rules carry). An alert it does not know is one line in the log
and leaves the share as it is; so does a resolved alert: recovery is manual (``python -m servers
canary --share P``). ``GET /health`` answers 200.

The standard library's threading HTTP server: a socket timeout on every connection, bodies capped.
"""

from __future__ import annotations

import argparse
import sys
import threading
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from common.validation import validation_errors
from servers.canary import CanaryError, CanaryState, append_event, read_canary, read_share, set_share

MAX_BODY_BYTES = 1024 * 1024
MAX_ALERTS = 100  # acted on per body; Alertmanager groups an arm's alerts into a handful
SOCKET_TIMEOUT_S = 10.0
_lock = threading.Lock()  # one share change at a time


class WebhookAlert(BaseModel):
    """One alert of Alertmanager's webhook body (version 4); the fields the canary does not read
    (endsAt, generatorURL, fingerprint) are ignored. Label and annotation values are strings."""

    model_config = ConfigDict(extra="ignore")

    status: Literal["firing", "resolved"]
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    startsAt: str | None = Field(default=None, max_length=64)  # noqa: N815 - Alertmanager's name

    def label(self, key: str) -> str:
        """A label's value, cut to 100 characters for the log; "?" when absent."""
        return self.labels.get(key, "?")[:100]


class WebhookBody(BaseModel):
    """Alertmanager's webhook body (version 4): its alerts (the group's fields are ignored)."""

    model_config = ConfigDict(extra="ignore")

    alerts: list[WebhookAlert]


def body_error(e: ValidationError) -> str:
    """A refused body in one line: where it is wrong and why (common.validation), as the log says it."""
    where, why = validation_errors(e)[0]
    return f"not an Alertmanager webhook body: {where or 'the body'}: {why}"


def log(line: str) -> None:
    """One line in the receiver's log (its stdout), stamped with the UTC time."""
    print(f"{datetime.now(UTC):%Y-%m-%dT%H:%M:%S.%fZ} {line}", flush=True)


def handle_alerts(state: CanaryState, body: WebhookBody) -> list[str]:
    """Act on each alert of a webhook body (its first MAX_ALERTS); the lines logged (one per alert)."""
    lines = []
    for a in body.alerts[:MAX_ALERTS]:
        name, arm = a.label("alertname"), a.label("arm")
        value = a.annotations.get("value", "n/a (the rule carries no value annotation)")[:60]
        if name not in state.known_alerts or arm not in (state.arm, "?"):
            lines.append(f"unknown alert {name} (arm {arm}, {a.status}): share untouched; "
                         f"the canary acts on {', '.join(state.known_alerts) or 'no alert (no --rules)'}")
            append_event(state.events_path, {"kind": "unknown_alert", "alert": name, "arm": arm})
            continue
        if a.status == "resolved":
            lines.append(f"resolved {name} (arm {arm}): the share stays; recovery is manual (--share P)")
            append_event(state.events_path, {"kind": "resolved", "alert": name, "arm": arm})
            continue
        with _lock:
            before = read_share(state.admin_socket)
            if before:
                set_share(state.admin_socket, 0)
            after = read_share(state.admin_socket)
        event = append_event(state.events_path, {
            "kind": "rollback", "alert": name, "arm": arm, "value": value,
            "threshold": a.annotations.get("threshold", "n/a")[:200], "starts_at": a.startsAt,
            "share_before": before, "share_after": after, "by": "alertmanager"})
        lines.append(f"rollback: {name} fired (arm {arm}, value {value}, since {a.startsAt}): "
                     f"share {before}% -> {after}% at {event['at']}")
    return lines


class Handler(BaseHTTPRequestHandler):
    """/health and /alert; the canary's state is read per request (``server.run_dir``)."""

    timeout = SOCKET_TIMEOUT_S
    server_version = "specdemo-canary-receiver"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        """Access lines are not logged: each alert is, once."""

    def _answer(self, code: int, text: str) -> None:
        data = (text + "\n").encode()
        self.send_response(code)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        """/health: 200 while the canary's state file is there."""
        if self.path != "/health":
            return self._answer(404, "not found")
        ok = read_canary(self.server.run_dir) is not None  # type: ignore[attr-defined]
        return self._answer(200 if ok else 503, "ok" if ok else "no canary state")

    def do_POST(self) -> None:
        """/alert: Alertmanager's webhook."""
        if self.path != "/alert":
            return self._answer(404, "not found")
        try:
            length = int(self.headers.get("Content-Length", "0"))
        except ValueError:
            length = -1
        if not 0 < length <= MAX_BODY_BYTES:
            log(f"refused an alert body of {length} bytes (1..{MAX_BODY_BYTES})")
            return self._answer(413 if length > 0 else 400, "body size")
        state = read_canary(self.server.run_dir)  # type: ignore[attr-defined]
        if state is None:
            return self._answer(503, "no canary state")
        try:
            body = WebhookBody.model_validate_json(self.rfile.read(length))
        except ValidationError as e:
            log(f"could not act on an alert: {body_error(e)[:200]}")
            return self._answer(400, "not acted on")
        try:
            for line in handle_alerts(state, body):
                log(line)
        except (OSError, CanaryError) as e:
            log(f"could not act on an alert: {str(e)[:200]}")
            return self._answer(500, "not acted on")
        return self._answer(200, "ok")


def main(argv: list[str] | None = None) -> int:
    """Serve until stopped (the canary's `down` stops its process group)."""
    p = argparse.ArgumentParser(prog="python -m servers.canary_receiver", description=__doc__.splitlines()[0])
    p.add_argument("--run-dir", type=Path, required=True)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    args = p.parse_args(argv)
    server = ThreadingHTTPServer((args.host, args.port), Handler)
    server.daemon_threads = True
    server.run_dir = args.run_dir  # type: ignore[attr-defined]
    log(f"receiver on http://{args.host}:{args.port}/alert for the canary in {args.run_dir}")
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
