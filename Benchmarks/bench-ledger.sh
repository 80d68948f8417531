#!/usr/bin/env bash
# Durable purchases per second with the ledger on SQLite and on PostgreSQL,
# side by side: two `kiosk-store serve` processes (release build, plaintext on
# 127.0.0.1), one on a data dir's SQLite file and one on a throwaway
# PostgreSQL cluster (Scripts/postgres.sh), loaded in alternating rounds by
# `kiosk-bench purchase` (C=16 purchases in flight, one buyer), with the CPU
# per purchase of the store and, for PostgreSQL, of the database's processes.
#   Benchmarks/bench-ledger.sh [ROUNDS]     (default 3; DURATION=10 seconds a round)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
duration=${DURATION:-10}
./Scripts/setup.sh
for product in kiosk-store kiosk-bench; do swift build -c release --product "$product" > /dev/null; done
bin=.build/release
KIOSK_TLS=0
. Scripts/lib.sh

read -r url pgdir _ < <(./Scripts/postgres.sh start $$)
./Scripts/postgres.sh createdb "$url" kiosk
database=${url%/postgres}/kiosk
postmaster=$(head -1 "$pgdir/data/postmaster.pid")

serve_store sqlite
serve_store postgres --database "$database"
sqlite_token=$(new_token sqlite)
pg_token=$(new_token postgres --database "$database")

# CPU seconds (user + system) of the PostgreSQL server and its backends.
pg_cpu() {
  python3 - "$postmaster" <<'PY'
import os, sys
root = sys.argv[1]; hz = os.sysconf("SC_CLK_TCK"); total = 0
for pid in [root] + open(f"/proc/{root}/task/{root}/children").read().split():
    try:
        fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])
    except OSError:
        pass
print(total / hz)
PY
}

results="$work/results"
for round in $(seq "$rounds"); do
  echo "bench-ledger: round $round of $rounds"
  for backend in sqlite postgres; do
    if [ "$backend" = sqlite ]; then token=$sqlite_token; else token=$pg_token; fi
    before=$(pg_cpu)
    json=$("$bin/kiosk-bench" purchase --store "${address[$backend]}" --token "$token" --concurrency 16 --duration "$duration" --warmup 2 \
      --server-pid "${pid[$backend]}" --json 2>/dev/null)
    after=$(pg_cpu)
    echo "$backend $json $before $after" >> "$results"
  done
done

python3 - "$results" "$rounds" <<'PY'
import json, sys, statistics as st
rows = {}
for line in open(sys.argv[1]):
    backend, rest = line.split(" ", 1)
    text, before, after = rest.rsplit(" ", 2)
    r = json.loads(text); n = max(r["calls"], 1)
    rows.setdefault(backend, []).append((r["calls_per_second"], r["latency_us"]["p50"] / 1000, r["latency_us"]["p99"] / 1000,
        r["server_cpu_seconds"] * 1e6 / n, (float(after) - float(before)) * 1e6 / n if backend == "postgres" else 0.0, r["errors"]))
print(f"bench-ledger: {sys.argv[2]} round(s), medians; C=16, one buyer, durable (committed before the answer)")
print("| ledger | purchases/s | p50 ms | p99 ms | store CPU µs/purchase | PostgreSQL CPU µs/purchase | errors |")
print("|---|---|---|---|---|---|---|")
for backend in ("sqlite", "postgres"):
    values = rows.get(backend, [])
    med = lambda i: st.median(v[i] for v in values)
    print(f"| {backend} | {med(0):,.0f} | {med(1):.1f} | {med(2):.1f} | {med(3):.0f} | {med(4):.0f} | {sum(v[5] for v in values):.0f} |")
sqlite, postgres = st.median(v[0] for v in rows["sqlite"]), st.median(v[0] for v in rows["postgres"])
print(f"PostgreSQL / SQLite purchases: {postgres / sqlite:.2f}×")
PY
