#!/usr/bin/env bash
# Builds the Examples/ package (a package of its own, on `../`), runs its tests, then runs its
# buy-and-download tool against the demo's services: a store and a content service on 127.0.0.1 over
# TLS with the sample catalog and a generated book (Scripts/lib.sh), a new account's token. Fails
# unless the tool buys the book and the file it downloads is the hosted one, byte for byte.
#     Scripts/examples.sh
set -euo pipefail
cd "$(dirname "$0")/.."
./Scripts/setup.sh
swift build --product kiosk-store > /dev/null
swift build --product kiosk-content > /dev/null
bin=$(swift build --show-bin-path)
echo "examples: building Examples/ (its own package and build directory)"
(cd Examples && swift build --build-tests)
echo "examples: Examples/ tests"
(cd Examples && swift test --skip-build)
examples_bin=$(cd Examples && swift build --show-bin-path)

. Scripts/lib.sh
start_store
mkdir -p "$work/content/books"
awk 'BEGIN { for (i = 1; n < 1048576; i++) { line = sprintf("Chapter %d. Bought, downloaded, checked.\n", i); printf "%s", line; n += length(line) } }' \
  > "$work/content/books/swift-book.txt"
start_content "$(new_credential content)"
echo "examples: buy-and-download book.swift against the store at $store and the content service at $content"
KIOSK_STORE="$store" KIOSK_CONTENT="$content" KIOSK_TOKEN="$(new_token)" KIOSK_STATE_DIR="$work/app" \
  "$examples_bin/buy-and-download" book.swift "$work/downloads"
cmp "$work/downloads/book.swift" "$work/content/books/swift-book.txt"
echo "examples: the downloaded file is the hosted one"
