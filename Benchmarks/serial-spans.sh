#!/usr/bin/env bash
# Where a serial verify call's time goes, read off the wire, for the bare
# SwiftNIO reference and Kiosk (plaintext) alike: tcpdump on the loopback
# during each serial run (K=1 C=1), then Benchmarks/serial-spans.py splits every
# call into the server's span (request packet → response packet: wake-up,
# read, work, write) and the client's (response → next request). The two load
# generators' own clocks stop where each reads the response, before decoding
# it, but cover different work before that (Kiosk's two answer frames and its
# call bookkeeping); the packets' times do not depend on either. A run's
# medians are over its calls on the serial connection, the warm-up's included.
#   Benchmarks/serial-spans.sh --reference DIR [CYCLES]   (or KIOSK_REFERENCE=DIR; default 5 cycles; SPAN_S=2 seconds
#                                                         a run; the runs alternate)
# Release builds, the reference cached as bench.sh does. Installs tcpdump when
# missing; capturing needs root (or CAP_NET_RAW).
set -euo pipefail
cd "$(dirname "$0")/.."
ref=${KIOSK_REFERENCE:-}
if [ "${1:-}" = "--reference" ]; then ref=${2:-}; shift 2; fi
cycles=${1:-5}
seconds=${SPAN_S:-2}
root=$(pwd)
refbuild=${KIOSK_REFERENCE_BUILD:-$HOME/.cache/kiosk-reference/nio-verify}
[ -n "$ref" ] && [ -d "$ref/nio-verify" ] || {
  echo "serial-spans: give the reference programs' directory: --reference DIR or KIOSK_REFERENCE=DIR" >&2; exit 2; }
ref=$(cd "$ref" && pwd)
./Scripts/setup.sh
if ! command -v tcpdump > /dev/null 2>&1; then
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y tcpdump > /dev/null
fi
# Before the builds: can this user capture on the loopback at all?
probe=$(timeout 1 tcpdump -i lo -c 1 -w /dev/null 2>&1 > /dev/null || true)
grep -q "listening on" <<< "$probe" || { echo "serial-spans: tcpdump cannot capture on lo (run as root or with CAP_NET_RAW): $probe" >&2; exit 1; }
echo "serial-spans: building (release)"
for product in kiosk-store kiosk-content kiosk-bench; do swift build -c release --product "$product" > /dev/null; done
(cd "$ref/nio-verify" && swift build -c release --scratch-path "$refbuild" > /dev/null)
bin=.build/release
refbin="$refbuild/release"
seed=4242424242424242424242424242424242424242424242424242424242424242

KIOSK_TLS=0
. Scripts/lib.sh
# The reference server and the capture are lib.sh's processes too (pid[nio], pid[capture]): stopped at exit.
nio_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$refbin/nio-verify-server" --port "$nio_port" --key-seed "$seed" --threads 2 > /dev/null 2>&1 &
pid[nio]=$!
up=""
for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$nio_port") 2>/dev/null && { up=1; break; }; sleep 0.05; done
[ -n "$up" ] || { echo "serial-spans: the bare reference server did not start on port $nio_port" >&2; exit 1; }
start_store
mkdir -p "$work/content/books"
echo "a book" > "$work/content/books/swift-book.txt"
start_content "$(new_credential content)"
kiosk_port=${content##*:}

# One serial run of WHO under tcpdump → "WHO calls server-µs client-µs period-µs p50-µs" (the load generator's own p50).
measured() {
  local who=$1 port p50
  port=$([ "$who" = nio ] && echo "$nio_port" || echo "$kiosk_port")
  tcpdump -i lo -s 128 --time-stamp-precision=nano -B 65536 -U -w "$work/capture.pcap" "tcp port $port" > /dev/null 2> "$work/tcpdump.err" &
  pid[capture]=$!
  for _ in $(seq 100); do grep -q listening "$work/tcpdump.err" && break; sleep 0.05; done
  grep -q listening "$work/tcpdump.err" || { echo "serial-spans: tcpdump could not capture:" >&2; cat "$work/tcpdump.err" >&2; exit 1; }
  if [ "$who" = nio ]; then
    p50=$("$refbin/nio-verify-load" --port "$nio_port" --key-seed "$seed" --json --duration "$seconds" --warmup 0.5 \
      --connections 1 --concurrency 1 --receipts 10000 2> "$work/load.err" | python3 -c 'import json, sys; print(json.load(sys.stdin)["latency_us"]["p50"])') \
      || { echo "serial-spans: the reference's serial run failed:" >&2; cat "$work/load.err" >&2; exit 1; }
  else
    p50=$("$bin/kiosk-bench" verify --content "$content" --store-data-dir "$work/store" --catalog Scripts/examples/catalog.json \
      --product book.swift --json --duration "$seconds" --warmup 0.5 --connections 1 --concurrency 1 --receipts 20000 2> "$work/load.err" \
      | python3 -c 'import json, sys; r = json.load(sys.stdin); assert r["errors"] == 0, r["errors_by_kind"]; print(r["latency_us"]["p50"])') \
      || { echo "serial-spans: Kiosk's serial run failed:" >&2; cat "$work/load.err" >&2; exit 1; }
  fi
  stop_service capture INT
  # An assignment of its own: a failure inside echo's arguments would not stop the script (set -e).
  local spans
  spans=$(python3 Benchmarks/serial-spans.py "$work/capture.pcap" "$port")
  echo "$who $spans $p50"
}
rows="$work/rows"
for cycle in $(seq "$cycles"); do
  # Not through a pipe: `measured` runs in this shell, so a failure stops the capture through the EXIT trap.
  measured nio >> "$rows"; tail -n 1 "$rows"
  measured kiosk >> "$rows"; tail -n 1 "$rows"
done
python3 - "$rows" <<'PY'
import sys, statistics as st
rows = [line.split() for line in open(sys.argv[1])]
print("serial-spans: medians of the runs' medians (µs), Kiosk plaintext against the bare SwiftNIO reference")
print("| span | bare NIO | Kiosk | Kiosk − bare | ratio |")
print("|---|---|---|---|---|")
for index, label in ((2, "server (request → response)"), (3, "client (response → next request)"),
                     (4, "period (request → next request)"), (5, "load generator's own p50")):
    nio = st.median(float(r[index]) for r in rows if r[0] == "nio")
    kiosk = st.median(float(r[index]) for r in rows if r[0] == "kiosk")
    print(f"| {label} | {nio:.1f} | {kiosk:.1f} | {kiosk - nio:+.1f} | {kiosk / nio:.2f}× |")
PY
