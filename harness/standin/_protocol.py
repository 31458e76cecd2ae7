"""vLLM's own bodies where the stand-in refuses a request (its error JSON, the context
check, tools without a parser) and the compact JSON its chunks are written in.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.responses import JSONResponse


def dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def error_response(status: int, message: str, type_: str, param: str | None) -> JSONResponse:
    """vLLM's error body shape, as captured."""
    body = {"error": {"message": message, "type": type_, "param": param, "code": status}}
    return JSONResponse(body, status_code=status)


def too_long_response(max_model_len: int) -> JSONResponse:
    # vLLM reports max_model_len+1 ("at least"), whatever the prompt's real length.
    n = max_model_len + 1
    return error_response(
        400,
        f"This model's maximum context length is {max_model_len} tokens. However, your prompt "
        f"contains at least {n} input tokens, which exceeds this limit even without any output "
        f"tokens. Please reduce the length of the input prompt. (parameter=input_tokens, value={n})",
        "BadRequestError",
        "input_tokens",
    )


def tools_refused(body: dict[str, Any]) -> JSONResponse | None:
    """vLLM 0.32's 400 for a request with tools on a server without a tool-call parser (its words,
    tests/fixtures/error-tools-no-parser.txt); None when the request carries no tools or tool_choice none."""
    choice = body.get("tool_choice", "auto")
    if not body.get("tools") or choice in (None, "none"):
        return None
    if choice == "auto":
        return error_response(
            400, '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set',
            "BadRequestError", None)
    function = choice.get("function") if isinstance(choice, dict) else None
    named = function.get("name") if isinstance(function, dict) else None
    what = f'function "{named}"' if named else f'"{choice}"'
    return error_response(400, f"tool_choice={what} requires --tool-call-parser to be set", "BadRequestError", None)


def prompt_words(body: dict[str, Any], chat: bool) -> int:
    """Approximate prompt tokens as whitespace-separated words (at least 1)."""
    if chat:
        parts: list[str] = []
        for m in body.get("messages") or []:
            c = m.get("content") if isinstance(m, dict) else None
            if isinstance(c, str):
                parts.append(c)
            elif isinstance(c, list):
                parts += [p.get("text", "") for p in c if isinstance(p, dict)]
        text = " ".join(parts)
    else:
        p = body.get("prompt", "")
        text = p if isinstance(p, str) else " ".join(map(str, p))
    return max(1, len(text.split()))

