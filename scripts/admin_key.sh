#!/usr/bin/env bash
# The dashboard's admin key for `scripts/serve.sh`: unless the config (or GW_AUTH__ADMIN_KEY) sets
# one, it is made once and kept 0600 in $GW_STATE_DIR/admin_key (default .gateway/), and printed on
# stdout for serve.sh to pass on. One line on stderr says where the dashboard is and how to sign in.
# usage: scripts/admin_key.sh CONFIG
set -euo pipefail
cd "$(dirname "$0")/.."
read -r url has_key < <(.venv/bin/python -c '
import sys
from gateway.config import load_config
s = load_config(sys.argv[1])
print(f"http://{s.server.host}:{s.server.port}/admin", int(s.auth.admin_key is not None))' "$1")
if [ "$has_key" = 1 ]; then
  echo "==> dashboard: $url (sign in with your configured admin key)" >&2
  exit 0
fi
key_file="${GW_STATE_DIR:-.gateway}/admin_key"
if [ ! -s "$key_file" ]; then
  mkdir -p "$(dirname "$key_file")"
  (umask 077 && .venv/bin/python -c 'import secrets; print("sk-admin-" + secrets.token_urlsafe(32))' >"$key_file")
fi
chmod 600 "$key_file"
echo "==> dashboard: $url (sign in with the admin key in $key_file; for gwctl: export GW_ADMIN_KEY=\$(cat $key_file))" >&2
cat "$key_file"
