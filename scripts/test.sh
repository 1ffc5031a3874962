#!/usr/bin/env bash
# Install everything (gateway, local engine, models, test tools), make sure Redis and
# PostgreSQL answer, lint (ruff) and type-check (mypy), then run the whole test suite. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
GW_EXTRAS=test bash scripts/install.sh
apt_install() {
    local sudo
    sudo=$([ "$(id -u)" -eq 0 ] || echo sudo)
    $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "$@"
}
# The dashboard's browser tests use Debian's chromium through Playwright (no browser download).
[ -x /usr/bin/chromium ] || apt_install chromium
# The rolling-restart tests and the fault drill put the replicas behind Debian's nginx (deploy/nginx.conf)
# and HAProxy (deploy/haproxy.cfg).
command -v nginx >/dev/null || [ -x /usr/sbin/nginx ] || apt_install nginx-light
command -v haproxy >/dev/null || [ -x /usr/sbin/haproxy ] || apt_install haproxy
# The Node SDK tests (tests/e2e/test_node_sdk.py) use the machine's Node.js and the pinned SDK.
command -v npm >/dev/null || apt_install nodejs npm
npm ci --prefix tests/e2e/node --no-audit --no-fund --loglevel=error
bash scripts/services.sh
bash scripts/test_databases.sh
# Lint and type-check first (a minute): a finding fails the run before the long test suite starts.
.venv/bin/ruff check .
.venv/bin/mypy
exec .venv/bin/python -m pytest "$@"
