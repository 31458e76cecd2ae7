"""The load tools' forms: AIPerf's ``single_turn``, ``multi_turn`` and trace lines carrying ``messages``
(its custom datasets and trace replay), and GuideLLM's JSONL columns. Each becomes requests in the
project's vocabulary; ``extra`` goes where the request's own fields go (sampling sent alike to both
sides, tools as given, an unknown field refused as on any line)."""

from __future__ import annotations

from typing import Any

from demo.workload.lines import _content, _id, _request_line, _screen, _unknown
from demo.workload.model import (
    DEFAULT_MAX_TOKENS,
    LENGTH_AND_SAMPLING,
    TOOL_FIELDS,
    _Read,
    _Skip,
)

# AIPerf's fields (docs: tutorials/custom-dataset.md, benchmark-modes/trace-replay.md).
SINGLE_TURN_FIELDS = ("text", "texts", "output_length", "extra", "timestamp", "delay", "id", "tag", "category")
TURN_FIELDS = ("role", "text", "texts", "output_length", "extra", "timestamp", "delay")
MULTI_TURN_FIELDS = ("session_id", "turns", "tag", "category")
TRACE_FIELDS = ("messages", "tools", "session_id", "timestamp", "delay", "output_length", "extra", "message_mode",
                "input_length", "hash_ids", "id", "tag", "category")
AIPERF_MEDIA = ("image", "images", "audio", "audios", "video", "videos")
EXTRA_FIELDS = (*LENGTH_AND_SAMPLING, *TOOL_FIELDS)  # what ``extra`` may set: the request's own fields
TOKEN_LINE = ("a line of token counts with no text: speculation's gain depends on the text, so it cannot be "
              'judged from counts; give the line its "messages" (docs/workloads.md)')
GUIDELLM_FIELDS = ("prompt", "output_tokens_count", "prompt_tokens_count", "id", "tag", "category",
                   *LENGTH_AND_SAMPLING)


def _media(data: dict[str, Any], where: str = "") -> None:
    if media := [k for k in AIPERF_MEDIA if data.get(k)]:
        raise _Skip(f"{where}{media[0]}: image or other media content: only text is measured (the servers' models "
                    "read text, and a drafter predicts words, not pixels); give the text only")


def _text(data: dict[str, Any], where: str = "") -> str:
    """AIPerf's ``text`` or ``texts`` (a list of texts, joined by blank lines)."""
    if ("text" in data) == ("texts" in data):
        raise _Skip(f'{where}give exactly one of "text" or "texts"')
    if "text" in data:
        if not isinstance(data["text"], str):
            raise _Skip(f"{where}text must be a string")
        return data["text"]
    texts = data["texts"]
    if not isinstance(texts, list) or not texts or not all(isinstance(t, str) for t in texts):
        raise _Skip(f"{where}texts must be a list of strings")
    return "\n\n".join(texts)


def _extra(data: dict[str, Any], where: str = "") -> dict[str, Any]:
    """``extra`` and ``output_length`` as request fields (``output_length`` is max_tokens)."""
    extra = data.get("extra") or {}
    if not isinstance(extra, dict):
        raise _Skip(f"{where}extra must be an object of request fields")
    if "messages" in extra or "prompt" in extra:
        raise _Skip(f"{where}extra: messages or prompt would replace the line's text; give the text as the line's own")
    fields = dict(extra)
    out = data.get("output_length")
    if out is not None:
        if fields.get("max_tokens", out) != out:
            raise _Skip(f"{where}output_length and extra.max_tokens differ; give one")
        fields["max_tokens"] = out
    return fields


def _screen_extra(fields: dict[str, Any], where: str) -> list[str]:
    try:
        return [f"extra.{k}" for k in _screen(fields, EXTRA_FIELDS)]
    except _Skip as e:
        raise _Skip(f"{where}extra: {e}") from None


def _arrival(data: dict[str, Any], where: str = "") -> dict[str, Any]:
    """AIPerf's ``timestamp`` (milliseconds) as the request's ``arrival_s``; none given: nothing."""
    ms = data.get("timestamp")
    if ms is None:
        return {}
    if isinstance(ms, bool) or not isinstance(ms, int | float) or not 0 <= ms < float("inf"):
        raise _Skip(f"{where}timestamp must be milliseconds, a number of at least 0")
    return {"arrival_s": ms / 1000}


def _single_turn(data: dict[str, Any], no: int, nth: int, max_prompt_chars: int) -> _Read:
    """An AIPerf ``single_turn`` line: one user message from ``text``/``texts``."""
    _media(data)
    pacing = _screen(data, SINGLE_TURN_FIELDS) + [k for k in ("timestamp", "delay") if k in data]
    fields = _extra(data)
    ignored = _screen_extra(fields, "")
    body: dict[str, Any] = {**fields, "messages": [{"role": "user", "content": _text(data)}],
            **{k: data[k] for k in ("id", "tag", "category") if k in data}}
    return _request_line(body, no, nth, max_prompt_chars, ignored=(*pacing, *ignored), **_arrival(data))


def _multi_turn(data: dict[str, Any], no: int, nth: int, max_prompt_chars: int) -> list[_Read]:
    """An AIPerf ``multi_turn`` session: one request per user turn, played turn by turn.

    Each side carries its own answer into its next turn, as AIPerf does: a turn's request holds only
    its new messages (``carry``), sent after what that side sent for the turn before and its answer.
    A leading system turn opens the first turn's history (so every turn has it); an assistant turn
    logged in the file is replaced by each side's own answer (ignored, counted)."""
    _screen(data, MULTI_TURN_FIELDS)
    session = _id(data.get("session_id"), nth)
    turns = data.get("turns")
    if not isinstance(turns, list) or not turns:
        raise _Skip(f"session {session!r}: turns: give a list of at least one turn")
    pending: list[dict[str, Any]] = []  # the messages new since the last request
    out: list[_Read] = []
    replaced: list[str] = []
    for i, turn in enumerate(turns):
        where = f"turns.{i}: "
        if not isinstance(turn, dict):
            raise _Skip(f"{where}expected an object with text")
        _media(turn, where)
        for key in turn:
            if key not in TURN_FIELDS:
                raise _Skip(f"{where}{_unknown(key, TURN_FIELDS)}")
        role = turn.get("role", "user")
        if role not in ("system", "user", "assistant"):
            raise _Skip(f"{where}role must be system, user or assistant")
        text = _content(_text(turn, where), f"turns.{i}")
        if role == "assistant":
            replaced.append("turns.assistant")  # each side's own answer takes its place
            continue
        pending.append({"role": role, "content": text})
        if role == "system":
            continue
        fields = _extra(turn, where)
        ignored = _screen_extra(fields, where) + [k for k in ("timestamp", "delay") if k in turn] + replaced
        replaced = []
        body = {**fields, "messages": pending}
        if "tag" in data or "category" in data:
            body["tag"] = data.get("tag", data.get("category"))
        n = len(out) + 1
        out.append(_request_line(body, no, nth, max_prompt_chars, rid=f"{session}#{n}", ignored=tuple(ignored),
                                 session=session, turn=n, carry=n > 1, **_arrival(turn, where)))
        pending = []
    if not out:
        raise _Skip(f"session {session!r} has no user turn, so there is no prompt to send")
    return out


def _trace_line(data: dict[str, Any], no: int, nth: int, max_prompt_chars: int) -> _Read:
    """An AIPerf trace line with ``messages``: the whole history of that turn as logged, its tools."""
    if data.get("messages") is None:
        raise _Skip(TOKEN_LINE)
    _screen(data, TRACE_FIELDS)
    mode = data.get("message_mode", "history")
    if mode not in ("history", "delta"):
        raise _Skip('message_mode must be "history" (the whole history each line) or "delta" (new messages only)')
    delta = mode == "delta"
    ignored: list[str] = [k for k in ("timestamp", "delay", "input_length", "hash_ids") if k in data]
    fields = _extra(data)
    ignored += _screen_extra(fields, "")
    own = ("messages", "tools", "id", "tag", "category")
    body: dict[str, Any] = {**fields, **{k: data[k] for k in own if k in data}}
    where: dict[str, Any] = {"carry": True, **_arrival(data)} if delta else _arrival(data)
    if data.get("session_id") is not None:
        where["session"] = _id(data["session_id"], nth)
    elif delta:
        raise _Skip('message_mode "delta" needs a session_id: its turns follow each other')
    read = _request_line(body, no, nth, max_prompt_chars, ignored=tuple(ignored), delta=delta, **where)
    return _logged_head(read) if delta else read


def _logged_head(read: _Read) -> _Read:
    """A delta turn whose new messages open with the answer the log recorded for the turn before (an
    assistant message, e.g. the agent's tool call): that answer set aside as ``logged_answer``, to be
    replaced by each side's own and compared with it (demo/sweep/runner.py); the rest is the turn's."""
    req = read.request
    messages = req.messages or []
    if not messages or messages[0].role != "assistant":
        return read
    if len(messages) == 1:
        raise _Skip('message_mode "delta": the line holds only the logged answer, which each side\'s own replaces; '
                    "give the messages that follow it (the tool result, the next user turn)")
    return read._replace(request=req.model_copy(update={"messages": messages[1:], "logged_answer": messages[0]}))


def _guidellm_line(data: dict[str, Any], no: int, nth: int, max_prompt_chars: int) -> _Read:
    """A GuideLLM JSONL line: ``prompt`` (one user message), ``output_tokens_count`` as max_tokens."""
    _screen(data, GUIDELLM_FIELDS)
    body = {k: v for k, v in data.items() if k not in ("output_tokens_count", "prompt_tokens_count", "prompt")}
    out = data.get("output_tokens_count")
    if out is not None:
        if body.get("max_tokens", out) != out:
            raise _Skip("output_tokens_count and max_tokens differ; give one")
        body["max_tokens"] = out
    prompt = data.get("prompt")
    if not isinstance(prompt, str):
        raise _Skip("prompt must be text")
    body["messages"] = [{"role": "user", "content": prompt}]
    ignored = ("prompt_tokens_count",) if "prompt_tokens_count" in data else ()
    return _request_line(body, no, nth, max_prompt_chars, ignored=ignored, max_tokens=DEFAULT_MAX_TOKENS)


def _token_trace(data: dict[str, Any], no: int, nth: int, max_prompt_chars: int) -> _Read:
    """A line of token counts only: refused (the whole file is refused when it starts with one)."""
    raise _Skip(TOKEN_LINE)
