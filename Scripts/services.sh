# Sourced by demo.sh and bench-memory.sh: starts kiosk-store and kiosk-content
# from $bin on 127.0.0.1 (ephemeral ports) in a temporary directory $work,
# both over TLS with a development CA ($work/tls/ca.pem, exported as
# KIOSK_TLS_CA for the kiosk command; KIOSK_TLS=0 before sourcing: plaintext),
# and stops them and removes $work when the calling script exits.
#   start_store [ARGS…]          → $store (host:port), $store_pid (ARGS go to `kiosk-store serve`)
#   new_token                    prints the token of a new store account
#   new_credential ROLE          prints a new service credential (content or admin)
#   start_content CREDENTIAL     → $content (host:port), $content_pid; serves $work/content
#                                  (manifest from Scripts/examples/content; the caller writes books/swift-book.txt first)
work=$(mktemp -d)
store_pid=""; content_pid=""
cleanup() {
  [ -n "$content_pid" ] && kill "$content_pid" 2>/dev/null || true
  [ -n "$store_pid" ] && kill "$store_pid" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
wait_for() { for _ in $(seq 1 200); do grep -q listening "$1" 2>/dev/null && return 0; sleep 0.05; done; cat "$1" >&2; return 1; }

tls="$work/tls"
store_tls=(); content_tls=()
make_certificates() {
  if [ "${KIOSK_TLS:-1}" = 0 ]; then unset KIOSK_TLS_CA; return; fi
  [ -f "$tls/server.pem" ] || "$bin/kiosk-store" tls create-dev --out "$tls" > /dev/null
  export KIOSK_TLS_CA="$tls/ca.pem"
  store_tls=(--tls-cert "$tls/server.pem" --tls-key "$tls/server-key.pem")
  content_tls=(--store-ca "$tls/ca.pem" --tls-cert "$tls/server.pem" --tls-key "$tls/server-key.pem")
}

start_store() {
  make_certificates
  "$bin/kiosk-store" serve --data-dir "$work/store" --catalog Scripts/examples/catalog.json \
    "${store_tls[@]}" --host 127.0.0.1 --port 0 --log-level warning "$@" > "$work/store.out" &
  store_pid=$!
  wait_for "$work/store.out"
  store=$(sed -n 's/^kiosk-store listening on \([^ ]*\).*/\1/p' "$work/store.out")
}

new_token() { "$bin/kiosk-store" account create --data-dir "$work/store" --json | sed 's/.*"token":"\([^"]*\)".*/\1/'; }
new_credential() { "$bin/kiosk-store" service create --role "$1" --data-dir "$work/store" --json | sed 's/.*"credential":"\([^"]*\)".*/\1/'; }

start_content() {
  # The content service's credential, by the environment (a command line is every user's to read); kiosk-bench
  # shows it for the service's Stats.
  export KIOSK_STORE_CREDENTIAL="$1"
  cp Scripts/examples/content/manifest.json "$work/content/manifest.json"
  make_certificates
  KIOSK_STORE_CREDENTIAL="$1" "$bin/kiosk-content" serve --content-dir "$work/content" --store "$store" \
    "${content_tls[@]}" --host 127.0.0.1 --port 0 --log-level warning > "$work/content.out" &
  content_pid=$!
  wait_for "$work/content.out"
  content=$(sed -n 's/^kiosk-content listening on \([^ ]*\).*/\1/p' "$work/content.out")
}
