#!/usr/bin/env bash
# Sets up and runs Kiosk on this machine. The store and content services and
# the `kiosk` command line are not built yet; until they are, this installs
# what is missing, builds the package in release mode and checks that it runs
# the protocol's test suite for the wire contract.
set -euo pipefail
cd "$(dirname "$0")/.."
./Scripts/setup.sh
swift build -c release
echo
echo "demo: built KioskWire and KioskRPC (release)."
echo "demo: the store service, content service and 'kiosk' command line arrive in the next steps;"
echo "demo: meanwhile the wire contract is exercised by: swift test --filter WireContractTests"
swift test --filter WireContractTests 2>&1 | tail -n 1
