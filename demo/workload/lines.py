"""The checks every line of every form goes through: its fields screened, its sampling, id, tag,
messages and prompt validated; a bad line is a ``_Skip`` with a one-line reason (never its text)."""

from __future__ import annotations

import difflib
from typing import Any

from pydantic import ValidationError

from demo.race import prompt_size_problem
from demo.results import Message
from demo.sampling import SAMPLING_FIELDS
from demo.workload.model import (
    DEFAULT_MAX_TOKENS,
    DEFAULT_TEMPERATURE,
    IGNORED_FIELDS,
    LENGTH_AND_SAMPLING,
    REFUSED_FIELDS,
    WorkloadRequest,
    _LineFields,
    _shown,
    _Skip,
    _validation_message,
)

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
