#!/usr/bin/env bash
# Runs every test of the package (unit, wire-contract and end-to-end on
# 127.0.0.1), installing the system libraries first when they are missing.
set -euo pipefail
cd "$(dirname "$0")/.."
./Scripts/setup.sh
swift build --build-tests
swift test --skip-build "$@"
