#!/usr/bin/env bash
# Debian's Prometheus for the monitoring e2e test and `python -m servers monitor` (no Docker needed).
# Only the binary is used: the package's own service is not started (tests run their own instance).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/apt_install.sh"
apt_install prometheus "the Prometheus e2e test" prometheus:prometheus
command -v prometheus >/dev/null 2>&1 && echo "[prometheus] $(prometheus --version 2>&1 | head -n 1)"
exit 0
