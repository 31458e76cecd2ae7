#!/usr/bin/env bash
# Debian's Chromium for the browser tests (Playwright drives it; it never downloads a browser).
set -euo pipefail
if [[ -x /usr/bin/chromium ]]; then
    echo "[browser] $(/usr/bin/chromium --version 2>/dev/null || echo chromium present)"
    exit 0
fi
if [[ "$(id -u)" != 0 ]] || ! command -v apt-get >/dev/null 2>&1; then
    echo "[browser] /usr/bin/chromium missing and cannot apt-get it here: browser tests will be skipped" >&2
    exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null
apt-get install -y -qq chromium >/dev/null
echo "[browser] installed $(/usr/bin/chromium --version 2>/dev/null)"
