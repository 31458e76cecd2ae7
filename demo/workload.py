"""The customer's workload: one loader for JSONL, CSV and a folder of text files.

Formats (docs/workloads.md has the user-facing description):

- JSONL, one request a line: ``{"messages": [...]}`` (chat API) or ``{"prompt": "..."}``
  (completions API), with optional ``id``, ``max_tokens``, ``temperature``. Unknown fields are an
  error of that line (a typo such as ``max_token`` would otherwise silently use the default).
- CSV with a ``prompt`` column and optional ``id``, ``max_tokens``, ``temperature`` columns; any other
  column is a wrong header. Each prompt is sent as one user message (chat API) unless
  ``text_api="completions"``.
- A folder of ``.txt`` / ``.md`` files (not recursive), one prompt each, id = the file name; sent as
  for CSV.

A bad line (row, file) is a ``LoadIssue`` (file, line, one-line message) and is skipped; with
``strict=True`` any issue raises ``WorkloadError`` before anything is sent. Whole-file problems
(too big, empty, not UTF-8, wrong CSV header, no usable request) always raise ``WorkloadError``.
Issue messages never quote the file's text: a workload may be confidential.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError

from demo.errors import BadInput
from demo.limits import MaxTokens, Temperature
from demo.race import prompt_size_problem
from demo.results import Api, Message, RaceRequest
from demo.sampling import SAMPLING_FIELDS, SamplingFields
from demo.settings import Settings

DEFAULT_MAX_TOKENS = 256  # RaceRequest's own default
DEFAULT_TEMPERATURE = 0.0
TEXT_SUFFIXES = (".txt", ".md")
CSV_COLUMNS = ("prompt", "id", "max_tokens", "temperature")  # prompt required, the rest optional
JSONL_FIELDS = ("messages", "prompt", "id", "max_tokens", "temperature")
MAX_LISTED = 5  # issues named in one WorkloadError line
Format = Literal["jsonl", "csv", "folder"]


class LoadIssue(BaseModel):
    """One skipped line (row, file) of a workload: where, and what is wrong, in one line."""

    file: str  # file name (no directories: the path may be private)
    line: int | None = None  # 1-based; None for a whole file of a folder
    message: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.message}" if self.line is not None else f"{self.file}: {self.message}"


class WorkloadError(BadInput):
    """The workload cannot be used; ``str(e)`` is one line naming the file, the problem and the fix."""

    def __init__(self, message: str, issues: list[LoadIssue] | None = None) -> None:
        super().__init__(message)
        self.issues = list(issues or [])


class WorkloadRequest(SamplingFields):
    """One request of a workload, in the project's request vocabulary (see RaceRequest): its text,
    its sampling (sent alike to both sides), the segment tag the file gave it, and where it came from."""

    model_config = {"extra": "forbid"}

    id: str = Field(min_length=1, max_length=200)
    api: Api
    messages: list[Message] | None = None  # chat API
    prompt: str | None = None  # completions API
    max_tokens: MaxTokens = DEFAULT_MAX_TOKENS
    temperature: Temperature = DEFAULT_TEMPERATURE
    seed: int | None = None  # the line's own seed; None: the sweep's
    tag: str | None = Field(None, min_length=1, max_length=64)  # a segment label from the file
    line: int | None = None  # where it came from (None for a folder's file)

    @property
    def prompt_text(self) -> str:
        """All the text the model reads: the prompt, or the messages' contents joined."""
        if self.prompt is not None:
            return self.prompt
        return "\n\n".join(m.content for m in self.messages or [])

    @property
    def prompt_sha256(self) -> str:
        """Stable fingerprint of the prompt, kept when the text is redacted."""
        return hashlib.sha256(self.prompt_text.encode("utf-8")).hexdigest()

    def to_race_request(self, *, seed: int | None = None) -> RaceRequest:
        """What the evaluator sends (sequential A/B order; the runner may change the order): the
        line's own seed when it has one, else ``seed``; every sampling field as the line gave it."""
        return RaceRequest(messages=self.messages, prompt=self.prompt, api=self.api,
                           temperature=self.temperature, max_tokens=self.max_tokens,
                           order="sequential", seed=self.seed if self.seed is not None else seed,
                           **{name: getattr(self, name) for name in SAMPLING_FIELDS})


class SampleInfo(BaseModel):
    n: int
    seed: int
    of_requests: int  # usable requests in the file the sample was drawn from


class Workload(BaseModel):
    name: str  # the file's stem (the folder's name)
    source: str  # the path as given
    format: Format
    requests: list[WorkloadRequest]
    issues: list[LoadIssue] = Field(default_factory=list)  # skipped lines
    sample: SampleInfo | None = None


class _JsonlLine(BaseModel):
    """A JSONL line as written by the user, before defaults and the id are applied."""

    # strict: true is not a max_tokens, "0.7" is not a temperature.
    model_config = {"extra": "forbid", "strict": True}

    messages: list[Message] | None = Field(None, min_length=1)
    prompt: str | None = None
    id: str | int | None = None
    max_tokens: int | None = Field(None, ge=1, le=32768)
    temperature: float | None = Field(None, ge=0.0, le=2.0)


# --------------------------------------------------------------------------- helpers


def _mb(n: int) -> str:
    return f"{n / 1_000_000:.1f} MB" if n >= 1_000_000 else f"{n:,} bytes"


def _validation_message(e: ValidationError) -> str:
    """Pydantic's errors as one line, without the offending values (they may be confidential)."""
    parts: list[str] = []
    fields_seen: set[str] = set()
    for err in e.errors():
        loc = ".".join(str(p) for p in err["loc"])
        top = str(err["loc"][0]) if err["loc"] else ""
        if top in fields_seen and top != "messages":
            continue  # a union (id: string or number) reports once per member
        fields_seen.add(top)
        if top == "id":
            parts.append("id must be a string or a whole number")
        elif err["type"] == "extra_forbidden":
            parts.append(f"unknown field {loc!r} (allowed: {', '.join(JSONL_FIELDS)})")
        else:
            parts.append(f"{loc}: {err['msg']}" if loc else err["msg"])
    return "; ".join(parts)


def _decode(data: bytes, name: str) -> str:
    """UTF-8 (a leading BOM is dropped); otherwise a WorkloadError naming the line and byte offset."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise WorkloadError(
            f"{name}: line {line} (byte offset {e.start}) is not UTF-8 text; save the file as UTF-8 and load it again"
        ) from None


def _check_size(size: int, name: str, max_bytes: int) -> None:
    if size > max_bytes:
        raise WorkloadError(
            f"{name} is {_mb(size)}, over the {_mb(max_bytes)} limit; sample it down or raise "
            "SPECDEMO_WORKLOAD_MAX_BYTES")


def _text_request(rid: str, text: str, line: int | None, text_api: Api, max_tokens: int, temperature: float
                  ) -> WorkloadRequest:
    if text_api == "chat":
        return WorkloadRequest(id=rid, api="chat", messages=[Message(role="user", content=text)],
                               max_tokens=max_tokens, temperature=temperature, line=line)
    return WorkloadRequest(id=rid, api="completions", prompt=text, max_tokens=max_tokens,
                           temperature=temperature, line=line)


# --------------------------------------------------------------------------- formats


def _jsonl(text: str, name: str, max_prompt_chars: int) -> Iterator[WorkloadRequest | LoadIssue]:
    # Split on "\n" only: str.splitlines() would also split inside a JSON string holding a raw U+2028
    # or \x85 (json.dumps(ensure_ascii=False) writes them as is) and shift every line number after it.
    for no, line in enumerate(text.split("\n"), start=1):
        raw = line.removesuffix("\r")
        if not raw.strip():
            continue  # blank lines separate nothing and are not an error

        def issue(message: str, no: int = no) -> LoadIssue:
            return LoadIssue(file=name, line=no, message=message)

        try:
            data: Any = json.loads(raw)
        except json.JSONDecodeError as e:
            yield issue(f"not valid JSON ({e.msg} at column {e.colno})")
            continue
        if not isinstance(data, dict):
            yield issue(f'expected a JSON object such as {{"prompt": "..."}}, got {type(data).__name__}')
            continue
        try:
            row = _JsonlLine.model_validate_json(raw)
        except ValidationError as e:
            yield issue(_validation_message(e))
            continue
        if (row.messages is None) == (row.prompt is None):
            yield issue('give exactly one of "messages" (chat) or "prompt" (completions)')
            continue
        rid = str(row.id).strip() if row.id is not None else str(no)
        if not rid or len(rid) > 200:
            yield issue("id must be 1 to 200 characters")
            continue
        fields: dict[str, Any] = dict(id=rid, line=no,
                                      max_tokens=row.max_tokens or DEFAULT_MAX_TOKENS,
                                      temperature=DEFAULT_TEMPERATURE if row.temperature is None else row.temperature)
        if row.messages is not None:
            req = WorkloadRequest(api="chat", messages=row.messages, **fields)
        else:
            req = WorkloadRequest(api="completions", prompt=row.prompt, **fields)
        if not req.prompt_text.strip():
            yield issue("the prompt is empty")
            continue
        over = prompt_size_problem(len(req.prompt_text), max_prompt_chars)
        yield issue(over) if over else req


def _number(value: str | None, kind: type[int] | type[float], column: str) -> tuple[float | int | None, str | None]:
    """A CSV cell as a number; blank means absent."""
    if value is None or not value.strip():
        return None, None
    try:
        return kind(value.strip()), None
    except ValueError:
        return None, f"{column} is not {'a whole number' if kind is int else 'a number'}"


def _csv(text: str, name: str, max_prompt_chars: int, text_api: Api) -> Iterator[WorkloadRequest | LoadIssue]:
    # A field may be as long as the file; the csv module's default cap (131,072) would cut long prompts.
    csv.field_size_limit(max(csv.field_size_limit(), len(text) + 1))
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        header = next(reader)
    except StopIteration:
        return
    except csv.Error as e:
        raise WorkloadError(f"{name}: line 1: the header is not valid CSV ({e})") from None
    columns = [h.strip().lower() for h in header]
    unknown = [c for c in columns if c not in CSV_COLUMNS]
    if "prompt" not in columns or unknown or len(set(columns)) != len(columns):
        raise WorkloadError(
            f"{name}: wrong CSV header: needed column: prompt; optional: id, max_tokens, temperature; "
            f"found: {', '.join(repr(c) for c in columns) or 'nothing'}")
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

        def issue(message: str, start: int = start) -> LoadIssue:
            return LoadIssue(file=name, line=start, message=message)

        if len(cells) != len(columns):
            yield issue(f"{len(cells)} fields, but the header has {len(columns)}")
            continue
        row = dict(zip(columns, cells, strict=True))
        prompt = row["prompt"]
        if not prompt.strip():
            yield issue("the prompt is empty")
            continue
        over = prompt_size_problem(len(prompt), max_prompt_chars)
        if over:
            yield issue(over)
            continue
        max_tokens, bad_mt = _number(row.get("max_tokens"), int, "max_tokens")
        temperature, bad_t = _number(row.get("temperature"), float, "temperature")
        if bad_mt or bad_t:
            yield issue("; ".join(m for m in (bad_mt, bad_t) if m))
            continue
        rid = (row.get("id") or "").strip() or str(start)
        try:
            yield _text_request(rid, prompt, start, text_api,
                                int(max_tokens) if max_tokens is not None else DEFAULT_MAX_TOKENS,
                                float(temperature) if temperature is not None else DEFAULT_TEMPERATURE)
        except ValidationError as e:
            yield issue(_validation_message(e))


def _folder(folder: Path, max_bytes: int, max_prompt_chars: int, text_api: Api
            ) -> Iterator[WorkloadRequest | LoadIssue]:
    files = sorted(p for p in folder.iterdir() if p.is_file() and p.suffix.lower() in TEXT_SUFFIXES)
    if not files:
        others = sum(1 for p in folder.iterdir() if p.is_file())
        raise WorkloadError(f"folder {folder.name} has no .txt or .md files ({others} other files); "
                            "put one prompt in each .txt or .md file")
    _check_size(sum(p.stat().st_size for p in files), f"folder {folder.name} (its .txt/.md files)", max_bytes)
    for p in files:
        try:
            text = _decode(p.read_bytes(), p.name)
        except WorkloadError as e:  # one file in the wrong encoding skips that file, not the folder
            yield LoadIssue(file=p.name, message=str(e).removeprefix(f"{p.name}: "))
            continue
        if not text.strip():
            yield LoadIssue(file=p.name, message="the file is empty")
            continue
        over = prompt_size_problem(len(text), max_prompt_chars)
        if over:
            yield LoadIssue(file=p.name, message=over)
            continue
        yield _text_request(p.name, text, None, text_api, DEFAULT_MAX_TOKENS, DEFAULT_TEMPERATURE)


# --------------------------------------------------------------------------- the loader


def _summary(issues: list[LoadIssue]) -> str:
    listed = "; ".join(str(i) for i in issues[:MAX_LISTED])
    more = f"; and {len(issues) - MAX_LISTED} more" if len(issues) > MAX_LISTED else ""
    return listed + more


def load_workload(path: Path | str, *, max_bytes: int, max_prompt_chars: int, strict: bool = False,
                  text_api: Api = "chat") -> Workload:
    """Load and validate a workload file or folder; nothing is sent anywhere.

    ``max_bytes`` is ``Settings.workload_max_bytes`` (checked before reading), ``max_prompt_chars`` the
    app's prompt cap (an over-cap prompt is its line's issue). ``text_api`` is how CSV and folder
    prompts are sent. Raises ``WorkloadError`` (one line) when nothing usable remains, or with
    ``strict`` on any issue (``e.issues`` lists them).
    """
    path = Path(path)
    name = path.name or str(path)
    fmt: Format
    if path.is_dir():
        fmt = "folder"
        items = list(_folder(path, max_bytes, max_prompt_chars, text_api))
    elif not path.is_file():
        raise WorkloadError(f"{path}: no such file or folder; give a .jsonl or .csv file or a folder of .txt files")
    else:
        suffix = path.suffix.lower()
        if suffix not in (".jsonl", ".csv"):
            raise WorkloadError(f"{name}: unknown workload format {suffix or '(no extension)'!r}; "
                                "use .jsonl, .csv or a folder of .txt/.md files")
        _check_size(path.stat().st_size, name, max_bytes)
        text = _decode(path.read_bytes(), name)
        if not text.strip():
            example = '{"prompt": "..."}' if suffix == ".jsonl" else "a header line 'prompt' and one prompt a row"
            raise WorkloadError(f"{name} is empty: write one request per line, e.g. {example}")
        if suffix == ".jsonl":
            fmt = "jsonl"
            items = list(_jsonl(text, name, max_prompt_chars))
        else:
            fmt = "csv"
            items = list(_csv(text, name, max_prompt_chars, text_api))
    requests: list[WorkloadRequest] = []
    issues: list[LoadIssue] = []
    seen: dict[str, int | None] = {}
    for item in items:
        if isinstance(item, LoadIssue):
            issues.append(item)
        elif item.id in seen:
            first = seen[item.id]
            where = f" (first on line {first})" if first is not None else ""
            issues.append(LoadIssue(file=name if fmt != "folder" else item.id, line=item.line,
                                    message=f"duplicate id {item.id!r}{where}; ids must be unique"))
        else:
            seen[item.id] = item.line
            requests.append(item)
    if strict and issues:
        raise WorkloadError(f"{name}: {len(issues)} bad line(s), nothing was sent (strict): {_summary(issues)}",
                            issues)
    if not requests:
        detail = f": {_summary(issues)}" if issues else ": the header has no rows under it"
        raise WorkloadError(f"{name} has no usable request{detail}", issues)
    stem = path.stem if fmt != "folder" else name
    return Workload(name=stem, source=str(path), format=fmt, requests=requests, issues=issues)


def _rank(seed: int, rid: str) -> str:
    return hashlib.sha256(f"{seed}\0{rid}".encode()).hexdigest()


def sample(workload: Workload, n: int, seed: int) -> Workload:
    """n requests drawn reproducibly: the same file, n and seed give the same ids in the same order.

    Each request is ranked by sha256(seed, id) and the n lowest are kept in rank order, so the draw
    does not depend on Python's random module (stable across versions) and adding lines to the file
    changes a sample only where a new line ranks among the n lowest. With n at or above the number
    of requests, all are kept, in rank order.
    """
    if n < 1:
        raise WorkloadError(f"--sample must be at least 1 (got {n})")
    ranked = sorted(workload.requests, key=lambda r: _rank(seed, r.id))
    return workload.model_copy(update={
        "requests": ranked[:n],
        "sample": SampleInfo(n=n, seed=seed, of_requests=len(workload.requests)),
    })


def request_slices(requests: list[WorkloadRequest], concurrency: int, batches: int | None = None
                   ) -> list[list[WorkloadRequest]]:
    """The batches of a cell: each of ``concurrency`` streams takes the next request, in workload order.

    ``batches`` None covers every request once (ceil(N / concurrency) batches). The sequence wraps
    around, so every batch has exactly ``concurrency`` requests (the last one refills from the start).
    Give both sides the same slices: the A/B compares the same traffic.
    """
    if concurrency < 1 or not requests:
        raise ValueError("request_slices needs concurrency >= 1 and at least one request")
    n = len(requests)
    count = -(-n // concurrency) if batches is None else batches
    return [[requests[(b * concurrency + i) % n] for i in range(concurrency)] for b in range(count)]


def open_workload(path: Path | str, settings: Settings, *, sample_n: int | None = None, seed: int = 0,
                  strict: bool = False) -> Workload:
    """The one way the CLI and the page load a workload: the settings' limits, then an optional sample."""
    workload = load_workload(path, max_bytes=settings.workload_max_bytes, max_prompt_chars=settings.max_prompt_chars,
                             strict=strict)
    return sample(workload, sample_n, seed) if sample_n is not None else workload
