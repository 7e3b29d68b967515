//! The engines under test behind one trait, opened from one common configuration so that
//! every engine gets the same budgets.

mod halyard;
#[cfg(feature = "rocksdb")]
mod rocks;

use crate::args::{Config, EngineKind, Sync};
use std::path::Path;

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
}

impl EngineConfig {
    /// From the validated arguments.
    pub fn from_config(c: &Config) -> EngineConfig {
        EngineConfig { cache_bytes: c.cache_bytes, l0_bytes: c.l0_bytes, growth_factor: c.growth_factor, sync: c.sync }
    }
}

/// What an engine can say about itself between phases.
#[derive(Clone, Debug, Default)]
pub struct EngineStats {
    /// Device bytes read, by the engine's own count (Halyard only).
    pub device_read_bytes: Option<u64>,
    /// Device bytes written, by the engine's own count (Halyard only).
    pub device_write_bytes: Option<u64>,
    /// Cumulative seconds writers were stalled.
    pub stall_seconds: f64,
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
}

/// Opens `kind` in `dir` (which must not hold a store).
pub fn open(kind: EngineKind, dir: &Path, cfg: &EngineConfig) -> Result<Box<dyn Engine>, String> {
    match kind {
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
