"""Which requests a canary may send to the speculative server: the eligibility file.

The evaluator decides what pays (demo/sweep/segments.py: greedy requests, JSON output, a tag); the
canary's router (servers/canary/) enforces it. Between them is this data file, so that servers/
never imports demo/. A request is eligible when it matches ANY rule; a rule matches when ALL its
conditions hold. A condition is one of:

- ``{"kind": "header", "name": "x-specdemo-eligible", "equals": "1"}``: a request header's value;
- ``{"kind": "body", "field": "temperature", "equals": 0}``: a JSON body field (dotted path,
  e.g. ``response_format.type``) equal to a number, string or boolean.

Any other kind (say ``prompt_tokens``: the router cannot count tokens) is kept as written here, and
the router refuses it in one line rather than route on a rule it cannot express.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from common.validation import validation_summary

ELIGIBILITY_FILE = "canary.eligibility.json"  # the file's name, beside results.json or in the canary's run dir
DEFAULT_HEADER = "x-specdemo-eligible"  # the header a client sets to opt a request in
DEFAULT_HEADER_VALUE = "1"
MAX_ELIGIBILITY_BYTES = 64 * 1024
MAX_RULES = 32


class Condition(BaseModel):
    """One test on a request: a header's or a body field's value (other kinds: see the module)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: str = Field(min_length=1, max_length=40)
    name: str | None = Field(None, max_length=100)  # kind "header": the header's name
    field: str | None = Field(None, max_length=200)  # kind "body": a dotted path into the JSON body
    equals: str | int | float | bool | None = None  # the value it must have
    note: str | None = Field(None, max_length=300)  # for a kind the router cannot express: what it means


class EligibilityRule(BaseModel):
    """A named rule: every condition must hold (an empty list is refused by the router)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1, max_length=80)
    when: list[Condition] = Field(min_length=1, max_length=8)


class Eligibility(BaseModel):
    """The eligibility file: the rules (any may match) and where they come from."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    rules: list[EligibilityRule] = Field(min_length=1, max_length=MAX_RULES)
    source: str = Field("default: the client's header", max_length=300)


def default_eligibility() -> Eligibility:
    """The default: a request is eligible when the client sets ``x-specdemo-eligible: 1``."""
    return Eligibility(rules=[EligibilityRule(name="client-header", when=[
        Condition(kind="header", name=DEFAULT_HEADER, equals=DEFAULT_HEADER_VALUE)])])


class EligibilityError(ValueError):
    """An eligibility file that cannot be read or is not one (the message is one line)."""


def read_eligibility(path: Path) -> Eligibility:
    """The file at ``path``, validated; EligibilityError in one line (never the file's text)."""
    try:
        if path.stat().st_size > MAX_ELIGIBILITY_BYTES:
            raise EligibilityError(f"{path} is over {MAX_ELIGIBILITY_BYTES // 1024} KiB: not an eligibility file")
        return Eligibility.model_validate_json(path.read_bytes())
    except FileNotFoundError:
        raise EligibilityError(f"{path}: no such file") from None
    except OSError as e:
        raise EligibilityError(f"cannot read {path}: {e.strerror or e}") from None
    except ValidationError as e:
        raise EligibilityError(f"{path} is not an eligibility file: {validation_summary(e)}") from None
