"""The canary view's logic without a browser (demo/live/canary_stage.py), against stand-ins and a real canary.

The canary is `python -m servers canary up` in front of two stand-ins, with the default eligibility
(the client's ``x-specdemo-eligible: 1`` header), the evaluator's acceptance rule for the stand-in's
measured 7/16, and the short alert path of tests/test_canary_rollback.py (``--alert-for 2s
--alert-window 5s``, 1 s scrapes). The view's traffic runs open loop at 5 req/s through the router.

Stand-in truth: every request the speculative stand-in got carries the eligibility header and the
preset sent at the time (json_reformat, then poetry). A stand-in's acceptance does not follow the
prompt, so the switch to poetry is paired with the stand-in degrading (every draft rejected), as
poetry at T=1 does to n-gram drafts on the real servers. The figures per path come from the
canary's Prometheus (HAProxy's exporter, the stand-ins' vLLM histograms). After the switch, the
rule fires and the receiver sets the share to 0: the timeline's three times are in order and
bounded, the rollback names its rule and value, no request failed. Recovery is the page's share
control. Bad input, one line each: no canary (with the command), a rate <= 0, a share outside
0-100, Prometheus not answering. Skipped without haproxy, prometheus or prometheus-alertmanager;
fast stage (~30 s).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from common.canary_rules import DEFAULT_HEADER, default_eligibility
from common.waiting import wait_for
from demo.live.canary_stage import (
    BAD_PRESET,
    GOOD_PRESET,
    PROMETHEUS_FIRED,
    CanaryFrame,
    CanaryStage,
    frame_html,
    frame_line,
    parse_rate,
)
from demo.presets import load_presets
from demo.settings import Settings
from demo.sweep.guardrails import guardrails, rules_text
from demo.sweep.measured import Measured
from harness.ports import free_port
from harness.standin import Standin
from servers import canary, procs
from tests.test_canary import Canary
from tests.test_canary_rollback import BASE, DEGRADED, NEEDS_ALERT_PATH, SPEC

pytestmark = NEEDS_ALERT_PATH
RATE = 5.0
MAX_TOKENS = 24
ARM = "ngram"
ROLLBACK_BOUND_S = 60.0  # 5 s window, 2 s for, 1 s scrapes and evaluations


def alert_rules(tmp_path: Path) -> Path:
    """The evaluator's guardrails for the stand-in's measured acceptance (the acceptance rule)."""
    # A named arm, as `servers up --arms ngram` starts it: its series carry arm="ngram" and
    # role="speculative", and the view must find the speculative path by its role.
    measured = Measured(source="results.json", measured_on="2026-12-04", arm=ARM, cells=1,
                        acceptance_rate=7 / 16, users=1, top_users=1)
    rules = tmp_path / "guardrails.rules.yml"
    rules.write_text(rules_text([guardrails(measured)]))
    return rules


def up_with_alert_path(c: Canary, rules: Path) -> str:
    """`canary up` at share 50 with the short alert path; its Prometheus URL."""
    prom_port = free_port()
    done = c.up("--share", "50", "--arm", ARM, "--rules", str(rules), "--alert-for", "2s", "--alert-window", "5s",
                "--prometheus-port", str(prom_port), "--alertmanager-port", str(free_port()))
    assert done.returncode == 0, done.stderr
    return f"http://127.0.0.1:{prom_port}"


def preset_of(body: object) -> str:
    """Which preset a recorded request body (parsed JSON) came from."""
    text = json.dumps(body)
    return BAD_PRESET if "lighthouse" in text else GOOD_PRESET if "order_id" in text else "?"


def test_bad_input_is_one_line_each(tmp_path: Path) -> None:
    settings = Settings(_env_file=None)
    presets, _ = load_presets(settings.presets_dir)
    stage = CanaryStage(settings, presets, tmp_path / "none")
    frame = stage.poll()
    assert frame.problem is not None and "no canary is running" in frame.problem
    assert "python -m servers canary up --share 50 --rules" in frame.problem and "\n" not in frame.problem
    assert frame_line(frame) == (frame.problem, "problem")
    with pytest.raises(canary.CanaryError, match="no canary is running.*python -m servers canary up"):
        stage.start(RATE)
    for bad in (0, -1, "abc", float("nan")):
        with pytest.raises(ValueError, match="requests per second above 0|above 0 requests/s"):
            stage.start(bad)
    with pytest.raises(ValueError, match="at most"):
        parse_rate(500)
    for bad_tokens in (0, None, 10_000):
        with pytest.raises(ValueError, match="max tokens: a whole number from 1 to 4096"):
            stage.start(RATE, bad_tokens)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="no traffic running"):
        stage.switch()
    with pytest.raises(canary.CanaryError, match="outside 0-100"):
        stage.set_share(150)
    # What the view draws from outside (Prometheus's alert names and values, the events file) is escaped.
    frame = CanaryFrame(share_percent=0, rollback={"alert": "<script>x</script>", "value": "<b>", "threshold": "&",
                                                   "share_before": 50, "share_after": 0, "at": "2026-12-04T19:00:00"},
                        alerts=[{"name": "<img src=x>", "state": "firing", "value": "1e-2", "threshold": "<i>"}])
    page = frame_html(frame)
    assert "<script>" not in page and "<img" not in page and "<i>" not in page and "&lt;script&gt;" in page
    assert "firing at 0.01" in page


def test_the_view_drives_eligible_traffic_and_times_the_rollback(tmp_path: Path) -> None:
    settings = Settings(_env_file=None, read_timeout_s=10, probe_timeout_s=2)
    presets, _ = load_presets(settings.presets_dir)
    with Standin(BASE) as base, Standin(SPEC) as spec:
        c = Canary(tmp_path / "run", base, spec, default_eligibility())
        stage = CanaryStage(settings, presets, c.run_dir)
        up_with_alert_path(c, alert_rules(tmp_path))
        try:
            said = stage.start(RATE, max_tokens=MAX_TOKENS)
            assert f"{RATE:g} req/s of {GOOD_PRESET}" in said and c.url in said

            def healthy() -> bool:  # both paths drawn from Prometheus, the stand-in's acceptance read back
                f = stage.poll()
                b, s = f.paths.get("baseline"), f.paths.get("speculative")
                return (f.problem is None and b is not None and s is not None and (b.requests_per_s or 0) > 0
                        and (s.requests_per_s or 0) > 0 and b.itl_p95_ms is not None and s.itl_p95_ms is not None
                        and s.acceptance is not None and abs(s.acceptance - 7 / 16) < 0.05)
            wait_for(healthy, 60, "both paths' requests/s, ITL p95 and the speculative acceptance from Prometheus",
                     poll_s=1.0)
            # Requests/s per path: the router's exporter over a 5 s window of Poisson arrivals; the two
            # add up to the rate sent (open loop), within the noise of ~25 arrivals.
            def adds_up() -> bool:
                total = sum(p.requests_per_s or 0 for p in stage.poll().paths.values())
                return 0.5 * RATE < total < 1.5 * RATE
            wait_for(adds_up, 30, f"both paths' requests/s add up to {RATE:g} req/s, within 50%", poll_s=1.0)
            # The guardrail as Prometheus holds it: the evaluator's threshold, inactive while healthy. Its
            # 5 s window can cut a request's cycle of steps, so on a busy machine an evaluation may see it
            # pending a moment (busy run of b01c6ce): a state still changing is waited for, as a page's is.
            def inactive() -> bool:
                alerts = stage.poll().alerts
                return [(a["name"], a["state"]) for a in alerts] == [("SpecAcceptanceBelowFloor", "inactive")]
            wait_for(inactive, 30, "the guardrail inactive while the traffic is healthy", poll_s=1.0)
            frame = stage.poll()
            assert frame.share_percent == 50 and frame.paths["baseline"].acceptance is None  # no drafts: no rollback
            assert "0.4375" in frame.alerts[0]["threshold"]
            # ITL p95: the stand-ins' own histograms (base 200 tok/s: 5 ms a token; spec steps of
            # up to 5 tokens at 400 tok/s), within vLLM's buckets.
            assert 1 <= frame.paths["baseline"].itl_p95_ms <= 100, frame.paths  # type: ignore[operator]
            assert "share of eligible traffic to speculative" in frame_html(frame)
            assert all(r.headers.get(DEFAULT_HEADER) == "1" for r in spec.requests)  # every one eligible
            assert spec.requests and {preset_of(r.body) for r in spec.requests} == {GOOD_PRESET}

            n_before = len(spec.requests)
            said = stage.switch()
            spec.behavior.chunk_sizes = DEGRADED  # what poetry at T=1 does to drafts (see the docstring)
            assert BAD_PRESET in said and "T=1" in said
            wait_for(lambda: stage.poll().timeline.share_zero_at is not None, ROLLBACK_BOUND_S,
                     "the rule fired and the share went to 0, seen by the view")
            frame = stage.poll()
            tl = frame.timeline
            assert frame.share_percent == 0 and frame.rollback is not None
            assert frame.rollback["alert"] == "SpecAcceptanceBelowFloor" and float(frame.rollback["value"]) < 0.3
            assert tl.switched_at and tl.fired_at and tl.share_zero_at
            assert tl.switched_at <= tl.fired_at <= tl.share_zero_at, tl
            assert tl.fired_source == PROMETHEUS_FIRED  # the rollback event carries Prometheus's startsAt
            took = tl.seconds(tl.switched_at, tl.share_zero_at)
            assert took is not None and 0 < took < ROLLBACK_BOUND_S
            print(f"switch -> firing {tl.seconds(tl.switched_at, tl.fired_at):.1f} s ({tl.fired_source}), "
                  f"-> share 0 {tl.seconds(tl.fired_at, tl.share_zero_at):.1f} s; total {took:.1f} s")
            page = frame_html(frame)
            assert "SpecAcceptanceBelowFloor" in page and "switch to share 0" in page and "manual" in page
            assert frame_line(frame)[0].startswith("rolled back by SpecAcceptanceBelowFloor")
            after = [preset_of(r.body) for r in spec.requests[n_before:]]
            assert BAD_PRESET in after  # the switch reached the speculative path before the rollback
            t = stage.traffic
            assert t is not None and t.failed == 0 and t.finished > 0, t

            # Recovery is manual: the page's share control, logged as the page's.
            assert "0% -> 25%" in stage.set_share(25)
            assert c.status()["share_percent"] == 25 and c.status()["last_event"]["by"] == "page"
            assert frame_line(stage.poll())[1] == "ok"

            # Prometheus down: one line, the rest of the view still drawn.
            state = canary.read_canary(c.run_dir)
            assert state is not None
            prom = next(p for p in state.processes if p.name == "prometheus")
            procs.stop_group(prom.pgid, 10)
            frame = stage.poll()
            assert frame.problem is not None and f"Prometheus at {prom.url} does not answer" in frame.problem
            assert frame.share_percent == 25
        finally:
            stage.stop()
            assert c("down").returncode == 0
        assert stage.traffic is not None and stage.traffic.ended_at is not None and stage.traffic.open == 0
        assert "stopped at" in frame_html(stage.poll())
        events = [json.loads(x) for x in (c.run_dir / "events.jsonl").read_text().splitlines()]
        assert [e["kind"] for e in events].count("rollback") == 1
