"""A pydantic ValidationError as one line a person can read: "field: message", never the input."""

from __future__ import annotations

from collections.abc import Callable

from pydantic import ValidationError


def validation_errors(e: ValidationError) -> list[tuple[str, str]]:
    """(field path 'a.b.0', message) per error, in pydantic's order."""
    return [("", f"not valid JSON ({err['msg']})") if err["type"] == "json_invalid"
            else (".".join(str(p) for p in err["loc"]), err["msg"]) for err in e.errors()]


def validation_summary(e: ValidationError, every: bool = False, count_rest: bool = False,
                       name: Callable[[str], str] | None = None) -> str:
    """'field: message' of the first error (of every error, joined by '; ', with ``every``);
    ``count_rest`` adds '(and N more)'; ``name`` says a field path in the caller's words (the
    CLI's flag: demo.cli.args.usage_error). Never the input itself: it may hold a secret."""
    errors = list(dict.fromkeys(validation_errors(e)))  # a union reports once per member: said once
    if name is not None:
        errors = [(name(loc) if loc else loc, msg) for loc, msg in errors]
    text = "; ".join(f"{loc}: {msg}" if loc else msg for loc, msg in (errors if every else errors[:1]))
    if count_rest and not every and len(errors) > 1:
        text += f" (and {len(errors) - 1} more)"
    return text
