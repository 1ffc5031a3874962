#!/usr/bin/env bash
# Install everything, then start the gateway with the bundled local engine on 127.0.0.1:8080.
# Extra arguments go to `gwctl serve` (e.g. --port 9000, or -c your.yaml).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
config="${GW_CONFIG:-deploy/config/local.yaml}"
.venv/bin/gwctl db upgrade --config "$config"

# The dashboard (/admin) needs an admin key: made on first start unless configured (admin_key.sh).
key="$(bash scripts/admin_key.sh "$config")"
if [ -n "$key" ]; then
  export GW_AUTH__ADMIN_KEY="$key"
fi
exec .venv/bin/gwctl serve --config "$config" "$@"
