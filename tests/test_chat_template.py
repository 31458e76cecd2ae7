"""The default model's chat template with tools (servers/templates/smollm2_tools.jinja) against the
model's own, rendered by transformers in the CPU vLLM venv (tests/chat_template_check.py):

- every preset and a few tool-free chats render byte-identical with both, so no figure measured
  with the model's own template moves;
- a request with tools and a history with an assistant ``tool_calls`` turn and ``role: tool``
  answers render in vLLM's hermes form, and vLLM's own hermes parser reads each call back.

Marked e2e: it needs .venv-vllm and the converted model (the e2e stage of scripts/test.sh sets both
up); one import of transformers and vLLM's parser for all cases (~15 s of CPU)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from common.paths import ROOT
from demo.client import request_body
from demo.presets import load_presets
from servers.config import SMOLLM2_TOOLS_TEMPLATE

pytestmark = pytest.mark.e2e

VLLM_PYTHON = ROOT / ".venv-vllm" / "bin" / "python"

READ_FILE = {"type": "function", "function": {
    "name": "read_file", "description": "Read a file of the repository <with markup & quotes \">",
    "parameters": {"type": "object", "properties": {"path": {"type": "string", "description": "relative path"}},
                   "required": ["path"]}}}
RUN_TESTS = {"type": "function", "function": {
    "name": "run_tests", "description": "Run the test suite; returns its output",
    "parameters": {"type": "object", "properties": {}}}}

# Tool-free chats beyond the presets: no system turn, a system turn, several turns, a system turn
# that is not first, unicode and markup, an empty answer, no generation prompt.
CHATS: dict[str, dict[str, Any]] = {
    "chat/user-only": {"messages": [{"role": "user", "content": "Hi"}]},
    "chat/system-first": {"messages": [{"role": "system", "content": "Be brief."},
                                       {"role": "user", "content": "Name a colour."}]},
    "chat/multi-turn": {"messages": [
        {"role": "user", "content": "Write a haiku."}, {"role": "assistant", "content": "Leaves fall\nquietly"},
        {"role": "user", "content": "Another, about <tags> & \"quotes\" — ünïcödé ✓"}]},
    "chat/late-system": {"messages": [{"role": "user", "content": "a"}, {"role": "system", "content": "b"},
                                      {"role": "user", "content": "c"}]},
    "chat/empty-answer": {"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": ""},
                                       {"role": "user", "content": "y"}]},
    "chat/no-generation-prompt": {"messages": [{"role": "user", "content": "x"},
                                               {"role": "assistant", "content": "y"}],
                                  "add_generation_prompt": False},
}

# The OpenAI form a client sends: arguments as a JSON string, content null beside the calls, the
# tool answers naming the call they answer by id only. vLLM hands the template the arguments parsed
# (its chat_utils._postprocess_messages); "history/arguments-as-dict" renders that form.
HISTORY: list[dict[str, Any]] = [
    {"role": "system", "content": "You fix bugs."},
    {"role": "user", "content": "The test fails; fix it."},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "read_file", "arguments": '{"path": "app/a.py"}'}},
        {"id": "call_2", "type": "function", "function": {"name": "run_tests", "arguments": "{}"}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "def add(a, b):\n    return a - b\n"},
    {"role": "tool", "tool_call_id": "call_2", "content": "FAILED test_add: assert -1 == 3"},
    {"role": "assistant", "content": "The sign is wrong."},
]


def _dict_arguments(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = json.loads(json.dumps(messages))
    for m in out:
        for call in m.get("tool_calls") or []:
            call["function"]["arguments"] = json.loads(call["function"]["arguments"])
    return out


def cases() -> list[dict[str, Any]]:
    """Every chat preset as the client sends it, the tool-free chats, and the tool cases."""
    presets, problems = load_presets(ROOT / "presets")
    assert not problems and presets
    out = [{"label": f"preset/{name}", "messages": request_body(p.to_request(), "smollm2")["messages"]}
           for name, p in sorted(presets.items()) if p.api == "chat"]
    out += [{"label": label, **case} for label, case in CHATS.items()]
    out += [
        {"label": "tools/request", "messages": [{"role": "user", "content": "Fix the bug."}],
         "tools": [READ_FILE, RUN_TESTS]},
        {"label": "tools/request-with-system", "messages": HISTORY[:2], "tools": [READ_FILE]},
        {"label": "history/arguments-as-text", "messages": HISTORY, "tools": [READ_FILE, RUN_TESTS]},
        {"label": "history/arguments-as-dict", "messages": _dict_arguments(HISTORY), "tools": [READ_FILE, RUN_TESTS]},
        {"label": "history/tool-named", "messages": [
            {"role": "user", "content": "Run the tests."},
            {"role": "assistant", "content": "Running them.", "tool_calls": [
                {"id": "c9", "type": "function", "function": {"name": "run_tests", "arguments": "{}"}}]},
            {"role": "tool", "name": "run_tests", "content": "2 passed"}]},
    ]
    return out


def model_dir() -> Path:
    """The converted default model, prepared (once) by the launcher's own code in the vLLM venv."""
    done = subprocess.run([str(VLLM_PYTHON), "-m", "servers.model", "prepare", "--cache-dir",
                           str(Path.home() / ".cache" / "specdemo")], cwd=ROOT, capture_output=True, text=True,
                          timeout=1200, env={"PATH": "/usr/bin:/bin", "HOME": str(Path.home()),
                                             "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"})
    assert done.returncode == 0, done.stderr[-2000:]
    return Path(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    if not VLLM_PYTHON.exists():
        pytest.skip(f"{VLLM_PYTHON} missing: bash scripts/setup_cpu_servers.sh installs the CPU vLLM venv")
    tmp = tmp_path_factory.mktemp("chat-template")
    (tmp / "in.json").write_text(json.dumps({"model_dir": str(model_dir()), "template": str(SMOLLM2_TOOLS_TEMPLATE),
                                             "cases": cases()}))
    done = subprocess.run([str(VLLM_PYTHON), str(ROOT / "tests" / "chat_template_check.py"), str(tmp / "in.json"),
                           str(tmp / "out.json")], cwd=tmp, capture_output=True, text=True, timeout=600,
                          env={"PATH": "/usr/bin:/bin", "HOME": str(tmp), "HF_HUB_OFFLINE": "1",
                               "VLLM_NO_USAGE_STATS": "1", "VLLM_LOGGING_LEVEL": "WARNING"})
    assert done.returncode == 0, done.stderr[-3000:]
    out: dict[str, dict[str, Any]] = json.loads((tmp / "out.json").read_text())
    return out


def test_every_preset_and_tool_free_chat_renders_byte_identical(rendered: dict[str, dict[str, Any]]) -> None:
    free = {k: v for k, v in rendered.items() if k.startswith(("preset/", "chat/"))}
    assert len([k for k in free if k.startswith("preset/")]) >= 8, sorted(free)
    for label, r in free.items():
        assert r["own_error"] is None and r["ours_error"] is None, (label, r)
        assert r["ours"] == r["own"], label
        assert "<tools>" not in r["ours"] and "<tool_call>" not in r["ours"], label
    assert rendered["chat/no-generation-prompt"]["ours"].endswith("y<|im_end|>\n")


def test_the_models_own_template_cannot_render_a_tool_history(rendered: dict[str, dict[str, Any]]) -> None:
    """The gap the template closes: the model's own template drops the tools and fails on null content."""
    assert "read_file" not in rendered["tools/request"]["own"]
    assert rendered["history/arguments-as-text"]["own_error"] is not None


def test_tools_go_in_the_system_turn_in_hermes_form(rendered: dict[str, dict[str, Any]]) -> None:
    text = rendered["tools/request"]["ours"]
    system = text.split("<|im_end|>\n", 1)[0]
    assert system.startswith("<|im_start|>system\nYou are a helpful AI assistant named SmolLM")
    # One JSON object a line inside <tools></tools>, as transformers' tojson writes it (not HTML-escaped).
    block = system.split("<tools>\n", 1)[1].split("\n</tools>", 1)[0]
    assert [json.loads(line) for line in block.splitlines()] == [READ_FILE, RUN_TESTS]
    assert json.dumps(READ_FILE, ensure_ascii=False) in block
    assert "<tool_call>" in system
    assert text.endswith("<|im_start|>user\nFix the bug.<|im_end|>\n<|im_start|>assistant\n")
    with_system = rendered["tools/request-with-system"]["ours"]
    assert with_system.startswith("<|im_start|>system\nYou fix bugs.\n\n# Tools\n")
    assert "SmolLM" not in with_system


def test_a_tool_call_history_renders_as_hermes_reads_it(rendered: dict[str, dict[str, Any]]) -> None:
    calls = [{"name": "read_file", "arguments": {"path": "app/a.py"}}, {"name": "run_tests", "arguments": {}}]
    for label in ("history/arguments-as-text", "history/arguments-as-dict"):
        r = rendered[label]
        assert r["ours_error"] is None, r
        # vLLM's hermes parser reads the calls back from the assistant turn; the prose turn has none.
        assert r["hermes"] == [calls, []], label
        text = r["ours"]
        assert ('<|im_start|>assistant\n<tool_call>\n{"name": "read_file", "arguments": {"path": "app/a.py"}}\n'
                '</tool_call>\n<tool_call>\n{"name": "run_tests", "arguments": {}}\n</tool_call><|im_end|>\n') in text
        # Each tool answer in its own turn, named after the call its tool_call_id answers.
        assert ('<|im_start|>tool\n<tool_response>\n{"name": "read_file", "content": "def add(a, b):\\n    '
                'return a - b\\n"}\n</tool_response><|im_end|>\n<|im_start|>tool\n<tool_response>\n'
                '{"name": "run_tests", "content": "FAILED test_add: assert -1 == 3"}\n</tool_response><|im_end|>\n'
                '<|im_start|>assistant\nThe sign is wrong.<|im_end|>\n<|im_start|>assistant\n') in text
    assert rendered["history/arguments-as-text"]["ours"] == rendered["history/arguments-as-dict"]["ours"]
    named = rendered["history/tool-named"]
    assert named["hermes"] == [[{"name": "run_tests", "arguments": {}}]]
    assert ('<|im_start|>assistant\nRunning them.\n<tool_call>\n{"name": "run_tests", "arguments": {}}\n</tool_call>'
            in named["ours"])
    assert '{"name": "run_tests", "content": "2 passed"}' in named["ours"]
