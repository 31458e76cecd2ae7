#!/usr/bin/env bash
# THE test command (README, .ci/run): sets everything up from the project's own files, checks
# lint and types (ruff, mypy; a finding fails the run before any test), and runs every test: fast
# ones (stand-in servers on 127.0.0.1), browser ones (headless Chromium), then the end-to-end
# suite against two real CPU vLLM servers (started by its fixture, stopped after); the e2e stage
# also parses every generated vLLM command with vLLM's own parser (tests/test_vllm_args.py) and has
# a real Prometheus scrape the servers (tests/e2e/test_prometheus_e2e.py).
#   bash scripts/test.sh            # everything
#   bash scripts/test.sh --fast     # skip the real-vLLM end-to-end suite
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
T0=$(date +%s)
stamp() { echo "[test] $* (+$(( $(date +%s) - T0 )) s)"; }

bash scripts/setup_app.sh
bash scripts/install_browser.sh
stamp "app venv and browser ready"

# Lint and types first (config in pyproject.toml): both run, either failing fails the run.
lint=0
.venv/bin/ruff check . || lint=1
.venv/bin/mypy || lint=1
stamp "ruff and mypy done (exit $lint)"
[[ $lint -eq 0 ]] || exit $lint

# Fast and browser tests first, on an idle machine: their timing checks need the cores
# the vLLM servers would otherwise take.
status=0
.venv/bin/python -m pytest -m "not e2e" -q -p no:cacheprovider || status=$?
stamp "fast and browser tests done (exit $status)"

if [[ "${1:-}" != "--fast" ]]; then
    bash scripts/setup_cpu_servers.sh
    stamp "CPU vLLM venv ready"
    # Debian's Prometheus for tests/e2e/test_prometheus_e2e.py (skipped with a reason without it).
    bash scripts/install_prometheus.sh || echo "[test] Prometheus not installed; its e2e test will skip"
    e2e=0
    .venv/bin/python -m pytest -m e2e -q -p no:cacheprovider -s || e2e=$?
    stamp "end-to-end tests done (exit $e2e)"
    [[ $status -eq 0 ]] && status=$e2e
fi
exit $status
