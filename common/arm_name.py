"""The arm-name rule, once for demo/ and servers/: a short slug that names an arm in flags, JSON keys,
environment variables, compose services and file names."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator

ARM_NAME_MAX_CHARS = 24
"""The longest arm name, in characters."""

ARM_NAME = re.compile(rf"^[a-z0-9][a-z0-9-]{{0,{ARM_NAME_MAX_CHARS - 1}}}$")
"""Lowercase letters, digits and '-', starting with a letter or digit, at most ARM_NAME_MAX_CHARS long."""


def check_arm_name(name: str) -> str:
    """Return ``name`` if it is a valid arm name; else raise ValueError with a one-line reason.

    Valid: it matches ``ARM_NAME`` and is not ``baseline`` (the server every arm is raced against)."""
    if not ARM_NAME.match(name):
        raise ValueError(f"arm name {name!r} must be a short slug: lowercase letters, digits and '-', "
                         f"starting with a letter or digit, at most {ARM_NAME_MAX_CHARS} characters "
                         "(e.g. ngram, eagle3)")
    if name == "baseline":
        raise ValueError("an arm cannot be called 'baseline' (that is the server every arm is raced against)")
    return name


ArmName = Annotated[str, AfterValidator(check_arm_name)]
"""A pydantic field type: a string checked by ``check_arm_name``."""
