"""The tool vocabulary a chat request carries: tool definitions, the tool choice, and the tool turns
of a history (an assistant's ``tool_calls``, a ``role: tool`` answer).

One home for what an agent sends: ``ToolFields`` (``tools``, ``tool_choice``,
``parallel_tool_calls``) is held by a race's request and a workload's line alike, and ``tool_body`` is
the one place they become request-body fields (``demo.sampling.sampling_body`` adds them), so both
sides of a race receive exactly the same ones, as the file gave them. A field left ``None`` is not
sent: a request without tools sends the body it sent before these fields existed.

The checks are OpenAI's shape, no more: a function tool has a name and, when it has ``parameters``,
a JSON schema object; a named ``tool_choice`` names a tool that is given.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, Field, field_validator, model_validator

MAX_TOOLS = 128  # OpenAI's own cap on tools per request
MAX_TOOLS_BYTES = 262_144  # the tool definitions, serialized
TOOL_NAME = r"^[A-Za-z0-9_.:-]{1,64}$"  # OpenAI's function names (vLLM takes any; a log's may have dots)


class FunctionDef(BaseModel):
    """One function a model may call: its name, what it does, its parameters' JSON schema."""

    model_config = {"extra": "forbid"}

    name: str = Field(pattern=TOOL_NAME)
    description: str | None = Field(None, max_length=8192)
    parameters: dict[str, Any] | None = None
    strict: bool | None = None

    @field_validator("parameters", mode="before")
    @classmethod
    def _a_schema_object(cls, v: Any) -> Any:
        # A JSON schema for arguments is an object schema: {"type": "object", "properties": {...}}.
        if v is None:
            return v
        if not isinstance(v, dict):
            raise ValueError("parameters must be a JSON schema object, e.g. "
                             '{"type": "object", "properties": {...}}')
        if v.get("type", "object") != "object":
            raise ValueError('parameters must be a JSON schema of type "object" (the arguments are an object)')
        return v


class ToolDef(BaseModel):
    """One tool of ``tools``: a function (the only type OpenAI and vLLM's parsers take)."""

    model_config = {"extra": "forbid"}

    type: Literal["function"] = "function"
    function: FunctionDef


class ChoiceName(BaseModel):
    """The function a named ``tool_choice`` forces."""

    model_config = {"extra": "forbid"}

    name: str = Field(pattern=TOOL_NAME)


class NamedChoice(BaseModel):
    """``tool_choice`` naming one function: ``{"type": "function", "function": {"name": ...}}``."""

    model_config = {"extra": "forbid"}

    type: Literal["function"] = "function"
    function: ChoiceName


class FunctionCall(BaseModel):
    """The function an assistant called: its name and arguments (a JSON text, as OpenAI sends them)."""

    model_config = {"extra": "forbid"}

    name: str = Field(pattern=TOOL_NAME)
    arguments: str | dict[str, Any] = "{}"  # kept as the file gave it: a text, or an object (some logs)


class HistoryToolCall(BaseModel):
    """One call of an assistant's ``tool_calls`` in a request's history, in the OpenAI wire form: its
    id (the ``role: tool`` answer names it), its function. (An answer's call, joined from its
    stream, is demo.results.ToolCall.)"""

    model_config = {"extra": "forbid"}

    id: str = Field(min_length=1, max_length=200)
    type: Literal["function"] = "function"
    function: FunctionCall


class ToolFields(BaseModel):
    """The tool fields of a chat request, all optional (None: not sent)."""

    tools: list[ToolDef] | None = Field(None, min_length=1, max_length=MAX_TOOLS)
    tool_choice: Literal["none", "auto", "required"] | NamedChoice | None = None
    parallel_tool_calls: bool | None = None

    @model_validator(mode="after")
    def _choice_names_a_tool(self) -> ToolFields:
        if self.tools is not None and len(json.dumps(tool_body(self)["tools"])) > MAX_TOOLS_BYTES:
            raise ValueError(f"tools: the definitions are over {MAX_TOOLS_BYTES:,} bytes")
        if isinstance(self.tool_choice, NamedChoice):
            names = {t.function.name for t in self.tools or []}
            if self.tool_choice.function.name not in names:
                raise ValueError("tool_choice names a function that is not in tools")
        elif self.tool_choice in ("auto", "required") and not self.tools:
            raise ValueError(f'tool_choice "{self.tool_choice}" needs tools')
        return self

    @property
    def has_tools(self) -> bool:
        """True when the request offers the model tools."""
        return bool(self.tools)


def tool_body(fields: ToolFields) -> dict[str, Any]:
    """The set tool fields as request-body fields, exactly as given (the one place they are sent)."""
    body: dict[str, Any] = {}
    if fields.tools is not None:
        body["tools"] = [t.model_dump(mode="json", exclude_none=True) for t in fields.tools]
    if fields.tool_choice is not None:
        body["tool_choice"] = (fields.tool_choice if isinstance(fields.tool_choice, str)
                               else fields.tool_choice.model_dump(mode="json"))
    if fields.parallel_tool_calls is not None:
        body["parallel_tool_calls"] = fields.parallel_tool_calls
    return body
