#!/usr/bin/env bash
# The README's SDK example, as a new user takes it: a package of its own outside the repository, next to a clone
# named `kiosk`, whose Package.swift is the README's ("Use Kiosk in your package", with `traits: []`) and whose
# main.swift is the README's Swift block, both pasted with no edits. Builds it (and the README's short first
# program in its place), then runs it
# against a store and a content service on 127.0.0.1 over TLS (Scripts/lib.sh) with a new account, and checks what
# it printed: the products and the unknown id, 20 credits, the book downloaded byte for byte, a valid receipt,
# the book restored. Fails, naming the step, if any of it does not hold.
#     Scripts/readme-example.sh
# README_EXAMPLE_SCRATCH=DIR builds in DIR (the test command passes Examples/.build, where the same dependencies
# are built already, after Scripts/examples.sh; it leaves that directory resolved for this package, and the next
# examples.sh resolves Examples' own again); without it, in a new directory: a first build, timed.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
./Scripts/setup.sh
swift build --product kiosk-store > /dev/null
swift build --product kiosk-content > /dev/null
bin=$(swift build --show-bin-path)
. Scripts/lib.sh

# The README's blocks, as a user copies them: the program under "## The SDK" (built and run), the whole Package.swift
# under "Use Kiosk in your package" (written as it is) and the short first program after it (built: it goes to the
# default 127.0.0.1:7301 in plaintext). The SDK's DocC getting-started article must show the same manifest and
# first program.
python3 - "$work" <<'PY'
import os, re, sys
work = sys.argv[1]
def blocks(path, after):
    text = open(path).read()
    if after not in text:
        sys.exit(f"readme-example: no {after!r} in {path}")
    return re.findall(r"```swift\n(.*?)```", text[text.index(after):], re.S)
program = blocks("README.md", "## The SDK: `import Kiosk`")[0]
manifest, first = blocks("README.md", "### Use Kiosk in your package")[:2]
if blocks("Sources/Kiosk/Kiosk.docc/GettingStarted.md", "### Add Kiosk to your package")[:2] != [manifest, first]:
    sys.exit("readme-example: GettingStarted.md's manifest and first program differ from the README's")
os.makedirs(f"{work}/app/Sources/buy")
open(f"{work}/app/Package.swift", "w").write(manifest)
open(f"{work}/app/Sources/buy/main.swift", "w").write(program)
open(f"{work}/first.swift", "w").write(first)
PY
ln -s "$repo" "$work/kiosk"
echo "readme-example: the README's program in a package of its own ($work/app), on ../kiosk with traits: []"
cat "$work/app/Package.swift"

scratch=${README_EXAMPLE_SCRATCH:-$work/app/.build}
started=$(date +%s)
(cd "$work/app" && swift package --scratch-path "$scratch" resolve > "$work/resolve.out" 2>&1) \
  || { cat "$work/resolve.out"; echo "readme-example: the package did not resolve" >&2; exit 1; }
packages=$(python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["pins"]))' "$work/app/Package.resolved")
echo "readme-example: $packages packages resolved"
# The SDK alone: swift-nio, swift-nio-ssl, swift-log, swift-distributed-tracing and theirs, and swift-crypto (resolved
# for KioskSigning, not built for the SDK)
# (docs/performance.md). More means a service's dependency reached the SDK's graph without the trait's condition.
[ "$packages" -le 9 ] || { cat "$work/app/Package.resolved"; echo "readme-example: more than 9 packages" >&2; exit 1; }
(cd "$work/app" && swift build --scratch-path "$scratch" 2>&1 | tail -3) \
  || { echo "readme-example: the README's example does not build" >&2; exit 1; }
cp "$scratch/debug/buy" "$work/example"
echo "readme-example: built in $(( $(date +%s) - started )) s ($( [ -n "${README_EXAMPLE_SCRATCH:-}" ] && echo "on a build directory of the same dependencies" || echo "a first build"))"
cp "$work/first.swift" "$work/app/Sources/buy/main.swift"
(cd "$work/app" && swift build --scratch-path "$scratch" 2>&1 | tail -1) \
  || { echo "readme-example: the README's first program does not build" >&2; exit 1; }
echo "readme-example: the first program builds too"

start_store
mkdir -p "$work/content/books"
awk 'BEGIN { for (i = 1; n < 1048576; i++) { line = sprintf("Chapter %d. Bought, downloaded, checked.\n", i); printf "%s", line; n += length(line) } }' \
  > "$work/content/books/swift-book.txt"
start_content "$(new_credential content)"
mkdir -p "$work/tmp"
echo "readme-example: running it against the store at $store and the content service at $content"
KIOSK_STORE="$store" KIOSK_CONTENT="$content" KIOSK_TOKEN="$(new_token)" TMPDIR="$work/tmp/" \
  "$work/example" > "$work/buy.out" 2> "$work/buy.err" < /dev/null \
  || { cat "$work/buy.out" "$work/buy.err"; echo "readme-example: the program failed" >&2; exit 1; }
cat "$work/buy.out"
expect() {
  grep -qxF -- "$1" "$work/buy.out" || { echo "readme-example: expected the line \"$1\"" >&2; exit 1; }
}
expect "credits.5: 5 Monkey Credits, 0.99 USD"
expect "book.swift: The Swift Book, 9.99 USD"
expect 'not sold: ["no.such.product"]'
expect "credits: 20"
expect "receipt: status 0, valid true"
grep -q "^owned: book.swift tx_" "$work/buy.out" || { echo "readme-example: the book was not restored" >&2; exit 1; }
book=$(sed -n 's/^book: \(.*\), bought for 9.99 USD$/\1/p' "$work/buy.out")
[ -n "$book" ] || { echo "readme-example: no book line with its price" >&2; exit 1; }
cmp "$book" "$work/content/books/swift-book.txt"
echo "readme-example: the README's program built as pasted and did what it says"
