//! What the cache keeps across the background work that rewrites data: compactions carry hot
//! leaves over to the leaves that replace them, GC carries hot values over to their new place.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    missing_docs,
    reason = "test code: a failure stops where it happened"
)]

use halyard_engine::{Db, Options, ScanOptions};

fn key(i: u32) -> Vec<u8> {
    format!("key{:08}", i).into_bytes()
}

fn opts() -> Options {
    Options { cache_bytes: 8 << 20, gc_interval_ms: 3_600_000, ..Options::tiny() }
}

/// Node and value cache misses of `f`.
fn misses_of(db: &Db, f: impl FnOnce()) -> u64 {
    let before = db.stats().cache_misses;
    f();
    db.stats().cache_misses - before
}

#[test]
fn compactions_carry_hot_leaves_into_the_cache() {
    let dir = tempfile::tempdir().unwrap();
    // L0 holds all the keys, so that the store is one level, L1, and every L0->L1 merge
    // rewrites all of it (as at 4M records in `halyard bench`). The cache is smaller than L1:
    // with room to spare, a merge would put all of its output in it (`Output::fill_room`).
    let db = Db::open(dir.path(), Options { l0_bytes: 2 << 20, cache_bytes: 128 << 10, ..opts() }).unwrap();
    let n = 20_000;
    // Small pairs only: every value is in a leaf, so a scan reads leaves and nothing else.
    for i in 0..n {
        db.put(&key(i), format!("a{i}").as_bytes()).unwrap();
    }
    db.compact().unwrap();
    assert!(db.stats().levels[0].stored_bytes > 2 * (128 << 10), "{:?}", db.stats());
    // Scans go through leaves only (point reads would be served by the row cache).
    let hot = |db: &Db| {
        let got = db.scan_with(key(5000)..key(5300), ScanOptions::default()).count();
        assert_eq!(got, 300);
    };
    for _ in 0..4 {
        hot(&db);
    }
    assert_eq!(misses_of(&db, || hot(&db)), 0, "the hot range is cached");
    // Overwrites spread over all keys: every leaf of the levels below is rewritten.
    for i in (0..n).step_by(3) {
        db.put(&key(i), format!("b{i}").as_bytes()).unwrap();
    }
    let before = db.stats();
    db.compact().unwrap();
    let after = db.stats();
    assert_eq!(after.levels.len(), 1, "{after:?}");
    assert!(after.compactions > before.compactions);
    assert!(after.warmed_leaves > before.warmed_leaves, "{after:?}");
    assert_eq!(misses_of(&db, || hot(&db)), 0, "the rewritten hot range is still cached");
    // A range nobody read was not carried over.
    let cold = misses_of(&db, || {
        assert_eq!(db.scan_with(key(15000)..key(15300), ScanOptions::default()).count(), 300);
    });
    assert!(cold > 0, "cold leaves are read from the device");
    check_values(&db, n);
}

#[test]
fn gc_moves_hot_values_with_their_records() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), opts()).unwrap();
    let n = 3000;
    let large = |i: u32, round: u32| {
        let mut v = format!("v{round}-{i}-").into_bytes();
        v.resize(700, b'x');
        v
    };
    for i in 0..n {
        db.put(&key(i), &large(i, 0)).unwrap();
    }
    db.compact().unwrap();
    let is_hot = |i: u32| i.is_multiple_of(10);
    let hot = |db: &Db| {
        for i in (0..n).filter(|&i| is_hot(i)) {
            assert_eq!(db.get(&key(i)).unwrap(), Some(large(i, 0)), "key {i}");
        }
    };
    hot(&db);
    // Everything else is overwritten: the old segments hold the hot records and garbage.
    for i in (0..n).filter(|&i| !is_hot(i)) {
        db.put(&key(i), &large(i, 1)).unwrap();
    }
    db.compact().unwrap();
    let before = db.stats();
    assert!(db.gc().unwrap() > 0);
    let after = db.stats();
    assert!(after.gc_bytes_moved > before.gc_bytes_moved, "GC moved the hot records: {after:?}");
    // The moved records are in L0 now, with pointers to their new place.
    assert_eq!(misses_of(&db, || hot(&db)), 0, "the moved values are still cached");
    for i in 0..n {
        let want = if is_hot(i) { large(i, 0) } else { large(i, 1) };
        assert_eq!(db.get(&key(i)).unwrap(), Some(want), "key {i}");
    }
}

/// Device bytes compactions read.
fn compaction_reads(db: &Db) -> u64 {
    db.stats().read_bytes_by.iter().find(|(k, _)| *k == "compaction_read").map_or(0, |(_, v)| *v)
}

/// Writes `n` small pairs, merges them into L1, then overwrites every third key so that the
/// next merge takes every leaf of L1 as an input.
fn one_level_then_overwrites(db: &Db, n: u32) {
    for i in 0..n {
        db.put(&key(i), format!("a{i}").as_bytes()).unwrap();
    }
    db.compact().unwrap();
    for i in (0..n).step_by(3) {
        db.put(&key(i), format!("b{i}").as_bytes()).unwrap();
    }
}

/// Every third key of `0..n` holds its overwrite, the others their first value.
fn check_values(db: &Db, n: u32) {
    for i in 0..n {
        let want = if i.is_multiple_of(3) { format!("b{i}") } else { format!("a{i}") };
        assert_eq!(db.get(&key(i)).unwrap(), Some(want.into_bytes()), "key {i}");
    }
}

#[test]
fn a_merge_takes_the_leaves_the_cache_holds_instead_of_reading_them() {
    let dir = tempfile::tempdir().unwrap();
    // Nothing reads in between, so the cache has room for every leaf the first merge writes.
    let db = Db::open(dir.path(), Options { l0_bytes: 2 << 20, ..opts() }).unwrap();
    let n = 20_000;
    one_level_then_overwrites(&db, n);
    let (cached, read) = (db.stats().compaction_cached_bytes, compaction_reads(&db));
    db.compact().unwrap();
    assert_eq!(db.stats().levels.len(), 1);
    assert!(db.stats().compaction_cached_bytes > cached, "{:?}", db.stats());
    assert_eq!(compaction_reads(&db), read, "every input leaf came from the cache");
    check_values(&db, n);
}

#[test]
fn a_merge_reads_the_leaves_the_cache_lacks() {
    let dir = tempfile::tempdir().unwrap();
    // A cache smaller than L1: the first merge's leaves fill its room and the rest stay on the
    // device, so the next merge takes some inputs from the cache and reads runs of the others.
    let n = 60_000;
    let db = Db::open(dir.path(), Options { l0_bytes: 4 << 20, cache_bytes: 256 << 10, ..opts() }).unwrap();
    one_level_then_overwrites(&db, n);
    let l1 = db.stats().levels[0].stored_bytes;
    assert!(l1 > 4 * (256 << 10), "L1 ({l1} bytes) is larger than the cache");
    let (cached, read) = (db.stats().compaction_cached_bytes, compaction_reads(&db));
    db.compact().unwrap();
    let (cached, read) = (db.stats().compaction_cached_bytes - cached, compaction_reads(&db) - read);
    assert!(cached > 0, "some inputs came from the cache");
    assert!(read > 0 && read < l1 + (1 << 20), "the others were read: {read} bytes for L1 of {l1}");
    check_values(&db, n);
    // Reopened, the merged level reads back whole and right.
    drop(db);
    let db = Db::open(dir.path(), Options { l0_bytes: 4 << 20, cache_bytes: 256 << 10, ..opts() }).unwrap();
    check_values(&db, n);
}
