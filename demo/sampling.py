"""The sampling vocabulary a request carries beside its temperature, max tokens and seed.

One home for the fields that decide what is generated (and so what a drafter can predict):
``top_p``, ``top_k``, ``min_p``, ``stop``, the three penalties and ``response_format`` (vLLM's
structured outputs: ``json_object`` or ``json_schema``). A preset, a workload line, a race's request
and a saved run all hold them through ``SamplingFields``; ``sampling_body`` is the one place they
become request-body fields, so both sides of a race receive exactly the same ones. A field left
``None`` is not sent: the server's default applies, as it did before these fields existed.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, SerializerFunctionWrapHandler, field_validator, model_serializer, model_validator

from demo.tool_request import ToolFields, tool_body

MAX_STOP_SEQUENCES = 16  # vLLM takes more; a workload with more is likely not a stop list
MAX_STOP_CHARS = 200  # one stop sequence
MAX_SCHEMA_BYTES = 65_536  # a response_format's JSON schema, serialized

TopP = Annotated[float, Field(gt=0.0, le=1.0)]
TopK = Annotated[int, Field(ge=-1, le=100_000)]  # -1 (or 0): no top-k, as vLLM reads it
MinP = Annotated[float, Field(ge=0.0, le=1.0)]
Penalty = Annotated[float, Field(ge=-2.0, le=2.0)]  # presence / frequency, OpenAI's bounds
RepetitionPenalty = Annotated[float, Field(gt=0.0, le=2.0)]

# The request-body fields this module owns, in the order they are sent.
SAMPLING_FIELDS = ("top_p", "top_k", "min_p", "stop", "presence_penalty", "frequency_penalty",
                   "repetition_penalty", "response_format")


class JsonSchemaFormat(BaseModel):
    """OpenAI's ``response_format.json_schema``: a named JSON schema the answer must follow."""

    model_config = {"extra": "forbid", "populate_by_name": True}

    name: str = Field("response", min_length=1, max_length=64)
    # ``schema`` shadows a BaseModel attribute: held as schema_, read and written as "schema".
    schema_: dict[str, Any] = Field(alias="schema")
    strict: bool | None = None
    description: str | None = Field(None, max_length=1000)

    @field_validator("schema_")
    @classmethod
    def _capped(cls, v: dict[str, Any]) -> dict[str, Any]:
        if len(json.dumps(v)) > MAX_SCHEMA_BYTES:
            raise ValueError(f"the JSON schema is over {MAX_SCHEMA_BYTES:,} bytes")
        return v

    @model_serializer(mode="wrap")
    def _written_as_schema(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # Every dump (a saved run, results.json, a request body) says "schema", as OpenAI does.
        data: dict[str, Any] = handler(self)
        if "schema_" in data:
            data["schema"] = data.pop("schema_")
        return data


class ResponseFormat(BaseModel):
    """``response_format``: free text, any JSON object, or JSON following a schema."""

    model_config = {"extra": "forbid"}

    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None

    @model_validator(mode="after")
    def _schema_when_needed(self) -> ResponseFormat:
        if self.type == "json_schema" and self.json_schema is None:
            raise ValueError("type json_schema needs a json_schema with a schema")
        if self.type != "json_schema" and self.json_schema is not None:
            raise ValueError(f"type {self.type} takes no json_schema")
        return self

    @property
    def structured(self) -> bool:
        """True when the answer is constrained to JSON (a grammar on the server)."""
        return self.type != "text"

    def body(self) -> dict[str, Any]:
        """The request-body value, as OpenAI and vLLM read it."""
        return self.model_dump(mode="json", exclude_none=True)


class SamplingFields(BaseModel):
    """The sampling fields beside temperature / max_tokens / seed, all optional (None: not sent)."""

    top_p: TopP | None = None
    top_k: TopK | None = None
    min_p: MinP | None = None
    stop: list[Annotated[str, Field(min_length=1, max_length=MAX_STOP_CHARS)]] | None = Field(
        None, max_length=MAX_STOP_SEQUENCES)
    presence_penalty: Penalty | None = None
    frequency_penalty: Penalty | None = None
    repetition_penalty: RepetitionPenalty | None = None
    response_format: ResponseFormat | None = None

    @field_validator("stop", mode="before")
    @classmethod
    def _one_stop_is_a_list(cls, v: Any) -> Any:
        # OpenAI takes a string or a list of strings; we hold a list (an empty one: no stop).
        if isinstance(v, str):
            return [v]
        if isinstance(v, list) and not v:
            return None
        return v

    @property
    def structured(self) -> bool:
        """True when the request asks for JSON output (``response_format`` json_object/json_schema)."""
        return self.response_format is not None and self.response_format.structured


def sampling_body(fields: SamplingFields) -> dict[str, Any]:
    """The set sampling fields of ``fields`` as request-body fields (the one place they are sent), and
    for a request that also holds the tool fields, those (``demo.tool_request.tool_body``)."""
    body: dict[str, Any] = tool_body(fields) if isinstance(fields, ToolFields) else {}
    for name in SAMPLING_FIELDS:
        value = getattr(fields, name)
        if value is None:
            continue
        body[name] = value.body() if isinstance(value, ResponseFormat) else (
            list(value) if isinstance(value, list) else value)
    return body
