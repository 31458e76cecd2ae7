"""Each workload form through a real sweep on stand-in servers: every request measured, ids kept,
ignored fields counted and refused lines with their reasons in results.json; and the stand-ins'
recorded request bodies show both sides received the sampling exactly as the file gave it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from common.paths import ROOT
from demo.workload import DEFAULT_MAX_TOKENS, FORMAT_LABELS
from harness.standin import Standin, StandinBehavior

MARKER = "ZQX-FORMS-5521"  # in every prompt; --redact keeps it out of every output file
SCHEMA = {"type": "json_schema", "json_schema": {"name": "rec", "schema": {
    "type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}}}
# The sampling of the three requests of each form: the checked fields as the file gives them.
SAMPLING: list[dict[str, Any]] = [
    {"top_p": 0.9, "stop": ["END"], "seed": 11, "response_format": {"type": "json_object"}},
    {"top_p": 0.5, "stop": ["\n\n", "###"], "seed": 12, "response_format": SCHEMA, "temperature": 0.7},
    {},  # nothing set: nothing sent, the servers' defaults
]
CHECKED = ("top_p", "stop", "seed", "response_format", "temperature", "max_tokens")
MAX_TOKENS = 8


class Case(NamedTuple):
    rows: list[Any]  # the file's lines (a JSON array when ``array``)
    ids: list[str]  # the requests measured
    ignored: dict[str, int]
    refused: dict[int, str]  # line -> the start of its reason
    array: bool = False
    sampled: bool = True  # the i-th request carries SAMPLING[i] and MAX_TOKENS; else nothing of its own


def text(rid: str) -> str:
    return f"{MARKER} REQ-{rid}: rewrite the record"


def chat(rid: str, i: int, **extra: Any) -> dict[str, Any]:
    return {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": text(rid)}], "max_tokens": MAX_TOKENS,
            **SAMPLING[i], **extra}


def completion(rid: str, i: int, **extra: Any) -> dict[str, Any]:
    return {"model": "m", "prompt": text(rid), "max_tokens": MAX_TOKENS, **SAMPLING[i], **extra}


def batch_chat() -> Case:
    rows: list[Any] = [{"custom_id": f"bc{i}", "method": "POST", "url": "/v1/chat/completions",
                        "body": chat(f"bc{i}", i, stream=True)} for i in range(3)]
    rows.insert(1, {"custom_id": "emb", "method": "POST", "url": "/v1/embeddings", "body": {"input": "x"}})
    rows.append({"custom_id": "n3", "method": "POST", "url": "/v1/chat/completions", "body": chat("n3", 2, n=3)})
    return Case(rows, ["bc0", "bc1", "bc2"], {"model": 3, "stream": 3},
                {2: "url /v1/embeddings: generates no text", 5: "n: asks for several answers"})


def batch_completions() -> Case:
    rows: list[Any] = [{"custom_id": f"bp{i}", "method": "POST", "url": "/v1/completions",
                        "body": completion(f"bp{i}", i, user="u1")} for i in range(3)]
    rows.append({"custom_id": "bias", "method": "POST", "url": "/v1/completions",
                 "body": completion("bias", 2, logit_bias={"1": 5})})
    return Case(rows, ["bp0", "bp1", "bp2"], {"model": 3, "user": 3}, {4: "logit_bias: biases tokens"})


def bodies() -> Case:
    rows: list[Any] = [chat("1", 0, stream=True), completion("2", 1), chat("3", 2, stream=False),
                       chat("4", 2, functions=[{"name": "f"}]),
                       chat("5", 2, response_format={"type": "xml"})]
    return Case(rows, ["1", "2", "3"], {"model": 3, "stream": 2},
                {4: "functions: OpenAI's old function calling", 5: "response_format: its type is not"})


def sharegpt_item(rid: str, i: int) -> dict[str, Any]:
    answer = " ".join(["word"] * 6)  # 6 words -> max_tokens 8 (x 4/3)
    return {"id": rid, "conversations": [{"from": "human", "value": text(rid)}, {"from": "gpt", "value": answer}],
            "lang": "en", **SAMPLING[i]}


def sharegpt(array: bool) -> Callable[[], Case]:
    def build() -> Case:
        rows: list[Any] = [sharegpt_item(f"sg{i}", i) for i in range(3)]
        rows.append({"id": "lonely", "conversations": [{"from": "gpt", "value": "no question"}]})
        line = 5 if array else 4  # an array's first line is its "["
        return Case(rows, ["sg0", "sg1", "sg2"], {"lang": 3}, {line: "the conversation has no human turn"}, array)
    return build


def bench_custom() -> Case:
    return Case([{"prompt": text(f"{i}")} for i in (1, 2, 3)], ["1", "2", "3"], {}, {}, sampled=False)


def ours() -> Case:
    rows: list[Any] = [{"id": f"o{i}", "prompt" if i % 2 else "messages": text(f"o{i}") if i % 2 else
                        [{"role": "user", "content": text(f"o{i}")}], "max_tokens": MAX_TOKENS, "tag": "t",
                        **SAMPLING[i]} for i in range(3)]
    rows.append({"id": "typo", "prompt": text("typo"), "max_token": 3})
    return Case(rows, ["o0", "o1", "o2"], {}, {4: "unknown field 'max_token'"})


FORMS: dict[str, tuple[str, str, Callable[[], Case]]] = {
    "openai-batch chat": ("batch.jsonl", "openai-batch", batch_chat),
    "openai-batch completions": ("batch.jsonl", "openai-batch", batch_completions),
    "openai bodies": ("gateway.log", "openai-body", bodies),
    "sharegpt array": ("conversations.json", "sharegpt", sharegpt(True)),
    "sharegpt jsonl": ("conversations.jsonl", "sharegpt", sharegpt(False)),
    "bench custom": ("custom.jsonl", "jsonl", bench_custom),
    "our jsonl": ("mine.jsonl", "jsonl", ours),
}


def write(path: Path, case: Case) -> Path:
    if case.array:
        # one conversation a line after "[": the n-th starts on line n + 1
        path.write_text("[\n" + ",\n".join(json.dumps(r) for r in case.rows) + "\n]\n", encoding="utf-8")
    else:
        path.write_text("".join(json.dumps(r) + "\n" for r in case.rows), encoding="utf-8")
    return path


def sent(server: Standin) -> dict[str, dict[str, Any]]:
    """Each generation request's body, by the REQ-id in its prompt."""
    out: dict[str, dict[str, Any]] = {}
    for r in server.requests:
        prompt = json.dumps(r.body.get("messages") or r.body.get("prompt"))
        rid = prompt.split("REQ-", 1)[1].split(":", 1)[0]
        assert rid not in out, f"{rid} sent twice"
        out[rid] = r.body
    return out


def expected_sampling(case: Case, rid: str) -> dict[str, Any]:
    if not case.sampled:
        return {**dict.fromkeys(CHECKED), "max_tokens": DEFAULT_MAX_TOKENS, "temperature": 0.0}
    i = case.ids.index(rid)
    want = {k: SAMPLING[i].get(k) for k in CHECKED}
    want["max_tokens"] = MAX_TOKENS
    want["temperature"] = SAMPLING[i].get("temperature", 0.0)
    return want


@pytest.mark.parametrize("form", list(FORMS))
def test_each_form_runs_a_sweep_with_its_sampling_sent_alike(tmp_path: Path, form: str) -> None:
    filename, fmt, build = FORMS[form]
    case = build()
    f = write(tmp_path / filename, case)
    out = tmp_path / "out"
    behavior = StandinBehavior(tokens_per_s=2000, ttft_s=0.0)
    with Standin.pair(behavior) as (base, spec):
        done = subprocess.run(
            [sys.executable, "-m", "demo", "sweep", "--baseline-url", base.url, "--speculative-url", spec.url,
             "--out", str(out), "--no-progress", "--warmup", "0", "--workload", str(f), "--concurrency", "1",
             "--repeats", "1", "--redact"],
            cwd=ROOT, capture_output=True, text=True, timeout=240, env={**os.environ, "SPECDEMO_SAVE_RUNS": "false"})
        assert done.returncode == 0, done.stderr
        bodies_sent = {"baseline": sent(base), "speculative": sent(spec)}
    data = json.loads((out / "results.json").read_text())
    w = data["spec"]["workload"]
    assert (w["format"], w["read"], w["requests"], w["skipped"]) == (fmt, 3, 3, len(case.refused))
    assert w["ignored_fields"] == case.ignored
    reasons = {i["line"]: i["message"] for i in w["issues"]}
    assert set(reasons) == set(case.refused)
    assert all(reasons[n].startswith(why) for n, why in case.refused.items()), reasons
    # every request measured, by the file's id
    (cell,) = data["cells"]
    assert sorted(o["id"] for o in cell["requests"]) == sorted(case.ids)
    assert all(o["speedup"] is not None and o["error"] is None for o in cell["requests"])
    # stand-in truth: both sides received the file's sampling, and only the lines measured were sent
    for side, by_id in bodies_sent.items():
        assert sorted(by_id) == sorted(case.ids), side
        for rid, body in by_id.items():
            assert {k: body.get(k) for k in CHECKED} == expected_sampling(case, rid), (side, rid)
            assert body["model"] != "gpt-4o-mini"  # the servers' own model
    # the summary line, on the terminal
    assert f"3 requests read ({FORMAT_LABELS[fmt]}), {len(case.refused)} skipped" in done.stderr
    for name in ("results.json", "results.csv", "report.html"):
        assert MARKER not in (out / name).read_text(), name
    assert MARKER not in done.stdout + done.stderr



def run_sweep(base: Standin, spec: Standin, f: Path, out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "demo", "sweep", "--baseline-url", base.url, "--speculative-url", spec.url,
         "--out", str(out), "--no-progress", "--warmup", "0", "--workload", str(f), "--concurrency", "1",
         "--repeats", "1", *extra],
        cwd=ROOT, capture_output=True, text=True, timeout=120, env={**os.environ, "SPECDEMO_SAVE_RUNS": "false"})


def sparse_2gb(path: Path) -> None:
    with path.open("wb") as f:
        f.truncate(2 * 1024**3)  # no disk used; refused by its size before any read


def refused_lines(path: Path) -> None:
    good = {"custom_id": "ok", "method": "POST", "url": "/v1/chat/completions", "body": chat("ok", 2)}
    rows = [good,
            {"custom_id": "emb", "method": "POST", "url": "/v1/embeddings", "body": {"input": "x"}},
            {"custom_id": "n3", "method": "POST", "url": "/v1/chat/completions", "body": chat("n3", 2, n=3)},
            {"custom_id": "rf", "method": "POST", "url": "/v1/chat/completions",
             "body": chat("rf", 2, response_format={"type": "grammar"})}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


@pytest.mark.parametrize(("name", "make", "says"), [
    ("huge.jsonl", sparse_2gb, "huge.jsonl is 2147.5 MB, over the 20.0 MB limit"),
    ("blob.bin", lambda p: p.write_bytes(bytes(range(256)) * 8), "blob.bin: line 2 (byte offset 128) is not UTF-8"),
    ("empty.json", lambda p: p.write_text("[]\n"), "empty.json is an empty JSON array"),
    ("notes.txt", lambda p: p.write_text("dear diary\n"), "notes.txt: the form of this file is not recognised"),
    ("refused.jsonl", refused_lines,
     "refused.jsonl: 3 bad line(s), nothing was sent (strict): refused.jsonl:2: url /v1/embeddings: generates no "
     "text to measure; only /v1/chat/completions and /v1/completions lines are read; refused.jsonl:3: n: asks for "
     "several answers; the evaluator measures one per request; refused.jsonl:4: response_format: its type is not "
     "text, json_object or json_schema"),
])
def test_a_bad_file_is_one_line_and_nothing_is_sent(tmp_path: Path, name: str, make: Callable[[Path], object],
                                                   says: str) -> None:
    f = tmp_path / name
    make(f)
    with Standin.pair(StandinBehavior(tokens_per_s=2000, ttft_s=0.0)) as (base, spec):
        done = run_sweep(base, spec, f, tmp_path / "out", "--strict")
        assert not base.requests and not spec.requests
    assert done.returncode == 2
    error = done.stderr.strip().splitlines()[-1]
    assert error.startswith("error: ") and says in error, done.stderr
    assert not (tmp_path / "out").exists()


def test_refused_lines_skip_with_their_reasons_and_the_rest_runs(tmp_path: Path) -> None:
    f = tmp_path / "refused.jsonl"
    refused_lines(f)
    with Standin.pair(StandinBehavior(tokens_per_s=2000, ttft_s=0.0)) as (base, spec):
        done = run_sweep(base, spec, f, tmp_path / "out")
        assert done.returncode == 0, done.stderr
        assert len(base.requests) == len(spec.requests) == 1
    skipped = [line for line in done.stderr.splitlines() if line.startswith("skipped ")]
    assert [s.split(":", 2)[1] for s in skipped] == ["2", "3", "4"]
    assert "refused: 1 request read (OpenAI batch), 3 skipped" in done.stderr
