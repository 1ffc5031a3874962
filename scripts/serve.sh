#!/usr/bin/env bash
# Install everything, then start the gateway with the bundled local engine on 127.0.0.1:8080.
# Extra arguments go to `gwctl serve` (e.g. --port 9000, or -c your.yaml).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
config="${GW_CONFIG:-deploy/config/local.yaml}"
.venv/bin/gwctl db upgrade --config "$config"
exec .venv/bin/gwctl serve --config "$config" "$@"
