#!/usr/bin/env bash
# Make sure PostgreSQL and Redis answer on 127.0.0.1; start (or install) them when they don't.
set -euo pipefail

apt_install() {
  if [ ! -f /var/lib/apt/lists/.gpujobs-updated ]; then
    apt-get update -qq && touch /var/lib/apt/lists/.gpujobs-updated
  fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

ensure_postgres() {
  if pg_isready -q -h 127.0.0.1 -p 5432 2>/dev/null; then return; fi
  command -v pg_ctlcluster >/dev/null || apt_install postgresql
  local version
  version=$(ls /etc/postgresql | sort -V | tail -n 1)
  pg_ctlcluster --skip-systemctl-redirect "$version" main start || true
  for _ in $(seq 1 30); do
    pg_isready -q -h 127.0.0.1 -p 5432 && break
    sleep 0.5
  done
  pg_isready -q -h 127.0.0.1 -p 5432 || { echo "PostgreSQL did not start" >&2; exit 1; }
  # The tests connect as postgres over TCP without a password, as on these machines.
  if ! psql -h 127.0.0.1 -U postgres -c 'select 1' >/dev/null 2>&1; then
    local hba
    hba=$(su postgres -c "psql -tAc 'show hba_file'")
    sed -i 's/^\(host.*127.0.0.1\/32\s*\)\S*$/\1trust/' "$hba"
    pg_ctlcluster --skip-systemctl-redirect "$version" main reload
  fi
}

ensure_redis() {
  if redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1; then return; fi
  command -v redis-server >/dev/null || apt_install redis-server
  redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save '' --appendonly no
  for _ in $(seq 1 20); do
    redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1 && return
    sleep 0.25
  done
  echo "Redis did not start" >&2
  exit 1
}

ensure_postgres
ensure_redis
echo "services: PostgreSQL and Redis are up on 127.0.0.1"
