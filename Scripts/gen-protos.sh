#!/usr/bin/env bash
# Regenerates the committed protoc-c output in Sources/KioskProto from Protos/.
# Needs protoc-c (Debian: protobuf-c-compiler); Scripts/setup.sh installs it.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v protoc-c >/dev/null || { echo "gen-protos: protoc-c not found; run Scripts/setup.sh" >&2; exit 1; }
out=Sources/KioskProto
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
protos=$(cd Protos && find . -name '*.proto' | sed 's|^\./||' | LC_ALL=C sort)
(cd Protos && protoc-c --c_out="$tmp" $protos)
# SwiftPM wants public headers under include/ (it makes one module of all of
# them, an umbrella directory) and sources beside it; the generated .c files
# include "kiosk/rpc/v1/rpc.pb-c.h", which include/ provides.
rm -rf "$out/include/kiosk" "$out/kiosk"
for f in $(cd "$tmp" && find . -name '*.pb-c.h' | sed 's|^\./||' | LC_ALL=C sort); do
  mkdir -p "$out/include/$(dirname "$f")"; cp "$tmp/$f" "$out/include/$f"
done
for f in $(cd "$tmp" && find . -name '*.pb-c.c' | sed 's|^\./||' | LC_ALL=C sort); do
  mkdir -p "$out/$(dirname "$f")"; cp "$tmp/$f" "$out/$f"
done
echo "gen-protos: regenerated $(echo "$protos" | wc -w) proto file(s) into $out"
# Swift value types for the service messages (the kiosk.rpc.v1 envelope types
# in KioskWire are written by hand).
python3 Scripts/gen-swift-messages.py Protos/kiosk/receipt/v1/receipt.proto ReceiptV1 Sources/KioskAPI/Generated/ReceiptV1.swift
python3 Scripts/gen-swift-messages.py Protos/kiosk/store/v1/store.proto StoreV1 Sources/KioskAPI/Generated/StoreV1.swift
python3 Scripts/gen-swift-messages.py Protos/kiosk/content/v1/content.proto ContentV1 Sources/KioskAPI/Generated/ContentV1.swift
echo "gen-protos: regenerated the Swift message types in Sources/KioskAPI/Generated"
