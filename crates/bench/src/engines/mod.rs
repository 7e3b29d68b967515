//! The engines under test behind one trait, opened from one common configuration so that
//! every engine gets the same budgets.

mod cluster;
mod halyard;
mod native;
mod resp;
#[cfg(feature = "rocksdb")]
mod rocks;
mod server;

use crate::args::{Config, EngineKind, Proto, Sync};
use crate::workload::Workload;
use std::cell::Cell;
use std::path::Path;

pub use server::ServerSample;

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
    /// L0 / memtable bytes.
    pub l0_bytes: u64,
    /// Level size ratio.
    pub growth_factor: u32,
    /// Durability.
    pub sync: Sync,
    /// Client threads (server engines open one connection each).
    pub threads: usize,
    /// Prometheus endpoint of the Halyard server behind a target.
    pub metrics: Option<String>,
    /// `--cluster`: the local cluster's shape.
    pub cluster: Option<crate::args::ClusterSpec>,
}

impl EngineConfig {
    /// From the validated arguments.
    pub fn from_config(c: &Config) -> EngineConfig {
        EngineConfig {
            cache_bytes: c.cache_bytes,
            l0_bytes: c.l0_bytes,
            growth_factor: c.growth_factor,
            sync: c.sync,
            threads: c.threads,
            metrics: c.metrics.clone(),
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

/// Opens `kind` in `dir` (which must not hold a store; a `redis-server` child keeps its
/// data there, remote targets do not use it).
pub fn open(kind: &EngineKind, dir: &Path, cfg: &EngineConfig) -> Result<Box<dyn Engine>, String> {
    match kind {
        EngineKind::Redis => Ok(Box::new(resp::Resp::spawn_redis(dir, cfg)?)),
        EngineKind::Remote(t) if t.proto == Proto::Resp => Ok(Box::new(resp::Resp::connect(t, cfg)?)),
        EngineKind::Remote(t) => Ok(Box::new(native::Native::connect(t, cfg)?)),
        EngineKind::Cluster(mode) => {
            let spec = cfg.cluster.clone().ok_or("cluster engine without --cluster")?;
            Ok(Box::new(cluster::Cluster::spawn(dir, cfg, &spec, *mode)?))
        }
        EngineKind::Halyard => Ok(Box::new(halyard::Halyard::open(dir, cfg, None)?)),
        // Fails after enough writes to be inside the load phase of the smallest test run.
        EngineKind::Faulty => Ok(Box::new(halyard::Halyard::open(dir, cfg, Some(1000))?)),
        #[cfg(feature = "rocksdb")]
        EngineKind::Rocksdb => Ok(Box::new(rocks::Rocks::open(dir, cfg, false)?)),
        #[cfg(feature = "rocksdb")]
        EngineKind::Blobdb => Ok(Box::new(rocks::Rocks::open(dir, cfg, true)?)),
        #[cfg(not(feature = "rocksdb"))]
        EngineKind::Rocksdb | EngineKind::Blobdb => {
            Err(format!("engine {} needs a build with the `rocksdb` feature", kind.name()))
        }
    }
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
