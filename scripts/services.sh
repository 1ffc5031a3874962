#!/usr/bin/env bash
# Make sure Redis (127.0.0.1:6379) and PostgreSQL (127.0.0.1:5432) answer; start them if not.
set -uo pipefail

wait_for() {  # name, check command...
  local name=$1; shift
  for _ in $(seq 1 60); do "$@" >/dev/null 2>&1 && { echo "==> $name is up" >&2; return 0; }; sleep 0.5; done
  echo "==> $name did not come up" >&2; return 1
}

redis_ok() { redis-cli -h 127.0.0.1 -p 6379 ping | grep -q PONG; }
pg_ok() { pg_isready -h 127.0.0.1 -p 5432 -q; }

if ! redis_ok 2>/dev/null; then
  echo "==> starting Redis" >&2
  mkdir -p /var/lib/redis /var/log/redis
  redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no \
    --dir /var/lib/redis --logfile /var/log/redis/ci.log
fi
wait_for Redis redis_ok || exit 1

if ! pg_ok 2>/dev/null; then
  echo "==> starting PostgreSQL" >&2
  pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n1)" main start
fi
wait_for PostgreSQL pg_ok || exit 1
