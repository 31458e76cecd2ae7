"""The load tools' forms: AIPerf's ``single_turn``, ``multi_turn`` and trace lines carrying ``messages``
(its custom datasets and trace replay), and GuideLLM's JSONL columns. Each becomes requests in the
project's vocabulary; ``extra`` goes where the request's own fields go (sampling sent alike to both
sides, tools as given, an unknown field refused as on any line)."""

from __future__ import annotations

from typing import Any

from demo.workload._lines import line_id, message_content, request_line, screen_fields, unknown_field
from demo.workload._model import (
    DEFAULT_MAX_TOKENS,
    LENGTH_AND_SAMPLING,
    TOOL_FIELDS,
    ReadRequest,
    SkipLine,
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
        raise SkipLine(f"{where}{media[0]}: image or other media content: only text is measured (the servers' models "
                    "read text, and a drafter predicts words, not pixels); give the text only")


def _text(data: dict[str, Any], where: str = "") -> str:
    """AIPerf's ``text`` or ``texts`` (a list of texts, joined by blank lines)."""
    if ("text" in data) == ("texts" in data):
        raise SkipLine(f'{where}give exactly one of "text" or "texts"')
    if "text" in data:
        if not isinstance(data["text"], str):
            raise SkipLine(f"{where}text must be a string")
        return data["text"]
    texts = data["texts"]
    if not isinstance(texts, list) or not texts or not all(isinstance(t, str) for t in texts):
        raise SkipLine(f"{where}texts must be a list of strings")
    return "\n\n".join(texts)


def _extra(data: dict[str, Any], where: str = "") -> dict[str, Any]:
    """``extra`` and ``output_length`` as request fields (``output_length`` is max_tokens)."""
    extra = data.get("extra") or {}
    if not isinstance(extra, dict):
        raise SkipLine(f"{where}extra must be an object of request fields")
    if "messages" in extra or "prompt" in extra:
        raise SkipLine(f"{where}extra: messages or prompt would replace the line's text; "
                       "give the text as the line's own")
    fields = dict(extra)
    out = data.get("output_length")
    if out is not None:
        if fields.get("max_tokens", out) != out:
            raise SkipLine(f"{where}output_length and extra.max_tokens differ; give one")
        fields["max_tokens"] = out
    return fields


def _screen_extra(fields: dict[str, Any], where: str) -> list[str]:
    try:
        return [f"extra.{k}" for k in screen_fields(fields, EXTRA_FIELDS)]
    except SkipLine as e:
        raise SkipLine(f"{where}extra: {e}") from None


def _arrival(data: dict[str, Any], where: str = "") -> dict[str, Any]:
    """AIPerf's ``timestamp`` (milliseconds) as the request's ``arrival_s``; none given: nothing."""
    ms = data.get("timestamp")
    if ms is None:
        return {}
    if isinstance(ms, bool) or not isinstance(ms, int | float) or not 0 <= ms < float("inf"):
        raise SkipLine(f"{where}timestamp must be milliseconds, a number of at least 0")
    return {"arrival_s": ms / 1000}


def aiperf_single_turn(data: dict[str, Any], no: int, nth: int, max_prompt_chars: int) -> ReadRequest:
    """An AIPerf ``single_turn`` line: one user message from ``text``/``texts``."""
    _media(data)
    pacing = screen_fields(data, SINGLE_TURN_FIELDS) + [k for k in ("timestamp", "delay") if k in data]
    fields = _extra(data)
    ignored = _screen_extra(fields, "")
    body: dict[str, Any] = {**fields, "messages": [{"role": "user", "content": _text(data)}],
            **{k: data[k] for k in ("id", "tag", "category") if k in data}}
    return request_line(body, no, nth, max_prompt_chars, ignored=(*pacing, *ignored), **_arrival(data))


def aiperf_multi_turn(data: dict[str, Any], no: int, nth: int, max_prompt_chars: int) -> list[ReadRequest]:
    """An AIPerf ``multi_turn`` session: one request per user turn, played turn by turn.

    Each side carries its own answer into its next turn, as AIPerf does: a turn's request holds only
    its new messages (``carry``), sent after what that side sent for the turn before and its answer.
    A leading system turn opens the first turn's history (so every turn has it); an assistant turn
    logged in the file is replaced by each side's own answer (ignored, counted)."""
    screen_fields(data, MULTI_TURN_FIELDS)
    session = line_id(data.get("session_id"), nth)
    turns = data.get("turns")
    if not isinstance(turns, list) or not turns:
        raise SkipLine(f"session {session!r}: turns: give a list of at least one turn")
    pending: list[dict[str, Any]] = []  # the messages new since the last request
    out: list[ReadRequest] = []
    replaced: list[str] = []
    for i, turn in enumerate(turns):
        where = f"turns.{i}: "
        if not isinstance(turn, dict):
            raise SkipLine(f"{where}expected an object with text")
        _media(turn, where)
        for key in turn:
            if key not in TURN_FIELDS:
                raise SkipLine(f"{where}{unknown_field(key, TURN_FIELDS)}")
        role = turn.get("role", "user")
        if role not in ("system", "user", "assistant"):
            raise SkipLine(f"{where}role must be system, user or assistant")
        text = message_content(_text(turn, where), f"turns.{i}")
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
        out.append(request_line(body, no, nth, max_prompt_chars, rid=f"{session}#{n}", ignored=tuple(ignored),
                                 session=session, turn=n, carry=n > 1, **_arrival(turn, where)))
        pending = []
    if not out:
        raise SkipLine(f"session {session!r} has no user turn, so there is no prompt to send")
    return out


def aiperf_trace_line(data: dict[str, Any], no: int, nth: int, max_prompt_chars: int) -> ReadRequest:
    """An AIPerf trace line with ``messages``: the whole history of that turn as logged, its tools."""
    if data.get("messages") is None:
        raise SkipLine(TOKEN_LINE)
    screen_fields(data, TRACE_FIELDS)
    mode = data.get("message_mode", "history")
    if mode not in ("history", "delta"):
        raise SkipLine('message_mode must be "history" (the whole history each line) or "delta" (new messages only)')
    delta = mode == "delta"
    ignored: list[str] = [k for k in ("timestamp", "delay", "input_length", "hash_ids") if k in data]
    fields = _extra(data)
    ignored += _screen_extra(fields, "")
    own = ("messages", "tools", "id", "tag", "category")
    body: dict[str, Any] = {**fields, **{k: data[k] for k in own if k in data}}
    where: dict[str, Any] = {"carry": True, **_arrival(data)} if delta else _arrival(data)
    if data.get("session_id") is not None:
        where["session"] = line_id(data["session_id"], nth)
    elif delta:
        raise SkipLine('message_mode "delta" needs a session_id: its turns follow each other')
    read = request_line(body, no, nth, max_prompt_chars, ignored=tuple(ignored), delta=delta, **where)
    return _logged_head(read) if delta else read


def _logged_head(read: ReadRequest) -> ReadRequest:
    """A delta turn whose new messages open with the answer the log recorded for the turn before (an
    assistant message, e.g. the agent's tool call): that answer set aside as ``logged_answer``, to be
    replaced by each side's own and compared with it (demo/sweep/runner.py); the rest is the turn's."""
    req = read.request
    messages = req.messages or []
    if not messages or messages[0].role != "assistant":
        return read
    if len(messages) == 1:
        raise SkipLine('message_mode "delta": the line holds only the logged answer, which each side\'s own replaces; '
                    "give the messages that follow it (the tool result, the next user turn)")
    return read._replace(request=req.model_copy(update={"messages": messages[1:], "logged_answer": messages[0]}))


def guidellm_line(data: dict[str, Any], no: int, nth: int, max_prompt_chars: int) -> ReadRequest:
    """A GuideLLM JSONL line: ``prompt`` (one user message), ``output_tokens_count`` as max_tokens."""
    screen_fields(data, GUIDELLM_FIELDS)
    body = {k: v for k, v in data.items() if k not in ("output_tokens_count", "prompt_tokens_count", "prompt")}
    out = data.get("output_tokens_count")
    if out is not None:
        if body.get("max_tokens", out) != out:
            raise SkipLine("output_tokens_count and max_tokens differ; give one")
        body["max_tokens"] = out
    prompt = data.get("prompt")
    if not isinstance(prompt, str):
        raise SkipLine("prompt must be text")
    body["messages"] = [{"role": "user", "content": prompt}]
    ignored = ("prompt_tokens_count",) if "prompt_tokens_count" in data else ()
    return request_line(body, no, nth, max_prompt_chars, ignored=ignored, max_tokens=DEFAULT_MAX_TOKENS)


def token_trace_line(data: dict[str, Any], no: int, nth: int, max_prompt_chars: int) -> ReadRequest:
    """A line of token counts only: refused (the whole file is refused when it starts with one)."""
    raise SkipLine(TOKEN_LINE)
