#!/usr/bin/env bash
# Create (or update) the app venv .venv: the page, the client, the evaluator, the tests.
# No vLLM and no torch here; the CPU servers have their own venv (scripts/setup_cpu_servers.sh).
#   scripts/setup_app.sh          # app + test requirements
#   scripts/setup_app.sh --app    # app requirements only
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PYTHON:-python3.11}"
command -v "$PY" >/dev/null 2>&1 || PY=python3
REQ="$ROOT/requirements-dev.txt"
[[ "${1:-}" == "--app" ]] && REQ="$ROOT/requirements.txt"
[[ -x "$ROOT/.venv/bin/python" ]] || "$PY" -m venv "$ROOT/.venv"
# (grep drops pip's notes about this machine's extra local index folders, one per package)
"$ROOT/.venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$REQ" 2>&1 \
    | { grep -v "^WARNING: Location 'file:" || true; }
echo "[setup-app] .venv ready ($(basename "$REQ"))"
