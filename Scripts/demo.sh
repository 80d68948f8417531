#!/usr/bin/env bash
# Kiosk on this machine, end to end: installs what is missing, builds, starts
# the store and the content service on 127.0.0.1, over TLS with a development
# CA (kiosk-store tls create-dev), with a sample catalog and a
# generated book in a temporary directory, then uses the `kiosk` command line
# to buy credits ×4, buy and download the book, restore on a second device
# (another state dir), verify a receipt, subscribe to pro.monthly with its
# free trial and watch it renew (the sandbox store runs with --time-scale 259200: a month lasts 10 s),
# turn its auto-renew off, and stops the services. Prints each step; exits
# non-zero as soon as one fails.
set -euo pipefail
cd "$(dirname "$0")/.."
./Scripts/setup.sh
echo "demo: building (the first build takes a few minutes)"
swift build

bin=.build/debug
. Scripts/lib.sh
step() { printf '\n== %s\n' "$*"; }

step "store: catalog Scripts/examples/catalog.json (credits.5, credits.10, filter.sepia, book.swift, pro.monthly, basic.monthly, season.pass)"
# A sandbox store whose subscription month lasts 10 s (a week 2.3 s), renewals looked for twice a second.
start_store --time-scale 259200 --renewal-interval-ms 500
cat "$work/store.out"

step "credentials: an account for the buyer, a service credential (role content) for the content service"
buyer=$(new_token)
service=$(new_credential content)
echo "buyer token ${buyer:0:16}…  content service credential ${service:0:12}…  (both only over TLS, trusting $KIOSK_TLS_CA)"

step "content: book.swift, a generated 3 MiB book"
mkdir -p "$work/content/books"
awk 'BEGIN { for (i = 1; n < 3145728; i++) { line = sprintf("Chapter %d. In-app purchases, restored and verified, one chunk at a time.\n", i); printf "%s", line; n += length(line) } }' \
  > "$work/content/books/swift-book.txt"
start_content "$service"
cat "$work/content.out"

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

step "kiosk buy pro.monthly --offer introductory (an auto-renewable subscription, a one-week free trial first; this store's month lasts 10 s)"
$bin/kiosk buy pro.monthly --offer introductory
$bin/kiosk subscriptions
step "waiting for the store to renew it (the trial over, charged 4.99 with the same card: a new transaction, same original id)"
for _ in $(seq 1 60); do
  $bin/kiosk subscriptions --json | grep -q '"periods_paid":[2-9]' && break
  sleep 0.5
done
$bin/kiosk subscriptions
$bin/kiosk subscriptions --json | grep -q '"periods_paid":[2-9]' || { echo "demo: the subscription did not renew" >&2; exit 1; }
step "kiosk unfinished (the renewal, delivered to the app like a purchase)"
$bin/kiosk unfinished
step "kiosk auto-renew … off (it ends with the paid period, reason cancelled)"
original=$($bin/kiosk subscriptions --json | sed 's/.*"original_transaction_id":"\([^"]*\)".*/\1/')
$bin/kiosk auto-renew "$original" off

step "stopping the services"
kill "$content_pid" "$store_pid"
wait "$content_pid" "$store_pid" 2>/dev/null || true
content_pid=""; store_pid=""
echo "demo: done"
