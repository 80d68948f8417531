#!/usr/bin/env bash
# Sets up and runs Kiosk on this machine: installs what is missing, builds,
# starts the store on 127.0.0.1 with the example catalog and an account, and
# runs the store's end-to-end tests (purchases, restore, receipts, crash
# safety). The content service and the `kiosk` command line arrive next;
# then this will buy and download through them.
set -euo pipefail
cd "$(dirname "$0")/.."
./Scripts/setup.sh
swift build --build-tests

data=$(mktemp -d)
trap 'kill "$store_pid" 2>/dev/null || true; rm -rf "$data"' EXIT
echo "demo: a new account:"
.build/debug/kiosk-store account create --data-dir "$data"
.build/debug/kiosk-store serve --data-dir "$data" --catalog Scripts/examples/catalog.json \
  --host 127.0.0.1 --port 0 --log-level warning > "$data/store.out" &
store_pid=$!
for _ in $(seq 1 100); do grep -q listening "$data/store.out" 2>/dev/null && break; sleep 0.1; done
echo "demo: $(cat "$data/store.out")"
echo "demo: its receipt verification keys:"
.build/debug/kiosk-store keys export --data-dir "$data"
echo "demo: the store's end-to-end tests:"
swift test --skip-build --filter KioskStoreTests 2>&1 | tail -n 1
