"""The canary's eligibility file: written by the evaluator from its segments, read by the router.

From a results.json whose segments say greedy, JSON output and a tag pay (and short prompts too),
``eligibility_from`` gives the client's header rule plus one rule per routable segment; short
prompts are listed as not routed. The file round-trips through common/canary_rules.py, and the
router (servers/canary/) turns it into HAProxy ACLs; `haproxy -c` accepts the config where
HAProxy is installed. Fast stage.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from common.canary_rules import ELIGIBILITY_FILE, EligibilityError, read_eligibility
from demo.sweep.eligibility import TAG_HEADER, eligibility_from, write_eligibility
from demo.sweep.measured import read_results
from demo.sweep.models import Segment
from demo.sweep.segments import FREE_TEXT, GREEDY, JSON_OUTPUT, SAMPLED
from servers import canary

FIXTURE = Path(__file__).parent / "fixtures" / "legacy-results-v2.json"


def segment(dimension: str, label: str, verdict: str) -> Segment:
    return Segment.model_validate({"dimension": dimension, "label": label, "concurrency": 1, "requests": 8,
                                   "measured": 8, "verdict": verdict})


def test_the_segments_that_pay_become_router_rules_and_the_rest_say_why_not(tmp_path: Path) -> None:
    result = read_results(FIXTURE).model_copy(update={"segments": [
        segment("temperature", GREEDY, "enable"), segment("temperature", SAMPLED, "don't"),
        segment("output_format", JSON_OUTPUT, "enable"), segment("output_format", FREE_TEXT, "depends"),
        segment("tag", "support-faq", "enable"), segment("tag", "has space", "enable"),
        segment("prompt_tokens", "< 256", "enable"),
    ]})
    e, unrouted = eligibility_from(result, "results.json")
    names = [r.name for r in e.rules]
    assert names == ["client-header", "greedy", "json-output-json_object", "json-output-json_schema",
                     "tag-support-faq"]
    assert e.rules[1].when[0].field == "temperature" and e.rules[1].when[0].equals == 0
    assert e.rules[4].when[0].name == TAG_HEADER and e.rules[4].when[0].equals == "support-faq"
    assert unrouted == ["tag has space: the tag is not a plain token a header can carry",
                        "prompt_tokens < 256: no request field a router reads (it cannot count tokens)"]
    path = write_eligibility(e, tmp_path)
    assert path.name == ELIGIBILITY_FILE and read_eligibility(path) == e
    canary.check_eligibility(e)  # every rule the evaluator writes, the router can express
    config = canary.haproxy_config(host="127.0.0.1", port=18090, admin_socket=tmp_path / "admin.sock",
                                   baseline="http://127.0.0.1:18000", speculative="http://127.0.0.1:18001",
                                   share=25, eligibility=e)
    assert "acl r1c0 req.body,json_query('$.temperature') -m str 0" in config
    assert "acl r3c0 req.body,json_query('$.response_format.type') -m str json_schema" in config
    assert f"acl r4c0 req.hdr({TAG_HEADER}) -m str support-faq" in config
    assert "server speculative 127.0.0.1:18001 weight 25" in config
    if shutil.which("haproxy"):
        (tmp_path / "h.cfg").write_text(config)
        checked = subprocess.run(["haproxy", "-c", "-q", "-f", str(tmp_path / "h.cfg")], capture_output=True,
                                 text=True, timeout=30)
        assert checked.returncode == 0, checked.stderr


def test_a_file_that_is_not_an_eligibility_file_is_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "e.json"
    bad.write_text('{"rules": [{"name": "x", "when": [{"kind": "header", "nmae": "a"}]}]}')
    with pytest.raises(EligibilityError, match=r"is not an eligibility file: rules\.0\.when\.0\.nmae"):
        read_eligibility(bad)
    with pytest.raises(EligibilityError, match="no such file"):
        read_eligibility(tmp_path / "none.json")
    bad.write_bytes(b"{" + b" " * 70_000 + b"}")
    with pytest.raises(EligibilityError, match="over 64 KiB"):
        read_eligibility(bad)
