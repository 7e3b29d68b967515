//! Halyard's storage engine: an embeddable key-value store for fast storage.
//!
//! A leveled LSM whose levels are sorted runs of segment-sized B+-tree SSTs built bottom-up,
//! with hybrid KV placement (Parallax): small pairs in place, medium pairs in a transient
//! log merged in place at the last level, large pairs in a log with garbage collection.
//! The on-disk format is described in `docs/format.md`.
//!
//! ```no_run
//! use halyard_engine::{Db, Options};
//! let db = Db::open("/tmp/halyard-example", Options::default())?;
//! db.put(b"hello", b"world")?;
//! assert_eq!(db.get(b"hello")?, Some(b"world".to_vec()));
//! for kv in db.scan(b"a"..b"z") {
//!     let (k, v) = kv?;
//!     println!("{k:?} = {v:?}");
//! }
//! # Ok::<(), halyard_engine::Error>(())
//! ```
//!
//! # Layers
//!
//! Each subsystem imports only those before it (`scripts/module-cycles.py` checks it):
//! `error` → `device` (the [`Storage`] seam, the segment allocator) → `format` (records, nodes,
//! Bloom filters) → `options` → `catalog` ([`Edit`]s, the manifest) → `log` (tails, the log
//! writer, the [`ShipListener`] hooks) → `tree` (L0 tables, SSTs, caches, views) → `region`
//! (write and read paths, recovery, pacing, scans) → `placement` (compaction, GC) → `db`
//! ([`Db`], [`Stats`]) → `replication` (shipping and backup regions).
//!
//! # Lock order
//!
//! Outermost first; a lock is only taken while holding those above it. Per region:
//! `gc_lock` → `busy` (flags; released at once) → `synced` → `w` (the write state: LSNs, log
//! tails) → `install_lock` → `done`, the manifest, the allocator, `dead`, the log writer's
//! queues, the ship listener. Several regions' `w` are taken only in region-id order
//! ([`Db::snapshot`] and scans). `reserved` (backups) and `row_gate` (row cache) are never
//! held with `w`. The allocator, `dead`, `busy`, `cursor` and the caches' internals are
//! leaves. A [`ShipListener`] runs under `w`, so it must only queue. `docs/architecture.md`
//! lists each edge with the code that takes it.

#![warn(unreachable_pub)]

// The subsystems; their layers, lowest first, are in the crate documentation above.
mod catalog;
mod db;
mod device;
mod error;
mod format;
#[doc(hidden)]
pub mod fuzzing;
mod log;
mod options;
mod placement;
mod region;
mod replication;
mod tree;

pub use catalog::{Edit, Level, LogKind, LogSeg, MapKind, SstInfo};
pub use db::checkpoint::{restore, CopyReport};
pub use db::stats::{LevelStats, Stats};
pub use db::{
    data_files, Db, KeyRange, RegionHandle, RegionInfo, Scan, ScanOptions, SizeEstimate, Snapshot, WriteBatch,
    DATA_FILE,
};
pub use device::aligned::AlignedBuf;
pub use device::fault::{FaultPlan, FaultStorage};
pub use device::mem::MemStorage;
pub use device::{IoKind, Storage};
pub use error::{Error, Result};
pub use format::record::RECORD_OVERHEAD;
pub use log::listener::{ShipListener, ShippedSegment};
pub use options::{Clock, MediumPlacement, Options, SplitKey, SplitKeyFn, SyncMode, WaitFn, WaitHook, MAX_DATA_FILES};
pub use region::iter::{KeySkip, Versioned, VersionedScan};
pub use replication::backup::{
    decode_log_records, decode_shipped_edits, encode_shipped_edits, replay_batches, LogRecord, Overlay, Promotion,
    ReplicaMaps, TailImage,
};
pub use replication::resync::{log_digest, Inventory, Keep, ANY_LEVEL};
pub use replication::ship::{CopyImage, NamedPiece, RegionCopy};
pub use replication::Replication;
