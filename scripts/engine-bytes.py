#!/usr/bin/env python3
"""Where Halyard's bytes go in one phase, from the engine's own counters in `--json` reports.

Usage: scripts/engine-bytes.py [--phase run-a] run1.json run2.json ...
Prints a markdown table: per file and mix,
Halyard's device bytes per user byte split by purpose (point reads, compaction, large-log GC,
the logs), RocksDB's total from /proc in the same run, and what 0.33x of it allows. The counters'
sum is checked against /proc/self/io: a gap over 2% is printed next to the total.
"""
import json
import sys

ORDER = ["SD", "MD", "LD"]


def row(path, phase):
    d = json.load(open(path))
    res = {(r["engine"], r["workload"]): r for r in d["results"]}
    h, rdb = res.get(("halyard", phase)), res.get(("rocksdb", phase))
    if not h:
        return None
    c, user = h.get("engine_counters") or {}, h["user_bytes"]

    def per(*keys):
        return sum(c.get(k, 0) for k in keys) / user

    reads = per("read_bytes.reads")
    comp = per("read_bytes.compaction_read", "write_bytes.compaction")
    gc = per("read_bytes.gc", "write_bytes.gc")
    logs = per("write_bytes.l0_log", "write_bytes.large_log", "write_bytes.medium_log", "write_bytes.catalog")
    # GC's moves are appended to the large log like user writes; the counter for them is
    # gc_bytes_moved, so the log column is the user's share and GC's column has its moves.
    moved = c.get("gc_bytes_moved", 0) / user
    logs -= moved
    gc += moved
    total = sum(v for k, v in c.items() if k.startswith(("read_bytes.", "write_bytes."))) / user
    proc = (h["device_read_bytes"] + h["device_write_bytes"]) / user
    gap = f" (/proc {proc:.2f})" if abs(total - proc) > 0.02 * proc else ""
    r_total = rdb["io_amplification"] if rdb else float("nan")
    return (
        h["mix"],
        f"| {h['mix']} | {path} | {total:.2f}{gap} | {reads:.2f} ({c.get('cache_misses', 0) / 1e6:.2f}M misses, "
        f"{c.get('cache_hits', 0) / 1e6:.2f}M hits) | {comp:.2f} ({c.get('compactions', 0)} compactions) "
        f"| {gc:.2f} | {logs:.2f} | {r_total:.2f} | {r_total / 3:.2f} |",
    )


def main(args):
    phase = "run-a"
    if args[:1] == ["--phase"]:
        phase, args = args[1], args[2:]
    rows = [r for r in (row(p, phase) for p in args) if r]
    print("| mix | run | total (I/O amp) | point reads (cache misses) | compaction read+write "
          "| large-log GC read+moved | logs (L0, large, catalog) | RocksDB total | 0.33x of RocksDB |")
    print("|" + "---|" * 9)
    for _, line in sorted(rows, key=lambda r: ORDER.index(r[0]) if r[0] in ORDER else 9):
        print(line)


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
