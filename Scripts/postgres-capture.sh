#!/usr/bin/env bash
# What someone on the path between a store and its PostgreSQL sees. Starts a throwaway cluster
# (Scripts/postgres.sh, TLS with a CA of its own), then twice — a store given --database-ca (TLS, verified) and,
# as the control, one on plaintext — captures the loopback traffic to the database (tcpdump) while an account is
# created and `kiosk buy credits.5` is answered, and searches each capture for the purchase's product id, its
# transaction id and the account token's hash (raw and hex). Fails unless the TLS capture holds none of them and
# the plaintext capture holds them all (so the search can see what it looks for).
#     Scripts/postgres-capture.sh          (needs root or CAP_NET_RAW for tcpdump; installs tcpdump when missing)
set -euo pipefail
cd "$(dirname "$0")/.."
./Scripts/setup.sh
if ! command -v tcpdump > /dev/null 2>&1; then
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y tcpdump > /dev/null
fi
swift build --product kiosk-store > /dev/null
swift build --product kiosk > /dev/null
bin=$(swift build --show-bin-path)
KIOSK_TLS=0
. Scripts/lib.sh
read -r url pgdir _ < <(./Scripts/postgres.sh start $$)
pgport=$(echo "$url" | sed -E 's#.*:([0-9]+)/.*#\1#')
failed=0
for mode in tls plaintext; do
  ./Scripts/postgres.sh createdb "$url" "kiosk_$mode"
  # The cluster's certificate names localhost (Scripts/postgres.sh).
  ledger=(--database "$(echo "${url%/postgres}/kiosk_$mode" | sed 's/@127\.0\.0\.1:/@localhost:/')")
  [ "$mode" = tls ] && ledger+=(--database-ca "$pgdir/tls/ca.pem")
  tcpdump -i lo --immediate-mode -U -s 0 -w "$work/$mode.pcap" "tcp port $pgport" 2> "$work/$mode.tcpdump" &
  pid[tcpdump]=$!
  for _ in $(seq 1 100); do grep -q "listening on" "$work/$mode.tcpdump" && break; sleep 0.05; done
  token=$(new_token "$mode" "${ledger[@]}")
  serve_store "$mode" "${ledger[@]}"
  KIOSK_STORE=${address[$mode]} KIOSK_TOKEN=$token KIOSK_STATE_DIR="$work/$mode-app" \
    "$bin/kiosk" buy credits.5 --json > "$work/$mode.buy"
  stop_service "$mode"
  # Every packet is written before tcpdump stops (immediate mode: none waits in its ring): SIGUSR1 makes it
  # report its count; two equal reports in a row, and the capture is whole.
  last=-1
  for _ in $(seq 1 50); do
    kill -USR1 "${pid[tcpdump]}"
    sleep 0.2
    captured=$(grep -oE "[0-9]+ packets captured" "$work/$mode.tcpdump" | tail -1 | cut -d' ' -f1)
    [ "${captured:-0}" = "$last" ] && break
    last=${captured:-0}
  done
  stop_service tcpdump INT
  python3 - "$mode" "$work/$mode.pcap" "$work/$mode.buy" "$token" <<'PY' || failed=1
import hashlib, json, sys
mode, capture, bought, token = sys.argv[1:5]
data = open(capture, "rb").read()
transaction = json.load(open(bought))["transaction_id"]
digest = hashlib.sha256(token.encode()).digest()
needles = {"product id credits.5": b"credits.5", f"transaction id {transaction}": transaction.encode(),
           "token hash (raw)": digest, "token hash (hex)": digest.hex().encode()}
found = [name for name, needle in needles.items() if needle in data]
print(f"postgres-capture: {mode}: {len(data):,} bytes captured; found: {', '.join(found) or 'none of them'}")
if mode == "tls" and found:
    print("postgres-capture: FAILED: the TLS capture shows the ledger's contents"); sys.exit(1)
if mode == "plaintext" and len(found) < 3:
    print("postgres-capture: FAILED: the plaintext control does not show what the search looks for"); sys.exit(1)
PY
done
[ "$failed" = 0 ] && echo "postgres-capture: OK — over TLS the capture holds no product id, transaction id or token hash"
exit "$failed"
