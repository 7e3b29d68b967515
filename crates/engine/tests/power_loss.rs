//! Crashes a store at thousands of points on in-memory storage and checks what survives.
//!
//! Each run reopens the store on a [`FaultStorage`] that dies at its Nth write or sync (N from
//! a seed; a write it dies in is torn at a 512-byte boundary half the time), while one writer
//! puts new keys in order and records each acknowledged one. Then either the power fails
//! (every write since the last completed sync is lost, like a drive's volatile cache) or the
//! process is killed (every completed write stays). A clean reopen must then find:
//! - with `sync = always`, every acknowledged write;
//! - with any sync mode, every write a `flush` covered, and the writes of the run as a prefix of the keys written, without a
//!   hole, each with its value (and, for the third of them that expire, its expiry time), and
//!   everything earlier runs verified;
//! - for every tenth key, a pair written and then removed by a range delete before the key:
//!   gone whenever the key is there.
//!
//! `HALYARD_POWER_LOSS_RUNS` sets the runs per mode (default 700); a failure prints the seed,
//! and `HALYARD_POWER_LOSS_SEED` replays one seed alone.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    missing_docs,
    reason = "test code: a failure stops where it happened"
)]

use halyard_engine::{Db, FaultPlan, FaultStorage, MemStorage, Options, Storage, SyncMode};
use std::sync::Arc;

/// Keys a run tries to write.
const KEYS_PER_RUN: u64 = 60;
/// Runs on one store before a fresh one (verification reads every key).
const RUNS_PER_STORE: u64 = 30;

fn options(sync: SyncMode) -> Options {
    // Dranges change only how L0 holds a table in memory: recovery replays into them as the
    // write path inserts.
    Options { sync, group_commit_ms: 1, gc_interval_ms: 5, dranges: 4, ..Options::tiny() }
}

/// Small, medium and large values (`Options::tiny` places them in all three ways).
fn value(key: u64) -> Vec<u8> {
    let len = [8, 30, 120, 300, 900][(key % 5) as usize];
    (0..len).map(|i| (key as u8).wrapping_mul(7).wrapping_add(i as u8)).collect()
}

/// Every third key expires, far in the future (2100): its record (kind 3) must come back with
/// its time.
fn expiry(k: u64) -> u64 {
    if k.is_multiple_of(3) {
        4_102_444_800_000
    } else {
        0
    }
}

/// The pair written before key `k` (for every tenth key) and range-deleted right after.
fn doomed(k: u64) -> Option<Vec<u8>> {
    (k % 10 == 5).then(|| format!("d{:04}-{k:08}", k.wrapping_mul(40_503) % 10_000).into_bytes())
}

/// The range delete that removes `doomed(k)`, and nothing else.
fn doomed_range(d: &[u8]) -> (Vec<u8>, Vec<u8>) {
    let mut end = d.to_vec();
    end.push(0xff);
    (d.to_vec(), end)
}

fn key(k: u64) -> Vec<u8> {
    // Spread over the key space so that compactions merge into existing SSTs.
    format!("k{:04}-{k:08}", k.wrapping_mul(2_654_435_761) % 10_000).into_bytes()
}

/// Writes keys `from..` until the store fails or `KEYS_PER_RUN` are written, flushing every
/// 15; returns how many were acknowledged, and how many of them a flush made durable.
fn write_run(db: &Db, from: u64) -> (u64, u64) {
    let mut durable = 0;
    for k in from..from + KEYS_PER_RUN {
        if let Some(d) = doomed(k) {
            let (lo, hi) = doomed_range(&d);
            if db.put(&d, &value(k)).is_err() || db.delete_range(&lo, &hi).is_err() {
                return (k - from, durable);
            }
        }
        if db.put_expiring(&key(k), &value(k), expiry(k)).is_err() {
            return (k - from, durable);
        }
        if (k - from) % 15 == 14 {
            if db.flush().is_err() {
                return (k - from + 1, durable);
            }
            durable = k - from + 1;
        }
    }
    (KEYS_PER_RUN, durable)
}

/// Checks the store against the keys written so far; returns how many of this run's are present.
fn verify(db: &Db, sync: SyncMode, verified: u64, from: u64, (acked, durable): (u64, u64), seed: u64) -> u64 {
    for k in 0..verified {
        assert_eq!(db.get(&key(k)).expect("get"), Some(value(k)), "seed {seed}: key {k} of an earlier run lost");
        if let Some(d) = doomed(k) {
            assert_eq!(db.get(&d).expect("get"), None, "seed {seed}: a range delete before key {k} undone");
        }
    }
    let mut present = 0;
    for k in from..from + KEYS_PER_RUN {
        match db.get_with_expiry(&key(k)).expect("get") {
            Some((v, at)) => {
                assert_eq!(v, value(k), "seed {seed}: key {k} has a wrong value");
                assert_eq!(at, expiry(k), "seed {seed}: key {k} has a wrong expiry time");
                assert_eq!(present, k - from, "seed {seed}: key {k} present after a hole");
                if let Some(d) = doomed(k) {
                    assert_eq!(db.get(&d).expect("get"), None, "seed {seed}: the range delete before key {k} lost");
                }
                present += 1;
            }
            None => {
                if sync == SyncMode::Always {
                    assert!(k - from >= acked, "seed {seed}: acknowledged key {k} lost ({acked} acknowledged)");
                }
                assert!(k - from >= durable, "seed {seed}: flushed key {k} lost ({durable} flushed)");
            }
        }
    }
    present
}

/// Writes and syncs a run makes without faults, to place the deaths over the whole run.
fn ops_per_run(sync: SyncMode) -> u64 {
    let mem = Arc::new(MemStorage::new(16));
    drop(Db::open_on(mem.clone(), options(sync)).expect("create"));
    let fault = Arc::new(FaultStorage::new(mem, FaultPlan::default()));
    let db = Db::open_on(fault.clone(), options(sync)).expect("open");
    assert_eq!(write_run(&db, 0), (KEYS_PER_RUN, KEYS_PER_RUN));
    drop(db);
    fault.writes_and_syncs()
}

/// One run: open on a dying storage, write, crash, reopen and verify. Returns keys verified.
fn run(mem: &Arc<MemStorage>, sync: SyncMode, seed: u64, ops: u64, verified: u64) -> u64 {
    // Past the run's own operations too: some runs end cleanly.
    let plan = FaultPlan::death(seed, ops + ops / 8);
    let fault = Arc::new(FaultStorage::new(mem.clone(), plan.clone()));
    let mut acked = (0, 0);
    // An open that dies in recovery acknowledges nothing.
    if let Ok(db) = Db::open_on(fault.clone(), options(sync)) {
        acked = write_run(&db, verified);
        drop(db);
    }
    let power = seed.is_multiple_of(2);
    if power {
        mem.power_loss();
    }
    let db = Db::open_on(mem.clone(), options(sync))
        .unwrap_or_else(|e| panic!("seed {seed} ({plan:?}, power loss {power}): reopen failed: {e}"));
    let present = verify(&db, sync, verified, verified, acked, seed);
    drop(db);
    verified + present
}

fn crash_many(sync: SyncMode, salt: u64) {
    let runs: u64 = std::env::var("HALYARD_POWER_LOSS_RUNS").ok().and_then(|s| s.parse().ok()).unwrap_or(700);
    let only: Option<u64> = std::env::var("HALYARD_POWER_LOSS_SEED").ok().and_then(|s| s.parse().ok());
    let ops = ops_per_run(sync);
    assert!(ops > 10, "a run makes {ops} writes and syncs");
    let seeds: Vec<u64> = match only {
        Some(s) => vec![s],
        None => (0..runs).map(|i| salt * 1_000_000 + i).collect(),
    };
    let mut mem = Arc::new(MemStorage::new(16));
    let mut verified = 0;
    let (mut died, mut kept) = (0, 0);
    for (i, &seed) in seeds.iter().enumerate() {
        if (i as u64).is_multiple_of(RUNS_PER_STORE) {
            mem = Arc::new(MemStorage::new(16));
            drop(Db::open_on(mem.clone(), options(sync)).expect("create"));
            verified = 0;
        }
        let before = verified;
        verified = run(&mem, sync, seed, ops, verified);
        kept += verified - before;
        died += u64::from(verified - before < KEYS_PER_RUN);
    }
    eprintln!(
        "{sync:?}: {} runs, {ops} writes and syncs per clean run, {died} cut short, {kept} keys kept",
        seeds.len()
    );
    assert!(only.is_some() || died > seeds.len() as u64 / 2, "most runs must die before their end");
}

#[test]
fn sync_always_keeps_every_acknowledged_write() {
    crash_many(SyncMode::Always, 1);
}

#[test]
fn sync_group_keeps_a_prefix_without_holes() {
    crash_many(SyncMode::Group, 2);
}

#[test]
fn sync_none_keeps_a_prefix_without_holes() {
    crash_many(SyncMode::None, 3);
}

#[test]
fn storage_errors_fail_writes_without_losing_earlier_ones() {
    // One failed read, write or sync: the operation reports it, and a reopen keeps all that
    // was acknowledged before.
    for (i, plan) in [
        FaultPlan { fail_write: Some(40), ..FaultPlan::default() },
        FaultPlan { fail_sync: Some(20), ..FaultPlan::default() },
        FaultPlan { fail_read: Some(3), ..FaultPlan::default() },
    ]
    .into_iter()
    .enumerate()
    {
        let mem = Arc::new(MemStorage::new(16));
        drop(Db::open_on(mem.clone(), options(SyncMode::Always)).expect("create"));
        let fault: Arc<dyn Storage> = Arc::new(FaultStorage::new(mem.clone(), plan));
        let acked = match Db::open_on(fault, options(SyncMode::Always)) {
            Ok(db) => write_run(&db, 0),
            Err(_) => (0, 0),
        };
        let db = Db::open_on(mem.clone(), options(SyncMode::Always)).expect("reopen");
        let present = verify(&db, SyncMode::Always, 0, 0, acked, i as u64);
        assert!(present >= acked.0, "case {i}: {present} present, {acked:?} acknowledged");
    }
}
