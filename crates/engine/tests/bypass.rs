//! The LSM bypass: point reads of keys whose newest version keeps its value in the medium or
//! large log go straight to the record, and come back exactly as through the tree across
//! updates to inline values, deletes, range deletes, expiry, GC moves, snapshots, reopens and
//! a memory bound.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    missing_docs,
    reason = "test code: a failure stops where it happened"
)]

use halyard_engine::{Clock, Db, Options};
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::sync::Arc;

const T0: u64 = 1_700_000_000_000;

fn key(i: u32) -> Vec<u8> {
    format!("key{i:06}").into_bytes()
}

fn value(i: u32, round: u32) -> Vec<u8> {
    // Medium (tiny options: 40..200 bytes) and large pairs.
    let len = if i.is_multiple_of(2) { 150 } else { 1500 };
    let mut v = format!("{round}-{i}-").into_bytes();
    v.resize(len, b'a' + (i % 26) as u8);
    v
}

fn opts(clock: &Arc<AtomicU64>, bypass_bytes: usize) -> Options {
    let c = clock.clone();
    Options {
        lsm_bypass_bytes: bypass_bytes,
        // A cache too small for the values: reads reach the device.
        cache_bytes: 64 << 10,
        clock: Some(Clock(Arc::new(move || c.load(SeqCst)))),
        ..Options::tiny()
    }
}

fn reads(db: &Db) -> u64 {
    db.stats().read_bytes_by.iter().find(|(k, _)| *k == "reads").map_or(0, |(_, b)| *b)
}

/// Opens, loads 2000 pairs, compacts, and waits for the bypass to be filled.
fn loaded(dir: &std::path::Path, clock: &Arc<AtomicU64>, bypass_bytes: usize) -> Db {
    let db = Db::open(dir, opts(clock, bypass_bytes)).expect("open");
    for i in 0..2000 {
        db.put(&key(i), &value(i, 0)).expect("put");
    }
    db.compact().expect("compact");
    db
}

#[test]
fn reads_go_to_the_record_and_follow_every_change() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = Arc::new(AtomicU64::new(T0));
    let db = loaded(dir.path(), &clock, 1 << 20);
    let s = db.stats();
    // Every large value; medium ones merged back in place at the last level have none.
    assert!(s.bypass_slots >= 1000, "{} slots", s.bypass_slots);
    for i in (0..2000).step_by(7) {
        assert_eq!(db.get(&key(i)).expect("get"), Some(value(i, 0)));
    }
    // At least every large one.
    assert!(db.stats().bypass_hits >= 143, "{} hits", db.stats().bypass_hits);
    let snap = db.snapshot();
    // Inline values, deletes, a range delete, expiry and new log values over the slots.
    for i in 0..100 {
        db.put(&key(i), b"small").expect("put");
    }
    for i in 100..200 {
        db.delete(&key(i)).expect("delete");
    }
    db.delete_range(&key(200), &key(300)).expect("delete range");
    for i in 300..400 {
        db.put_expiring(&key(i), &value(i, 1), T0 + 1000).expect("put expiring");
    }
    for i in 400..500 {
        db.put(&key(i), &value(i, 2)).expect("put");
    }
    let check = |db: &Db, expired: bool| {
        for i in 0..600 {
            let want = match i {
                0..100 => Some(b"small".to_vec()),
                100..300 => None,
                300..400 if expired => None,
                300..400 => Some(value(i, 1)),
                400..500 => Some(value(i, 2)),
                _ => Some(value(i, 0)),
            };
            assert_eq!(db.get(&key(i)).expect("get"), want, "key {i}");
        }
    };
    check(&db, false);
    db.compact().expect("compact");
    check(&db, false);
    clock.store(T0 + 1000, SeqCst);
    check(&db, true);
    // The snapshot reads through the tree, as of before.
    assert_eq!(snap.get(&key(50)).expect("snapshot get"), Some(value(50, 0)));
    assert_eq!(snap.get(&key(450)).expect("snapshot get"), Some(value(450, 0)));
    drop(snap);
    // GC moves large values: the slots follow their records.
    for i in (1..2000).step_by(2).filter(|i| *i >= 600) {
        db.put(&key(i), &value(i, 3)).expect("put");
    }
    db.compact().expect("compact");
    db.gc().expect("gc");
    db.compact().expect("compact");
    for i in (600..2000u32).step_by(3) {
        let want = if i.is_multiple_of(2) { value(i, 0) } else { value(i, 3) };
        assert_eq!(db.get(&key(i)).expect("get"), Some(want), "key {i} after GC");
    }
    assert_eq!(db.stats().bypass_fallbacks, 0, "no slot led to another record");
    // A reopen fills the bypass again from the levels.
    drop(db);
    let db = Db::open(dir.path(), opts(&clock, 1 << 20)).expect("reopen");
    db.compact().expect("compact");
    check(&db, true);
    assert!(db.stats().bypass_hits > 0);
}

#[test]
fn a_read_through_the_bypass_reads_less_of_the_device() {
    let clock = Arc::new(AtomicU64::new(T0));
    let per_get = |bypass_bytes: usize| {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = loaded(dir.path(), &clock, bypass_bytes);
        let before = reads(&db);
        // Large values only: the cache cannot hold them, so every read reaches the device.
        let n = (1..2000).step_by(2).map(|i| assert_eq!(db.get(&key(i)).unwrap(), Some(value(i, 0)))).count();
        (reads(&db) - before) / n as u64
    };
    let (tree, bypass) = (per_get(0), per_get(1 << 20));
    assert!(bypass < tree, "device bytes per get: {bypass} through the bypass, {tree} through the tree");
}

#[test]
fn the_bypass_keeps_within_its_memory() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = Arc::new(AtomicU64::new(T0));
    let db = loaded(dir.path(), &clock, 100 * 64);
    let s = db.stats();
    assert!(s.bypass_bytes <= 100 * 64 && s.bypass_slots > 0, "{} slots, {} bytes", s.bypass_slots, s.bypass_bytes);
    for i in (0..2000).step_by(3) {
        assert_eq!(db.get(&key(i)).expect("get"), Some(value(i, 0)), "key {i}");
    }
}
