"""Presets: prompts that make the lesson visible, loaded from presets/*.yaml.

A preset may set the sampling vocabulary (demo/sampling.py: top_p, top_k, min_p, stop, the
penalties, response_format) and a seed; they reach both sides of a race alike through
``Preset.to_request``."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, Field, ValidationError

from demo.errors import NotFound
from demo.fmt import validation_summary
from demo.limits import MaxTokens, Temperature
from demo.results import Api, Message, RaceRequest
from demo.sampling import SAMPLING_FIELDS, SamplingFields


class Preset(SamplingFields):
    """One preset file: its prompt, what to expect, and how it is sampled (the sampling fields:
    demo/sampling.py, each left out of the file not sent)."""

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

    def to_request(self, **changes: Any) -> RaceRequest:
        """This preset as one race's request: its name, messages, API, temperature, max tokens, seed
        and sampling fields, with ``changes`` (any other RaceRequest field values: order, warmup, the
        page's temperature, a CLI flag) on top. The one place a preset becomes a RaceRequest;
        RaceRequest validates the values."""
        sampling = {name: getattr(self, name) for name in SAMPLING_FIELDS}
        return RaceRequest(**{"preset": self.name, "messages": self.messages, "api": self.api,
                              "temperature": self.temperature, "max_tokens": self.max_tokens, "seed": self.seed,
                              **sampling, **changes})


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
        for m in preset.messages:
            m.content = m.text.replace("{{" + key + "}}", text)
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
