//! Model-based tests: random operation sequences against a `BTreeMap`, under several option
//! sets that move the placement thresholds, the in-place level, the growth factor and the
//! sync mode (one operation log, many configurations, same answers). Pairs may expire: the
//! store runs on a clock the test moves, and the model forgets a pair when its time comes.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    missing_docs,
    reason = "test code: a failure stops where it happened"
)]

use halyard_engine::{Clock, Db, MediumPlacement, Options, ScanOptions, Snapshot, SyncMode, WriteBatch};
use proptest::prelude::*;
use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::sync::Arc;

type Model = BTreeMap<Vec<u8>, Vec<u8>>;
/// Keys of the model whose pair expires, and when.
type Expiry = BTreeMap<Vec<u8>, u64>;

/// The test's clock, in milliseconds since the Unix epoch (it starts in 2023).
const EPOCH: u64 = 1_700_000_000_000;

/// The pairs of `model` still live at `now`.
fn live(model: &Model, expiry: &Expiry, now: u64) -> Model {
    model
        .iter()
        .filter(|(k, _)| expiry.get(*k).is_none_or(|at| *at > now))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

#[derive(Debug, Clone)]
enum Op {
    Put(u16, usize),
    /// A put that expires after this many milliseconds.
    PutTtl(u16, usize, u64),
    /// The clock moves on by this many milliseconds.
    Tick(u64),
    Delete(u16),
    /// Deletes the keys of `[key(a), key(b))`.
    DeleteRange(u16, u16),
    Batch(Vec<(u16, Option<usize>)>),
    Get(u16),
    Scan(u16, u16, bool, usize),
    Snapshot,
    /// A checkpoint, opened and compared with the model.
    Checkpoint,
    Flush,
    Compact,
    Gc,
    Reopen,
}

fn key(k: u16) -> Vec<u8> {
    // Some keys are long so that leaves and index nodes fill at different rates.
    if k.is_multiple_of(17) {
        format!("k{k:05}-{}", "x".repeat(60)).into_bytes()
    } else {
        format!("k{k:05}").into_bytes()
    }
}

fn value(seq: usize, len: usize) -> Vec<u8> {
    let mut v = format!("{seq}:").into_bytes();
    v.resize(len.max(v.len()), b'a' + (seq % 26) as u8);
    v
}

fn len_strategy() -> impl Strategy<Value = usize> {
    // small, medium and large pairs for every option set below
    prop_oneof![0usize..20, 30usize..180, 180usize..1500]
}

fn op_strategy() -> impl Strategy<Value = Op> {
    let k = 0u16..300;
    prop_oneof![
        30 => (k.clone(), len_strategy()).prop_map(|(k, l)| Op::Put(k, l)),
        6 => (k.clone(), len_strategy(), 1u64..60).prop_map(|(k, l, t)| Op::PutTtl(k, l, t)),
        4 => (0u64..40).prop_map(Op::Tick),
        6 => k.clone().prop_map(Op::Delete),
        2 => (k.clone(), 1u16..60).prop_map(|(a, w)| Op::DeleteRange(a, a.saturating_add(w))),
        4 => prop::collection::vec((k.clone(), prop::option::weighted(0.8, len_strategy())), 1..12).prop_map(Op::Batch),
        10 => k.clone().prop_map(Op::Get),
        4 => (k.clone(), k, any::<bool>(), 0usize..40).prop_map(|(a, b, r, l)| Op::Scan(a, b, r, l)),
        1 => Just(Op::Snapshot),
        1 => Just(Op::Checkpoint),
        1 => Just(Op::Flush),
        1 => Just(Op::Compact),
        1 => Just(Op::Gc),
        1 => Just(Op::Reopen),
    ]
}

fn options(variant: usize) -> Options {
    let base = Options::tiny();
    match variant {
        0 => base,
        1 => Options { medium_placement: MediumPlacement::LastMinus1, ..base },
        // The data spread over one file (the layout before `data_files`), over 3 and (the
        // default) over 8.
        // Small tables, so that Dranges are cut anew often.
        2 => Options { growth_factor: 2, l0_bytes: 16 << 10, data_files: 1, dranges: 4, ..base },
        3 => {
            Options { small_threshold: 12, large_threshold: 100, l0_bytes: 16 << 10, data_files: 3, dranges: 8, ..base }
        }
        4 => Options { sync: SyncMode::Always, gc_threshold: 0.01, ..base },
        // Logs start new segments after a reopen (as a replicated node runs): GC takes the
        // partly filled ones.
        _ => Options { compaction_threads: 2, sync: SyncMode::None, resume_logs: false, dranges: 3, ..base },
    }
}

fn check_scan(found: Vec<(Vec<u8>, Vec<u8>)>, model: &Model, lo: &[u8], hi: &[u8], reverse: bool, limit: usize) {
    let range = model.range::<[u8], _>((Bound::Included(lo), Bound::Included(hi)));
    let want: Vec<_> = if reverse {
        range.rev().take(limit).map(|(k, v)| (k.clone(), v.clone())).collect()
    } else {
        range.take(limit).map(|(k, v)| (k.clone(), v.clone())).collect()
    };
    if found != want {
        let i = found.iter().zip(&want).position(|(a, b)| a != b).unwrap_or(found.len().min(want.len()));
        let show = |x: Option<&(Vec<u8>, Vec<u8>)>| {
            x.map(|(k, v)| format!("{}={}", String::from_utf8_lossy(k), String::from_utf8_lossy(&v[..v.len().min(12)])))
        };
        panic!(
            "scan [{}..={}] rev={reverse} limit={limit}: {} vs {} pairs; first difference at {i}: got {:?} want {:?}",
            String::from_utf8_lossy(lo),
            String::from_utf8_lossy(hi),
            found.len(),
            want.len(),
            show(found.get(i)),
            show(want.get(i))
        );
    }
}

fn full_scan(db_scan: halyard_engine::Scan) -> Vec<(Vec<u8>, Vec<u8>)> {
    db_scan.map(|r| r.expect("scan")).collect()
}

/// After a full compaction and a GC pass, the logs that restarts used to grow hold the live
/// data within the engine's bounds however often the store was reopened: the large log within
/// twice its live bytes (GC's threshold, records moved and waiting for a flush) plus a few
/// segments, the L0 log empty, and no large-log segment left partly filled. (The medium log's
/// runs are not bounded here: with these tiny tables every merge leaves a mostly empty run
/// segment until its pointers reach the last level, restarts or not.)
fn check_space(stats: &halyard_engine::Stats, model: &Model, opts: &Options) {
    let large = opts.large_threshold;
    let live: u64 = model.iter().map(|(k, v)| (k.len() + v.len()) as u64).filter(|n| *n as usize >= large).sum();
    let seg = opts.segment_bytes;
    let bound = 2 * live + 6 * seg;
    let used = stats.log_segments[2] * seg;
    eprintln!(
        "large log: {used} bytes in segments for {live} live bytes (bound {bound}); logs {:?}",
        stats.log_segments
    );
    assert!(used <= bound, "large log: {used} bytes in segments for {live} live bytes");
    assert_eq!(stats.log_segments[0], 0, "L0 log segments left after a flush");
    assert_eq!(stats.partly_filled_log_segments, 0, "partly filled log segments left behind");
}

/// Runs `ops` under option set `variant`, with or without the LSM bypass.
fn run(variant: usize, bypass: bool, ops: Vec<Op>) -> halyard_engine::Stats {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = Arc::new(AtomicU64::new(EPOCH));
    let c = clock.clone();
    let lsm_bypass_bytes = if bypass { 1 << 20 } else { 0 };
    let opts = Options { clock: Some(Clock(Arc::new(move || c.load(SeqCst)))), lsm_bypass_bytes, ..options(variant) };
    let mut expiry = Expiry::new();
    let mut db = Some(Db::open(dir.path(), opts.clone()).expect("open"));
    let mut model = Model::new();
    let mut snaps: Vec<(Snapshot, Model, Expiry)> = Vec::new();
    // Counters restart with each open; add them up over the whole run.
    let mut totals = [0u64; 6];
    let add = |t: &mut [u64; 6], s: &halyard_engine::Stats| {
        t[0] += s.compactions;
        t[1] += s.medium_merged;
        t[2] += s.gc_segments;
        t[3] += s.range_covered_dropped;
        t[4] += s.range_ssts_freed;
        t[5] += s.bypass_hits;
    };
    for (seq, op) in ops.into_iter().enumerate() {
        let d = db.as_ref().expect("db");
        match op {
            Op::Put(k, l) => {
                let v = value(seq, l);
                d.put(&key(k), &v).expect("put");
                model.insert(key(k), v);
                expiry.remove(&key(k));
            }
            Op::PutTtl(k, l, ttl) => {
                let v = value(seq, l);
                let at = clock.load(SeqCst) + ttl;
                d.put_expiring(&key(k), &v, at).expect("put expiring");
                model.insert(key(k), v);
                expiry.insert(key(k), at);
            }
            Op::Tick(ms) => {
                let now = clock.fetch_add(ms, SeqCst) + ms;
                model = live(&model, &expiry, now);
                expiry.retain(|_, at| *at > now);
            }
            Op::Delete(k) => {
                d.delete(&key(k)).expect("delete");
                model.remove(&key(k));
                expiry.remove(&key(k));
            }
            Op::DeleteRange(a, b) => {
                let (lo, hi) = (key(a), key(b));
                if lo < hi {
                    d.delete_range(&lo, &hi).expect("delete range");
                    let gone: Vec<Vec<u8>> = model.range(lo.clone()..hi.clone()).map(|(k, _)| k.clone()).collect();
                    for k in gone {
                        model.remove(&k);
                        expiry.remove(&k);
                    }
                } else {
                    assert!(d.delete_range(&lo, &hi).is_err(), "an empty range is refused");
                }
            }
            Op::Batch(items) => {
                let mut b = WriteBatch::new();
                for (i, (k, l)) in items.iter().enumerate() {
                    match l {
                        Some(l) => {
                            let v = value(seq * 100 + i, *l);
                            b.put(key(*k), v.clone());
                            model.insert(key(*k), v);
                        }
                        None => {
                            b.delete(key(*k));
                            model.remove(&key(*k));
                        }
                    }
                    expiry.remove(&key(*k));
                }
                d.write(&b).expect("batch");
            }
            Op::Get(k) => assert_eq!(d.get(&key(k)).expect("get"), model.get(&key(k)).cloned(), "get {k}"),
            Op::Scan(a, b, reverse, limit) => {
                let (lo, hi) = (key(a.min(b)), key(a.max(b)));
                let found =
                    full_scan(d.scan_with(lo.clone()..=hi.clone(), ScanOptions { reverse, limit: Some(limit) }));
                check_scan(found, &model, &lo, &hi, reverse, limit);
            }
            Op::Snapshot => snaps.push((d.snapshot(), model.clone(), expiry.clone())),
            Op::Checkpoint => {
                let to = dir.path().join(format!("checkpoint-{seq}"));
                let report = d.checkpoint(&to).expect("checkpoint");
                let copy = Db::open(&to, opts.clone()).expect("open the checkpoint");
                let got = full_scan(copy.scan(..));
                let want: Vec<_> = model.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
                assert!(got == want, "checkpoint {report:?}: {} keys, the model {}", got.len(), want.len());
                drop(copy);
                std::fs::remove_dir_all(&to).expect("remove the checkpoint");
            }
            Op::Flush => d.flush().expect("flush"),
            Op::Compact => d.compact().expect("compact"),
            Op::Gc => {
                d.gc().expect("gc");
            }
            Op::Reopen => {
                snaps.clear();
                add(&mut totals, &d.stats());
                // The old store must be closed (its lock released) before it opens again.
                drop(db.take());
                db = Some(Db::open(dir.path(), opts.clone()).expect("reopen"));
            }
        }
    }
    let d = db.as_ref().expect("db");
    // A snapshot reads at its LSN, but expiry by the clock of now.
    let now = clock.load(SeqCst);
    for (snap, m, e) in &snaps {
        let got = full_scan(snap.scan(..));
        let want: Vec<_> = live(m, e, now).into_iter().collect();
        assert!(got == want, "snapshot scan differs from its model ({} vs {} keys)", got.len(), want.len());
    }
    let got = full_scan(d.scan(..));
    let want: Vec<_> = model.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    if got != want {
        let g: BTreeMap<_, _> = got.iter().cloned().collect();
        let diff: Vec<String> = g
            .keys()
            .chain(model.keys())
            .filter(|k| g.get(*k) != model.get(*k))
            .take(5)
            .map(|k| {
                let short = |v: Option<&Vec<u8>>| v.map(|v| String::from_utf8_lossy(&v[..v.len().min(12)]).to_string());
                format!(
                    "{}: got {:?} want {:?} (get says {:?})",
                    String::from_utf8_lossy(k),
                    short(g.get(k)),
                    short(model.get(k)),
                    d.get(k).map(|v| short(v.as_ref()))
                )
            })
            .collect();
        panic!("variant {variant}: final scan differs ({} vs {} keys): {diff:?}", got.len(), want.len());
    }
    d.compact().expect("compact");
    d.gc().expect("gc");
    for (k, v) in &model {
        assert_eq!(d.get(k).expect("get").as_ref(), Some(v));
    }
    let mut stats = d.stats();
    // Without resumed logs (a replicated node's setting) each reopen leaves a partly filled
    // segment that GC weighs by its invalid bytes only: no restart bound to check.
    if opts.resume_logs {
        check_space(&stats, &model, &opts);
    }
    add(&mut totals, &stats);
    [
        stats.compactions,
        stats.medium_merged,
        stats.gc_segments,
        stats.range_covered_dropped,
        stats.range_ssts_freed,
        stats.bypass_hits,
    ] = totals;
    snaps.clear();
    drop(db);
    let d = Db::open(dir.path(), opts).expect("final reopen");
    let got = full_scan(d.scan(..));
    assert!(got == want, "after reopen the contents differ ({} vs {} keys)", got.len(), want.len());
    stats
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 40, max_shrink_iters: 200, ..ProptestConfig::default() })]

    #[test]
    fn matches_btreemap(variant in 0usize..6, bypass: bool, ops in prop::collection::vec(op_strategy(), 50..400)) {
        let _ = run(variant, bypass, ops);
    }
}

/// A long fixed workload under every option set: many levels, medium merges and GC happen.
#[test]
fn long_sequence_every_variant() {
    for variant in 0..6 {
        let mut ops = Vec::new();
        for i in 0..16000u32 {
            let k = (i.wrapping_mul(2654435761) % 4000) as u16;
            ops.push(match i % 50 {
                0 => Op::Delete(k),
                1 => Op::Get(k),
                2 if i % 3000 == 2 => Op::Snapshot,
                // Rare here: the property test's operations reopen the store at about 1.7% of
                // operations (weight 1 of 59) and check the restart bound (see `run`).
                3 if i % 5000 == 3 => Op::Reopen,
                4 => Op::Scan(k, k.saturating_add(40), i % 3 == 0, 25),
                // Pairs that expire over older versions, at every level the workload reaches.
                5 | 6 => Op::PutTtl(k, [10, 60, 900][(i % 3) as usize], 20 + u64::from(i % 7) * 10),
                7 => Op::Tick(5),
                // Wide ones that hide whole SSTs, narrow ones that cut through them.
                8 if i % 1500 == 8 => Op::DeleteRange(k, k.saturating_add(400)),
                8 if i % 200 == 8 => Op::DeleteRange(k, k.saturating_add(12)),
                _ => Op::Put(k, [10, 60, 120, 300, 900][(i % 5) as usize]),
            });
        }
        // With the bypass on: the option sets without it run in the property test above.
        let s = run(variant, true, ops);
        // The workload must have exercised what it is meant to test.
        assert!(s.levels.iter().filter(|l| l.ssts > 0).count() >= 2, "variant {variant}: levels {:?}", s.levels);
        assert!(s.compactions > 10, "variant {variant}: {} compactions", s.compactions);
        // With two levels and LastMinus1, L1 is the in-place level: nothing goes through the log.
        if variant != 1 {
            assert!(s.medium_merged > 0, "variant {variant}: no medium pair merged in place");
        }
        assert!(s.gc_segments > 0, "variant {variant}: GC reclaimed nothing");
        assert!(s.range_covered_dropped > 0, "variant {variant}: no compaction dropped a version a range delete hides");
        assert!(s.bypass_hits > 0, "variant {variant}: no read went through the bypass");
        if options(variant).dranges > 1 {
            assert!(s.drange_reorganisations > 1, "variant {variant}: L0's Dranges were never cut anew");
        }
    }
    // Whether a wide range delete here frees a whole SST depends on when the background
    // compactions run (it failed 3 runs in 4 on a loaded machine): `range_delete.rs` checks
    // that hidden SSTs are freed whole, on a workload that makes them.
}
