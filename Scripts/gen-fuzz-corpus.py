#!/usr/bin/env python3
"""Writes the seed corpus of the kiosk-fuzz target into Scripts/fuzz-corpus/.

Each seed is what a server reads from a client (the preface, then frames),
except where the name says otherwise. Protobuf payloads are encoded by hand
from Protos/kiosk/*/v1/*.proto field numbers, so this needs nothing but
Python 3's standard library. Frame layout: docs/PROTOCOL.md.

Run it again after changing a seed; it only rewrites the seeds it knows
(inputs the fuzzer found, kept as crash-*/regression-* files, stay).
"""
import os
import struct
import zlib

PREFACE = b"KIOSK/1\n"
HEADERS, MESSAGE, TRAILERS, CANCEL, PING, PONG, GOAWAY, WINDOW_UPDATE = range(1, 9)
END_STREAM, COMPRESSED = 0x01, 0x02


# --- protobuf, by hand -------------------------------------------------------

def varint(n):
    n &= (1 << 64) - 1  # negative int64s are ten bytes, as protobuf writes them
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def field_varint(number, value):
    return varint(number << 3 | 0) + varint(value) if value else b""


def field_bytes(number, value):
    if isinstance(value, str):
        value = value.encode()
    return varint(number << 3 | 2) + varint(len(value)) + value if value else b""


def metadata(key, value="", binary=b""):
    # kiosk.rpc.v1.Metadata{key=1, value=2, binary_value=3}
    return field_bytes(1, key) + field_bytes(2, value) + field_bytes(3, binary)


def call_headers(method, timeout_ms=0, entries=()):
    # kiosk.rpc.v1.CallHeaders{method=1, timeout_ms=2, metadata=3}
    return field_bytes(1, method) + field_varint(2, timeout_ms) + b"".join(field_bytes(3, e) for e in entries)


def call_status(code, message="", entries=()):
    # kiosk.rpc.v1.CallStatus{code=1, message=2, metadata=3}
    return field_varint(1, code) + field_bytes(2, message) + b"".join(field_bytes(3, e) for e in entries)


def receipt_payload():
    # kiosk.receipt.v1.ReceiptPayload
    return (field_bytes(1, "tx-0001") + field_bytes(2, "tx-0001") + field_bytes(3, "com.example.gems.100")
            + field_varint(4, 1) + field_varint(5, 2) + field_varint(6, 1_700_000_000_000)
            + field_varint(7, 0) + field_bytes(8, "acct-42") + field_bytes(9, "com.example.app")
            + field_varint(10, 2) + field_bytes(11, "ed25519-fuzz"))


def signed_receipt():
    # kiosk.receipt.v1.SignedReceipt{payload=1, signature=2, key_id=3}
    return field_bytes(1, receipt_payload()) + field_bytes(2, bytes(range(64))) + field_bytes(3, "ed25519-fuzz")


# --- frames ------------------------------------------------------------------

def frame(type_, call_id, payload=b"", flags=0):
    return struct.pack(">IBBI", 6 + len(payload), type_, flags, call_id) + payload


def header_only(length, type_=MESSAGE, flags=0, call_id=1):
    return struct.pack(">IBBI", length, type_, flags, call_id)


HEALTH = "/kiosk.rpc.v1.Health/Check"

SEEDS = {
    # The byte-for-byte example of docs/PROTOCOL.md.
    "health-check": PREFACE + frame(HEADERS, 1, call_headers(HEALTH)) + frame(MESSAGE, 1, b"", END_STREAM),
    "health-check-service": PREFACE + frame(HEADERS, 1, call_headers(HEALTH, timeout_ms=5000))
        + frame(MESSAGE, 1, field_bytes(1, "kiosk.rpc.v1.Health"), END_STREAM),
    "purchase-with-metadata": PREFACE + frame(HEADERS, 3, call_headers(
            "/kiosk.store.v1.Store/Purchase", timeout_ms=30000,
            entries=[metadata("authorization", "Bearer  tok-123 "), metadata("idempotency-key", "k-1"),
                     metadata("trace-bin", binary=b"\x00\x01\xff")]))
        + frame(MESSAGE, 3, field_bytes(1, "com.example.gems.100") + field_varint(2, 2)
                + field_bytes(3, "test-card:4242424242424242"), END_STREAM),
    "verify-receipt-compressed": PREFACE + frame(HEADERS, 5, call_headers("/kiosk.store.v1.Store/VerifyReceipt"))
        + frame(MESSAGE, 5, zlib.compress(field_bytes(1, signed_receipt())), END_STREAM | COMPRESSED),
    "download-request": PREFACE + frame(HEADERS, 7, call_headers("/kiosk.content.v1.Content/Download"))
        + frame(MESSAGE, 7, field_bytes(1, signed_receipt()) + field_bytes(2, "com.example.book")
                + field_varint(3, 1 << 20), END_STREAM),
    "signed-receipt-message": PREFACE + frame(MESSAGE, 9, signed_receipt(), END_STREAM),
    "ping-pong": PREFACE + frame(PING, 0, field_varint(1, 0x0102030405060708))
        + frame(PONG, 0, field_varint(1, 0xFFFFFFFFFFFFFFFF)),
    "window-update": PREFACE + frame(WINDOW_UPDATE, 1, field_varint(1, 65536)) + frame(WINDOW_UPDATE, 0, b""),
    "goaway": PREFACE + frame(GOAWAY, 0, field_varint(1, 7) + field_varint(2, 13) + field_bytes(3, "protocol breach")),
    "trailers-cancel": PREFACE + frame(HEADERS, 1, call_headers(HEALTH)) + frame(CANCEL, 1)
        + frame(TRAILERS, 1, call_status(3, "bad input", [metadata("retry-after", "1")])),
    "unknown-type": PREFACE + frame(0x42, 1, b"\x08\x01", 0xFF) + frame(PING, 0, field_varint(1, 9)),
    # A zlib stream cut in half, and bytes after a complete one.
    "compressed-corrupt": PREFACE + frame(MESSAGE, 1, zlib.compress(b"x" * 300)[:20], COMPRESSED)
        + frame(MESSAGE, 1, zlib.compress(b"\x0a\x03abc") + b"junk", COMPRESSED),
    "truncated-frame": PREFACE + header_only(6 + 100) + b"only ten b",
    "oversized-length": PREFACE + header_only(0x8000_0000),
    "length-too-short": PREFACE + header_only(3),
    "bad-preface": b"GET / HTTP/1.1\r\nHost: kiosk\r\n\r\n",
    "partial-preface": PREFACE[:5],
    # Invalid UTF-8 in a string field.
    "headers-invalid-utf8": PREFACE + frame(HEADERS, 1, field_bytes(1, b"/kiosk\xff\xfe/Check")),
    # What a client reads: no preface, the server's answer to the health check.
    "server-answer-no-preface": frame(MESSAGE, 1, field_varint(1, 1)) + frame(TRAILERS, 1, b""),
}


def main():
    directory = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fuzz-corpus")
    os.makedirs(directory, exist_ok=True)
    for name, data in sorted(SEEDS.items()):
        with open(os.path.join(directory, name), "wb") as f:
            f.write(data)
    print(f"wrote {len(SEEDS)} seeds to {directory}")


if __name__ == "__main__":
    main()
