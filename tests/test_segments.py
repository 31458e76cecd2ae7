"""Results by segment (demo/sweep/segments.py): the buckets, the too-few rule, the verdicts on the
evaluator's thresholds, the routing sentence; a real sweep on stand-ins whose acceptance differs by
tag (the per-segment speedups against the stand-ins' truth, the sentence naming the right
segments); results.json, the report and the Evaluate tab showing what the core built, escaped;
an older results.json still loading."""

from __future__ import annotations

import asyncio
import json
import statistics
from pathlib import Path
from typing import NamedTuple, cast

import pytest

from demo.fmt import esc
from demo.results import Message
from demo.sampling import ResponseFormat
from demo.settings import Settings
from demo.sweep.models import Segment, SweepResult
from demo.sweep.profile import RequestOutcome
from demo.sweep.report import finalize, write_outputs
from demo.sweep.report_workload import segments_html, summary_paragraph
from demo.sweep.runner import new_result, run_sweep, sweep_spec
from demo.sweep.segments import (
    MAX_TAG_SEGMENTS,
    OTHER_TAGS,
    bucket_labels,
    bucket_of,
    group_outcomes,
    routing_sentence,
    segment_verdict,
    segments_of,
)
from demo.sweep.verdict import GAIN_NONE, GAIN_WORTH
from demo.ui import evaluate_tab
from demo.workload import Workload, WorkloadRequest
from harness.standin import Standin, StandinBehavior
from harness.standin_process import process_pair

FIXTURES = Path(__file__).parent / "fixtures"


def outcome(rid: str, speedup: float | None = 2.0, *, tag: str | None = None, temperature: float | None = 0.0,
            structured: bool | None = False, prompt_tokens: int | None = 100, output_tokens: int | None = 50,
            acceptance_rate: float | None = 0.5, tokens_per_step: float | None = 3.0) -> RequestOutcome:
    return RequestOutcome(id=rid, prompt_sha256="0" * 64, speedup=speedup, tag=tag, temperature=temperature,
                          structured=structured, prompt_tokens=prompt_tokens, output_tokens=output_tokens,
                          acceptance_rate=acceptance_rate, tokens_per_step=tokens_per_step)


# --------------------------------------------------------------------------- buckets


def test_buckets_are_stated_and_their_edges_fall_where_stated() -> None:
    assert bucket_labels((256, 1024)) == ["< 256", "256-1023", "≥ 1024"]
    assert bucket_labels((128, 512)) == ["< 128", "128-511", "≥ 512"]
    cases = {0: "< 256", 255: "< 256", 256: "256-1023", 1023: "256-1023", 1024: "≥ 1024", 90_000: "≥ 1024"}
    for tokens, label in cases.items():
        assert bucket_of(tokens, (256, 1024)) == label, tokens


def test_requests_are_grouped_by_each_dimension() -> None:
    outs = [outcome("a", tag="code", structured=True, prompt_tokens=300, output_tokens=600),
            outcome("b", tag="chat", temperature=0.8, prompt_tokens=2000, output_tokens=10),
            outcome("c", temperature=0.7, prompt_tokens=None, output_tokens=200)]
    groups = {(d, label): [o.id for o in g] for d, label, g in group_outcomes(outs)}
    assert groups == {
        ("tag", "code"): ["a"], ("tag", "chat"): ["b"], ("tag", "(no tag)"): ["c"],
        ("output_format", "JSON"): ["a"], ("output_format", "free text"): ["b", "c"],
        ("temperature", "greedy (T=0)"): ["a"], ("temperature", "sampled (T>0)"): ["b", "c"],
        ("prompt_tokens", "256-1023"): ["a"], ("prompt_tokens", "≥ 1024"): ["b"],  # c's count is unknown
        ("output_tokens", "< 128"): ["b"], ("output_tokens", "128-511"): ["c"], ("output_tokens", "≥ 512"): ["a"],
    }
    dims = [d for d, _label, _g in group_outcomes(outs)]
    assert dims == sorted(dims, key=["tag", "output_format", "temperature", "prompt_tokens",
                                     "output_tokens"].index)
    # no tag anywhere: no tag dimension
    assert all(d != "tag" for d, _l, _g in group_outcomes([outcome("x"), outcome("y")]))


def test_many_tags_keep_the_most_frequent_and_pool_the_rest() -> None:
    outs = [outcome(f"{t}-{i}", tag=f"t{t:02d}") for t in range(MAX_TAG_SEGMENTS + 2) for i in range(t + 1)]
    labels = [label for d, label, _g in group_outcomes(outs) if d == "tag"]
    assert len(labels) == MAX_TAG_SEGMENTS and labels[-1] == OTHER_TAGS
    assert labels[0] == f"t{MAX_TAG_SEGMENTS + 1:02d}"  # the largest first
    other = next(g for d, label, g in group_outcomes(outs) if d == "tag" and label == OTHER_TAGS)
    assert sorted({o.tag or "" for o in other}) == ["t00", "t01", "t02"]


# --------------------------------------------------------------------------- one segment


def test_fewer_than_three_measured_requests_is_too_few() -> None:
    (two,) = [s for s in segments_of([outcome("a", 3.0), outcome("b", 3.0), outcome("c", None)], 1)
              if s.dimension == "temperature"]
    assert (two.requests, two.measured, two.verdict) == (3, 2, "n/a")
    assert two.reason == "too few: 2 request(s) with a speedup, 3 needed"
    assert two.speedup == 3.0  # the figures are still shown
    (three,) = [s for s in segments_of([outcome(x, 3.0) for x in "abc"], 1) if s.dimension == "temperature"]
    assert three.verdict == "enable"


def test_median_and_range_of_the_segments_speedups() -> None:
    outs = [outcome("a", 1.0, acceptance_rate=0.1, tokens_per_step=1.2), outcome("b", 4.0, tokens_per_step=4.0),
            outcome("c", 2.0, acceptance_rate=0.9, tokens_per_step=2.5), outcome("d", None, acceptance_rate=None)]
    seg = next(s for s in segments_of(outs, 2) if s.dimension == "temperature")
    assert (seg.speedup, seg.speedup_min, seg.speedup_max) == (2.0, 1.0, 4.0)
    assert seg.acceptance_rate == 0.5 and seg.tokens_per_step == 2.75 and seg.concurrency == 2


def test_the_verdict_uses_the_evaluators_thresholds() -> None:
    assert segment_verdict(GAIN_WORTH, 4.0, 0.6, 3)[0] == "enable"
    assert segment_verdict(GAIN_WORTH - 0.001, 4.0, 0.6, 3)[0] == "depends"
    assert segment_verdict(GAIN_NONE, 4.0, 0.6, 3)[0] == "depends"
    verdict, why = segment_verdict(GAIN_NONE - 0.001, 1.0, 0.1, 3)
    assert verdict == "don't" and "drafts mostly rejected (acceptance 10%)" in why
    # above the tokens per step (by more than the noise margin): counted as them
    verdict, why = segment_verdict(1.3, 1.0, 0.0, 5)
    assert verdict == "don't" and "counted as 1.00×" in why


# --------------------------------------------------------------------------- the sentence


def seg(dimension: str, label: str, verdict: str) -> Segment:
    return Segment.model_validate({"dimension": dimension, "label": label, "concurrency": 1, "requests": 5,
                                   "verdict": verdict})


def test_the_sentence_names_the_segments_that_differ() -> None:
    sentence = routing_sentence([
        seg("tag", "code", "enable"), seg("tag", "chat", "don't"), seg("tag", "misc", "n/a"),
        seg("output_format", "JSON", "enable"), seg("output_format", "free text", "depends"),
        seg("temperature", "greedy (T=0)", "enable"), seg("temperature", "sampled (T>0)", "don't"),
        seg("prompt_tokens", "< 256", "enable"), seg("prompt_tokens", "256-1023", "enable")])
    assert sentence == ('Send tag "code", JSON output and greedy (T=0) requests to the speculative server; '
                        'keep tag "chat" and sampled (T>0) requests on the baseline; free-text output gains too '
                        'little to route (speedup 1.05× to 1.15×). Too few requests to tell: tag "misc".')


@pytest.mark.parametrize(("verdicts", "start"), [
    (["enable", "enable"], "Send all of this traffic to the speculative server"),
    (["don't", "don't"], "Keep all of this traffic on the baseline"),
    (["depends", "depends"], "No segment gains enough to route on"),
    (["n/a", "n/a"], "No routing decision"),
])
def test_the_sentence_when_no_dimension_splits_the_traffic(verdicts: list[str], start: str) -> None:
    segments = [seg("prompt_tokens", label, v) for label, v in zip(["< 256", "≥ 1024"], verdicts, strict=True)]
    assert routing_sentence(segments).startswith(start)


# --------------------------------------------------------------------------- a real sweep on stand-ins

K = 4
MAX_TOKENS = 61  # 1 prefill token + 60: whole steps of 4, 2 and 1
# Streams of 1 s or more (the fastest, "code": 60 tokens at 3x), each side's stand-in in a process of
# its own: a late wake-up of the client on a busy machine stays well under 5% of a request's decode
# time. At 30 tokens/s (0.67 s) with both stand-ins in the client's process, a third xdist worker
# beside moved a segment's speedup to 1.415 against a truth of 1.501.
BASE_RATE = 20.0
class Kind(NamedTuple):
    """One tag's requests: the speculative stand-in's tokens per step and rate, count, temperature, JSON."""

    chunk: int
    rate_factor: float
    n: int
    temperature: float
    json: bool


KINDS = {"code": Kind(4, 3.0, 3, 0.0, True), "chat": Kind(1, 1.0, 3, 0.8, False),
         "misc": Kind(2, 1.5, 2, 0.0, False)}


def tagged_workload() -> Workload:
    reqs = []
    for tag, kind in KINDS.items():
        for i in range(kind.n):
            reqs.append(WorkloadRequest(
                id=f"{tag}-{i}", api="chat", tag=tag, temperature=kind.temperature, max_tokens=MAX_TOKENS,
                messages=[Message(role="user", content=f"MARK-{tag.upper()} request {tag}-{i}: <b>go</b>")],
                response_format=ResponseFormat(type="json_object") if kind.json else None))
    return Workload(name="tagged", source="tagged.jsonl", format="jsonl", requests=reqs)


def run_tagged_sweep(monkeypatch: pytest.MonkeyPatch) -> tuple[SweepResult, dict[str, float]]:
    """The sweep's result, and each request's true decode speedup (the stand-ins' send times)."""
    monkeypatch.delenv("SPECDEMO_ARMS", raising=False)
    by_marker = {f"MARK-{tag.upper()}": {"chunk_sizes": [k.chunk], "tokens_per_s": BASE_RATE * k.rate_factor}
                 for tag, k in KINDS.items()}
    workload = tagged_workload()
    with process_pair(StandinBehavior(tokens_per_s=BASE_RATE, ttft_s=0.02),
                      StandinBehavior(tokens_per_s=BASE_RATE, ttft_s=0.02, speculative=True, num_spec_tokens=K,
                                      by_marker=by_marker)) as (base, spec):
        settings = Settings(baseline_url=base.url, speculative_url=spec.url, save_runs=False)
        # Both sides at once (each stand-in has its own process): a request takes its slower side's time.
        plan = sweep_spec(settings, [], "1", "", 1, 0, None, "simultaneous", workload=workload)
        result = finalize(asyncio.run(run_sweep(plan, settings, new_result(plan, {}), {},
                                                workload=workload)))
        rates = {side: {t.prompt: t.decode_tokens_per_s for t in s.truth()} for side, s in
                 (("baseline", base), ("speculative", spec))}
    truth = {}
    for r in workload.requests:
        prompt = next(p for p in rates["baseline"] if f"request {r.id}:" in p)
        b, s = rates["baseline"][prompt], rates["speculative"][prompt]
        assert b and s
        truth[r.id] = s / b
    return result, truth


def test_per_segment_speedups_match_the_truth_and_the_sentence_routes_by_tag(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    result, truth = run_tagged_sweep(monkeypatch)
    (cell,) = result.cells
    assert {o.id: (o.tag, o.temperature, o.structured) for o in cell.requests} == {
        r.id: (r.tag, r.temperature, r.structured) for r in tagged_workload().requests}
    members: dict[tuple[str, str], list[str]] = {("tag", t): [f"{t}-{i}" for i in range(k.n)]
                                                 for t, k in KINDS.items()}
    members |= {("output_format", "JSON"): [i for i in truth if i.startswith("code")],
                ("output_format", "free text"): [i for i in truth if not i.startswith("code")],
                ("temperature", "greedy (T=0)"): [i for i in truth if not i.startswith("chat")],
                ("temperature", "sampled (T>0)"): [i for i in truth if i.startswith("chat")],
                ("prompt_tokens", "< 256"): list(truth), ("output_tokens", "< 128"): list(truth)}
    got: dict[tuple[str, str], Segment] = {(s.dimension, s.label): s for s in result.segments}
    assert set(got) == set(members)
    for key, ids in members.items():
        s, true = got[key], [truth[i] for i in ids]
        assert s.requests == s.measured == len(ids), key
        assert s.speedup == pytest.approx(statistics.median(true), rel=0.05), key
        assert s.speedup_min == pytest.approx(min(true), rel=0.05), key
        assert s.speedup_max == pytest.approx(max(true), rel=0.05), key
    # acceptance per tag: chunks of n tokens accept n-1 of the k=4 drafted
    for tag, kind in KINDS.items():
        assert got[("tag", tag)].acceptance_rate == pytest.approx((kind.chunk - 1) / K, abs=1e-12)
        assert got[("tag", tag)].tokens_per_step == pytest.approx(kind.chunk, abs=1e-12)
    assert [got[("tag", t)].verdict for t in KINDS] == ["enable", "don't", "n/a"]
    assert got[("tag", "misc")].reason.startswith("too few: 2 request(s)")
    assert result.routing == (
        'Send tag "code", JSON output and greedy (T=0) requests to the speculative server; keep tag "chat", '
        'free-text output and sampled (T>0) requests on the baseline. Too few requests to tell: tag "misc".')
    check_outputs(result, tmp_path)


def check_outputs(result: SweepResult, tmp_path: Path) -> None:
    """results.json, report.html and the Evaluate tab show the segments and the sentence the core built."""
    paths = write_outputs(result, tmp_path / "out")
    data = json.loads(paths["json"].read_text())
    assert data["routing"] == result.routing
    row = next(s for s in data["segments"] if s["dimension"] == "tag" and s["label"] == "code")
    assert set(row) >= {"dimension", "label", "requests", "speedup", "speedup_min", "speedup_max",
                        "acceptance_rate", "tokens_per_step", "verdict", "reason"}
    html = paths["html"].read_text()
    assert "<h2>By segment</h2>" in html and "prompt tokens: &lt; 256, 256-1023, ≥ 1024" in html
    assert "tag &quot;code&quot;" in html  # the sentence, escaped
    assert f'<span class="routing">By segment: {esc(result.routing)}</span>' in summary_paragraph(result)
    page = evaluate_tab.workload_html(result)
    assert 'class="segments"' in page and 'data-dimension="tag" data-label="code" data-verdict="enable"' in page
    assert page.count("<tr data-dimension=") == len(result.segments)


def test_the_evaluate_tab_shows_an_uploaded_files_segments(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The tab's own Run handler on an uploaded file: its result shows the table and the sentence."""
    import gradio as gr

    monkeypatch.delenv("SPECDEMO_ARMS", raising=False)
    path = tmp_path / "mine.jsonl"
    path.write_text("".join(json.dumps({"id": f"r{i}", "prompt": f"{'COPY' if i < 3 else 'FREE'} request {i}",
                                        "max_tokens": 21, "temperature": 0 if i < 3 else 0.7}) + "\n"
                            for i in range(6)), encoding="utf-8")
    by_marker = {"COPY": {"chunk_sizes": [5], "tokens_per_s": 900.0}, "FREE": {"tokens_per_s": 150.0}}
    with Standin(StandinBehavior(tokens_per_s=300, ttft_s=0.01)) as base, \
            Standin(StandinBehavior(tokens_per_s=300, ttft_s=0.01, speculative=True, by_marker=by_marker)) as spec:
        settings = Settings(baseline_url=base.url, speculative_url=spec.url, save_runs=False)
        with gr.Blocks():
            tab = evaluate_tab.build(settings)
        out = asyncio.run(tab.on_run([], "1", "", 1, 0, 0, str(path), 0, 0, None, None, None, False,
                                     progress=cast(gr.Progress, lambda *_a, **_k: None)))
    status, summary, workloads = out[0], out[2], out[4]
    assert 'data-state="done"' in status, status
    sentence = ("Send greedy (T=0) requests to the speculative server; keep sampled (T&gt;0) requests on the "
                "baseline.")
    assert f'id="routing"><b>{sentence}</b>' in workloads and sentence in summary
    assert 'data-dimension="temperature" data-label="greedy (T=0)" data-verdict="enable"' in workloads
    assert 'data-dimension="temperature" data-label="sampled (T&gt;0)" data-verdict="don&#x27;t"' in workloads


def test_a_tag_is_escaped_in_the_report_and_on_the_page() -> None:
    outs = [outcome(f"r{i}", 2.0, tag="<script>alert(1)</script>") for i in range(3)]
    result = SweepResult.model_validate({"spec": {"baseline_url": "", "speculative_url": "", "presets": ["x"]}})
    result.segments = segments_of(outs, 1)
    result.routing = routing_sentence(result.segments)
    html = segments_html(result)
    assert "<script>" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html


# --------------------------------------------------------------------------- older files


def test_an_older_results_json_loads_without_segments() -> None:
    old = SweepResult.model_validate(json.loads((FIXTURES / "legacy-results.json").read_text()))
    assert old.segments == [] and old.routing is None
    assert segments_html(old) == ""


def test_a_results_json_from_before_segments_loads() -> None:
    """A version-2 file with request outcomes but no segment fields (as written before them)."""
    raw = {"spec": {"baseline_url": "", "speculative_url": "", "presets": ["x"]},
           "cells": [{"settings": {"preset": "w", "kind": "workload", "temperature": None, "concurrency": 1,
                                   "max_tokens": 8, "api": "chat", "repeats": 1, "warmup": 0,
                                   "order": "sequential", "baseline_url": "", "speculative_url": ""},
                      "baseline": {"side": "baseline"}, "speculative": {"side": "speculative"},
                      "requests": [{"id": f"r{i}", "prompt_sha256": "0" * 64, "speedup": 2.0, "prompt_tokens": 9,
                                    "output_tokens": 8} for i in range(3)]}]}
    old = SweepResult.model_validate(raw)
    assert old.segments == [] and old.routing is None
    assert old.cells[0].requests[0].tag is None and old.cells[0].requests[0].temperature is None
    # its outcomes still segment by what they have (token counts), and by nothing they lack
    finalize(old)
    assert {s.dimension for s in old.segments} == {"prompt_tokens", "output_tokens"}
