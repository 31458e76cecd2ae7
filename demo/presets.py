"""Presets: prompts that make the lesson visible, loaded from presets/*.yaml.

A preset may set the sampling vocabulary (demo/sampling.py: top_p, top_k, min_p, stop, the
penalties, response_format), a seed and the tool vocabulary (demo/tool_request.py: tools,
tool_choice, parallel_tool_calls); they reach every side of a race alike through
``Preset.to_request``.

A multi-turn preset (a session) adds ``turns``: after each answer, the messages the session adds
(the logged tool result, a user's reply). The page plays the turns one after another, each side
carrying its own answer into its next turn (demo.agent_race).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, Field, ValidationError, field_validator, model_validator

from demo.errors import NotFound
from demo.fmt import validation_summary
from demo.limits import MaxTokens, Temperature
from demo.results import Api, Message, RaceRequest
from demo.sampling import SAMPLING_FIELDS, SamplingFields
from demo.tool_request import ToolFields, tool_body

MAX_TURNS = 8  # a session preset's turns after the first: each is a race on the stage


class Turn(BaseModel):
    """One turn of a session preset after its first: a short label for the per-turn strip, and the
    messages the session adds after each side's own answer (its logged tool results first, each
    ``role: tool`` with the logged call's id, then optionally a user's reply)."""

    model_config = {"extra": "forbid"}

    label: str = Field("", max_length=24)
    messages: list[Message] = Field(min_length=1, max_length=16)

    @field_validator("messages")
    @classmethod
    def _logged_turns_only(cls, messages: list[Message]) -> list[Message]:
        # The assistant's turn is each side's own answer: a turn adds only what answers it.
        roles = [m.role for m in messages]
        if any(r not in ("tool", "user") for r in roles):
            raise ValueError("a turn adds only tool results and user messages (the answer is each side's own)")
        if "user" in roles and "tool" in roles[roles.index("user"):]:
            raise ValueError("a turn's tool results come before its user message")
        for m in messages:
            if m.role == "tool" and m.tool_call_id is None:
                raise ValueError("a tool result needs the logged call's tool_call_id")
        return messages


class Preset(SamplingFields, ToolFields):
    """One preset file: its prompt, what to expect, and how it is sampled (the sampling fields:
    demo/sampling.py, each left out of the file not sent); the tools it offers (demo/tool_request.py);
    a session's further turns."""

    model_config = {"extra": "forbid"}

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9_-]*$")
    title: str
    expect: str  # one line for the audience: what to watch for
    messages: list[Message] = Field(min_length=1)
    temperature: Temperature = 0.0
    max_tokens: MaxTokens = 256
    api: Api = "chat"
    seed: int | None = None  # sent to both sides alike; None: not sent
    # Files (relative to the presets folder) whose text replaces {{name}} in the messages.
    include: dict[str, str] = Field(default_factory=dict)
    # In booth mode's default rotation (demo.live.booth); SPECDEMO_BOOTH_PRESETS can still name it.
    booth: bool = True
    # A session: the turns after the first, played one after another (demo.agent_race). Empty: one race.
    turns: list[Turn] = Field(default_factory=list, max_length=MAX_TURNS)
    first_label: str = Field("", max_length=24)  # the first turn's label in the per-turn strip

    @model_validator(mode="after")
    def _a_session_is_chat(self) -> Preset:
        if self.turns and self.api != "chat":
            raise ValueError("turns: a session preset uses the chat API (api: chat)")
        if self.turns and self.booth:
            raise ValueError("turns: a session preset is not in booth mode's rotation: set booth: false")
        return self

    @property
    def session(self) -> bool:
        """Whether the preset is a multi-turn session (it has turns after its first)."""
        return bool(self.turns)

    def to_request(self, **changes: Any) -> RaceRequest:
        """This preset as one race's request: its name, messages, API, temperature, max tokens, seed
        and sampling fields, with ``changes`` (any other RaceRequest field values: order, warmup, the
        page's temperature, a CLI flag) on top. The one place a preset becomes a RaceRequest;
        RaceRequest validates the values."""
        sampling = {name: getattr(self, name) for name in SAMPLING_FIELDS}
        return RaceRequest(**{"preset": self.name, "messages": self.messages, "api": self.api,
                              "temperature": self.temperature, "max_tokens": self.max_tokens, "seed": self.seed,
                              **sampling, **tool_body(self), **changes})


class PresetProblem(BaseModel):
    """A preset file that did not load, for the load report (a record, not an exception): the
    file's name and one line on what is wrong with it."""

    file: str
    message: str


def _load_one(path: Path) -> Preset:
    # safe_load: a preset file is data, never code.
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise ValueError("the file must hold a mapping of preset fields")
    data.setdefault("name", path.stem)
    preset = Preset.model_validate(data)
    for key, rel in preset.include.items():
        text = (path.parent / rel).read_text(encoding="utf-8")
        for m in [*preset.messages, *(m for turn in preset.turns for m in turn.messages)]:
            if m.content is not None:  # an assistant's tool calls stay as written
                m.content = m.content.replace("{{" + key + "}}", text)
    return preset


def _yaml_message(e: yaml.YAMLError) -> str:
    # PyYAML's str() opens with context ("while parsing a flow sequence"); say the problem and where.
    mark = getattr(e, "problem_mark", None)
    problem = getattr(e, "problem", None) or getattr(e, "context", None)
    if mark is not None and problem:
        return f"line {mark.line + 1}, column {mark.column + 1}: {problem}"
    return str(e).splitlines()[0]


def load_presets(folder: Path) -> tuple[dict[str, Preset], list[PresetProblem]]:
    """Load every preset; a broken file is reported by name and field, the rest still load."""
    presets: dict[str, Preset] = {}
    errors: list[PresetProblem] = []
    for path in sorted(folder.glob("*.yaml")):
        try:
            preset = _load_one(path)
        except ValidationError as e:
            errors.append(PresetProblem(file=path.name, message=validation_summary(e, every=True)))
            continue
        except yaml.YAMLError as e:
            errors.append(PresetProblem(file=path.name, message=_yaml_message(e)))
            continue
        except (OSError, ValueError) as e:
            errors.append(PresetProblem(file=path.name, message=str(e).splitlines()[0]))
            continue
        if preset.name in presets:
            errors.append(PresetProblem(file=path.name, message=f"duplicate preset name {preset.name!r}"))
            continue
        presets[preset.name] = preset
    return presets, errors


def session_preset(presets: dict[str, Preset], req: RaceRequest) -> Preset | None:
    """The session preset ``req`` races, when it is one and unchanged (its own request: an edited
    prompt is a free prompt, one race); None otherwise."""
    preset = presets.get(req.preset or "")
    return preset if preset is not None and preset.session else None


class UnknownPresetError(NotFound):
    """A preset name that is not in the presets folder."""


def unknown_preset(names: Iterable[str], known: Iterable[str], presets_dir: Path) -> UnknownPresetError:
    """The one wording of "no such preset": the names asked for, and the ones there are."""
    known_text = ", ".join(sorted(known)) or "none found in " + str(presets_dir)
    return UnknownPresetError(f"unknown preset {', '.join(map(repr, names))}; known presets: {known_text}")


def resolve_presets(names: list[str], presets_dir: Path) -> dict[str, Preset]:
    """The named presets, in the order asked; raises UnknownPresetError naming the known ones."""
    presets, _errors = load_presets(presets_dir)
    unknown = [n for n in names if n not in presets]
    if unknown:
        raise unknown_preset(unknown, presets, presets_dir)
    return {n: presets[n] for n in names}
