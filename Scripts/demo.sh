#!/usr/bin/env bash
# Kiosk on this machine, end to end: installs what is missing, builds, starts
# the store and the content service on 127.0.0.1 with a sample catalog and a
# generated book in a temporary directory, then uses the `kiosk` command line
# to buy credits ×4, buy and download the book, restore on a second device
# (another state dir), verify a receipt, and stops the services. Prints each
# step; exits non-zero as soon as one fails.
set -euo pipefail
cd "$(dirname "$0")/.."
./Scripts/setup.sh
echo "demo: building (the first build takes a few minutes)"
swift build

bin=.build/debug
work=$(mktemp -d)
store_pid=""; content_pid=""
cleanup() {
  [ -n "$content_pid" ] && kill "$content_pid" 2>/dev/null || true
  [ -n "$store_pid" ] && kill "$store_pid" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
step() { printf '\n== %s\n' "$*"; }
wait_for() { for _ in $(seq 1 200); do grep -q listening "$1" 2>/dev/null && return 0; sleep 0.05; done; cat "$1" >&2; return 1; }

step "store: catalog Scripts/examples/catalog.json (credits.5, credits.10, filter.sepia, book.swift, pro.monthly, season.pass)"
$bin/kiosk-store serve --data-dir "$work/store" --catalog Scripts/examples/catalog.json \
  --host 127.0.0.1 --port 0 --log-level warning > "$work/store.out" &
store_pid=$!
wait_for "$work/store.out"
cat "$work/store.out"
store=$(sed -n 's/^kiosk-store listening on \([^ ]*\).*/\1/p' "$work/store.out")

step "accounts: one for the buyer, one for the content service's feeds"
buyer=$($bin/kiosk-store account create --data-dir "$work/store" --json | sed 's/.*"token":"\([^"]*\)".*/\1/')
service=$($bin/kiosk-store account create --data-dir "$work/store" --json | sed 's/.*"token":"\([^"]*\)".*/\1/')
echo "buyer token ${buyer:0:16}…"

step "content: book.swift, a generated 3 MiB book"
mkdir -p "$work/content/books"
awk 'BEGIN { for (i = 1; n < 3145728; i++) { line = sprintf("Chapter %d. In-app purchases, restored and verified, one chunk at a time.\n", i); printf "%s", line; n += length(line) } }' \
  > "$work/content/books/swift-book.txt"
cp Scripts/examples/content/manifest.json "$work/content/manifest.json"
$bin/kiosk-content serve --content-dir "$work/content" --store "$store" --store-token "$service" \
  --host 127.0.0.1 --port 0 --log-level warning > "$work/content.out" &
content_pid=$!
wait_for "$work/content.out"
cat "$work/content.out"
content=$(sed -n 's/^kiosk-content listening on \([^ ]*\).*/\1/p' "$work/content.out")

export KIOSK_STORE="$store" KIOSK_CONTENT="$content" KIOSK_TOKEN="$buyer" KIOSK_STATE_DIR="$work/phone"

step "kiosk products"
$bin/kiosk products
step "kiosk buy credits.5 --quantity 4"
$bin/kiosk buy credits.5 --quantity 4
step "kiosk balance"
$bin/kiosk balance
step "kiosk buy book.swift"
$bin/kiosk buy book.swift
step "kiosk download book.swift --out $work/phone/books"
$bin/kiosk download book.swift --out "$work/phone/books"
cmp "$work/phone/books/book.swift" "$work/content/books/swift-book.txt"
echo "the downloaded file is identical to the hosted one"
step "kiosk restore (a second device: another state dir)"
KIOSK_STATE_DIR="$work/laptop" $bin/kiosk restore
step "kiosk verify (the book's receipt, as restored on the second device)"
KIOSK_STATE_DIR="$work/laptop" $bin/kiosk verify "$(ls "$work/laptop/receipts/"*.receipt | head -1)"
step "kiosk entitlements"
$bin/kiosk entitlements

step "stopping the services"
kill "$content_pid" "$store_pid"
wait "$content_pid" "$store_pid" 2>/dev/null || true
content_pid=""; store_pid=""
echo "demo: done"
