"""The workload forms a customer already has, recognised by content: OpenAI Batch lines, OpenAI request
bodies, ShareGPT (array and JSONL); the sampling each line carries; what is ignored (counted) or
refused (the line skipped, with the reason); and bad files, each one line."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from common.paths import ROOT
from demo.client import request_body
from demo.workload import (
    ANSWER_MAX_TOKENS_CAP,
    DEFAULT_MAX_TOKENS,
    DEFAULT_REASON,
    UNUSED_REASON,
    Workload,
    WorkloadError,
    answer_max_tokens,
    load_workload,
    sample,
)

MB = 20_000_000
CAP = 200_000
SCHEMA = {"type": "object", "properties": {"sql": {"type": "string"}}, "required": ["sql"]}
JSON_SCHEMA = {"type": "json_schema", "json_schema": {"name": "answer", "schema": SCHEMA}}


def load(path: Path, **kw: Any) -> Workload:
    return load_workload(path, max_bytes=kw.pop("max_bytes", MB), max_prompt_chars=kw.pop("max_prompt_chars", CAP),
                         **kw)


def write_lines(path: Path, rows: Sequence[object]) -> Path:
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    return path


def chat_body(text: str, **extra: Any) -> dict[str, Any]:
    return {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": text}], **extra}


def batch(cid: str, body: dict[str, Any], url: object = "/v1/chat/completions", **extra: Any) -> dict[str, Any]:
    return {"custom_id": cid, "method": "POST", "url": url, "body": body, **extra}


def messages_of(w: Workload) -> dict[int, str]:
    return {i.line or 0: i.message for i in w.issues}


def test_openai_batch_chat_and_completions_keep_ids_sampling_and_tags(tmp_path: Path) -> None:
    f = write_lines(tmp_path / "batch.jsonl", [
        batch("req-a", chat_body("Hello", max_tokens=40, temperature=0.7, top_p=0.9, stop=["\n\n"], seed=11,
                                 stream=True, metadata={"tag": "chat"})),
        batch("req-b", {"model": "m", "prompt": "SELECT", "max_completion_tokens": 30, "top_k": 20,
                        "response_format": {"type": "json_object"}, "user": "u-1"}, url="/v1/completions"),
        batch("req-c", chat_body("Give me JSON", response_format=JSON_SCHEMA, presence_penalty=0.5,
                                 frequency_penalty=-0.5, repetition_penalty=1.1, min_p=0.05)),
    ])
    w = load(f)
    assert (w.format, w.issues) == ("openai-batch", [])
    a, b, c = w.requests
    assert [r.id for r in w.requests] == ["req-a", "req-b", "req-c"]
    assert (a.api, a.max_tokens, a.temperature, a.top_p, a.stop, a.seed, a.tag) == (
        "chat", 40, 0.7, 0.9, ["\n\n"], 11, "chat")
    assert (b.api, b.prompt, b.max_tokens, b.top_k, b.tag) == ("completions", "SELECT", 30, 20, None)
    assert b.response_format is not None and b.response_format.type == "json_object"
    assert c.response_format is not None and c.response_format.json_schema is not None
    assert (c.presence_penalty, c.frequency_penalty, c.repetition_penalty, c.min_p) == (0.5, -0.5, 1.1, 0.05)
    # metadata gave line 1 its tag, so it is counted as ignored on line 2 only (no metadata there)
    assert w.ignored_fields == {"model": 3, "stream": 1, "user": 1}
    assert w.summary_lines() == [
        "3 requests read (OpenAI batch), 0 skipped",
        "model: ignored on 3 lines: the servers' own model is used",
        "stream: ignored on 1 line: the evaluator always streams",
        "user: ignored on 1 line: an end-user id for billing; not sent",
    ]
    # What the sweep sends carries every field as the file says it.
    body = request_body(c.to_race_request(seed=99), "served-model")
    assert body["model"] == "served-model" and body["response_format"] == JSON_SCHEMA
    assert body["seed"] == 99  # no seed on the line: the sweep's
    sent = request_body(a.to_race_request(seed=99), "served-model")
    assert (sent["top_p"], sent["stop"], sent["seed"], sent["temperature"]) == (0.9, ["\n\n"], 11, 0.7)


def test_openai_batch_lines_that_cannot_be_measured_are_skipped_with_the_reason(tmp_path: Path) -> None:
    f = write_lines(tmp_path / "batch.jsonl", [
        batch("ok", chat_body("fine")),
        batch("emb", {"model": "e", "input": "text"}, url="/v1/embeddings"),  # 2
        batch("get", chat_body("x"), method="GET"),  # 3: method given twice -> GET wins below
        {"custom_id": "part", "method": "POST", "url": "/v1/chat/completions"},  # 4: no body
        batch("odd", chat_body("x"), url="/v2/secret-path"),  # 5: not quoted
        batch("nobody", {"model": "m", "prompt": "p"}),  # 6: chat url, completions body
        batch("n3", chat_body("x", n=3)),  # 7
        batch("ok", chat_body("again")),  # 8: a repeated custom_id: read, made unique
        {"custom_id": "x", "method": "POST", "url": "/v1/chat/completions", "body": chat_body("x"), "extra": 1},
        batch("list-url", chat_body("x"), url=["/v1/chat/completions"]),  # 10
    ])
    w = load(f)
    assert [r.id for r in w.requests] == ["ok", "ok#2"] and w.repeated_ids == 1
    by_line = messages_of(w)
    assert by_line[2] == ("url /v1/embeddings: generates no text to measure; only /v1/chat/completions and "
                          "/v1/completions lines are read")
    assert by_line[3] == "method: only POST lines are requests"
    assert by_line[4] == "an OpenAI Batch line needs custom_id, method, url and body (missing: body)"
    assert by_line[5].startswith("url: generates no text") and "secret-path" not in by_line[5]
    assert by_line[6] == "the url is /v1/chat/completions, but the body has no messages"
    assert by_line[7] == "n: asks for several answers; the evaluator measures one per request"
    assert 8 not in by_line
    assert by_line[9].startswith("unknown field 'extra'")
    assert by_line[10].startswith("url: generates no text")


def test_openai_bodies_chat_and_completions_one_a_line(tmp_path: Path) -> None:
    f = write_lines(tmp_path / "gateway.log", [
        chat_body("Hi", stream=True, stream_options={"include_usage": True}, max_tokens=20, top_p=0.5, seed=3),
        {"model": "m", "prompt": ["one prompt"], "max_tokens": 10, "stop": "END", "n": 1, "logprobs": None},
        {"model": "m", "messages": [{"role": "developer", "content": "Be brief."},
                                    {"role": "user", "content": [{"type": "text", "text": "Part one. "},
                                                                 {"type": "text", "text": "Part two."}],
                                     "name": "ada"}], "max_completion_tokens": 16, "store": False},
    ])
    w = load(f)
    assert (w.format, w.issues) == ("openai-body", [])
    a, b, c = w.requests
    assert [r.id for r in w.requests] == ["1", "2", "3"]  # a body has no id: the line number
    assert (a.api, a.max_tokens, a.top_p, a.seed) == ("chat", 20, 0.5, 3)
    assert (b.api, b.prompt, b.stop) == ("completions", "one prompt", ["END"])
    assert c.messages is not None and [m.role for m in c.messages] == ["system", "user"]
    assert (c.messages[1].content, c.max_tokens) == ("Part one. Part two.", 16)
    assert w.ignored_fields == {"model": 3, "stream": 1, "stream_options": 1, "n": 1, "logprobs": 1,
                                "messages.name": 1, "store": 1}
    lines = w.summary_lines()
    assert lines[0] == "3 requests read (OpenAI request bodies), 0 skipped"
    assert f"n: ignored on 1 line: {DEFAULT_REASON}" in lines
    assert f"messages.name: ignored on 1 line: {UNUSED_REASON}" in lines


@pytest.mark.parametrize(("extra", "says"), [
    ({"n": 3}, "n: asks for several answers; the evaluator measures one per request"),
    ({"best_of": 2}, "best_of: asks for several answers"),
    ({"logit_bias": {"50256": -100}}, "logit_bias: biases tokens"),
    ({"functions": [{"name": "f"}]}, "functions: OpenAI's old function calling; give tools"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": []}}]},
     "tools.0.function.parameters: Value error, parameters must be a JSON schema object"),
    ({"logprobs": True, "top_logprobs": 5}, "logprobs: asks for log-probabilities"),
    ({"response_format": {"type": "xml"}}, "response_format: its type is not text, json_object or json_schema"),
    ({"response_format": {"type": "json_schema"}}, "response_format: Value error, type json_schema needs"),
    ({"max_tokens": 10, "max_completion_tokens": 20}, "max_tokens and max_completion_tokens differ; give one"),
    ({"temperature": "0.7"}, "temperature: Input should be a valid number"),
    ({"top_p": 0}, "top_p: Input should be greater than 0"),
    ({"stop": ["x"] * 17}, "stop: List should have at most 16 items"),
    ({"max_token": 5}, "unknown field 'max_token' (did you mean 'max_tokens'?)"),
])
def test_a_field_that_would_change_the_answer_skips_its_line(tmp_path: Path, extra: dict[str, Any],
                                                              says: str) -> None:
    f = write_lines(tmp_path / "w.jsonl", [chat_body("fine"), chat_body("refused", **extra)])
    w = load(f)
    assert [r.id for r in w.requests] == ["1"]
    (issue,) = w.issues
    assert issue.line == 2 and issue.message.startswith(says), issue.message
    assert "\n" not in issue.message


def test_our_jsonl_takes_the_sampling_fields_and_a_tag_and_stays_jsonl(tmp_path: Path) -> None:
    f = write_lines(tmp_path / "w.jsonl", [
        {"id": "a", "prompt": "p", "top_p": 0.8, "top_k": 40, "stop": ["###"], "seed": 5, "tag": "code",
         "response_format": JSON_SCHEMA},
        {"id": "b", "messages": [{"role": "user", "content": "m"}], "category": "chat", "min_p": 0.1},
        {"id": "c", "prompt": "p", "tag": "x", "category": "y"},
        {"id": "d", "prompt": "p", "tag": ""},
    ])
    w = load(f)
    assert (w.format, w.ignored_fields) == ("jsonl", {})
    a, b = w.requests
    assert (a.top_p, a.top_k, a.stop, a.seed, a.tag, a.structured) == (0.8, 40, ["###"], 5, "code", True)
    assert (b.tag, b.min_p) == ("chat", 0.1)
    assert messages_of(w) == {3: "give tag or category, not both", 4: "tag must be text of 1 to 64 characters"}


def test_sharegpt_array_prompt_up_to_the_last_human_turn_and_the_answer_length(tmp_path: Path) -> None:
    answer = " ".join(["word"] * 30)  # 30 words -> 40 tokens
    data = [
        {"id": "c1", "conversations": [{"from": "system", "value": "Be kind."}, {"from": "human", "value": "Hi"},
                                       {"from": "gpt", "value": "Hello!"}, {"from": "human", "value": "And?"},
                                       {"from": "gpt", "value": answer}]},
        {"id": "c2", "conversations": [{"role": "user", "content": "Q"}], "max_tokens": 12, "temperature": 0.8,
         "lang": "en", "model": "gpt-3.5"},
        {"id": "c3", "conversations": [{"from": "gpt", "value": "I start alone"}]},
        {"id": "c4", "conversations": []},
        {"id": 5, "system": "Sys", "conversations": [{"from": "user", "value": "Q"},
                                                     {"from": "assistant", "value": ""}], "top_p": 0.7},
        {"id": "c6", "conversations": [{"from": "tool", "value": "x"}]},
    ]
    f = tmp_path / "sharegpt.json"
    f.write_text(json.dumps(data, indent=2), encoding="utf-8")
    w = load(f)
    assert w.format == "sharegpt"
    c1, c2, c5 = w.requests
    assert c1.messages is not None and [(m.role, m.content) for m in c1.messages] == [
        ("system", "Be kind."), ("user", "Hi"), ("assistant", "Hello!"), ("user", "And?")]
    assert (c1.api, c1.max_tokens) == ("chat", 40)  # the recorded answer's 30 words x 4/3
    assert (c2.max_tokens, c2.temperature) == (12, 0.8)  # the line's own max_tokens wins
    assert c5.id == "5" and c5.max_tokens == DEFAULT_MAX_TOKENS and c5.top_p == 0.7  # an empty answer
    assert c5.messages is not None and [m.role for m in c5.messages] == ["system", "user"]
    assert w.ignored_fields == {"lang": 1, "model": 1}
    issues = {i.message for i in w.issues}
    assert issues == {"the conversation has no human turn, so there is no prompt to send",
                      "conversations: give a list of at least one turn",
                      "conversations.0: from must be human, gpt or system (or user, assistant)"}
    # each issue carries the line its conversation starts on in the file
    text_lines = f.read_text().split("\n")
    for issue in w.issues:
        assert issue.line is not None and text_lines[issue.line - 1].strip() == "{"
    assert w.summary_lines()[0] == "3 requests read (ShareGPT), 3 skipped"


def test_sharegpt_jsonl_and_the_answer_rule() -> None:
    assert answer_max_tokens(0) is None
    assert answer_max_tokens(3) == 4 and answer_max_tokens(30) == 40 and answer_max_tokens(31) == 42
    assert answer_max_tokens(10**6) == ANSWER_MAX_TOKENS_CAP


def test_sharegpt_as_jsonl(tmp_path: Path) -> None:
    f = write_lines(tmp_path / "conv.jsonl", [
        {"id": "x", "conversations": [{"from": "human", "value": "Q1"}, {"from": "gpt", "value": "a b c"}]},
        {"id": "y", "conversations": [{"from": "human", "value": "Q2"}], "category": "support"},
    ])
    w = load(f)
    assert (w.format, [r.id for r in w.requests]) == ("sharegpt", ["x", "y"])
    assert (w.requests[0].max_tokens, w.requests[1].tag) == (4, "support")


def test_bench_custom_dataset_is_our_jsonl(tmp_path: Path) -> None:
    f = write_lines(tmp_path / "custom.jsonl", [{"prompt": "What is the capital of India?"},
                                                {"prompt": "What is the capital of Iran?"}])
    w = load(f)
    assert (w.format, [(r.id, r.api) for r in w.requests]) == ("jsonl", [("1", "completions"), ("2", "completions")])


def test_the_form_is_recognised_by_content_not_the_extension(tmp_path: Path) -> None:
    lines = [json.dumps(batch("r1", chat_body("x")))]
    assert load(write_lines(tmp_path / "requests.txt", lines)).format == "openai-batch"
    arr = tmp_path / "data.jsonl"
    arr.write_text(json.dumps([{"conversations": [{"from": "human", "value": "q"}]}]), encoding="utf-8")
    assert load(arr).format == "sharegpt"
    csv_file = tmp_path / "prompts.data"
    csv_file.write_text("prompt,tag,top_p,stop\nhello,chat,0.9,END\n", encoding="utf-8")
    w = load(csv_file)
    assert w.format == "csv" and (w.requests[0].tag, w.requests[0].top_p, w.requests[0].stop) == ("chat", 0.9, ["END"])
    json_lines = write_lines(tmp_path / "bodies.json", [chat_body("x")])
    assert load(json_lines).format == "openai-body"
    # JSON lines whose first line is a list: that line's error, the rest read (as before the forms)
    first_a_list = load(write_lines(tmp_path / "w.jsonl", ['["a list"]', {"prompt": "p"}]))
    assert (first_a_list.format, [i.line for i in first_a_list.issues]) == ("jsonl", [1])
    one_line_array = tmp_path / "compact.json"
    one_line_array.write_text(json.dumps([{"conversations": [{"from": "human", "value": "q"}]}] * 2) + "\n")
    # an array's items without an id are numbered by their place in it, not by their line
    assert [(r.id, r.line) for r in load(one_line_array).requests] == [("1", 1), ("2", 1)]


def test_mixed_forms_in_one_file_are_per_line_errors(tmp_path: Path) -> None:
    f = write_lines(tmp_path / "mixed.jsonl", [
        batch("b1", chat_body("x")),
        {"conversations": [{"from": "human", "value": "q"}]},
        {"prompt": "ours"},
        batch("b2", chat_body("y")),
    ])
    w = load(f)
    assert (w.format, [r.id for r in w.requests]) == ("openai-batch", ["b1", "b2"])
    assert messages_of(w) == {
        2: "a ShareGPT conversation in a file read as OpenAI batch (from its first request); give one form per file",
        3: "a request line in a file read as OpenAI batch (from its first request); give one form per file"}
    with pytest.raises(WorkloadError, match=r"^mixed\.jsonl: 2 bad line\(s\), nothing was sent \(strict\)"):
        load(f, strict=True)


def test_csv_takes_sampling_columns_and_a_category(tmp_path: Path) -> None:
    f = tmp_path / "w.csv"
    f.write_text("prompt,category,seed,top_k,temperature,repetition_penalty\n"
                 "a,code,7,40,0.5,1.1\n"
                 "b,,,,,\n"
                 "c,chat,x,1.5,,\n"
                 "d,chat,,,,9\n", encoding="utf-8")
    w = load(f)
    a, b = w.requests
    assert (a.tag, a.seed, a.top_k, a.temperature, a.repetition_penalty) == ("code", 7, 40, 0.5, 1.1)
    assert (b.tag, b.seed, b.top_k) == (None, None, None)
    assert messages_of(w) == {4: "seed is not a whole number; top_k is not a whole number",
                              5: "repetition_penalty: Input should be less than or equal to 2"}


def test_no_message_quotes_the_files_text(tmp_path: Path) -> None:
    secret = "SECRET-MARKER-42"
    f = write_lines(tmp_path / "w.jsonl", [
        batch(secret, {"model": secret, "messages": [{"role": "user", "content": secret}], "temperature": secret}),
        batch("a", chat_body(secret), url=f"/v1/{secret}"),
        batch("b", chat_body(secret, response_format={"type": secret})),
        batch("c", {"messages": [{"role": secret, "content": secret}]}),
        batch("d", {"messages": [{"role": "user", "content": [{"type": secret, "image": secret}]}]}),
        batch("e", chat_body(secret, **{secret: 1})),
        batch("f", chat_body("fine")),
    ])
    w = load(f)
    assert len(w.issues) == 6
    assert all(secret not in str(i) for i in w.issues), [str(i) for i in w.issues]
    share = tmp_path / "s.json"
    share.write_text(json.dumps([{"conversations": [{"from": secret, "value": secret}]},
                                 {"conversations": [{"from": "human", "value": "ok"}]}]), encoding="utf-8")
    assert all(secret not in str(i) for i in load(share).issues)


def test_a_2gb_file_is_refused_by_its_size_before_reading(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    f = tmp_path / "huge.jsonl"
    with f.open("wb") as out:
        out.truncate(2 * 1024**3)  # sparse: no disk used

    def no_read(*_: object) -> bytes:
        raise AssertionError("an oversize file must not be read")

    monkeypatch.setattr(Path, "read_bytes", no_read)
    with pytest.raises(WorkloadError) as e:
        load(f)
    assert str(e.value) == ("huge.jsonl is 2147.5 MB, over the 20.0 MB limit; sample it down or raise "
                            "SPECDEMO_WORKLOAD_MAX_BYTES")


@pytest.mark.parametrize(("name", "content", "says"), [
    ("random.bin", os.urandom(4096) + b"\xff\xfe", "is not UTF-8 text; save the file as UTF-8"),
    ("zeros.jsonl", b"\x00" * 100, "zeros.jsonl is a binary file (it holds NUL bytes), not text"),
    ("empty.json", b"[]", "empty.json is an empty JSON array: it holds no conversation or request"),
    ("broken.json", b'[{"conversations": []},\n {"id": ', "broken.json: not valid JSON at line 2 column"),
    ("notes.txt", b"just some notes\nand more", "notes.txt: the form of this file is not recognised"),
    ("object.json", b'{\n  "data": []\n}\n', "object.json: the form of this file is not recognised"),
])
def test_bad_files_are_one_line(tmp_path: Path, name: str, content: bytes, says: str) -> None:
    f = tmp_path / name
    f.write_bytes(content)
    with pytest.raises(WorkloadError) as e:
        load(f)
    assert says in str(e.value) and "\n" not in str(e.value)


def test_the_unrecognised_message_lists_every_form_with_an_example(tmp_path: Path) -> None:
    f = tmp_path / "w.yaml"
    f.write_text("a: 1\n", encoding="utf-8")
    with pytest.raises(WorkloadError) as e:
        load(f)
    msg = str(e.value)
    for example in ('{"prompt": "..."}', '"custom_id": "r1"', '"conversations": [{"from": "human"',
                    '{"model": "m", "messages"', "CSV with a header line naming a prompt column", "folder"):
        assert example in msg


def test_a_sample_keeps_the_files_counts(tmp_path: Path) -> None:
    f = write_lines(tmp_path / "b.jsonl", [batch(f"r{i}", chat_body(f"q{i}")) for i in range(10)] + ["{bad"])
    w = sample(load(f), 4, seed=1)
    assert (w.read, len(w.requests), w.ignored_fields) == (10, 4, {"model": 10})
    assert w.summary_lines()[0] == "10 requests read (OpenAI batch), 1 skipped; a sample of 4 drawn with seed 1 from 10"


@pytest.mark.parametrize(("name", "form", "n"), [
    ("openai-batch.jsonl", "openai-batch", 6), ("openai-bodies.jsonl", "openai-body", 4),
    ("sharegpt.json", "sharegpt", 3)])
def test_the_example_files_load_clean(name: str, form: str, n: int) -> None:
    w = load(ROOT / "workloads" / name, strict=True)
    assert (w.format, len(w.requests)) == (form, n)
