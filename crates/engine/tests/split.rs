//! Region splits: a region cut at a key reads as before on both sides, takes writes on both,
//! survives reopening, and its halves clean the other's keys up by compaction; writers go on
//! through a split; a SIGKILL at any moment of splits under writes reopens with regions that
//! partition the key space and every acknowledged write.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    missing_docs,
    reason = "test code: a failure stops where it happened"
)]

use halyard_engine::{Db, Error, Options, RegionInfo, SyncMode};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// A small deterministic generator (xorshift64*): a failing seed replays.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn key(i: u64) -> Vec<u8> {
    format!("k{i:05}").into_bytes()
}

/// Small, medium and large values (the tiny options' thresholds are 40 and 200 bytes).
fn value(i: u64, round: u64) -> Vec<u8> {
    let len = [8usize, 120, 600][(i % 3) as usize];
    let mut v = format!("{round}-{i}-").into_bytes();
    v.resize(len, b'a' + (round % 26) as u8);
    v
}

fn opts() -> Options {
    Options { gc_threshold: 0.2, ..Options::tiny() }
}

/// Every acknowledged write durable (the kill test's).
fn durable() -> Options {
    Options { sync: SyncMode::Always, ..opts() }
}

fn contents(db: &Db) -> BTreeMap<Vec<u8>, Vec<u8>> {
    db.scan(..).map(|r| r.expect("scan")).collect()
}

/// The regions cover the whole key space, in order, without a gap or an overlap.
fn assert_partition(regions: &[RegionInfo]) {
    let mut rs: Vec<&RegionInfo> = regions.iter().collect();
    rs.sort_by(|a, b| a.start.cmp(&b.start));
    assert!(rs.first().is_some_and(|r| r.start.is_empty()), "{regions:?}");
    for pair in rs.windows(2) {
        assert_eq!(pair[0].end.as_ref(), Some(&pair[1].start), "{regions:?}");
    }
    assert!(rs.last().is_some_and(|r| r.end.is_none()), "{regions:?}");
}

/// A random workload with splits at random keys, compactions, GC and reopens, against a model.
#[test]
fn splits_read_and_write_like_the_model() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut db = Db::open(dir.path(), opts()).expect("open");
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    let (mut next_id, mut merges) = (1u32, 0);
    for step in 0..30u64 {
        for _ in 0..400 {
            let i = rng.below(3000);
            match rng.below(20) {
                0 => {
                    let j = i + 1 + rng.below(60);
                    db.delete_range(&key(i), &key(j)).expect("delete range");
                    model.retain(|k, _| !(*k >= key(i) && *k < key(j)));
                }
                1..=3 => {
                    db.delete(&key(i)).expect("delete");
                    model.remove(&key(i));
                }
                _ => {
                    db.put(&key(i), &value(i, step)).expect("put");
                    model.insert(key(i), value(i, step));
                }
            }
        }
        if step % 2 == 0 {
            let at = key(rng.below(3000));
            match db.split_region(region_of(&db, &at), &at, next_id) {
                Ok(h) => {
                    assert_eq!(h.id(), next_id);
                    next_id += 1;
                }
                // At the start of its region: nothing to cut.
                Err(Error::InvalidOptions(_)) => {}
                Err(e) => panic!("split at {at:?}: {e}"),
            }
        }
        if step % 6 == 5 && merge_two(&db, &mut rng) {
            merges += 1;
        }
        match step % 5 {
            1 => db.compact().expect("compact"),
            2 => drop(db.gc().expect("gc")),
            3 => {
                drop(db);
                db = Db::open(dir.path(), opts()).expect("reopen");
            }
            _ => {}
        }
        assert_partition(&db.regions());
        assert!(contents(&db) == model, "step {step}: the store differs from the model");
        for _ in 0..50 {
            let k = key(rng.below(3000));
            assert_eq!(db.get(&k).expect("get"), model.get(&k).cloned(), "step {step}: get {k:?}");
        }
    }
    assert!(merges >= 4, "{merges} merges");
    // Compactions clean each half of the other's keys: the split's range deletes go.
    settle(&db);
    let s = db.stats();
    assert!(s.range_covered_dropped + s.range_ssts_freed > 0, "{s:?}");
    assert!(contents(&db) == model, "after the clean-up");
    drop(db);
    let db = Db::open(dir.path(), opts()).expect("reopen");
    assert!(contents(&db) == model, "reopened after the clean-up");
}

/// A split writes no L0 out: the halves share the parent's L0 table and log, each writing it
/// out in its own first L0 merge. Reopened at once (the halves' merges may not have run), each
/// half replays the log they share, the other's keys hidden; writes after the split, a second
/// split of a half and another reopen read as the model, and the halves clean up.
#[test]
fn a_split_shares_the_parents_l0_and_both_halves_replay_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut db = Db::open(dir.path(), opts()).expect("open");
    let mut model = BTreeMap::new();
    for i in 0..1500 {
        db.put(&key(i), &value(i, 1)).expect("put");
        model.insert(key(i), value(i, 1));
    }
    db.flush().expect("flush");
    // L0 holds these when the region splits: overwrites, deletes and a range delete across
    // the split key.
    for i in (0..1500).step_by(3) {
        db.put(&key(i), &value(i, 2)).expect("put");
        model.insert(key(i), value(i, 2));
    }
    db.delete(&key(749)).expect("delete");
    model.remove(&key(749));
    db.delete_range(&key(740), &key(760)).expect("delete range");
    model.retain(|k, _| !(*k >= key(740) && *k < key(760)));
    db.split_region(0, &key(750), 1).expect("split");
    drop(db);
    db = Db::open(dir.path(), opts()).expect("reopen");
    assert_partition(&db.regions());
    assert!(contents(&db) == model, "the halves differ from the model after a reopen");
    for i in (1..1500).step_by(5) {
        db.put(&key(i), &value(i, 3)).expect("put");
        model.insert(key(i), value(i, 3));
    }
    db.split_region(1, &key(1100), 2).expect("second split");
    drop(db);
    db = Db::open(dir.path(), opts()).expect("reopen");
    assert!(contents(&db) == model, "the store differs from the model after the second split");
    settle(&db);
    assert!(contents(&db) == model, "after the clean-up");
    drop(db);
    let db = Db::open(dir.path(), opts()).expect("reopen");
    assert!(contents(&db) == model, "reopened after the clean-up");
    assert_eq!(db.regions().len(), 3);
    assert_partition(&db.regions());
}

/// Flushes and compacts until no region holds a range delete (a split's halves are clean).
fn settle(db: &Db) {
    for _ in 0..30 {
        db.flush().expect("flush");
        db.compact().expect("compact");
        if db.stats().range_dels == 0 {
            return;
        }
    }
    panic!("range deletes left after 30 compactions: {:?}", db.stats().range_dels);
}

/// Merges two neighbouring regions picked at random, once the store is clean; false when there
/// is one region.
fn merge_two(db: &Db, rng: &mut Rng) -> bool {
    let mut rs = db.regions();
    if rs.len() < 2 {
        return false;
    }
    rs.sort_by(|a, b| a.start.cmp(&b.start));
    settle(db);
    let i = rng.below(rs.len() as u64 - 1) as usize;
    let (l, r) = (rs[i].id, rs[i + 1].id);
    let h = db.merge_regions(l, r).unwrap_or_else(|e| panic!("merge {l} and {r}: {e}"));
    assert_eq!(h.id(), l);
    assert!(db.region(r).is_err(), "region {r} is gone");
    true
}

fn region_of(db: &Db, k: &[u8]) -> u32 {
    db.regions()
        .into_iter()
        .find(|r| k >= r.start.as_slice() && r.end.as_ref().is_none_or(|e| k < e.as_slice()))
        .map(|r| r.id)
        .expect("a region for the key")
}

#[test]
fn a_split_key_must_lie_inside_the_region_and_the_new_id_be_free() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = Db::open(dir.path(), opts()).expect("open");
    db.put(b"b", b"1").expect("put");
    assert!(matches!(db.split_region(0, b"", 1), Err(Error::InvalidOptions(_))));
    assert!(matches!(db.split_region(9, b"m", 1), Err(Error::NoSuchRegion(9))));
    assert!(matches!(db.split_region(0, b"m", 0), Err(Error::RegionExists(0))));
    let long = vec![b'x'; db.options().max_key_bytes + 1];
    assert!(matches!(db.split_region(0, &long, 1), Err(Error::KeyTooLarge { .. })));
    db.split_region(0, b"m", 1).expect("split");
    assert!(matches!(db.split_region(0, b"n", 2), Err(Error::InvalidOptions(_))), "m.. is region 1's now");
    assert_eq!(db.get(b"b").expect("get"), Some(b"1".to_vec()));
    assert!(matches!(db.region(0).expect("region 0").put(b"z", b"1"), Err(Error::KeyOutOfRegion(0))));
    db.region(1).expect("region 1").put(b"z", b"2").expect("put into the new region");
    assert_eq!(db.get(b"z").expect("get"), Some(b"2".to_vec()));
}

/// Writers on both sides of the split key go on while the region is split again and again;
/// none of them sees an error, and every acknowledged write reads back.
#[test]
fn writers_go_on_through_splits() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = Arc::new(Db::open(dir.path(), opts()).expect("open"));
    let stop = Arc::new(AtomicBool::new(false));
    let acked = Arc::new(Mutex::new(BTreeMap::new()));
    let writers: Vec<_> = (0..3u64)
        .map(|t| {
            let (db, stop, acked) = (db.clone(), stop.clone(), acked.clone());
            std::thread::spawn(move || {
                let mut i = t;
                while !stop.load(Ordering::Relaxed) {
                    let k = key(i % 3000);
                    db.put(&k, &value(i, i)).expect("a write during a split");
                    acked.lock().unwrap().insert(k, value(i, i));
                    i += 3;
                }
            })
        })
        .collect();
    for (n, at) in [1500u64, 750, 2250, 300, 2700, 1100].into_iter().enumerate() {
        std::thread::sleep(std::time::Duration::from_millis(100));
        let at = key(at);
        db.split_region(region_of(&db, &at), &at, n as u32 + 1).expect("split");
    }
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        w.join().expect("writer");
    }
    assert_eq!(db.regions().len(), 7);
    assert_partition(&db.regions());
    let acked = acked.lock().unwrap();
    assert!(acked.len() > 1000, "{} writes", acked.len());
    assert!(contents(&db) == *acked, "the store differs from the acknowledged writes");
}

/// The child of `a_kill_during_splits_and_merges_keeps_the_regions_whole_or_reshaped`: writes
/// keys, acknowledging each on stdout, and splits and merges its regions as it goes, until it
/// is killed.
#[test]
fn split_writer_child() {
    let Ok(dir) = std::env::var("HALYARD_SPLIT_DIR") else { return };
    let round: u64 = std::env::var("HALYARD_SPLIT_ROUND").ok().and_then(|r| r.parse().ok()).unwrap_or(0);
    let db = Db::open(&dir, durable()).expect("open");
    let mut out = std::io::stdout();
    let mut next_id = db.regions().iter().map(|r| r.id).max().unwrap_or(0) + 1;
    let mut rng = Rng(round * 7919 + 1);
    for n in 0..100_000u64 {
        let i = rng.below(3000);
        db.put(&key(i), &value(i, round)).expect("put");
        writeln!(out, "ack {i}").expect("stdout");
        if n % 97 == 0 {
            let at = key(rng.below(3000));
            if db.split_region(region_of(&db, &at), &at, next_id).is_ok() {
                next_id += 1;
            }
        }
        // And merges, once a pair is clean (not always by then: a refusal is fine).
        if n % 389 == 388 {
            db.compact().expect("compact");
            let mut rs = db.regions();
            rs.sort_by(|a, b| a.start.cmp(&b.start));
            if let Some(i) = (rs.len() > 1).then(|| rng.below(rs.len() as u64 - 1) as usize) {
                match db.merge_regions(rs[i].id, rs[i + 1].id) {
                    Ok(_) | Err(Error::InvalidOptions(_)) => {}
                    Err(e) => panic!("merge: {e}"),
                }
            }
        }
    }
}

#[test]
fn a_kill_during_splits_and_merges_keeps_the_regions_whole_or_reshaped() {
    let dir = tempfile::tempdir().expect("tempdir");
    let exe = std::env::current_exe().expect("test binary");
    let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    for round in 0..12u64 {
        let mut child = Command::new(&exe)
            .args(["--exact", "split_writer_child", "--nocapture", "--test-threads=1"])
            .env("HALYARD_SPLIT_DIR", dir.path())
            .env("HALYARD_SPLIT_ROUND", round.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn the writer");
        let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
        // Killed after a different number of acknowledged writes each round.
        let kill_after = 200 + round * 173;
        let mut acked = Vec::new();
        while (acked.len() as u64) < kill_after {
            let Some(Ok(line)) = lines.next() else { break };
            if let Some(i) = line.strip_prefix("ack ").and_then(|i| i.parse::<u64>().ok()) {
                acked.push(i);
            }
        }
        child.kill().expect("SIGKILL");
        let _ = child.wait();
        let db = Db::open(dir.path(), durable()).expect("open after SIGKILL");
        assert_partition(&db.regions());
        let got = contents(&db);
        for &i in &acked {
            model.insert(key(i), value(i, round));
        }
        // Every acknowledged write is there, or a later write of this round that was under
        // way at the kill.
        for i in 0..3000 {
            let (k, later) = (key(i), value(i, round));
            if let Some(v) = model.get(&k) {
                let g = got.get(&k);
                assert!(g == Some(v) || g == Some(&later), "round {round}: acknowledged write of {k:?} lost");
            }
        }
        model = got;
    }
}

#[test]
fn a_merge_waits_for_the_split_halves_to_be_clean_and_then_joins_them() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = Db::open(dir.path(), opts()).expect("open");
    let mut model = BTreeMap::new();
    for i in 0..3000u64 {
        db.put(&key(i), &value(i, 0)).expect("put");
        model.insert(key(i), value(i, 0));
    }
    db.compact().expect("compact");
    db.split_region(0, &key(1500), 1).expect("split");
    for i in (0..3000u64).step_by(7) {
        db.put(&key(i), &value(i, 1)).expect("put");
        model.insert(key(i), value(i, 1));
    }
    assert!(matches!(db.merge_regions(1, 0), Err(Error::InvalidOptions(_))), "the right one first");
    assert!(matches!(db.merge_regions(0, 1), Err(Error::InvalidOptions(_))), "not clean yet");
    settle(&db);
    db.merge_regions(0, 1).expect("merge");
    assert_eq!(db.regions().len(), 1);
    assert_partition(&db.regions());
    assert!(contents(&db) == model);
    // One region again: a batch across the old boundary is atomic in it.
    let mut b = halyard_engine::WriteBatch::new();
    b.put(key(1499), b"a".to_vec()).put(key(1500), b"b".to_vec());
    db.write(&b).expect("a batch across the old boundary");
    model.insert(key(1499), b"a".to_vec());
    model.insert(key(1500), b"b".to_vec());
    drop(db);
    let db = Db::open(dir.path(), opts()).expect("reopen");
    assert_eq!(db.regions().len(), 1);
    assert!(contents(&db) == model, "reopened after the merge");
    assert_eq!(db.stats().merges, 0, "counted per process");
}

/// With `region_max_bytes` set, regions split by themselves as data arrives: in the end each
/// is at most the limit and none is tiny, the regions partition the key space, and every
/// write reads back. Every key is written once: overwrites would let compaction shrink a
/// region split early below any bound a split point can promise.
#[test]
fn regions_split_by_size_as_data_arrives() {
    let dir = tempfile::tempdir().expect("tempdir");
    let max = 256u64 << 10;
    let db = Db::open(dir.path(), Options { region_max_bytes: max, ..opts() }).expect("open");
    let mut model = BTreeMap::new();
    for round in 0..3 {
        for i in 0..2000 {
            let (k, v) = (key(round * 2000 + i * 7 % 2000), value(i, round));
            db.put(&k, &v).expect("put");
            model.insert(k, v);
        }
    }
    db.compact().expect("compact");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let sizes = loop {
        db.compact().expect("compact");
        db.split_oversized().expect("split");
        let sizes: Vec<u64> = db.regions().iter().map(|r| db.region_size(r.id).expect("size").0).collect();
        if sizes.iter().all(|&s| s <= max) {
            break sizes;
        }
        assert!(std::time::Instant::now() < deadline, "regions still above {max} bytes: {sizes:?}");
    };
    assert!(sizes.len() >= 4, "{sizes:?}");
    assert!(sizes.iter().all(|&s| s >= max / 8), "a tiny region: {sizes:?}");
    assert!(db.stats().splits as usize >= sizes.len() - 1);
    assert_partition(&db.regions());
    assert_eq!(contents(&db), model);
}

/// A scan of one half reads the SSTs the halves shared to its end, even once both halves'
/// compactions have dropped them and new data has taken their segments.
#[test]
fn a_scan_of_one_half_outlives_both_halves_dropping_the_ssts_it_reads() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = Db::open(dir.path(), opts()).expect("open");
    let small = |i: u64, round: u64| format!("{round}-{i}").into_bytes();
    let mut model = BTreeMap::new();
    for i in 0..20_000 {
        db.put(&key(i), &small(i, 0)).expect("put");
        model.insert(key(i), small(i, 0));
    }
    db.compact().expect("compact");
    let at = key(10_000);
    db.split_region(0, &at, 1).expect("split");
    let mut scan = db.scan(..at.clone());
    let mut seen = vec![scan.next().expect("a first pair").expect("scan")];
    // Both halves rewrite the shared SSTs without the other's keys, then the right one's new
    // data takes the segments they freed.
    db.compact().expect("compact");
    for round in 1..3 {
        for i in 10_000..20_000 {
            db.put(&key(i), &small(i, round)).expect("put");
        }
        db.compact().expect("compact");
    }
    seen.extend(scan.map(|r| r.expect("scan")));
    let want: Vec<_> = model.range(..at).map(|(k, v)| (k.clone(), v.clone())).collect();
    assert_eq!(seen.len(), want.len());
    assert!(seen == want, "the scan read pairs that are not the half's");
}
