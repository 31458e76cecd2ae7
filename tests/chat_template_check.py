"""Render chat conversations with the default model's own chat template and with ours; run by the
CPU vLLM venv's python (it has transformers and vLLM):

    .venv-vllm/bin/python tests/chat_template_check.py CASES.json RESULTS.json

CASES.json: {"model_dir": str, "template": str (our template file), "cases": [{"label": str,
"messages": [...], "tools": [...] or null, "add_generation_prompt": bool}]}. Each case is rendered
by transformers' ``apply_chat_template`` (as vLLM renders a chat request) with the model folder's
own template and with ours; an error is kept as its one-line message. Each assistant turn of our
rendering is then read back by vLLM's own ``hermes`` tool parser (``Hermes2ProToolParser``), as the
server reads an answer. Writes {label: {"own", "own_error", "ours", "ours_error", "hermes": [[{"name",
"arguments"}, ...] per assistant turn]}} to RESULTS.json and exits 0: the caller decides. Uses only
transformers, vLLM and the standard library: it runs outside the app's venv.
"""

from __future__ import annotations

import json
import sys
from typing import Any

ASSISTANT = "<|im_start|>assistant\n"
END = "<|im_end|>"


def _render(tokenizer: Any, case: dict[str, Any], template: str | None) -> tuple[str | None, str | None]:
    try:
        text = tokenizer.apply_chat_template(
            case["messages"], tools=case.get("tools"), tokenize=False,
            add_generation_prompt=case.get("add_generation_prompt", True), chat_template=template,
        )
    except Exception as e:  # jinja raises many kinds; keep whichever with its message
        return None, f"{type(e).__name__}: {e}".splitlines()[0]
    return str(text), None


def _assistant_turns(text: str) -> list[str]:
    """Each finished assistant turn's text (after its header, before its end)."""
    return [part.split(END, 1)[0] for part in text.split(ASSISTANT)[1:] if END in part]


def main(path: str, out_path: str) -> int:
    """Render every case of ``path`` both ways, read ours back with the hermes parser, write ``out_path``."""
    from transformers import AutoTokenizer
    from vllm.tool_parsers.hermes_tool_parser import Hermes2ProToolParser

    spec = json.loads(open(path, encoding="utf-8").read())
    tokenizer = AutoTokenizer.from_pretrained(spec["model_dir"])
    ours = open(spec["template"], encoding="utf-8").read()
    parser = Hermes2ProToolParser(tokenizer)
    results: dict[str, dict[str, Any]] = {}
    for case in spec["cases"]:
        own_text, own_error = _render(tokenizer, case, None)
        our_text, our_error = _render(tokenizer, case, ours)
        hermes = []
        for turn in _assistant_turns(our_text or ""):
            info = parser.extract_tool_calls(turn, None)  # the request is not read
            hermes.append([{"name": c.function.name, "arguments": json.loads(c.function.arguments)}
                           for c in info.tool_calls] if info.tools_called else [])
        results[case["label"]] = {"own": own_text, "own_error": own_error, "ours": our_text,
                                  "ours_error": our_error, "hermes": hermes}
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump(results, f)
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    raise SystemExit(main(sys.argv[1], sys.argv[2]))
