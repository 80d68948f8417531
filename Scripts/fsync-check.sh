#!/usr/bin/env bash
# Counts the fsyncs a store makes per answered purchase: a release kiosk-store
# under `kiosk-bench purchase` load for SECONDS (default 5), traced with
# `strace -f -e trace=fsync,fdatasync`. Prints purchases, syncs and syncs per
# purchase; fails if any answered purchase went without a sync of the WAL.
#
#     Scripts/fsync-check.sh [SECONDS] [CONCURRENCY]
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-5}
concurrency=${2:-16}
./Scripts/setup.sh
command -v strace >/dev/null 2>&1 || { sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"; $sudo apt-get install -y strace; }
swift build -c release --product kiosk-store >/dev/null
swift build -c release --product kiosk-bench >/dev/null
bin=$(swift build -c release --show-bin-path)
work=$(mktemp -d)
trap 'kill "$store_pid" 2>/dev/null || true; rm -rf "$work"' EXIT
token=$("$bin/kiosk-store" account create --data-dir "$work/store" --json | sed 's/.*"token":"\([^"]*\)".*/\1/')
"$bin/kiosk-store" serve --data-dir "$work/store" --catalog Scripts/examples/catalog.json --port 0 --log-level error > "$work/banner" &
store_pid=$!
until grep -q listening "$work/banner" 2>/dev/null; do sleep 0.05; done
port=$(sed 's/.*127.0.0.1:\([0-9]*\).*/\1/' "$work/banner")
strace -f -p "$store_pid" -e trace=fsync,fdatasync -o "$work/trace" 2>/dev/null &
strace_pid=$!
sleep 0.5  # strace attaches to every thread before the load starts
"$bin/kiosk-bench" purchase --store "127.0.0.1:$port" --token "$token" --duration "$seconds" --warmup 0 --concurrency "$concurrency" --json > "$work/bench.json"
kill "$strace_pid"; wait "$strace_pid" 2>/dev/null || true
python3 - "$work/bench.json" "$work/trace" "$work/store" <<'PY'
import json, sqlite3, sys
bench = json.load(open(sys.argv[1]))
lines = [l for l in open(sys.argv[2]) if "fsync(" in l or "fdatasync(" in l]
purchases = sqlite3.connect(sys.argv[3] + "/ledger.sqlite").execute("SELECT COUNT(*) FROM transactions").fetchone()[0]
fsync = sum("fsync(" in l and "fdatasync(" not in l for l in lines)
fdatasync = sum("fdatasync(" in l for l in lines)
syncs = fsync + fdatasync
calls = bench.get("calls_per_second", 0)
print(f"fsync-check: {purchases} purchases recorded while traced, {syncs} syncs ({fsync} fsync, {fdatasync} fdatasync): "
      f"{syncs / max(purchases, 1):.2f} per purchase; {calls:.0f} purchases/s under strace")
sys.exit(0 if purchases > 0 and syncs >= purchases else 1)
PY
