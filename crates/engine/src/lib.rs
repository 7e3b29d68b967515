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

mod alloc;
mod backup;
mod bloom;
mod cache;
mod catalog;
mod codec;
mod compaction;
mod db;
mod device;
mod error;
#[doc(hidden)]
pub mod fuzzing;
mod gc;
mod iter;
mod logtail;
mod logwriter;
mod manifest;
mod memtable;
mod node;
mod options;
mod pace;
mod record;
mod recovery;
mod region;
mod rowcache;
mod shared;
mod ship;
mod sst;
mod stats;

mod view;

pub use backup::{
    decode_log_records, decode_shipped_edits, encode_shipped_edits, replay_batches, LogRecord, Overlay, Promotion,
    ReplicaMaps, TailImage,
};
pub use catalog::{Edit, LogSeg, MapKind, SstInfo};
pub use db::data_files;
pub use db::{Db, KeyRange, RegionHandle, RegionInfo, Scan, ScanOptions, Snapshot, WriteBatch, DATA_FILE};
pub use device::fault::{FaultPlan, FaultStorage};
pub use device::mem::MemStorage;
pub use device::{IoKind, Storage};
pub use error::{Error, Result};
pub use iter::{Versioned, VersionedScan};
pub use logtail::LogKind;
pub use options::{MediumPlacement, Options, SyncMode, MAX_DATA_FILES};
pub use record::RECORD_OVERHEAD;
pub use shared::{ShipListener, ShippedSegment};
pub use ship::RegionSnapshot;
pub use stats::{LevelStats, Stats};
