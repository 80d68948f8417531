#!/usr/bin/env bash
# Installs what Kiosk needs to build on Debian: libprotobuf-c, protoc-c, zlib,
# libdeflate and SQLite headers, curl and openssl (the Swift toolchain itself must already be on PATH). Idempotent:
# does nothing when everything is there.
set -euo pipefail

missing=()
pkg-config --exists libprotobuf-c 2>/dev/null || missing+=(libprotobuf-c-dev)
command -v protoc-c >/dev/null 2>&1 || missing+=(protobuf-c-compiler)
pkg-config --exists zlib 2>/dev/null || missing+=(zlib1g-dev)
pkg-config --exists libdeflate 2>/dev/null || missing+=(libdeflate-dev)
pkg-config --exists sqlite3 2>/dev/null || missing+=(libsqlite3-dev)
command -v pkg-config >/dev/null 2>&1 || missing+=(pkg-config)
command -v curl >/dev/null 2>&1 || missing+=(curl)
# Development TLS certificates (kiosk-store tls create-dev, the tests' CA).
command -v openssl >/dev/null 2>&1 || missing+=(openssl)

if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get install -y "${missing[@]}" || { $sudo apt-get update && $sudo apt-get install -y "${missing[@]}"; }
fi

command -v swift >/dev/null 2>&1 || { echo "setup: the Swift toolchain is not on PATH (https://swift.org/install)" >&2; exit 1; }
