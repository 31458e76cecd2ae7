"""The checks every line of every form goes through: its fields screened, its sampling, id, tag,
messages and prompt validated; a bad line is a ``SkipLine`` with a one-line reason (never its text)."""

from __future__ import annotations

import difflib
from typing import Any

from pydantic import ValidationError

from common.validation import validation_summary
from demo.race import prompt_size_problem
from demo.results import Message
from demo.sampling import SAMPLING_FIELDS
from demo.tool_request import ToolFields
from demo.workload._model import (
    DEFAULT_MAX_TOKENS,
    DEFAULT_TEMPERATURE,
    IGNORED_FIELDS,
    LENGTH_AND_SAMPLING,
    REFUSED_FIELDS,
    REQUEST_FIELDS,
    TOOL_FIELDS,
    LineFields,
    ReadRequest,
    SkipLine,
    WorkloadRequest,
    shown_field,
)

# --------------------------------------------------------------------------- shared per-line validation


def unknown_field(field: str, known: tuple[str, ...]) -> str:
    close = difflib.get_close_matches(field, known, n=1)
    hint = f"did you mean {close[0]!r}?" if close else "docs/workloads.md lists the fields a line may have"
    shown = shown_field(field)
    return f"unknown field {shown!r} ({hint})" if shown == field else f"unknown field {shown} ({hint})"


def screen_fields(data: dict[str, Any], known: tuple[str, ...], *, tolerant: bool = False) -> list[str]:
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
            ignored.append(shown_field(key))
        else:
            problems.append(unknown_field(key, known))
    if problems:
        raise SkipLine("; ".join(problems))
    return ignored


def sampling_of(data: dict[str, Any]) -> LineFields:
    """A line's length, temperature, seed and sampling fields, checked (strict types, bounds)."""
    fields = {k: data[k] for k in LENGTH_AND_SAMPLING if data.get(k) is not None}
    newer = fields.pop("max_completion_tokens", None)
    if newer is not None:
        if fields.get("max_tokens", newer) != newer:
            raise SkipLine("max_tokens and max_completion_tokens differ; give one")
        fields["max_tokens"] = newer
    fmt = fields.get("response_format")
    if isinstance(fmt, dict) and fmt.get("type") not in ("text", "json_object", "json_schema"):
        raise SkipLine("response_format: its type is not text, json_object or json_schema "
                    "(the ones vLLM's structured outputs take)")
    try:
        return LineFields.model_validate(fields)
    except ValidationError as e:
        raise SkipLine(validation_summary(e, every=True)) from None


def line_id(value: Any, no: int | None) -> str:
    """The line's id: a string or a whole number, 1 to 200 characters; the line number by default."""
    if value is None:
        return str(no)
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise SkipLine("id must be a string or a whole number")
    rid = str(value).strip()
    if not rid or len(rid) > 200:
        raise SkipLine("id must be 1 to 200 characters")
    return rid


def tag_of(data: dict[str, Any]) -> tuple[str | None, bool]:
    """The line's segment tag (``tag``, ``category`` or ``metadata.tag``/``.category``) and whether
    ``metadata`` gave it."""
    if "tag" in data and "category" in data:
        raise SkipLine("give tag or category, not both")
    value, from_metadata = data.get("tag", data.get("category")), False
    meta = data.get("metadata")
    if value is None and isinstance(meta, dict):
        value = meta.get("tag", meta.get("category"))
        from_metadata = value is not None
    if value is None:
        return None, False
    if not isinstance(value, str) or not 1 <= len(value.strip()) <= 64:
        raise SkipLine("tag must be text of 1 to 64 characters")
    return value.strip(), from_metadata


def _tools_of(data: dict[str, Any]) -> ToolFields:
    """A line's tools, tool_choice and parallel_tool_calls, checked (OpenAI's shape), kept as given."""
    fields = {k: data[k] for k in TOOL_FIELDS if data.get(k) is not None}
    try:
        return ToolFields.model_validate(fields)
    except ValidationError as e:
        raise SkipLine(validation_summary(e, every=True)) from None


def make_request(rid: str, no: int | None, text: list[Message] | str, fields: LineFields, *, tag: str | None,
                 max_prompt_chars: int, max_tokens: int = DEFAULT_MAX_TOKENS, tools: ToolFields | None = None,
                 **where: Any) -> WorkloadRequest:
    """The request a line gives, with the defaults applied; an empty or over-cap prompt skips it.
    ``where``: its session, turn and logged figures, when the form has them."""
    sampling = {name: getattr(fields, name) for name in SAMPLING_FIELDS}
    text_field: dict[str, Any] = {"prompt": text} if isinstance(text, str) else {"messages": text}
    tool_fields = tools.model_dump(exclude_none=True) if tools is not None else {}
    if tool_fields and isinstance(text, str):
        raise SkipLine("tools go with chat messages; a completions prompt cannot carry them")
    req = WorkloadRequest(id=rid, line=no, api="completions" if isinstance(text, str) else "chat", tag=tag,
                          max_tokens=fields.max_tokens or max_tokens, seed=fields.seed,
                          temperature=DEFAULT_TEMPERATURE if fields.temperature is None else fields.temperature,
                          **text_field, **sampling, **tool_fields, **where)
    if not req.prompt_text.strip():
        raise SkipLine("the prompt is empty")
    if over := prompt_size_problem(len(req.prompt_text), max_prompt_chars):
        raise SkipLine(over)
    return req


MEDIA_PARTS = ("image_url", "input_image", "image", "input_audio", "audio", "video_url", "file")
MESSAGE_KEYS = {"role", "content", "name", "tool_calls", "tool_call_id"}
ANY_CALL = "\0"  # a delta turn's leading tool answers answer the call the turn before made (not in the file)


def message_content(value: Any, where: str) -> str:
    """A message's content: text, or OpenAI's list of text parts joined; an image (or other media) is
    refused with why."""
    if isinstance(value, str):
        return value
    if isinstance(value, list) and any(isinstance(p, dict) and p.get("type") in MEDIA_PARTS for p in value):
        raise SkipLine(f"{where}.content: image or other media content: only text is measured (the servers' "
                    "models read text, and a drafter predicts words, not pixels); give the text parts only")
    if isinstance(value, list) and all(isinstance(p, dict) and p.get("type") == "text"
                                       and isinstance(p.get("text"), str) for p in value):
        return "".join(p["text"] for p in value)
    raise SkipLine(f"{where}.content: only text is measured (give a string or a list of text parts)")


def _messages(value: Any, *, delta: bool = False) -> tuple[list[Message], list[str]]:
    """Chat messages (OpenAI's: ``developer`` is a system message) and the fields ignored in them. An
    agent's turns are kept as given: an assistant's ``tool_calls`` (its content may be null) and the
    ``role: tool`` answers, each after the call it answers. ``delta``: a session turn's new messages
    only, whose leading ``role: tool`` answers may answer the turn before's call (each side's own,
    their ids rewritten to its calls' when sent: demo/sweep/runner.py)."""
    if not isinstance(value, list) or not value:
        raise SkipLine("messages: give a list of at least one message")
    out: list[Message] = []
    ignored: list[str] = []
    # The ids of the last assistant turn's calls; None: no call made yet; ANY_CALL: the turn before's.
    calls: set[str] | None = {ANY_CALL} if delta else None
    for i, m in enumerate(value):
        if not isinstance(m, dict):
            raise SkipLine(f"messages.{i}: expected an object with role and content")
        if extra := sorted(set(m) - MESSAGE_KEYS):
            raise SkipLine(f"messages.{i}: {shown_field(extra[0])}: a message is sent with role, content, tool_calls "
                        "and tool_call_id only")
        ignored += ["messages.name"] if "name" in m else []
        role = "system" if m.get("role") == "developer" else m.get("role")
        if role == "function":
            raise SkipLine(f"messages.{i}: role function is OpenAI's old form; give tool_calls and role: tool")
        content = m.get("content")
        if not (content is None and role == "assistant" and m.get("tool_calls")):
            content = message_content(content, f"messages.{i}")
        data: dict[str, Any] = {"role": role, "content": content}
        data.update({k: m[k] for k in ("tool_calls", "tool_call_id") if m.get(k) is not None})
        try:
            msg = Message.model_validate(data)
        except ValidationError as e:
            raise SkipLine(f"messages.{i}.{validation_summary(e, every=True)}") from None
        if msg.role == "assistant":
            calls = {c.id for c in msg.tool_calls} if msg.tool_calls else None
        elif msg.role == "tool":
            if calls is None:
                raise SkipLine(f"messages.{i}: a role: tool message with no assistant tool_calls before it; give the "
                            "assistant turn that made the call")
            if msg.tool_call_id is not None and msg.tool_call_id not in calls and ANY_CALL not in calls:
                raise SkipLine(f"messages.{i}: tool_call_id names no call of the assistant turn before it")
        else:
            calls = None
        out.append(msg)
    return out, ignored


def _prompt(value: Any) -> str:
    """A completions prompt: text, or a list holding one text."""
    if isinstance(value, list) and len(value) == 1:
        value = value[0]
    if not isinstance(value, str):
        raise SkipLine("prompt: give one text prompt (a list of prompts or of token ids is not measured)")
    return value


def request_line(data: dict[str, Any], no: int, nth: int, max_prompt_chars: int, rid: str | None = None, *,
                 ignored: tuple[str, ...] = (), max_tokens: int = DEFAULT_MAX_TOKENS, tolerant: bool = False,
                 delta: bool = False, **where: Any) -> ReadRequest:
    """Our JSONL line or an OpenAI request body (chat or completions) on line ``no``, the ``nth``
    object of its file (its id when it gives none); ``rid``: the Batch line's (or a log's) id.
    ``ignored``: fields the caller already set aside (counted); ``max_tokens``: the default when the
    line gives none; ``tolerant``: a log's unknown fields are ignored (counted), not refused;
    ``delta``: the messages are a session turn's new ones (``_messages``); ``where``: the session,
    turn and logged figures of the request."""
    screened = screen_fields(data, REQUEST_FIELDS, tolerant=tolerant)
    if rid is not None and "id" in data and not tolerant:
        raise SkipLine("body.id: the Batch line's custom_id is its id")
    has_messages, has_prompt = data.get("messages") is not None, data.get("prompt") is not None
    if has_messages == has_prompt:
        raise SkipLine('give exactly one of "messages" (chat) or "prompt" (completions)')
    text: list[Message] | str
    if has_messages:
        text, in_messages = _messages(data["messages"], delta=delta)
        screened += in_messages
    else:
        text = _prompt(data["prompt"])
    tag, from_metadata = tag_of(data)
    if from_metadata:
        screened.remove("metadata")
    req = make_request(rid if rid is not None else line_id(data.get("id"), nth), no, text, sampling_of(data), tag=tag,
                   max_prompt_chars=max_prompt_chars, max_tokens=max_tokens, tools=_tools_of(data), **where)
    return ReadRequest(req, (*ignored, *screened))
