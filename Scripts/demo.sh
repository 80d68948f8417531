#!/usr/bin/env bash
# Sets up and runs Kiosk on this machine: installs what is missing, builds,
# starts the store and the content service on 127.0.0.1 with the examples in
# Scripts/examples/, and runs their end-to-end tests (purchases, receipts,
# downloads, crash safety). The `kiosk` command line arrives next; then this
# will buy and download through it.
set -euo pipefail
cd "$(dirname "$0")/.."
./Scripts/setup.sh
swift build --build-tests

data=$(mktemp -d)
store_pid=""; content_pid=""
trap 'kill $store_pid $content_pid 2>/dev/null || true; rm -rf "$data"' EXIT
wait_for() { for _ in $(seq 1 200); do grep -q listening "$1" 2>/dev/null && return 0; sleep 0.05; done; cat "$1"; return 1; }

echo "demo: a new account:"
.build/debug/kiosk-store account create --data-dir "$data/store"
token=$(.build/debug/kiosk-store account create --data-dir "$data/store" --json | sed 's/.*"token":"\([^"]*\)".*/\1/')
.build/debug/kiosk-store serve --data-dir "$data/store" --catalog Scripts/examples/catalog.json \
  --host 127.0.0.1 --port 0 --log-level warning > "$data/store.out" &
store_pid=$!
wait_for "$data/store.out"
store_address=$(sed -n 's/^kiosk-store listening on \([^ ]*\).*/\1/p' "$data/store.out")
echo "demo: $(cat "$data/store.out")"
cp -r Scripts/examples/content "$data/content"
.build/debug/kiosk-content serve --content-dir "$data/content" --store "$store_address" --store-token "$token" \
  --host 127.0.0.1 --port 0 --log-level warning > "$data/content.out" &
content_pid=$!
wait_for "$data/content.out"
echo "demo: $(cat "$data/content.out")"
echo "demo: the end-to-end tests of the store and the content service:"
swift test --skip-build --filter 'KioskStoreTests|KioskContentTests' 2>&1 | tail -n 1
