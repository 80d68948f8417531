#!/usr/bin/env bash
# Runs every test of the package (unit, wire-contract and end-to-end on
# 127.0.0.1), installing the system libraries first when they are missing.
# With no arguments it first lints (Scripts/lint.sh: swift format, links, house
# rules) and builds the DocC documentation of Kiosk, KioskTesting and KioskRPC
# with warnings as errors, and it also fuzzes the wire decoders for 30 s first
# (Scripts/fuzz.sh; longer runs: Scripts/fuzz.sh SECONDS) and kills the store
# with SIGKILL 20 times under purchase load (Scripts/crash-test.sh; longer
# runs: Scripts/crash-test.sh KILLS), and after the whole suite runs the
# store's tests (KioskStoreTests, KioskStoreIntegrationTests) again on PostgreSQL: a throwaway cluster on
# 127.0.0.1 (Scripts/postgres.sh; installs Debian's postgresql when missing),
# then the short form of Scripts/scale-out.sh --chaos (PostgreSQL + 2 stores + 2
# content replicas, one of each killed with SIGKILL under load, then PostgreSQL
# restarted, frozen with SIGSTOP for 6 s, and restarted while the other store is
# killed; 36 s of load), and last
# builds and tests the Examples/ package and runs its buy-and-download tool
# against the demo's services (Scripts/examples.sh), then builds the README's
# SDK example as pasted into a package of its own, on `traits: []`, and runs it
# (Scripts/readme-example.sh, on Examples/.build, where its dependencies are built).
# Arguments go to `swift test` (e.g. --filter WireContractTests) and skip the rest.
set -euo pipefail
cd "$(dirname "$0")/.."
# Every temporary file of the run (the tests' data dirs, the throwaway PostgreSQL clusters, the services the scripts
# start, the compiler's scratch files) goes under one directory: removed when the run passes, so a run adds nothing
# to /tmp however many tests it runs; kept when it fails, with what the failure left (a test's data dir, the
# fuzzer's crash input), and named. Readable by all: as root, PostgreSQL's clusters run as `postgres`.
run_tmp=$(mktemp -d "${TMPDIR:-/tmp}/kiosk-test-run.XXXXXX")
chmod 755 "$run_tmp"
finish() {
  local status=$? cluster
  # A cluster whose test process has just ended may still run (its watchdog looks once a second): stopped here
  # before its directory goes.
  for cluster in "$run_tmp"/kiosk-postgres.*; do
    if [ -d "$cluster" ]; then ./Scripts/postgres.sh stop "$cluster" || true; fi
  done
  if [ "$status" -eq 0 ]; then
    rm -rf "$run_tmp"
  else
    echo "test: failed; its temporary files are kept in $run_tmp" >&2
  fi
}
trap finish EXIT
export TMPDIR="$run_tmp"
# step LABEL COMMAND…: runs COMMAND and notes how long it took (printed at the end: the whole command must stay
# within CI's 30 minutes, and this says where they go).
took=""
step() {
  local label=$1 start=$SECONDS
  shift
  "$@"
  took+="${took:+, }$label $((SECONDS - start)) s"
  echo "test: $label took $((SECONDS - start)) s ($SECONDS s so far)"
}
# quietly COMMAND…: COMMAND with its standard output discarded (a step's own line still printed).
quietly() { "$@" > /dev/null; }
step setup ./Scripts/setup.sh
if [ $# -eq 0 ]; then step lint ./Scripts/lint.sh; fi
step build swift build --build-tests
if [ $# -eq 0 ]; then
  for target in Kiosk KioskTesting KioskRPC; do
    echo "test: DocC documentation of $target (warnings are errors)"
    step "docc $target" swift package --disable-sandbox generate-documentation --target "$target" --warnings-as-errors
  done
  step fuzz ./Scripts/fuzz.sh 30
  step crash-test ./Scripts/crash-test.sh 20
fi
if [ $# -eq 0 ]; then
  # The store's domain (no sockets, no database) and its ledger adapters against their
  # contract (no sockets): every test at once, in seconds.
  step "store tests" swift test --skip-build --filter 'KioskStoreCoreTests|KioskStoreTests'
  # The rest one test at a time: the end-to-end tests hold timing promises (a
  # refund refused within a second, keepalive, backpressure windows) that a
  # machine busy with every other test at once cannot keep.
  step "other tests" swift test --skip-build --no-parallel --skip 'KioskStoreCoreTests|KioskStoreTests'
else
  step tests swift test --skip-build --no-parallel "$@"
fi
if [ $# -eq 0 ]; then
  echo "test: the store's tests again, on a PostgreSQL ledger"
  step "PostgreSQL install" quietly ./Scripts/postgres.sh install
  step "PostgreSQL tests" env KIOSK_TEST_LEDGER=postgres \
    swift test --skip-build --no-parallel --filter 'KioskStoreTests|KioskStoreIntegrationTests'
  echo "test: replicas on PostgreSQL, killed under load, the database restarted and frozen (Scripts/scale-out.sh --short --chaos)"
  step chaos ./Scripts/scale-out.sh --short --chaos
  echo "test: Examples/ builds, its tests pass, and buy-and-download buys and downloads (Scripts/examples.sh)"
  step examples ./Scripts/examples.sh
  echo "test: the README's SDK example, pasted into a package of its own, builds and runs (Scripts/readme-example.sh)"
  step "readme example" env README_EXAMPLE_SCRATCH="$(pwd)/Examples/.build" ./Scripts/readme-example.sh
fi
echo "test: passed in $SECONDS s ($took)"
