"""The command line's layout (docs/development.md): every command's parser and handler lives in
demo/cli/<command>.py, and importing what the commands share (demo.cli.args) loads no command."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from typing import Any

import pytest

from demo.cli import main
from demo.settings import ROOT

# The one module holding two commands: drift (check) is judged against the guardrails' figures.
MODULE_OF = {"check": "guardrails"}


def test_each_command_is_built_and_handled_in_its_own_module(monkeypatch: pytest.MonkeyPatch) -> None:
    built: dict[str, tuple[str, Any]] = {}
    add_parser = argparse._SubParsersAction.add_parser

    def recording(self: argparse._SubParsersAction, name: str, **kwargs: Any) -> argparse.ArgumentParser:
        parser = add_parser(self, name, **kwargs)
        built[name] = (sys._getframe(1).f_globals["__name__"], parser)
        return parser

    monkeypatch.setattr(argparse._SubParsersAction, "add_parser", recording)
    with pytest.raises(SystemExit) as done:
        main(["--help"])
    assert done.value.code == 0
    assert sorted(built) == ["check", "export", "guardrails", "load", "race", "schedule", "sweep", "whatif"]
    for name, (caller, parser) in built.items():
        home = f"demo.cli.{MODULE_OF.get(name, name)}"
        assert caller == home, f"{name}'s parser is built in {caller}, not {home}"
        assert parser.get_default("func").__module__ == home, f"{name}'s handler is not in {home}"


def test_the_shared_args_load_no_command() -> None:
    probe = ("import json, sys; import demo.cli.args; "
             "print(json.dumps(sorted(m for m in sys.modules if m == 'demo.cli' or m.startswith('demo.cli.'))))")
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == ["demo.cli", "demo.cli.args"]
