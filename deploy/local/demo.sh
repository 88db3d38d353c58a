#!/usr/bin/env bash
# `make demo`: a throwaway Postgres with the example schema, the Bigtable emulator, the
# syncer on a schedule and the metadata API, then example requests that work.
# Ctrl-C stops everything. DEMO_EXIT=1 exits after the examples (for checks).
set -euo pipefail
cd "$(dirname "$0")/../.."

pg_port=${DEMO_PG_PORT:-55433}
bt_port=${DEMO_EMULATOR_PORT:-8086}
api_addr=${DEMO_API_ADDR:-127.0.0.1:8080}
work=$(mktemp -d /tmp/snapflip-demo.XXXXXX)
pids=()

cleanup() {
  # A second signal must not cut the cleanup short: `timeout` and a terminal send
  # SIGTERM or SIGINT to the whole process group, and Postgres would be left running.
  trap - EXIT
  trap '' INT TERM
  echo
  echo "stopping the demo…"
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  deploy/local/postgres.sh stop "$pg_port"
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# await NAME CMD…: retry CMD for up to 60 s.
await() {
  local what=$1; shift
  for _ in $(seq 1 600); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    sleep 0.1
  done
  echo "demo: $what did not come up; logs are in $work" >&2
  tail -n 20 "$work"/*.log >&2 || true
  exit 1
}

echo "==> starting Postgres on 127.0.0.1:$pg_port"
deploy/local/postgres.sh start "$pg_port"
dsn="postgres://postgres@127.0.0.1:$pg_port/postgres?sslmode=disable"
psql="$(deploy/local/postgres.sh bin "$pg_port")/psql"
echo "==> loading migrations/"
for f in migrations/*.sql; do
  "$psql" -q -v ON_ERROR_STOP=1 "$dsn" -f "$f"
done

echo "==> starting the Bigtable emulator on 127.0.0.1:$bt_port"
bin/bigtable-emulator -host 127.0.0.1 -port "$bt_port" >"$work/emulator.log" 2>&1 &
pids+=($!)
await "the emulator" bash -c "exec 3<>/dev/tcp/127.0.0.1/$bt_port"

export BIGTABLE_EMULATOR_HOST=127.0.0.1:$bt_port
export SNAPFLIP_POSTGRES_DSN=$dsn

echo "==> starting the syncer (schedule @every 30s; logs: $work/syncer.log)"
bin/syncer run --config deploy/local/snapflip.yaml >"$work/syncer.log" 2>&1 &
pids+=($!)

echo "==> starting the metadata API on http://$api_addr (logs: $work/api.log)"
bin/metadata-api --addr "$api_addr" --auth none >"$work/api.log" 2>&1 &
pids+=($!)
await "the first version" curl -sf "http://$api_addr/readyz"

base="http://$api_addr"
run() {
  echo
  printf '$'
  printf ' %q' "$@"
  echo
  "$@"
  echo
}
echo
echo "snapflip is running. Example requests:"
run curl -s -i "$base/v1/data/tenants/tenant-0001"
run curl -s "$base/v1/data/tenants/acme%2Feu%231"
run curl -s "$base/v1/data/tenant_config/tenant-0042%2Flimits"
run curl -s "$base/v1/data/active_flags/new-billing"
run curl -s -X POST "$base/v1/data/tenants:batchGet" -H 'Content-Type: application/json' -d '{"ids": ["tenant-0001", "acme/eu#1", "no-such-tenant"]}'
run curl -s "$base/v1/data/active_flags?limit=2"
run curl -s "$base/v1/data/tenants?limit=3&select=name,plan"
run curl -s "$base/v1/data/tenants?plan=eq.team&seats=gte.50&limit=3&select=name,plan,seats"
run curl -s "$base/v1/data/tenants?region=in.(europe-west1,asia-east1)&limit=2&select=name,region"
run curl -s "$base/v1/collections"
run curl -s "$base/v1/versions/current"
run curl -s -i "$base/v1/data/tenants/no-such-tenant"
run curl -s "$base/readyz"
echo "Read your own write: take a token in the writing transaction and send it; the answer"
echo "comes from a version that holds the write (the API waits for one if it must):"
update="UPDATE tenants SET seats = seats + 1 WHERE id = 'tenant-0001' RETURNING 'x:' || pg_current_xact_id()"
echo
echo "\$ TOKEN=\$($psql '$dsn' -Atqc \"$update\")"
token=$("$psql" "$dsn" -Atqc "$update")
echo "TOKEN=$token"
run curl -s -i -H "Snapshot-After: $token" "$base/v1/data/tenants/tenant-0001"
echo
echo "Change the source and watch a new version appear within about a second (the syncer watches the tables; its schedule is the backstop):"
echo "  $psql '$dsn' -c \"UPDATE tenants SET seats = seats + 1 WHERE id = 'tenant-0001'\""
echo "  curl -si $base/v1/data/tenants/tenant-0001 | grep -i snapshot-version"
echo "Follow the flips as they happen (Server-Sent Events; Ctrl-C to stop):"
echo "  curl -N $base/v1/watch"
echo
if [ -n "${DEMO_SCREENSHOT:-}" ]; then
  # A publish, a rollback and an unpin first, so the page has something to show.
  syncer() { bin/syncer --config deploy/local/snapflip.yaml --log-level warn "$@" >/dev/null; }
  "$psql" -q "$dsn" -c "UPDATE tenants SET seats = seats + 1 WHERE id = 'tenant-0001'"
  syncer once
  syncer rollback --previous --reason "demo: a bad import"
  syncer unpin --reason "demo: fixed upstream"
  "$psql" -q "$dsn" -c "UPDATE tenants SET seats = seats + 2 WHERE id = 'tenant-0002'"
  syncer once
  sleep 1.5 # the API reads the pointer at most once a second
  chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run --disable-background-networking \
    --disable-component-update --disable-sync --user-data-dir="$work/chrome" --hide-scrollbars \
    --window-size=1040,1100 --screenshot="$DEMO_SCREENSHOT" "$base/" >/dev/null 2>&1
  echo "status page screenshot: $DEMO_SCREENSHOT"
  exit 0
fi
if [ "${DEMO_EXIT:-0}" = 1 ]; then exit 0; fi
echo "Press Ctrl-C to stop."
wait "${pids[@]}"
