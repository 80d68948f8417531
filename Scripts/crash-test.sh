#!/usr/bin/env bash
# Kills the store with SIGKILL under purchase load, KILLS times (default 100),
# with the payment processor (a double of Stripe's API) in its own process
# counting the charges it made; clients retry every unanswered purchase with
# its idempotency key. Fails unless every answered purchase is in the ledger
# exactly once, charges equal recorded transactions, every balance equals the
# sum of its movements and no payment intent is left open. The test command
# runs it with 20 kills. Extra arguments go to `kiosk-bench crash` (--clients,
# --in-flight, --max-life-ms, --seed to replay a run).
#
#     Scripts/crash-test.sh [KILLS] [kiosk-bench crash options…]
set -euo pipefail
cd "$(dirname "$0")/.."
kills=${1:-100}
[ $# -gt 0 ] && shift
./Scripts/setup.sh
swift build --product kiosk-store >/dev/null
swift build --product stripe-double >/dev/null
swift build --product kiosk-bench >/dev/null
bin=$(swift build --show-bin-path)
"$bin/kiosk-bench" crash --kills "$kills" "$@"
