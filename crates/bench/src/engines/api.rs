//! What every engine under test implements, and the budgets they share.

use crate::args::{Config, Sync};
use crate::workload::Workload;
use std::cell::Cell;
use std::path::Path;

/// Cumulative counters of a server process (`None`: not measurable for this server).
#[derive(Clone, Debug, Default)]
pub struct ServerSample {
    /// Where the figures come from, for the report.
    pub source: String,
    /// Device bytes read by the server.
    pub read_bytes: Option<u64>,
    /// Device bytes written by the server.
    pub write_bytes: Option<u64>,
    /// CPU seconds (user + system) of the server process.
    pub cpu_seconds: Option<f64>,
    /// Bytes the server's store occupies on the device (a gauge, not cumulative).
    pub disk_bytes: Option<u64>,
    /// Peak RSS since the last reset (a gauge).
    pub peak_rss_bytes: Option<u64>,
    /// Seconds writers were stalled.
    pub stall_seconds: Option<f64>,
    /// Bytes the server sent and received on every socket, clients' and replication's
    /// (cluster nodes).
    pub net_bytes: Option<u64>,
    /// Replication frame bytes the server queued to its backups (cluster nodes).
    pub shipped_bytes: Option<u64>,
    /// Of those, segment images (SSTs, medium runs) before LZ4 packing.
    pub image_bytes: Option<u64>,
    /// Bytes in the server's in-memory L0 (a gauge; cluster nodes).
    pub l0_bytes: Option<u64>,
}

thread_local! {
    /// Index of the bench client thread running on this OS thread (set by the runner).
    static BENCH_THREAD: Cell<usize> = const { Cell::new(0) };
}

/// Tells the engines which bench thread the calling OS thread is. Server engines keep one
/// connection per bench thread, opened before the phases so that connecting is never timed,
/// and pick it by this index; the trait's calls stay those of the in-process engines.
pub fn set_bench_thread(t: usize) {
    BENCH_THREAD.with(|c| c.set(t));
}

/// The calling thread's bench thread index (0 outside the runner's workers).
pub(crate) fn bench_thread() -> usize {
    BENCH_THREAD.with(Cell::get)
}

/// Budgets shared by every engine.
#[derive(Clone, Debug)]
pub struct EngineConfig {
    /// Cache bytes (Halyard's node/value cache, RocksDB's block cache incl. index and filters).
    pub cache_bytes: u64,
    /// Halyard's LSM bypass bytes, part of `cache_bytes`.
    pub lsm_bypass_bytes: u64,
    /// Halyard's large-log GC threshold (`None`: the engine's default).
    pub gc_threshold: Option<f64>,
    /// L0 / memtable bytes.
    pub l0_bytes: u64,
    /// Halyard's Dranges per L0 table (`None`: the engine's default).
    pub dranges: Option<usize>,
    /// Halyard's parts per L0 merge (`None`: the engine's default).
    pub l0_merge_parts: Option<usize>,
    /// Level size ratio.
    pub growth_factor: u32,
    /// Durability.
    pub sync: Sync,
    /// Client threads (server engines open one connection each).
    pub threads: usize,
    /// Prometheus endpoint of the Halyard server behind a target.
    pub metrics: Option<String>,
    /// Password of halyard:// targets.
    pub password: Option<String>,
    /// `--cluster`: the local cluster's shape.
    pub cluster: Option<crate::args::ClusterSpec>,
}

impl EngineConfig {
    /// From the validated arguments.
    pub fn from_config(c: &Config) -> EngineConfig {
        EngineConfig {
            cache_bytes: c.cache_bytes,
            lsm_bypass_bytes: c.lsm_bypass_bytes,
            gc_threshold: c.gc_threshold,
            l0_bytes: c.l0_bytes,
            dranges: c.dranges,
            l0_merge_parts: c.l0_merge_parts,
            growth_factor: c.growth_factor,
            sync: c.sync,
            threads: c.threads,
            metrics: c.metrics.clone(),
            password: c.password.clone(),
            cluster: c.cluster.clone(),
        }
    }
}

/// What an engine can say about itself between phases.
#[derive(Clone, Debug, Default)]
pub struct EngineStats {
    /// Device bytes read, by the engine's own count (Halyard only).
    pub device_read_bytes: Option<u64>,
    /// Device bytes written, by the engine's own count (Halyard only).
    pub device_write_bytes: Option<u64>,
    /// Cumulative seconds writers were stalled (NaN: unknown).
    pub stall_seconds: f64,
    /// For engines behind a server: what could be measured of the server process. `None`
    /// for in-process engines, whose costs show in this process's own counters. For a cluster:
    /// the primary node.
    pub server: Option<ServerSample>,
    /// For a cluster: the backup nodes, summed.
    pub backup: Option<ServerSample>,
    /// Cumulative counters of the engine's own, by name (Halyard: device bytes by purpose,
    /// cache hits and misses, compactions, GC), reported per phase as deltas for diagnosis.
    pub counters: std::collections::BTreeMap<String, u64>,
    /// The engine's own state by name (Halyard: log segments, large-log garbage, bytes per
    /// level, space in use), reported as of the end of each phase.
    pub gauges: std::collections::BTreeMap<String, u64>,
}

/// An engine under test. Shared by the client threads.
pub trait Engine: Send + std::marker::Sync {
    /// Writes a pair.
    fn put(&self, key: &[u8], value: &[u8]) -> Result<(), String>;
    /// Reads a key; the value's length if it exists.
    fn get(&self, key: &[u8]) -> Result<Option<usize>, String>;
    /// Reads up to `len` pairs from `start` on; pairs and bytes (keys + values) read.
    fn scan(&self, start: &[u8], len: usize) -> Result<(usize, u64), String>;
    /// Counters (cumulative since open).
    fn stats(&self) -> EngineStats;
    /// The engine's settings, as name/value pairs, for the report.
    fn settings(&self) -> Vec<(String, String)>;
    /// Why the engine cannot run `w` faithfully, if it cannot (a Redis has no ordered scan).
    fn unsupported(&self, _w: Workload) -> Option<String> {
        None
    }
    /// Whether a server engine talks to a Halyard server (numerator of the server ratios).
    fn halyard_server(&self) -> bool {
        false
    }
    /// Called before each phase (a server child's peak RSS is reset here).
    fn begin_phase(&self) {}
}

/// Bytes allocated on the device by the files under `dir` (st_blocks, like `du`): sparse
/// or preallocated files count as what they really occupy.
pub fn disk_bytes(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let Ok(rd) = std::fs::read_dir(dir) else { return 0 };
    rd.flatten()
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => disk_bytes(&e.path()),
            Ok(m) => m.blocks() * 512,
            Err(_) => 0,
        })
        .sum()
}
