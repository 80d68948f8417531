# Sourced by the scripts that run Kiosk's services (Scripts/demo.sh, Scripts/scale-out.sh, Scripts/fsync-check.sh,
# Benchmarks/*.sh): the one way they start kiosk-store and kiosk-content from $bin on 127.0.0.1, in a temporary
# directory $work, and stop them (and remove $work) when the calling script exits. Before sourcing, set `bin` (the
# build's bin directory) and, for plaintext, KIOSK_TLS=0 (default: TLS with a development CA, $work/tls/ca.pem, exported
# as KIOSK_TLS_CA for the `kiosk` command).
#
#   serve_store NAME [ARGS…]        a store on the data dir $work/NAME → ${address[NAME]}, ${pid[NAME]}
#                                    (ARGS go to `kiosk-store serve`; $serve_port picks the port, default 0: any free one)
#   serve_content NAME STORES CREDENTIAL [ARGS…]
#                                    a content service of $work/content following STORES (host:port[,host:port]),
#                                    with the service CREDENTIAL (by the environment, never the command line)
#   stop_service NAME [SIGNAL]      signals NAME (default TERM) and waits for it to exit
#   new_token [STORE] [ARGS…]       prints the token of a new account of store STORE (default `store`)
#   new_credential ROLE [STORE] [ARGS…]   prints a new service credential (content or admin)
#   start_store [ARGS…]             serve_store store: → $store (host:port), $store_pid
#   start_content CREDENTIAL        serve_content content "$store": → $content, $content_pid (the manifest from
#                                    Scripts/examples/content; the caller writes $work/content/books/swift-book.txt first)
# Each service's standard output goes to $work/NAME.out (its "listening" banner) and standard error to $work/NAME.err.
# A caller's own long-lived processes go into ${pid[NAME]} too (not a trap of its own, which would replace this one's).
work=$(mktemp -d)
declare -A address=() pid=()
lib_cleanup() {
  local name
  for name in "${!pid[@]}"; do kill "${pid[$name]}" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap lib_cleanup EXIT
catalog=${catalog:-Scripts/examples/catalog.json}

tls="$work/tls"
store_tls=(); content_tls=()
make_certificates() {
  if [ "${KIOSK_TLS:-1}" = 0 ]; then unset KIOSK_TLS_CA; return; fi
  [ -f "$tls/server.pem" ] || "$bin/kiosk-store" tls create-dev --out "$tls" > /dev/null
  export KIOSK_TLS_CA="$tls/ca.pem"
  store_tls=(--tls-cert "$tls/server.pem" --tls-key "$tls/server-key.pem")
  content_tls=(--store-ca "$tls/ca.pem" --tls-cert "$tls/server.pem" --tls-key "$tls/server-key.pem")
}

# Waits for NAME's banner ("kiosk-… listening on HOST:PORT …") and sets ${address[NAME]}.
await_banner() {
  local name=$1 _
  for _ in $(seq 1 600); do
    grep -q "listening on" "$work/$name.out" 2>/dev/null && break
    kill -0 "${pid[$name]}" 2>/dev/null || break   # it exited: no banner is coming
    sleep 0.05
  done
  if ! grep -q "listening on" "$work/$name.out" 2>/dev/null; then
    echo "$name did not start:" >&2; cat "$work/$name.out" "$work/$name.err" >&2 2>/dev/null; exit 1
  fi
  address[$name]=$(sed -n 's/^[a-z-]* listening on \([^ ]*\).*/\1/p' "$work/$name.out" | head -1)
  [ -n "${address[$name]}" ] || { echo "$name printed no address:" >&2; cat "$work/$name.out" >&2; exit 1; }
}

serve_store() {
  local name=$1; shift
  make_certificates
  "$bin/kiosk-store" serve --data-dir "$work/$name" --catalog "$catalog" "${store_tls[@]}" \
    --host 127.0.0.1 --port "${serve_port:-0}" --log-level warning "$@" > "$work/$name.out" 2> "$work/$name.err" &
  pid[$name]=$!
  await_banner "$name"
}

serve_content() {
  local name=$1 stores=$2 credential=$3; shift 3
  make_certificates
  mkdir -p "$work/content"
  [ -f "$work/content/manifest.json" ] || cp Scripts/examples/content/manifest.json "$work/content/manifest.json"
  KIOSK_STORE_CREDENTIAL="$credential" "$bin/kiosk-content" serve --content-dir "$work/content" --store "$stores" \
    "${content_tls[@]}" --host 127.0.0.1 --port "${serve_port:-0}" --log-level warning "$@" \
    > "$work/$name.out" 2> "$work/$name.err" &
  pid[$name]=$!
  await_banner "$name"
}

stop_service() {
  local name=$1 signal=${2:-TERM}
  kill -s "$signal" "${pid[$name]}" 2>/dev/null || true
  wait "${pid[$name]}" 2>/dev/null || true
  unset "pid[$name]"
}

new_token() {
  local name=${1:-store}; [ $# -gt 0 ] && shift
  "$bin/kiosk-store" account create --data-dir "$work/$name" "$@" --json | sed 's/.*"token":"\([^"]*\)".*/\1/'
}

new_credential() {
  local role=$1 name=${2:-store}; shift; [ $# -gt 0 ] && shift
  "$bin/kiosk-store" service create --role "$role" --data-dir "$work/$name" "$@" --json \
    | sed 's/.*"credential":"\([^"]*\)".*/\1/'
}

start_store() {
  serve_store store "$@"
  store=${address[store]}; store_pid=${pid[store]}
}

start_content() {
  # kiosk-bench reads the credential from the environment too, for the service's Stats.
  export KIOSK_STORE_CREDENTIAL="$1"
  serve_content content "$store" "$1"
  content=${address[content]}; content_pid=${pid[content]}
}
