#!/usr/bin/env bash
# What a package that depends on Kiosk resolves and builds the first time, as a new user's would: two packages of
# their own outside the repository, next to a clone named `kiosk`, each with the README's SDK example as its
# program, one depending with `traits: []` (the SDK alone) and one with the default traits (the services too).
# Each is built from nothing: a new build directory and a new SwiftPM cache (the repositories are cloned again from
# wherever the machine gets them). Prints, per package: packages resolved, first build seconds, the build
# directory's and the cache's size. Run it on an otherwise idle machine; the two builds run one after the other.
#     Benchmarks/sdk-first-build.sh
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
ln -s "$repo" "$work/kiosk"
python3 - "$work" <<'PY'
import os, re, sys
work = sys.argv[1]
readme = open("README.md").read()
start = readme.index("## The SDK: `import Kiosk`")
program = re.search(r"```swift\n(.*?)```", readme[start:], re.S).group(1)
for name, traits in [("sdk-only", ", traits: []"), ("default-traits", "")]:
    os.makedirs(f"{work}/{name}/Sources/buy")
    open(f"{work}/{name}/Sources/buy/main.swift", "w").write(program)
    open(f"{work}/{name}/Package.swift", "w").write(f"""// swift-tools-version:6.1
import PackageDescription

let package = Package(
    name: "{name}",
    platforms: [.macOS(.v14)],
    dependencies: [.package(path: "../kiosk"{traits})],
    targets: [.executableTarget(name: "buy", dependencies: [.product(name: "Kiosk", package: "kiosk")])]
)
""")
PY
printf '%-16s %9s %9s %9s %9s\n' package packages seconds build_MB cache_MB
for name in sdk-only default-traits; do
  started=$(date +%s)
  (cd "$work/$name" && swift build --cache-path "$work/cache-$name" > "$work/$name.log" 2>&1) \
    || { tail -20 "$work/$name.log"; echo "sdk-first-build: $name did not build" >&2; exit 1; }
  seconds=$(( $(date +%s) - started ))
  packages=$(python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["pins"]))' "$work/$name/Package.resolved")
  printf '%-16s %9s %9s %9s %9s\n' "$name" "$packages" "$seconds" "$(du -sm "$work/$name/.build" | cut -f1)" \
    "$(du -sm "$work/cache-$name" | cut -f1)"
done
