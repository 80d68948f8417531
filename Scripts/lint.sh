#!/usr/bin/env bash
# The checks that need no build, run first by the test command:
#   - `swift format lint --strict` over Sources/, Tests/ and Examples/ with the repository's .swift-format
#     (generated message types excluded: Scripts/gen-protos.sh writes them), and every public declaration of
#     the libraries with DocC catalogs (Kiosk, KioskTesting, KioskRPC) documented;
#   - every relative link and heading anchor of the Markdown documentation resolves;
#   - no lock-protected box whose value is a function (hold it in a FunctionReference: KioskAPI);
#   - the house rules: no issue numbers, run dates or commit hashes in Sources/, docs/ or the README
#     (timings and dates go to docs/performance.md's tables and commit bodies; Benchmarks/results/ keeps data).
#     Scripts/lint.sh [--fix]     (--fix: `swift format --in-place` first, then the checks)
set -euo pipefail
cd "$(dirname "$0")/.."
failed=0
mapfile -t swift_files < <(find Sources Tests Examples -name '*.swift' -not -path '*/Generated/*' \
  -not -path '*/.build/*' | sort)
if [ "${1:-}" = "--fix" ]; then
  swift format format --in-place --parallel "${swift_files[@]}"
fi
echo "lint: swift format lint --strict (${#swift_files[@]} files)"
swift format lint --strict --parallel "${swift_files[@]}" || failed=1
# The libraries with DocC catalogs: every public declaration has its documentation comment.
documented=$(mktemp)
trap 'rm -f "$documented"' EXIT
python3 -c 'import json, sys
c = json.load(open(".swift-format")); c["rules"]["AllPublicDeclarationsHaveDocumentation"] = True
json.dump(c, open(sys.argv[1], "w"))' "$documented"
echo "lint: every public declaration of Kiosk, KioskTesting and KioskRPC documented"
find Sources/Kiosk Sources/KioskTesting Sources/KioskRPC -name '*.swift' -print0 \
  | xargs -0 swift format lint --strict --parallel --configuration "$documented" || failed=1

echo "lint: documentation links"
python3 - <<'PY' || failed=1
import glob, os, re, sys
files = ["README.md"] + sorted(set(glob.glob("docs/**/*.md", recursive=True) + glob.glob("Examples/**/*.md", recursive=True)
         + glob.glob("Benchmarks/**/*.md", recursive=True) + glob.glob("Sources/**/*.docc/**/*.md", recursive=True)))
files = [f for f in files if "/.build/" not in f]
def anchors(path):
    found = set()
    for line in open(path, encoding="utf-8"):
        heading = re.match(r"^#+\s+(.*)", line)
        if heading:
            found.add(re.sub(r"[^\w\- ]", "", heading.group(1).strip().lower()).replace(" ", "-"))
    return found
bad = 0
for f in files:
    text = re.sub(r"```.*?```", "", open(f, encoding="utf-8").read(), flags=re.S)
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target) or target.startswith("<doc:"):
            continue
        path, _, anchor = target.partition("#")
        full = os.path.normpath(os.path.join(os.path.dirname(f), path)) if path else f
        if not os.path.exists(full):
            print(f"{f}: broken link {target}"); bad += 1
        elif anchor and full.endswith(".md") and anchor not in anchors(full):
            print(f"{f}: no heading for #{anchor} in {full}"); bad += 1
sys.exit(1 if bad else 0)
PY

echo "lint: no lock-protected box whose value is a function (FunctionReference)"
# A function that is itself a box's value gains a reabstraction thunk at every read through the box's inout access:
# each call through it gets slower than the last. Hold it in a FunctionReference (KioskAPI) instead. The box's type
# argument is read whole (across lines); it holds a function when, its outer parentheses and `?` taken off, it has
# an arrow outside any brackets (a function, or a tuple with one). A typealias of a function type is not seen.
python3 - <<'PY' || failed=1
import glob, re, sys
bad = 0
for f in glob.glob("Sources/**/*.swift", recursive=True):
    if "/Generated/" in f:
        continue
    text = open(f, encoding="utf-8").read()
    for match in re.finditer(r"\b(?:NIOLockedValueBox|LockedValueBox|Mutex)<", text):
        depth, i = 1, match.end()
        while i < len(text) and depth:
            depth += {"<": 1, ">": -1}.get(text[i], 0) if text[i - 1] != "-" else 0
            i += 1
        argument = " ".join(text[match.end():i - 1].split())
        while True:
            stripped = argument.rstrip("?").strip()
            if stripped.startswith("(") and stripped.endswith(")"):
                inner, level = stripped[1:-1], 0
                if all((level := level + {"(": 1, ")": -1}.get(c, 0)) >= 0 for c in inner):
                    argument = inner
                    continue
            break
        level, arrow = 0, False
        for j, c in enumerate(argument):
            if argument.startswith("->", j):
                arrow = arrow or level == 0
            elif c != ">" or argument[j - 1] != "-":
                level += {"(": 1, "[": 1, "<": 1, ")": -1, "]": -1, ">": -1}.get(c, 0)
        if arrow:
            line = text.count("\n", 0, match.start()) + 1
            print(f"{f}:{line}: a box whose value is a function: hold it in a FunctionReference"); bad += 1
sys.exit(1 if bad else 0)
PY

echo "lint: no issue numbers, run dates or commit hashes in Sources/, docs/, Examples/, the READMEs"
python3 - <<'PY' || failed=1
import glob, re, subprocess, sys
files = ["README.md", "Benchmarks/README.md"] + glob.glob("docs/**/*.md", recursive=True) + [
    f for f in glob.glob("Sources/**/*.swift", recursive=True) + glob.glob("Sources/**/*.docc/**/*.md", recursive=True)
    + glob.glob("Examples/**/*.swift", recursive=True) + glob.glob("Examples/**/*.md", recursive=True)
    if "/Generated/" not in f and "/.build/" not in f]
hashes = set(subprocess.run(["git", "log", "--format=%h %H"], capture_output=True, text=True).stdout.split())
rules = [
    (re.compile(r"\b(issue|issues)\s*#?\d+", re.I), "an issue number"),
    (re.compile(r"(?<![\w\"])20\d\d-[01]\d-[0-3]\d(?![\w\"])"), "a date"),
]
bad = 0
for f in files:
    for number, line in enumerate(open(f, encoding="utf-8"), 1):
        for rule, what in rules:
            if rule.search(line):
                print(f"{f}:{number}: {what}: {line.strip()[:120]}"); bad += 1
        for word in re.findall(r"\b[0-9a-f]{7,40}\b", line):
            if any(h.startswith(word) for h in hashes):
                print(f"{f}:{number}: a commit hash: {word}"); bad += 1
sys.exit(1 if bad else 0)
PY
exit $failed
