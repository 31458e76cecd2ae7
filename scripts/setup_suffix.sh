#!/usr/bin/env bash
# Build Snowflake's arctic-inference (what vLLM's `method: "suffix"` needs) against the CPU vLLM
# venv, for the `suffix` arm only. Opt-in: `bash scripts/setup_cpu_servers.sh --suffix` runs this
# after the venv is ready; alone: `bash scripts/setup_suffix.sh [VENV]` (default ./.venv-vllm).
# Idempotent: a second run with the same venv and version returns in seconds.
#
# arctic-inference 0.3.0 is on PyPI as a source distribution only. With pip's build isolation its
# build would fetch a second torch (the CUDA build), so it is built against the venv's own torch,
# with the build tools in a scratch folder, and installed with --no-deps into a folder of its own,
# ${XDG_CACHE_HOME:-~/.cache}/specdemo/arctic-inference-<hash>, linked as ./.venv-suffix: the shared
# venv, vLLM and torch stay as they are. The launcher puts that folder on PYTHONPATH for a server
# whose speculative method is "suffix", and for no other (docs/cpu-servers.md#suffix-decoding).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/venv_cache.sh"
VLLM_VENV="${1:-$ROOT/.venv-vllm}"
SPEC="arctic-inference==0.3.0"
# Its build requirements (pyproject.toml of the sdist), pinned where it pins them.
BUILD_TOOLS=("nanobind==2.9.2" "protobuf==5.29.6" "grpcio-tools==1.71.2" "setuptools" "wheel" "ninja" "cmake")
START=$(date +%s)

log() { printf '[setup-suffix] %s\n' "$*"; }

PY="$VLLM_VENV/bin/python"
if [[ ! -x "$PY" ]]; then
    log "error: no vLLM venv at $VLLM_VENV; create it first: bash scripts/setup_cpu_servers.sh"
    exit 1
fi
# The build is tied to the venv's torch (its headers and ABI) and to the version asked for.
torch_version="$("$PY" -c 'import torch; print(torch.__version__)')"
want_hash="$(echo "$SPEC ${BUILD_TOOLS[*]} torch=$torch_version $("$PY" -V 2>&1)" | sha256sum | cut -d' ' -f1)"
venv_in_cache arctic-inference "$want_hash" "$ROOT/.venv-suffix"
TARGET="$VENV"
check=(env PYTHONPATH="$TARGET" "$PY" -c
       "import arctic_inference.suffix_decoding as s, importlib.metadata as m; s.SuffixDecodingCache; print(m.version('arctic-inference'))")
if venv_up_to_date "$want_hash" "${check[@]}"; then
    log "up to date: $TARGET ($SPEC, torch $torch_version)"
    exit 0
fi

WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
PIP=("$PY" -m pip --disable-pip-version-check --quiet)
log "installing the build tools into a scratch folder: ${BUILD_TOOLS[*]}"
# --target: pip's check against the venv's packages would report conflicts that do not apply.
"${PIP[@]}" install --target "$WORK/tools" "${BUILD_TOOLS[@]}" 2>&1 | grep -v "requires\|incompatible\|dependency resolver" || true
[[ -x "$WORK/tools/bin/cmake" ]] || { log "error: the build tools did not install"; exit 1; }
export PYTHONPATH="$WORK/tools" PATH="$WORK/tools/bin:$PATH"
log "downloading the source distribution of $SPEC"
"${PIP[@]}" download --no-deps --no-binary :all: --no-build-isolation -d "$WORK/sdist" "$SPEC"
log "building it against torch $torch_version (C++ only: the suffix tree; about a minute)"
"${PIP[@]}" wheel --no-deps --no-build-isolation -w "$WORK/wheels" "$WORK"/sdist/arctic_inference-*.tar.gz
unset PYTHONPATH
rm -rf "$TARGET"
"${PIP[@]}" install --no-deps --target "$TARGET" "$WORK"/wheels/arctic_inference-*.whl
if ! version="$("${check[@]}")"; then
    log "error: the build installed, but does not import beside vLLM"
    exit 1
fi
venv_stamp "$want_hash"
log "done in $(( $(date +%s) - START )) s: arctic-inference $version in $TARGET (linked as .venv-suffix)"
