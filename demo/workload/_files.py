"""A workload file or folder as rows: JSON lines, one JSON array, CSV, a folder of text files; its
size checked, its text decoded, its shape recognised by content."""

from __future__ import annotations

import csv
import io
import itertools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

from demo.race import prompt_size_problem
from demo.results import Api, Message
from demo.workload._forms import (
    Row,
    form_of,
    read_objects,
)
from demo.workload._lines import line_id, make_request, sampling_of
from demo.workload._model import (
    CSV_COLUMNS,
    CSV_NUMBERS,
    RECOGNISE_LINES,
    TEXT_SUFFIXES,
    UNRECOGNISED,
    Format,
    Item,
    LineFields,
    LoadIssue,
    ReadRequest,
    SkipLine,
    WorkloadError,
    check_size,
    decode_text,
    shown_field,
)

FOLDER_SUFFIXES = (*TEXT_SUFFIXES, ".json")  # a folder's files that are read


def _line_rows(text: str) -> Iterator[Row]:
    """One JSON value a line (JSONL); blank lines separate nothing and are not an error."""
    # Split on "\n" only: str.splitlines() would also split inside a JSON string holding a raw U+2028
    # or \x85 (json.dumps(ensure_ascii=False) writes them as is) and shift every line number after it.
    for no, line in enumerate(text.split("\n"), start=1):
        raw = line.removesuffix("\r")
        if not raw.strip():
            continue
        try:
            yield Row(no, no, json.loads(raw))
        except json.JSONDecodeError as e:
            yield Row(no, no, None, f"not valid JSON ({e.msg} at column {e.colno})")


def _array_rows(text: str, name: str) -> Iterator[Row]:
    """The items of one JSON array, each with the line it starts on and its number; broken JSON stops
    the file."""
    decoder, at, line, seen = json.JSONDecoder(), text.index("[") + 1, 1, 0

    def skip_space(i: int) -> int:
        while i < len(text) and text[i] in " \t\r\n":
            i += 1
        return i

    try:
        at = skip_space(at)
        if text[at:at + 1] == "]" and not text[at + 1:].strip():
            raise WorkloadError(f"{name} is an empty JSON array: it holds no conversation or request")
        for nth in itertools.count(1):
            line += text.count("\n", seen, at)
            seen = at
            value, at = decoder.raw_decode(text, at)
            yield Row(line, nth, value)
            at = skip_space(at)
            if text[at:at + 1] == "]" and not text[at + 1:].strip():
                return
            if text[at:at + 1] != ",":
                raise json.JSONDecodeError("expected ',' or the array's end", text, at)
            at = skip_space(at + 1)
    except json.JSONDecodeError as e:
        raise WorkloadError(f"{name}: not valid JSON at line {e.lineno} column {e.colno} ({e.msg}); a .json "
                            "workload is one array of conversations or requests") from None


def _number(value: str | None, kind: type[int] | type[float], column: str) -> tuple[float | int | None, str | None]:
    """A CSV cell as a number; blank means absent."""
    if value is None or not value.strip():
        return None, None
    try:
        return kind(value.strip()), None
    except ValueError:
        return None, f"{column} is not {'a whole number' if kind is int else 'a number'}"


def _csv_columns(header: list[str], name: str) -> list[str]:
    """The header's column names, or a WorkloadError naming what is needed and what was found."""
    columns = [h.strip().lower() for h in header]
    unknown = [c for c in columns if c not in CSV_COLUMNS]
    if "prompt" not in columns or unknown or len(set(columns)) != len(columns) or {"tag", "category"} <= set(columns):
        raise WorkloadError(
            f"{name}: wrong CSV header: needed column: prompt; optional: id, tag or category, "
            f"{', '.join(CSV_COLUMNS[4:])}; found: {', '.join(repr(shown_field(c)) for c in columns) or 'nothing'}")
    return columns


def _csv_row(row: dict[str, str], start: int, max_prompt_chars: int, text_api: Api) -> ReadRequest:
    """One CSV row: its prompt (one user message, or a completions prompt), numbers, stop and tag."""
    prompt = row["prompt"]
    if not prompt.strip():
        raise SkipLine("the prompt is empty")
    if over := prompt_size_problem(len(prompt), max_prompt_chars):
        raise SkipLine(over)
    values: dict[str, Any] = {}
    problems: list[str] = []
    for column, kind in CSV_NUMBERS.items():
        value, problem = _number(row.get(column), kind, column)
        problems += [problem] if problem else []
        if value is not None:
            values[column] = value
    if problems:
        raise SkipLine("; ".join(problems))
    ignored = ("prompt_tokens_count",) if values.pop("prompt_tokens_count", None) is not None else ()
    if (out := values.pop("output_tokens_count", None)) is not None:  # GuideLLM's column: max_tokens
        if values.get("max_tokens", out) != out:
            raise SkipLine("output_tokens_count and max_tokens differ; give one")
        values["max_tokens"] = out
    if row.get("stop"):
        values["stop"] = row["stop"]  # one stop sequence
    tag = (row.get("tag") or row.get("category") or "").strip() or None
    if tag is not None and len(tag) > 64:
        raise SkipLine("tag must be text of 1 to 64 characters")
    text: list[Message] | str = [Message(role="user", content=prompt)] if text_api == "chat" else prompt
    rid = line_id((row.get("id") or "").strip() or None, start)
    return ReadRequest(make_request(rid, start, text, sampling_of(values), tag=tag, max_prompt_chars=max_prompt_chars),
                 ignored)


def _csv(text: str, name: str, max_prompt_chars: int, text_api: Api) -> Iterator[Item]:
    """A CSV file with a header: one request a row (quoted fields may span lines)."""
    # A field may be as long as the file; the csv module's default cap (131,072) would cut long prompts.
    csv.field_size_limit(max(csv.field_size_limit(), len(text) + 1))
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        header = next(reader)
    except StopIteration:
        return
    except csv.Error as e:
        raise WorkloadError(f"{name}: line 1: the header is not valid CSV ({e})") from None
    columns = _csv_columns(header, name)
    prev_end = reader.line_num
    while True:
        start = prev_end + 1
        try:
            cells = next(reader)
        except StopIteration:
            return
        except csv.Error as e:
            yield LoadIssue(file=name, line=start, message=f"not valid CSV ({e}); the rest of the file was not read")
            return
        prev_end = reader.line_num
        if not any(c.strip() for c in cells):
            continue
        try:
            if len(cells) != len(columns):
                raise SkipLine(f"{len(cells)} fields, but the header has {len(columns)}")
            yield _csv_row(dict(zip(columns, cells, strict=True)), start, max_prompt_chars, text_api)
        except SkipLine as e:
            yield LoadIssue(file=name, line=start, message=str(e))


def _json_file(p: Path, text: str, max_prompt_chars: int) -> Iterator[Item]:
    """One .json file of a folder: one object (a request body, a ShareGPT conversation, a log row...),
    its id the file name unless it gives its own."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise SkipLine(f"not valid JSON at line {e.lineno} column {e.colno} ({e.msg})") from None
    if not isinstance(data, dict):
        raise SkipLine('expected one JSON object (a request body such as {"messages": [...]})')
    try:
        _, items = read_objects([Row(1, 1, data)], p.name, max_prompt_chars)
    except WorkloadError as e:  # one file's whole-file problem (a token-count trace) skips that file
        raise SkipLine(str(e).removeprefix(f"{p.name} is ")) from None
    for item in items:
        if isinstance(item, LoadIssue):
            raise SkipLine(item.message)
        own = "id" in data or "custom_id" in data or "request_id" in data or "session_id" in data
        yield item if own else item._replace(request=item.request.model_copy(update={"id": p.name, "line": None}))


def read_folder(folder: Path, max_bytes: int, max_prompt_chars: int, text_api: Api) -> Iterator[Item]:
    """A folder of .txt / .md files, one prompt each, and .json files, one request body (or any one
    object of a JSON form) each; id = the file name."""
    files = sorted(p for p in folder.iterdir() if p.is_file() and p.suffix.lower() in FOLDER_SUFFIXES)
    if not files:
        others = sum(1 for p in folder.iterdir() if p.is_file())
        raise WorkloadError(f"folder {folder.name} has no .txt, .md or .json files ({others} other files); "
                            "put one prompt in each .txt or .md file, or one request body in each .json file")
    check_size(sum(p.stat().st_size for p in files), f"folder {folder.name} (its .txt/.md/.json files)", max_bytes)
    for p in files:
        try:
            try:
                text = decode_text(p.read_bytes(), p.name)
            except WorkloadError as e:  # one file in the wrong encoding skips that file, not the folder
                raise SkipLine(str(e).removeprefix(f"{p.name}: ")) from None
            if not text.strip():
                raise SkipLine("the file is empty")
            if p.suffix.lower() == ".json":
                yield from _json_file(p, text, max_prompt_chars)
                continue
            body: list[Message] | str = [Message(role="user", content=text)] if text_api == "chat" else text
            request = make_request(p.name, None, body, LineFields(), tag=None, max_prompt_chars=max_prompt_chars)
            yield ReadRequest(request, ())
        except SkipLine as e:
            yield LoadIssue(file=p.name, message=str(e))


# --------------------------------------------------------------------------- the recogniser and the loader


def _is_object(line: str) -> bool:
    try:
        return isinstance(json.loads(line), dict)
    except json.JSONDecodeError:
        return False


def _is_json(line: str) -> bool:
    try:
        json.loads(line)
    except json.JSONDecodeError:
        return False
    return True


def _csv_names_prompt(line: str) -> bool:
    try:
        return "prompt" in [c.strip().lower() for c in next(csv.reader([line]))]
    except (csv.Error, StopIteration):
        return False


Shape = Literal["json-object", "json-array", "json-lines", "csv"]


def _recognise(text: str, suffix: str, name: str) -> Shape:
    """How to read the file, from its content first: a JSON array, JSON lines, or CSV; the extension
    decides only when the content does not (so a broken .jsonl still gets its lines' errors)."""
    head = text.lstrip()
    lines = [line for line in text.split("\n", 4 * RECOGNISE_LINES)[:4 * RECOGNISE_LINES] if line.strip()]
    if head.startswith("{") and len(lines) > 1 and _is_object(text):
        return "json-object"  # one request body or conversation, pretty-printed as a whole .json file
    if head.startswith("["):
        # One array, unless its first line is a whole JSON value with more lines after it: JSON lines.
        return "json-lines" if len(lines) > 1 and _is_json(lines[0]) else "json-array"
    if any(_is_object(line) for line in lines[:RECOGNISE_LINES]):
        return "json-lines"
    if suffix == ".csv" or (lines and _csv_names_prompt(lines[0])):
        return "csv"
    if suffix in (".jsonl", ".json", ".ndjson") and not (head.startswith("{") and _is_object(text)):
        return "json-lines"  # each line's own error, as for any JSONL file
    raise WorkloadError(f"{name}: {UNRECOGNISED}")


def read_file(path: Path, name: str, max_bytes: int, max_prompt_chars: int, text_api: Api
              ) -> tuple[Format, list[Item]]:
    """A workload file: its size checked before reading, its text decoded, its form recognised, read."""
    check_size(path.stat().st_size, name, max_bytes)
    text = decode_text(path.read_bytes(), name)
    if "\x00" in text:
        raise WorkloadError(f"{name} is a binary file (it holds NUL bytes), not text; save the workload as UTF-8 "
                            "text (JSONL, CSV or ShareGPT JSON: docs/workloads.md)")
    suffix = path.suffix.lower()
    if not text.strip():
        example = "a header line 'prompt' and one prompt a row" if suffix == ".csv" else '{"prompt": "..."}'
        raise WorkloadError(f"{name} is empty: write one request per line, e.g. {example}")
    shape = _recognise(text, suffix, name)
    if shape == "csv":
        return "csv", list(_csv(text, name, max_prompt_chars, text_api))
    if shape == "json-object":
        data = json.loads(text)
        if form_of(data) == "request" and "messages" not in data and "prompt" not in data:
            raise WorkloadError(f"{name}: {UNRECOGNISED}")
        return read_objects([Row(1, 1, data)], name, max_prompt_chars)
    rows = _array_rows(text, name) if shape == "json-array" else _line_rows(text)
    return read_objects(list(rows), name, max_prompt_chars)
