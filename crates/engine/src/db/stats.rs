//! What the store reports about itself.

#![expect(
    clippy::indexing_slicing,
    reason = "per-category and per-level arrays have the sizes of the enums and options that index them"
)]

use crate::catalog::LogKind;
use crate::db::Db;
use crate::device::IoKind;
use crate::tree::memtable::load_imbalance;
use std::sync::atomic::Ordering::Relaxed;

/// Size of one level.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LevelStats {
    /// SSTs in the level.
    pub ssts: usize,
    /// Entries.
    pub entries: u64,
    /// Bytes as stored (medium and large pairs as pointers).
    pub stored_bytes: u64,
    /// Bytes with medium values at full size (what the growth factor applies to).
    pub full_bytes: u64,
    /// Bloom filters and index nodes held in memory outside the cache.
    pub pinned_bytes: u64,
}

/// A snapshot of the store's counters.
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct Stats {
    /// All device bytes read.
    pub device_read_bytes: u64,
    /// All device bytes written.
    pub device_write_bytes: u64,
    /// Device bytes read, by purpose.
    pub read_bytes_by: Vec<(&'static str, u64)>,
    /// Device bytes written, by purpose.
    pub write_bytes_by: Vec<(&'static str, u64)>,
    /// fdatasync calls.
    pub syncs: u64,
    /// Bytes of keys and values the application wrote (puts and deletes).
    pub user_bytes_written: u64,
    /// Puts by category: small, medium, large.
    pub puts: [u64; 3],
    /// Bytes put by category.
    pub put_bytes: [u64; 3],
    /// Deletes.
    pub deletes: u64,
    /// Range deletes.
    pub range_deletes: u64,
    /// Versions compactions dropped because a range delete hides them.
    pub range_covered_dropped: u64,
    /// SSTs freed whole because a range delete hides all they hold (none of them rewritten).
    pub range_ssts_freed: u64,
    /// Point reads the LSM bypass answered (`Options::lsm_bypass_bytes`).
    pub bypass_hits: u64,
    /// Reads through a bypass slot that found another record there and went through the tree.
    pub bypass_fallbacks: u64,
    /// Keys with a bypass slot, and the memory they take (`bypass_bytes / bypass_slots` per key).
    pub bypass_slots: u64,
    /// See `bypass_slots`.
    pub bypass_bytes: u64,
    /// Range deletes held now (in L0 and in the levels): each stays until no older version of
    /// a key of its range is left, and reads of its keys check it.
    pub range_dels: u64,
    /// Bytes in L0 (mutable and immutable tables).
    pub l0_bytes: u64,
    /// Levels L1.. (index 0 = L1).
    pub levels: Vec<LevelStats>,
    /// Segments in the L0, medium and large logs.
    pub log_segments: [u64; 3],
    /// Bytes of the large log no index entry needs.
    pub large_garbage_bytes: u64,
    /// Bytes of segments in use.
    pub space_allocated_bytes: u64,
    /// Size of the data file.
    pub file_bytes: u64,
    /// Estimate of live user bytes: level contents plus valid large-log bytes.
    pub live_bytes: u64,
    /// Seconds writers waited for L0 space.
    pub stall_seconds: f64,
    /// Writes that waited for L0 space, by how long: under 1 ms, 1–10 ms, 10–100 ms,
    /// 100 ms–1 s, 1 s or more.
    pub stalls: [u64; 5],
    /// Compactions completed (merges and moves).
    pub compactions: u64,
    /// Regions split (`Db::split_region`).
    pub splits: u64,
    /// The longest a split held its region's writers (from retiring the region to installing
    /// its halves), in microseconds.
    pub split_pause_max_us: u64,
    /// The most bytes the device wrote while a split held its region's writers.
    pub split_pause_max_written: u64,
    /// Regions merged into their left neighbour (`Db::merge_regions`).
    pub merges: u64,
    /// Compactions that moved an SST down without rewriting it.
    pub trivial_moves: u64,
    /// Expired pairs compactions dropped (or replaced by a tombstone above older versions).
    pub expired_dropped: u64,
    /// Medium pairs merged back in place.
    pub medium_merged: u64,
    /// Leaves compactions put in the cache in place of cached input leaves they rewrote.
    pub warmed_leaves: u64,
    /// Bytes of input leaves compactions took from the cache instead of reading the device.
    pub compaction_cached_bytes: u64,
    /// Parts of the L0 -> L1 merges cut by key range (`Options::l0_merge_parts`), summed over
    /// those merges (a merge run whole counts none).
    pub l0_merge_parts: u64,
    /// Bytes the warm-up after open put in the cache (`Options::warm_cache`).
    pub warm_bytes: u64,
    /// Versions L0 dropped before compaction because a newer write of the key superseded them
    /// and no reader could see them any more.
    pub l0_versions_dropped: u64,
    /// Dranges of the regions' mutable L0 tables (`Options::dranges`; one per table until a
    /// table has sampled enough writes to cut the next).
    pub dranges: u64,
    /// L0 tables whose Dranges were cut anew from the writes of the table before them.
    pub drange_reorganisations: u64,
    /// Nova-LSM's load imbalance: the standard deviation of the Dranges' shares of the writes
    /// (0 = even; 0.0003 was Nova-LSM's uniform figure at θ = 64), of the mutable L0 table that
    /// took the most writes among those with more than one Drange, else of the last table
    /// switched with more than one.
    pub drange_load_imbalance: f64,
    /// GC passes over a region.
    pub gc_runs: u64,
    /// Large-log segments reclaimed by GC.
    pub gc_segments: u64,
    /// Segments GC reclaimed without an index lookup per record (their invalid records were
    /// all known from compactions).
    pub gc_known_segments: u64,
    /// Bytes GC moved.
    pub gc_bytes_moved: u64,
    /// Valid log records found beyond the recovered prefix at the last open and not replayed
    /// (a torn tail under group commit, or records after a damaged one).
    pub recovery_dropped_records: u64,
    /// How long the last open took (reading the catalog, replaying the logs, the checkpoint).
    pub open_seconds: f64,
    /// Device bytes the last open read. Bounded by what L1 does not cover yet (at most two L0
    /// tables' logs, each bounded by `max_l0_log_bytes` and 8 times that of large log), not by
    /// the number of restarts; after a clean close, by one table's worth.
    pub open_read_bytes: u64,
    /// Large-log segments the log has left holding records in less than half of their bytes
    /// (GC takes them: their live bytes are few).
    pub partly_filled_log_segments: u64,
    /// Cache hits of nodes and log values.
    pub cache_hits: u64,
    /// Cache misses of nodes and log values.
    pub cache_misses: u64,
    /// Point reads served by the row cache (values of single keys read from the levels).
    pub row_hits: u64,
    /// Point reads that missed L0 and the row cache.
    pub row_misses: u64,
    /// Bytes held by the cache.
    pub cache_bytes: u64,
    /// Whether the device runs with O_DIRECT.
    pub direct_io: bool,
    /// Why the store refuses writes, if it does.
    pub poisoned: bool,
}

impl Stats {
    /// Device bytes read and written per user byte written.
    pub fn io_amplification(&self) -> f64 {
        (self.device_read_bytes + self.device_write_bytes) as f64 / self.user_bytes_written.max(1) as f64
    }
    /// Hits over lookups.
    pub fn cache_hit_rate(&self) -> f64 {
        self.cache_hits as f64 / (self.cache_hits + self.cache_misses).max(1) as f64
    }
}

const KINDS: [(IoKind, &str); 10] = [
    (IoKind::L0Log, "l0_log"),
    (IoKind::MediumLog, "medium_log"),
    (IoKind::LargeLog, "large_log"),
    (IoKind::Compaction, "compaction"),
    (IoKind::CompactionRead, "compaction_read"),
    (IoKind::Read, "reads"),
    (IoKind::Gc, "gc"),
    (IoKind::Catalog, "catalog"),
    (IoKind::Replication, "replication"),
    (IoKind::Warm, "warm"),
];

/// Adds a region's levels to the per-level sums.
fn add_levels(levels: &mut Vec<LevelStats>, version: &crate::tree::view::Version) {
    for (i, l) in version.levels.iter().enumerate() {
        if levels.len() <= i {
            levels.push(LevelStats::default());
        }
        let ls = &mut levels[i];
        ls.ssts += l.len();
        for t in l {
            ls.entries += t.info.entries;
            ls.stored_bytes += t.info.stored_bytes;
            ls.full_bytes += t.info.full_bytes;
            ls.pinned_bytes += t.pinned_bytes() as u64;
        }
    }
}

impl Db {
    /// Current counters and sizes.
    pub fn stats(&self) -> Stats {
        let sh = &self.inner.sh;
        let io = sh.dev.counters();
        let c = &sh.counters;
        let mut s = Stats {
            device_read_bytes: io.total_read(),
            device_write_bytes: io.total_written(),
            read_bytes_by: KINDS.iter().map(|(k, n)| (*n, io.read(*k))).collect(),
            write_bytes_by: KINDS.iter().map(|(k, n)| (*n, io.written(*k))).collect(),
            syncs: io.syncs(),
            user_bytes_written: c.user_bytes.load(Relaxed),
            puts: [0, 1, 2].map(|i| c.puts[i].load(Relaxed)),
            put_bytes: [0, 1, 2].map(|i| c.put_bytes[i].load(Relaxed)),
            deletes: c.deletes.load(Relaxed),
            range_deletes: c.range_deletes.load(Relaxed),
            range_covered_dropped: c.range_covered_dropped.load(Relaxed),
            range_ssts_freed: c.range_ssts_freed.load(Relaxed),
            bypass_hits: c.bypass_hits.load(Relaxed),
            bypass_fallbacks: c.bypass_fallbacks.load(Relaxed),
            stall_seconds: c.stall_ns.load(Relaxed) as f64 / 1e9,
            stalls: std::array::from_fn(|i| c.stalls.get(i).map_or(0, |n| n.load(Relaxed))),
            compactions: c.compactions.load(Relaxed),
            splits: c.splits.load(Relaxed),
            split_pause_max_us: c.split_pause_max_us.load(Relaxed),
            split_pause_max_written: c.split_pause_max_written.load(Relaxed),
            merges: c.merges.load(Relaxed),
            trivial_moves: c.trivial_moves.load(Relaxed),
            expired_dropped: c.expired_dropped.load(Relaxed),
            medium_merged: c.medium_merged.load(Relaxed),
            warmed_leaves: c.warmed_leaves.load(Relaxed),
            compaction_cached_bytes: c.compaction_cached_bytes.load(Relaxed),
            l0_merge_parts: c.l0_merge_parts.load(Relaxed),
            warm_bytes: c.warm_bytes.load(Relaxed),
            l0_versions_dropped: c.l0_versions_dropped.load(Relaxed),
            drange_reorganisations: c.drange_reorganisations.load(Relaxed),
            drange_load_imbalance: f64::from_bits(c.drange_imbalance.load(Relaxed)),
            gc_runs: c.gc_runs.load(Relaxed),
            gc_segments: c.gc_segments.load(Relaxed),
            gc_known_segments: c.gc_known_segments.load(Relaxed),
            gc_bytes_moved: c.gc_bytes_moved.load(Relaxed),
            recovery_dropped_records: c.recovery_dropped.load(Relaxed),
            open_seconds: c.open_micros.load(Relaxed) as f64 / 1e6,
            open_read_bytes: c.open_read_bytes.load(Relaxed),
            direct_io: sh.dev.is_direct(),
            poisoned: sh.is_poisoned(),
            ..Stats::default()
        };
        let (hits, misses, bytes) = sh.ctx.cache.stats();
        (s.cache_hits, s.cache_misses, s.cache_bytes) = (hits, misses, bytes);
        (s.row_hits, s.row_misses) = sh.ctx.cache.row_stats();
        let seg = sh.dev.seg_bytes();
        let (used, file) = sh.alloc.usage();
        s.space_allocated_bytes = used * seg;
        s.file_bytes = file * seg;
        // The Drange writes of the mutable table that took the most.
        let mut busiest: Option<(u64, Vec<u64>)> = None;
        for r in self.inner.regions.read().values() {
            let v = r.view();
            s.l0_bytes += (v.mem.bytes() + v.imm.as_ref().map_or(0, |m| m.bytes())) as u64;
            s.dranges += v.mem.dranges() as u64;
            let writes = v.mem.drange_writes();
            busiest = busiest.max((writes.len() > 1).then(|| (writes.iter().sum::<u64>(), writes)));
            s.range_dels += v.range_dels(u64::MAX).len() as u64;
            if let Some(b) = r.bypass() {
                let (n, bytes) = b.usage();
                s.bypass_slots += n;
                s.bypass_bytes += bytes;
            }
            add_levels(&mut s.levels, &v.version);
        }
        if let Some((_, w)) = busiest {
            s.drange_load_imbalance = load_imbalance(&w);
        }
        let mut large_bytes = 0;
        sh.manifest.with(|cat| {
            for m in cat.regions.values() {
                for k in [LogKind::L0, LogKind::Medium, LogKind::Large] {
                    s.log_segments[k as usize] += m.log(k).len() as u64;
                }
                s.large_garbage_bytes += m.large_garbage.values().sum::<u64>();
                let large = m.log(LogKind::Large);
                large_bytes += large.iter().map(|l| l.written(seg)).sum::<u64>();
                s.partly_filled_log_segments += large.iter().filter(|l| l.partly_filled(seg)).count() as u64;
            }
        });
        s.live_bytes =
            s.levels.iter().map(|l| l.full_bytes).sum::<u64>() + large_bytes.saturating_sub(s.large_garbage_bytes);
        s
    }
}
