//! State every region and background thread of a store shares.

use crate::alloc::Allocator;
use crate::catalog::{Edit, SstInfo};
use crate::device::Device;
use crate::error::{Error, Result};
use crate::logtail::LogKind;
use crate::manifest::Manifest;
use crate::options::Options;
use crate::sst::ReadCtx;
use parking_lot::{Condvar, Mutex, RwLock};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

/// Receives what a primary must ship to its backups (docs/design.md §3). Log appends come from
/// writers under the region's write lock, in LSN order; segments and edits from compaction and
/// GC threads, in the order things happen. Keep every call quick (queue and return).
pub trait ShipListener: Send + Sync {
    /// Bytes appended to a log (L0 or large) at `offset` of segment `seg` (whose records carry
    /// `salt`); `last_lsn` is the last LSN they hold. Offsets continue where the previous call
    /// for this segment stopped.
    #[allow(clippy::too_many_arguments)]
    fn log_append(&self, region: u32, log: LogKind, seg: u32, salt: u32, offset: u32, bytes: &[u8], last_lsn: u64);
    /// The log moves on from `seg`: nothing more will be appended to it (step 2's `flush`).
    fn log_sealed(&self, region: u32, log: LogKind, seg: u32, salt: u32);
    /// A finished compaction output segment, before the edit that publishes it.
    fn segment(&self, region: u32, seg: ShippedSegment<'_>);
    /// The edits a compaction or GC committed, in primary segment numbers.
    fn edits(&self, region: u32, edits: &[Edit]);
}

/// A compaction output segment.
#[derive(Clone, Copy, Debug)]
pub enum ShippedSegment<'a> {
    /// An SST: its leaves hold log pointers that a backup rewrites (`Db::rewrite_sst`).
    Sst {
        /// Its description (`info.seg` is the primary's segment).
        info: &'a SstInfo,
        /// The used part of the segment.
        bytes: &'a [u8],
    },
    /// A segment of the medium log holding part of a sorted run.
    MediumRun {
        /// The primary's segment.
        seg: u32,
        /// Salt of the records in it.
        salt: u32,
        /// The written part of the segment.
        bytes: &'a [u8],
    },
}

/// Counters kept outside the device.
#[derive(Default)]
pub(crate) struct Counters {
    pub user_bytes: AtomicU64,
    pub puts: [AtomicU64; 3],
    pub put_bytes: [AtomicU64; 3],
    pub deletes: AtomicU64,
    pub stall_ns: AtomicU64,
    pub compactions: AtomicU64,
    pub trivial_moves: AtomicU64,
    pub medium_merged: AtomicU64,
    pub warmed_leaves: AtomicU64,
    pub compaction_cached_bytes: AtomicU64,
    pub l0_versions_dropped: AtomicU64,
    pub gc_runs: AtomicU64,
    pub gc_segments: AtomicU64,
    pub gc_known_segments: AtomicU64,
    pub gc_bytes_moved: AtomicU64,
    pub recovery_dropped: AtomicU64,
    pub open_micros: AtomicU64,
    pub open_read_bytes: AtomicU64,
}

pub(crate) struct Shared {
    pub opts: Options,
    pub dev: Arc<Device>,
    pub alloc: Arc<Allocator>,
    pub manifest: Manifest,
    pub ctx: ReadCtx,
    poisoned: AtomicBool,
    poison: Mutex<Option<String>>,
    pub counters: Counters,
    pub work: Mutex<u64>,
    pub work_cv: Condvar,
    pub shutdown: AtomicBool,
    pub listener: RwLock<Option<Arc<dyn ShipListener>>>,
}

impl Shared {
    pub(crate) fn new(
        opts: Options,
        dev: Arc<Device>,
        alloc: Arc<Allocator>,
        manifest: Manifest,
        ctx: ReadCtx,
    ) -> Shared {
        Shared {
            opts,
            dev,
            alloc,
            manifest,
            ctx,
            poisoned: AtomicBool::new(false),
            poison: Mutex::new(None),
            counters: Counters::default(),
            work: Mutex::new(0),
            work_cv: Condvar::new(),
            shutdown: AtomicBool::new(false),
            listener: RwLock::new(None),
        }
    }

    pub(crate) fn check(&self) -> Result<()> {
        if self.poisoned.load(Relaxed) {
            return Err(Error::Poisoned(self.poison.lock().clone().unwrap_or_default()));
        }
        Ok(())
    }

    pub(crate) fn poison(&self, why: String) {
        tracing::error!("store poisoned: {why}");
        let mut g = self.poison.lock();
        if g.is_none() {
            *g = Some(why);
        }
        self.poisoned.store(true, Relaxed);
        self.wake();
    }

    /// Records the error of a failed foreground I/O: the store stops taking writes.
    pub(crate) fn fail<T>(&self, e: Error) -> Result<T> {
        if matches!(e, Error::Io { .. } | Error::NoSpace { what: "file system full" }) {
            self.poison(e.to_string());
        }
        Err(e)
    }

    pub(crate) fn is_poisoned(&self) -> bool {
        self.poisoned.load(Relaxed)
    }

    /// Wakes background workers.
    pub(crate) fn wake(&self) {
        *self.work.lock() += 1;
        self.work_cv.notify_all();
    }

    pub(crate) fn ship_segment(&self, region: u32, seg: ShippedSegment<'_>) {
        if let Some(l) = self.listener.read().as_ref() {
            l.segment(region, seg);
        }
    }

    pub(crate) fn listener(&self) -> Option<Arc<dyn ShipListener>> {
        self.listener.read().clone()
    }

    pub(crate) fn ship_edits(&self, region: u32, edits: &[Edit]) {
        if let Some(l) = self.listener.read().as_ref() {
            l.edits(region, edits);
        }
    }
}
