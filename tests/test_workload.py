"""The workload loader: formats, skipped lines by number, whole-file errors, strict mode, sampling."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from demo.client import request_body
from demo.settings import Settings
from demo.workload import (
    DEFAULT_MAX_TOKENS,
    DEFAULT_TEMPERATURE,
    LoadIssue,
    Workload,
    WorkloadError,
    load_workload,
    request_slices,
    sample,
)

MB = 20_000_000
CAP = 200_000


def load(path: Path, **kw: Any) -> Workload:
    return load_workload(path, max_bytes=kw.pop("max_bytes", MB), max_prompt_chars=kw.pop("max_prompt_chars", CAP),
                         **kw)


def write_jsonl(path: Path, rows: list[object]) -> Path:
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    return path


def test_jsonl_chat_and_completions_with_defaults_and_own_settings(tmp_path: Path) -> None:
    f = write_jsonl(tmp_path / "w.jsonl", [
        {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]},
        {"prompt": "SELECT", "id": "sql-1", "max_tokens": 40, "temperature": 0.7},
        {"prompt": "x", "id": 7},
    ])
    w = load(f)
    assert (w.name, w.format, w.issues) == ("w", "jsonl", [])
    a, b, c = w.requests
    assert (a.id, a.api, a.max_tokens, a.temperature, a.line) == ("1", "chat", DEFAULT_MAX_TOKENS,
                                                                  DEFAULT_TEMPERATURE, 1)
    assert a.prompt_text == "Be brief.\n\nHi"
    assert (b.id, b.api, b.prompt, b.max_tokens, b.temperature) == ("sql-1", "completions", "SELECT", 40, 0.7)
    assert c.id == "7"
    # The request the evaluator sends carries the request's own max_tokens and temperature.
    body = request_body(b.to_race_request(), "m")
    assert (body["prompt"], body["max_tokens"], body["temperature"]) == ("SELECT", 40, 0.7)
    assert request_body(a.to_race_request(), "m")["messages"][0] == {"role": "system", "content": "Be brief."}


def test_malformed_lines_are_skipped_by_line_number_and_the_rest_load(tmp_path: Path) -> None:
    f = write_jsonl(tmp_path / "w.jsonl", [
        {"prompt": "ok one"},
        '{"prompt": "broken",',  # line 2: bad JSON
        "",  # blank: ignored, not an issue
        '["a list"]',  # line 4
        {"prompt": "p", "max_token": 10},  # line 5: a typo'd field
        {"prompt": "p", "messages": [{"role": "user", "content": "m"}]},  # line 6: both
        {"id": "nothing"},  # line 7: neither
        {"prompt": "p", "temperature": 3},  # line 8: out of range
        {"prompt": "p", "max_tokens": True},  # line 9: a bool is not a count
        {"messages": [{"role": "robot", "content": "m"}]},  # line 10
        {"prompt": "   "},  # line 11: empty
        {"prompt": "ok two", "id": "1"},  # line 12: line 1's default id again: read, made unique
        {"prompt": "ok three"},
    ])
    w = load(f)
    assert [r.id for r in w.requests] == ["1", "1#2", "13"]
    assert [r.line for r in w.requests] == [1, 12, 13] and w.repeated_ids == 1
    by_line = {i.line or 0: i.message for i in w.issues}
    assert sorted(by_line) == [2, 4, 5, 6, 7, 8, 9, 10, 11]
    assert all(i.file == "w.jsonl" for i in w.issues)
    assert by_line[2].startswith("not valid JSON (")
    assert "got list" in by_line[4]
    assert "unknown field 'max_token'" in by_line[5]
    assert "exactly one of" in by_line[6] and "exactly one of" in by_line[7]
    assert by_line[8].startswith("temperature:")
    assert by_line[9].startswith("max_tokens:")
    assert by_line[10].startswith("messages.0.role:")
    assert by_line[11] == "the prompt is empty"
    assert str(w.issues[0]) == f"w.jsonl:2: {by_line[2]}"


def test_issue_messages_never_quote_the_prompt(tmp_path: Path) -> None:
    secret = "SECRET-MARKER-42"
    f = write_jsonl(tmp_path / "w.jsonl", [
        {"prompt": secret, "temperature": secret},
        {"messages": [{"role": secret, "content": secret}]},
        {"prompt": secret, "bogus": secret},
        '{"prompt": "' + secret,
        {"prompt": "fine"},
    ])
    w = load(f)
    assert len(w.issues) == 4
    assert all(secret not in str(i) for i in w.issues)


def test_line_numbers_count_newlines_only(tmp_path: Path) -> None:
    # A raw U+2028 / NEL inside a JSON string is legal JSON and no line break; CRLF endings are fine too.
    f = tmp_path / "w.jsonl"
    f.write_text('{"prompt": "a\u2028b\x85c"}\r\n{bad\r\n{"prompt": "z"}\r\n', encoding="utf-8")
    w = load(f)
    assert [(r.id, r.prompt_text) for r in w.requests] == [("1", "a\u2028b\x85c"), ("3", "z")]
    assert [i.line for i in w.issues] == [2]


def test_strict_makes_any_issue_fatal_and_lists_them(tmp_path: Path) -> None:
    f = write_jsonl(tmp_path / "w.jsonl", [{"prompt": "ok"}, "{nope", {"prompt": "ok", "max_token": 3}])
    assert len(load(f).requests) == 1
    with pytest.raises(WorkloadError) as e:
        load(f, strict=True)
    msg = str(e.value)
    assert "\n" not in msg
    assert msg.startswith("w.jsonl: 2 bad line(s), nothing was sent (strict): w.jsonl:2: not valid JSON")
    assert "w.jsonl:3: unknown field 'max_token'" in msg
    assert [i.line for i in e.value.issues] == [2, 3]


def test_many_issues_are_counted_not_all_listed(tmp_path: Path) -> None:
    f = write_jsonl(tmp_path / "w.jsonl", ["{bad"] * 8)
    with pytest.raises(WorkloadError) as e:
        load(f)
    assert str(e.value).startswith("w.jsonl has no usable request: w.jsonl:1: not valid JSON")
    assert str(e.value).endswith("; and 3 more")
    assert len(e.value.issues) == 8


@pytest.mark.parametrize("content, expected", [
    (b"", "w.jsonl is empty: write one request per line"),
    (b"\n  \n", "w.jsonl is empty: write one request per line"),
    (b'{"prompt": "ok"}\n{"prompt": "caf\xe9"}\n',
     "w.jsonl: line 2 (byte offset 32) is not UTF-8 text; save the file as UTF-8"),
    (b"\xff\xfe{\x00", "w.jsonl: line 1 (byte offset 0) is not UTF-8 text"),  # UTF-16
])
def test_whole_file_errors_are_one_line(tmp_path: Path, content: bytes, expected: str) -> None:
    f = tmp_path / "w.jsonl"
    f.write_bytes(content)
    with pytest.raises(WorkloadError) as e:
        load(f)
    assert str(e.value).startswith(expected)
    assert "\n" not in str(e.value)


def test_utf8_bom_is_accepted(tmp_path: Path) -> None:
    f = tmp_path / "w.csv"
    f.write_bytes("\ufeffprompt\nhello\n".encode())
    assert load(f).requests[0].prompt_text == "hello"


def test_size_limit_checked_before_reading(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    f = tmp_path / "big.jsonl"
    f.write_bytes(b"x" * 1018)

    def no_read(*_: object) -> bytes:
        raise AssertionError("an oversize file must not be read")

    monkeypatch.setattr(Path, "read_bytes", no_read)
    with pytest.raises(WorkloadError) as e:
        load(f, max_bytes=500)
    assert str(e.value) == ("big.jsonl is 1,018 bytes, over the 500 bytes limit; sample it down or raise "
                            "SPECDEMO_WORKLOAD_MAX_BYTES")


def test_size_limit_setting_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    assert Settings().workload_max_bytes == 20_000_000
    monkeypatch.setenv("SPECDEMO_WORKLOAD_MAX_BYTES", "1234")
    assert Settings().workload_max_bytes == 1234


def test_prompt_over_the_cap_is_that_lines_issue(tmp_path: Path) -> None:
    f = write_jsonl(tmp_path / "w.jsonl", [
        {"prompt": "a" * 101},
        {"messages": [{"role": "system", "content": "s" * 60}, {"role": "user", "content": "u" * 60}]},
        {"prompt": "a" * 100},
    ])
    w = load(f, max_prompt_chars=100)
    assert [r.line for r in w.requests] == [3]
    assert [(i.line, i.message) for i in w.issues] == [
        (1, "the prompt is 101 characters, over the limit of 100 (SPECDEMO_MAX_PROMPT_CHARS): shorten it"),
        (2, "the prompt is 122 characters, over the limit of 100 (SPECDEMO_MAX_PROMPT_CHARS): shorten it"),
    ]


def test_csv_with_optional_columns_and_bad_rows(tmp_path: Path) -> None:
    f = tmp_path / "w.csv"
    f.write_text(
        "id,prompt,max_tokens,temperature\n"
        'a,"Two\nlines",50,0.5\n'  # a quoted prompt spans lines 2-3
        "b,plain,,\n"  # line 4: defaults
        "c,bad,many,0\n"  # line 5
        "d,short\n"  # line 6: too few fields
        ",,,\n"  # blank row: ignored
        ",no id,10,0\n",  # line 8: id defaults to the line number
        encoding="utf-8")
    w = load(f)
    assert [(r.id, r.api, r.prompt_text, r.max_tokens, r.temperature) for r in w.requests] == [
        ("a", "chat", "Two\nlines", 50, 0.5),
        ("b", "chat", "plain", DEFAULT_MAX_TOKENS, DEFAULT_TEMPERATURE),
        ("8", "chat", "no id", 10, 0.0),
    ]
    assert w.requests[0].line == 2
    assert [(i.line, i.message) for i in w.issues] == [
        (5, "max_tokens is not a whole number"),
        (6, "2 fields, but the header has 4"),
    ]
    completions = load(f, text_api="completions").requests[0]
    assert (completions.api, completions.prompt) == ("completions", "Two\nlines")


@pytest.mark.parametrize("header, found", [
    ("text,id", "'text', 'id'"),
    ("prompt,colour", "'prompt', 'colour'"),
    ("prompt,tag,category", "'prompt', 'tag', 'category'"),
    ("prompt,prompt", "'prompt', 'prompt'"),
])
def test_csv_wrong_header_names_needed_and_found(tmp_path: Path, header: str, found: str) -> None:
    f = tmp_path / "w.csv"
    f.write_text(f"{header}\nx,y\n", encoding="utf-8")
    with pytest.raises(WorkloadError) as e:
        load(f)
    assert str(e.value) == ("w.csv: wrong CSV header: needed column: prompt; optional: id, tag or category, "
                            "max_tokens, temperature, seed, top_p, top_k, min_p, presence_penalty, frequency_penalty, "
                            f"repetition_penalty, output_tokens_count, prompt_tokens_count, stop; found: {found}")


def test_csv_header_only(tmp_path: Path) -> None:
    f = tmp_path / "w.csv"
    f.write_text("prompt,id\n\n", encoding="utf-8")
    with pytest.raises(WorkloadError, match=r"^w\.csv has no usable request: the header has no rows under it$"):
        load(f)


def test_csv_prompt_longer_than_the_csv_modules_default_field_cap(tmp_path: Path) -> None:
    f = tmp_path / "w.csv"
    f.write_text("prompt\n" + "y" * 150_000 + "\n", encoding="utf-8")
    assert len(load(f).requests[0].prompt_text) == 150_000


def test_folder_of_text_files(tmp_path: Path) -> None:
    d = tmp_path / "prompts"
    d.mkdir()
    (d / "b.md").write_text("# Edit this\ncode", encoding="utf-8")
    (d / "a.txt").write_text("Summarize", encoding="utf-8")
    (d / "empty.txt").write_text("  \n", encoding="utf-8")
    (d / "latin1.txt").write_bytes(b"caf\xe9")
    (d / "notes.json").write_text("{}", encoding="utf-8")
    w = load(d)
    assert (w.name, w.format) == ("prompts", "folder")
    assert [(r.id, r.prompt_text, r.line) for r in w.requests] == [("a.txt", "Summarize", None),
                                                                   ("b.md", "# Edit this\ncode", None)]
    assert [str(i) for i in w.issues] == [
        "empty.txt: the file is empty",
        "latin1.txt: line 1 (byte offset 3) is not UTF-8 text; save the file as UTF-8 and load it again",
        'notes.json: give exactly one of "messages" (chat) or "prompt" (completions)',
    ]


def test_folder_without_text_files_and_folder_over_the_limit(tmp_path: Path) -> None:
    d = tmp_path / "prompts"
    d.mkdir()
    (d / "x.csv").write_text("prompt\nhi\n", encoding="utf-8")
    with pytest.raises(WorkloadError, match=r"^folder prompts has no \.txt, \.md or \.json files \(1 other files\)"):
        load(d)
    (d / "a.txt").write_text("a" * 600, encoding="utf-8")
    (d / "b.txt").write_text("b" * 600, encoding="utf-8")
    over = r"^folder prompts \(its \.txt/\.md/\.json files\) is 1,200 bytes, over the 1,000"
    with pytest.raises(WorkloadError, match=over):
        load(d, max_bytes=1000)


def test_unknown_format_and_missing_path(tmp_path: Path) -> None:
    (tmp_path / "w.yaml").write_text("a: 1", encoding="utf-8")
    with pytest.raises(WorkloadError, match=r"^w\.yaml: the form of this file is not recognised\. Accepted forms: "):
        load(tmp_path / "w.yaml")
    with pytest.raises(WorkloadError, match="no such file or folder"):
        load(tmp_path / "missing.jsonl")


def test_sample_is_reproducible_on_10000_lines(tmp_path: Path) -> None:
    f = write_jsonl(tmp_path / "big.jsonl", [{"prompt": f"request {i}", "max_tokens": 1 + i % 300}
                                             for i in range(10_000)])
    w = load(f)
    assert len(w.requests) == 10_000
    a, b = sample(w, 50, seed=7), sample(load(f), 50, seed=7)
    ids = [r.id for r in a.requests]
    assert ids == [r.id for r in b.requests]  # same n + seed: same ids, same order
    assert len(ids) == len(set(ids)) == 50
    assert a.sample is not None and (a.sample.n, a.sample.seed, a.sample.of_requests) == (50, 7, 10_000)
    assert ids != [r.id for r in sample(w, 50, seed=8).requests]
    assert ids != sorted(ids, key=int)  # a draw, not the file's first lines
    # A larger sample with the same seed extends the smaller one.
    assert [r.id for r in sample(w, 80, seed=7).requests][:50] == ids
    assert len(w.requests) == 10_000  # the source workload is left as it was
    all_of_them = sample(w, 20_000, seed=7)
    assert len(all_of_them.requests) == 10_000
    with pytest.raises(WorkloadError, match="at least 1"):
        sample(w, 0, seed=7)


def test_load_issue_str_without_line() -> None:
    assert str(LoadIssue(file="a.txt", message="m")) == "a.txt: m"


EXAMPLE = Path(__file__).resolve().parent.parent / "workloads" / "example.jsonl"


def test_example_workload_loads_clean_with_the_promised_mix() -> None:
    s = Settings()
    w = load_workload(EXAMPLE, max_bytes=s.workload_max_bytes, max_prompt_chars=CAP, strict=True)
    assert 30 <= len(w.requests) <= 50
    kinds: dict[str, list[str]] = {}
    for r in w.requests:
        kinds.setdefault(r.id.split("-")[0], []).append(r.id)
    assert set(kinds) == {"extract", "edit", "sql", "chat", "creative"}
    assert all(len(ids) >= 5 for ids in kinds.values())
    by_kind = {k: [r for r in w.requests if r.id.startswith(k + "-")] for k in kinds}
    assert all(r.temperature > 0 for r in by_kind["creative"])  # sampled
    assert all(r.temperature == 0 for k in ("extract", "edit", "sql") for r in by_kind[k])
    assert sum(r.max_tokens <= 200 for r in w.requests) >= 0.9 * len(w.requests)
    assert len({r.max_tokens for r in w.requests}) > 5  # each request its own budget
    assert {r.api for r in w.requests} == {"chat", "completions"}
    assert any(m.role == "assistant" for r in w.requests for m in r.messages or [])  # a multi-turn chat
    # The PEP passages are verbatim from the shipped document.
    pep = (EXAMPLE.parent.parent / "presets" / "docs" / "pep-0001-extract.txt").read_text(encoding="utf-8")
    for rid in ("extract-03", "extract-04"):
        messages = next(r for r in w.requests if r.id == rid).messages
        assert messages is not None
        user = messages[-1].text
        passage = user.split("\n\n", 1)[1]
        assert len(passage) > 250 and passage in pep
    assert [r.id for r in sample(w, 10, seed=1).requests] == [r.id for r in sample(w, 10, seed=1).requests]


def test_request_slices_take_the_next_requests_and_wrap(tmp_path: Path) -> None:
    w = load(write_jsonl(tmp_path / "w.jsonl", [{"prompt": f"p{i}"} for i in range(5)]))
    ids = [[r.id for r in batch] for batch in request_slices(w.requests, 2)]
    assert ids == [["1", "2"], ["3", "4"], ["5", "1"]]  # every request once; the last batch refills
    assert [[r.id for r in b] for b in request_slices(w.requests, 3, batches=3)] == [
        ["1", "2", "3"], ["4", "5", "1"], ["2", "3", "4"]]
    assert [[r.id for r in b] for b in request_slices(w.requests, 1)] == [["1"], ["2"], ["3"], ["4"], ["5"]]
    with pytest.raises(ValueError):
        request_slices(w.requests, 0)
