#!/usr/bin/env bash
# What the PostgreSQL tests need on a running server (tests/gateway/persistence/conftest.py): the
# role `postgres` and the database `test`, reachable over TCP on loopback without a password, as
# $GW_TEST_PG says (default postgresql://postgres@127.0.0.1:5432/test). A clean Debian install has
# the role but not the database, and asks loopback TCP clients for a password. Idempotent: does
# nothing when the tests can already connect.
set -euo pipefail
url="${GW_TEST_PG:-postgresql://postgres@127.0.0.1:5432/test}"
port="$(sed -E 's#.*:([0-9]+)/.*#\1#' <<<"$url")"
db="${url##*/}"
db="${db%%\?*}"

connects() { psql "$url" -Atqc 'select 1' >/dev/null 2>&1; }
connects && exit 0

as_postgres() {  # the cluster's superuser, over the local socket (peer auth)
  if [ "$(id -un)" = postgres ]; then "$@"
  elif [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"
  else sudo -u postgres "$@"; fi
}
sql() { as_postgres psql -p "$port" -Atqc "$1"; }

[ "$(sql "select 1 from pg_roles where rolname = 'postgres'")" = 1 ] || sql "create role postgres superuser login"
[ "$(sql "select 1 from pg_database where datname = '$db'")" = 1 ] || sql "create database \"$db\" owner postgres"

if ! connects; then  # a password is asked for on loopback: trust the postgres role there, for the tests
  hba="$(sql 'show hba_file')"
  if ! grep -q 'llm-gateway tests' "$hba"; then
    echo "==> letting role postgres connect over loopback TCP without a password ($hba)" >&2
    new="$(mktemp)"
    { printf '# llm-gateway tests (scripts/test_databases.sh)\n'
      printf 'host all postgres 127.0.0.1/32 trust\nhost all postgres ::1/128 trust\n'
      as_postgres cat "$hba"; } > "$new"
    as_postgres tee "$hba" < "$new" >/dev/null
    rm -f "$new"
    sql 'select pg_reload_conf()' >/dev/null
  fi
fi
connects || { echo "==> the PostgreSQL tests still cannot connect to $url" >&2; exit 1; }
echo "==> PostgreSQL test database ready ($url)" >&2
