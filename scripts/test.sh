#!/usr/bin/env bash
# Install everything (gateway, local engine, models, test tools), make sure Redis and
# PostgreSQL answer, then run the whole test suite. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
GW_EXTRAS=test bash scripts/install.sh
# The dashboard's browser tests use Debian's chromium through Playwright (no browser download).
if [ ! -x /usr/bin/chromium ]; then
    SUDO=$([ "$(id -u)" -eq 0 ] || echo sudo)
    $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium
fi
# The Node SDK tests (tests/e2e/test_node_sdk.py) use the machine's Node.js and the pinned SDK.
if ! command -v npm >/dev/null; then
    SUDO=$([ "$(id -u)" -eq 0 ] || echo sudo)
    $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq nodejs npm
fi
npm ci --prefix tests/e2e/node --no-audit --no-fund --loglevel=error
bash scripts/services.sh
exec .venv/bin/python -m pytest "$@"
