"""The bounds of each input, written once, as pydantic types: every model that takes one of these
inputs (a preset, a workload line, a race's request, a sweep, a load sweep) uses its type, so a
bound lives here and its message is pydantic's, said in one line by common/validation.py (the
CLI names its flag: demo.cli.args.usage_error; the page names the field). A list of numbers typed
as text (a sweep's concurrency, the what-if's lengths) is read by parse_numbers, for the CLI and
the page alike.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field

from demo.errors import BadInput

TEMPERATURE_MIN, TEMPERATURE_MAX = 0.0, 2.0
MAX_TOKENS_LIMIT = 32768  # what one request may ask for
CONCURRENCY_LIMIT = 1024  # streams at once per server (a sweep's concurrency, a load sweep's users)
REPEATS_LIMIT = 100  # repeats of a cell or a load step
WARMUP_LIMIT = 100  # untimed warm-up batches

Temperature = Annotated[float, Field(ge=TEMPERATURE_MIN, le=TEMPERATURE_MAX)]
MaxTokens = Annotated[int, Field(ge=1, le=MAX_TOKENS_LIMIT)]
Concurrency = Annotated[int, Field(ge=1, le=CONCURRENCY_LIMIT)]
Repeats = Annotated[int, Field(ge=1, le=REPEATS_LIMIT)]
WarmupBatches = Annotated[int, Field(ge=0, le=WARMUP_LIMIT)]


def parse_numbers(text: str, kind: type, what: str) -> list[Any]:
    """Comma-separated numbers of ``kind`` for the input ``what`` (the flag ``--what``); BadInput
    about ``what`` when not (demo.cli.args.usage_error gives the CLI's wording)."""
    try:
        values = [kind(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise BadInput.about(what, f"must be comma-separated numbers, got {text!r}") from None
    if not values:
        raise BadInput.about(what, "is empty")
    return values
