# Sourced by demo.sh and bench-memory.sh: starts kiosk-store and kiosk-content
# from $bin on 127.0.0.1 (ephemeral ports) in a temporary directory $work,
# and stops them and removes $work when the calling script exits.
#   start_store                  → $store (host:port), $store_pid
#   new_token                    prints the token of a new store account
#   start_content TOKEN          → $content (host:port), $content_pid; serves $work/content
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

start_store() {
  "$bin/kiosk-store" serve --data-dir "$work/store" --catalog Scripts/examples/catalog.json \
    --host 127.0.0.1 --port 0 --log-level warning > "$work/store.out" &
  store_pid=$!
  wait_for "$work/store.out"
  store=$(sed -n 's/^kiosk-store listening on \([^ ]*\).*/\1/p' "$work/store.out")
}

new_token() { "$bin/kiosk-store" account create --data-dir "$work/store" --json | sed 's/.*"token":"\([^"]*\)".*/\1/'; }

start_content() {
  cp Scripts/examples/content/manifest.json "$work/content/manifest.json"
  "$bin/kiosk-content" serve --content-dir "$work/content" --store "$store" --store-token "$1" \
    --host 127.0.0.1 --port 0 --log-level warning > "$work/content.out" &
  content_pid=$!
  wait_for "$work/content.out"
  content=$(sed -n 's/^kiosk-content listening on \([^ ]*\).*/\1/p' "$work/content.out")
}
