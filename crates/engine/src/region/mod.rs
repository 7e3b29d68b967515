//! A region: one key range with its own L0, logs, levels and LSN counter. This file holds the
//! `Region` struct, its construction and the pieces its files share; the region's work is in
//! its other files: the write path (`write.rs`), flow control (`pace.rs`), point reads
//! (`read.rs`), log values (`value.rs`), scans (`iter.rs`), recovery (`recovery.rs`) and the
//! state other subsystems keep in a region (`slots.rs`).

pub(crate) mod dead;
pub(crate) mod iter;
pub(crate) mod pace;
pub(crate) mod read;
pub(crate) mod recovery;
pub(crate) mod shared;
pub(crate) mod slots;
pub(crate) mod value;
pub(crate) mod warm;
pub(crate) mod write;

use crate::catalog::LogKind;
use crate::catalog::RegionMeta;
use crate::format::rangedel::RangeDel;
use crate::log::tail::LogTail;
use crate::log::writer::LogWriter;
use crate::region::dead::DeadRecords;
use crate::region::shared::Shared;
use crate::region::slots::{BackupState, CompactionState, GcState};
use crate::tree::bypass::Bypass;
use crate::tree::memtable::Memtable;
use crate::tree::view::{Version, View};
use arc_swap::ArcSwap;
use parking_lot::{Condvar, Mutex};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

/// Size class of a KV pair.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Category {
    Small = 0,
    Medium = 1,
    Large = 2,
}

pub(crate) fn category(small: usize, large: usize, kv: usize) -> Category {
    if kv < small {
        Category::Small
    } else if kv < large {
        Category::Medium
    } else {
        Category::Large
    }
}

/// What the region's single writer owns.
pub(crate) struct WriteState {
    pub next_lsn: u64,
    pub l0: LogTail,
    pub large: LogTail,
    /// L0-log segments holding the records of the mutable table.
    pub mem_l0_segs: Vec<u32>,
    /// L0-log segments holding the records of the immutable table.
    pub imm_l0_segs: Vec<u32>,
    /// Large-log bytes appended since the mutable table started: what recovery would read of
    /// the large log for it, bounded like its L0 log (`Options::l0_large_log_limit`).
    pub mem_large_bytes: u64,
}

pub(crate) struct Region {
    id: u32,
    start: Vec<u8>,
    end: Option<Vec<u8>>,
    backup: bool,
    sh: Arc<Shared>,
    view: ArcSwap<View>,
    install_lock: Mutex<()>,
    w: Mutex<WriteState>,
    /// Signalled when writers waiting for room may go on (`pace.rs`).
    w_cv: Condvar,
    visible: AtomicU64,
    /// Writes inserted into L0 but not yet visible because an earlier one is still being
    /// inserted: first LSN -> last LSN. The writer that closes the gap publishes them.
    done: Mutex<std::collections::BTreeMap<u64, u64>>,
    /// Signalled whenever `visible` advances.
    published: Condvar,
    synced: Mutex<u64>,
    /// The last LSN written to the storage (not synced), for storages that acknowledge a
    /// write only then ([`crate::Storage::tails_before_ack`]).
    pushed: Mutex<u64>,
    /// Compaction could not get space; writers that would stall fail with NoSpace.
    no_space: AtomicBool,
    /// How far the running L0->L1 merge has read its L1 inputs, in thousandths: writers that
    /// fill the next table faster than the merge goes are slowed to its pace (`make_room`).
    l0_merge_progress: AtomicU32,
    /// Compaction's level claims and cursors (`placement/compaction.rs`).
    compaction_state: CompactionState,
    /// GC's pass lock (`placement/gc.rs`).
    gc_state: GcState,
    /// A backup region's segments received that no committed edit names yet
    /// (`replication/backup.rs`).
    backup_state: BackupState,
    /// Large-log records that committed compactions superseded (GC's validity check).
    dead: DeadRecords,
    /// The log tails' device writes, done after the write lock is released.
    writer: Arc<LogWriter>,
    /// Identity of this region's rows in the row cache: a region rebuilt (promotion, a backup
    /// reset) starts with no rows, and a new one is taken when every row must go at once
    /// ([`Region::forget_rows`]).
    uid: AtomicU64,
    /// Bumped by every L0->L1 compaction before it removes the rows of the keys it moves.
    row_epoch: AtomicU64,
    /// Readers insert a row only under this (shared) and only if the epoch has not moved; the
    /// bump takes it exclusively. Checking the epoch after inserting would let another reader
    /// hit the stale row in between.
    row_gate: parking_lot::RwLock<()>,
    /// The LSM bypass (`tree/bypass.rs`): None when off, and for backup regions.
    bypass: Option<Bypass>,
    /// Set (under the write lock) when a split or merge takes this region object out of
    /// service: writes then fail with `RegionChanged` (`Db::split_region`).
    retired: AtomicBool,
    /// Set when a successor took this object's place in the store (a split's halves share its
    /// L0 table, which they write out): it has nothing of its own to flush any more.
    replaced: AtomicBool,
    /// Set (under the write lock) while a primary hands the region off: client writes and GC
    /// passes fail with `RegionFenced`, so the LSN the fence returned is the region's last.
    fenced: AtomicBool,
    /// Set while background work leaves the region alone (`Options::open_quiet`).
    quiet: AtomicBool,
}

static NEXT_REGION_UID: AtomicU64 = AtomicU64::new(1);

/// How long a writer waits (for the write lock, or paced behind a merge) before its wait goes
/// through [`crate::options::Options::wait_hook`]: the hook's hand-off of a thread costs more
/// than the short waits of normal contention (every paced wait and every lock wait past 1 ms
/// through it cost pipelined SETs a quarter of their throughput).
const LONG_WAIT: Duration = Duration::from_millis(10);

impl Region {
    /// The region's id in the catalog.
    pub(crate) fn id(&self) -> u32 {
        self.id
    }

    /// The region's first key.
    pub(crate) fn start(&self) -> &Vec<u8> {
        &self.start
    }

    /// Whether the range `[start, end)` (`end` None: unbounded) shares no key with this region's.
    pub(crate) fn disjoint(&self, start: &[u8], end: Option<&[u8]>) -> bool {
        end.is_some_and(|e| e <= self.start().as_slice()) || self.end().as_deref().is_some_and(|re| re <= start)
    }

    /// `d` cut to the region's range; None when nothing of it is left (a split's half shares
    /// its parent's L0 tables, whose range deletes may reach into the other half).
    pub(crate) fn clip(&self, mut d: RangeDel) -> Option<RangeDel> {
        if d.start < self.start {
            d.start.clone_from(&self.start);
        }
        if let Some(e) = self.end.as_ref().filter(|e| d.end > **e) {
            d.end.clone_from(e);
        }
        (d.end > d.start).then_some(d)
    }

    /// The key after the region's last (`None`: the end of the key space).
    pub(crate) fn end(&self) -> &Option<Vec<u8>> {
        &self.end
    }

    /// Whether this node holds the region as a backup (replicated writes only).
    pub(crate) fn is_backup(&self) -> bool {
        self.backup
    }

    /// What the store's regions share (device, catalog, options, counters, workers).
    pub(crate) fn sh(&self) -> &Arc<Shared> {
        &self.sh
    }

    /// The single writer's state; see the lock order in the crate's documentation. Taken by
    /// other subsystems to hold the region's writers still.
    pub(crate) fn w(&self) -> &Mutex<WriteState> {
        &self.w
    }

    /// The last LSN readers may see.
    pub(crate) fn lsn(&self) -> u64 {
        self.visible.load(Relaxed)
    }

    /// Takes the region out of service for writes (true) or puts it back (false, a split
    /// that failed). Writers check it under the write lock, so once this returns no write
    /// appends to the region any more.
    pub(crate) fn set_retired(&self, retired: bool) {
        let _w = self.w.lock();
        self.retired.store(retired, Relaxed);
    }

    /// Stops (true) or resumes (false) the region's client writes and GC passes. Both check
    /// it under the write lock, so once this returns no LSN past the returned one (the last
    /// assigned) is taken until the fence is lifted; a split's Mark still is.
    pub(crate) fn set_fenced(&self, fenced: bool) -> u64 {
        let w = self.w.lock();
        self.fenced.store(fenced, Relaxed);
        w.next_lsn.saturating_sub(1)
    }

    /// Whether compaction, GC, size splits and the flush at close leave the region alone
    /// (`Options::open_quiet`).
    pub(crate) fn is_quiet(&self) -> bool {
        self.quiet.load(Relaxed)
    }

    /// See [`Region::is_quiet`].
    pub(crate) fn set_quiet(&self, quiet: bool) {
        self.quiet.store(quiet, Relaxed);
    }

    /// Whether a handoff fenced the region ([`Region::set_fenced`]).
    pub(crate) fn is_fenced(&self) -> bool {
        self.fenced.load(Relaxed)
    }

    /// Marks a region object its successor replaces (see [`Region::set_retired`]); its
    /// caller stopped its writes already, perhaps holding the write lock.
    pub(crate) fn mark_retired(&self) {
        self.retired.store(true, Relaxed);
        self.replaced.store(true, Relaxed);
    }

    /// Whether a successor took this object's place ([`Region::mark_retired`]).
    pub(crate) fn is_replaced(&self) -> bool {
        self.replaced.load(Relaxed)
    }

    pub(crate) fn is_retired(&self) -> bool {
        self.retired.load(Relaxed)
    }

    /// The snapshot a read of the region takes: its last visible LSN, or on a backup region
    /// everything its levels hold. A backup writes nothing itself (its `visible` stays where
    /// it was made), and its levels and range deletes change only by its primary's committed
    /// edits; a range delete of a higher LSN than `visible` must still hide what it covers.
    pub(crate) fn read_snap(&self) -> u64 {
        if self.backup {
            u64::MAX
        } else {
            self.visible.load(Relaxed)
        }
    }

    /// The LSM bypass, when the region keeps one: compaction maintains it, reads use it.
    pub(crate) fn bypass(&self) -> Option<&Bypass> {
        self.bypass.as_ref()
    }

    /// Large-log records that committed compactions superseded.
    pub(crate) fn dead(&self) -> &DeadRecords {
        &self.dead
    }

    /// Compaction's slot: used by `placement/compaction.rs` alone.
    pub(crate) fn compaction_state(&self) -> &CompactionState {
        &self.compaction_state
    }

    /// GC's slot: used by `placement/gc.rs` alone.
    pub(crate) fn gc_state(&self) -> &GcState {
        &self.gc_state
    }

    /// A backup region's slot: used by `replication/backup.rs` alone.
    pub(crate) fn backup_state(&self) -> &BackupState {
        &self.backup_state
    }

    pub(crate) fn new(id: u32, meta: &RegionMeta, sh: Arc<Shared>, mem: Memtable, next_lsn: u64) -> Region {
        // Its first table (a new region's, or L0 rebuilt by recovery) has one Drange: it asks
        // to be cut once it has sampled enough writes (`Memtable::wants_switch`).
        let mem = if meta.backup { mem } else { mem.with_theta(sh.opts.dranges) };
        let version = Arc::new(Version::default().rebuilt(meta));
        let view = View::new(Arc::new(mem), None, version, sh.alloc.clone());
        let seg = sh.dev.seg_bytes() as usize;
        let chunk = sh.opts.log_chunk_bytes;
        let nlevels = sh.opts.max_levels + 1;
        let writer = Arc::new(LogWriter::new(chunk));
        Region {
            id,
            start: meta.start.clone(),
            end: meta.end.clone(),
            backup: meta.backup,
            view: ArcSwap::from_pointee(view),
            install_lock: Mutex::new(()),
            w: Mutex::new(WriteState {
                next_lsn,
                l0: LogTail::deferred(LogKind::L0, seg, chunk, writer.clone()),
                large: LogTail::deferred(LogKind::Large, seg, chunk, writer.clone()),
                mem_l0_segs: meta.log(LogKind::L0).iter().map(|s| s.seg).collect(),
                imm_l0_segs: Vec::new(),
                mem_large_bytes: 0,
            }),
            w_cv: Condvar::new(),
            visible: AtomicU64::new(next_lsn - 1),
            done: Mutex::new(Default::default()),
            published: Condvar::new(),
            synced: Mutex::new(next_lsn - 1),
            pushed: Mutex::new(next_lsn - 1),
            no_space: AtomicBool::new(false),
            l0_merge_progress: AtomicU32::new(0),
            compaction_state: CompactionState::new(nlevels + 1),
            gc_state: GcState::default(),
            backup_state: BackupState::default(),
            dead: Default::default(),
            writer,
            uid: AtomicU64::new(NEXT_REGION_UID.fetch_add(1, Relaxed)),
            row_epoch: AtomicU64::new(0),
            row_gate: parking_lot::RwLock::new(()),
            bypass: (sh.opts.lsm_bypass_bytes > 0 && !meta.backup).then(|| Bypass::new(sh.opts.lsm_bypass_bytes)),
            retired: AtomicBool::new(false),
            replaced: AtomicBool::new(false),
            fenced: AtomicBool::new(false),
            quiet: AtomicBool::new(false),
            sh,
        }
    }

    /// Continues the logs where recovery left them ([`crate::region::recovery::Resume`]); the
    /// replayed large-log bytes count against the recovered table's bound.
    pub(crate) fn resume(&self, resume: Vec<crate::region::recovery::Resume>, large_bytes: u64) {
        let mut w = self.w.lock();
        let last = w.next_lsn - 1;
        for r in resume {
            let tail = if r.kind == LogKind::Large { &mut w.large } else { &mut w.l0 };
            tail.resume(r.seg, r.salt, r.image, r.pos, last);
        }
        w.mem_large_bytes = large_bytes;
    }

    /// Device bytes of the log segments that recovery would read if the store opened now:
    /// the L0 log and the large-log segments L1 does not cover yet.
    pub(crate) fn unflushed_log_bytes(&self) -> u64 {
        let Some(meta) = self.sh.manifest.region(self.id) else {
            return 0;
        };
        let l0 = meta.log(LogKind::L0).len();
        let large = meta.log(LogKind::Large).iter().filter(|s| s.sealed > meta.l1_lsn).count();
        (l0 + large) as u64 * self.sh.dev.seg_bytes()
    }

    /// Whether a clean close should write L0 into L1 first: when the next open would read
    /// more than one L0 table's worth of log, or when the large-log bytes that L0's superseded
    /// versions hold exceed what the merge would write (L0 and L1), so that GC can take them
    /// even in a store that is only ever open briefly.
    pub(crate) fn flush_on_close(&self) -> bool {
        if self.backup {
            return false;
        }
        // The two log tails are read whole whatever the table's size.
        let table = (self.sh.opts.l0_bytes as u64).max(2 * self.sh.dev.seg_bytes());
        if self.unflushed_log_bytes() > table {
            return true;
        }
        let v = self.view();
        let tables = [Some(&v.mem), v.imm.as_ref()];
        let dead: u64 = tables.iter().flatten().map(|m| m.dead_large_bytes()).sum();
        let l0: u64 = tables.iter().flatten().map(|m| m.bytes() as u64).sum();
        let l1: u64 = v.version.levels.first().map_or(0, |l| l.iter().map(|s| s.info.full_bytes).sum());
        dead > l0 + l1
    }

    pub(crate) fn contains(&self, key: &[u8]) -> bool {
        key >= self.start.as_slice() && self.end.as_ref().is_none_or(|e| key < e.as_slice())
    }

    pub(crate) fn view(&self) -> Arc<View> {
        self.view.load_full()
    }

    /// Installs the view `f` builds from the current one; `freed` segments are released once
    /// no reader of the old views remains. Returns the view it replaced.
    pub(crate) fn install(&self, f: impl FnOnce(&View) -> View, freed: Vec<u32>) -> Arc<View> {
        let _g = self.install_lock.lock();
        let old = self.view.load_full();
        let new = Arc::new(f(&old));
        old.retire(new.clone(), freed);
        self.view.store(new);
        old
    }
}

/// The cache key of a log value: its pointer and its segment's salt, so that a reused segment
/// never serves a stale value.
pub(crate) fn value_cache_key(ptr: u64, salt: u32) -> u128 {
    ((ptr as u128) << 32) | salt as u128
}
