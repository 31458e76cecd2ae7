"""The canary receiver's check of Alertmanager's webhook body (servers/canary_receiver.py): a
version-4 body as Alertmanager sends it is read, every field the canary does not use ignored; a body
that is not one is refused with the place and the reason in one line. The receiver acting on a body
(the share set to 0, the log) is tests/test_canary.py's and tests/test_canary_rollback.py's."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from pydantic import ValidationError

from common.canary_rules import Condition, Eligibility, EligibilityRule
from servers.canary import CanaryState
from servers.canary_receiver import MAX_ALERTS, WebhookBody, body_error, handle_alerts

# Alertmanager's webhook body, version 4, with the fields it always sends (its docs' example shape).
FIRING = {
    "version": "4", "groupKey": '{}:{alertname="SpecAcceptanceLow"}', "truncatedAlerts": 0,
    "status": "firing", "receiver": "canary", "groupLabels": {"alertname": "SpecAcceptanceLow"},
    "commonLabels": {"alertname": "SpecAcceptanceLow", "arm": "speculative"}, "commonAnnotations": {},
    "externalURL": "http://127.0.0.1:9093",
    "alerts": [{"status": "firing", "labels": {"alertname": "SpecAcceptanceLow", "arm": "speculative"},
                "annotations": {"value": "0.21", "threshold": "0.35"}, "startsAt": "2026-12-04T19:00:00Z",
                "endsAt": "0001-01-01T00:00:00Z", "generatorURL": "http://127.0.0.1:9090/graph",
                "fingerprint": "a1b2c3"}],
}


def test_alertmanagers_body_is_read_and_its_other_fields_ignored() -> None:
    body = WebhookBody.model_validate_json(json.dumps(FIRING))
    (alert,) = body.alerts
    assert (alert.status, alert.label("alertname"), alert.label("arm")) == ("firing", "SpecAcceptanceLow",
                                                                            "speculative")
    assert alert.annotations == {"value": "0.21", "threshold": "0.35"} and alert.startsAt == "2026-12-04T19:00:00Z"
    assert alert.label("missing") == "?"
    # an alert with its status alone: no labels, annotations or start (each optional)
    (bare,) = WebhookBody.model_validate({"alerts": [{"status": "resolved"}]}).alerts
    assert (bare.labels, bare.annotations, bare.startsAt) == ({}, {}, None)


@pytest.mark.parametrize(("raw", "where", "why"), [
    (b"not json", "the body", "Invalid JSON"),
    (b"[1, 2]", "the body", "an object"),
    (b'{"status": "firing"}', "alerts", "Field required"),
    (b'{"alerts": [{"status": "pending"}]}', "alerts.0.status", "'firing' or 'resolved'"),
    (b'{"alerts": [{"status": "firing", "labels": ["alertname"]}]}', "alerts.0.labels", "an object"),
    (b'{"alerts": [{"status": "firing", "labels": {"arm": 3}}]}', "alerts.0.labels.arm", "valid string"),
    (b'{"alerts": ["firing"]}', "alerts.0", "an object"),
])
def test_a_body_that_is_not_alertmanagers_is_refused_in_one_line(raw: bytes, where: str, why: str) -> None:
    with pytest.raises(ValidationError) as caught:
        WebhookBody.model_validate_json(raw)
    line = body_error(caught.value)
    assert line.startswith(f"not an Alertmanager webhook body: {where}: ") and why in line, line
    assert "\n" not in line


ELIGIBLE = Eligibility(rules=[EligibilityRule(name="all",
                                              when=[Condition(kind="header", name="x-canary", equals="1")])])


def test_the_receiver_acts_on_the_first_hundred_alerts_of_a_body(tmp_path: Path) -> None:
    """Resolved and unknown alerts only: each is a line and an event, the router is not asked."""
    state = CanaryState(started_at=datetime.now(UTC), router_url="http://127.0.0.1:1", admin_socket=tmp_path / "s",
                        baseline_url="http://127.0.0.1:2", speculative_url="http://127.0.0.1:3", arm="speculative",
                        eligibility=ELIGIBLE, known_alerts=["SpecAcceptanceLow"],
                        events_path=tmp_path / "events.jsonl", processes=[])
    alerts = [{"status": "resolved", "labels": {"alertname": "SpecAcceptanceLow", "arm": "speculative"}},
              *({"status": "firing", "labels": {"alertname": f"Other{i}"}} for i in range(MAX_ALERTS + 49))]
    lines = handle_alerts(state, WebhookBody.model_validate({"alerts": alerts}))
    assert len(lines) == MAX_ALERTS == 100
    assert lines[0] == "resolved SpecAcceptanceLow (arm speculative): the share stays; recovery is manual (--share P)"
    assert lines[1].startswith("unknown alert Other0 (arm ?, firing): share untouched; the canary acts on "
                               "SpecAcceptanceLow")
    events = [json.loads(line) for line in state.events_path.read_text().splitlines()]
    assert [e["kind"] for e in events] == ["resolved"] + ["unknown_alert"] * (MAX_ALERTS - 1)
