//! The backup side: accepts a primary node's connection and the streams of its regions on it
//! (each opened by its own Hello, frames routed by region), keeps one buffer per log written
//! at the primary's offsets (the receive path copies bytes and acknowledges, nothing else),
//! stores a buffer as a segment when the primary seals it, installs shipped SSTs and edits
//! (Send-Index) or replays records into its own L0 (Build-Index), and rejects streams of an
//! older epoch.
//!
//! This file holds [`Replica`] (the backup regions of one node) and [`ReplicaRegion`] (one
//! region's state); the rest, one concept per file, each using only this file and the files
//! listed before it:
//! - `epochs.rs` — the epochs file: the highest epoch seen per region, kept across restarts;
//! - `jobs.rs` — a stream's job queue: index work run behind the receive path, in order;
//! - `build.rs` — Build-Index replay: records decoded from the buffers, applied as batches;
//! - `apply.rs` — applying one stream message to a region;
//! - `streams.rs` — serving a primary's connection: its regions' streams, epoch checks,
//!   acknowledgements;
//! - `promote.rs` — promotion: fencing the old primary, rebuilding the region as a primary;
//! - `dump.rs` — the verify dump: a page of a region's contents as a promotion would see them.
//!
//! Connections reach [`Replica::serve_connection`] (in `crate::admin`), which authenticates
//! them and hands a primary's stream to `streams.rs`.

mod apply;
mod build;
mod dump;
mod epochs;
mod jobs;
mod promote;
mod streams;

use crate::wire::{LogTail, Mode};
use crate::{Error, Result};
use epochs::EpochsFile;
use halyard_engine::{Db, LogKind, LogRecord, TailImage};
use jobs::Deferred;
use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

/// One log's buffer: the primary's segment, its salt, the bytes received.
#[derive(Default)]
struct Buf {
    seg: u32,
    salt: u32,
    bytes: Vec<u8>,
    /// Build-Index: bytes already decoded into records.
    decoded: usize,
}

/// A region this node is a backup of.
pub struct ReplicaRegion {
    /// Region id.
    pub id: u32,
    /// How the copy is kept.
    pub mode: Mode,
    epoch: AtomicU64,
    bufs: Mutex<HashMap<u8, Buf>>,
    /// Build-Index: buffers sealed before their records were all decoded (the replay runs
    /// behind the receive path); the next replay decodes them.
    sealed: Mutex<Vec<Buf>>,
    /// Build-Index: records waiting for the LSNs before them, and the next LSN to apply.
    build: Mutex<(BTreeMap<u64, LogRecord>, u64)>,
    /// Highest LSN received.
    pub received: AtomicU64,
    /// Highest LSN every backup holds (from the primary): Build-Index applies up to here.
    commit: AtomicU64,
    /// Build-Index: a full copy (catch-up) is arriving; it is taken the Send-Index way and
    /// the region becomes a Build-Index copy again when its Edits arrive.
    copying: AtomicBool,
    /// Send-Index: a copy (Reset or Resync) emptied the region and has not ended (Copied):
    /// what it holds is not the region, and it refuses to be promoted.
    incomplete: AtomicBool,
    /// The newest stream of the region: an older one (its primary reconnected while the old
    /// connection stayed half-open) applies nothing more, so two job queues never interleave.
    stream_gen: AtomicU64,
    deferred: Arc<Deferred>,
    /// Held (shared) by a stream from a batch's epoch checks until its messages are applied or
    /// queued, and (exclusively) by a promotion while it raises the epoch: what promotion
    /// waits for afterwards is then everything a stale primary will ever get applied; and
    /// (exclusively) by a verify dump, which must see the jobs' results and the tails at rest.
    gate: Arc<tokio::sync::RwLock<()>>,
}

impl ReplicaRegion {
    /// Whether the region keeps the primary's segments now (Send-Index, or a Build-Index copy
    /// taking a full copy) rather than replaying records.
    fn takes_segments(&self) -> bool {
        self.mode == Mode::SendIndex || self.copying.load(Relaxed)
    }

    /// Whether a copy (full or incremental) has emptied the region and not ended: what it holds
    /// is not the region yet.
    pub fn is_copying(&self) -> bool {
        self.incomplete.load(Relaxed) || self.copying.load(Relaxed)
    }

    /// Waits until every job queued so far has run; returns the first failure, if any.
    async fn settle(&self) -> Result<()> {
        self.deferred.settle().await
    }

    /// The log buffers as tails: (log, primary segment, salt, bytes).
    fn tails(&self) -> Vec<LogTail> {
        self.bufs.lock().iter().map(|(log, b)| (*log, b.seg, b.salt, b.bytes.clone())).collect()
    }
}

/// Counters of what a backup received.
#[derive(Default, Debug)]
pub struct ReplicaStats {
    /// Frame bytes received.
    pub bytes: AtomicU64,
    /// Frame bytes sent back to primaries (acknowledgements).
    pub sent: AtomicU64,
    /// Streams refused (stale epoch, unknown region).
    pub rejected: AtomicU64,
    /// Connections refused for a missing or wrong cluster secret.
    pub unauthenticated: AtomicU64,
}

/// What a promotion did.
#[derive(Debug)]
pub struct Promoted {
    /// Last LSN of the region.
    pub last_lsn: u64,
    /// Records received but not replayed (beyond a torn record or a gap).
    pub dropped: u64,
    /// The log tails (log, primary segment, salt, bytes) the region was rebuilt with.
    pub tails: Vec<LogTail>,
}

/// The backup regions of one node.
pub struct Replica {
    db: Arc<Db>,
    regions: Mutex<HashMap<u32, Arc<ReplicaRegion>>>,
    epochs: EpochsFile,
    /// Regions a copy by names failed for here (a storage node refused to copy a segment):
    /// their copies come as bytes from then on.
    unnamed: Arc<Mutex<HashSet<u32>>>,
    /// Counters.
    pub stats: ReplicaStats,
}

impl Replica {
    /// The replica of a store; epochs seen are kept in `epochs_file`.
    pub fn new(db: Arc<Db>, epochs_file: PathBuf) -> Arc<Replica> {
        Arc::new(Replica {
            db,
            regions: Mutex::new(HashMap::new()),
            epochs: EpochsFile::new(epochs_file),
            unnamed: Arc::default(),
            stats: ReplicaStats::default(),
        })
    }

    /// Declares this node a backup of `region` at (at least) `epoch`.
    pub fn add_region(&self, id: u32, mode: Mode, epoch: u64) -> Result<()> {
        let epoch = epoch.max(self.epochs.load().get(&id).copied().unwrap_or(0));
        self.epochs.store(id, epoch)?;
        let next = self.db.region(id)?.lsn() + 1;
        let r = ReplicaRegion {
            id,
            mode,
            epoch: AtomicU64::new(epoch),
            bufs: Mutex::new(HashMap::new()),
            sealed: Mutex::new(Vec::new()),
            build: Mutex::new((BTreeMap::new(), next)),
            received: AtomicU64::new(0),
            commit: AtomicU64::new(0),
            copying: AtomicBool::new(false),
            incomplete: AtomicBool::new(false),
            stream_gen: AtomicU64::new(0),
            deferred: Arc::new(Deferred::new()),
            gate: Arc::new(tokio::sync::RwLock::new(())),
        };
        if let Some(old) = self.regions.lock().insert(id, Arc::new(r)) {
            // The streams bound to the replaced object end (a newer stream took over): what
            // they delivered and had acknowledged went to buffers no promotion reads, and the
            // primary must not count those acknowledgements any longer.
            old.stream_gen.fetch_add(1, Relaxed);
        }
        Ok(())
    }

    /// Stops being a backup of `region` (it left the group): its streams are refused.
    pub fn remove_region(&self, id: u32) {
        if let Some(old) = self.regions.lock().remove(&id) {
            // Its open streams end at their next frame, unacknowledged (see `add_region`).
            old.stream_gen.fetch_add(1, Relaxed);
        }
    }

    /// The backup regions.
    pub fn region(&self, id: u32) -> Option<Arc<ReplicaRegion>> {
        self.regions.lock().get(&id).cloned()
    }
}

/// The engine's log of a buffer's log number (L0 or large: the logs a record stream carries).
fn log_kind(v: u8) -> Result<LogKind> {
    match v {
        0 => Ok(LogKind::L0),
        2 => Ok(LogKind::Large),
        _ => Err(Error::Malformed("log other than L0 or large in a record stream")),
    }
}

/// The engine's view of log tails (log, primary segment, salt, bytes); logs other than L0 and
/// large are left out.
fn tail_images(tails: &[LogTail]) -> Vec<TailImage<'_>> {
    tails
        .iter()
        .filter_map(|(log, seg, salt, b)| {
            Some(TailImage { log: log_kind(*log).ok()?, primary: *seg, salt: *salt, bytes: b })
        })
        .collect()
}
