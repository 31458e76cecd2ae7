"""The canary's eligibility file from the sweep's segments: the traffic the recommendation says pays.

``python -m demo guardrails --out DIR`` writes DIR/canary.eligibility.json beside the rules
(common/canary_rules.py is its format; ``python -m servers canary up --eligibility FILE`` reads it).
The client's header (``x-specdemo-eligible: 1``) is always a rule. Each segment whose verdict is
"enable" (demo/sweep/segments.py) adds the rule a router can check on the request itself:

- greedy (T=0): the JSON body's ``temperature`` is 0;
- JSON output: ``response_format.type`` is ``json_object``, or ``json_schema``;
- a tag: the header ``x-specdemo-tag`` carries it (the tag is the workload file's, not in the
  request: the client sets the header), when the tag is a plain token.

Prompt and output token buckets have no field a router reads (it cannot count tokens): they are
listed in ``unrouted`` with the reason, and route only through the client's header.
"""

from __future__ import annotations

import re
from pathlib import Path

from common.canary_rules import (
    DEFAULT_HEADER,
    DEFAULT_HEADER_VALUE,
    ELIGIBILITY_FILE,
    MAX_RULES,
    Condition,
    Eligibility,
    EligibilityRule,
)
from common.files import atomic_write
from demo.sweep.models import Segment, SweepResult
from demo.sweep.segments import GREEDY, JSON_OUTPUT

TAG_HEADER = "x-specdemo-tag"
_TOKEN = re.compile(r"^[A-Za-z0-9_.:/+-]{1,64}$")


def _rules_for(seg: Segment) -> list[EligibilityRule] | str:
    """The rules that select ``seg``'s requests, or why none can."""
    if seg.dimension == "temperature" and seg.label == GREEDY:
        return [EligibilityRule(name="greedy", when=[Condition(kind="body", field="temperature", equals=0)])]
    if seg.dimension == "output_format" and seg.label == JSON_OUTPUT:
        return [EligibilityRule(name=f"json-output-{kind}", when=[
            Condition(kind="body", field="response_format.type", equals=kind)])
            for kind in ("json_object", "json_schema")]
    if seg.dimension == "tag" and _TOKEN.match(seg.label):
        return [EligibilityRule(name=f"tag-{seg.label}"[:80], when=[
            Condition(kind="header", name=TAG_HEADER, equals=seg.label)])]
    if seg.dimension == "tag":
        return "the tag is not a plain token a header can carry"
    return "no request field a router reads (it cannot count tokens)"


def eligibility_from(result: SweepResult, source: str) -> tuple[Eligibility, list[str]]:
    """The eligibility rules from the segments that pay, and one line per paying segment no rule selects."""
    rules = [EligibilityRule(name="client-header", when=[
        Condition(kind="header", name=DEFAULT_HEADER, equals=DEFAULT_HEADER_VALUE)])]
    unrouted: list[str] = []
    for seg in result.segments:
        if seg.verdict != "enable":
            continue
        got = _rules_for(seg)
        if isinstance(got, str):
            unrouted.append(f"{seg.dimension} {seg.label}: {got}")
        else:
            rules += [r for r in got if r not in rules]
    e = Eligibility(rules=rules[:MAX_RULES], source=f"{source}: the segments whose verdict is enable"[:300])
    return e, unrouted


def write_eligibility(e: Eligibility, out: Path) -> Path:
    """DIR/canary.eligibility.json, written whole; returns its path."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / ELIGIBILITY_FILE
    atomic_write(path, e.model_dump_json(indent=2, exclude_none=True))
    return path
