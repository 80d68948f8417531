#!/usr/bin/env bash
# The README's SDK example, as a new user takes it: a package of its own outside the repository, next to a clone
# named `kiosk`, whose Package.swift holds the README's dependency lines ("Use Kiosk in your package", with
# `traits: []`) and whose main.swift is the README's Swift block, pasted with no edits. Builds it, then runs it
# against a store and a content service on 127.0.0.1 over TLS (Scripts/lib.sh) with a new account, and checks what
# it printed: the products and the unknown id, 20 credits, the book downloaded byte for byte, a valid receipt,
# the book restored. Fails, naming the step, if any of it does not hold.
#     Scripts/readme-example.sh
# README_EXAMPLE_SCRATCH=DIR builds in DIR (the test command passes Examples/.build, where the same dependencies
# are built already); without it, in a new directory: a first build, timed.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
./Scripts/setup.sh
swift build --product kiosk-store > /dev/null
swift build --product kiosk-content > /dev/null
bin=$(swift build --show-bin-path)
. Scripts/lib.sh

# The README's blocks: the first ```swift block under "## The SDK" (the program, built and run), the one under "Use
# Kiosk in your package" (the manifest's dependencies and targets) and its first program (built: it goes to the
# default 127.0.0.1:7301 in plaintext).
python3 - "$work" <<'PY'
import re, sys
work = sys.argv[1]
readme = open("README.md").read()
def block(after):
    start = readme.index(after)
    match = re.search(r"```swift\n(.*?)```", readme[start:], re.S)
    if not match:
        sys.exit(f"readme-example: no swift block after {after!r} in README.md")
    return match.group(1)
program = block("## The SDK: `import Kiosk`")
manifest = block("### Use Kiosk in your package")
first = block("A first program, the whole of `Sources/buy/main.swift`")
lines = [l for l in manifest.splitlines() if not l.startswith("// Package.swift")]
# The short first program as a second executable of the same package (the README's manifest names one, `buy`).
lines = [l.replace('.executableTarget(name: "buy", dependencies: [.product(name: "Kiosk", package: "kiosk")]),',
                   '.executableTarget(name: "buy", dependencies: [.product(name: "Kiosk", package: "kiosk")]),\n'
                   '    .executableTarget(name: "first", dependencies: [.product(name: "Kiosk", package: "kiosk")]),')
         for l in lines]
import os
os.makedirs(f"{work}/app/Sources/buy", exist_ok=True)
os.makedirs(f"{work}/app/Sources/first", exist_ok=True)
open(f"{work}/app/Sources/buy/main.swift", "w").write(program)
open(f"{work}/app/Sources/first/main.swift", "w").write(first)
open(f"{work}/app/Package.swift", "w").write(
    "// swift-tools-version:6.1\nimport PackageDescription\n\nlet package = Package(\n"
    '    name: "app",\n    platforms: [.macOS(.v14)],\n' + "\n".join(lines) + "\n)\n")
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
# The SDK alone: swift-nio, swift-nio-ssl, swift-crypto, swift-log, swift-distributed-tracing and theirs
# (docs/performance.md). More means a service's dependency reached the SDK's graph without the trait's condition.
[ "$packages" -le 9 ] || { cat "$work/app/Package.resolved"; echo "readme-example: more than 9 packages" >&2; exit 1; }
(cd "$work/app" && swift build --scratch-path "$scratch" 2>&1 | tail -3) \
  || { echo "readme-example: the README's example does not build" >&2; exit 1; }
[ -x "$scratch/debug/buy" ] && [ -x "$scratch/debug/first" ] \
  || { echo "readme-example: no binaries buy and first in $scratch/debug" >&2; exit 1; }
echo "readme-example: built in $(( $(date +%s) - started )) s ($( [ -n "${README_EXAMPLE_SCRATCH:-}" ] && echo "on a build directory of the same dependencies" || echo "a first build"))"

start_store
mkdir -p "$work/content/books"
awk 'BEGIN { for (i = 1; n < 1048576; i++) { line = sprintf("Chapter %d. Bought, downloaded, checked.\n", i); printf "%s", line; n += length(line) } }' \
  > "$work/content/books/swift-book.txt"
start_content "$(new_credential content)"
mkdir -p "$work/tmp"
echo "readme-example: running it against the store at $store and the content service at $content"
KIOSK_STORE="$store" KIOSK_CONTENT="$content" KIOSK_TOKEN="$(new_token)" TMPDIR="$work/tmp/" \
  "$scratch/debug/buy" > "$work/buy.out" 2> "$work/buy.err" < /dev/null \
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
