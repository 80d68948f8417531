#!/usr/bin/env bash
# Two builds of Kiosk side by side on one store: a change's effect on the verify
# path, steadier than two bench.sh runs (this VM's state moves absolute figures
# by up to half between minutes; here both sides share every minute).
#   Benchmarks/bench-ab.sh A_BIN B_BIN [ROUNDS]
# A_BIN and B_BIN are release build directories (e.g. a `git worktree` of the
# old commit built with `swift build -c release`, and .build/release). One
# kiosk-store (from A_BIN) and one kiosk-content from each side serve the same
# ledger; each round runs A B B A, each side's kiosk-bench against its own
# content service, serial (K=1 C=1, SERIAL_S seconds) then cold (K=4 C=64,
# LOAD_S seconds). Prints the medians and B's change against A; exits 1 if
# a run failed (its row is left out of the medians).
# KIOSK_TLS=1: both sides over TLS (default plaintext). ROUNDS default 5.
# B_CONTENT_ARGS: more arguments for side B's kiosk-content only (one build, two
# settings: `Benchmarks/bench-ab.sh .build/release .build/release` with
# B_CONTENT_ARGS="--metrics-port 0" is the cost of metrics; B's /metrics is then
# scraped once a second all through the runs, as a busy Prometheus would).
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 2 ] || { echo "usage: Benchmarks/bench-ab.sh A_BIN B_BIN [ROUNDS]" >&2; exit 2; }
a_bin=$(cd "$1" && pwd); b_bin=$(cd "$2" && pwd)
rounds=${3:-5}
serial_s=${SERIAL_S:-5}
load_s=${LOAD_S:-5}
export KIOSK_TLS=${KIOSK_TLS:-0}
bin=$a_bin
. Scripts/lib.sh
start_store
credential=$(new_credential content)
token=$(new_token)
# Each side's content service is one of lib.sh's services (content-A, content-B): stopped with the rest at exit.
declare -A endpoint pid_of
for side in A B; do
  side_bin=$([ "$side" = A ] && echo "$a_bin" || echo "$b_bin")
  dir="$work/content-$side"
  mkdir -p "$dir/books"
  cp Scripts/examples/content/manifest.json "$dir/manifest.json"
  head -c 1048576 /dev/urandom > "$dir/books/swift-book.txt"
  side_args=(); [ "$side" = B ] && [ -n "${B_CONTENT_ARGS:-}" ] && read -r -a side_args <<< "$B_CONTENT_ARGS"
  KIOSK_STORE_CREDENTIAL="$credential" "$side_bin/kiosk-content" serve --content-dir "$dir" --store "$store" \
    "${content_tls[@]}" --host 127.0.0.1 --port 0 --log-level warning "${side_args[@]}" > "$work/content-$side.out" &
  pid[content-$side]=$!
  pid_of[$side]=$!
  await_banner "content-$side"
  endpoint[$side]=${address[content-$side]}
done
tls_args=(); [ "$KIOSK_TLS" = 0 ] || tls_args=(--tls-ca "$KIOSK_TLS_CA")
metrics_url=$(sed -n 's|^kiosk-content metrics on \(http://[^ ]*\)$|\1|p' "$work/content-B.out" | head -1)
if [ -n "$metrics_url" ]; then
  echo "bench-ab: scraping B's $metrics_url once a second"
  ( while kill -0 $$ 2>/dev/null; do curl -s -o /dev/null "$metrics_url" || true; sleep 1; done ) &
  pid[scraper]=$!
fi
results="$work/results"
# One run: SIDE KIND ARGS… → "KIND SIDE calls/s p50 p99 server-µs client-µs errors" (no figures when it failed)
run() {
  local side=$1 kind=$2; shift 2
  local side_bin figures
  side_bin=$([ "$side" = A ] && echo "$a_bin" || echo "$b_bin")
  figures=$(KIOSK_STORE_CREDENTIAL="$credential" "$side_bin/kiosk-bench" verify --content "${endpoint[$side]}" --store-data-dir "$work/store" \
    --catalog Scripts/examples/catalog.json --product book.swift "${tls_args[@]}" --server-pid "${pid_of[$side]}" \
    --json "$@" 2>/dev/null | python3 Benchmarks/benchrows.py figures 2>/dev/null) || true
  [ -n "$figures" ] || echo "bench-ab: a $kind run of $side failed" >&2
  echo "$kind $side $figures" >> "$results"
}
for round in $(seq "$rounds"); do
  echo "bench-ab: round $round of $rounds"
  for side in A B B A; do
    run "$side" serial --connections 1 --concurrency 1 --duration "$serial_s" --warmup 1 --receipts 20000
    run "$side" cold --connections 4 --concurrency 64 --duration "$load_s" --warmup 1 --receipts 100000
  done
done
python3 - "$results" "$rounds" <<'PY'
import sys, statistics as st
sys.path.insert(0, "Benchmarks")
from benchrows import read_rows
rows, failed = read_rows(sys.argv[1])  # the rows of failed runs are counted, not averaged
print(f"bench-ab: {sys.argv[2]} round(s) of A B B A, medians (B against A)")
print("| work | A | B | B − A |")
print("|---|---|---|---|")
for kind in ("serial", "cold"):
    if (kind, "A") not in rows or (kind, "B") not in rows:
        print(f"| {kind} | every run of one side failed | | |")
        continue
    for i, label in ((0, "calls/s"), (1, "p50 µs"), (2, "p99 µs"), (3, "server CPU µs/call"), (4, "load generator CPU µs/call")):
        a = st.median(r[i] for r in rows[(kind, "A")]); b = st.median(r[i] for r in rows[(kind, "B")])
        print(f"| {kind} {label} | {a:,.1f} | {b:,.1f} | {b - a:+,.1f} ({(b / a - 1) * 100:+.1f}%) |")
errors = sum(r[5] for values in rows.values() for r in values)
print(f"errors in all runs: {errors:.0f}" + (f"; {failed} run(s) failed and are left out" if failed else ""))
sys.exit(1 if failed else 0)
PY
