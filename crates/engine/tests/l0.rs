//! L0 keeps one version of a key: a write that supersedes a version in the table lets it go
//! once no reader can see it, so repeated updates of a hot key set fill the L0 log, not the
//! table. Snapshots still see what they saw, and dropped large values are still garbage GC
//! finds.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    missing_docs,
    reason = "test code: a failure stops where it happened"
)]

use halyard_engine::{Db, Options, ScanOptions};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

fn key(i: u32) -> Vec<u8> {
    format!("key{:08}", i).into_bytes()
}

/// A table of 256 KiB whose log may grow to 64 MiB; GC only when asked.
fn opts() -> Options {
    Options { l0_bytes: 256 << 10, max_l0_log_bytes: Some(64 << 20), gc_interval_ms: 3_600_000, ..Options::tiny() }
}

#[test]
fn updates_of_a_hot_key_set_do_not_fill_l0() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), opts()).unwrap();
    // 100 keys take ~10 KiB of the table; 300 rounds are 30,000 versions of ~90 table bytes,
    // ten tables' worth if every version stayed.
    for round in 0..300u32 {
        for i in 0..100 {
            db.put(&key(i), format!("v{round}").as_bytes()).unwrap();
        }
    }
    let s = db.stats();
    assert_eq!(s.compactions, 0, "the table never filled: {s:?}");
    assert!(s.l0_versions_dropped > 25_000, "{s:?}");
    assert!(s.l0_bytes < 64 << 10, "{s:?}");
    for i in 0..100 {
        assert_eq!(db.get(&key(i)).unwrap(), Some(b"v299".to_vec()), "key {i}");
    }
    // After a restart the table is rebuilt from the log with one version per key as well.
    drop(db);
    let db = Db::open(dir.path(), opts()).unwrap();
    assert!(db.stats().l0_bytes < 64 << 10);
    for i in 0..100 {
        assert_eq!(db.get(&key(i)).unwrap(), Some(b"v299".to_vec()), "key {i}");
    }
}

#[test]
fn the_l0_log_bounds_a_table() {
    let dir = tempfile::tempdir().unwrap();
    let o = Options { max_l0_log_bytes: Some(4 * Options::tiny().segment_bytes), ..opts() };
    let db = Db::open(dir.path(), o.clone()).unwrap();
    for round in 0..300u32 {
        for i in 0..100 {
            db.put(&key(i), format!("v{round}").as_bytes()).unwrap();
        }
    }
    // 30,000 records of ~55 bytes are 1.6 MiB of log, 256 KiB per table: the tables switch
    // although each holds ~10 KiB of distinct pairs.
    assert!(db.stats().compactions >= 5, "{:?}", db.stats());
    for i in 0..100 {
        assert_eq!(db.get(&key(i)).unwrap(), Some(b"v299".to_vec()), "key {i}");
    }
    drop(db);
    let db = Db::open(dir.path(), o).unwrap();
    for i in 0..100 {
        assert_eq!(db.get(&key(i)).unwrap(), Some(b"v299".to_vec()), "key {i}");
    }
}

#[test]
fn snapshots_keep_the_versions_they_read() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), opts()).unwrap();
    for i in 0..100 {
        db.put(&key(i), b"old").unwrap();
    }
    let snap = db.snapshot();
    for round in 0..200u32 {
        for i in 0..100 {
            db.put(&key(i), format!("v{round}").as_bytes()).unwrap();
        }
    }
    for i in 0..100 {
        assert_eq!(snap.get(&key(i)).unwrap(), Some(b"old".to_vec()), "key {i}");
    }
    let seen: Vec<_> = snap.scan(key(0)..key(100)).map(|r| r.unwrap().1).collect();
    assert_eq!(seen, vec![b"old".to_vec(); 100]);
    // While the snapshot lives nothing it could read goes; after, the versions do.
    let held = db.stats().l0_versions_dropped;
    assert_eq!(held, 0, "the snapshot's view keeps every version it may read");
    drop(snap);
    for i in 0..100 {
        db.put(&key(i), b"new").unwrap();
    }
    for _ in 0..50 {
        for i in 0..100 {
            db.put(&key(i), b"newer").unwrap();
        }
    }
    assert!(db.stats().l0_versions_dropped > held);
    assert_eq!(db.get(&key(7)).unwrap(), Some(b"newer".to_vec()));
}

#[test]
fn readers_never_see_a_key_go_back_while_versions_are_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let db = Arc::new(Db::open(dir.path(), opts()).unwrap());
    let keys = 16u32;
    for i in 0..keys {
        db.put(&key(i), &0u64.to_be_bytes()).unwrap();
    }
    let stop = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let (db, stop) = (db.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut last = vec![0u64; keys as usize];
                let mut reads = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    for i in 0..keys {
                        let v = db.get(&key(i)).unwrap().expect("every key exists");
                        let n = u64::from_be_bytes(v.try_into().unwrap());
                        assert!(n >= last[i as usize], "key {i} went back from {} to {n}", last[i as usize]);
                        last[i as usize] = n;
                        reads += 1;
                    }
                }
                reads
            })
        })
        .collect();
    let writers: Vec<_> = (0..2u32)
        .map(|w| {
            let db = db.clone();
            std::thread::spawn(move || {
                // Each writer owns half the keys and writes increasing numbers to them.
                for n in 1..=4000u64 {
                    for i in (w..keys).step_by(2) {
                        db.put(&key(i), &n.to_be_bytes()).unwrap();
                    }
                }
            })
        })
        .collect();
    for w in writers {
        w.join().unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    for r in readers {
        assert!(r.join().unwrap() > 0);
    }
    assert!(db.stats().l0_versions_dropped > 10_000, "{:?}", db.stats());
    for i in 0..keys {
        assert_eq!(db.get(&key(i)).unwrap(), Some(4000u64.to_be_bytes().to_vec()));
    }
    let all = db.scan_with(key(0)..key(keys), ScanOptions::default()).count();
    assert_eq!(all, keys as usize);
}

#[test]
fn large_values_dropped_in_l0_are_garbage_gc_reclaims() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), Options { gc_threshold: 0.05, ..opts() }).unwrap();
    let value = |i: u32, round: u32| vec![(i + round) as u8; 400];
    for round in 0..40u32 {
        for i in 0..50 {
            db.put(&key(i), &value(i, round)).unwrap();
        }
    }
    assert!(db.stats().l0_versions_dropped > 1_000);
    db.flush().unwrap();
    let s = db.stats();
    // 39 of every 40 large records are dead: the merge reported them although L0 had
    // dropped most of them before it ran.
    assert!(s.large_garbage_bytes > 39 * 50 * 400 * 9 / 10, "{s:?}");
    assert!(db.gc().unwrap() > 0, "GC reclaims the dead records' segments");
    for i in 0..50 {
        assert_eq!(db.get(&key(i)).unwrap(), Some(value(i, 39)), "key {i}");
    }
}

#[test]
fn superseded_large_values_switch_the_table_before_their_garbage_piles_up() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), opts()).unwrap();
    // Updates of 50 large values keep the table at 50 versions, but every update leaves ~440
    // dead bytes in the large log that GC can reclaim only after the table's compaction:
    // 80 rounds leave 1.7 MiB, past the bound of four tables (1 MiB).
    for round in 0..80u32 {
        for i in 0..50 {
            db.put(&key(i), &vec![round as u8; 400]).unwrap();
        }
    }
    // The table never fills (256 KiB): it holds 50 live versions plus the superseded ones
    // not yet removed, up to two prune batches of 64 KiB when a background thread still holds
    // an older view (their removal waits for its readers).
    let l0 = db.stats().l0_bytes;
    assert!(l0 < 192 << 10, "L0 holds {l0} bytes");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while db.stats().compactions == 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let s = db.stats();
    assert!(s.compactions >= 1, "the table was switched and compacted though it never filled: {s:?}");
    assert!(s.large_garbage_bytes > 1 << 20, "the compaction reported the dead records: {s:?}");
    for i in 0..50 {
        assert_eq!(db.get(&key(i)).unwrap(), Some(vec![79u8; 400]), "key {i}");
    }
}

/// A merge cut by key range (`Options::l0_merge_parts`) writes what one merge would: every
/// key's newest value, small, medium and large, after merges into a grown L1, and after a
/// reopen.
#[test]
fn an_l0_merge_cut_into_parts_keeps_every_key() {
    use rand::{Rng, SeedableRng};
    let dir = tempfile::tempdir().unwrap();
    let o = Options { dranges: 8, l0_merge_parts: 4, growth_factor: 16, ..Options::tiny() };
    let db = Db::open(dir.path(), o.clone()).unwrap();
    let mut model = std::collections::BTreeMap::new();
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    for i in 0..30_000u32 {
        let k = key(rng.gen_range(0..6_000));
        if i % 17 == 0 {
            db.delete(&k).unwrap();
            model.remove(&k);
            continue;
        }
        let len = [8, 8, 8, 200, 900][rng.gen_range(0..5)];
        let v = format!("{i:>len$}").into_bytes();
        db.put(&k, &v).unwrap();
        model.insert(k, v);
    }
    db.compact().unwrap();
    let check = |db: &Db| {
        let got: Vec<_> = db.scan(..).map(|r| r.unwrap()).collect();
        let want: Vec<_> = model.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        assert_eq!(got.len(), want.len());
        assert!(got == want, "the scan differs from the model");
        for (k, v) in model.iter().step_by(7) {
            assert_eq!(db.get(k).unwrap().as_ref(), Some(v));
        }
    };
    check(&db);
    let parts = db.stats().l0_merge_parts;
    assert!(parts >= 4, "no L0 merge was cut into parts: {:?}", db.stats());
    drop(db);
    let db = Db::open(dir.path(), o).unwrap();
    check(&db);
}
