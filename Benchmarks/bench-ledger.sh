#!/usr/bin/env bash
# Durable purchases on PostgreSQL against PostgreSQL's own ceiling, pgbench, in the same run; SQLite alongside.
# Release builds of kiosk-store and kiosk-bench; stores in plaintext on 127.0.0.1 (Scripts/lib.sh); one throwaway
# PostgreSQL cluster (Scripts/postgres.sh). When the server has pg_stat_statements, the script preloads it
# (ALTER SYSTEM shared_preload_libraries, then `Scripts/postgres.sh restart`). The cluster holds two databases:
# `kiosk`, the ledger, and `pgbench`, made by `pgbench -i -s PGBENCH_SCALE` (default 64, so the scale is at least
# the client count and the runs do not contend on branch rows; the script prints how long this took). The
# PostgreSQL stores share one key-encryption key (`kiosk-store keys new-kek`), as replicas must. Each ledger gets 64
# accounts, made once with lib.sh's new_token. With N buyers, worker i buys as account i mod N.
#
# Cases (buyers/purchases in flight). Each is one `kiosk-bench purchase --warmup 2 --duration DURATION
# --connections 2 --json`, with a --token for each buyer and a --server-pid for each store:
#   PostgreSQL, one store:                                    1/1, 1/16, 16/16, 64/16, 64/64
#   PostgreSQL, one store with --database-statements unnamed: 64/16, 64/64   (every statement parsed and planned each
#                                                             time: what preparing them saves, in the same run)
#   PostgreSQL, two stores on the database (own data dirs):   64/16, 64/64   (two replicas started for these, each
#                                                             with half of one store's pool: 4 connections of the
#                                                             default 8, so both cases pool 8 in all)
#   SQLite, one store on its own data dir:                    64/16, 64/64
#   PostgreSQL on a core of its own (PINNED=1, the default, with 2 or more cores): the postmaster and its backends on
#   the last core, the stores, kiosk-bench and pgbench's client on the others (taskset), as where the database has a
#   host of its own; one store 64/16, 64/64, two stores 64/64; pgbench right after each, pinned the same way
# Every case uses 2 kiosk-bench connections, so one store and two replicas differ only in the stores (and how the
# one pool is split among them). The one store is restarted after the two replicas' cases, before the pinned ones.
# Right after each PostgreSQL case, pgbench runs on the same cluster with as many clients as purchases in flight:
#   pgbench -M prepared -c C -j 2 -T DURATION -n pgbench    (TPC-B-like; tps "without initial connection time")
# For each PostgreSQL case, the script measures from just before kiosk-bench starts. The window includes warm-up:
#   purchases      rows the case added to the ledger's `transactions` table: the denominator of the three below
#   statements     pg_stat_statements calls in the kiosk database (top-level statements, COMMIT included; it
#                  does not count a BEGIN sent as a prepared statement, as the ledger's writes send theirs),
#                  reset before the case and read right after it
#   commits        the kiosk database's pg_stat_database.xact_commit, read at least 12 s after the case ends,
#                  after the pgbench run (an idle backend can hold its counts for 10 s before it reports them)
#   PostgreSQL CPU user + system CPU of the postmaster and its children, live or exited (/proc), across the
#                  kiosk-bench run; the same across the pgbench run, over the transactions pgbench reports
# Statements and commits are net of the stores' idle background, the polls a store makes with no load. The script
# measures that background once for one store and once for two: statements/s and commits/s over 20 idle seconds.
# Store CPU per purchase is kiosk-bench's server_cpu_seconds (summed over every --server-pid) over its measured calls.
# Output: a Markdown table of medians over rounds, then lines giving the ratio to pgbench at 64 buyers and 64 in
# flight, p99 at 64 buyers and 16 in flight, and two stores against one. Each round's raw rows (JSON lines: the
# kiosk-bench JSON plus the raw counters) are appended to BENCH_ROWS (default: a new file in $TMPDIR, /tmp if unset);
# the script prints that path. pg_stat_statements stays loaded during the pgbench runs too, so both sides pay its
# cost. Expect about 4 minutes a round with DURATION=10, after about 3 minutes of setup.
#   Benchmarks/bench-ledger.sh [ROUNDS]     (default 1; DURATION=10 whole seconds a case and a pgbench run)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-1}
duration=${DURATION:-10}
scale=${PGBENCH_SCALE:-64}
./Scripts/setup.sh
for product in kiosk-store kiosk-bench; do swift build -c release --product "$product" > /dev/null; done
bin=.build/release
KIOSK_TLS=0
. Scripts/lib.sh
rows=${BENCH_ROWS:-$(mktemp "${TMPDIR:-/tmp}/bench-ledger.XXXXXX.rows")}
: > "$rows"
say() { echo "bench-ledger: $*"; }
# An idle PostgreSQL backend reports its statistics (pg_stat_database) up to 10 s after its last transaction.
report_wait=12

read -r url pgdir pgbin < <(./Scripts/postgres.sh start $$)
pgport=$(echo "$url" | sed -E 's#.*:([0-9]+)/.*#\1#')
# sql DATABASE QUERY: one value, unaligned.
sql() { "$pgbin/psql" -X -q -A -t -h 127.0.0.1 -p "$pgport" -U kiosk -d "$1" -v ON_ERROR_STOP=1 -c "$2"; }
run_pgbench() { "$pgbin/pgbench" -h 127.0.0.1 -p "$pgport" -U kiosk "$@"; }

# pg_stat_statements works only when preloaded: set it for the cluster and restart (a new postmaster).
pgss=0
if [ -n "$(sql postgres "SELECT 1 FROM pg_available_extensions WHERE name = 'pg_stat_statements'")" ]; then
  sql postgres "ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements'"
  ./Scripts/postgres.sh restart "$pgdir"
  sql postgres "CREATE EXTENSION pg_stat_statements"
  pgss=1
else
  say "pg_stat_statements is not available: no statement counts"
fi
postmaster=$(head -1 "$pgdir/data/postmaster.pid")
./Scripts/postgres.sh createdb "$url" kiosk
./Scripts/postgres.sh createdb "$url" pgbench
database=${url%/postgres}/kiosk
kiosk_oid=$(sql postgres "SELECT oid FROM pg_database WHERE datname = 'kiosk'")

say "pgbench -i -s $scale"
began=$EPOCHREALTIME
run_pgbench -i -s "$scale" -q pgbench > "$work/pgbench-init.out" 2>&1 || { cat "$work/pgbench-init.out" >&2; exit 1; }
init_seconds=$(python3 -c 'import sys, time; print(f"{time.time() - float(sys.argv[1]):.1f}")' "$began")
sql postgres CHECKPOINT   # the initial load's pages are written now, not during the first cases
say "pgbench initialised at scale $scale in $init_seconds s"

"$bin/kiosk-store" keys new-kek "$work/kek" > /dev/null
pg_ledger=(--database "$database" --key-encryption-key-file "$work/kek")
serve_store sqlite
serve_store pg1 "${pg_ledger[@]}"
say "creating 64 accounts on each ledger"
sqlite_tokens=(); pg_tokens=()
for _ in $(seq 64); do
  sqlite_tokens+=("$(new_token sqlite)")
  pg_tokens+=("$(new_token pg1 "${pg_ledger[@]}")")
done

# CPU seconds (user + system) of the PostgreSQL server and its backends: the postmaster's own, its live children's,
# and those of the children it has reaped (cutime + cstime), so a backend that exits between two reads still counts.
pg_cpu() {
  python3 - "$postmaster" <<'PY'
import os, sys
root = sys.argv[1]; hz = os.sysconf("SC_CLK_TCK")
def times(pid):  # utime, stime, cutime, cstime
    return [int(v) for v in open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[11:15]]
total = sum(times(root))
for pid in open(f"/proc/{root}/task/{root}/children").read().split():
    try:
        total += sum(times(pid)[:2])
    except OSError:
        pass
print(total / hz)
PY
}

# Counters of the kiosk database, read from the postgres database so the reads are not counted themselves.
statements() {
  if [ "$pgss" = 1 ]; then sql postgres "SELECT coalesce(sum(calls), 0) FROM pg_stat_statements WHERE dbid = $kiosk_oid"
  else echo null; fi
}
reset_statements() { if [ "$pgss" = 1 ]; then sql postgres "SELECT pg_stat_statements_reset()" > /dev/null; fi; }
commits() { sql postgres "SELECT xact_commit FROM pg_stat_database WHERE datname = 'kiosk'"; }
ledger_purchases() { sql kiosk "SELECT count(*) FROM transactions"; }
sleep_until() { sleep "$(python3 -c 'import sys, time; print(max(0.0, float(sys.argv[1]) - time.time()))' "$1")"; }
later() { python3 -c 'import sys; print(float(sys.argv[1]) + float(sys.argv[2]))' "$1" "$2"; }

# Statements/s and commits/s in the kiosk database with the stores idle (their polls): 20 s, after $report_wait s
# for every backend to report what it did before. Prints "STATEMENTS_PER_S COMMITS_PER_S" (null without pg_stat_statements).
idle_background() {
  local c0 t0 s c1 t1
  sleep "$report_wait"
  reset_statements; c0=$(commits); t0=$EPOCHREALTIME
  sleep 20
  s=$(statements); c1=$(commits); t1=$EPOCHREALTIME
  python3 -c 'import sys
s, c0, c1, t0, t1 = sys.argv[1:]; window = float(t1) - float(t0)
print("null" if s == "null" else round(int(s) / window, 3), round((int(c1) - int(c0)) / window, 3))' \
    "$s" "$c0" "$c1" "$t0" "$t1"
}

# pgbench with CLIENTS clients on the pgbench database: prints its tps without initial connection time, the
# transactions it made, and PostgreSQL's CPU seconds before and after it.
pgbench_run() {
  local before after tps made
  before=$(pg_cpu)
  "${client[@]}" "$pgbin/pgbench" -h 127.0.0.1 -p "$pgport" -U kiosk -M prepared -c "$1" -j 2 -T "$duration" -n pgbench > "$work/pgbench.out" 2>&1 \
    || { echo "pgbench failed:" >&2; cat "$work/pgbench.out" >&2; exit 1; }
  after=$(pg_cpu)
  tps=$(sed -n 's/^tps = \([0-9.]*\) (without initial connection time)$/\1/p' "$work/pgbench.out" | grep .) \
    || { echo "pgbench printed no tps:" >&2; cat "$work/pgbench.out" >&2; exit 1; }
  made=$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*$/\1/p' "$work/pgbench.out" | grep .) \
    || { echo "pgbench printed no transaction count:" >&2; cat "$work/pgbench.out" >&2; exit 1; }
  echo "$tps $made $before $after"
}

# write_row KEY=JSON…: one JSON line into $rows.
write_row() {
  python3 -c 'import json, sys
print(json.dumps({k: json.loads(v) for k, v in (a.split("=", 1) for a in sys.argv[1:])}, sort_keys=True))' \
    "$@" >> "$rows"
}

# run_case ROUND LEDGER BUYERS IN_FLIGHT STORE…: one kiosk-bench run against the STOREs. For PostgreSQL, it also
# reads the counters around the run and runs pgbench after it. Appends the row.
run_case() {
  local round=$1 ledger=$2 buyers=$3 inflight=$4; shift 4
  local stores=("$@") endpoints=() args=() name i json
  for name in "${stores[@]}"; do endpoints+=("${address[$name]}"); args+=(--server-pid "${pid[$name]}"); done
  for i in $(seq 0 $((buyers - 1))); do
    if [ "$ledger" = sqlite ]; then args+=(--token "${sqlite_tokens[$i]}"); else args+=(--token "${pg_tokens[$i]}"); fi
  done
  say "round $round of $rounds: $ledger, ${#stores[@]} store(s), $buyers buyer(s), $inflight in flight"
  local p0 c0 t0 cpu0 cpu1 s t1 tps made bcpu0 bcpu1 c1 t2 p1
  if [ "$ledger" = postgres ]; then
    p0=$(ledger_purchases); reset_statements; c0=$(commits); t0=$EPOCHREALTIME; cpu0=$(pg_cpu)
  fi
  json=$("${client[@]}" "$bin/kiosk-bench" purchase --store "$(IFS=,; echo "${endpoints[*]}")" "${args[@]}" --connections 2 \
    --concurrency "$inflight" --duration "$duration" --warmup 2 --json 2> "$work/bench.err") || true
  # More than 0.1% failed calls make kiosk-bench exit 1 after its JSON: the row keeps them (the errors column).
  [ -n "$json" ] || { echo "kiosk-bench printed nothing:" >&2; cat "$work/bench.err" >&2; exit 1; }
  local fields=(round="$round" ledger="\"$ledger\"" stores="${#stores[@]}" buyers="$buyers" in_flight="$inflight"
    duration_s="$duration" statements_mode="\"${mode:-prepared}\"" pinned="${pinned:-false}" bench="$json")
  if [ "$ledger" = postgres ]; then
    cpu1=$(pg_cpu); s=$(statements); t1=$EPOCHREALTIME
    read -r tps made bcpu0 bcpu1 < <(pgbench_run "$inflight")
    sleep_until "$(later "$t1" "$report_wait")"
    c1=$(commits); t2=$EPOCHREALTIME; p1=$(ledger_purchases)
    fields+=(ledger_rows_before="$p0" ledger_rows_after="$p1" pg_cpu_before="$cpu0" pg_cpu_after="$cpu1"
      statements="$s" statements_from="$t0" statements_to="$t1" commits_before="$c0" commits_after="$c1"
      commits_from="$t0" commits_to="$t2" idle_statements_per_s="$idle_s" idle_commits_per_s="$idle_c"
      pgbench_scale="$scale" pgbench_clients="$inflight" pgbench_tps="$tps" pgbench_transactions="$made"
      pgbench_pg_cpu_before="$bcpu0" pgbench_pg_cpu_after="$bcpu1")
  fi
  write_row "${fields[@]}"
}

# PostgreSQL on the last core this script may use, everything else on the others (pin), or every process back on
# all of them (unpin). The CPUs are the script's own affinity (a cpuset or taskset around it is kept).
read -r all_cpus last_cpu other_cpus < <(python3 -c 'import os
cpus = sorted(os.sched_getaffinity(0))
print(",".join(map(str, cpus)), cpus[-1], ",".join(map(str, cpus[:-1])) or "-")')
cores=$(echo "$all_cpus" | tr ',' '\n' | wc -l)
client=()
pin_all() {  # CPU_LIST PID…: every thread of each process, and so the threads and children they make later; a
  local list=$1 p; shift   # process that has exited meanwhile (a backend closing, an autovacuum worker) is skipped
  for p in "$@"; do
    if ! taskset -a -p -c "$list" "$p" > /dev/null 2>&1 && kill -0 "$p" 2> /dev/null; then
      echo "bench-ledger: taskset -c $list could not pin process $p" >&2; exit 1
    fi
  done
}
pin_postgres() {  # the postmaster first: a backend it forks after this inherits its CPUs
  pin_all "$1" "$postmaster"
  # shellcheck disable=SC2046
  pin_all "$1" $(pgrep -P "$postmaster")
}
pin() {
  pin_postgres "$last_cpu"
  pin_all "$other_cpus" "$@"
  client=(taskset -c "$other_cpus")
}
unpin() {
  pin_postgres "$all_cpus"
  pin_all "$all_cpus" "$@"
  client=()
}

# Two replicas share the database's connections as one store has them: each gets half of one store's pool (the
# default 8, `--database-connections` or KIOSK_STORE_DATABASE_CONNECTIONS), so both cases pool as many connections
# (docs/postgresql.md, replicas).
replica_connections=$(( ${KIOSK_STORE_DATABASE_CONNECTIONS:-8} / 2 ))
[ "$replica_connections" -ge 1 ] || replica_connections=1
serve_pair() {  # pg1 stops; two replicas on data dirs of their own start
  stop_service pg1
  serve_store pg2a "${pg_ledger[@]}" --database-connections "$replica_connections"
  serve_store pg2b "${pg_ledger[@]}" --database-connections "$replica_connections"
}
unserve_pair() { stop_service pg2a; stop_service pg2b; serve_store pg1 "${pg_ledger[@]}"; }

say "idle background, one store on PostgreSQL ($((report_wait + 20)) s)"
idle_one=$(idle_background)
idle_two=""
for round in $(seq "$rounds"); do
  read -r idle_s idle_c <<< "$idle_one"
  for pair in "1 1" "1 16" "16 16" "64 16" "64 64"; do
    # shellcheck disable=SC2086  # the pair is two words: buyers and purchases in flight
    run_case "$round" postgres $pair pg1
  done
  serve_store pgu "${pg_ledger[@]}" --database-statements unnamed
  sleep "$report_wait"   # the new store's start-up commits are reported before the first count
  for pair in "64 16" "64 64"; do
    # shellcheck disable=SC2086
    mode=unnamed run_case "$round" postgres $pair pgu
  done
  stop_service pgu
  serve_pair
  if [ -z "$idle_two" ]; then
    say "idle background, two stores on PostgreSQL ($((report_wait + 20)) s)"
    idle_two=$(idle_background)
  else
    sleep "$report_wait"   # the new store's start-up commits are reported before the first count
  fi
  read -r idle_s idle_c <<< "$idle_two"
  for pair in "64 16" "64 64"; do
    # shellcheck disable=SC2086
    run_case "$round" postgres $pair pg2a pg2b
  done
  unserve_pair
  if [ "${PINNED:-1}" = 1 ] && [ "$cores" -ge 2 ]; then
    read -r idle_s idle_c <<< "$idle_one"
    sleep "$report_wait"   # the restarted store's start-up commits are reported before the first count
    pin "${pid[pg1]}"
    for pair in "64 16" "64 64"; do
      # shellcheck disable=SC2086
      pinned=true run_case "$round" postgres $pair pg1
    done
    unpin "${pid[pg1]}"
    serve_pair
    pin "${pid[pg2a]}" "${pid[pg2b]}"
    sleep "$report_wait"
    read -r idle_s idle_c <<< "$idle_two"
    pinned=true run_case "$round" postgres 64 64 pg2a pg2b
    unpin "${pid[pg2a]}" "${pid[pg2b]}"
    unserve_pair
  fi
  for pair in "64 16" "64 64"; do
    # shellcheck disable=SC2086
    run_case "$round" sqlite $pair sqlite
  done
done

python3 - "$rows" "$rounds" "$duration" "$scale" "$init_seconds" "$pgss" "$report_wait" <<'PY'
import json, sys, statistics as st
path, rounds, duration, scale, init_seconds, pgss, report_wait = sys.argv[1:]

def figures(row):
    b = row["bench"]
    calls = max(b["calls"], 1)
    f = {"rate": b["calls_per_second"], "p50": b["latency_us"]["p50"] / 1000, "p99": b["latency_us"]["p99"] / 1000,
         "store_cpu": b.get("server_cpu_seconds", 0) * 1e6 / calls, "errors": b["errors"],
         "statements": None, "commits": None, "pg_cpu": None, "tps": None, "ratio": None, "pgbench_cpu": None,
         "work": None}
    if row["ledger"] == "postgres":
        purchases = max(row["ledger_rows_after"] - row["ledger_rows_before"], 1)
        if row["statements"] is not None and row["idle_statements_per_s"] is not None:
            idle = row["idle_statements_per_s"] * (row["statements_to"] - row["statements_from"])
            f["statements"] = (row["statements"] - idle) / purchases
        idle = row["idle_commits_per_s"] * (row["commits_to"] - row["commits_from"])
        f["commits"] = (row["commits_after"] - row["commits_before"] - idle) / purchases
        f["pg_cpu"] = (row["pg_cpu_after"] - row["pg_cpu_before"]) * 1e6 / purchases
        f["tps"] = row["pgbench_tps"]
        f["ratio"] = f["rate"] / row["pgbench_tps"] if row["pgbench_tps"] else None
        if row.get("pgbench_transactions"):
            f["pgbench_cpu"] = ((row["pgbench_pg_cpu_after"] - row["pgbench_pg_cpu_before"]) * 1e6
                                / row["pgbench_transactions"])
            # What PostgreSQL alone allows: its CPU a pgbench transaction over its CPU a purchase.
            f["work"] = f["pgbench_cpu"] / f["pg_cpu"] if f["pg_cpu"] else None
    return f

cases = {}
for line in open(path):
    row = json.loads(line)
    key = (row["ledger"], row["stores"], row["buyers"], row["in_flight"])
    if row.get("statements_mode", "prepared") != "prepared":
        key = (row["ledger"] + " " + row["statements_mode"],) + key[1:]
    if row.get("pinned"):
        key = (row["ledger"] + " pinned",) + key[1:]
    cases.setdefault(key, []).append(figures(row))

def med(key, name):
    values = [f[name] for f in cases.get(key, []) if f[name] is not None]
    return st.median(values) if values else None

def show(value, form):
    return "—" if value is None else format(value, form)

order = [("postgres", 1, 1, 1), ("postgres", 1, 1, 16), ("postgres", 1, 16, 16), ("postgres", 1, 64, 16),
         ("postgres", 1, 64, 64), ("postgres unnamed", 1, 64, 16), ("postgres unnamed", 1, 64, 64),
         ("postgres", 2, 64, 16), ("postgres", 2, 64, 64), ("postgres pinned", 1, 64, 16),
         ("postgres pinned", 1, 64, 64), ("postgres pinned", 2, 64, 64), ("sqlite", 1, 64, 16),
         ("sqlite", 1, 64, 64)]
print(f"bench-ledger: {rounds} round(s), medians; {duration} s a case after 2 s of warm-up, durable purchases "
      f"(committed before the answer); pgbench TPC-B-like, scale {scale} (initialised in {init_seconds} s), "
      f"-M prepared, as many clients as purchases in flight, right after each PostgreSQL case")
print()
print("| case | ledger | stores | buyers | in flight | purchases/s | p50 ms | p99 ms | statements/purchase "
      "| commits/purchase | store CPU µs/purchase | PG CPU µs/purchase | pgbench tps (same clients) "
      "| ratio purchases/pgbench | PG CPU µs/pgbench transaction | PG CPU ratio pgbench/purchase | errors |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
for key in order:
    if key not in cases: continue
    ledger, stores, buyers, inflight = key
    errors = sum(f["errors"] for f in cases[key])
    print(f"| {buyers}/{inflight} | {ledger} | {stores} | {buyers} | {inflight} | {show(med(key, 'rate'), ',.0f')} "
          f"| {show(med(key, 'p50'), '.1f')} | {show(med(key, 'p99'), '.1f')} | {show(med(key, 'statements'), '.1f')} "
          f"| {show(med(key, 'commits'), '.2f')} | {show(med(key, 'store_cpu'), ',.0f')} "
          f"| {show(med(key, 'pg_cpu'), ',.0f')} | {show(med(key, 'tps'), ',.0f')} "
          f"| {show(med(key, 'ratio'), '.3f')}{'×' if med(key, 'ratio') is not None else ''} "
          f"| {show(med(key, 'pgbench_cpu'), ',.0f')} | {show(med(key, 'work'), '.3f')} | {errors} |")
print()
if pgss == "1":
    print("statements/purchase: every top-level statement pg_stat_statements counted in the kiosk database (COMMIT "
          "included; not the writes' BEGINs, sent as prepared statements) from the start of kiosk-bench (warm-up included) to its end, less the stores' idle "
          "background, over the `transactions` rows the case added.")
else:
    print("statements/purchase: not measured (pg_stat_statements not available on this server).")
print("commits/purchase: pg_stat_database.xact_commit of the kiosk database over the same purchases, read at least "
      f"{report_wait} s after the case, less the stores' idle background.")
idle = {}
for line in open(path):
    row = json.loads(line)
    if row["ledger"] == "postgres":
        idle[row["stores"]] = (row["idle_statements_per_s"], row["idle_commits_per_s"])
for stores, (s, c) in sorted(idle.items()):
    print(f"idle background, {stores} store(s): {show(s, '.1f')} statements/s, {show(c, '.1f')} commits/s")
differ = []
for line in open(path):
    row = json.loads(line)
    if row["ledger"] == "postgres":
        added, answered = row["ledger_rows_after"] - row["ledger_rows_before"], row["bench"].get("answered_purchases")
        if answered is not None and added != answered:
            differ.append(f"round {row['round']} {row['stores']} store(s) {row['buyers']}/{row['in_flight']}: "
                          f"{added} rows, {answered} answered")
if differ:
    print("ledger rows added differ from kiosk-bench's answered purchases (warm-up included): " + "; ".join(differ))
print("PG CPU/purchase: the postmaster and all its children across the kiosk-bench run (warm-up included), over the "
      "same purchases. Store CPU/purchase: the stores' CPU over kiosk-bench's measured calls. PG CPU/pgbench "
      "transaction: the same across the pgbench run, over the transactions it made; PG CPU ratio: that over PG "
      "CPU/purchase, the ratio of purchases/s to pgbench tps that PostgreSQL's own work allows when PostgreSQL's "
      "CPU is what runs out (on a core of its own).")
print()

k = ("postgres", 1, 64, 64)
if k in cases:
    print(f"64 buyers, 64 in flight, PostgreSQL, one store: {show(med(k, 'rate'), ',.0f')} purchases/s against "
          f"pgbench's {show(med(k, 'tps'), ',.0f')} tps with 64 clients: {show(med(k, 'ratio'), '.3f')}× "
          f"(median of the rounds' ratios)")
k = ("postgres pinned", 1, 64, 64)
if k in cases:
    print(f"PostgreSQL on a core of its own, 64 buyers, 64 in flight, one store: {show(med(k, 'rate'), ',.0f')} "
          f"purchases/s against pgbench's {show(med(k, 'tps'), ',.0f')} tps with 64 clients, pinned the same way: "
          f"{show(med(k, 'ratio'), '.3f')}× (median of the rounds' ratios)")
parts = []
for key, label in ((("postgres", 1, 64, 16), "PostgreSQL, one store"), (("postgres", 2, 64, 16), "PostgreSQL, two stores"),
                   (("sqlite", 1, 64, 16), "SQLite")):
    if key in cases: parts.append(f"{show(med(key, 'p99'), '.1f')} ms ({label})")
if parts:
    print("p99 with 64 buyers and 16 in flight: " + ", ".join(parts))
def against(a, b, name, form):
    return f"{show(med(a, name), form)} against {show(med(b, name), form)}"

def rate_ratio(a, b):  # the median of the rounds' ratios of a's purchases/s to b's
    ratios = [x["rate"] / y["rate"] for x, y in zip(cases[a], cases[b]) if y["rate"]]
    return show(st.median(ratios) if ratios else None, '.2f')

for inflight in (16, 64):
    prepared, unnamed = ("postgres", 1, 64, inflight), ("postgres unnamed", 1, 64, inflight)
    if prepared in cases and unnamed in cases:
        print(f"prepared against unnamed statements, PostgreSQL, 64 buyers, {inflight} in flight: "
              f"{against(prepared, unnamed, 'rate', ',.0f')} purchases/s: {rate_ratio(prepared, unnamed)}×; "
              f"PG CPU/purchase {against(prepared, unnamed, 'pg_cpu', ',.0f')} µs; "
              f"store CPU {against(prepared, unnamed, 'store_cpu', ',.0f')} µs")
for ledger, inflight in (("postgres", 16), ("postgres", 64), ("postgres pinned", 64)):
    one, two = (ledger, 1, 64, inflight), (ledger, 2, 64, inflight)
    if one in cases and two in cases:
        where = ", PostgreSQL on a core of its own" if ledger.endswith("pinned") else ", PostgreSQL"
        print(f"two stores against one{where}, 64 buyers, {inflight} in flight: "
              f"{against(two, one, 'rate', ',.0f')} purchases/s: {rate_ratio(two, one)}× (median of the rounds' "
              f"ratios); p99 {against(two, one, 'p99', '.1f')} ms")
PY
say "raw rows (one JSON line a case and round): $rows"
