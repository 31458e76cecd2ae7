#!/usr/bin/env bash
# Create (or bring up to date) the app venv .venv: the page, the client, the evaluator, the tests.
# No vLLM and no torch here; the CPU servers have their own venv (scripts/setup_cpu_servers.sh).
# Idempotent: with unchanged requirements a second run installs nothing and returns at once.
#   scripts/setup_app.sh          # app + test requirements
#   scripts/setup_app.sh --app    # app requirements only (a .venv with the test ones as well stays)
# By default the venv lives in the cache, ~/.cache/specdemo/venv-app[-dev]-<hash of the
# requirements and Python>, and ./.venv links to it (scripts/venv_cache.sh): a CI clone or a
# worktree finds it ready. A ./.venv that is a real folder (made before) is kept and updated.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/venv_cache.sh"
PY="${PYTHON:-python3.11}"
command -v "$PY" >/dev/null 2>&1 || PY=python3
pyver="$("$PY" -c 'import sys; print(sys.version)')"
app_hash="$( (echo "$pyver"; cat "$ROOT/requirements.txt") | sha256sum | cut -d' ' -f1)"
dev_hash="$( (echo "$pyver"; cat "$ROOT/requirements.txt" "$ROOT/requirements-ray.txt" "$ROOT/requirements-dev.txt") | sha256sum | cut -d' ' -f1)"
# Installed, by their metadata (an import of Gradio alone takes seconds).
CHECK=(-c "import importlib.metadata as m, sys; [m.version(p) for p in sys.argv[1:]]" gradio httpx plotly pydantic-settings)
if [[ "${1:-}" == "--app" ]]; then
    REQ="$ROOT/requirements.txt" NAME=venv-app WANT="$app_hash"
    # A .venv with the test requirements too holds everything the app needs: it stays.
    if [[ -L "$ROOT/.venv" ]] && VENV="$(readlink "$ROOT/.venv")" \
        && venv_up_to_date "$dev_hash" "$VENV/bin/python" "${CHECK[@]}"; then
        echo "[setup-app] .venv up to date: $VENV (requirements-dev.txt)"
        exit 0
    fi
else
    REQ="$ROOT/requirements-dev.txt" NAME=venv-app-dev WANT="$dev_hash"
    CHECK+=(pytest pytest-xdist mypy)
fi
venv_in_cache "$NAME" "$WANT" "$ROOT/.venv"
if venv_up_to_date "$WANT" "$VENV/bin/python" "${CHECK[@]}"; then
    echo "[setup-app] .venv up to date: $VENV ($(basename "$REQ"))"
    exit 0
fi
[[ -x "$VENV/bin/python" ]] || "$PY" -m venv "$VENV"
# (grep drops pip's notes about this machine's extra local index folders, one per package)
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -r "$REQ" 2>&1 \
    | { grep -v "^WARNING: Location 'file:" || true; }
venv_stamp "$WANT"
echo "[setup-app] .venv ready: $VENV ($(basename "$REQ"))"
