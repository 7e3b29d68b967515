#!/usr/bin/env python3
"""Medians of per-run ratios from `halyard bench --engines halyard,rocksdb,blobdb --json F` runs.

Usage: scripts/engine-table.py run1.json run2.json ...
Prints the markdown table of docs/performance.md (engine section): per mix and phase, the median
ops/s of each engine, the medians of the per-run ratios Halyard/RocksDB and Halyard/BlobDB
(throughput and I/O amplification) with their spread, Halyard's space amplification at the end
of the phase and its throughput coefficient of variation. Files may hold different mixes and
phases; each (mix, phase) takes every run that has it.
"""
import json
import statistics
import sys

ORDER = ["SD", "MD", "LD"]
PHASES = ["load-a", "run-a", "run-b", "run-c", "run-d", "run-e", "run-f"]


def load(path):
    d = json.load(open(path))
    return {(r["engine"], r["mix"], r["workload"]): r for r in d["results"]}


def main(paths):
    runs = [load(p) for p in paths]
    keys = sorted(
        {(m, w) for run in runs for (_, m, w) in run},
        key=lambda k: (ORDER.index(k[0]) if k[0] in ORDER else 9, PHASES.index(k[1]) if k[1] in PHASES else 9),
    )
    print("| mix | phase | runs | ops/s Halyard / RocksDB / BlobDB | vs RocksDB | vs BlobDB "
          "| I/O amp Halyard / RocksDB | ratio | space amp Halyard / RocksDB | CPU µs/op H / R | CV H |")
    print("|" + "---|" * 11)
    for mix, wl in keys:
        rows = [(run.get(("halyard", mix, wl)), run.get(("rocksdb", mix, wl)), run.get(("blobdb", mix, wl))) for run in runs]
        rows = [r for r in rows if r[0] and r[1] and r[2]]
        if not rows:
            continue

        def med(xs):
            return statistics.median(xs) if xs else float("nan")

        def rng(xs):
            return f" ({min(xs):.2f}–{max(xs):.2f})" if len(xs) > 1 else ""

        def col(i, k):
            return med([r[i][k] for r in rows])

        vs_r = [r[0]["ops_per_sec"] / r[1]["ops_per_sec"] for r in rows]
        vs_b = [r[0]["ops_per_sec"] / r[2]["ops_per_sec"] for r in rows]
        io = [r[0]["io_amplification"] / r[1]["io_amplification"] for r in rows]
        print(
            f"| {mix} | {wl} | {len(rows)} "
            f"| {col(0, 'ops_per_sec'):,.0f} / {col(1, 'ops_per_sec'):,.0f} / {col(2, 'ops_per_sec'):,.0f} "
            f"| {med(vs_r):.2f}{rng(vs_r)} | {med(vs_b):.2f}{rng(vs_b)} "
            f"| {col(0, 'io_amplification'):.2f} / {col(1, 'io_amplification'):.2f} | {med(io):.2f}{rng(io)} "
            f"| {col(0, 'space_amplification'):.2f} / {col(1, 'space_amplification'):.2f} "
            f"| {col(0, 'cpu_us_per_op'):.1f} / {col(1, 'cpu_us_per_op'):.1f} | {col(0, 'throughput_cv'):.2f} |"
        )


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
