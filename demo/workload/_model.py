"""The workload's vocabulary: its forms, the fields each form may give (ignored or refused, and why),
the request, the loaded workload and its issues; the small helpers every reader shares."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from typing import Any, Literal, NamedTuple

from pydantic import BaseModel, Field

from demo.errors import BadInput
from demo.limits import MAX_TOKENS_LIMIT, MaxTokens, Temperature
from demo.results import Api, Message, RaceRequest
from demo.sampling import SAMPLING_FIELDS, SamplingFields
from demo.tool_request import ToolFields, tool_body

DEFAULT_MAX_TOKENS = 256  # RaceRequest's own default
DEFAULT_TEMPERATURE = 0.0
ANSWER_MAX_TOKENS_CAP = 2048  # a ShareGPT answer's length sets max_tokens up to this
TEXT_SUFFIXES = (".txt", ".md")
MAX_LISTED = 5  # issues named in one WorkloadError line
FIELD_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.]{0,39}")  # a key shown in a message or counted by name
RECOGNISE_LINES = 20  # non-blank lines looked at to recognise a JSON-lines file
Format = Literal["jsonl", "csv", "folder", "openai-batch", "openai-body", "sharegpt", "aiperf-single-turn",
                 "aiperf-multi-turn", "aiperf-trace", "guidellm", "litellm-payload", "litellm-spendlogs"]
FORMAT_LABELS: dict[str, str] = {
    "jsonl": "JSONL", "csv": "CSV", "folder": "a folder of files", "openai-batch": "OpenAI batch",
    "openai-body": "OpenAI request bodies", "sharegpt": "ShareGPT", "aiperf-single-turn": "AIPerf single_turn",
    "aiperf-multi-turn": "AIPerf multi_turn", "aiperf-trace": "AIPerf trace with messages",
    "guidellm": "GuideLLM", "litellm-payload": "LiteLLM StandardLoggingPayload",
    "litellm-spendlogs": "LiteLLM SpendLogs"}
# How a session's turns get their history: "logged", each turn's whole history as the file gives it
# (the answers the file logged, the same on both sides); "own", each side carries its own answer into
# its next turn, as an agent would (AIPerf multi_turn, a trace's message_mode "delta").
History = Literal["logged", "own"]

# The length, seed and sampling fields every form may give (max_completion_tokens: OpenAI's newer name).
LENGTH_AND_SAMPLING = ("max_tokens", "max_completion_tokens", "temperature", "seed", *SAMPLING_FIELDS)
TOOL_FIELDS = ("tools", "tool_choice", "parallel_tool_calls")  # sent as given: demo/tool_request.py
REQUEST_FIELDS = ("messages", "prompt", "id", "tag", "category", *LENGTH_AND_SAMPLING, *TOOL_FIELDS)
CSV_NUMBERS: dict[str, type[int] | type[float]] = {
    "max_tokens": int, "temperature": float, "seed": int, "top_p": float, "top_k": int, "min_p": float,
    "presence_penalty": float, "frequency_penalty": float, "repetition_penalty": float,
    "output_tokens_count": int, "prompt_tokens_count": int}  # the last two: GuideLLM's columns
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
    "function_call": "no functions are sent",
    "timestamp": "kept as the arrival time for `load --replay`; the sweep paces requests by its concurrency",
    "delay": "a wait after the turn before: not replayed; the sweep paces requests by its concurrency",
    "input_length": "a token count: the server counts the prompt itself",
    "prompt_tokens_count": "a token count: the server counts the prompt itself",
    "hash_ids": "block hashes of a synthetic prompt: the text is sent instead",
    "turns.assistant": "a logged answer: each side's own answer takes its place",
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
    "functions": (_set, "OpenAI's old function calling; give tools (sent as given) instead"),
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
    if field.startswith("log."):
        return IGNORED_FIELDS.get(field.removeprefix("log."), "a gateway's own field of the logged request: not sent")
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


class LoggedAnswer(BaseModel):
    """What a log says its own server did with this request ("as logged", shown beside ours, never
    mixed into our figures): the answer's tokens and the timings, each None when not logged."""

    completion_tokens: int | None = None
    prompt_tokens: int | None = None
    ttft_s: float | None = None  # completionStartTime - startTime
    e2e_s: float | None = None  # endTime - startTime


class WorkloadRequest(SamplingFields, ToolFields):
    """One request of a workload, in the project's request vocabulary (see RaceRequest): its text,
    its sampling and tools (sent alike to both sides, as given), the segment tag the file gave it,
    its session and turn, and where it came from."""

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
    session: str | None = Field(None, min_length=1, max_length=200)  # the session it is a turn of
    turn: int | None = Field(None, ge=1)  # its turn in the session, from 1
    logged: LoggedAnswer | None = None  # a log's own figures for it
    # True: ``messages`` are only this turn's new ones; each side sends them after what it sent for the
    # session's turn before and its own answer to it (demo/sweep/runner.py). False: the whole history.
    carry: bool = False
    # A delta turn's head: the answer the log recorded for the session's turn before (an assistant
    # message, its tool calls). Never sent: each side's own answer takes its place, and its calls are
    # compared with these (a turn that follows a call other than the logged one is counted).
    logged_answer: Message | None = None
    # When it arrived, in seconds on the file's own clock (AIPerf ``timestamp`` ms / 1000, LiteLLM's
    # ``startTime``); ``load --replay`` sends it at its offset from the first. None: the file gives none.
    arrival_s: float | None = Field(None, ge=0)

    @property
    def prompt_text(self) -> str:
        """All the text the model reads: the prompt, or the tool definitions (as JSON) and the
        messages' texts (a tool call's as JSON) joined."""
        if self.prompt is not None:
            return self.prompt
        tools = [json.dumps(tool_body(self)["tools"], ensure_ascii=False)] if self.tools else []
        return "\n\n".join(tools + [m.text for m in self.messages or []])

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
                           tools=self.tools, tool_choice=self.tool_choice,
                           parallel_tool_calls=self.parallel_tool_calls,
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
    repeated_ids: int = 0  # requests whose id an earlier one had: read, and given "<id>#2", "<id>#3"...
    history: History | None = None  # how sessions' turns get their history; None: no sessions

    @property
    def read(self) -> int:
        """Usable requests read from the file (before any sample)."""
        return self.sample.of_requests if self.sample else len(self.requests)

    @property
    def sessions(self) -> int:
        """Sessions among the requests: each named session once, each request without one alone."""
        return len({r.session for r in self.requests if r.session}) + sum(1 for r in self.requests if not r.session)

    @property
    def turns(self) -> int:
        """Turns sent: one per request."""
        return len(self.requests)

    def summary_lines(self) -> list[str]:
        """What the load gave, in words (the CLI and the page show these, computing nothing):
        "12 requests read (OpenAI batch), 2 skipped", then one line per ignored field."""
        head = (f"{self.read} request{'' if self.read == 1 else 's'} read ({FORMAT_LABELS[self.format]}), "
                f"{len(self.issues)} skipped")
        if self.sample:
            head += (f"; a sample of {self.sample.n} drawn with seed {self.sample.seed} from "
                     f"{self.sample.of_requests}")
        lines = [head]
        if self.history is not None:
            sessions, turns = self.sessions, self.turns
            how = ("played turn by turn, each side carrying its own answer into its next turn" if self.history == "own"
                   else "each turn's history as logged in the file (the same on both sides)")
            calls = sum(1 for r in self.requests if r.logged_answer is not None and r.logged_answer.tool_calls)
            if calls:
                how += (f"; {calls} turn{' follows' if calls == 1 else 's follow'} a logged tool call, replaced by "
                        "each side's own (the turns whose call differs are counted)")
            lines.append(f"{sessions} session{'' if sessions == 1 else 's'}, {turns} turn{'' if turns == 1 else 's'}; "
                         + how)
        if self.repeated_ids:
            lines.append(f"{self.repeated_ids} repeated id{'' if self.repeated_ids == 1 else 's'} made unique "
                         "(the second <id> is <id>#2); every line was read")
        return lines + [f"{field}: ignored on {n} line{'' if n == 1 else 's'}: {ignored_reason(field)}"
                        for field, n in sorted(self.ignored_fields.items())]


class LineFields(SamplingFields):
    """A line's length, temperature, seed and sampling as written, before defaults are applied."""

    # strict: true is not a max_tokens, "0.7" is not a temperature.
    model_config = {"extra": "forbid", "strict": True}

    max_tokens: int | None = Field(None, ge=1, le=MAX_TOKENS_LIMIT)
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    seed: int | None = Field(None, ge=-(2**63), lt=2**64)


class SkipLine(Exception):  # noqa: N818 - a line skipped, not a failure
    """A line to skip: the one-line reason (never the line's text)."""


class ReadRequest(NamedTuple):
    request: WorkloadRequest
    ignored: tuple[str, ...]  # the fields of its line not sent (counted in Workload.ignored_fields)


Item = ReadRequest | LoadIssue
Parsed = ReadRequest | list[ReadRequest]  # one line is one request, or (a multi_turn session) one per turn


UNRECOGNISED = (
    "the form of this file is not recognised. Accepted forms: "
    'JSONL {"prompt": "..."} or {"messages": [{"role": "user", "content": "..."}]}; '
    'OpenAI request bodies {"model": "m", "messages": [...], "max_tokens": 100} (one a line, or one as the '
    "whole .json file, or a folder of them); "
    'OpenAI batch {"custom_id": "r1", "method": "POST", "url": "/v1/chat/completions", "body": {...}}; '
    'ShareGPT [{"id": "c1", "conversations": [{"from": "human", "value": "..."}]}]; '
    'AIPerf single_turn {"text": "..."}, multi_turn {"session_id": "s", "turns": [...]} or a trace with '
    '"messages"; GuideLLM {"prompt": "...", "output_tokens_count": 100}; LiteLLM StandardLoggingPayload or '
    "SpendLogs rows; CSV with a header line naming a prompt column; a folder of .txt/.md/.json files "
    "(docs/workloads.md)")
# A trace of token counts only: refused whole, with why and what works instead.
TOKEN_ONLY = (
    "is a trace of token counts (timestamp, input_length, output_length, hash_ids) with no text: speculation's "
    "gain depends on the text (a drafter guesses the next words from it), so it cannot be judged from counts; "
    "give the prompts: the same trace with \"messages\" per line, AIPerf single_turn or multi_turn, OpenAI "
    "request bodies or ShareGPT (docs/workloads.md)")
KIND_NAMES = {"openai-batch": "an OpenAI Batch line", "sharegpt": "a ShareGPT conversation",
              "request": "a request line", "aiperf-single-turn": "an AIPerf single_turn line",
              "aiperf-multi-turn": "an AIPerf multi_turn session", "aiperf-trace": "a trace line with messages",
              "guidellm": "a GuideLLM line", "litellm": "a LiteLLM log row", "token-trace": "a token-count trace line"}


# --------------------------------------------------------------------------- helpers


def _mb(n: int) -> str:
    return f"{n / 1_000_000:.1f} MB" if n >= 1_000_000 else f"{n:,} bytes"


def shown_field(field: str) -> str:
    """A field name of the file as we may show it: an identifier of up to 40 characters; any other key
    may be the file's text, so it is not shown."""
    return field if FIELD_NAME.fullmatch(field) else "(a key that is not a field name)"


def decode_text(data: bytes, name: str) -> str:
    """UTF-8 (a leading BOM is dropped); otherwise a WorkloadError naming the line and byte offset."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise WorkloadError(
            f"{name}: line {line} (byte offset {e.start}) is not UTF-8 text; save the file as UTF-8 and load it again"
        ) from None


def check_size(size: int, name: str, max_bytes: int) -> None:
    if size > max_bytes:
        raise WorkloadError(
            f"{name} is {_mb(size)}, over the {_mb(max_bytes)} limit; sample it down or raise "
            "SPECDEMO_WORKLOAD_MAX_BYTES")
