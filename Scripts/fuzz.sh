#!/usr/bin/env bash
# Fuzzes the wire decoders (frame decoder, message decoders, zlib) with
# libFuzzer and AddressSanitizer for SECONDS seconds (default 30).
#
#   Scripts/fuzz.sh [SECONDS] [extra libFuzzer flags...]
#
# The fuzzer starts from a temporary copy of the committed seed corpus
# (Scripts/fuzz-corpus, written by Scripts/gen-fuzz-corpus.py), so runs do
# not pile their inputs into the repository. A crash makes the script fail and
# prints the crashing input: fix the bug, then copy the input into
# Scripts/fuzz-corpus/ so the tests (KioskFuzzTests) replay it from then on.
#
# The build lives in .build-fuzz (instrumented; kept apart from .build). The
# temporary work directory is removed after a clean run unless KIOSK_FUZZ_KEEP
# is set (its corpus/ then holds the inputs the run found interesting).
set -euo pipefail
cd "$(dirname "$0")/.."

seconds="${1:-30}"
shift || true
case "$seconds" in
  ''|*[!0-9]*) echo "usage: Scripts/fuzz.sh [SECONDS] [libFuzzer flags...]" >&2; exit 2 ;;
esac

./Scripts/setup.sh

# Release (-O keeps preconditions and overflow traps) runs about 5 times as
# many inputs a second as a debug build; coverage instrumentation and ASan are
# the same. No -parse-as-library: the target has a @main
# in both builds (see Sources/kiosk-fuzz/Entry.swift).
build=(swift build -c release --scratch-path .build-fuzz --product kiosk-fuzz
       -Xswiftc -sanitize=fuzzer,address -Xswiftc -DKIOSK_FUZZ)
# Another build of the package may be running (CI, a second checkout): wait for
# it. gold's "Cannot export local symbol '__asan_…'" lines are ASan noise.
lock=()
command -v flock >/dev/null 2>&1 && lock=(flock /tmp/kiosk-build.lock)
${lock[@]+"${lock[@]}"} "${build[@]}" 2>&1 | { grep -v "Cannot export local symbol '__asan" || true; }
binary="$(swift build -c release --scratch-path .build-fuzz --product kiosk-fuzz --show-bin-path)/kiosk-fuzz"

work="$(mktemp -d "${TMPDIR:-/tmp}/kiosk-fuzz.XXXXXX")"
mkdir -p "$work/corpus" "$work/artifacts"
find Scripts/fuzz-corpus -maxdepth 1 -type f ! -name '.*' ! -name '*.md' -exec cp {} "$work/corpus/" \;
echo "fuzz: ${seconds}s over $(ls "$work/corpus" | wc -l | tr -d ' ') seeds; work directory $work"

status=0
ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1}" "$binary" \
  -max_total_time="$seconds" \
  -timeout=10 \
  -rss_limit_mb=2048 \
  -max_len=4096 \
  -print_final_stats=1 \
  -artifact_prefix="$work/artifacts/" \
  "$@" \
  "$work/corpus" || status=$?

found=$(find "$work/artifacts" -type f | sort)
if [ "$status" -ne 0 ] || [ -n "$found" ]; then
  echo >&2
  echo "fuzz: libFuzzer found a problem (exit status $status)." >&2
  for input in $found; do
    echo "  input: $input" >&2
    echo "         $(od -An -tx1 -v "$input" | tr -s ' \n' ' ' | cut -c1-400)" >&2
  done
  echo "Reproduce with: $binary <input>" >&2
  echo "Once fixed, keep it: cp <input> Scripts/fuzz-corpus/regression-<what-it-was>" >&2
  exit 1
fi
if [ -n "${KIOSK_FUZZ_KEEP:-}" ]; then
  echo "fuzz: no crash in ${seconds}s; the run's corpus (not committed) is in $work/corpus"
else
  rm -rf "$work"
  echo "fuzz: no crash in ${seconds}s"
fi
