#!/usr/bin/env python3
"""A model of the large log's GC under Zipfian updates: how many bytes it moves per byte it
reclaims, with GC's moves sharing the tail with new writes (as now) or in a tail of their own
(hot/cold separation), and with different low-water marks.

Usage: scripts/gc-sim.py [keys] [records-per-segment] [large-share] [updates]
Every record is one unit; keys are loaded once in random order, then updated `updates` times
(default 2x keys) with YCSB's Zipfian (0.99) over scrambled keys. With a large share below 1, a
key's value is large (in the log) with that probability at the load and at each update, as the
bench's mixes draw a new size per update (SD and MD: 0.2, LD: 0.6); an update to a small value
makes the old record garbage and appends nothing. GC runs as the engine's does
(crates/engine/src/placement/gc.rs): when invalid records pass `threshold` of the log it takes
the segments with the most invalid records (never an open tail) until `low` x threshold is left,
re-appending their valid records.
"""
import bisect
import itertools
import random
import sys


def run(keys, seg, separate, low, large=1.0, updates=None, threshold=0.10, theta=0.99, seed=7):
    rng = random.Random(seed)
    cum = list(itertools.accumulate(r ** -theta for r in range(1, keys + 1)))
    perm = list(range(keys))
    rng.shuffle(perm)
    where = {}
    live = {}
    dead = {}
    tails = {}
    nxt = 0

    def drop(k):
        old = where.get(k)
        if old is not None:
            live[old].discard(k)
            dead[old] += 1
            where[k] = None

    def append(k, lane):
        nonlocal nxt
        t = tails.get(lane)
        if t is None or len(live[t]) + dead[t] >= seg:
            t, nxt = nxt, nxt + 1
            live[t], dead[t], tails[lane] = set(), 0, t
        drop(k)
        live[t].add(k)
        where[k] = t

    for k in perm:
        if rng.random() < large:
            append(k, "user")
    moved = reclaimed = written = 0
    for i in range(2 * keys if updates is None else updates):
        k = perm[bisect.bisect_left(cum, rng.random() * cum[-1])]
        if rng.random() < large:
            append(k, "user")
            written += 1
        else:
            drop(k)
        if i % 1000:
            continue
        total = len(live) * seg
        garbage = sum(dead.values())
        if garbage <= threshold * total:
            continue
        open_ = set(tails.values())
        for s in sorted((s for s in live if s not in open_), key=lambda s: -dead[s]):
            if garbage <= threshold * low * total:
                break
            garbage -= dead[s]
            reclaimed += dead[s]
            keep = live.pop(s)
            del dead[s]
            for k in keep:
                where[k] = None
                append(k, "gc" if separate else "user")
                moved += 1
    return moved / max(1, reclaimed), moved / max(1, written)


def main():
    keys = int(sys.argv[1]) if len(sys.argv) > 1 else 200_000
    seg = int(sys.argv[2]) if len(sys.argv) > 2 else 200
    large = float(sys.argv[3]) if len(sys.argv) > 3 else 1.0
    updates = int(sys.argv[4]) if len(sys.argv) > 4 else None
    for separate, low in [(False, 0.5), (True, 0.5), (False, 0.9), (True, 0.9)]:
        per_reclaimed, per_written = run(keys, seg, separate, low, large, updates)
        tail = "own tail for GC moves" if separate else "one tail"
        print(
            f"{tail:22} low water {low:.2f} x threshold: moved / reclaimed = {per_reclaimed:.2f}, "
            f"moved / written = {per_written:.2f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
