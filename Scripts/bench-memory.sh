#!/usr/bin/env bash
# The content service's memory with many connections, each holding a call in
# flight: starts release builds of kiosk-store and kiosk-content on 127.0.0.1
# as separate processes, then `kiosk-bench verify` with K connections and
# K calls in flight (distinct receipts, minted on the store's data dir) and
# --server-pid, so the table ends with the content service's CPU and peak RSS.
#   Scripts/bench-memory.sh [CONNECTIONS] [SECONDS]      (default 1000 10)
set -euo pipefail
cd "$(dirname "$0")/.."
connections=${1:-1000}
seconds=${2:-10}
./Scripts/setup.sh
for product in kiosk-store kiosk-content kiosk-bench; do swift build -c release --product "$product" > /dev/null; done
bin=.build/release
work=$(mktemp -d)
store_pid=""; content_pid=""
cleanup() {
  [ -n "$content_pid" ] && kill "$content_pid" 2>/dev/null || true
  [ -n "$store_pid" ] && kill "$store_pid" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
wait_for() { for _ in $(seq 1 200); do grep -q listening "$1" 2>/dev/null && return 0; sleep 0.05; done; cat "$1" >&2; return 1; }
# Each side holds one descriptor per connection.
ulimit -n "$(( connections * 2 + 256 > $(ulimit -Hn) ? $(ulimit -Hn) : connections * 2 + 256 ))" 2>/dev/null || true

$bin/kiosk-store serve --data-dir "$work/store" --catalog Scripts/examples/catalog.json \
  --host 127.0.0.1 --port 0 --log-level warning > "$work/store.out" &
store_pid=$!
wait_for "$work/store.out"
store=$(sed -n 's/^kiosk-store listening on \([^ ]*\).*/\1/p' "$work/store.out")
service=$($bin/kiosk-store account create --data-dir "$work/store" --json | sed 's/.*"token":"\([^"]*\)".*/\1/')

mkdir -p "$work/content/books"
head -c 1048576 /dev/zero > "$work/content/books/swift-book.txt"
cp Scripts/examples/content/manifest.json "$work/content/manifest.json"
$bin/kiosk-content serve --content-dir "$work/content" --store "$store" --store-token "$service" \
  --host 127.0.0.1 --port 0 --log-level warning > "$work/content.out" &
content_pid=$!
wait_for "$work/content.out"
content=$(sed -n 's/^kiosk-content listening on \([^ ]*\).*/\1/p' "$work/content.out")
echo "kiosk-content (pid $content_pid) before the run: $(grep VmRSS /proc/$content_pid/status | tr -s ' ')"

$bin/kiosk-bench verify --content "$content" --store-data-dir "$work/store" --catalog Scripts/examples/catalog.json \
  --product book.swift --connections "$connections" --concurrency "$connections" \
  --receipts 150000 --duration "$seconds" --warmup 2 --server-pid "$content_pid" "${@:3}"
