#!/usr/bin/env bash
# A throwaway PostgreSQL for tests and scripts: a cluster initialised in a
# temporary directory, listening on a free port of 127.0.0.1 only, stopped and
# removed when the process it watches exits (or by `stop`).
#
#   Scripts/postgres.sh start [WATCH_PID]   prints: URL DIR BINDIR
#       URL     postgres://kiosk@127.0.0.1:PORT/postgres (trust authentication, loopback only; TLS offered with a
#               certificate for the name `localhost` only, signed by a CA of its own: DIR/tls/ca.pem, for
#               --database-ca with a URL whose host is localhost)
#       WATCH_PID  default: the caller's parent; when it exits the cluster is stopped and removed
#   Scripts/postgres.sh createdb URL NAME   creates database NAME on the cluster of URL
#   Scripts/postgres.sh stop DIR            stops the cluster in DIR and removes DIR
#   Scripts/postgres.sh restart DIR         restarts the cluster in DIR (fast: every session ends), same options
#   Scripts/postgres.sh install             installs the server when missing; prints its bin directory
#
# Installs Debian's `postgresql` when no server is installed. PostgreSQL refuses
# to run as root: as root, the cluster runs as the `postgres` user.
set -euo pipefail

bindir() {
  local dir
  dir=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1 || true)
  if [ -z "$dir" ] || [ ! -x "$dir/pg_ctl" ]; then
    local sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y postgresql > /dev/null
    dir=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
  fi
  echo "$dir"
}

# Runs a PostgreSQL program as the cluster's owner.
as_owner() {
  if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

case "${1:-}" in
  start)
    watch=${2:-$PPID}
    # The server and the watchdog outlive this script: they must not keep the caller's descriptors
    # open (a caller waiting for this script's exit through one, as Foundation's Process does, would wait for ever).
    for fd in $(ls /proc/$$/fd); do [ "$fd" -gt 2 ] && eval "exec $fd>&-" 2>/dev/null || true; done
    bin=$(bindir)
    dir=$(mktemp -d "${TMPDIR:-/tmp}/kiosk-postgres.XXXXXX")
    chmod 755 "$dir"
    [ "$(id -u)" -eq 0 ] && chown postgres "$dir"
    as_owner "$bin/initdb" -D "$dir/data" -U kiosk -A trust --no-sync > "$dir/initdb.log" 2>&1 \
      || { cat "$dir/initdb.log" >&2; exit 1; }
    # TLS: a CA of the cluster's own, and a server certificate that names `localhost` and nothing else (no IP
    # address: a client that connects to 127.0.0.1 must refuse it, so host-name verification is observable).
    tls="$dir/tls"
    mkdir -p "$tls"
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 7 -subj "/CN=kiosk test PostgreSQL CA" \
      -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
      -keyout "$tls/ca-key.pem" -out "$tls/ca.pem" > /dev/null 2>&1
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj "/CN=localhost" \
      -keyout "$tls/server-key.pem" -out "$tls/server.csr" > /dev/null 2>&1
    printf 'subjectAltName=DNS:localhost\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage=serverAuth\n' \
      > "$tls/server.ext"
    openssl x509 -req -in "$tls/server.csr" -CA "$tls/ca.pem" -CAkey "$tls/ca-key.pem" -CAcreateserial -days 7 \
      -extfile "$tls/server.ext" -out "$tls/server.pem" > /dev/null 2>&1
    chmod 600 "$tls/server-key.pem" "$tls/ca-key.pem"
    chmod 644 "$tls/ca.pem" "$tls/server.pem"
    [ "$(id -u)" -eq 0 ] && chown -R postgres "$tls"
    # A free port: bind 0 and let go; pg_ctl -w fails clearly if another process took it meanwhile.
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    as_owner "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
      -o "-p $port -k $dir -c listen_addresses=127.0.0.1 -c max_connections=200 -c ssl=on -c ssl_cert_file=$tls/server.pem -c ssl_key_file=$tls/server-key.pem" start > /dev/null \
      || { cat "$dir/server.log" >&2; exit 1; }
    # The watchdog: stop and remove the cluster once the watched process is gone.
    setsid bash -c "while kill -0 $watch 2>/dev/null; do sleep 1; done
      $( [ "$(id -u)" -eq 0 ] && echo "runuser -u postgres --" ) '$bin/pg_ctl' -D '$dir/data' -m immediate stop > /dev/null 2>&1
      rm -rf '$dir'" > /dev/null 2>&1 < /dev/null &
    echo "postgres://kiosk@127.0.0.1:$port/postgres $dir $bin"
    ;;
  createdb)
    url=$2; name=$3
    port=$(echo "$url" | sed -E 's#.*:([0-9]+)/.*#\1#')
    "$(bindir)/psql" -X -q -h 127.0.0.1 -p "$port" -U kiosk -d postgres -v ON_ERROR_STOP=1 -c "CREATE DATABASE \"$name\"" > /dev/null
    ;;
  install)
    bindir
    ;;
  restart)
    dir=$2
    # The restarted server outlives this script: it must not keep the caller's descriptors open (see start).
    for fd in $(ls /proc/$$/fd); do [ "$fd" -gt 2 ] && eval "exec $fd>&-" 2>/dev/null || true; done
    as_owner "$(bindir)/pg_ctl" -D "$dir/data" -l "$dir/server.log" -m fast -w -t 60 restart > /dev/null 2>&1 < /dev/null
    ;;
  stop)
    dir=$2
    as_owner "$(bindir)/pg_ctl" -D "$dir/data" -m fast stop > /dev/null 2>&1 || true
    rm -rf "$dir"
    ;;
  *)
    sed -n '2,15p' "$0" >&2
    exit 2
    ;;
esac
