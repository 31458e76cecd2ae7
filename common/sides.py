"""The two sides of every comparison, spelled once for demo/ and servers/ alike (the glossary in
docs/development.md): the baseline server and the speculative one. A race of several methods has
one baseline and 1 to 3 *arms*, each a speculative server; an arm's side is "speculative"."""

from __future__ import annotations

from typing import Literal

Side = Literal["baseline", "speculative"]
SIDES: tuple[Side, Side] = ("baseline", "speculative")  # in the order they are shown and started
