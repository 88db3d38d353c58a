#!/usr/bin/env bash
# Start or stop a throwaway Postgres for tests and the demo.
#   postgres.sh start PORT   prints nothing on success; the DSN is
#                            postgres://postgres@127.0.0.1:PORT/postgres?sslmode=disable
#   postgres.sh stop PORT
#   postgres.sh restart PORT fast shutdown (sessions are terminated), then start again
#   postgres.sh bin PORT     prints the directory of the PostgreSQL binaries (psql)
#   postgres.sh standby PORT PRIMARY_PORT
#                            starts a hot standby of the server on PRIMARY_PORT
#                            (pg_basebackup, streaming replication); stop it with stop
# Installs the PostgreSQL server with apt-get when its binaries are missing. Run as
# root, it runs the server as the postgres user, because Postgres refuses root.
# The server runs with wal_level=logical (for watch.mode: logical) unless
# SNAPFLIP_PG_WAL_LEVEL says otherwise. Its transaction ids start in epoch
# ${SNAPFLIP_PG_XID_EPOCH:-1} (pg_resetwal -e), past 2^32, as a long-lived busy
# database's are: a 32-bit xid (a row's xmin) then differs from pg_current_xact_id().
set -euo pipefail
cmd=${1:?usage: postgres.sh start|stop|restart|bin PORT | standby PORT PRIMARY_PORT}
port=${2:?usage: postgres.sh start|stop|restart|bin PORT | standby PORT PRIMARY_PORT}
dir=/tmp/snapflip-pg-$port

find_bin() {
  local d
  for d in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r) /usr/local/pgsql/bin; do
    if [ -x "$d/initdb" ] && [ -x "$d/pg_ctl" ]; then echo "$d"; return 0; fi
  done
  if command -v initdb >/dev/null && command -v pg_ctl >/dev/null; then dirname "$(command -v initdb)"; return 0; fi
  return 1
}

bin=$(find_bin || true)
if [ -z "$bin" ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "postgres.sh: PostgreSQL server binaries not found; install them (apt-get install postgresql) or run as root" >&2
    exit 1
  fi
  echo "postgres.sh: installing PostgreSQL with apt-get" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2
  apt-get install -y -qq postgresql >&2
  bin=$(find_bin)
fi

as_owner() {
  if [ "$(id -u)" -eq 0 ]; then
    id postgres >/dev/null 2>&1 || useradd --system --home-dir /var/lib/postgresql --shell /bin/sh postgres
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

case $cmd in
bin)
  echo "$bin"
  ;;
start)
  if [ -f "$dir/data/postmaster.pid" ] && as_owner "$bin/pg_ctl" -D "$dir/data" status >/dev/null 2>&1; then
    as_owner "$bin/pg_ctl" -D "$dir/data" -m immediate stop >/dev/null
  fi
  rm -rf "$dir"
  mkdir -p "$dir"
  [ "$(id -u)" -eq 0 ] && chown postgres "$dir"
  as_owner "$bin/initdb" -D "$dir/data" -U postgres --auth=trust --encoding=UTF8 --locale=C.UTF-8 >"$dir/initdb.log" 2>&1 ||
    { cat "$dir/initdb.log" >&2; exit 1; }
  as_owner "$bin/pg_resetwal" -e "${SNAPFLIP_PG_XID_EPOCH:-1}" -D "$dir/data" >>"$dir/initdb.log" 2>&1 ||
    { cat "$dir/initdb.log" >&2; exit 1; }
  as_owner "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
    -o "-p $port -k $dir -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200 -c wal_level=${SNAPFLIP_PG_WAL_LEVEL:-logical} -c max_replication_slots=40 -c max_wal_senders=40" \
    start >/dev/null || { cat "$dir/server.log" >&2; exit 1; }
  ;;
standby)
  primary=${3:?usage: postgres.sh standby PORT PRIMARY_PORT}
  if [ -f "$dir/data/postmaster.pid" ] && as_owner "$bin/pg_ctl" -D "$dir/data" status >/dev/null 2>&1; then
    as_owner "$bin/pg_ctl" -D "$dir/data" -m immediate stop >/dev/null
  fi
  rm -rf "$dir"
  mkdir -p "$dir"
  [ "$(id -u)" -eq 0 ] && chown postgres "$dir"
  as_owner "$bin/pg_basebackup" -h 127.0.0.1 -p "$primary" -U postgres -D "$dir/data" -R -X stream -c fast >"$dir/basebackup.log" 2>&1 ||
    { cat "$dir/basebackup.log" >&2; exit 1; }
  as_owner "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
    -o "-p $port -k $dir -c listen_addresses=127.0.0.1 -c hot_standby=on -c max_connections=200 -c max_wal_senders=40 -c max_replication_slots=40" \
    start >/dev/null || { cat "$dir/server.log" >&2; exit 1; }
  ;;
restart)
  as_owner "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -m fast -w -t 60 restart >/dev/null ||
    { cat "$dir/server.log" >&2; exit 1; }
  ;;
stop)
  if [ -d "$dir/data" ]; then
    as_owner "$bin/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null 2>&1 || true
  fi
  rm -rf "$dir"
  ;;
*)
  echo "usage: postgres.sh start|stop|restart|bin PORT | standby PORT PRIMARY_PORT" >&2
  exit 2
  ;;
esac
