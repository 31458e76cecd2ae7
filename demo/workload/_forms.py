"""One parser per form of JSON object, and which form an object is in: a request line or body, an
OpenAI Batch line, a ShareGPT conversation, a load tool's line (demo.workload._loadtools), a gateway's
log row (demo.workload._gateway); a file's objects read through their form's parser."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from demo.results import Message
from demo.workload._gateway import is_litellm, is_spendlogs, litellm_row
from demo.workload._lines import line_id, make_request, request_line, sampling_of, screen_fields, tag_of, unknown_field
from demo.workload._loadtools import (
    aiperf_multi_turn,
    aiperf_single_turn,
    aiperf_trace_line,
    guidellm_line,
    token_trace_line,
)
from demo.workload._model import (
    BATCH_URLS,
    DEFAULT_MAX_TOKENS,
    FORMAT_LABELS,
    IGNORED_FIELDS,
    KIND_NAMES,
    OTHER_BATCH_URLS,
    REFUSED_FIELDS,
    SHAREGPT_FIELDS,
    SHAREGPT_ROLES,
    TOKEN_ONLY,
    TOOL_FIELDS,
    Format,
    Item,
    LoadIssue,
    Parsed,
    ReadRequest,
    SkipLine,
    WorkloadError,
    answer_max_tokens,
)

# --------------------------------------------------------------------------- one parser per form


BATCH_FIELDS = ("custom_id", "method", "url", "body")


def _batch_line(data: dict[str, Any], no: int, nth: int, max_prompt_chars: int) -> ReadRequest:
    """An OpenAI Batch API line: ``custom_id`` is the id, ``url`` the API, ``body`` the request."""
    if missing := [k for k in BATCH_FIELDS if k not in data]:
        raise SkipLine(f"an OpenAI Batch line needs custom_id, method, url and body (missing: {', '.join(missing)})")
    if extra := [k for k in data if k not in BATCH_FIELDS]:
        raise SkipLine("; ".join(unknown_field(k, BATCH_FIELDS) for k in extra))
    if data["method"] != "POST":
        raise SkipLine("method: only POST lines are requests")
    url = data["url"] if isinstance(data["url"], str) else ""
    if url not in BATCH_URLS:
        named = f"url {url}" if url in OTHER_BATCH_URLS else "url"
        raise SkipLine(f"{named}: generates no text to measure; only /v1/chat/completions and /v1/completions "
                    "lines are read")
    body = data["body"]
    if not isinstance(body, dict):
        raise SkipLine("body: expected a JSON object (the request)")
    needed = "messages" if BATCH_URLS[url] == "chat" else "prompt"
    if body.get(needed) is None:
        raise SkipLine(f"the url is {url}, but the body has no {needed}")
    custom_id = data["custom_id"]
    if not isinstance(custom_id, str) or not 1 <= len(custom_id.strip()) <= 200:
        raise SkipLine("custom_id must be a string of 1 to 200 characters")
    return request_line(body, no, nth, max_prompt_chars, rid=custom_id.strip())


def _turn(turn: Any, i: int) -> Message:
    """One ShareGPT turn (``from``/``value``, or ``role``/``content``) as a chat message."""
    if not isinstance(turn, dict):
        raise SkipLine(f"conversations.{i}: expected an object with from and value")
    role, value = turn.get("from", turn.get("role")), turn.get("value", turn.get("content"))
    if not isinstance(role, str) or role.lower() not in SHAREGPT_ROLES:
        raise SkipLine(f"conversations.{i}: from must be human, gpt or system (or user, assistant)")
    if not isinstance(value, str):
        raise SkipLine(f"conversations.{i}: value must be text")
    return Message(role=SHAREGPT_ROLES[role.lower()], content=value)


def _sharegpt_item(data: dict[str, Any], no: int, nth: int, max_prompt_chars: int) -> ReadRequest:
    """A ShareGPT conversation: the turns up to the last human one are the prompt (chat); the answer
    recorded after it sets max_tokens when the line gives none (answer_max_tokens)."""
    ignored = screen_fields(data, SHAREGPT_FIELDS, tolerant=True)
    turns = data.get("conversations")
    if not isinstance(turns, list) or not turns:
        raise SkipLine("conversations: give a list of at least one turn")
    messages = [_turn(t, i) for i, t in enumerate(turns)]
    humans = [i for i, m in enumerate(messages) if m.role == "user"]
    if not humans:
        raise SkipLine("the conversation has no human turn, so there is no prompt to send")
    answer = next((m for m in messages[humans[-1] + 1:] if m.role == "assistant"), None)
    prompt = messages[:humans[-1] + 1]
    system = data.get("system")
    if system is not None:
        if not isinstance(system, str):
            raise SkipLine("system must be text")
        prompt.insert(0, Message(role="system", content=system))
    tag, from_metadata = tag_of(data)
    if from_metadata:
        ignored.remove("metadata")
    recorded = answer_max_tokens(len(answer.text.split())) if answer else None
    req = make_request(line_id(data.get("id"), nth), no, prompt, sampling_of(data), tag=tag,
                   max_prompt_chars=max_prompt_chars, max_tokens=recorded or DEFAULT_MAX_TOKENS)
    return ReadRequest(req, tuple(ignored))


_Parser = Callable[[dict[str, Any], int, int, int], Parsed]
_PARSERS: dict[str, _Parser] = {
    "openai-batch": _batch_line, "sharegpt": _sharegpt_item, "request": request_line,
    "aiperf-single-turn": aiperf_single_turn, "aiperf-multi-turn": aiperf_multi_turn, "aiperf-trace": aiperf_trace_line,
    "guidellm": guidellm_line, "litellm": litellm_row, "token-trace": token_trace_line}
# A plain request line (messages only) is a trace line in a trace file: AIPerf's fields are optional there.
COMPATIBLE = {("aiperf-trace", "request")}
TRACE_MARKS = ("session_id", "timestamp", "delay", "output_length", "extra", "message_mode", "input_length",
               "hash_ids")


def form_of(data: dict[str, Any]) -> str:
    """Which form one JSON object is in: a Batch line, a ShareGPT conversation, a load tool's line
    (AIPerf, GuideLLM), a gateway's log row (LiteLLM), a token-count trace line, or a request."""
    if "custom_id" in data or ("url" in data and "body" in data):
        return "openai-batch"
    if "conversations" in data:
        return "sharegpt"
    if is_litellm(data):
        return "litellm"
    if "turns" in data:
        return "aiperf-multi-turn"
    if "messages" not in data and "prompt" not in data:
        if "text" in data or "texts" in data:
            return "aiperf-single-turn"
        if "input_length" in data or "hash_ids" in data:
            return "token-trace"
    if "messages" in data and any(k in data for k in TRACE_MARKS):
        return "aiperf-trace"
    if "prompt" in data and ("output_tokens_count" in data or "prompt_tokens_count" in data):
        return "guidellm"
    return "request"


def _form_of(kind: str, objects: list[dict[str, Any]]) -> Format:
    """The file's form from its first object's kind; request lines carrying OpenAI's own fields are
    OpenAI request bodies, else our JSONL."""
    if kind == "litellm":
        return "litellm-spendlogs" if is_spendlogs(objects[0]) else "litellm-payload"
    if kind != "request":
        forms: dict[str, Format] = {
            "openai-batch": "openai-batch", "sharegpt": "sharegpt", "aiperf-single-turn": "aiperf-single-turn",
            "aiperf-multi-turn": "aiperf-multi-turn", "aiperf-trace": "aiperf-trace", "guidellm": "guidellm"}
        return forms[kind]
    openai_only = {*IGNORED_FIELDS, *REFUSED_FIELDS, *TOOL_FIELDS, "max_completion_tokens"}
    return "openai-body" if any(not openai_only.isdisjoint(d) for d in objects) else "jsonl"


class Row(NamedTuple):
    no: int  # the line it starts on
    nth: int  # its id when it gives none: the line number (JSON lines), the item number (an array)
    data: Any  # the parsed JSON value; None with a problem
    problem: str | None = None


def read_objects(rows: list[Row], name: str, max_prompt_chars: int) -> tuple[Format, list[Item]]:
    """Every JSON row through its form's parser; the file's form is its first object's, and an object
    of another form is its line's issue (one form per file). A file that starts with a token-count
    trace line is refused whole: it has no text to judge."""
    objects = [r.data for r in rows if isinstance(r.data, dict)]
    first = form_of(objects[0]) if objects else "request"
    if first == "token-trace":
        raise WorkloadError(f"{name} {TOKEN_ONLY}")
    form = _form_of(first, objects)
    items: list[Item] = []
    for no, nth, data, problem in rows:
        try:
            if problem is not None:
                raise SkipLine(problem)
            if not isinstance(data, dict):
                raise SkipLine(f'expected a JSON object such as {{"prompt": "..."}}, got {type(data).__name__}')
            kind = form_of(data)
            if (first, kind) in COMPATIBLE:
                kind = first
            if kind != first and kind != "token-trace":
                raise SkipLine(f"{KIND_NAMES[kind]} in a file read as {FORMAT_LABELS[form]} (from its first "
                            "request); give one form per file")
            parsed = _PARSERS[kind](data, no, nth, max_prompt_chars)
            items.extend(parsed if isinstance(parsed, list) else [parsed])
        except SkipLine as e:
            items.append(LoadIssue(file=name, line=no, message=str(e)))
    return form, items
