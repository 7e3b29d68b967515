//! The cache warm-up after open: a reopened store reads its SSTs and large-log values into
//! the cache in whole segments, so that its first reads need no device read; it never evicts
//! for it, and it can be turned off.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    missing_docs,
    reason = "test code: a failure stops where it happened"
)]

use halyard_engine::{Db, Options};
use std::time::{Duration, Instant};

const N: u32 = 3000;

fn key(i: u32) -> Vec<u8> {
    format!("key{i:06}").into_bytes()
}

fn value(i: u32) -> Vec<u8> {
    // Small, medium and large pairs (tiny options: 40..200 bytes is medium).
    let len = [8, 150, 1500][(i % 3) as usize];
    let mut v = format!("{i}-").into_bytes();
    v.resize(len, b'a' + (i % 26) as u8);
    v
}

fn opts(cache_bytes: usize, warm: bool) -> Options {
    Options { cache_bytes, warm_cache: warm, ..Options::tiny() }
}

fn read_by(db: &Db, kind: &str) -> u64 {
    db.stats().read_bytes_by.iter().find(|(k, _)| *k == kind).map_or(0, |(_, b)| *b)
}

/// Loads N pairs into levels and the large log (several compactions, so several SSTs),
/// overwrites a tenth of them (garbage in the large log) and closes.
fn load(dir: &std::path::Path) {
    let db = Db::open(dir, opts(8 << 20, true)).expect("open");
    for i in 0..N {
        db.put(&key(i), &value(i)).expect("put");
    }
    for i in (0..N).step_by(10) {
        db.put(&key(i), &value(i + 1)).expect("overwrite");
    }
    db.compact().expect("compact");
    let s = db.stats();
    assert!(s.levels.iter().map(|l| l.ssts).sum::<usize>() > 1, "{:?}", s.levels);
}

/// Waits until the warm-up has stopped caching (its counter holds still for 300 ms).
fn warmed(db: &Db) -> u64 {
    let t0 = Instant::now();
    let mut last = (db.stats().warm_bytes, Instant::now());
    while t0.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(50));
        let now = db.stats().warm_bytes;
        if now != last.0 {
            last = (now, Instant::now());
        } else if last.1.elapsed() > Duration::from_millis(300) && now > 0 {
            break;
        }
    }
    db.stats().warm_bytes
}

fn expected(i: u32) -> Vec<u8> {
    if i.is_multiple_of(10) {
        value(i + 1)
    } else {
        value(i)
    }
}

#[test]
fn a_reopened_store_reads_everything_from_the_cache_once_warm() {
    let dir = tempfile::tempdir().unwrap();
    load(dir.path());
    let db = Db::open(dir.path(), opts(8 << 20, true)).unwrap();
    let cached = warmed(&db);
    assert!(cached > (N as u64) * 500, "warmed {cached} bytes");
    assert!(read_by(&db, "warm") >= cached / 2, "{}", read_by(&db, "warm"));
    let (misses, reads) = (db.stats().cache_misses, read_by(&db, "reads"));
    for i in 0..N {
        assert_eq!(db.get(&key(i)).unwrap(), Some(expected(i)), "key {i}");
    }
    assert_eq!(read_by(&db, "reads"), reads, "a read went to the device");
    assert_eq!(db.stats().cache_misses, misses);
}

#[test]
fn without_the_warm_up_first_reads_go_to_the_device() {
    let dir = tempfile::tempdir().unwrap();
    load(dir.path());
    let db = Db::open(dir.path(), opts(8 << 20, false)).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    for i in 0..N {
        assert_eq!(db.get(&key(i)).unwrap(), Some(expected(i)), "key {i}");
    }
    let s = db.stats();
    assert_eq!((s.warm_bytes, read_by(&db, "warm")), (0, 0));
    assert!(s.cache_misses > 0 && read_by(&db, "reads") > 0);
}

#[test]
fn the_warm_up_never_fills_the_cache_past_its_budget() {
    let dir = tempfile::tempdir().unwrap();
    load(dir.path());
    let budget = 256 << 10;
    let db = Db::open(dir.path(), opts(budget, true)).unwrap();
    let cached = warmed(&db);
    let s = db.stats();
    assert!(cached > 0 && cached <= budget as u64, "warmed {cached} of {budget}");
    assert!(s.cache_bytes <= budget as u64, "cache holds {} of {budget}", s.cache_bytes);
    for i in 0..N {
        assert_eq!(db.get(&key(i)).unwrap(), Some(expected(i)), "key {i}");
    }
}

/// A store small enough for one leaf has an SST of height 0: its root is its only leaf, at
/// offset 0, and it has no index nodes. The warm-up warms it like any other and goes on to
/// the logs, instead of taking it for corruption ("root outside the index area") and
/// stopping there.
#[test]
fn a_single_leaf_sst_is_warmed_like_any_other() {
    let dir = tempfile::tempdir().unwrap();
    let n = 12;
    {
        let db = Db::open(dir.path(), opts(8 << 20, true)).unwrap();
        for i in 0..n {
            db.put(&key(i), &value(i)).unwrap();
        }
        db.compact().unwrap();
        let s = db.stats();
        assert_eq!(s.levels.iter().map(|l| l.ssts).sum::<usize>(), 1, "{:?}", s.levels);
        // Nothing pinned but the filter: an index would take a whole node.
        let pinned: u64 = s.levels.iter().map(|l| l.pinned_bytes).sum();
        assert!(pinned > 0 && pinned < db.options().node_bytes as u64, "pinned {pinned}");
    }
    let db = Db::open(dir.path(), opts(8 << 20, true)).unwrap();
    let cached = warmed(&db);
    assert!(cached > 0, "the warm-up stopped at the SST");
    let reads = read_by(&db, "reads");
    for i in 0..n {
        assert_eq!(db.get(&key(i)).unwrap(), Some(value(i)), "key {i}");
    }
    assert_eq!(read_by(&db, "reads"), reads, "a read went to the device");
}
