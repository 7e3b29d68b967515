//! Pairs that expire: invisible to gets, scans and snapshots from their time on, kept with their
//! time through a reopen (L0 log replay) and through compactions, dropped by compactions once
//! expired (with a tombstone while an older version lies below), and their large-log records
//! counted as garbage.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    missing_docs,
    reason = "test code: a failure stops where it happened"
)]

use halyard_engine::{Clock, Db, Options, WriteBatch};
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::sync::Arc;
use std::time::Duration;

const T0: u64 = 1_700_000_000_000;

fn open(dir: &std::path::Path, clock: &Arc<AtomicU64>) -> Db {
    let c = clock.clone();
    let opts = Options { clock: Some(Clock(Arc::new(move || c.load(SeqCst)))), ..Options::tiny() };
    Db::open(dir, opts).expect("open")
}

fn keys(db: &Db) -> Vec<Vec<u8>> {
    db.scan(..).map(|r| r.expect("scan").0).collect()
}

#[test]
fn expired_pairs_vanish_from_gets_scans_and_snapshots() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = Arc::new(AtomicU64::new(T0));
    let db = open(dir.path(), &clock);
    let large = vec![b'L'; 5000];
    db.put(b"a", b"forever").expect("put");
    db.put_expiring(b"b", b"small", T0 + 100).expect("put");
    db.put_expiring(b"c", &large, T0 + 200).expect("put large");
    let mut batch = WriteBatch::new();
    batch.put_expiring(b"d", b"in a batch", T0 + 100).put(b"e", b"plain");
    db.write(&batch).expect("batch");
    assert_eq!(db.get_with_expiry(b"b").expect("get"), Some((b"small".to_vec(), T0 + 100)));
    assert_eq!(db.get_with_expiry(b"a").expect("get"), Some((b"forever".to_vec(), 0)));
    assert_eq!(db.get(b"c").expect("get"), Some(large.clone()));
    let snap = db.snapshot();

    clock.store(T0 + 100, SeqCst);
    assert_eq!(db.get(b"b").expect("get"), None, "expired at its time");
    assert_eq!(db.get(b"d").expect("get"), None);
    assert_eq!(db.get_with_expiry(b"b").expect("get"), None);
    assert_eq!(keys(&db), vec![b"a".to_vec(), b"c".to_vec(), b"e".to_vec()]);
    // A snapshot reads at its LSN, but by the clock of now.
    assert_eq!(snap.get(b"b").expect("snapshot get"), None);
    assert_eq!(snap.scan(..).count(), 3);

    // A later plain put makes the key live again, without expiry.
    db.put(b"b", b"again").expect("put");
    clock.store(T0 + 10_000, SeqCst);
    assert_eq!(db.get_with_expiry(b"b").expect("get"), Some((b"again".to_vec(), 0)));
    assert_eq!(keys(&db), vec![b"a".to_vec(), b"b".to_vec(), b"e".to_vec()]);
    assert!(db.put_with_ttl(b"f", b"ttl", Duration::from_secs(5)).is_ok());
    assert_eq!(db.get_with_expiry(b"f").expect("get").map(|x| x.1), Some(T0 + 15_000));
}

/// An expired pair merged above a level that holds an older version of its key leaves a
/// tombstone, not nothing: the older version must not come back.
#[test]
fn an_expired_pair_does_not_uncover_an_older_version_below() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = Arc::new(AtomicU64::new(T0));
    let db = open(dir.path(), &clock);
    let n = 3000u32;
    let k = |i: u32| format!("key{i:05}").into_bytes();
    for i in 0..n {
        db.put(&k(i), &[b'o'; 90]).expect("put");
    }
    db.compact().expect("compact");
    let deep = db.stats().levels.iter().filter(|l| l.ssts > 0).count();
    assert!(deep >= 2, "the old versions fill more than one level: {:?}", db.stats().levels);
    for i in 0..n {
        db.put_expiring(&k(i), b"new", T0 + 10).expect("put");
    }
    db.flush().expect("flush");
    clock.store(T0 + 10, SeqCst);
    for round in 0..3u32 {
        for i in (round..n).step_by(50) {
            db.put(format!("key{i:05}x").as_bytes(), b"x").expect("put");
        }
        db.compact().expect("compact");
    }
    assert!(db.stats().expired_dropped > 0, "no compaction met an expired pair");
    for i in 0..n {
        assert_eq!(db.get(&k(i)).expect("get"), None, "key {i}: an older version came back");
    }
}

#[test]
fn expiry_survives_a_reopen_and_compactions_drop_what_expired() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = Arc::new(AtomicU64::new(T0));
    let large = vec![b'L'; 3000];
    {
        let db = open(dir.path(), &clock);
        // Older versions that must not come back when the newer, expiring ones go.
        for i in 0..200u32 {
            db.put(format!("k{i:04}").as_bytes(), b"old").expect("put");
        }
        db.flush().expect("flush");
        db.compact().expect("compact");
        for i in 0..200u32 {
            let k = format!("k{i:04}");
            let v = if i % 2 == 0 { large.clone() } else { b"new".to_vec() };
            db.put_expiring(k.as_bytes(), &v, T0 + 1000 + u64::from(i % 4) * 1000).expect("put");
        }
    }
    // The L0 log replays the times.
    let db = open(dir.path(), &clock);
    assert_eq!(db.get_with_expiry(b"k0003").expect("get"), Some((b"new".to_vec(), T0 + 4000)));
    assert_eq!(db.get_with_expiry(b"k0002").expect("get"), Some((large.clone(), T0 + 3000)));
    // Through a compaction before they expire: kept, with their times.
    db.flush().expect("flush");
    db.compact().expect("compact");
    assert_eq!(db.get_with_expiry(b"k0001").expect("get"), Some((b"new".to_vec(), T0 + 2000)));
    assert_eq!(keys(&db).len(), 200);
    assert_eq!(db.stats().expired_dropped, 0);

    // Half of them expire; compactions drop them and the old versions stay hidden.
    clock.store(T0 + 2500, SeqCst);
    let live: Vec<Vec<u8>> = (0..200u32).filter(|i| i % 4 >= 2).map(|i| format!("k{i:04}").into_bytes()).collect();
    assert_eq!(keys(&db), live);
    // Keys spread over the range, so that the next merge takes in the SSTs holding them.
    let mut want = live.clone();
    for i in (0..200u32).step_by(10) {
        let k = format!("k{i:04}x").into_bytes();
        db.put(&k, b"x").expect("put");
        want.push(k);
    }
    want.sort();
    db.flush().expect("flush");
    db.compact().expect("compact");
    let s = db.stats();
    assert!(s.expired_dropped > 0, "compactions dropped no expired pair");
    assert_eq!(keys(&db), want);
    for i in 0..200u32 {
        let k = format!("k{i:04}");
        assert_eq!(db.get(k.as_bytes()).expect("get").is_some(), i % 4 >= 2, "{k}");
    }
    drop(db);
    let db = open(dir.path(), &clock);
    assert_eq!(keys(&db), want, "after a reopen");
    clock.store(T0 + 100_000, SeqCst);
    assert_eq!(keys(&db).len(), 20);
}
