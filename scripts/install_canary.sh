#!/usr/bin/env bash
# Debian's HAProxy (the canary's router) and Alertmanager (the rollback's alert path) for
# `python -m servers canary` and its tests (tests/test_canary*.py; skipped with a reason without
# them). Only the binaries are used: the packages' own services are not started.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/apt_install.sh"
apt_install canary "the canary tests" haproxy:haproxy prometheus-alertmanager:prometheus-alertmanager
if command -v haproxy >/dev/null 2>&1 && command -v prometheus-alertmanager >/dev/null 2>&1; then
    echo "[canary] $(haproxy -v 2>&1 | head -n 1); $(prometheus-alertmanager --version 2>&1 | head -n 1)"
fi
exit 0
