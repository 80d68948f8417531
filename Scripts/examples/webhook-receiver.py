#!/usr/bin/env python3
"""A small Kiosk webhook receiver: checks each POST's Kiosk-Signature, drops
events it has already seen (by event id), prints one JSON line per event.

    python3 Scripts/examples/webhook-receiver.py --port 8088 --secret-file hook.secret
    kiosk-store webhook add http://127.0.0.1:8088/kiosk --secret-file hook.secret --data-dir …

Kiosk-Signature is `t=<ms since 1970>,v1=<hex HMAC-SHA256(secret, "<t>." + body)>`;
the secret is the file's bytes without a trailing newline, as `webhook add`
reads it. Answer 2xx only once the event is safely handled: anything else (or
no answer within 10 s) is retried with backoff, in order per account. The
body's `signed_event` (base64 of a kiosk.store.v1.SignedEvent, Ed25519 over
"KIOSK-EVENT-V1\\n" + event) can also be checked offline with the store's
PublicKeys; this example checks only the HMAC (Python's standard library has
no Ed25519).
"""
import argparse
import hashlib
import hmac
import json
import signal
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

TOLERANCE_MS = 5 * 60 * 1000


def valid(header, body, secret, now_ms):
    parts = dict(p.split("=", 1) for p in header.split(",") if "=" in p)
    try:
        t = int(parts.get("t", ""))
    except ValueError:
        return False
    if abs(now_ms - t) > TOLERANCE_MS:
        return False  # an old request replayed
    expected = hmac.new(secret, f"{t}.".encode() + body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, parts.get("v1", ""))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8088)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--secret-file", required=True)
    args = parser.parse_args()
    # Stop on SIGTERM even when started by a process that ignores it (the disposition is inherited).
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    secret = open(args.secret_file, "rb").read().rstrip(b"\r\n")
    seen = set()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            if not valid(self.headers.get("Kiosk-Signature", ""), body, secret, int(time.time() * 1000)):
                self.send_response(401)
                self.end_headers()
                return
            event = json.loads(body)
            if event["event_id"] not in seen:  # delivered again after a lost answer: handled once
                seen.add(event["event_id"])
                event.pop("signed_event", None)
                print(json.dumps(event, sort_keys=True), flush=True)
            self.send_response(204)
            self.end_headers()

        def log_message(self, *_):
            pass

    server = ThreadingHTTPServer((args.host, args.port), Handler)
    print(f"listening on http://{args.host}:{server.server_port}/", file=sys.stderr, flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
