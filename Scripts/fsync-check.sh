#!/usr/bin/env bash
# Shows that an answered purchase is on disk: a release kiosk-store under
# `kiosk-bench purchase` load for SECONDS (default 5) at CONCURRENCY (default
# 16), traced with `strace -f -e trace=fsync,fdatasync`. A purchase is two
# ledger writes (its payment intent, then its outcome); writes that arrive
# while the ledger commits are committed together (group commit), each
# caller answered only after its commit. Prints purchases, writes, commits,
# syncs; fails unless every commit was synced (syncs >= commits) and, at
# concurrency 1, every purchase got its own two syncs.
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
KIOSK_TLS=0
. Scripts/lib.sh
token=$(new_token store)
start_store --log-level notice
strace -f -p "$store_pid" -e trace=fsync,fdatasync -o "$work/trace" 2>/dev/null &
strace_pid=$!
sleep 0.5  # strace attaches to every thread before the load starts
"$bin/kiosk-bench" purchase --store "$store" --token "$token" --duration "$seconds" --warmup 0 \
  --concurrency "$concurrency" --json > "$work/bench.json"
kill "$strace_pid"; wait "$strace_pid" 2>/dev/null || true
stop_service store
python3 - "$work/bench.json" "$work/trace" "$work/store" "$work/store.err" "$concurrency" <<'PY'
import json, re, sqlite3, sys
bench = json.load(open(sys.argv[1]))
lines = [l for l in open(sys.argv[2]) if "fsync(" in l or "fdatasync(" in l]
purchases = sqlite3.connect(sys.argv[3] + "/ledger.sqlite").execute("SELECT COUNT(*) FROM transactions").fetchone()[0]
log = open(sys.argv[4]).read()
m = re.search(r"ledger: (\d+) writes in (\d+) group commits", log)
writes, commits = (int(m.group(1)), int(m.group(2))) if m else (0, 0)
syncs = len(lines)
concurrency = int(sys.argv[5])
print(f"fsync-check: C={concurrency}: {purchases} purchases, {writes} ledger writes in {commits} commits "
      f"({writes / max(commits, 1):.1f} writes a commit), {syncs} syncs (fsync/fdatasync): {syncs / max(purchases, 1):.2f} per purchase; "
      f"{bench.get('calls_per_second', 0):.0f} purchases/s under strace")
ok = purchases > 0 and commits > 0 and syncs >= commits and (concurrency > 1 or syncs >= 2 * purchases)
print("fsync-check: OK — every commit was synced before its writes were answered" if ok else "fsync-check: FAIL")
sys.exit(0 if ok else 1)
PY
