"""The customer's workload: one loader for every form a customer already has, recognised by content.

Forms (docs/workloads.md has the user-facing description; the file's extension is only a hint):

- JSONL, one request a line: ``{"messages": [...]}`` (chat API) or ``{"prompt": "..."}`` (completions
  API; a ``vllm bench serve`` custom dataset is this form), with optional ``id``, ``tag``, the length and
  the sampling fields. A field no form knows is an error of that line (a typo such as ``max_token``
  would otherwise silently use the default).
- OpenAI request bodies, one a line (what a gateway logs): the same lines with OpenAI's own fields;
  transport and billing fields (``model``, ``stream``, ...) are ignored and counted, fields that would
  change what is generated and cannot be sent alike to both sides (``n`` > 1, ``tools``, ...) skip
  the line with the reason.
- OpenAI Batch API lines (``custom_id``, ``method``, ``url``, ``body``) for ``/v1/chat/completions``
  and ``/v1/completions``: the body as above, the id from ``custom_id``.
- ShareGPT, a JSON array or JSONL of ``{"id", "conversations": [{"from", "value"}]}``: the prompt is
  the conversation up to its last human turn, sent as chat messages; the recorded answer's length
  sets ``max_tokens`` when the line gives none (``answer_max_tokens``).
- CSV with a ``prompt`` column and optional ``id``, ``tag`` / ``category``, length and sampling
  columns; any other column is a wrong header. Each prompt is sent as one user message (chat API)
  unless ``text_api="completions"``.
- A folder of ``.txt`` / ``.md`` files (not recursive), one prompt each, id = the file name; sent as
  for CSV.

A bad line (row, file) is a ``LoadIssue`` (file, line, one-line message) and is skipped; with
``strict=True`` any issue raises ``WorkloadError`` before anything is sent. Whole-file problems
(too big, empty, binary, not UTF-8, wrong CSV header, a form not recognised, no usable request)
always raise ``WorkloadError``. Issue messages never quote the file's text: a workload may be
confidential.
"""

from __future__ import annotations

import csv
import difflib
import hashlib
import io
import itertools
import json
import re
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Literal, NamedTuple

from pydantic import BaseModel, Field, ValidationError

from demo.errors import BadInput
from demo.limits import MAX_TOKENS_LIMIT, MaxTokens, Temperature
from demo.race import prompt_size_problem
from demo.results import Api, Message, RaceRequest
from demo.sampling import SAMPLING_FIELDS, SamplingFields
from demo.settings import Settings

DEFAULT_MAX_TOKENS = 256  # RaceRequest's own default
DEFAULT_TEMPERATURE = 0.0
ANSWER_MAX_TOKENS_CAP = 2048  # a ShareGPT answer's length sets max_tokens up to this
TEXT_SUFFIXES = (".txt", ".md")
MAX_LISTED = 5  # issues named in one WorkloadError line
FIELD_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.]{0,39}")  # a key shown in a message or counted by name
RECOGNISE_LINES = 20  # non-blank lines looked at to recognise a JSON-lines file
Format = Literal["jsonl", "csv", "folder", "openai-batch", "openai-body", "sharegpt"]
FORMAT_LABELS: dict[str, str] = {
    "jsonl": "JSONL", "csv": "CSV", "folder": "a folder of text files", "openai-batch": "OpenAI batch",
    "openai-body": "OpenAI request bodies", "sharegpt": "ShareGPT"}

# The length, seed and sampling fields every form may give (max_completion_tokens: OpenAI's newer name).
LENGTH_AND_SAMPLING = ("max_tokens", "max_completion_tokens", "temperature", "seed", *SAMPLING_FIELDS)
REQUEST_FIELDS = ("messages", "prompt", "id", "tag", "category", *LENGTH_AND_SAMPLING)
CSV_NUMBERS: dict[str, type[int] | type[float]] = {
    "max_tokens": int, "temperature": float, "seed": int, "top_p": float, "top_k": int, "min_p": float,
    "presence_penalty": float, "frequency_penalty": float, "repetition_penalty": float}
CSV_COLUMNS = ("prompt", "id", "tag", "category", *CSV_NUMBERS, "stop")  # prompt required, the rest optional
BATCH_URLS: dict[str, Api] = {"/v1/chat/completions": "chat", "/v1/completions": "completions"}
OTHER_BATCH_URLS = ("/v1/embeddings", "/v1/responses", "/v1/moderations", "/v1/score", "/v1/rerank",
                    "/v1/audio/transcriptions")  # named in the reason; any other url is not quoted
SHAREGPT_ROLES: dict[str, Literal["system", "user", "assistant"]] = {
    "system": "system", "human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant",
    "chatgpt": "assistant", "bard": "assistant", "bing": "assistant"}
SHAREGPT_FIELDS = ("id", "conversations", "system", "tag", "category", *LENGTH_AND_SAMPLING)

# Fields that concern transport or billing only: ignored, counted, and said why.
IGNORED_FIELDS: dict[str, str] = {
    "model": "the servers' own model is used",
    "stream": "the evaluator always streams",
    "stream_options": "the evaluator asks for usage on every chunk itself",
    "user": "an end-user id for billing; not sent",
    "metadata": "a label for billing and logs; not sent",
    "store": "OpenAI's storage flag; not sent",
    "service_tier": "a billing tier; not sent",
    "prompt_cache_key": "a cache hint for billing; not sent",
    "safety_identifier": "an end-user id for safety checks; not sent",
    "parallel_tool_calls": "no tools are sent",
    "tool_choice": "no tools are sent",
    "function_call": "no functions are sent",
}
DEFAULT_REASON = "left at its default: nothing to send"
UNUSED_REASON = "not used by the evaluator"


def _set(v: Any) -> bool:
    return v not in (None, False, 0, "", [], {})


def _many(v: Any) -> bool:
    return v not in (None, 1)


# Fields that change what is generated and that the evaluator cannot send alike to both sides: a line
# that sets one is skipped with the reason; left at its default, the field is ignored and counted.
REFUSED_FIELDS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "n": (_many, "asks for several answers; the evaluator measures one per request"),
    "best_of": (_many, "asks for several answers; the evaluator measures one per request"),
    "logit_bias": (_set, "biases tokens; it is not sent, so the answers would not be yours"),
    "tools": (_set, "calls tools; the servers are not set up to parse tool calls"),
    "functions": (_set, "calls functions; the servers are not set up to parse tool calls"),
    "logprobs": (_set, "asks for log-probabilities, which change each step's cost; not sent"),
    "top_logprobs": (_set, "asks for log-probabilities, which change each step's cost; not sent"),
    "echo": (_set, "echoes the prompt back; not measured"),
    "suffix": (_set, "fills in the middle of a text; not measured"),
    "prediction": (_set, "a predicted output (OpenAI's own speculation); not sent"),
    "audio": (_set, "asks for audio output; not measured"),
    "modalities": (lambda v: v not in (None, ["text"]), "asks for audio output; not measured"),
    "web_search_options": (_set, "searches the web; not measured"),
    "reasoning_effort": (_set, "changes how long a reasoning model thinks; not sent"),
    "ignore_eos": (_set, "changes the answer's length; not sent"),
    "min_tokens": (_set, "changes the answer's length; not sent"),
}


def ignored_reason(field: str) -> str:
    """Why a field of the file was not sent (the summary's and the docs' words)."""
    if field in IGNORED_FIELDS:
        return IGNORED_FIELDS[field]
    return DEFAULT_REASON if field in REFUSED_FIELDS else UNUSED_REASON


def answer_max_tokens(words: int) -> int | None:
    """A recorded answer's length as max_tokens: its word count x 4/3 (a token is about 3/4 of an
    English word), rounded up, capped at ANSWER_MAX_TOKENS_CAP; None for an empty answer."""
    if words < 1:
        return None
    return min(-(-words * 4 // 3), ANSWER_MAX_TOKENS_CAP)


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
    """How a sample was drawn: n requests with this seed, out of ``of_requests`` usable ones."""

    n: int
    seed: int
    of_requests: int  # usable requests in the file the sample was drawn from


class Workload(BaseModel):
    """A loaded workload: its requests, the skipped lines, the fields ignored (counted), its form."""

    name: str  # the file's stem (the folder's name)
    source: str  # the path as given
    format: Format
    requests: list[WorkloadRequest]
    issues: list[LoadIssue] = Field(default_factory=list)  # skipped lines
    # Fields of the file not sent (transport, billing; see IGNORED_FIELDS) -> on how many read requests.
    ignored_fields: dict[str, int] = Field(default_factory=dict)
    sample: SampleInfo | None = None

    @property
    def read(self) -> int:
        """Usable requests read from the file (before any sample)."""
        return self.sample.of_requests if self.sample else len(self.requests)

    def summary_lines(self) -> list[str]:
        """What the load gave, in words (the CLI and the page show these, computing nothing):
        "12 requests read (OpenAI batch), 2 skipped", then one line per ignored field."""
        head = (f"{self.read} request{'' if self.read == 1 else 's'} read ({FORMAT_LABELS[self.format]}), "
                f"{len(self.issues)} skipped")
        if self.sample:
            head += (f"; a sample of {self.sample.n} drawn with seed {self.sample.seed} from "
                     f"{self.sample.of_requests}")
        return [head] + [f"{field}: ignored on {n} line{'' if n == 1 else 's'}: {ignored_reason(field)}"
                         for field, n in sorted(self.ignored_fields.items())]


class _LineFields(SamplingFields):
    """A line's length, temperature, seed and sampling as written, before defaults are applied."""

    # strict: true is not a max_tokens, "0.7" is not a temperature.
    model_config = {"extra": "forbid", "strict": True}

    max_tokens: int | None = Field(None, ge=1, le=MAX_TOKENS_LIMIT)
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    seed: int | None = Field(None, ge=-(2**63), lt=2**64)


class _Skip(Exception):  # noqa: N818 - a line skipped, not a failure
    """A line to skip: the one-line reason (never the line's text)."""


class _Read(NamedTuple):
    request: WorkloadRequest
    ignored: tuple[str, ...]  # the fields of its line not sent (counted in Workload.ignored_fields)


_Item = _Read | LoadIssue


UNRECOGNISED = (
    "the form of this file is not recognised. Accepted forms: "
    'JSONL {"prompt": "..."} or {"messages": [{"role": "user", "content": "..."}]}; '
    'OpenAI request bodies {"model": "m", "messages": [...], "max_tokens": 100}; '
    'OpenAI batch {"custom_id": "r1", "method": "POST", "url": "/v1/chat/completions", "body": {...}}; '
    'ShareGPT [{"id": "c1", "conversations": [{"from": "human", "value": "..."}]}]; '
    "CSV with a header line naming a prompt column; a folder of .txt/.md files (docs/workloads.md)")
KIND_NAMES = {"openai-batch": "an OpenAI Batch line", "sharegpt": "a ShareGPT conversation",
              "request": "a request line"}


# --------------------------------------------------------------------------- helpers


def _mb(n: int) -> str:
    return f"{n / 1_000_000:.1f} MB" if n >= 1_000_000 else f"{n:,} bytes"


def _shown(field: str) -> str:
    """A field name of the file as we may show it: an identifier of up to 40 characters; any other key
    may be the file's text, so it is not shown."""
    return field if FIELD_NAME.fullmatch(field) else "(a key that is not a field name)"


def _validation_message(e: ValidationError) -> str:
    """Pydantic's errors as one line, without the offending values (they may be confidential)."""
    parts: list[str] = []
    for err in e.errors():
        loc = ".".join(str(p) for p in err["loc"])
        part = f"{loc}: {err['msg']}" if loc else err["msg"]
        if part not in parts:  # a union reports once per member
            parts.append(part)
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


# --------------------------------------------------------------------------- shared per-line validation


def _unknown(field: str, known: tuple[str, ...]) -> str:
    close = difflib.get_close_matches(field, known, n=1)
    hint = f"did you mean {close[0]!r}?" if close else "docs/workloads.md lists the fields a line may have"
    shown = _shown(field)
    return f"unknown field {shown!r} ({hint})" if shown == field else f"unknown field {shown} ({hint})"


def _screen(data: dict[str, Any], known: tuple[str, ...], *, tolerant: bool = False) -> list[str]:
    """The fields of a line that are not ``known``: those to ignore (returned, to be counted); a field
    that would change what is generated, or (unless ``tolerant``) one no form knows, skips the line."""
    ignored: list[str] = []
    problems: list[str] = []
    for key, value in data.items():
        if key in known:
            continue
        if key in REFUSED_FIELDS and REFUSED_FIELDS[key][0](value):
            problems.append(f"{key}: {REFUSED_FIELDS[key][1]}")
        elif key in REFUSED_FIELDS or key in IGNORED_FIELDS or tolerant:
            ignored.append(_shown(key))
        else:
            problems.append(_unknown(key, known))
    if problems:
        raise _Skip("; ".join(problems))
    return ignored


def _sampling_of(data: dict[str, Any]) -> _LineFields:
    """A line's length, temperature, seed and sampling fields, checked (strict types, bounds)."""
    fields = {k: data[k] for k in LENGTH_AND_SAMPLING if data.get(k) is not None}
    newer = fields.pop("max_completion_tokens", None)
    if newer is not None:
        if fields.get("max_tokens", newer) != newer:
            raise _Skip("max_tokens and max_completion_tokens differ; give one")
        fields["max_tokens"] = newer
    fmt = fields.get("response_format")
    if isinstance(fmt, dict) and fmt.get("type") not in ("text", "json_object", "json_schema"):
        raise _Skip("response_format: its type is not text, json_object or json_schema "
                    "(the ones vLLM's structured outputs take)")
    try:
        return _LineFields.model_validate(fields)
    except ValidationError as e:
        raise _Skip(_validation_message(e)) from None


def _id(value: Any, no: int | None) -> str:
    """The line's id: a string or a whole number, 1 to 200 characters; the line number by default."""
    if value is None:
        return str(no)
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise _Skip("id must be a string or a whole number")
    rid = str(value).strip()
    if not rid or len(rid) > 200:
        raise _Skip("id must be 1 to 200 characters")
    return rid


def _tag_of(data: dict[str, Any]) -> tuple[str | None, bool]:
    """The line's segment tag (``tag``, ``category`` or ``metadata.tag``/``.category``) and whether
    ``metadata`` gave it."""
    if "tag" in data and "category" in data:
        raise _Skip("give tag or category, not both")
    value, from_metadata = data.get("tag", data.get("category")), False
    meta = data.get("metadata")
    if value is None and isinstance(meta, dict):
        value = meta.get("tag", meta.get("category"))
        from_metadata = value is not None
    if value is None:
        return None, False
    if not isinstance(value, str) or not 1 <= len(value.strip()) <= 64:
        raise _Skip("tag must be text of 1 to 64 characters")
    return value.strip(), from_metadata


def _request(rid: str, no: int | None, text: list[Message] | str, fields: _LineFields, *, tag: str | None,
             max_prompt_chars: int, max_tokens: int = DEFAULT_MAX_TOKENS) -> WorkloadRequest:
    """The request a line gives, with the defaults applied; an empty or over-cap prompt skips it."""
    sampling = {name: getattr(fields, name) for name in SAMPLING_FIELDS}
    text_field: dict[str, Any] = {"prompt": text} if isinstance(text, str) else {"messages": text}
    req = WorkloadRequest(id=rid, line=no, api="completions" if isinstance(text, str) else "chat", tag=tag,
                          max_tokens=fields.max_tokens or max_tokens, seed=fields.seed,
                          temperature=DEFAULT_TEMPERATURE if fields.temperature is None else fields.temperature,
                          **text_field, **sampling)
    if not req.prompt_text.strip():
        raise _Skip("the prompt is empty")
    if over := prompt_size_problem(len(req.prompt_text), max_prompt_chars):
        raise _Skip(over)
    return req


def _content(value: Any, where: str) -> str:
    """A message's content: text, or OpenAI's list of text parts joined."""
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(p, dict) and p.get("type") == "text"
                                       and isinstance(p.get("text"), str) for p in value):
        return "".join(p["text"] for p in value)
    raise _Skip(f"{where}.content: only text is measured (give a string or a list of text parts)")


def _messages(value: Any) -> tuple[list[Message], list[str]]:
    """Chat messages (OpenAI's: ``developer`` is a system message) and the fields ignored in them."""
    if not isinstance(value, list) or not value:
        raise _Skip("messages: give a list of at least one message")
    out: list[Message] = []
    ignored: list[str] = []
    for i, m in enumerate(value):
        if not isinstance(m, dict):
            raise _Skip(f"messages.{i}: expected an object with role and content")
        if extra := sorted(set(m) - {"role", "content", "name"}):
            raise _Skip(f"messages.{i}: {_shown(extra[0])}: only role and content are sent (tool calls are "
                        "not measured)")
        ignored += ["messages.name"] if "name" in m else []
        role = "system" if m.get("role") == "developer" else m.get("role")
        try:
            out.append(Message.model_validate({"role": role, "content": _content(m.get("content"), f"messages.{i}")}))
        except ValidationError as e:
            raise _Skip(f"messages.{i}.{_validation_message(e)}") from None
    return out, ignored


def _prompt(value: Any) -> str:
    """A completions prompt: text, or a list holding one text."""
    if isinstance(value, list) and len(value) == 1:
        value = value[0]
    if not isinstance(value, str):
        raise _Skip("prompt: give one text prompt (a list of prompts or of token ids is not measured)")
    return value


# --------------------------------------------------------------------------- one parser per form


def _request_line(data: dict[str, Any], no: int, nth: int, max_prompt_chars: int, rid: str | None = None) -> _Read:
    """Our JSONL line or an OpenAI request body (chat or completions) on line ``no``, the ``nth``
    object of its file (its id when it gives none); ``rid``: the Batch line's id."""
    ignored = _screen(data, REQUEST_FIELDS)
    if rid is not None and "id" in data:
        raise _Skip("body.id: the Batch line's custom_id is its id")
    has_messages, has_prompt = data.get("messages") is not None, data.get("prompt") is not None
    if has_messages == has_prompt:
        raise _Skip('give exactly one of "messages" (chat) or "prompt" (completions)')
    text: list[Message] | str
    if has_messages:
        text, in_messages = _messages(data["messages"])
        ignored += in_messages
    else:
        text = _prompt(data["prompt"])
    tag, from_metadata = _tag_of(data)
    if from_metadata:
        ignored.remove("metadata")
    req = _request(rid if rid is not None else _id(data.get("id"), nth), no, text, _sampling_of(data), tag=tag,
                   max_prompt_chars=max_prompt_chars)
    return _Read(req, tuple(ignored))


BATCH_FIELDS = ("custom_id", "method", "url", "body")


def _batch_line(data: dict[str, Any], no: int, nth: int, max_prompt_chars: int) -> _Read:
    """An OpenAI Batch API line: ``custom_id`` is the id, ``url`` the API, ``body`` the request."""
    if missing := [k for k in BATCH_FIELDS if k not in data]:
        raise _Skip(f"an OpenAI Batch line needs custom_id, method, url and body (missing: {', '.join(missing)})")
    if extra := [k for k in data if k not in BATCH_FIELDS]:
        raise _Skip("; ".join(_unknown(k, BATCH_FIELDS) for k in extra))
    if data["method"] != "POST":
        raise _Skip("method: only POST lines are requests")
    url = data["url"] if isinstance(data["url"], str) else ""
    if url not in BATCH_URLS:
        named = f"url {url}" if url in OTHER_BATCH_URLS else "url"
        raise _Skip(f"{named}: generates no text to measure; only /v1/chat/completions and /v1/completions "
                    "lines are read")
    body = data["body"]
    if not isinstance(body, dict):
        raise _Skip("body: expected a JSON object (the request)")
    needed = "messages" if BATCH_URLS[url] == "chat" else "prompt"
    if body.get(needed) is None:
        raise _Skip(f"the url is {url}, but the body has no {needed}")
    custom_id = data["custom_id"]
    if not isinstance(custom_id, str) or not 1 <= len(custom_id.strip()) <= 200:
        raise _Skip("custom_id must be a string of 1 to 200 characters")
    return _request_line(body, no, nth, max_prompt_chars, rid=custom_id.strip())


def _turn(turn: Any, i: int) -> Message:
    """One ShareGPT turn (``from``/``value``, or ``role``/``content``) as a chat message."""
    if not isinstance(turn, dict):
        raise _Skip(f"conversations.{i}: expected an object with from and value")
    role, value = turn.get("from", turn.get("role")), turn.get("value", turn.get("content"))
    if not isinstance(role, str) or role.lower() not in SHAREGPT_ROLES:
        raise _Skip(f"conversations.{i}: from must be human, gpt or system (or user, assistant)")
    if not isinstance(value, str):
        raise _Skip(f"conversations.{i}: value must be text")
    return Message(role=SHAREGPT_ROLES[role.lower()], content=value)


def _sharegpt_item(data: dict[str, Any], no: int, nth: int, max_prompt_chars: int) -> _Read:
    """A ShareGPT conversation: the turns up to the last human one are the prompt (chat); the answer
    recorded after it sets max_tokens when the line gives none (answer_max_tokens)."""
    ignored = _screen(data, SHAREGPT_FIELDS, tolerant=True)
    turns = data.get("conversations")
    if not isinstance(turns, list) or not turns:
        raise _Skip("conversations: give a list of at least one turn")
    messages = [_turn(t, i) for i, t in enumerate(turns)]
    humans = [i for i, m in enumerate(messages) if m.role == "user"]
    if not humans:
        raise _Skip("the conversation has no human turn, so there is no prompt to send")
    answer = next((m for m in messages[humans[-1] + 1:] if m.role == "assistant"), None)
    prompt = messages[:humans[-1] + 1]
    system = data.get("system")
    if system is not None:
        if not isinstance(system, str):
            raise _Skip("system must be text")
        prompt.insert(0, Message(role="system", content=system))
    tag, from_metadata = _tag_of(data)
    if from_metadata:
        ignored.remove("metadata")
    recorded = answer_max_tokens(len(answer.content.split())) if answer else None
    req = _request(_id(data.get("id"), nth), no, prompt, _sampling_of(data), tag=tag,
                   max_prompt_chars=max_prompt_chars, max_tokens=recorded or DEFAULT_MAX_TOKENS)
    return _Read(req, tuple(ignored))


_PARSERS: dict[str, Callable[[dict[str, Any], int, int, int], _Read]] = {
    "openai-batch": _batch_line, "sharegpt": _sharegpt_item, "request": _request_line}


def _kind(data: dict[str, Any]) -> str:
    """Which form one JSON object is in: a Batch line, a ShareGPT conversation, or a request."""
    if "custom_id" in data or ("url" in data and "body" in data):
        return "openai-batch"
    return "sharegpt" if "conversations" in data else "request"


def _form_of(kind: str, objects: list[dict[str, Any]]) -> Format:
    """The file's form from its first object's kind; request lines carrying OpenAI's own fields are
    OpenAI request bodies, else our JSONL."""
    if kind != "request":
        return "openai-batch" if kind == "openai-batch" else "sharegpt"
    openai_only = {*IGNORED_FIELDS, *REFUSED_FIELDS, "max_completion_tokens"}
    return "openai-body" if any(not openai_only.isdisjoint(d) for d in objects) else "jsonl"


class _Row(NamedTuple):
    no: int  # the line it starts on
    nth: int  # its id when it gives none: the line number (JSON lines), the item number (an array)
    data: Any  # the parsed JSON value; None with a problem
    problem: str | None = None


def _read_objects(rows: list[_Row], name: str, max_prompt_chars: int) -> tuple[Format, list[_Item]]:
    """Every JSON row through its form's parser; the file's form is its first object's, and an object
    of another form is its line's issue (one form per file)."""
    objects = [r.data for r in rows if isinstance(r.data, dict)]
    first = _kind(objects[0]) if objects else "request"
    form = _form_of(first, objects)
    items: list[_Item] = []
    for no, nth, data, problem in rows:
        try:
            if problem is not None:
                raise _Skip(problem)
            if not isinstance(data, dict):
                raise _Skip(f'expected a JSON object such as {{"prompt": "..."}}, got {type(data).__name__}')
            if (kind := _kind(data)) != first:
                raise _Skip(f"{KIND_NAMES[kind]} in a file read as {FORMAT_LABELS[form]} (from its first "
                            "request); give one form per file")
            items.append(_PARSERS[kind](data, no, nth, max_prompt_chars))
        except _Skip as e:
            items.append(LoadIssue(file=name, line=no, message=str(e)))
    return form, items


def _line_rows(text: str) -> Iterator[_Row]:
    """One JSON value a line (JSONL); blank lines separate nothing and are not an error."""
    # Split on "\n" only: str.splitlines() would also split inside a JSON string holding a raw U+2028
    # or \x85 (json.dumps(ensure_ascii=False) writes them as is) and shift every line number after it.
    for no, line in enumerate(text.split("\n"), start=1):
        raw = line.removesuffix("\r")
        if not raw.strip():
            continue
        try:
            yield _Row(no, no, json.loads(raw))
        except json.JSONDecodeError as e:
            yield _Row(no, no, None, f"not valid JSON ({e.msg} at column {e.colno})")


def _array_rows(text: str, name: str) -> Iterator[_Row]:
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
            yield _Row(line, nth, value)
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
            f"{', '.join(CSV_COLUMNS[4:])}; found: {', '.join(repr(_shown(c)) for c in columns) or 'nothing'}")
    return columns


def _csv_row(row: dict[str, str], start: int, max_prompt_chars: int, text_api: Api) -> _Read:
    """One CSV row: its prompt (one user message, or a completions prompt), numbers, stop and tag."""
    prompt = row["prompt"]
    if not prompt.strip():
        raise _Skip("the prompt is empty")
    if over := prompt_size_problem(len(prompt), max_prompt_chars):
        raise _Skip(over)
    values: dict[str, Any] = {}
    problems: list[str] = []
    for column, kind in CSV_NUMBERS.items():
        value, problem = _number(row.get(column), kind, column)
        problems += [problem] if problem else []
        if value is not None:
            values[column] = value
    if problems:
        raise _Skip("; ".join(problems))
    if row.get("stop"):
        values["stop"] = row["stop"]  # one stop sequence
    tag = (row.get("tag") or row.get("category") or "").strip() or None
    if tag is not None and len(tag) > 64:
        raise _Skip("tag must be text of 1 to 64 characters")
    text: list[Message] | str = [Message(role="user", content=prompt)] if text_api == "chat" else prompt
    rid = _id((row.get("id") or "").strip() or None, start)
    return _Read(_request(rid, start, text, _sampling_of(values), tag=tag, max_prompt_chars=max_prompt_chars), ())


def _csv(text: str, name: str, max_prompt_chars: int, text_api: Api) -> Iterator[_Item]:
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
                raise _Skip(f"{len(cells)} fields, but the header has {len(columns)}")
            yield _csv_row(dict(zip(columns, cells, strict=True)), start, max_prompt_chars, text_api)
        except _Skip as e:
            yield LoadIssue(file=name, line=start, message=str(e))


def _folder(folder: Path, max_bytes: int, max_prompt_chars: int, text_api: Api) -> Iterator[_Item]:
    """A folder of .txt / .md files, one prompt each, id = the file name."""
    files = sorted(p for p in folder.iterdir() if p.is_file() and p.suffix.lower() in TEXT_SUFFIXES)
    if not files:
        others = sum(1 for p in folder.iterdir() if p.is_file())
        raise WorkloadError(f"folder {folder.name} has no .txt or .md files ({others} other files); "
                            "put one prompt in each .txt or .md file")
    _check_size(sum(p.stat().st_size for p in files), f"folder {folder.name} (its .txt/.md files)", max_bytes)
    for p in files:
        try:
            try:
                text = _decode(p.read_bytes(), p.name)
            except WorkloadError as e:  # one file in the wrong encoding skips that file, not the folder
                raise _Skip(str(e).removeprefix(f"{p.name}: ")) from None
            if not text.strip():
                raise _Skip("the file is empty")
            body: list[Message] | str = [Message(role="user", content=text)] if text_api == "chat" else text
            yield _Read(_request(p.name, None, body, _LineFields(), tag=None, max_prompt_chars=max_prompt_chars), ())
        except _Skip as e:
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


Shape = Literal["json-array", "json-lines", "csv"]


def _recognise(text: str, suffix: str, name: str) -> Shape:
    """How to read the file, from its content first: a JSON array, JSON lines, or CSV; the extension
    decides only when the content does not (so a broken .jsonl still gets its lines' errors)."""
    head = text.lstrip()
    lines = [line for line in text.split("\n", 4 * RECOGNISE_LINES)[:4 * RECOGNISE_LINES] if line.strip()]
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


def _read_file(path: Path, name: str, max_bytes: int, max_prompt_chars: int, text_api: Api
               ) -> tuple[Format, list[_Item]]:
    """A workload file: its size checked before reading, its text decoded, its form recognised, read."""
    _check_size(path.stat().st_size, name, max_bytes)
    text = _decode(path.read_bytes(), name)
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
    rows = _array_rows(text, name) if shape == "json-array" else _line_rows(text)
    return _read_objects(list(rows), name, max_prompt_chars)


def _summary(issues: list[LoadIssue]) -> str:
    listed = "; ".join(str(i) for i in issues[:MAX_LISTED])
    more = f"; and {len(issues) - MAX_LISTED} more" if len(issues) > MAX_LISTED else ""
    return listed + more


def _collect(items: list[_Item], name: str, fmt: Format) -> tuple[list[WorkloadRequest], list[LoadIssue], Counter[str]]:
    """The requests (the first of each id), the issues (with duplicate ids), the ignored fields counted."""
    requests: list[WorkloadRequest] = []
    issues: list[LoadIssue] = []
    ignored: Counter[str] = Counter()
    seen: dict[str, int | None] = {}
    for item in items:
        if isinstance(item, LoadIssue):
            issues.append(item)
        elif item.request.id in seen:
            first = seen[item.request.id]
            where = f" (first on line {first})" if first is not None else ""
            issues.append(LoadIssue(file=name if fmt != "folder" else item.request.id, line=item.request.line,
                                    message=f"duplicate id {item.request.id!r}{where}; ids must be unique"))
        else:
            seen[item.request.id] = item.request.line
            requests.append(item.request)
            ignored.update(set(item.ignored))
    return requests, issues, ignored


def load_workload(path: Path | str, *, max_bytes: int, max_prompt_chars: int, strict: bool = False,
                  text_api: Api = "chat") -> Workload:
    """Load and validate a workload file or folder, in any accepted form; nothing is sent anywhere.

    ``max_bytes`` is ``Settings.workload_max_bytes`` (checked before reading), ``max_prompt_chars`` the
    app's prompt cap (an over-cap prompt is its line's issue). ``text_api`` is how CSV and folder
    prompts are sent. Returns the Workload (its form, requests, skipped lines, ignored fields counted).
    Raises ``WorkloadError`` (one line) when nothing usable remains, or with ``strict`` on any issue
    (``e.issues`` lists them).
    """
    path = Path(path)
    name = path.name or str(path)
    fmt: Format
    if path.is_dir():
        fmt, items = "folder", list(_folder(path, max_bytes, max_prompt_chars, text_api))
    elif not path.is_file():
        raise WorkloadError(f"{path}: no such file or folder; give a workload file (JSONL, CSV, OpenAI batch, "
                            "ShareGPT) or a folder of .txt files")
    else:
        fmt, items = _read_file(path, name, max_bytes, max_prompt_chars, text_api)
    requests, issues, ignored = _collect(items, name, fmt)
    if strict and issues:
        raise WorkloadError(f"{name}: {len(issues)} bad line(s), nothing was sent (strict): {_summary(issues)}",
                            issues)
    if not requests:
        detail = f": {_summary(issues)}" if issues else ": the header has no rows under it"
        raise WorkloadError(f"{name} has no usable request{detail}", issues)
    stem = path.stem if fmt != "folder" else name
    return Workload(name=stem, source=str(path), format=fmt, requests=requests, issues=issues,
                    ignored_fields=dict(ignored))


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
