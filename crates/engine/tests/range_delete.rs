//! Range deletes: one record whatever the number of keys, seen by gets, scans and snapshots at
//! its LSN, kept through a reopen (L0 log replay, then the catalog), and applied by
//! compactions: the versions it hides are dropped, the SSTs it hides whole are freed without
//! being read, the log values it kills become garbage, and the delete itself goes once it hides
//! nothing.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    missing_docs,
    reason = "test code: a failure stops where it happened"
)]

use halyard_engine::{Db, Error, Options, WriteBatch};

fn key(i: u32) -> Vec<u8> {
    format!("key{i:06}").into_bytes()
}

fn keys(db: &Db) -> Vec<Vec<u8>> {
    db.scan(..).map(|r| r.expect("scan").0).collect()
}

fn read_by(db: &Db, kind: &str) -> u64 {
    db.stats().read_bytes_by.iter().find(|(k, _)| *k == kind).map_or(0, |(_, b)| *b)
}

fn written_by(db: &Db, kind: &str) -> u64 {
    db.stats().write_bytes_by.iter().find(|(k, _)| *k == kind).map_or(0, |(_, b)| *b)
}

/// Flushes and compacts until the range deletes are gone (each pass may free what the last
/// one left).
fn settle(db: &Db) {
    for _ in 0..20 {
        db.flush().expect("flush");
        db.compact().expect("compact");
        if db.stats().range_dels == 0 {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    panic!("range deletes still held: {}", db.stats().range_dels);
}

#[test]
fn a_range_delete_is_one_record_seen_at_its_lsn() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = Db::open(dir.path(), Options::tiny()).expect("open");
    for i in 0..3000 {
        db.put(&key(i), b"v").expect("put");
    }
    db.flush().expect("flush");
    // Some keys in L0, over older versions in the levels.
    for i in (0..3000).step_by(7) {
        db.put(&key(i), b"newer").expect("put");
    }
    let before = db.snapshot();
    let logged = written_by(&db, "l0_log");
    db.delete_range(&key(100), &key(2900)).expect("delete range");
    let s = db.stats();
    assert_eq!(s.range_deletes, 1);
    // One record (the log writes out at most a few aligned chunks for it), not 2800 tombstones.
    assert!(written_by(&db, "l0_log") - logged < 16 << 10, "the delete wrote {} log bytes", s.write_bytes_by.len());
    assert_eq!(db.get(&key(99)).expect("get"), Some(b"v".to_vec()));
    assert_eq!(db.get(&key(100)).expect("get"), None);
    assert_eq!(db.get(&key(2898)).expect("get"), None, "a version in L0");
    assert_eq!(db.get(&key(2900)).expect("get"), Some(b"v".to_vec()), "the end is not deleted");
    assert_eq!(keys(&db).len(), 200);
    let rev: Vec<_> = db.scan_with(.., halyard_engine::ScanOptions { reverse: true, limit: Some(3) }).collect();
    assert_eq!(rev.len(), 3);
    // The snapshot from before still sees every key.
    assert_eq!(before.get(&key(500)).expect("snapshot get"), Some(b"v".to_vec()));
    assert_eq!(before.scan(..).count(), 3000);
    // A write after the delete is live again.
    db.put(&key(500), b"again").expect("put");
    assert_eq!(db.get(&key(500)).expect("get"), Some(b"again".to_vec()));
    let mut b = WriteBatch::new();
    b.put(key(600), b"in a batch").delete_range(key(600), key(700)).put(key(650), b"after");
    db.write(&b).expect("batch");
    assert_eq!(db.get(&key(600)).expect("get"), None, "put before the batch's range delete");
    assert_eq!(db.get(&key(650)).expect("get"), Some(b"after".to_vec()));
    assert!(matches!(db.delete_range(&key(5), &key(5)), Err(Error::EmptyRange)));
    assert!(matches!(db.delete_range(&key(6), &key(5)), Err(Error::EmptyRange)));
}

#[test]
fn a_range_delete_survives_reopens_before_and_after_its_table_is_compacted() {
    let dir = tempfile::tempdir().expect("tempdir");
    {
        let db = Db::open(dir.path(), Options::tiny()).expect("open");
        for i in 0..2000 {
            db.put(&key(i), b"v").expect("put");
        }
        db.flush().expect("flush");
        db.delete_range(&key(10), &key(20)).expect("delete range");
        // Closed with the delete in L0 only: its log record brings it back.
    }
    let db = Db::open(dir.path(), Options::tiny()).expect("reopen");
    assert_eq!(db.get(&key(15)).expect("get"), None);
    assert_eq!(keys(&db).len(), 1990);
    db.delete_range(&key(1000), &key(1500)).expect("delete range");
    db.flush().expect("flush");
    drop(db);
    // From the catalog now.
    let db = Db::open(dir.path(), Options::tiny()).expect("reopen");
    assert_eq!(db.get(&key(1200)).expect("get"), None);
    assert_eq!(keys(&db).len(), 1490);
    settle(&db);
    assert_eq!(keys(&db).len(), 1490);
    drop(db);
    let db = Db::open(dir.path(), Options::tiny()).expect("reopen");
    assert_eq!(keys(&db).len(), 1490);
    assert_eq!(db.stats().range_dels, 0);
}

#[test]
fn hidden_ssts_are_freed_without_reading_them_and_the_delete_then_goes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = Db::open(dir.path(), Options::tiny()).expect("open");
    // Small pairs only: an SST of them points into no log.
    for i in 0..20_000 {
        db.put(&key(i), format!("value-{i}").as_bytes()).expect("put");
    }
    db.flush().expect("flush");
    db.compact().expect("compact");
    let used = db.stats().space_allocated_bytes;
    let read = read_by(&db, "compaction_read");
    db.delete_range(&key(1000), &key(19_000)).expect("delete range");
    settle(&db);
    let s = db.stats();
    assert!(s.range_ssts_freed > 5, "{} SSTs freed whole", s.range_ssts_freed);
    // Only the SSTs at the range's two ends are merged (read); the freed ones are not.
    let merged = read_by(&db, "compaction_read") - read;
    let freed = s.range_ssts_freed * (64 << 10);
    assert!(merged < freed / 2, "compactions read {merged} bytes for {freed} bytes of SSTs freed");
    assert!(s.space_allocated_bytes < used / 2, "space {} of {used} before", s.space_allocated_bytes);
    assert_eq!(keys(&db).len(), 2000);
    assert_eq!(db.get(&key(999)).expect("get"), Some(b"value-999".to_vec()));
}

#[test]
fn medium_and_large_values_of_deleted_keys_become_garbage() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = Db::open(dir.path(), Options { gc_threshold: 0.2, ..Options::tiny() }).expect("open");
    for i in 0..600 {
        let len = if i % 2 == 0 { 120 } else { 2000 };
        db.put(&key(i), &vec![b'x'; len]).expect("put");
    }
    db.flush().expect("flush");
    db.compact().expect("compact");
    let used = db.stats().space_allocated_bytes;
    db.delete_range(&key(0), &key(590)).expect("delete range");
    settle(&db);
    db.gc().expect("gc");
    let s = db.stats();
    assert!(s.space_allocated_bytes < used / 2, "space {} of {used} before", s.space_allocated_bytes);
    assert_eq!(keys(&db).len(), 10);
    assert_eq!(db.get(&key(595)).expect("get").map(|v| v.len()), Some(2000));
}

#[test]
fn cached_rows_do_not_outlive_a_range_delete() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = Db::open(dir.path(), Options::tiny()).expect("open");
    for i in 0..3000 {
        db.put(&key(i), b"v").expect("put");
    }
    db.flush().expect("flush");
    db.compact().expect("compact");
    // Read from the levels: rows enter the row cache.
    for _ in 0..3 {
        assert_eq!(db.get(&key(1500)).expect("get"), Some(b"v".to_vec()));
    }
    db.delete_range(&key(1400), &key(1600)).expect("delete range");
    assert_eq!(db.get(&key(1500)).expect("get"), None);
    settle(&db);
    assert_eq!(db.get(&key(1500)).expect("get"), None, "a cached row came back");
    db.put(&key(1500), b"new").expect("put");
    assert_eq!(db.get(&key(1500)).expect("get"), Some(b"new".to_vec()));
}

#[test]
fn a_range_over_several_regions_is_split_between_them() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = Db::open(dir.path(), Options { default_region: false, ..Options::tiny() }).expect("open");
    db.create_region(1, b"", Some(&key(500))).expect("region 1");
    let second = db.create_region(2, &key(500), None).expect("region 2");
    for i in 0..1000 {
        db.put(&key(i), b"v").expect("put");
    }
    db.delete_range(&key(400), &key(600)).expect("delete range");
    assert_eq!(keys(&db).len(), 800);
    // A region takes only a range inside it.
    assert!(matches!(second.delete_range(&key(100), &key(700)), Err(Error::KeyOutOfRegion(2))));
    assert!(second.delete_range(&key(700), &key(800)).is_ok());
    assert_eq!(keys(&db).len(), 700);
}
