"""An LLM gateway's request log as a workload: LiteLLM's ``StandardLoggingPayload`` (what its logging
callbacks receive) and its ``SpendLogs`` rows (the proxy's database table, exported as JSON).

The prompt is the row's ``messages`` (a SpendLogs row may keep it only in ``proxy_server_request``);
the request's own fields come from ``model_parameters`` (payload) or ``proxy_server_request``
(SpendLogs), read as any request's, a gateway's own keys ignored and counted. Fields a database export
holds as JSON inside strings (``messages``, ``metadata``, ``response``, ...) are parsed; one that is not
JSON refuses its row. The log's own answer (tokens, times) is kept as logged, beside ours. A row whose
prompt was not logged is refused with why: SpendLogs keep none unless the proxy is told to store them.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from demo.workload._lines import line_id, request_line, shown_field
from demo.workload._model import ANSWER_MAX_TOKENS_CAP, DEFAULT_MAX_TOKENS, LoggedAnswer, ReadRequest, SkipLine

CHAT_CALLS = ("completion", "acompletion")
TEXT_CALLS = ("text_completion", "atext_completion")
JSON_STRING_FIELDS = ("messages", "metadata", "response", "proxy_server_request", "model_parameters",
                      "request_tags", "hidden_params")
NOT_LOGGED = ("the prompt was not logged: LiteLLM keeps no prompt in SpendLogs unless the proxy sets "
              "general_settings: store_prompts_in_spend_logs: true; turn it on, or give the request bodies "
              "(OpenAI JSONL)")
REDACTED = "redacted-by-litellm"  # what LiteLLM writes in place of a message when message logging is off
# The request fields a gateway's body may carry that say where it went, not what to generate.
GATEWAY_KEYS = ("model", "metadata", "litellm_metadata", "user", "stream", "stream_options", "api_key",
                "api_base", "extra_body", "litellm_call_id", "litellm_logging_obj", "proxy_server_request")


def is_litellm(data: dict[str, Any]) -> bool:
    """A LiteLLM log row: a SpendLogs row (``request_id``, ``call_type``, ``spend``) or a
    StandardLoggingPayload (``call_type`` with ``model_parameters`` or ``response_cost``)."""
    if "call_type" not in data:
        return False
    return "request_id" in data or "model_parameters" in data or "response_cost" in data or "spend" in data


def is_spendlogs(data: dict[str, Any]) -> bool:
    """A SpendLogs row rather than a StandardLoggingPayload."""
    return "request_id" in data


def _parsed(data: dict[str, Any]) -> dict[str, Any]:
    """The row with its JSON-in-string fields parsed; a field that is not JSON refuses the row."""
    out = dict(data)
    for key in JSON_STRING_FIELDS:
        value = out.get(key)
        if not isinstance(value, str):
            continue
        if key == "messages" and out.get("call_type") in TEXT_CALLS and not value.lstrip().startswith(("[", "{")):
            continue  # a text completion's prompt, as logged
        try:
            out[key] = json.loads(value) if value.strip() else None
        except json.JSONDecodeError as e:
            raise SkipLine(f"{key}: a JSON-in-string field that is not JSON ({e.msg} at column {e.colno}); export the "
                        "log's JSON columns as JSON") from None
    return out


def _seconds(value: Any) -> float | None:
    """A logged time in seconds since the epoch: a number (payload) or an ISO datetime (SpendLogs)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str) and value.strip():
        try:
            return datetime.fromisoformat(value.strip().replace("Z", "+00:00")).timestamp()
        except ValueError:
            return None
    return None


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _logged(data: dict[str, Any]) -> LoggedAnswer:
    """The log's own figures: the answer's and prompt's tokens, time to first token and end to end."""
    start, end, first = (_seconds(data.get(k)) for k in ("startTime", "endTime", "completionStartTime"))
    e2e = end - start if start is not None and end is not None and end >= start else None
    ttft = first - start if start is not None and first is not None and first >= start else None
    if ttft is not None and e2e is not None and ttft > e2e:
        ttft = None  # a non-streamed call logs completionStartTime as its end: not a first token
    return LoggedAnswer(completion_tokens=_count(data.get("completion_tokens")),
                        prompt_tokens=_count(data.get("prompt_tokens")), ttft_s=ttft, e2e_s=e2e)


def _not_logged(messages: Any) -> bool:
    return messages is None or messages in ({}, [], "")


def _redacted(messages: Any) -> bool:
    return isinstance(messages, list) and any(isinstance(m, dict) and m.get("content") == REDACTED for m in messages)


def litellm_row(data: dict[str, Any], no: int, nth: int, max_prompt_chars: int) -> ReadRequest:
    """One LiteLLM log row (either form) as the request it logged, with its figures as logged."""
    row = _parsed(data)
    call = row.get("call_type")
    if call not in (*CHAT_CALLS, *TEXT_CALLS):
        shown = f"call_type {call}" if isinstance(call, str) and shown_field(call) == call else "its call_type"
        raise SkipLine(f"{shown} generates no chat or text completion to measure; only completion and "
                    "text_completion rows are read")
    spend = is_spendlogs(row)
    sent = row.get("proxy_server_request") if spend else row.get("model_parameters")
    sent = dict(sent) if isinstance(sent, dict) else {}
    messages = row.get("messages")
    if _not_logged(messages) and spend:
        messages = sent.get("messages", sent.get("prompt"))
    if _not_logged(messages):
        raise SkipLine(NOT_LOGGED if spend else "the prompt was not logged (the payload's messages are empty); "
                    "log the messages, or give the request bodies (OpenAI JSONL)")
    if _redacted(messages):
        raise SkipLine("the prompt was redacted by LiteLLM (message logging is off); give the request bodies instead")
    body = {k: v for k, v in sent.items() if k not in ("messages", "prompt", *GATEWAY_KEYS)}
    ignored = [f"log.{shown_field(k)}" if shown_field(k) == k else "log.(a key)" for k in sent if k in GATEWAY_KEYS]
    if call in TEXT_CALLS and isinstance(messages, str | list) and not _is_chat(messages):
        body["prompt"] = messages
    else:
        body["messages"] = messages
    logged = _logged(row)
    default = min(logged.completion_tokens, ANSWER_MAX_TOKENS_CAP) if logged.completion_tokens else DEFAULT_MAX_TOKENS
    rid = line_id(row.get("request_id") if spend else row.get("id"), nth)
    session = row.get("session_id") if spend else row.get("trace_id")
    start = _seconds(row.get("startTime"))
    where: dict[str, Any] = {"logged": logged, **({"arrival_s": start} if start is not None and start >= 0 else {})}
    if isinstance(session, str) and session.strip():
        where["session"] = session.strip()[:200]
    return request_line(body, no, nth, max_prompt_chars, rid=rid, ignored=tuple(ignored), max_tokens=default,
                         tolerant=True, **where)


def _is_chat(messages: Any) -> bool:
    return isinstance(messages, list) and all(isinstance(m, dict) for m in messages)
