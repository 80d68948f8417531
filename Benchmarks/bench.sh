#!/usr/bin/env bash
# Kiosk beside the reference ceilings (a bare SwiftNIO verify server, nginx + curl), in one run, and
# the ratios between them (docs/performance.md's table). Release builds; every server is
# its own process on 127.0.0.1, so server and load-generator CPU per call are
# measured apart (/proc of the server's pid):
#   verify cold K=4 C=64: the bare SwiftNIO reference (nio-verify), the same
#     reference behind NIOSSL (Benchmarks/reference-tls.py: the ceiling for TLS),
#     Kiosk plaintext, Kiosk over TLS, all four servers up at once and the
#     runs alternating between them in short slices (medians of ROUNDS rounds
#     of SLICES slices, and the median of each cycle's ratios with its
#     quartiles); Kiosk over TLS is given as a ratio to both bare servers;
#   serial cold K=1 C=1: the same four, alternating; then again with every
#     server's threads on one core and the load generators on another
#     (taskset; skipped with fewer than two CPUs or no taskset): a call wakes
#     the other vCPU each way in both, but the pinned rounds take the
#     processes' placement out of the comparison (it moved the ratio by ±0.1);
#   Kiosk's own server cost per call: its server CPU minus the bare server's in the same cycle
#     (Kiosk over TLS: minus the bare TLS server's), the median of those differences;
#   download of the reference's 64 MiB text file (gzip ratio ~2.6), whole
#     process, output verified: nginx gzip_static → curl --compressed | sha256sum
#     (the reference's run.sh: curl checks nothing, sha256sum is the check), and
#     the `kiosk download` process over TLS and plaintext (it checks the SHA-256
#     of what it writes and fsyncs the file before moving it into place; the
#     script then compares the file's sha256sum, outside the timing).
#   Benchmarks/bench.sh --reference DIR [ROUNDS]
#                                   (or KIOSK_REFERENCE=DIR; default 3 rounds; LOAD_S=10 SERIAL_S=5 SLICES=5 in the environment:
#                                   seconds of cold and of serial calls per server and round, in slices;
#                                   BENCH_ROWS=FILE keeps every run's figures in FILE)
# A run that fails is left out of the medians and counted; the script then exits 1.
# The reference is built once into ~/.cache/kiosk-reference (KIOSK_REFERENCE_BUILD; its
# TLS copy beside it, with -tls-src and -tls after the name); DIR holds the reference programs
# (nio-verify/ and nginx-content/, Benchmarks/README.md), whose sources are never edited.
# Each slice has its own warm-up (1 s cold, 0.5 s serial). Installs nginx when missing. About 4
# minutes a round after the builds.
set -euo pipefail
cd "$(dirname "$0")/.."
ref=${KIOSK_REFERENCE:-}
if [ "${1:-}" = "--reference" ]; then ref=${2:-}; shift 2; fi
rounds=${1:-3}
load_s=${LOAD_S:-10}
serial_s=${SERIAL_S:-5}
slices=${SLICES:-5}
root=$(pwd)
refbuild=${KIOSK_REFERENCE_BUILD:-$HOME/.cache/kiosk-reference/nio-verify}
[ -n "$ref" ] && [ -d "$ref/nio-verify" ] && [ -d "$ref/nginx-content" ] || {
  echo "bench: give the reference programs' directory (nio-verify/, nginx-content/): --reference DIR or KIOSK_REFERENCE=DIR" >&2
  exit 2; }
ref=$(cd "$ref" && pwd)

./Scripts/setup.sh
if ! command -v nginx >/dev/null 2>&1; then
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y nginx > /dev/null
fi
echo "bench: building (release)"
for product in kiosk-store kiosk-content kiosk kiosk-bench; do swift build -c release --product "$product" > /dev/null; done
(cd "$ref/nio-verify" && swift build -c release --scratch-path "$refbuild" > /dev/null)
# The same reference behind NIOSSL (Benchmarks/reference-tls.py patches a copy): the TLS ceiling.
python3 Benchmarks/reference-tls.py "$ref/nio-verify" "$refbuild-tls-src"
(cd "$refbuild-tls-src" && swift build -c release --scratch-path "$refbuild-tls" > /dev/null)
bin=.build/release
refbin="$refbuild/release"
reftlsbin="$refbuild-tls/release"
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

# Every server is started once and the slices alternate between them (the reference, the reference
# behind TLS, Kiosk plaintext, Kiosk TLS), so the VM's slow minutes fall on all four alike instead of
# on whichever ran then.
data="$ref/nginx-content/data/www/content.txt"
stopfile=$(mktemp -u)
cleanup_all() {
  touch "$stopfile"   # the services' subshells stop their services and exit
  kill "$nio_pid" "$niotls_pid" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -f "$stopfile" "$results" "$results".*
  rm -rf "$niotls_dir"
}
nio_pid=""; niotls_pid=""; niotls_dir=""
trap cleanup_all EXIT

# The bare SwiftNIO reference.
nio_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$refbin/nio-verify-server" --port "$nio_port" --key-seed "$seed" --threads 2 > /dev/null 2>&1 &
nio_pid=$!
for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$nio_port") 2>/dev/null && break; sleep 0.05; done
# The bare reference behind TLS, with a development certificate as Kiosk's TLS services have.
niotls_dir=$(mktemp -d)
"$bin/kiosk-store" tls create-dev --out "$niotls_dir" > /dev/null
niotls_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
NIO_VERIFY_TLS_CERT="$niotls_dir/server.pem" NIO_VERIFY_TLS_KEY="$niotls_dir/server-key.pem" \
  "$reftlsbin/nio-verify-server" --port "$niotls_port" --key-seed "$seed" --threads 2 > "$niotls_dir/out" 2>&1 &
niotls_pid=$!
for _ in $(seq 100); do grep -q listening "$niotls_dir/out" && break; sleep 0.05; done
grep -q listening "$niotls_dir/out" || { echo "bench: the bare TLS server did not start:" >&2; cat "$niotls_dir/out" >&2; exit 1; }

# nginx's data (the reference's run.sh generates it on its first run).
echo "bench: nginx reference (data)"
(cd "$ref/nginx-content" && RUNS=1 ./run.sh > /dev/null 2>&1)
sha=$(sha256sum "$data" | cut -d' ' -f1)

# Kiosk, plaintext and TLS: each pair of services in a subshell that stays up until $stopfile appears.
for mode in plain tls; do
  (
    KIOSK_TLS=$([ "$mode" = tls ] && echo 1 || echo 0)
    . Scripts/lib.sh
    start_store
    mkdir -p "$work/content/books"
    cp "$data" "$work/content/books/swift-book.txt"
    start_content "$(new_credential content)"
    token=$(new_token)
    echo "$content $content_pid $work $store $token $KIOSK_STORE_CREDENTIAL ${KIOSK_TLS_CA:-}" > "$results.$mode"
    while [ ! -f "$stopfile" ]; do sleep 0.2; done
  ) &
done
for mode in plain tls; do
  for _ in $(seq 600); do [ -s "$results.$mode" ] && break; sleep 0.1; done
  [ -s "$results.$mode" ] || { echo "bench: the $mode services did not start" >&2; exit 1; }
done

# A command prefix for the load generators (taskset in the rounds that pin them).
pin=()
# The CPUs this script may use (the pinned rounds take the first two, then give the servers all of them back).
cpus=$(python3 -c 'import os; print(" ".join(map(str, sorted(os.sched_getaffinity(0)))))')
read -r client_cpu server_cpu _ <<< "$cpus $cpus"
[ "$(wc -w <<< "$cpus")" -ge 2 ] && command -v taskset > /dev/null || server_cpu=""
all_cpus=$(tr ' ' ',' <<< "$cpus")
# Puts every server's threads on CPU list $1 (both bare servers and both Kiosk content services).
pin_servers() {
  local pids=("$nio_pid" "$niotls_pid") mode content content_pid
  for mode in plain tls; do read -r content content_pid _ < "$results.$mode"; pids+=("$content_pid"); done
  for pid in "${pids[@]}"; do taskset -a -p -c "$1" "$pid" > /dev/null; done
}
# One verify run against Kiosk in MODE: prints calls/s p50 p99 server-µs client-µs errors.
kiosk_verify() {
  local mode=$1; shift
  read -r content content_pid work store token credential ca < "$results.$mode"
  local tls=(); [ -n "$ca" ] && tls=(--tls-ca "$ca")
  KIOSK_STORE_CREDENTIAL="$credential" "${pin[@]}" "$bin/kiosk-bench" verify --content "$content" --store-data-dir "$work/store" --catalog Scripts/examples/catalog.json \
    --product book.swift "${tls[@]}" --server-pid "$content_pid" --json "$@" 2>/dev/null \
    | python3 Benchmarks/benchrows.py figures 2>/dev/null
}
# One run against the bare reference: nio_verify plain|tls ARGS…
nio_verify() {
  local mode=$1; shift
  if [ "$mode" = tls ]; then
    NIO_VERIFY_TLS_CA="$niotls_dir/ca.pem" "${pin[@]}" "$reftlsbin/nio-verify-load" --port "$niotls_port" \
      --key-seed "$seed" --server-pid "$niotls_pid" --json "$@"
  else
    "${pin[@]}" "$refbin/nio-verify-load" --port "$nio_port" --key-seed "$seed" --server-pid "$nio_pid" --json "$@"
  fi | fields calls_per_s latency_us.p50 latency_us.p99 cpu.server_us_per_call cpu.client_us_per_call errors 2>/dev/null
}
# `kiosk ARGS…` as the buyer of the services in MODE.
kiosk_as() {
  local mode=$1; shift
  read -r content content_pid work store token credential ca < "$results.$mode"
  (
    export KIOSK_STORE="$store" KIOSK_CONTENT="$content" KIOSK_TOKEN="$token" KIOSK_STATE_DIR="$work/phone"
    if [ -n "$ca" ]; then export KIOSK_TLS_CA="$ca"; else unset KIOSK_TLS_CA; fi
    "$bin/kiosk" "$@"
  )
}
# One `kiosk download` in MODE, timed (the process checks SHA-256 and fsyncs); the file is compared after.
kiosk_download() {
  local mode=$1
  read -r content content_pid work store token credential ca < "$results.$mode"
  local out="$work/out"
  rm -rf "$out"
  sync
  local t0 t1
  t0=$(date +%s.%N)
  kiosk_as "$mode" download book.swift --out "$out" > /dev/null
  t1=$(date +%s.%N)
  [ "$(sha256sum "$out/book.swift" | cut -d' ' -f1)" = "$sha" ] || { echo "bench: the downloaded file differs" >&2; exit 1; }
  python3 -c "print(f'{$(stat -c %s "$data") / ($t1 - $t0) / 1e6:.1f} 0 0 0 0 0')"
}
for mode in plain tls; do kiosk_as "$mode" buy book.swift > /dev/null; done

# One slice of each server in turn, as rows of KIND: the same binary's calls/s and p50 move by ±20%
# between runs a minute apart on this VM, so a round's LOAD_S (cold) and SERIAL_S (serial) seconds
# per server are cut into SLICES slices taken in turn, and each slice's ratio is also read against
# the bare server's of the same cycle, seconds apart.
#   cycle KIND SECONDS WARMUP CONNECTIONS CONCURRENCY KIOSK_RECEIPTS
# Kiosk's receipts are distinct: one comes back, if at all, KIOSK_RECEIPTS calls later, long after
# its 10,000-receipt cache let it go, so every call checks a signature.
cycle() {
  local kind=$1 mode
  local load=(--duration "$2" --warmup "$3" --connections "$4" --concurrency "$5")
  row "$kind" nio "$(nio_verify plain "${load[@]}" --receipts 10000)"
  row "$kind" nio-tls "$(nio_verify tls "${load[@]}" --receipts 10000)"
  for mode in plain tls; do
    row "$kind" "kiosk-$mode" "$(kiosk_verify $mode "${load[@]}" --receipts "$6")"
  done
}
# Adds a run's row: KIND WHO FIGURES (empty when the run failed: said here, counted in the summary).
row() {
  [ -n "$3" ] || echo "bench: a $1 run of $2 failed" >&2
  echo "$1 $2 $3" >> "$results"
}
load_slice=$(python3 -c "print($load_s / $slices)")
serial_slice=$(python3 -c "print($serial_s / $slices)")
for round in $(seq "$rounds"); do
  echo "bench: round $round of $rounds"
  for _ in $(seq "$slices"); do cycle cold "$load_slice" 1 4 64 60000; done
  for _ in $(seq "$slices"); do cycle serial "$serial_slice" 0.5 1 1 20000; done
  if [ -n "$server_cpu" ]; then
    pin_servers "$server_cpu"
    pin=(taskset -c "$client_cpu")
    for _ in $(seq "$slices"); do cycle apart "$serial_slice" 0.5 1 1 20000; done
    pin=()
    pin_servers "$all_cpus"
  fi
  # nginx → curl | sha256sum: the reference's own script, one measured run (after its warm-up run).
  (cd "$ref/nginx-content" && RUNS=1 ./run.sh > /dev/null 2>&1)
  python3 - "$ref/nginx-content/data/results.txt" >> "$results" <<'PY'
import sys
for line in open(sys.argv[1]):
    k, t, n = line.split()
    if k == "b": print(f"download nginx {int(n) / float(t) / 1e6:.1f} 0 0 0 0 0")
PY
  for mode in plain tls; do
    row download "kiosk-$mode" "$(kiosk_download $mode)"
  done
done

[ -z "${BENCH_ROWS:-}" ] || cp "$results" "$BENCH_ROWS"   # every run's figures, for a second look
# The machine: both downloads hash every byte with SHA-256 in one stream. kiosk download's check
# (BoringSSL) uses the CPU's SHA extensions when it has them, several times faster than without;
# sha256sum after curl (coreutils, ~190 MB/s here) never does. Without them, both are bound by it.
echo "bench: $(nproc) CPUs, $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)," \
  "SHA extensions (sha_ni): $(grep -qw sha_ni /proc/cpuinfo && echo yes || echo no)"
python3 - "$results" "$rounds" <<'PY'
import sys, statistics as st
sys.path.insert(0, "Benchmarks")
from benchrows import read_rows, read_slots
rows, failed = read_rows(sys.argv[1])  # the rows of failed runs are counted, not averaged
# Pairs are taken slot by slot (a failed run is None in its place), so one failure drops its own pair
# instead of shifting every later one onto the next cycle's bare run.
slots = read_slots(sys.argv[1])
def pairs(kind, who, base):
    return [(k, n) for k, n in zip(slots.get((kind, who), []), slots.get((kind, base), [])) if k and n]
def med(kind, who, i):
    values = [r[i] for r in rows.get((kind, who), [])]
    return st.median(values) if values else float("nan")
print(f"bench: {sys.argv[2]} round(s); medians; µs per call measured from /proc of the server and the load generator")
print("TLS ratios: Kiosk over TLS to the bare server in plaintext (the bar in docs/performance.md) / to the bare server behind NIOSSL")
print("| work | bare NIO / nginx | bare NIO + TLS | Kiosk plaintext | Kiosk TLS | plaintext ratio | TLS ratio |")
print("|---|---|---|---|---|---|---|")
for kind, label in (("cold", "cold verify K=4 C=64, calls/s"), ("serial", "serial cold K=1 C=1, calls/s"),
                    ("apart", "serial, servers on one core, load generators on the other, calls/s")):
    if (kind, "nio") not in rows: continue
    def four(i): return [med(kind, who, i) for who in ("nio", "nio-tls", "kiosk-plain", "kiosk-tls")]
    nio, niotls, plain, tls = four(0)
    print(f"| {label} | {nio:,.0f} | {niotls:,.0f} | {plain:,.0f} | {tls:,.0f} | {plain / nio:.2f}× "
          f"| {tls / nio:.2f}× / {tls / niotls:.2f}× |")
    nio, niotls, plain, tls = four(1)
    print(f"| {kind} p50 µs | {nio:,.0f} | {niotls:,.0f} | {plain:,.0f} | {tls:,.0f} | {plain / nio:.2f}× slower "
          f"| {tls / nio:.2f}× / {tls / niotls:.2f}× slower |")
    # Each slice's figure over the bare server's of the same cycle (runs seconds apart), then the median,
    # with the quartiles: the spread says how far one run's median can be trusted. Cold: calls/s; serial: p50.
    figure = 0 if kind == "cold" else 1
    def paired(who, base):
        values = [k[figure] / n[figure] for k, n in pairs(kind, who, base)]
        if len(values) < 2: return f"{values[0]:.2f}×" if values else "nan"
        q1, q2, q3 = st.quantiles(values, n=4, method="inclusive")
        return f"{st.median(values):.2f}× ({q1:.2f}–{q3:.2f})"
    slower = "" if kind == "cold" else " slower"
    print(f"| {kind} {'calls/s' if kind == 'cold' else 'p50'}, median of the {len(pairs(kind, 'kiosk-plain', 'nio'))} "
          f"cycles' ratios (quartiles) | | {paired('nio-tls', 'nio')} the bare server's | | "
          f"| {paired('kiosk-plain', 'nio')}{slower} | {paired('kiosk-tls', 'nio')} / {paired('kiosk-tls', 'nio-tls')}{slower} |")
    for i, what in ((3, "server"), (4, "load generator")):
        nio, niotls, plain, tls = four(i)
        print(f"| {kind}: {what} CPU µs/call | {nio:.0f} | {niotls:.0f} | {plain:.0f} | {tls:.0f} | | |")
    # Kiosk's own server cost per call: its server CPU minus the bare server's in the same cycle (the same
    # signature and parse; the bare server adds only its framing; over TLS, minus the bare server's behind
    # TLS), then the median; the bare TLS column: what TLS costs the bare server. A one-thread in-process
    # verify is no steadier a baseline here: it moved 106-145 µs between three runs a minute apart.
    # (The median of the differences: not the difference of the medians above.)
    def extra(who, base):
        values = [k[3] - n[3] for k, n in pairs(kind, who, base)]
        return st.median(values) if values else float("nan")
    print(f"| {kind}: server CPU − bare NIO's (Kiosk TLS: − bare NIO + TLS's), median of each cycle's difference, µs/call | 0 "
          f"| {extra('nio-tls', 'nio'):.0f} | {extra('kiosk-plain', 'nio'):.0f} | {extra('kiosk-tls', 'nio-tls'):.0f} | | |")
nginx = med("download", "nginx", 0); plain = med("download", "kiosk-plain", 0); tls = med("download", "kiosk-tls", 0)
print(f"| download 64 MiB text, verified, MB/s | {nginx:.0f} | — | {plain:.0f} | {tls:.0f} | {plain / nginx:.2f}× | {tls / nginx:.2f}× |")
errors = sum(r[5] for (kind, _), values in rows.items() for r in values if kind != "download")
print(f"errors in all runs: {errors:.0f}" + (f"; {failed} run(s) failed and are left out" if failed else ""))
sys.exit(1 if failed else 0)
PY
