#!/usr/bin/env bash
# The content service's memory with many connections, each holding a call in
# flight: starts release builds of kiosk-store and kiosk-content on 127.0.0.1 (TLS)
# as separate processes, then `kiosk-bench verify` with K connections and
# K calls in flight (distinct receipts, minted on the store's data dir) and
# --server-pid, so the table ends with the content service's CPU and peak RSS.
#   Benchmarks/bench-memory.sh [CONNECTIONS] [SECONDS]      (default 1000 10)
set -euo pipefail
cd "$(dirname "$0")/.."
connections=${1:-1000}
seconds=${2:-10}
./Scripts/setup.sh
for product in kiosk-store kiosk-content kiosk-bench; do swift build -c release --product "$product" > /dev/null; done
bin=.build/release
. Scripts/lib.sh
# Each side holds one descriptor per connection.
ulimit -n "$(( connections * 2 + 256 > $(ulimit -Hn) ? $(ulimit -Hn) : connections * 2 + 256 ))" 2>/dev/null || true

start_store
mkdir -p "$work/content/books"
head -c 1048576 /dev/zero > "$work/content/books/swift-book.txt"
service=$(new_credential content)
start_content "$service"
echo "kiosk-content (pid $content_pid) before the run: $(grep VmRSS /proc/$content_pid/status | tr -s ' ')"

$bin/kiosk-bench verify --content "$content" --store-data-dir "$work/store" --catalog Scripts/examples/catalog.json \
  --product book.swift --tls-ca "$KIOSK_TLS_CA" --connections "$connections" --concurrency "$connections" \
  --receipts 150000 --duration "$seconds" --warmup 2 --server-pid "$content_pid" "${@:3}"
