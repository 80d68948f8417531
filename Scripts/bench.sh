#!/usr/bin/env bash
# Kiosk beside the reference ceilings of ../shared/reference, in one run, and
# the ratios between them (issue #14's table). Release builds; every server is
# its own process on 127.0.0.1, so server and load-generator CPU per call are
# measured apart (/proc of the server's pid):
#   verify cold K=4 C=64 (ROUNDS rounds, medians): the bare SwiftNIO reference
#     (nio-verify), Kiosk plaintext, Kiosk over TLS;
#   serial cold K=1 C=1: the same three;
#   download of the reference's 64 MiB text file (gzip ratio ~2.6), whole
#     process, output verified: nginx gzip_static → curl --compressed | sha256sum
#     (the reference's run.sh: curl checks nothing, sha256sum is the check), and
#     the `kiosk download` process over TLS and plaintext (it checks the SHA-256
#     of what it writes and fsyncs the file before moving it into place; the
#     script then compares the file's sha256sum, outside the timing).
#   Scripts/bench.sh [ROUNDS]      (default 3; LOAD_S=10 SERIAL_S=5 in the environment)
# The reference is built once into ~/.cache/kiosk-reference (KIOSK_REFERENCE_BUILD);
# KIOSK_REFERENCE points at the reference programs (default ../shared/reference).
# Installs nginx when missing. About 8 minutes after the builds.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
load_s=${LOAD_S:-10}
serial_s=${SERIAL_S:-5}
root=$(pwd)
ref=${KIOSK_REFERENCE:-$root/../shared/reference}
refbuild=${KIOSK_REFERENCE_BUILD:-$HOME/.cache/kiosk-reference/nio-verify}
[ -d "$ref/nio-verify" ] && [ -d "$ref/nginx-content" ] || {
  echo "bench: no reference programs at $ref (set KIOSK_REFERENCE)" >&2; exit 2; }

./Scripts/setup.sh
if ! command -v nginx >/dev/null 2>&1; then
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y nginx > /dev/null
fi
echo "bench: building (release)"
for product in kiosk-store kiosk-content kiosk kiosk-bench; do swift build -c release --product "$product" > /dev/null; done
(cd "$ref/nio-verify" && swift build -c release --scratch-path "$refbuild" > /dev/null)
bin=.build/release
refbin="$refbuild/release"
results=$(mktemp)
seed=4242424242424242424242424242424242424242424242424242424242424242
# The values at dotted paths of the JSON on stdin, space-separated.
fields() { python3 -c 'import json, sys
r = json.loads(sys.stdin.read())
def at(path):
    v = r
    for k in path.split("."): v = v[k]
    return v
print(" ".join(str(at(p)) for p in sys.argv[1:]))' "$@"; }

# ---- the bare SwiftNIO reference ----
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$refbin/nio-verify-server" --port "$port" --key-seed "$seed" --threads 2 > /dev/null 2>&1 &
nio_pid=$!
trap 'kill $nio_pid 2>/dev/null || true' EXIT
for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.05; done
for round in $(seq "$rounds"); do
  out=$("$refbin/nio-verify-load" --port "$port" --key-seed "$seed" --connections 4 --concurrency 64 --duration "$load_s" \
        --warmup 2 --receipts 10000 --server-pid "$nio_pid" --json)
  echo "cold nio $(echo "$out" | fields calls_per_s latency_us.p50 latency_us.p99 cpu.server_us_per_call cpu.client_us_per_call errors)" >> "$results"
done
out=$("$refbin/nio-verify-load" --port "$port" --key-seed "$seed" --connections 1 --concurrency 1 --duration "$serial_s" \
      --warmup 1 --receipts 10000 --server-pid "$nio_pid" --json)
echo "serial nio $(echo "$out" | fields calls_per_s latency_us.p50 latency_us.p99 cpu.server_us_per_call cpu.client_us_per_call errors)" >> "$results"
kill "$nio_pid"; wait "$nio_pid" 2>/dev/null || true
trap - EXIT

# ---- nginx → curl | sha256sum (the reference's own script; its (b) row) ----
echo "bench: nginx reference"
(cd "$ref/nginx-content" && RUNS="$rounds" ./run.sh > /dev/null 2>&1)
python3 - "$ref/nginx-content/data/results.txt" >> "$results" <<'PY'
import sys
for line in open(sys.argv[1]):
    k, t, n = line.split()
    if k == "b": print(f"download nginx {int(n) / float(t) / 1e6:.1f} 0 0 0 0 0")
PY
data="$ref/nginx-content/data/www/content.txt"
sha=$(sha256sum "$data" | cut -d' ' -f1)

# ---- Kiosk, plaintext then TLS: verify (separate processes) and download ----
for mode in plain tls; do
  (
    KIOSK_TLS=$([ "$mode" = tls ] && echo 1 || echo 0)
    . Scripts/services.sh
    label=$mode
    start_store
    mkdir -p "$work/content/books"
    cp "$data" "$work/content/books/swift-book.txt"
    start_content "$(new_credential content)"
    ca=(); [ "$mode" = tls ] && ca=(--tls-ca "$KIOSK_TLS_CA")
    verify() {
      "$bin/kiosk-bench" verify --content "$content" --store-data-dir "$work/store" --catalog Scripts/examples/catalog.json \
        --product book.swift "${ca[@]}" --server-pid "$content_pid" --json "$@" 2>/dev/null \
        | python3 -c 'import json, sys
r = json.loads(sys.stdin.read()); n = max(r["calls"], 1)
print(r["calls_per_second"], r["latency_us"]["p50"], r["latency_us"]["p99"],
      round(r["server_cpu_seconds"] * 1e6 / n, 1), round(r["client_cpu_seconds"] * 1e6 / n, 1), r["errors"])'
    }
    for round in $(seq "$rounds"); do
      echo "cold kiosk-$label $(verify --connections 4 --concurrency 64 --duration "$load_s" --warmup 2 --receipts 150000)" >> "$results"
    done
    echo "serial kiosk-$label $(verify --connections 1 --concurrency 1 --duration "$serial_s" --warmup 1 --receipts 20000)" >> "$results"
    export KIOSK_STORE="$store" KIOSK_CONTENT="$content" KIOSK_TOKEN="$(new_token)" KIOSK_STATE_DIR="$work/phone"
    "$bin/kiosk" buy book.swift > /dev/null
    for round in $(seq "$rounds"); do
      rm -rf "$work/out"
      sync
      # Timed: the kiosk process, which checks the SHA-256 of what it writes and fsyncs the file before
      # moving it into place. The sha256sum after it is this script's own check, outside the timing.
      t0=$(date +%s.%N)
      "$bin/kiosk" download book.swift --out "$work/out" > /dev/null
      t1=$(date +%s.%N)
      got=$(sha256sum "$work/out/book.swift" | cut -d' ' -f1)
      [ "$got" = "$sha" ] || { echo "bench: the downloaded file differs" >&2; exit 1; }
      echo "download kiosk-$label $(python3 -c "print(f'{$(stat -c %s "$data") / ($t1 - $t0) / 1e6:.1f}')") 0 0 0 0 0" >> "$results"
    done
  )
done

python3 - "$results" "$rounds" <<'PY'
import sys, statistics as st
rows = {}
for line in open(sys.argv[1]):
    kind, who, *values = line.split()
    rows.setdefault((kind, who), []).append([float(v) for v in values])
def med(kind, who, i):
    values = [r[i] for r in rows.get((kind, who), [])]
    return st.median(values) if values else float("nan")
print(f"bench: {sys.argv[2]} round(s); medians; µs per call measured from /proc of the server and the load generator")
print("| work | bare NIO / nginx | Kiosk plaintext | Kiosk TLS | plaintext ratio | TLS ratio |")
print("|---|---|---|---|---|---|")
for kind, label in (("cold", "cold verify K=4 C=64, calls/s"), ("serial", "serial cold K=1 C=1, calls/s")):
    nio = med(kind, "nio", 0); plain = med(kind, "kiosk-plain", 0); tls = med(kind, "kiosk-tls", 0)
    print(f"| {label} | {nio:,.0f} | {plain:,.0f} | {tls:,.0f} | {plain / nio:.2f}× | {tls / nio:.2f}× |")
    nio = med(kind, "nio", 1); plain = med(kind, "kiosk-plain", 1); tls = med(kind, "kiosk-tls", 1)
    print(f"| {kind} p50 µs | {nio:,.0f} | {plain:,.0f} | {tls:,.0f} | {plain / nio:.2f}× slower | {tls / nio:.2f}× slower |")
    for i, what in ((3, "server"), (4, "load generator")):
        nio = med(kind, "nio", i); plain = med(kind, "kiosk-plain", i); tls = med(kind, "kiosk-tls", i)
        print(f"| {kind}: {what} CPU µs/call | {nio:.0f} | {plain:.0f} | {tls:.0f} | | |")
nginx = med("download", "nginx", 0); plain = med("download", "kiosk-plain", 0); tls = med("download", "kiosk-tls", 0)
print(f"| download 64 MiB text, verified, MB/s | {nginx:.0f} | {plain:.0f} | {tls:.0f} | {plain / nginx:.2f}× | {tls / nginx:.2f}× |")
errors = sum(r[5] for (kind, _), values in rows.items() for r in values if kind != "download")
print(f"errors in all runs: {errors:.0f}")
PY
rm -f "$results"
