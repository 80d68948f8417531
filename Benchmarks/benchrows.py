"""Shared by Benchmarks/bench.sh and Benchmarks/bench-ab.sh.

`python3 Benchmarks/benchrows.py figures` reads `kiosk-bench verify --json` on
stdin and prints one row's figures: calls/s p50 p99 server-µs client-µs errors
(µs of CPU per call). `read_rows(path)` reads the rows the scripts collect,
"KIND WHO FIGURES…", into {(kind, who): [[figures…], …]} and counts the runs
that failed (a row without its figures): they are left out, not averaged.
`read_slots(path)` keeps them in order, a failed run as None, for pairing
the runs of one cycle.
"""
import json
import sys

FIGURES = 6


def figures(report):
    n = max(report["calls"], 1)
    return [report["calls_per_second"], report["latency_us"]["p50"], report["latency_us"]["p99"],
            round(report["server_cpu_seconds"] * 1e6 / n, 1), round(report["client_cpu_seconds"] * 1e6 / n, 1),
            report["errors"]]


def read_slots(path):
    """The rows in the order they ran, {(kind, who): [[figures…] or None, …]}: a failed run is None
    in its place, so the n-th runs of two servers can still be paired cycle by cycle."""
    slots = {}
    for line in open(path):
        kind, who, *values = line.split()
        slots.setdefault((kind, who), []).append([float(v) for v in values] if len(values) >= FIGURES else None)
    return slots


def read_rows(path):
    slots = read_slots(path)
    rows = {key: [r for r in runs if r is not None] for key, runs in slots.items()}
    failed = sum(r is None for runs in slots.values() for r in runs)
    return {key: runs for key, runs in rows.items() if runs}, failed


if __name__ == "__main__" and sys.argv[1:] == ["figures"]:
    print(*figures(json.loads(sys.stdin.read())))
