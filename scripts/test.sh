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
bash scripts/services.sh
exec .venv/bin/python -m pytest "$@"
