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

#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs, rust_2018_idioms, unreachable_pub)]
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

// The subsystems, lowest first: each imports only those above it in this list (checked by
// `scripts/module-cycles.py`).
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

pub use catalog::{Edit, LogKind, LogSeg, MapKind, SstInfo};
pub use db::stats::{LevelStats, Stats};
pub use db::{data_files, Db, KeyRange, RegionHandle, RegionInfo, Scan, ScanOptions, Snapshot, WriteBatch, DATA_FILE};
pub use device::fault::{FaultPlan, FaultStorage};
pub use device::mem::MemStorage;
pub use device::{IoKind, Storage};
pub use error::{Error, Result};
pub use format::record::RECORD_OVERHEAD;
pub use log::listener::{ShipListener, ShippedSegment};
pub use options::{MediumPlacement, Options, SyncMode, MAX_DATA_FILES};
pub use region::iter::{Versioned, VersionedScan};
pub use replication::backup::{
    decode_log_records, decode_shipped_edits, encode_shipped_edits, replay_batches, LogRecord, Overlay, Promotion,
    ReplicaMaps, TailImage,
};
pub use replication::ship::RegionSnapshot;
