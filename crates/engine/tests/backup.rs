//! Checkpoints and backups of a live store: taken while a writer goes on, each holds exactly
//! the writes up to its LSN; a second backup copies only new segments; a damaged segment file
//! is refused at restore with the segment named.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    missing_docs,
    reason = "test code: a failure stops where it happened"
)]

use halyard_engine::{restore, Db, Error, Options};
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};

/// Every write of the writer: (LSN, key, value; None for a delete).
type Log = Mutex<Vec<(u64, Vec<u8>, Option<Vec<u8>>)>>;

fn opts() -> Options {
    Options { gc_interval_ms: 20, ..Options::tiny() }
}

fn value(i: u64) -> Vec<u8> {
    // Small, medium and large pairs under Options::tiny's thresholds.
    let mut v = format!("v{i}-").into_bytes();
    v.resize([8usize, 100, 700][(i % 3) as usize], b'a' + (i % 26) as u8);
    v
}

/// Writes (and now and then deletes) keys of a small set until `stop`, logging each LSN.
fn writer(db: &Db, log: &Log, stop: &AtomicBool) {
    let region = db.region(0).expect("default region");
    let mut i = 0u64;
    while !stop.load(SeqCst) || i < 3000 {
        let k = format!("key{:04}", (i * 7) % 900).into_bytes();
        let (lsn, v) = if i.is_multiple_of(11) {
            (region.delete(&k).expect("delete"), None)
        } else {
            let v = value(i);
            (region.put(&k, &v).expect("put"), Some(v))
        };
        log.lock().push((lsn, k, v));
        i += 1;
    }
}

/// The store's contents after every logged write up to `lsn`.
fn model(log: &Log, lsn: u64) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut m = BTreeMap::new();
    let mut writes = log.lock().clone();
    writes.sort_by_key(|w| w.0);
    for (l, k, v) in writes {
        if l > lsn {
            break;
        }
        match v {
            Some(v) => m.insert(k, v),
            None => m.remove(&k),
        };
    }
    m.into_iter().collect()
}

fn contents(dir: &std::path::Path) -> Vec<(Vec<u8>, Vec<u8>)> {
    let db = Db::open(dir, opts()).expect("open the copy");
    db.scan(..).map(|r| r.expect("scan")).collect()
}

/// Runs `copy` on `db` while the writer writes; returns what it returned.
fn during_writes<T>(db: &Db, log: &Log, copy: impl FnOnce() -> T) -> T {
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| writer(db, log, &stop));
        // Let the writer fill a few tables first: the copy then spans SSTs and all three logs.
        while log.lock().len() < 1500 {
            std::thread::yield_now();
        }
        let out = copy();
        stop.store(true, SeqCst);
        out
    })
}

#[test]
fn a_checkpoint_taken_during_writes_opens_at_its_lsn() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = Db::open(dir.path().join("store"), opts()).expect("open");
    let log = Log::default();
    let report = during_writes(&db, &log, || db.checkpoint(dir.path().join("ckpt")).expect("checkpoint"));
    let (region, lsn) = report.lsns[0];
    assert_eq!(region, 0);
    assert!(lsn > 0 && report.segments > 0, "{report:?}");
    assert!(log.lock().iter().any(|w| w.0 > lsn), "the writer went on past the checkpoint's LSN");
    eprintln!("checkpoint: {report:?}");
    assert_eq!(contents(&dir.path().join("ckpt")), model(&log, lsn));
    assert!(db.checkpoint(dir.path().join("ckpt")).is_err(), "a checkpoint over a store is refused");
}

#[test]
fn backups_are_incremental_and_restore_at_their_lsn() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = Db::open(dir.path().join("store"), opts()).expect("open");
    let bk = dir.path().join("backups");
    let log = Log::default();
    let first = during_writes(&db, &log, || db.backup(&bk).expect("backup"));
    assert_eq!(first.backup, 1);
    assert_eq!(first.bytes_reused, 0, "{first:?}");
    restore(&bk, Some(1), dir.path().join("r1")).expect("restore");
    assert_eq!(contents(&dir.path().join("r1")), model(&log, first.lsns[0].1));

    // A few updates: the second backup copies their log tail and what compactions made of
    // them, and takes every other segment from the first.
    db.flush().expect("flush");
    let settled = db.backup(&bk).expect("backup");
    for i in 0..20u64 {
        db.put(format!("key{i:04}").as_bytes(), b"updated").expect("put");
    }
    let before: std::collections::BTreeSet<_> =
        std::fs::read_dir(bk.join("segments")).expect("ls").map(|e| e.expect("entry").file_name()).collect();
    let third = db.backup(&bk).expect("backup");
    let added: u64 = std::fs::read_dir(bk.join("segments"))
        .expect("ls")
        .map(|e| e.expect("entry"))
        .filter(|e| !before.contains(&e.file_name()))
        .map(|e| e.metadata().expect("stat").len())
        .sum();
    eprintln!("backups: {first:?}\n{settled:?}\n{third:?}");
    assert_eq!((settled.backup, third.backup), (2, 3));
    assert_eq!(third.bytes_copied, added, "the bytes copied are the new segment files");
    assert!(third.bytes_reused > 0 && third.bytes_copied < third.bytes_reused, "{third:?}");
    restore(&bk, None, dir.path().join("r3")).expect("restore the newest");
    let now: Vec<_> = db.scan(..).map(|r| r.expect("scan")).collect();
    assert_eq!(contents(&dir.path().join("r3")), now);
    assert!(restore(&bk, None, dir.path().join("r3")).is_err(), "a restore over a store is refused");
}

#[test]
fn a_damaged_segment_file_is_refused_at_restore_with_its_segment_named() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = Db::open(dir.path().join("store"), opts()).expect("open");
    for i in 0..3000u64 {
        db.put(format!("key{:04}", i % 900).as_bytes(), &value(i)).expect("put");
    }
    let bk = dir.path().join("backups");
    db.backup(&bk).expect("backup");
    let victim = std::fs::read_dir(bk.join("segments")).expect("ls").next().expect("a segment file").expect("entry");
    let mut bytes = std::fs::read(victim.path()).expect("read");
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x20;
    std::fs::write(victim.path(), bytes).expect("write");
    let seg: u64 = victim.file_name().to_string_lossy()[..8].parse().expect("segment number");
    match restore(&bk, None, dir.path().join("r")) {
        Err(Error::Corruption { segment, what, .. }) => {
            assert_eq!(segment, seg);
            assert!(what.contains(&victim.file_name().to_string_lossy().to_string()), "{what}");
        }
        other => panic!("restore of a damaged backup: {other:?}"),
    }
}
