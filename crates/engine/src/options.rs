//! Options of a store, checked at open.

use crate::error::{Error, Result};
pub(crate) use crate::format::node::{CELL_OVERHEAD, NODE_HEADER};
use crate::format::record::RECORD_OVERHEAD;

/// When a write's log record reaches the device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SyncMode {
    /// Only when a 256 KiB chunk fills, on `flush()` and on close.
    None,
    /// Group commit: the tail buffer reaches the device at least every `group_commit_ms`.
    Group,
    /// A write returns after its chunk is durable; concurrent writers share one sync.
    Always,
}

/// Which level merges medium KV pairs back in place.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MediumPlacement {
    /// The last (deepest) level.
    Last,
    /// The level above the last one.
    LastMinus1,
}

/// Most files a store's segments may be spread over.
pub const MAX_DATA_FILES: u32 = 64;

/// Options of a store. `Options::default()` is the production default.
#[derive(Clone, Debug)]
pub struct Options {
    /// Create the store if the directory holds none.
    pub create_if_missing: bool,
    /// Segment size in bytes (power of two, 64 KiB..=256 MiB). Fixed at creation.
    pub segment_bytes: u64,
    /// B+-tree node size in bytes (power of two, 1 KiB..=32 KiB). Fixed at creation.
    pub node_bytes: usize,
    /// Number of files the segments are spread over (1..=64), segment `s` in file `s % n`.
    /// Fixed at creation. The file system serialises some operations per file: on ext4,
    /// returning a freed segment's blocks or allocating them again locks the file and waits
    /// for its reads in flight, so with one file every reader stalls behind each of them.
    pub data_files: u32,
    /// Size of one in-memory L0 table; one more (immutable) may exist while it compacts.
    pub l0_bytes: usize,
    /// Largest L0-log share of one L0 table, in bytes; `None` = twice `l0_bytes`. L0 keeps one
    /// version of a key (older ones are dropped once no reader can see them), so repeated
    /// updates of a hot key set fill the log, not the table: this bounds the log a crash
    /// replays and the disk it holds, and switches tables when it is reached.
    pub max_l0_log_bytes: Option<u64>,
    /// Level i holds up to `l0_bytes * growth_factor^i` bytes.
    pub growth_factor: u32,
    /// Number of device levels (L1..=Lmax); the last is unbounded.
    pub max_levels: usize,
    /// KV pairs whose key+value size is below this are small (in place everywhere).
    pub small_threshold: usize,
    /// KV pairs whose key+value size is at least this are large (large log with GC).
    pub large_threshold: usize,
    /// Which level merges medium pairs in place.
    pub medium_placement: MediumPlacement,
    /// Fraction of a region's large log that may be invalid (overwritten or deleted values)
    /// before garbage collection runs; it then reclaims the segments with the most invalid
    /// bytes first, down to half this fraction. 1.0 turns GC off.
    pub gc_threshold: f64,
    /// How often the GC thread looks for candidates.
    pub gc_interval_ms: u64,
    /// A region whose estimated size passes this many bytes splits at the key that halves it
    /// (`Db::split_oversized`, run by the GC thread on its period); 0: regions never split by
    /// themselves. Leave it 0 on a replicated store: there the cluster decides splits.
    pub region_max_bytes: u64,
    /// Maps the key a size split proposes to the one it cuts at, for a layer above whose
    /// groups of keys must stay in one region (a Redis hash's fields): the group's first key.
    /// `None`: the proposed key.
    pub split_key: Option<SplitKey>,
    /// Durability of writes.
    pub sync: SyncMode,
    /// Group-commit period for `SyncMode::Group`.
    pub group_commit_ms: u64,
    /// Log tail write unit.
    pub log_chunk_bytes: usize,
    /// Byte budget of the node and value cache. A compaction holds copies of the hottest
    /// leaves it rewrites, up to half of this, until they replace the old ones in the cache.
    /// A compaction takes the input leaves the cache holds from it instead of the device, and
    /// puts its output leaves in whatever room the cache has left (a cache nobody reads from,
    /// as during a load, fills up to this budget with the newest leaves).
    pub cache_bytes: usize,
    /// Memory of the LSM bypass (KV-Tandem's direct mode, `tree/bypass.rs`): a map from each
    /// key whose newest version keeps its value in the medium or large log to that record, so
    /// that a point read that misses L0 and the cache reads the value in one device read
    /// instead of an SST leaf and then the log. About `Stats::bypass_bytes / bypass_slots`
    /// bytes per key; keys beyond the budget read through the tree. 0 turns it off.
    pub lsm_bypass_bytes: usize,
    /// After open, read the SSTs and then the large log's live values into the cache in
    /// whole-segment reads on a background thread, while the cache has room (it never
    /// evicts for this). A restarted store then serves its reads from memory within seconds
    /// instead of one random device read per first touch.
    pub warm_cache: bool,
    /// Open the data file with O_DIRECT (falls back to buffered I/O where unsupported).
    pub direct_io: bool,
    /// Largest size the data file may grow to; `None` = the file system's limit.
    pub max_device_bytes: Option<u64>,
    /// Largest key.
    pub max_key_bytes: usize,
    /// Largest value; `None` = what fits in one segment with the largest key.
    pub max_value_bytes: Option<usize>,
    /// Background compaction threads.
    pub compaction_threads: usize,
    /// Dranges per L0 table (Nova-LSM's θ, 1..=64): each table's key space is cut into this
    /// many ranges of about equal write load, drawn from the keys the table before it sampled,
    /// each with its own tree and lock, so that writers to different ranges do not wait for
    /// each other's inserts; a key taking over 1.5 fair shares gets a range of its own. 8 by
    /// default (measured best: `docs/performance.md`); 1 keeps one tree per table.
    pub dranges: usize,
    /// Parts the L0 -> L1 merge is cut into by key range (1..=16), each merging its share of
    /// the table into the L1 SSTs it overlaps on a thread of its own: a merge that falls
    /// behind the writers takes the cores they leave idle while they wait. The parts get about
    /// equal work (L1 bytes, and the table's bytes spread over its Dranges by write count),
    /// cut at Drange bounds or L1 SST starts, never inside an L1 SST. 1: one merge.
    pub l0_merge_parts: usize,
    /// Bloom filter bits per key.
    pub bloom_bits_per_key: usize,
    /// Create the default region covering all keys when a new store is made.
    pub default_region: bool,
    /// Open even when a log holds a damaged record followed by intact ones, recovering the
    /// writes before the damage only (point-in-time recovery). Off: such a store refuses to
    /// open with `Corruption`, since the intact records after the damage were acknowledged.
    pub tolerate_log_damage: bool,
    /// After an open, each log continues in its last segment instead of a new one, so that
    /// restarts add no segments, and GC takes segments left partly filled (as stores of the
    /// first format did) for their unwritten bytes. Off: the logs start new segments after an open and GC
    /// weighs segments by their invalid bytes only. A replicated node runs with it off: a
    /// backup may hold a longer copy of a primary's last segment than the primary recovered,
    /// and a Build-Index backup's region must keep its LSNs in step with its primary's, which
    /// moving valid records would renumber.
    pub resume_logs: bool,
    /// Opens every region the store led (its non-backup regions) quiet: no compaction, GC or
    /// size split runs on it, and a close neither flushes nor collects it, until
    /// [`crate::Db::wake_region`]. For a cluster node started again after a crash: until its
    /// map says which regions it still leads, what it holds of the others must stay as it is,
    /// or the copy that brings them up to date sends again what compaction rewrote. A quiet
    /// region must take no writes (a full L0 would wait for it to wake).
    pub open_quiet: bool,
    /// Runs each wait of a writer that may last long: a full L0 or pacing behind a merge, the
    /// log's device writes, an fdatasync under [`SyncMode::Always`]. An embedder whose threads
    /// serve others meanwhile (an async runtime's workers) moves the wait off them here; the
    /// hook must call the function it is given (if it does not, the engine does).
    pub wait_hook: Option<WaitHook>,
    /// The clock expiry is judged by: milliseconds since the Unix epoch. `None`: the system
    /// clock. Tests set a clock they move by hand.
    pub clock: Option<Clock>,
}

/// See [`Options::clock`].
#[derive(Clone)]
pub struct Clock(pub std::sync::Arc<dyn Fn() -> u64 + Send + Sync>);

impl std::fmt::Debug for Clock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Clock")
    }
}

/// Maps a proposed split key to the key a split cuts at (see [`Options::split_key`]).
pub type SplitKeyFn = dyn Fn(&[u8]) -> Vec<u8> + Send + Sync;

/// See [`Options::split_key`].
#[derive(Clone)]
pub struct SplitKey(pub std::sync::Arc<SplitKeyFn>);

impl std::fmt::Debug for SplitKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SplitKey")
    }
}

/// Runs the wait it is given (see [`Options::wait_hook`]).
pub type WaitFn = dyn Fn(&mut dyn FnMut()) + Send + Sync;

/// See [`Options::wait_hook`].
#[derive(Clone)]
pub struct WaitHook(pub std::sync::Arc<WaitFn>);

impl std::fmt::Debug for WaitHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WaitHook")
    }
}

impl Default for Options {
    fn default() -> Self {
        Options {
            create_if_missing: true,
            segment_bytes: 2 << 20,
            node_bytes: 8 << 10,
            data_files: 8,
            l0_bytes: 64 << 20,
            max_l0_log_bytes: None,
            growth_factor: 8,
            max_levels: 7,
            small_threshold: 120,
            large_threshold: 1024,
            medium_placement: MediumPlacement::Last,
            gc_threshold: 0.10,
            gc_interval_ms: 1000,
            region_max_bytes: 0,
            split_key: None,
            sync: SyncMode::Group,
            group_commit_ms: 5,
            log_chunk_bytes: 256 << 10,
            cache_bytes: 256 << 20,
            lsm_bypass_bytes: 0,
            warm_cache: true,
            direct_io: true,
            max_device_bytes: None,
            max_key_bytes: 1024,
            max_value_bytes: None,
            compaction_threads: 1,
            dranges: 8,
            l0_merge_parts: 4,
            bloom_bits_per_key: 10,
            default_region: true,
            tolerate_log_damage: false,
            resume_logs: true,
            open_quiet: false,
            wait_hook: None,
            clock: None,
        }
    }
}

impl Options {
    /// Small settings that make every mechanism (many levels, medium merges, GC) run
    /// on a few megabytes of data. For tests and experiments.
    pub fn tiny() -> Options {
        Options {
            segment_bytes: 64 << 10,
            node_bytes: 2 << 10,
            l0_bytes: 48 << 10,
            growth_factor: 3,
            max_levels: 5,
            small_threshold: 40,
            large_threshold: 200,
            max_key_bytes: 256,
            cache_bytes: 256 << 10,
            gc_interval_ms: 50,
            log_chunk_bytes: 16 << 10,
            ..Options::default()
        }
    }

    /// See `max_l0_log_bytes`.
    pub(crate) fn l0_log_limit(&self) -> u64 {
        self.max_l0_log_bytes.unwrap_or(2 * self.l0_bytes as u64)
    }

    /// Large-log bytes the mutable L0 table's writes may append before the table is switched:
    /// bounds what recovery replays of the large log (8 x the L0 log's bound, so that a table
    /// of pointers to large values still fills as it does without it at the default sizes).
    pub(crate) fn l0_large_log_limit(&self) -> u64 {
        8 * self.l0_log_limit()
    }

    /// Large-log bytes that versions superseded within the mutable L0 table may hold before
    /// the table is switched (so that GC can reclaim them after its compaction).
    pub(crate) fn l0_garbage_limit(&self) -> u64 {
        4 * self.l0_bytes as u64
    }

    pub(crate) fn seg_bits(&self) -> u32 {
        self.segment_bytes.trailing_zeros()
    }

    /// The largest value accepted for a key of `key_len` bytes.
    pub fn value_limit(&self, key_len: usize) -> usize {
        let fits = (self.segment_bytes as usize).saturating_sub(RECORD_OVERHEAD + key_len);
        self.max_value_bytes.map_or(fits, |m| m.min(fits))
    }

    pub(crate) fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(Error::InvalidOptions(m));
        if !self.segment_bytes.is_power_of_two() || !(64 << 10..=256 << 20).contains(&self.segment_bytes) {
            return bad(format!("segment_bytes {} must be a power of two in 64 KiB..=256 MiB", self.segment_bytes));
        }
        if !self.node_bytes.is_power_of_two() || !(1 << 10..=32 << 10).contains(&self.node_bytes) {
            return bad(format!("node_bytes {} must be a power of two in 1 KiB..=32 KiB", self.node_bytes));
        }
        if !(1..=MAX_DATA_FILES).contains(&self.data_files) {
            return bad(format!("data_files {} must be in 1..={MAX_DATA_FILES}", self.data_files));
        }
        if (self.node_bytes as u64) * 8 > self.segment_bytes {
            return bad("segment_bytes must hold at least 8 nodes".into());
        }
        if self.small_threshold > self.large_threshold {
            return bad("small_threshold must not exceed large_threshold".into());
        }
        // Two of the largest in-place entries (a medium pair, or a key with a pointer)
        // must fit in a node so that every node holds at least two cells.
        let biggest = self.large_threshold.max(self.max_key_bytes) + CELL_OVERHEAD;
        if 2 * biggest + NODE_HEADER > self.node_bytes {
            return bad(format!(
                "node_bytes {} cannot hold two entries of {} bytes: lower max_key_bytes / large_threshold or raise node_bytes",
                self.node_bytes, biggest
            ));
        }
        if self.max_key_bytes == 0 || self.max_key_bytes > u16::MAX as usize {
            return bad("max_key_bytes must be in 1..=65535".into());
        }
        if self.growth_factor < 2 {
            return bad("growth_factor must be at least 2".into());
        }
        if !(2..=32).contains(&self.max_levels) {
            return bad("max_levels must be in 2..=32".into());
        }
        if self.l0_bytes < 4096 {
            return bad("l0_bytes must be at least 4 KiB".into());
        }
        if self.max_l0_log_bytes.is_some_and(|b| b < self.segment_bytes) {
            return bad("max_l0_log_bytes must be at least segment_bytes".into());
        }
        if !self.log_chunk_bytes.is_power_of_two()
            || self.log_chunk_bytes < 4096
            || self.log_chunk_bytes as u64 > self.segment_bytes
        {
            return bad("log_chunk_bytes must be a power of two in 4 KiB..=segment_bytes".into());
        }
        if !(0.0..=1.0).contains(&self.gc_threshold) {
            return bad("gc_threshold must be in 0..=1".into());
        }
        if self.compaction_threads == 0 {
            return bad("compaction_threads must be at least 1".into());
        }
        if !(1..=64).contains(&self.dranges) {
            return bad("dranges must be in 1..=64".into());
        }
        if !(1..=16).contains(&self.l0_merge_parts) {
            return bad("l0_merge_parts must be in 1..=16".into());
        }
        if let Some(max) = self.max_device_bytes {
            if max < 8 * self.segment_bytes {
                return bad("max_device_bytes must hold at least 8 segments".into());
            }
        }
        Ok(())
    }
}
