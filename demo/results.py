"""Typed results: one object per stream event, side, race. Units are in the names.

The CLI, the page, the evaluator and saved runs all print these objects, so a figure is
computed in one place (demo/measure.py) and shown everywhere the same. A figure that
cannot be known is None and its reason is in ``na_reasons[field]``; never a guess.
"""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    Field,
    SerializerFunctionWrapHandler,
    computed_field,
    field_serializer,
    model_serializer,
    model_validator,
)

from common.sides import SIDES as SIDES  # the pair, re-exported: demo names it from here
from common.sides import Side as Side
from demo.limits import MaxTokens, Temperature
from demo.sampling import SamplingFields
from demo.tool_request import FunctionCall, HistoryToolCall, ToolFields

# The sides of a race (common/sides.py, shared with servers/). Each arm's side is "speculative" and the
# arm is named in ``arms`` (RaceResult.arms, CellResult.arms, LoadStep.arms); ``speculative`` and the
# figures beside it always hold the first arm.
FIRST_ARM = "speculative"  # the first arm's name in a record saved before arms (and when nothing names it)
# simultaneous: both servers at the same instant (on one GPU they compete); sequential: the
# baseline, then the speculative server, each alone (the fair A/B). The race, the sweep, the
# CLI flags, saved records and the page all use these two words.
Order = Literal["simultaneous", "sequential"]
Api = Literal["chat", "completions"]
LEGACY_ORDER = {"race": "simultaneous"}  # the race's old word for simultaneous


def legacy_order(data: Any) -> Any:
    """A record saved before the one vocabulary (``"mode": "race" | "sequential"``) as it is now
    (``"order": "simultaneous" | "sequential"``); anything else unchanged."""
    if not isinstance(data, dict) or ("mode" not in data and data.get("order") not in LEGACY_ORDER):
        return data
    data = dict(data)
    if "mode" in data and "order" not in data:
        data["order"] = data.pop("mode")
    if data.get("order") in LEGACY_ORDER:
        data["order"] = LEGACY_ORDER[data["order"]]
    return data


class Message(BaseModel):
    """One chat message: its role and text; in an agent's history, an assistant's ``tool_calls`` (its
    content may then be None) or a ``role: tool`` answer naming the call it answers (``tool_call_id``).

    Dumped without the fields left None, so a message without tool turns is sent as before."""

    role: Literal["system", "user", "assistant", "tool"]
    content: str | None
    tool_calls: list[HistoryToolCall] | None = None
    tool_call_id: str | None = Field(None, min_length=1, max_length=200)

    @model_validator(mode="after")
    def _tool_turns_in_place(self) -> Message:
        if self.tool_calls is not None and self.role != "assistant":
            raise ValueError("only an assistant message carries tool_calls")
        if self.tool_call_id is not None and self.role != "tool":
            raise ValueError("only a tool message carries tool_call_id")
        if self.content is None and not (self.role == "assistant" and self.tool_calls):
            raise ValueError("content may be null only in an assistant message with tool_calls")
        return self

    @model_serializer(mode="wrap")
    def _without_unset_tool_fields(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        for key in ("tool_calls", "tool_call_id"):
            if data.get(key) is None:
                data.pop(key, None)
        return data

    @property
    def text(self) -> str:
        """What the model reads of this message: its content, then its calls as JSON (for sizes and
        fingerprints; never sent)."""
        calls = json.dumps([c.model_dump(mode="json") for c in self.tool_calls]) if self.tool_calls else ""
        return "\n".join(p for p in (self.content or "", calls) if p)


class SpecPerRequest(BaseModel):
    """vLLM's per-request speculative metrics (``metrics.speculative_decoding``)."""

    model_config = {"extra": "ignore"}

    mean_acceptance_length: float | None = None
    draft_acceptance_rate: float | None = None
    acceptance_histogram: list[int] | None = None
    num_spec_steps: int | None = None
    num_accepted_draft_tokens: int | None = None
    num_draft_tokens: int | None = None
    num_spec_tokens: int | None = None
    per_step_accepted: list[int] | None = None
    per_step_drafted: list[int] | None = None


class ToolCallDelta(BaseModel):
    """One piece of a streamed tool call (an item of ``choices[0].delta.tool_calls``): the server
    names the call once and streams its JSON arguments in pieces, all under the call's ``index``."""

    index: int = 0
    id: str | None = None
    name: str | None = None
    arguments: str = ""  # a piece of the arguments' JSON text


class ToolCall(BaseModel):
    """One tool call of an answer, its pieces joined: the function's name and its arguments as the
    JSON text the server sent (parsed only to compare two answers: demo.measure.same_tool_calls)."""

    id: str | None = None
    name: str = ""
    arguments: str = ""

    def signature(self) -> str:
        """The call as one line of plain text, ``name(arguments)`` (escape it before HTML)."""
        return f"{self.name}({self.arguments})"

    @classmethod
    def of_history(cls, call: HistoryToolCall) -> ToolCall:
        """A call of a request's history (e.g. one a log recorded) as an answer's call, to compare the two."""
        args = call.function.arguments
        return cls(id=call.id, name=call.function.name, arguments=args if isinstance(args, str) else json.dumps(args))

    def to_history(self, made_id: str) -> HistoryToolCall:
        """This call in the OpenAI wire form a next turn's history carries: the server's id (``made_id``
        when it gave none), its name and arguments exactly as the server sent them (not re-checked: the
        model's words are carried as they came)."""
        function = FunctionCall.model_construct(name=self.name, arguments=self.arguments)
        return HistoryToolCall.model_construct(id=self.id or made_id, type="function", function=function)


def answer_text(text: str, calls: list[ToolCall]) -> str:
    """An answer as plain text: its text, then each tool call's signature on a line of its own."""
    return "\n".join([text, *(c.signature() for c in calls)] if text else [c.signature() for c in calls])


def answer_message(text: str, calls: list[ToolCall], turn: int = 1) -> Message:
    """An answer to a session's turn ``turn`` as the assistant message of its next turn (an agent
    carries its own answer forward; the page's session race and the evaluator's sessions alike): its
    text (null when it is tool calls only), and its tool calls in the OpenAI history form with the ids
    the server gave them (``call-<turn>-<k>`` made where it gave none). A call the next request could
    not carry (a name outside OpenAI's, arguments that are not a JSON object) is carried as text
    instead (``answer_text``): model output is untrusted."""
    history: list[HistoryToolCall] = []
    for k, call in enumerate(calls, 1):
        try:
            args = json.loads(call.arguments or "{}")
            if not isinstance(args, dict):
                raise ValueError("the arguments are not a JSON object")
            history.append(HistoryToolCall(id=call.id or f"call-{turn}-{k}",
                                           function=FunctionCall(name=call.name, arguments=call.arguments or "{}")))
        except ValueError:  # pydantic's ValidationError and json's JSONDecodeError are ValueErrors
            return Message(role="assistant", content=answer_text(text, calls))
    return Message(role="assistant", content=text or (None if history else ""), tool_calls=history or None)


def next_turn(history: list[Message], answer: Message, turn: list[Message]) -> list[Message]:
    """The history of a session's next turn: the history so far, this side's own ``answer``, then the
    turn's logged messages (tool results, a user's reply). The i-th tool result answers the answer's
    i-th call, so it takes that call's id (the logged id stays when the answer made fewer calls)."""
    ids = [c.id for c in answer.tool_calls or []]
    carried: list[Message] = []
    tools = 0
    for m in turn:
        if m.role == "tool":
            if tools < len(ids):
                m = m.model_copy(update={"tool_call_id": ids[tools]})
            tools += 1
        carried.append(m)
    return [*history, answer, *carried]


def _none(value: object) -> bool:
    return value is None


@dataclasses.dataclass(slots=True)
class ChunkEvent:
    """One SSE ``data:`` event as the client saw it.

    A slotted dataclass, not a model: one is made for every chunk of every stream (a model's
    validation cost the client 5% of its CPU at 1,024 streams, benchmarks/bench_client_streams.py);
    the client builds it from data it has checked (demo.client.parse_chunk), and a saved run's
    events are validated as SideResult's field."""

    t_s: float  # seconds since the request was sent (monotonic clock)
    text: str = ""
    # Running usage.completion_tokens (continuous_usage_stats); None when the server omits it.
    completion_tokens: int | None = None
    prompt_tokens: int | None = None
    finish_reason: str | None = None
    final_usage: bool = False  # the closing "choices: []" usage chunk
    done: bool = False  # the "data: [DONE]" line
    spec: SpecPerRequest | None = None
    # The tool-call pieces this chunk carried (None: none; left out of saved runs then).
    tool_calls: Annotated[list[ToolCallDelta] | None, Field(exclude_if=_none)] = None


class SpecStats(BaseModel):
    """Acceptance figures of one speculative request."""

    source: Literal["per_request", "metrics_delta"]
    acceptance_rate: float | None = None  # accepted / drafted tokens
    mean_acceptance_length: float | None = None  # 1 + accepted / drafts (bonus token included)
    accepted_tokens: int | None = None
    draft_tokens: int | None = None
    drafts: int | None = None  # verification steps that had a draft
    num_spec_tokens: int | None = None  # k
    # Rate at which draft position i was accepted, per verification step.
    per_position_acceptance: list[float] | None = None
    acceptance_histogram: list[int] | None = None  # steps that accepted exactly j tokens
    note: str | None = None
    na_reasons: dict[str, str] = Field(default_factory=dict)


class Repetition(BaseModel):
    """The answer ends in one span (a word to a sentence) repeated: the model stuck in a loop. n-gram
    speculation drafts a loop perfectly, so a speedup over it is not typical (demo.measure.repetition)."""

    unit: str  # the repeated span, e.g. '"book", '
    tail_chars: int  # characters at the end of the answer that are the span repeated
    repeats: float  # tail_chars / len(unit)
    share: float  # tail_chars / the answer's characters (0..1)
    tail_tokens: int | None = None  # tokens those characters arrived in (from usage), when known


class SideResult(BaseModel):
    """One side's final figures in a race, units in the names.

    Tokens from usage, times, rates, acceptance, the text and its events; what is unknown is None
    with its reason in ``na_reasons``.
    """

    side: Side
    url: str
    model: str | None = None
    completion_tokens: int | None = None  # from the server's usage, never from chunks
    prompt_tokens: int | None = None
    ttft_s: float | None = None
    decode_tokens_per_s: float | None = None  # (tokens - first chunk's tokens) / (t_last - t_first)
    e2e_s: float | None = None
    itl_p50_s: float | None = None  # inter-token latency, a multi-token chunk spread over its tokens
    itl_p95_s: float | None = None
    # Every per-token gap of the stream (a chunk of n tokens: n gaps of its gap / n), for pooling
    # percentiles over a batch; never saved (runs and results.json keep the per-request p50/p95).
    itl_s: list[float] = Field(default_factory=list, exclude=True)
    chunks: int = 0  # content chunks received
    tokens_per_chunk: dict[int, int] = Field(default_factory=dict)  # size -> count
    finish_reason: str | None = None
    text: str = ""
    # The answer's tool calls, in the server's order (empty: the answer is prose only).
    tool_calls: list[ToolCall] = Field(default_factory=list)
    error: str | None = None
    complete: bool = False  # the stream ended with [DONE]
    # A session's turn carried on from this side's own answer to the turn before, where the log recorded
    # a tool call: True when this side's calls differed from the logged ones (names or arguments, as
    # parsed JSON; the logged result followed all the same), False when they were the same. None: the
    # turn followed no logged call (left out of saved runs then).
    followed_other_call: bool | None = Field(None, exclude_if=_none)
    spec: SpecStats | None = None
    repetition: Repetition | None = None  # the answer ends in a loop (None: it does not, or no text)
    events: list[ChunkEvent] = Field(default_factory=list)
    na_reasons: dict[str, str] = Field(default_factory=dict)


class _Ordered(BaseModel):
    """A record with an ``order``: also reads the records saved with the old ``mode``."""

    @model_validator(mode="before")
    @classmethod
    def _legacy_order(cls, data: Any) -> Any:
        return legacy_order(data)


class RaceRequest(_Ordered, SamplingFields, ToolFields):
    """What one race sends to both servers (the sampling fields: demo/sampling.py; the tool fields:
    demo/tool_request.py)."""

    preset: str | None = None
    messages: list[Message] | None = None  # chat API
    prompt: str | None = None  # completions API (built from messages when empty)
    api: Api = "chat"
    temperature: Temperature = 0.0
    max_tokens: MaxTokens = 256
    order: Order = "simultaneous"
    warmup: bool = False
    seed: int | None = None


class ArmResult(BaseModel):
    """One arm of a race against the baseline: its side and the figures comparing the two."""

    name: str
    label: str | None = None  # for the page; None: the name
    method: str | None = None  # its speculative method, when known
    side: SideResult
    speedup: float | None = None  # the arm's decode tokens/s over the baseline's
    e2e_speedup: float | None = None  # baseline e2e_s over the arm's
    identical_text: bool | None = None
    first_difference: int | None = None
    # The speedup over the arm's tokens per step (demo.measure.efficiency; 1.0 is the bound), and why the
    # speedup is not a result when that exceeds 1 (demo.measure.over_bound); None for a run saved before them.
    efficiency: float | None = None
    over_bound: str | None = None
    # Why an efficiency over 1 is a result all the same: this host's verification step was timed cheaper
    # than a plain one (demo.measure.step_cost_note); None otherwise and for a run saved before it.
    step_cost_note: str | None = None
    na_reasons: dict[str, str] = Field(default_factory=dict)


def first_arm_in(data: Any, mirror: tuple[str, ...]) -> Any:
    """A record's ``arms`` as loaded: a record saved before arms gets its one arm from ``speculative``
    and the ``mirror`` fields beside it; a record saved with arms gets its first arm's side back from
    ``speculative`` (it is written once, there)."""
    if not isinstance(data, dict) or "speculative" not in data:
        return data
    arms = data.get("arms")
    if not arms:
        data = dict(data)
        first = {k: data[k] for k in mirror if k in data}
        reasons = data.get("na_reasons") or {}
        first["na_reasons"] = {k: v for k, v in reasons.items() if k in mirror}
        data["arms"] = {FIRST_ARM: {"name": FIRST_ARM, "side": data["speculative"], **first}}
    elif isinstance(arms, dict):
        name = next(iter(arms))
        if isinstance(arms[name], dict) and arms[name].get("side") is None:
            data = dict(data)
            data["arms"] = {**arms, name: {**arms[name], "side": data["speculative"]}}
    return data


def arms_out(arms: dict[str, Any], handler: SerializerFunctionWrapHandler) -> Any:
    """``arms`` as written: the first arm's side is ``speculative`` already, so it is not written twice."""
    out = handler(arms)
    if isinstance(out, dict) and out:
        name = next(iter(out))
        if isinstance(out[name], dict) and "side" in out[name]:
            out[name] = {**out[name], "side": None}
    return out


_RACE_MIRROR = ("speedup", "e2e_speedup", "identical_text", "first_difference", "efficiency", "over_bound",
                "step_cost_note")


class RaceResult(_Ordered):
    """A finished race, saved as it is.

    Its order, preset, request and start time, the baseline and every arm (each with the figures
    comparing it to the baseline). ``speculative``, ``speedup``, ``e2e_speedup``,
    ``identical_text``, ``first_difference``, ``efficiency``, ``over_bound``, ``step_cost_note`` and
    ``na_reasons`` are the first arm's, read off it and written beside ``arms`` in the JSON (where the
    first arm's side is written once, as ``speculative``) for readers of the pair's JSON; a run saved
    before arms loads with its one arm, named "speculative".
    """

    order: Order
    preset: str | None = None
    request: RaceRequest
    started_at: datetime = Field(default_factory=lambda: datetime.now(UTC))
    baseline: SideResult
    cancelled: bool = False
    arms: dict[str, ArmResult] = Field(min_length=1)  # every arm in its order

    @model_validator(mode="before")
    @classmethod
    def _first_arm(cls, data: Any) -> Any:
        return first_arm_in(data, _RACE_MIRROR)

    @field_serializer("arms", mode="wrap")
    def _arms_out(self, arms: dict[str, ArmResult], handler: SerializerFunctionWrapHandler) -> Any:
        return arms_out(arms, handler)

    @property
    def first_arm(self) -> ArmResult:
        """The first arm: the one a pair's figures describe."""
        return next(iter(self.arms.values()))

    @computed_field  # type: ignore[prop-decorator]
    @property
    def speculative(self) -> SideResult:
        """The first arm's side."""
        return self.first_arm.side

    @computed_field  # type: ignore[prop-decorator]
    @property
    def speedup(self) -> float | None:
        """The first arm's decode tokens/s over the baseline's."""
        return self.first_arm.speedup

    @computed_field  # type: ignore[prop-decorator]
    @property
    def e2e_speedup(self) -> float | None:
        """The baseline's e2e_s over the first arm's."""
        return self.first_arm.e2e_speedup

    @computed_field  # type: ignore[prop-decorator]
    @property
    def identical_text(self) -> bool | None:
        """The first arm's answer is the baseline's, character for character."""
        return self.first_arm.identical_text

    @computed_field  # type: ignore[prop-decorator]
    @property
    def first_difference(self) -> int | None:
        """The character index where the first arm's answer first differs from the baseline's."""
        return self.first_arm.first_difference

    @computed_field  # type: ignore[prop-decorator]
    @property
    def efficiency(self) -> float | None:
        """The first arm's speedup over its tokens per step (1.0 is the bound)."""
        return self.first_arm.efficiency

    @computed_field  # type: ignore[prop-decorator]
    @property
    def over_bound(self) -> str | None:
        """Why the first arm's speedup is not a result (its efficiency exceeds 1), or None."""
        return self.first_arm.over_bound

    @computed_field  # type: ignore[prop-decorator]
    @property
    def step_cost_note(self) -> str | None:
        """Why the first arm's efficiency over 1 is a result all the same (a cheap verification step), or None."""
        return self.first_arm.step_cost_note

    @computed_field  # type: ignore[prop-decorator]
    @property
    def na_reasons(self) -> dict[str, str]:
        """Why a first-arm figure above is None, by name."""
        return self.first_arm.na_reasons

    @property
    def outcome(self) -> Literal["stopped", "error", "done"]:
        """How the race ended: stopped by the user, a side failed, or all finished."""
        if self.cancelled:
            return "stopped"
        if self.baseline.error or self.speculative.error or any(a.side.error for a in self.arms.values()):
            return "error"
        return "done"


class ServerWait(BaseModel):
    """A quiet stream the client keeps waiting on, past the read timeout, because the server's
    /metrics says it is working (demo.client): what it said when last asked."""

    quiet_s: float  # seconds without data from the stream when the server was last asked
    running: int = 0  # vllm:num_requests_running (every client's requests)
    waiting: int = 0  # vllm:num_requests_waiting (queued, or a JSON schema's grammar being built)


class SideSnapshot(BaseModel):
    """A side while it streams: what the page shows live."""

    side: Side
    text: str = ""
    completion_tokens: int | None = None
    elapsed_s: float = 0.0
    ttft_s: float | None = None
    tokens_per_s: float | None = None  # live decode rate so far
    # (arrival seconds, tokens in chunk, chunk text) for burst shading and the token chart.
    bursts: list[tuple[float, int, str]] = Field(default_factory=list)
    tool_calls: list[ToolCall] = Field(default_factory=list)  # the answer's tool calls so far
    done: bool = False
    error: str | None = None
    status: str = "waiting"  # queued (not sent yet) | waiting | streaming | done | error | cancelled
    # Set while the stream is quiet past the read timeout and the server says it is working on it.
    server_wait: ServerWait | None = None


class ArmSnapshot(BaseModel):
    """One arm while it streams."""

    name: str
    label: str | None = None
    method: str | None = None
    side: SideSnapshot
    live_speedup: float | None = None  # the arm's live decode tokens/s over the baseline's so far


class StreamProgress(BaseModel):
    """One stream at a glance (a user's cell in the N-user strip): cheap enough to take for every
    user on every frame, unlike a SideSnapshot (which copies the text and the bursts)."""

    completion_tokens: int | None = None  # from the server's running usage; None: not reported (yet)
    status: str = "waiting"  # as SideSnapshot.status


class RaceSnapshot(_Ordered):
    """A race as the page draws it at one moment.

    Each side's snapshot and the live speedup so far; the last snapshot holds the result.
    """

    order: Order
    baseline: SideSnapshot
    speculative: SideSnapshot  # the first arm
    # Speculative live decode tokens/s over the baseline's so far (the final figure is in result).
    live_speedup: float | None = None
    result: RaceResult | None = None  # set on the final snapshot
    # Every arm in its order, the first being ``speculative`` (a snapshot made without arms gets that one).
    arms: dict[str, ArmSnapshot] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _first_arm(self) -> RaceSnapshot:
        if not self.arms:
            r = self.result
            first = r.first_arm if r is not None else None
            self.arms = {first.name if first else FIRST_ARM: ArmSnapshot(
                name=first.name if first else FIRST_ARM, label=first.label if first else None,
                method=first.method if first else None, side=self.speculative, live_speedup=self.live_speedup)}
        return self
