//! State every region and background thread of a store shares.

use crate::catalog::manifest::Manifest;
use crate::catalog::Edit;
use crate::device::alloc::Allocator;
use crate::device::Device;
use crate::error::{Error, Result};
use crate::log::listener::{ShipListener, ShippedSegment};
use crate::options::Options;
use crate::tree::sst::ReadCtx;
use parking_lot::{Condvar, Mutex, RwLock};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

/// Lower bounds of the stall buckets after the first: a wait for L0 room is counted under 1 ms,
/// 1–10 ms, 10–100 ms, 100 ms–1 s or 1 s and more.
pub(crate) const STALL_BUCKETS_NS: [u64; 4] = [1_000_000, 10_000_000, 100_000_000, 1_000_000_000];

/// Counters kept outside the device.
#[derive(Default)]
pub(crate) struct Counters {
    pub user_bytes: AtomicU64,
    pub puts: [AtomicU64; 3],
    pub put_bytes: [AtomicU64; 3],
    pub deletes: AtomicU64,
    pub range_deletes: AtomicU64,
    pub range_covered_dropped: AtomicU64,
    pub range_ssts_freed: AtomicU64,
    pub bypass_hits: AtomicU64,
    pub bypass_fallbacks: AtomicU64,
    pub stall_ns: AtomicU64,
    /// Writes that waited for L0 room, by how long (see [`STALL_BUCKETS_NS`]).
    pub stalls: [AtomicU64; 5],
    pub compactions: AtomicU64,
    pub splits: AtomicU64,
    pub split_pause_max_us: AtomicU64,
    pub split_pause_max_written: AtomicU64,
    pub merges: AtomicU64,
    pub trivial_moves: AtomicU64,
    pub expired_dropped: AtomicU64,
    pub medium_merged: AtomicU64,
    pub warmed_leaves: AtomicU64,
    pub compaction_cached_bytes: AtomicU64,
    /// Parts of the L0 merges cut by key range (`Options::l0_merge_parts`).
    pub l0_merge_parts: AtomicU64,
    /// Bytes the warm-up after open put in the cache.
    pub warm_bytes: AtomicU64,
    pub l0_versions_dropped: AtomicU64,
    /// L0 tables whose Dranges were cut anew from the table before them.
    pub drange_reorganisations: AtomicU64,
    /// The load imbalance of the last table switched with more than one Drange (`f64` bits).
    pub drange_imbalance: AtomicU64,
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

    /// Milliseconds since the Unix epoch, by [`Options::clock`] or the system clock.
    pub(crate) fn now_ms(&self) -> u64 {
        match &self.opts.clock {
            Some(c) => (c.0)(),
            None => std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
        }
    }

    /// Runs a wait that may last long through [`Options::wait_hook`] (directly if the hook
    /// did not run it).
    pub(crate) fn waiting<R>(&self, mut f: impl FnMut() -> R) -> R {
        let Some(hook) = &self.opts.wait_hook else { return f() };
        let mut out = None;
        (hook.0)(&mut || out = Some(f()));
        match out {
            Some(r) => r,
            None => f(),
        }
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
