#!/usr/bin/env python3
"""A model of Run E's cache: how many log values a scan misses in an LRU cache of a given size.

Usage: scripts/scan-cache-model.py [records] [cache-mib] [large-percent] [scans]
Records are keyed as the bench keys them ("user" + FNV-1a-64 of the record number, so key order
is the order of the hashes); a scan starts at a record drawn as YCSB's scrambled Zipfian (0.99
over 10^10 items, hashed onto the records) and reads 1..100 pairs in key order, as
crates/bench/src/workload.rs does. Each pair is a large (separated) value with probability
`large-percent`; every large value a scan meets is looked up in an LRU holding `cache-mib` of
values of 1,300 bytes (a 1,228 B pair with its record header, as the engine caches it). The
first half of the scans warm the cache; the second half are counted.

It answers one question: whether Halyard's measured misses per scan in LD Run E come from its
cache policy or from the workload. If an ideal LRU over values only misses about as often, no
cache policy can make the scan cheaper; only fewer, larger reads can.
"""
import bisect
import collections
import random
import sys

ITEMS = 10**10
ZETAN = 26.469_028_201_783_02  # zeta(10^10, 0.99), as YCSB and the bench use
THETA = 0.99


def fnv64(v):
    h = 0xCBF29CE484222325
    for _ in range(8):
        h ^= v & 0xFF
        h = (h * 1_099_511_628_211) & (2**64 - 1)
        v >>= 8
    if h >= 2**63:
        h -= 2**64
    return abs(h)


def main():
    records = int(sys.argv[1]) if len(sys.argv) > 1 else 4_000_000
    cache_mib = float(sys.argv[2]) if len(sys.argv) > 2 else 737
    large_pct = float(sys.argv[3]) if len(sys.argv) > 3 else 60
    scans = int(sys.argv[4]) if len(sys.argv) > 4 else 200_000
    rng = random.Random(7)
    order = sorted(range(records), key=fnv64)
    pos = {n: i for i, n in enumerate(order)}
    large = [rng.random() * 100 < large_pct for _ in range(records)]
    zeta2 = 1 + 0.5**THETA
    alpha = 1 / (1 - THETA)
    eta = (1 - (2 / ITEMS) ** (1 - THETA)) / (1 - zeta2 / ZETAN)

    def start():
        u = rng.random()
        uz = u * ZETAN
        if uz < 1:
            r = 0
        elif uz < zeta2:
            r = 1
        else:
            r = min(int(ITEMS * (eta * u - eta + 1) ** alpha), ITEMS - 1)
        return pos[fnv64(r) % records]

    cap = int(cache_mib * 2**20 / 1300)
    lru = collections.OrderedDict()
    hits = misses = values = 0
    for s in range(scans):
        counted = s >= scans // 2
        p = start()
        for q in range(p, min(records, p + rng.randint(1, 100))):
            if not large[q]:
                continue
            if q in lru:
                lru.move_to_end(q)
                hits += counted
            else:
                misses += counted
                lru[q] = True
                if len(lru) > cap:
                    lru.popitem(last=False)
            values += counted
    n = scans - scans // 2
    print(f"records {records}, LRU of {cache_mib:g} MiB ({cap} values), {large_pct:g}% large, {n} scans counted")
    print(f"large values per scan {values / n:.1f}, misses per scan {misses / n:.1f}, hit rate {hits / max(1, values):.3f}")


if __name__ == "__main__":
    main()
