#!/usr/bin/env python3
"""Writes a copy of the bare SwiftNIO reference with TLS added: a TLS ceiling for bench.sh.

    Benchmarks/reference-tls.py REFERENCE_DIR OUT_DIR

REFERENCE_DIR is ../shared/reference/nio-verify (left untouched); OUT_DIR receives its
Package.swift and Sources, changed in three places and nowhere else:
  - Package.swift: swift-nio-ssl (the version Kiosk uses) for both executables;
  - nio-verify-server: a NIOSSLServerHandler first in each connection's pipeline when
    NIO_VERIFY_TLS_CERT and NIO_VERIFY_TLS_KEY name PEM files (Kiosk's TLS settings:
    NIOSSL's defaults, TLS 1.2 at least);
  - nio-verify-load: a NIOSSLClientHandler first in each connection's pipeline when
    NIO_VERIFY_TLS_CA names the PEM file of the roots to trust.
Without those variables the programs are the reference, byte for byte on the wire.
Every patch must apply exactly once, or the script fails: a changed reference is reported,
never half-patched. Rewrites a file of OUT_DIR only when its content would change (the build
stays cached), removes source files the reference no longer has, and takes the reference's
Package.resolved whenever the copy's does not pin the same versions (SwiftPM then adds
swift-nio-ssl's own pins to it).
"""
import json
import pathlib
import sys

reference, out = map(pathlib.Path, sys.argv[1:3])

server_context = '''
import NIOSSL

/// bench.sh's TLS ceiling (Benchmarks/reference-tls.py): the same server behind NIOSSL.
let tlsServerContext: NIOSSLContext? = {
  let env = ProcessInfo.processInfo.environment
  guard let cert = env["NIO_VERIFY_TLS_CERT"], let key = env["NIO_VERIFY_TLS_KEY"] else { return nil }
  var configuration = TLSConfiguration.makeServerConfiguration(
    certificateChain: try! NIOSSLCertificate.fromPEMFile(cert).map { .certificate($0) },
    privateKey: .privateKey(try! NIOSSLPrivateKey(file: key, format: .pem)))
  configuration.minimumTLSVersion = .tlsv12
  return try! NIOSSLContext(configuration: configuration)
}()
'''

client_context = '''
import NIOSSL

/// bench.sh's TLS ceiling (Benchmarks/reference-tls.py): the same load generator over NIOSSL.
let tlsClientContext: NIOSSLContext? = {
  guard let ca = ProcessInfo.processInfo.environment["NIO_VERIFY_TLS_CA"] else { return nil }
  var configuration = TLSConfiguration.makeClientConfiguration()
  configuration.minimumTLSVersion = .tlsv12
  configuration.trustRoots = .file(ca)
  return try! NIOSSLContext(configuration: configuration)
}()
'''

sync_line = "let sync = channel.pipeline.syncOperations\n"
nio_product = '.product(name: "NIOPosix", package: "swift-nio"),\n'
patches = {
    "Package.swift": [
        ('.package(url: "https://github.com/apple/swift-nio.git", exact: "2.101.2"),\n',
         '.package(url: "https://github.com/apple/swift-nio.git", exact: "2.101.2"),\n'
         '    .package(url: "https://github.com/apple/swift-nio-ssl.git", exact: "2.37.6"),\n', 1),
        (nio_product, nio_product + '        .product(name: "NIOSSL", package: "swift-nio-ssl"),\n', 2),
    ],
    "Sources/nio-verify-server/main.swift": [
        ("import ReceiptCore\n", "import ReceiptCore\n" + server_context, 1),
        # Built before the server listens: a certificate or key that cannot be used stops it at start.
        ("    let key = try KeyMaterial(seedHex: keySeed)\n",
         "    _ = tlsServerContext\n    let key = try KeyMaterial(seedHex: keySeed)\n", 1),
        (sync_line, sync_line +
         "          if let tlsServerContext { try sync.addHandler(NIOSSLServerHandler(context: tlsServerContext)) }\n", 1),
    ],
    "Sources/nio-verify-load/main.swift": [
        ("import SwiftProtobuf\n", "import SwiftProtobuf\n" + client_context, 1),
        (sync_line, sync_line +
         "            if let tlsClientContext { try sync.addHandler(NIOSSLClientHandler(context: tlsClientContext, serverHostname: nil)) }\n", 1),
    ],
}

files = {path: path.read_text() for path in (reference / "Sources").rglob("*") if path.is_file()}
files[reference / "Package.swift"] = (reference / "Package.swift").read_text()
for name, edits in patches.items():
    path = reference / name
    text = files[path]
    for old, new, count in edits:
        found = text.count(old)
        if found != count:
            sys.exit(f"reference-tls: {name}: expected {count} of {old.strip()!r}, found {found}")
        text = text.replace(old, new)
    files[path] = text

for path, text in files.items():
    target = out / path.relative_to(reference)
    if target.exists() and target.read_text() == text:
        continue
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)
wanted = {out / path.relative_to(reference) for path in files}
for target in (out / "Sources").rglob("*"):
    if target.is_file() and target not in wanted:
        target.unlink()


def pins(path):
    if not path.exists():
        return None
    return {(pin["identity"], pin["state"].get("version"), pin["state"].get("revision"))
            for pin in json.loads(path.read_text()).get("pins", [])}


resolved, copied = reference / "Package.resolved", out / "Package.resolved"
ours = pins(copied)
if resolved.exists() and (ours is None or not pins(resolved) <= ours):
    copied.write_text(resolved.read_text())
