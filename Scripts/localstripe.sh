#!/usr/bin/env bash
# A second opinion on the Stripe processor: localstripe (PyPI), an independent Stripe emulator. Installs it into a
# virtual environment in a temporary directory, starts it on a free port of 127.0.0.1, runs LocalStripeTests against
# it (KIOSK_LOCALSTRIPE_URL), and stops it. Where localstripe does not behave as Stripe does is in docs/payments.md.
#   Scripts/localstripe.sh
set -euo pipefail
cd "$(dirname "$0")/.."
./Scripts/setup.sh
dir=$(mktemp -d)
pid=
cleanup() {
  [ -n "$pid" ] && kill "$pid" 2> /dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT
python3 -m venv "$dir/venv"
# The version the docs' notes and the form patch below were written against.
"$dir/venv/bin/pip" install --quiet localstripe==1.15.10
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
# Its own command listens on every interface; this serves its app on 127.0.0.1 only, from an empty store (it keeps a
# copy of its store in /tmp/localstripe.pickle after every POST: turned off here, so a run neither leaves that file nor
# overwrites one of the developer's). localstripe refuses the two
# automatic_payment_methods fields Kiosk sends to confirm without redirects ("Unexpected automatic_payment_methods"),
# which mean nothing to its card-only model, and the cancellation_reason Kiosk gives when it cancels a PaymentIntent
# ("Unexpected cancellation_reason"): they are left out before it reads a form.
"$dir/venv/bin/python" -c '
import sys
from aiohttp import web
from multidict import MultiDict
import localstripe.server as server
import localstripe.resources as resources
resources.Store.dump_to_disk = lambda self: None
unflatten = server.unflatten_data
server.unflatten_data = lambda form: unflatten(
    MultiDict((k, v) for k, v in form.items()
              if not k.startswith("automatic_payment_methods[") and k != "cancellation_reason"))
web.run_app(server.app, host="127.0.0.1", port=int(sys.argv[1]), print=None)' "$port" > "$dir/localstripe.log" 2>&1 &
pid=$!
# Ready when it answers (at most 30 s).
ready=0
for _ in $(seq 300); do
  curl -s -o /dev/null "http://127.0.0.1:$port/v1/customers" -u sk_test_ready: && { ready=1; break; }
  kill -0 "$pid" 2> /dev/null || { cat "$dir/localstripe.log" >&2; exit 1; }
  sleep 0.1
done
[ "$ready" = 1 ] || { echo "localstripe did not answer on 127.0.0.1:$port within 30 s" >&2; cat "$dir/localstripe.log" >&2; exit 1; }
echo "localstripe: $("$dir/venv/bin/pip" show localstripe | sed -n 's/^Version: //p') on 127.0.0.1:$port"
swift build --build-tests > /dev/null
KIOSK_LOCALSTRIPE_URL="http://127.0.0.1:$port" swift test --skip-build --filter LocalStripeTests
