//! Flow control of L0 writers: when a writer may add to the mutable table. It waits while
//! the table is full (switching tables when the previous one has merged), fails with NoSpace
//! when compaction cannot get space, and is paced behind the merge of the previous table;
//! compaction reports its progress and its lack of space here, and wakes the waiting writers.
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

use crate::error::{Error, Result};
use crate::region::shared::STALL_BUCKETS_NS;
use crate::region::{Region, WriteState, LONG_WAIT};
use crate::tree::memtable::Memtable;
use crate::tree::view::View;
use parking_lot::MutexGuard;
use std::sync::atomic::Ordering::{Acquire, Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

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

impl Region {
    /// Waits until the mutable L0 table has room, switching tables when possible, and paces
    /// writers that fill it faster than the previous table's merge goes (module documentation).
    pub(crate) fn make_room(&self, w: &mut MutexGuard<'_, WriteState>) -> Result<()> {
        let mut stalled: Option<Instant> = None;
        let r = loop {
            if let Err(e) = self.sh.check() {
                break Err(e);
            }
            if self.sh.shutdown.load(Relaxed) {
                break Err(Error::Closed);
            }
            // A split or merge took the region out of service: its tables merge in its
            // successors, and the writer goes there (`Region::write` answers `RegionChanged`).
            // A fenced one takes no write at all (`RegionFenced`).
            if self.is_retired() || self.is_fenced() {
                break Ok(());
            }
            let view = self.view.load();
            let o = &self.sh.opts;
            if view.mem.superseded_bytes() >= (o.l0_bytes / 64).max(64 << 10) {
                self.prune_l0(&view.mem);
            }
            let seg = self.sh.dev.seg_bytes();
            let log_segs = w.mem_l0_segs.len() as u64;
            let table = (view.mem.bytes() as u64, o.l0_bytes as u64);
            // Garbage that the table's superseded versions hold in the large log waits for the
            // table's compaction: bounded like the L0 log, so that skewed updates of large
            // values, which supersede within the table and leave it no fuller, do not grow the
            // large log without a bound until the table fills.
            let garbage = (view.mem.dead_large_bytes(), o.l0_garbage_limit());
            // What recovery would replay of the large log for this table is bounded too.
            let large = (w.mem_large_bytes, o.l0_large_log_limit());
            let full = table.0 >= table.1
                || log_segs * seg >= o.l0_log_limit()
                || garbage.0 >= garbage.1
                || large.0 >= large.1;
            if !full {
                // A table of one Drange where several would share its writes: a table cut from
                // its sample takes over, if no merge runs (writers never wait for this) and the
                // table is a quarter full (its merge rewrites the L1 it overlaps).
                if view.imm.is_none()
                    && view.mem.wants_switch()
                    && table.0 >= table.1 / 4
                    && !self.no_space.load(Relaxed)
                {
                    break self.switch_memtable(w);
                }
                if view.imm.is_none() || self.no_space.load(Relaxed) {
                    break Ok(());
                }
                // A merge runs: pace. The segment being written counts as empty here: a whole
                // one is a large part of a small table's log bound.
                let fill = fill(&[table, (log_segs.saturating_sub(1) * seg, o.l0_log_limit()), garbage, large]);
                if !must_wait(fill, self.l0_merge_progress.load(Relaxed)) {
                    break Ok(());
                }
                let since = *stalled.get_or_insert_with(Instant::now);
                // Paced waits are short and many: through the hook only once they add up.
                if since.elapsed() < LONG_WAIT {
                    self.w_cv.wait_for(w, WAIT);
                } else {
                    self.sh.waiting(|| self.w_cv.wait_for(w, WAIT));
                }
                continue;
            }
            if view.imm.is_none() {
                break self.switch_memtable(w);
            }
            if self.no_space.load(Relaxed) {
                break Err(Error::NoSpace { what: "L0 is full and compaction found no free segment" });
            }
            stalled.get_or_insert_with(Instant::now);
            self.sh.wake();
            self.sh.waiting(|| self.w_cv.wait_for(w, Duration::from_millis(50)));
        };
        if let Some(t) = stalled {
            self.count_stall(t);
        }
        r
    }

    /// Hands the mutable table's superseded versions that every reader from now on is past to
    /// the view installed here: they are removed once the readers of the older views are gone.
    /// (A reader loads the view before the LSN it reads at, so one that sees the new view reads
    /// at `visible` or above.)
    fn prune_l0(&self, mem: &Arc<Memtable>) {
        let batch = mem.take_superseded(self.visible.load(Acquire));
        if batch.is_empty() {
            return;
        }
        let m = mem.clone();
        // Attached after the swap, still in time: the old view lives at least as long as this
        // handle, and readers of it or an older one keep it longer.
        self.install(View::renewed, vec![]).on_release(Box::new(move || m.ready(batch)));
    }

    /// Counts a writer's wait for room that began at `since` (`Stats::stalls`).
    fn count_stall(&self, since: Instant) {
        let ns = since.elapsed().as_nanos() as u64;
        let c = &self.sh.counters;
        c.stall_ns.fetch_add(ns, Relaxed);
        let bucket = STALL_BUCKETS_NS.iter().take_while(|&&b| ns >= b).count();
        if let Some(n) = c.stalls.get(bucket) {
            n.fetch_add(1, Relaxed);
        }
    }

    /// Wakes the writers waiting for room: a compaction ended, or the store is closing.
    pub(crate) fn wake_writers(&self) {
        self.w_cv.notify_all();
    }

    /// Compaction's word on space: with `true` it found no free segment, and writers that
    /// would wait for room fail with NoSpace instead (woken to find out); `false` after a
    /// compaction that went through.
    pub(crate) fn set_no_space(&self, no_space: bool) {
        self.no_space.store(no_space, Relaxed);
        if no_space {
            self.w_cv.notify_all();
        }
    }

    /// The running L0->L1 merge has read `permille` thousandths of its L1 inputs.
    pub(crate) fn report_l0_merge(&self, permille: u32) {
        self.l0_merge_progress.store(permille, Relaxed);
    }
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
            let mut busy = r.compaction_state.busy.lock();
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
            r.compaction_state.busy.lock()[0] = false;
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
