"""The library's exceptions, in one place. Callers catch a class, not a message text.

    DemoError                  anything the library refuses or cannot do; str(e) is one line in
     │                         the user's words (no command-line flag: the CLI adds those)
     ├── BadInput (ValueError)  input the user can fix: a number out of range, a file that is not
     │    │                     a saved race, a workload line, a run too large to save
     │    └── NotFound          something named that is not there: a file, a preset
     └── ServerError           a server failed or answered wrongly (demo.client.StreamError)

BadInput may say which input it is about (``field``: "concurrency", "temperatures", the word the
page uses and the CLI's flag without its dashes); the CLI then says ``--field problem``
(``demo.cli.args.usage_error``) and the page shows ``field problem``.
BadInput stays a ValueError, so code that treats a ValueError as bad input keeps doing so.
"""

from __future__ import annotations


class DemoError(Exception):
    """Anything the library refuses or cannot do: the message is one line saying what and why."""


class BadInput(DemoError, ValueError):
    """Input the user can fix. ``field`` names the input when there is one; ``str(e)`` is then
    ``"<field> <problem>"``."""

    def __init__(self, message: str, field: str | None = None, problem: str | None = None) -> None:
        super().__init__(message)
        self.field = field
        self.problem = problem

    @classmethod
    def about(cls, field: str, problem: str) -> BadInput:
        """``field`` ("concurrency") and its ``problem`` ("values must be between 1 and 1024")."""
        return cls(f"{field} {problem}", field=field, problem=problem)


class NotFound(BadInput):
    """Something the user named is not there (a file, a preset)."""


class ServerError(DemoError):
    """A server failed or answered wrongly; the message names the URL and what to do."""


# vLLM 0.32's words when a request offers tools to a server started without a tool parser name the
# flag: '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set', and
# 'tool_choice="required" requires --tool-call-parser to be set' (tests/fixtures/error-tools-no-parser.txt).
# The server can be fixed, so the line names the flags it needs.
NO_TOOL_PARSER = "requires --tool-call-parser"
NO_AUTO_TOOL_PARSER = "requires --enable-auto-tool-choice and --tool-call-parser"
TOOL_PARSER_FLAGS = "--enable-auto-tool-choice --tool-call-parser hermes"


def tool_parser_hint(message: str) -> str | None:
    """The fix for a server that refused a request's tools because it has no tool parser; None for any
    other message."""
    if NO_TOOL_PARSER not in message and NO_AUTO_TOOL_PARSER not in message:
        return None
    return (f"the server has no tool parser: start vLLM with {TOOL_PARSER_FLAGS} (or its model family's "
            "parser, e.g. llama3_json; python -m servers up does), or send the requests without tools")
