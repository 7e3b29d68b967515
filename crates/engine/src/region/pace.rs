//! Pacing of L0 writers behind the merge of the previous table.
//!
//! L0 is two tables in memory: writers fill the mutable one while the immutable one merges
//! into L1. When the merge is slower than the writers (MD's Load A: every merge rewrites L1
//! with its medium values in place), writers used to fill the table at full speed and then
//! stop outright until the merge ended: up to 0.4 s without a single write at the end of each
//! late merge, then a burst. Now a writer may fill the table only as far as the merge's
//! progress (the share of its L1 inputs read) allows, with a [`LEAD`] for the merge's start,
//! and waits for the merge past that, [`WAIT`] at a time. The same bytes go in during the
//! merge either way; pacing spreads them over it. The waits count as stall time, as RocksDB
//! counts its delayed writes.

use std::time::Duration;

/// How much of the table writers may fill before the merge has read anything. Past it, the
/// share of the table they may fill grows with the merge's progress and reaches the whole
/// table when the merge has read all of its inputs. With a merge that reads its inputs at a
/// steady pace, writers are paced only if they would fill the table before the merge ends,
/// that is, only where they would have stopped without pacing; a merge that keeps up never
/// paces anyone. The lead covers the merge's start, before it has read its first input.
pub(crate) const LEAD: f64 = 0.25;

/// How long a paced writer waits before it looks at the merge's progress again.
pub(crate) const WAIT: Duration = Duration::from_millis(2);

/// How full the mutable table is against the nearest of its bounds, as `(used, limit)` pairs.
pub(crate) fn fill(bounds: &[(u64, u64)]) -> f64 {
    bounds.iter().map(|&(used, limit)| used as f64 / limit.max(1) as f64).fold(0.0, f64::max)
}

/// Whether a writer at `fill` must wait for a merge that has read `merged` thousandths of its
/// inputs.
pub(crate) fn must_wait(fill: f64, merged: u32) -> bool {
    fill >= LEAD + (1.0 - LEAD) * f64::from(merged.min(1000)) / 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Db, Options};
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed};
    use std::time::Instant;

    #[test]
    fn fill_is_the_nearest_bound() {
        assert_eq!(fill(&[(10, 100), (30, 60), (0, 0)]), 0.5);
        assert_eq!(fill(&[]), 0.0);
        assert!(!must_wait(LEAD - 0.01, 0));
        assert!(must_wait(LEAD, 0));
        let half = LEAD + (1.0 - LEAD) / 2.0;
        assert!(!must_wait(half - 0.01, 500));
        assert!(must_wait(half, 500));
        assert!(!must_wait(0.999, 1000));
    }

    fn key(i: u32) -> Vec<u8> {
        // Spread over the key space (an odd multiplier is a bijection), so that every table
        // overlaps every L1 SST.
        format!("key{:08x}", i.wrapping_mul(2_654_435_761)).into_bytes()
    }

    /// Waits until `n` has not moved for 200 ms (the writer is waiting) or `done` is set.
    fn settle(n: &AtomicUsize, done: &AtomicBool) {
        let start = Instant::now();
        let mut last = n.load(Relaxed);
        while start.elapsed() < Duration::from_secs(20) && !done.load(Relaxed) {
            std::thread::sleep(Duration::from_millis(200));
            let now = n.load(Relaxed);
            if now == last {
                return;
            }
            last = now;
        }
    }

    #[test]
    fn writers_keep_within_a_lead_of_the_merge() {
        let dir = tempfile::tempdir().unwrap();
        let l0: u64 = 64 << 10;
        let o = Options {
            l0_bytes: l0 as usize,
            growth_factor: 8,
            gc_interval_ms: 3_600_000,
            max_l0_log_bytes: Some(64 << 20),
            ..Options::tiny()
        };
        let db = Db::open(dir.path(), o).unwrap();
        let r = db.route(&key(0)).unwrap();
        let value = |i: u32| format!("value-{i:024}").into_bytes();
        let wait_merged = || {
            let start = Instant::now();
            while r.view().imm.is_some() {
                assert!(start.elapsed() < Duration::from_secs(20), "the merge did not end");
                std::thread::sleep(Duration::from_millis(5));
            }
        };
        // L1 first, a few tables' worth.
        let mut i = 0u32;
        while r.view().version.levels.first().map_or(0, |l| l.len()) < 4 {
            db.put(&key(i), &value(i)).unwrap();
            i += 1;
            if r.view().imm.is_some() {
                wait_merged();
            }
        }
        // Keep the next merge from starting (its levels marked busy, once the last job has let
        // go of them, as `compaction::pick` does), then switch a table: no merge has read
        // anything of it.
        loop {
            let mut busy = r.busy.lock();
            if !busy[0] && !busy[1] {
                busy[0] = true;
                break;
            }
            drop(busy);
            std::thread::sleep(Duration::from_millis(2));
        }
        while r.view().imm.is_none() {
            db.put(&key(i), &value(i)).unwrap();
            i += 1;
        }
        let table_fill = || r.view().mem.bytes() as f64 / l0 as f64;
        let (written, done) = (AtomicUsize::new(0), AtomicBool::new(false));
        let first = i;
        let end = std::thread::scope(|s| {
            let writer = s.spawn(|| {
                let mut j = first;
                while table_fill() < 0.85 {
                    db.put(&key(j), &value(j)).unwrap();
                    j += 1;
                    written.fetch_add(1, Relaxed);
                }
                done.store(true, Relaxed);
                j
            });
            settle(&written, &done);
            let f = table_fill();
            assert!(!done.load(Relaxed) && (LEAD..LEAD + 0.05).contains(&f), "writer not held at the lead: fill {f}");
            // A quarter of the merge done lets the writer a quarter of the rest further.
            r.l0_merge_progress.store(250, Relaxed);
            settle(&written, &done);
            let f = table_fill();
            let want = LEAD + (1.0 - LEAD) / 4.0;
            assert!(!done.load(Relaxed) && (want..want + 0.05).contains(&f), "fill {f} after a quarter of the merge");
            r.busy.lock()[0] = false;
            r.sh.wake();
            wait_merged();
            writer.join().unwrap()
        });
        assert_eq!(r.l0_merge_progress.load(Relaxed), 1000, "the merge reported reading all of its inputs");
        let s = db.stats();
        assert!(s.stall_seconds > 0.3, "paced waits count as stalls: {s:?}");
        // Each wait is in the bucket of its length: without one of a second or more, the
        // buckets' upper bounds add up to at least the time waited.
        let upper = [0.001, 0.01, 0.1, 1.0];
        let bound: f64 = s.stalls.iter().zip(upper).map(|(n, u)| *n as f64 * u).sum();
        assert!(s.stalls.iter().sum::<u64>() >= 1, "{:?}", s.stalls);
        assert!(s.stalls[4] > 0 || bound >= s.stall_seconds, "{:?} for {} s", s.stalls, s.stall_seconds);
        for j in 0..end {
            assert_eq!(db.get(&key(j)).unwrap(), Some(value(j)), "key {j}");
        }
    }
}
