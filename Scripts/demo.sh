#!/usr/bin/env bash
# Sets up and runs Kiosk on this machine. The store and content services and
# the `kiosk` command line are not built yet; until they are, this installs
# what is missing, builds the package and runs the wire-contract tests, which
# start a real server on 127.0.0.1 and talk to it byte for byte.
set -euo pipefail
cd "$(dirname "$0")/.."
./Scripts/setup.sh
swift build --build-tests
echo
echo "demo: built KioskWire and KioskRPC."
echo "demo: the store service, content service and 'kiosk' command line arrive in the next steps;"
echo "demo: meanwhile, the wire contract against a live server on 127.0.0.1:"
swift test --skip-build --filter WireContractTests 2>&1 | tail -n 1
