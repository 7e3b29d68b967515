//! A region: one key range with its own L0, logs, levels and LSN counter.

#![expect(
    clippy::indexing_slicing,
    reason = "log tails and per-level vectors are indexed within the sizes the region gave them"
)]

pub(crate) mod dead;
pub(crate) mod iter;
pub(crate) mod pace;
pub(crate) mod recovery;
pub(crate) mod shared;
pub(crate) mod warm;

use crate::catalog::LogKind;
use crate::catalog::{Edit, RegionMeta};
use crate::device::alloc::Purpose;
use crate::error::{Error, Result};
use crate::format::bloom;
use crate::format::rangedel::RangeDel;
use crate::format::record::{self, KIND_DELETE, KIND_PUT, KIND_RANGE_DELETE};
use crate::log::listener::ShipListener;
use crate::log::tail::LogTail;
use crate::log::writer::LogWriter;
use crate::region::shared::{Shared, STALL_BUCKETS_NS};
use crate::tree::bypass::Bypass;
use crate::tree::memtable::{Entry, Memtable, Value};
use crate::tree::rowcache;
use crate::tree::sst::Sst;
use crate::tree::view::{Version, View};
use arc_swap::ArcSwap;
use parking_lot::{Condvar, Mutex, MutexGuard};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{
    AtomicBool, AtomicU32, AtomicU64,
    Ordering::{Acquire, Relaxed, Release, SeqCst},
};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Segments a backup reserved or wrote that no committed edit names yet. Lost (and the
/// segments freed) if the process stops: the primary ships them again when the backup
/// catches up.
#[derive(Default)]
pub(crate) struct Reserved {
    /// (primary log segment, salt) -> local segment.
    pub(crate) log: HashMap<(u32, u32), u32>,
    /// Primary SST segment -> local segment holding the rewritten SST.
    pub(crate) index: HashMap<u32, u32>,
}

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
    w_cv: Condvar,
    visible: AtomicU64,
    /// Writes inserted into L0 but not yet visible because an earlier one is still being
    /// inserted: first LSN -> last LSN. The writer that closes the gap publishes them.
    done: Mutex<std::collections::BTreeMap<u64, u64>>,
    /// Signalled whenever `visible` advances.
    published: Condvar,
    synced: Mutex<u64>,
    /// Levels (0 = L0) taking part in a running compaction.
    busy: Mutex<Vec<bool>>,
    /// Per level: the last key compacted, for round-robin SST choice.
    cursor: Mutex<Vec<Vec<u8>>>,
    /// Compaction could not get space; writers that would stall fail with NoSpace.
    no_space: AtomicBool,
    /// How far the running L0->L1 merge has read its L1 inputs, in thousandths: writers that
    /// fill the next table faster than the merge goes are slowed to its pace (`make_room`).
    l0_merge_progress: AtomicU32,
    /// Backup: segments received that no committed edit names yet.
    reserved: Mutex<crate::region::Reserved>,
    /// Held by a GC pass; taken to keep GC out (a snapshot for a new backup).
    gc_lock: Mutex<()>,
    /// Large-log records that committed compactions superseded (GC's validity check).
    dead: crate::region::dead::DeadRecords,
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
}

static NEXT_REGION_UID: AtomicU64 = AtomicU64::new(1);

/// How long a writer waits (for the write lock, or paced behind a merge) before its wait goes
/// through [`crate::options::Options::wait_hook`]: the hook's hand-off of a thread costs more
/// than the short waits of normal contention (every paced wait and every lock wait past 1 ms
/// through it cost pipelined SETs a quarter of their throughput).
const LONG_WAIT: Duration = Duration::from_millis(10);

/// Records appended to the logs and not yet in L0.
pub(crate) struct Pending {
    mem: Arc<Memtable>,
    first: u64,
    values: Vec<Value>,
    /// The append queued log writes: the caller drains them once it has let go of the lock.
    pub(crate) queued: bool,
}

impl Pending {
    /// What the L0 entries of the batch hold, in order: values or log pointers.
    pub(crate) fn values(&self) -> &[Value] {
        &self.values
    }
}

/// A write the caller issues.
pub(crate) enum Op<'a> {
    /// Key, value, expiry time (0: never).
    Put(&'a [u8], &'a [u8], u64),
    Delete(&'a [u8]),
    /// Every key of `[start, end)`.
    DeleteRange(&'a [u8], &'a [u8]),
}

impl<'a> Op<'a> {
    /// The op's log record, without salt and LSN.
    fn body(&self) -> record::Body<'a> {
        match *self {
            Op::Put(key, value, expire_at) => record::Body { kind: KIND_PUT, key, value, expire_at },
            Op::Delete(key) => record::Body { kind: KIND_DELETE, key, value: &[], expire_at: 0 },
            Op::DeleteRange(start, end) => {
                record::Body { kind: KIND_RANGE_DELETE, key: start, value: end, expire_at: 0 }
            }
        }
    }

    fn key(&self) -> &[u8] {
        match self {
            Op::Put(k, ..) | Op::Delete(k) | Op::DeleteRange(k, _) => k,
        }
    }

    /// A delete of one key or of a range: it may use the space kept for compaction.
    fn deletes(&self) -> bool {
        matches!(self, Op::Delete(_) | Op::DeleteRange(..))
    }
}

impl Region {
    /// The region's id in the catalog.
    pub(crate) fn id(&self) -> u32 {
        self.id
    }

    /// The region's first key.
    pub(crate) fn start(&self) -> &Vec<u8> {
        &self.start
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

    /// The single writer's state; see the lock order in the crate's documentation.
    pub(crate) fn w(&self) -> &Mutex<WriteState> {
        &self.w
    }

    /// Signalled when writers waiting for room may go on.
    pub(crate) fn w_cv(&self) -> &Condvar {
        &self.w_cv
    }

    /// The last LSN readers may see.
    pub(crate) fn visible(&self) -> &AtomicU64 {
        &self.visible
    }

    /// Levels (0 = L0) taking part in a running compaction.
    pub(crate) fn busy(&self) -> &Mutex<Vec<bool>> {
        &self.busy
    }

    /// Per level: the last key compacted, for round-robin SST choice.
    pub(crate) fn cursor(&self) -> &Mutex<Vec<Vec<u8>>> {
        &self.cursor
    }

    /// Set when compaction could not get space: writers that would stall fail with NoSpace.
    pub(crate) fn no_space(&self) -> &AtomicBool {
        &self.no_space
    }

    /// How far the running L0->L1 merge has read its L1 inputs, in thousandths.
    pub(crate) fn l0_merge_progress(&self) -> &AtomicU32 {
        &self.l0_merge_progress
    }

    /// Backup: segments received that no committed edit names yet.
    pub(crate) fn reserved(&self) -> &Mutex<Reserved> {
        &self.reserved
    }

    /// Held by a GC pass; taken to keep GC out.
    pub(crate) fn gc_lock(&self) -> &Mutex<()> {
        &self.gc_lock
    }

    /// Large-log records that committed compactions superseded.
    pub(crate) fn bypass(&self) -> Option<&Bypass> {
        self.bypass.as_ref()
    }

    pub(crate) fn dead(&self) -> &crate::region::dead::DeadRecords {
        &self.dead
    }

    pub(crate) fn new(id: u32, meta: &RegionMeta, sh: Arc<Shared>, mem: Memtable, next_lsn: u64) -> Region {
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
            busy: Mutex::new(vec![false; nlevels + 1]),
            cursor: Mutex::new(vec![Vec::new(); nlevels + 1]),
            no_space: AtomicBool::new(false),
            l0_merge_progress: AtomicU32::new(0),
            reserved: Mutex::new(Default::default()),
            gc_lock: Mutex::new(()),
            dead: Default::default(),
            writer,
            uid: AtomicU64::new(NEXT_REGION_UID.fetch_add(1, Relaxed)),
            row_epoch: AtomicU64::new(0),
            row_gate: parking_lot::RwLock::new(()),
            bypass: (sh.opts.lsm_bypass_bytes > 0 && !meta.backup).then(|| Bypass::new(sh.opts.lsm_bypass_bytes)),
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

    fn check_op(&self, op: &Op<'_>) -> Result<()> {
        let o = &self.sh.opts;
        let key = op.key();
        if key.len() > o.max_key_bytes {
            return Err(Error::KeyTooLarge { len: key.len(), limit: o.max_key_bytes });
        }
        if let Op::Put(_, v, _) = op {
            let limit = o.value_limit(key.len());
            if v.len() > limit {
                return Err(Error::ValueTooLarge { len: v.len(), limit });
            }
        }
        if !self.contains(key) {
            return Err(Error::KeyOutOfRegion(self.id));
        }
        if let Op::DeleteRange(start, end) = op {
            if end.len() > o.max_key_bytes {
                return Err(Error::KeyTooLarge { len: end.len(), limit: o.max_key_bytes });
            }
            if end <= start {
                return Err(Error::EmptyRange);
            }
            // The range ends inside the region or at its end (the caller splits a longer one).
            if self.end.as_ref().is_some_and(|e| *end > e.as_slice()) {
                return Err(Error::KeyOutOfRegion(self.id));
            }
        }
        Ok(())
    }

    /// Applies `ops` atomically. Returns the LSN of the last one.
    pub(crate) fn write(&self, ops: &[Op<'_>]) -> Result<u64> {
        if self.backup {
            return Err(Error::BackupRegion(self.id));
        }
        for op in ops {
            self.check_op(op)?;
        }
        if ops.is_empty() {
            return Ok(self.visible.load(Relaxed));
        }
        let pending = {
            let mut w = self.lock_long(&self.w);
            self.make_room(&mut w)?;
            self.append_locked(&mut w, ops, true)?
        };
        // L0 insertion runs outside the write lock, concurrently with other writers; the
        // lock covers only LSN assignment and the log append. So do the log's device writes:
        // after the insertion, so that the writes after this one are not held up either.
        let queued = pending.queued;
        let last = self.finish(pending, ops)?;
        if queued {
            self.drain_log_writes()?;
        }
        let dropped = self.view.load().mem.remove_ready();
        if dropped > 0 {
            self.sh.counters.l0_versions_dropped.fetch_add(dropped as u64, Relaxed);
        }
        if self.sh.opts.sync == crate::options::SyncMode::Always {
            self.sync_to(last)?;
        }
        Ok(last)
    }

    /// Appends records to the logs; the caller holds the write lock and then calls
    /// [`Region::finish`] (with or without the lock) to insert them into L0 and publish them.
    pub(crate) fn append_locked(&self, w: &mut WriteState, ops: &[Op<'_>], user: bool) -> Result<Pending> {
        self.sh.check()?;
        let (cats, lens) = self.classify(ops);
        // Reserve every segment the batch needs first, so that it either fits whole or
        // fails before any of it is written: the log never holds a partial batch, and
        // every LSN handed out has its record.
        let mut reserved = self.reserve_segments(w, ops, &lens)?;
        w.mem_large_bytes += lens[1].iter().map(|l| l.1 as u64).sum::<u64>();
        let queued_before = self.writer.queued();
        // Taken once per batch: the records' segment switches and the final hand-off use it.
        let listener = self.sh.listener();
        let (lsn, values) = self.append_records(w, ops, &cats, &mut reserved, user, listener.as_deref())?;
        if let Some(l) = listener.as_deref() {
            w.l0.ship(l, self.id, false);
            w.large.ship(l, self.id, false);
        }
        let mem = self.view.load().mem.clone();
        mem.writer_enter();
        Ok(Pending { mem, first: lsn + 1 - ops.len() as u64, values, queued: self.writer.queued() != queued_before })
    }

    /// Each op's size class, and per log (L0, large) the (op index, record length) it appends.
    fn classify(&self, ops: &[Op<'_>]) -> (Vec<Category>, [Vec<(u64, usize)>; 2]) {
        let o = &self.sh.opts;
        let mut lens: [Vec<(u64, usize)>; 2] = [Vec::new(), Vec::new()];
        let mut cats = Vec::with_capacity(ops.len());
        for (i, op) in ops.iter().enumerate() {
            let body = op.body();
            let (k, v) = (body.key, body.value);
            let c = if op.deletes() {
                Category::Small
            } else {
                category(o.small_threshold, o.large_threshold, k.len() + v.len())
            };
            cats.push(c);
            let log = if c == Category::Large { &mut lens[1] } else { &mut lens[0] };
            log.push((i as u64, body.encoded_len()));
        }
        (cats, lens)
    }

    /// Allocates and commits (unsynced) the segments the batch's records need beyond the
    /// tails' room, per log in the order they will be used.
    fn reserve_segments(
        &self,
        w: &mut WriteState,
        ops: &[Op<'_>],
        lens: &[Vec<(u64, usize)>; 2],
    ) -> Result<[VecDeque<(u32, u32)>; 2]> {
        let mut reserved: [VecDeque<(u32, u32)>; 2] = [VecDeque::new(), VecDeque::new()];
        let mut edits = Vec::new();
        if let Err(e) = self.plan_segments(w, ops, lens, &mut reserved, &mut edits) {
            for (s, _) in reserved.iter().flatten() {
                self.sh.alloc.release(*s);
            }
            return Err(e);
        }
        if !edits.is_empty() {
            // Not synced here: a record in the new segment counts as durable only after an
            // fdatasync (the writer's under `SyncMode::Always`, else the group commit's), and
            // that sync makes this catalog record durable too.
            // A device write of the catalog's log, under the write lock: through the wait hook.
            if let Err(e) = self.sh.waiting(|| self.sh.manifest.commit_unsynced(self.id, &edits)) {
                return self.sh.fail(e);
            }
            let [l0, large] = &reserved;
            w.mem_l0_segs.extend(l0.iter().map(|s| s.0));
            for &(seg, salt) in large {
                self.dead.opened(seg, salt);
            }
        }
        Ok(reserved)
    }

    /// [`Region::reserve_segments`]' allocation: the segments and the edits that add them.
    fn plan_segments(
        &self,
        w: &WriteState,
        ops: &[Op<'_>],
        lens: &[Vec<(u64, usize)>; 2],
        reserved: &mut [VecDeque<(u32, u32)>; 2],
        edits: &mut Vec<Edit>,
    ) -> Result<()> {
        let seg_bytes = self.sh.dev.seg_bytes() as usize;
        // Deletes may use the space kept for compaction: on a full device they are how a user
        // makes room, and the compactions they allow free more than they take.
        let purpose = if ops.iter().all(Op::deletes) { Purpose::Background } else { Purpose::Writes };
        for ((tail, lens), reserved) in [&w.l0, &w.large].into_iter().zip(lens).zip(reserved.iter_mut()) {
            let mut rem = tail.remaining();
            // The segment being filled and the LSN of its last record.
            let (mut cur, mut cur_last) = (tail.seg.map(|s| s.0), tail.last_lsn);
            for &(op, l) in lens {
                if l > rem {
                    let seg = self.sh.alloc.alloc(purpose)?;
                    let salt = rand::random::<u32>();
                    reserved.push_back((seg, salt));
                    if let (LogKind::Large, Some(old)) = (tail.kind, cur) {
                        // The tail leaves `old` for good: what it holds is known now, so that
                        // recovery need not read it once L1 covers it and GC knows its fill.
                        edits.push(Edit::LogSeal { log: LogKind::Large, seg: old, max_lsn: cur_last });
                        edits.push(Edit::LogFill { log: LogKind::Large, seg: old, bytes: (seg_bytes - rem) as u32 });
                    }
                    edits.push(Edit::LogAdd { log: tail.kind, seg, salt });
                    (cur, rem) = (Some(seg), seg_bytes);
                }
                rem -= l;
                cur_last = w.next_lsn + op;
            }
        }
        Ok(())
    }

    /// Appends each op's record to its log, switching to the reserved segments as tails fill;
    /// returns the last LSN and the L0 value of each op.
    fn append_records(
        &self,
        w: &mut WriteState,
        ops: &[Op<'_>],
        cats: &[Category],
        reserved: &mut [VecDeque<(u32, u32)>; 2],
        user: bool,
        listener: Option<&dyn ShipListener>,
    ) -> Result<(u64, Vec<Value>)> {
        let dev = &self.sh.dev;
        let n = ops.len() as u32;
        let mut lsn = 0;
        let mut values = Vec::with_capacity(ops.len());
        let [res_l0, res_large] = reserved;
        for (i, (op, &cat)) in ops.iter().zip(cats).enumerate() {
            lsn = w.next_lsn;
            let body = op.body();
            let (k, v, kind) = (body.key, body.value, body.kind);
            let (tail, res) =
                if cat == Category::Large { (&mut w.large, &mut *res_large) } else { (&mut w.l0, &mut *res_l0) };
            if tail.remaining() < body.encoded_len() {
                let Some((seg, salt)) = res.pop_front() else {
                    // LSNs were handed out without records: no later write could be published.
                    let why = "log reservation miscounted".to_string();
                    self.sh.poison(why.clone());
                    return Err(Error::Poisoned(why));
                };
                if let Some(l) = listener {
                    tail.ship(l, self.id, true);
                }
                if let Err(e) = tail.switch(dev, seg, salt) {
                    return self.sh.fail(e);
                }
            }
            let (ptr, len) = match tail.append(dev, body, lsn, n - 1 - i as u32) {
                Ok(x) => x,
                Err(e) => return self.sh.fail(e),
            };
            let salt = tail.seg.map_or(0, |s| s.1);
            w.next_lsn += 1;
            values.push(match (kind, cat) {
                // A range delete enters L0 as a range (`finish`), never as an entry.
                (KIND_DELETE | KIND_RANGE_DELETE, _) => Value::Tombstone,
                (_, Category::Large) => Value::expiring(body.expire_at, Value::Large { ptr, len, salt }),
                _ => Value::expiring(body.expire_at, Value::Inline(v.to_vec())),
            });
            if user {
                self.count_user_write(kind, cat, k.len() + v.len());
            }
        }
        Ok((lsn, values))
    }

    fn count_user_write(&self, kind: u8, cat: Category, bytes: usize) {
        let c = &self.sh.counters;
        c.user_bytes.fetch_add(bytes as u64, Relaxed);
        if kind == KIND_RANGE_DELETE {
            c.range_deletes.fetch_add(1, Relaxed);
        } else if kind == KIND_DELETE {
            c.deletes.fetch_add(1, Relaxed);
        } else {
            c.puts[cat as usize].fetch_add(1, Relaxed);
            c.put_bytes[cat as usize].fetch_add(bytes as u64, Relaxed);
        }
    }

    /// Waits until every write appended so far is in L0 and visible. With the write lock held,
    /// L0 then holds every write there is (insertion runs outside the lock).
    pub(crate) fn quiesce(&self, w: &WriteState) {
        self.wait_visible(w.next_lsn - 1);
    }

    /// Blocks until `visible` reaches `lsn` (or the store is poisoned).
    fn wait_visible(&self, lsn: u64) {
        if self.visible.load(Acquire) >= lsn {
            return;
        }
        let mut g = self.done.lock();
        while self.visible.load(Acquire) < lsn && !self.sh.is_poisoned() {
            self.published.wait_for(&mut g, Duration::from_millis(10));
        }
    }

    /// Inserts appended records into the L0 table they were appended for and publishes them:
    /// `visible` advances in LSN order, so a reader never sees a write before an earlier one,
    /// and a write returns only once it is visible (a caller reads its own writes).
    ///
    /// Writers insert concurrently and finish out of order. One that finds an earlier write
    /// still being inserted records its range and sleeps; the writer that closes the gap
    /// publishes every range that follows contiguously and wakes them. (Spinning for the
    /// predecessor instead cost half the CPU of a load with more writers than cores: the
    /// predecessor was often descheduled.)
    pub(crate) fn finish(&self, p: Pending, ops: &[Op<'_>]) -> Result<u64> {
        let last = p.first + p.values.len() as u64 - 1;
        for ((op, value), lsn) in ops.iter().zip(p.values).zip(p.first..) {
            match op {
                Op::DeleteRange(start, end) => {
                    p.mem.insert_range_del(RangeDel { start: start.to_vec(), end: end.to_vec(), lsn })
                }
                _ => p.mem.insert(op.key(), lsn, value),
            }
        }
        p.mem.writer_exit();
        let mut g = self.done.lock();
        if self.visible.load(Acquire) + 1 == p.first {
            let mut upto = last;
            while let Some(end) = g.remove(&(upto + 1)) {
                upto = end;
            }
            self.visible.store(upto, Release);
            drop(g);
            self.published.notify_all();
            return Ok(last);
        }
        g.insert(p.first, last);
        while self.visible.load(Acquire) < last {
            if self.sh.is_poisoned() {
                return self.sh.check().map(|_| last);
            }
            self.published.wait_for(&mut g, Duration::from_millis(10));
        }
        Ok(last)
    }

    /// Waits until the mutable L0 table has room, switching tables when possible, and paces
    /// writers that fill it faster than the previous table's merge goes ([`pace`]).
    pub(crate) fn make_room(&self, w: &mut MutexGuard<'_, WriteState>) -> Result<()> {
        let mut stalled: Option<Instant> = None;
        let r = loop {
            if let Err(e) = self.sh.check() {
                break Err(e);
            }
            if self.sh.shutdown.load(Relaxed) {
                break Err(Error::Closed);
            }
            let view = self.view.load();
            let o = &self.sh.opts;
            if view.mem.superseded_bytes() >= (o.l0_bytes / 64).max(64 << 10) {
                self.prune_l0(&view.mem);
            }
            let seg = self.sh.dev.seg_bytes();
            let log_segs = w.mem_l0_segs.len() as u64;
            let table = (view.mem.bytes() as u64, o.l0_bytes as u64);
            // Garbage that the table's superseded versions hold in the large log waits for the
            // table's compaction: bounded like the L0 log, so that skewed updates of large
            // values, which supersede within the table and leave it no fuller, do not grow the
            // large log without a bound until the table fills.
            let garbage = (view.mem.dead_large_bytes(), o.l0_garbage_limit());
            // What recovery would replay of the large log for this table is bounded too.
            let large = (w.mem_large_bytes, o.l0_large_log_limit());
            let full = table.0 >= table.1
                || log_segs * seg >= o.l0_log_limit()
                || garbage.0 >= garbage.1
                || large.0 >= large.1;
            if !full {
                if view.imm.is_none() || self.no_space.load(Relaxed) {
                    break Ok(());
                }
                // A merge runs: pace. The segment being written counts as empty here: a whole
                // one is a large part of a small table's log bound.
                let fill = pace::fill(&[table, (log_segs.saturating_sub(1) * seg, o.l0_log_limit()), garbage, large]);
                if !pace::must_wait(fill, self.l0_merge_progress.load(Relaxed)) {
                    break Ok(());
                }
                let since = *stalled.get_or_insert_with(Instant::now);
                // Paced waits are short and many: through the hook only once they add up.
                if since.elapsed() < LONG_WAIT {
                    self.w_cv.wait_for(w, pace::WAIT);
                } else {
                    self.sh.waiting(|| self.w_cv.wait_for(w, pace::WAIT));
                }
                continue;
            }
            if view.imm.is_none() {
                break self.switch_memtable(w);
            }
            if self.no_space.load(Relaxed) {
                break Err(Error::NoSpace { what: "L0 is full and compaction found no free segment" });
            }
            stalled.get_or_insert_with(Instant::now);
            self.sh.wake();
            self.sh.waiting(|| self.w_cv.wait_for(w, Duration::from_millis(50)));
        };
        if let Some(t) = stalled {
            let ns = t.elapsed().as_nanos() as u64;
            let c = &self.sh.counters;
            c.stall_ns.fetch_add(ns, Relaxed);
            let bucket = STALL_BUCKETS_NS.iter().take_while(|&&b| ns >= b).count();
            if let Some(n) = c.stalls.get(bucket) {
                n.fetch_add(1, Relaxed);
            }
        }
        r
    }

    /// Hands the mutable table's superseded versions that every reader from now on is past to
    /// the view installed here: they are removed once the readers of the older views are gone.
    /// (A reader loads the view before the LSN it reads at, so one that sees the new view reads
    /// at `visible` or above.)
    fn prune_l0(&self, mem: &Arc<Memtable>) {
        let batch = mem.take_superseded(self.visible.load(Acquire));
        if batch.is_empty() {
            return;
        }
        let m = mem.clone();
        // Attached after the swap, still in time: the old view lives at least as long as this
        // handle, and readers of it or an older one keep it longer.
        self.install(View::renewed, vec![]).on_release(Box::new(move || m.ready(batch)));
    }

    /// Makes the mutable table immutable and starts a new one; the L0 log continues in a
    /// new segment so that the old table's segments can be freed after its compaction.
    pub(crate) fn switch_memtable(&self, w: &mut WriteState) -> Result<()> {
        if let Err(e) = self.sh.waiting(|| w.l0.write_out(&self.sh.dev)) {
            return self.sh.fail(e);
        }
        if let Some(l) = self.sh.listener() {
            w.l0.ship(&*l, self.id, true);
        }
        w.l0.close();
        w.imm_l0_segs = std::mem::take(&mut w.mem_l0_segs);
        w.mem_large_bytes = 0;
        self.l0_merge_progress.store(0, Relaxed);
        self.install(
            |v| View::new(Arc::new(Memtable::new()), Some(v.mem.clone()), v.version.clone(), self.sh.alloc.clone()),
            vec![],
        );
        self.sh.wake();
        Ok(())
    }

    /// Writes both log tails out (no sync). Caller holds the write lock.
    /// Marks every level busy once no compaction of this region runs, so that none starts;
    /// the caller clears the marks (or drops the region object).
    pub(crate) fn claim_all_levels(&self) -> Result<()> {
        loop {
            self.sh.check()?;
            let mut busy = self.busy.lock();
            if busy.iter().all(|b| !*b) {
                busy.iter_mut().for_each(|b| *b = true);
                return Ok(());
            }
            drop(busy);
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
    }

    pub(crate) fn write_out(&self, w: &mut WriteState) -> Result<()> {
        self.queue_out(w)?;
        self.drain_log_writes()
    }

    /// Queues the unwritten parts of both log tails (see [`LogTail::queue_out`]).
    fn queue_out(&self, w: &mut WriteState) -> Result<()> {
        let dev = &self.sh.dev;
        if let Err(e) = w.large.queue_out(dev).and_then(|_| w.l0.queue_out(dev)) {
            return self.sh.fail(e);
        }
        Ok(())
    }

    /// Writes the log chunks queued so far (see [`LogWriter`]).
    pub(crate) fn drain_log_writes(&self) -> Result<()> {
        if let Err(e) = self.sh.waiting(|| self.writer.drain(&self.sh.dev)) {
            return self.sh.fail(e);
        }
        Ok(())
    }

    /// Locks `m`, whose holder may be waiting for the device (a memtable switch writing the log
    /// out, an fdatasync): a wait past [`LONG_WAIT`] goes through the wait hook.
    fn lock_long<'a, T>(&self, m: &'a Mutex<T>) -> MutexGuard<'a, T> {
        match m.try_lock_for(LONG_WAIT) {
            Some(g) => g,
            None => self.sh.waiting(|| m.lock()),
        }
    }

    /// Makes every record up to `lsn` durable; concurrent callers share one fdatasync.
    pub(crate) fn sync_to(&self, lsn: u64) -> Result<()> {
        let mut synced = self.lock_long(&self.synced);
        if *synced >= lsn {
            return Ok(());
        }
        let upto = {
            let mut w = self.w.lock();
            self.queue_out(&mut w)?;
            w.next_lsn - 1
        };
        self.drain_log_writes()?;
        if let Err(e) = self.sh.waiting(|| self.sh.dev.sync()) {
            return self.sh.fail(e);
        }
        *synced = upto;
        Ok(())
    }

    /// The newest entry for `key` visible at `snap` in `view` (tombstones included: a version
    /// a range delete hides comes back as a tombstone at the range delete's LSN).
    pub(crate) fn lookup(&self, view: &View, snap: u64, key: &[u8]) -> Result<Option<Entry>> {
        let e = match view.mem.get(key, snap) {
            Some(e) => Some(e),
            None => match view.imm.as_ref().and_then(|imm| imm.get(key, snap)) {
                Some(e) => Some(e),
                None => self.lookup_levels(view, key)?,
            },
        };
        let Some(e) = e else { return Ok(None) };
        let deleted = view.deleted_at(key, snap);
        if deleted > e.lsn {
            return Ok(Some(Entry { key: e.key, lsn: deleted, value: Value::Tombstone }));
        }
        Ok(Some(e))
    }

    /// Whether `key` may have an entry in a level above the deepest non-empty one, by the
    /// Bloom filters alone: false means that below L0 only the deepest level can hold it.
    pub(crate) fn may_be_above_last(&self, view: &View, key: &[u8]) -> Result<bool> {
        let levels = &view.version.levels;
        let Some(last) = levels.iter().rposition(|l| !l.is_empty()) else {
            return Ok(false);
        };
        let h = bloom::hash(key);
        for level in &levels[..last] {
            if let Some(sst) = covering(level, key) {
                if sst.may_contain(&self.sh.ctx, h)? {
                    return Ok(true);
                }
            }
        }
        Ok(false)
    }

    /// The entry for `key` in the levels (L1 first).
    fn lookup_levels(&self, view: &View, key: &[u8]) -> Result<Option<Entry>> {
        let h = bloom::hash(key);
        for level in &view.version.levels {
            if let Some(sst) = covering(level, key) {
                if let Some(e) = sst.get(&self.sh.ctx, key, h)? {
                    return Ok(Some(e));
                }
            }
        }
        Ok(None)
    }

    pub(crate) fn get_at(&self, view: &View, snap: u64, key: &[u8]) -> Result<Option<Vec<u8>>> {
        if view.deleted_at(key, snap) != 0 {
            return self.get_covered(view, snap, key);
        }
        if let Some(v) = self.get_l0(view, snap, key)? {
            return Ok(v);
        }
        self.get_levels(view, key, None)
    }

    /// The value of `key` in L0 (`Some(None)`: deleted there), through its hash index, handing
    /// the value over without copying the key.
    fn get_l0(&self, view: &View, snap: u64, key: &[u8]) -> Result<Option<Option<Vec<u8>>>> {
        for m in std::iter::once(&view.mem).chain(view.imm.as_ref()) {
            if let Some(v) = m.get_value(key, snap) {
                let v = match v {
                    Value::Expiring { at, .. } if at <= self.sh.now_ms() => Value::Tombstone,
                    Value::Expiring { value, .. } => *value,
                    v => v,
                };
                return match v {
                    Value::Inline(v) => Ok(Some(Some(v))),
                    Value::Tombstone | Value::Expiring { .. } => Ok(Some(None)),
                    Value::Medium { ptr, len, salt } | Value::Large { ptr, len, salt } => {
                        self.read_value(ptr, len, salt, key).map(|v| Some(Some(v)))
                    }
                };
            }
        }
        Ok(None)
    }

    pub(crate) fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        // The row epoch before the view (see `rowcache`), the view before the LSN: a view
        // installed after GC moved a value is only seen together with the moved entries.
        let epoch = self.row_epoch.load(SeqCst);
        let view = self.view();
        let snap = self.visible.load(Relaxed);
        if self.backup {
            return self.get_at(&view, snap, key);
        }
        if view.deleted_at(key, snap) != 0 {
            return self.get_covered(&view, snap, key);
        }
        if let Some(v) = self.get_l0(&view, snap, key)? {
            return Ok(v);
        }
        if let Some(v) = self.get_bypassed(key)? {
            return Ok(v);
        }
        self.get_levels(&view, key, Some(epoch))
    }

    /// The value of `key` through the LSM bypass, when it has a slot whose record is still
    /// the key's (`Some(None)`: the pair expired); None sends the read through the tree. The
    /// caller checked L0 and the range deletes first.
    fn get_bypassed(&self, key: &[u8]) -> Result<Option<Option<Vec<u8>>>> {
        let Some(slot) = self.bypass.as_ref().filter(|b| b.is_ready()).and_then(|b| b.get(key)) else {
            return Ok(None);
        };
        let c = &self.sh.counters;
        if slot.expire_at != 0 && slot.expire_at <= self.sh.now_ms() {
            return Ok(Some(None));
        }
        let ck = value_cache_key(slot.ptr, slot.salt);
        if let Some(v) = self.sh.ctx.cache.get(ck) {
            c.bypass_hits.fetch_add(1, Relaxed);
            return Ok(Some(Some(v.to_vec())));
        }
        let bytes = self.sh.ctx.dev.read(slot.ptr, slot.len as usize, crate::device::IoKind::Read)?;
        match record::decode(&bytes, Some(slot.salt)) {
            Ok(r) if r.key == key && r.lsn == slot.lsn => {
                c.bypass_hits.fetch_add(1, Relaxed);
                self.sh.ctx.cache.insert(ck, Arc::new(r.value.to_vec()));
                Ok(Some(Some(r.value.to_vec())))
            }
            _ => {
                c.bypass_fallbacks.fetch_add(1, Relaxed);
                Ok(None)
            }
        }
    }

    /// The value of a key a range delete covers: only a version newer than the delete is
    /// live, so the entry's LSN decides, and the row cache (which has no LSNs) is left out.
    fn get_covered(&self, view: &View, snap: u64, key: &[u8]) -> Result<Option<Vec<u8>>> {
        match self.lookup(view, snap, key)? {
            Some(e) => self.resolve(&e),
            None => Ok(None),
        }
    }

    /// The value of `key` and its expiry time, from the newest entry (no row cache).
    pub(crate) fn get_with_expiry(&self, key: &[u8]) -> Result<Option<(Vec<u8>, u64)>> {
        let view = self.view();
        let snap = self.visible.load(Relaxed);
        let Some(e) = self.lookup(&view, snap, key)? else { return Ok(None) };
        Ok(self.resolve(&e)?.map(|v| (v, e.value.expire_at())))
    }

    /// The value of `key` in the levels. With the row epoch taken before `view`, through the
    /// row cache (see `rowcache`); without, as of `view` only (snapshots, backups).
    fn get_levels(&self, view: &View, key: &[u8], row_epoch: Option<u64>) -> Result<Option<Vec<u8>>> {
        let cache = &self.sh.ctx.cache;
        let rk = row_epoch.map(|_| rowcache::row_key(self.uid.load(SeqCst), key));
        if let Some(row) = rk.and_then(|rk| cache.get(rk)) {
            if let Some(v) = rowcache::value_of(&row, key) {
                return Ok(Some(v.to_vec()));
            }
        }
        let Some(e) = self.lookup_levels(view, key)? else {
            return Ok(None);
        };
        let value = self.resolve(&e)?;
        // A pair that expires is not cached as a row: the row would outlive it.
        let rk = rk.filter(|_| e.value.expire_at() == 0);
        if let (Some(v), Some(rk), Some(epoch)) = (&value, rk, row_epoch) {
            let _gate = self.row_gate.read();
            if self.row_epoch.load(SeqCst) == epoch {
                cache.insert(rk, Arc::new(rowcache::encode(key, v)));
            }
        }
        Ok(value)
    }

    /// Makes every cached row unreachable: a range delete that stops hiding its keys (they
    /// left the tree) must not let rows cached before it come back. Rows cached under the old
    /// identity age out of the cache.
    pub(crate) fn forget_rows(&self) {
        let _gate = self.row_gate.write();
        self.row_epoch.fetch_add(1, SeqCst);
        self.uid.store(NEXT_REGION_UID.fetch_add(1, Relaxed), SeqCst);
    }

    /// Before an L0->L1 compaction makes its output visible: the rows of the keys it moves
    /// out of L0 may hold older values. A cached row takes the table's value where it is at
    /// hand (so hot keys stay cached across compactions) and goes otherwise.
    pub(crate) fn refresh_rows(&self, table: &Memtable) {
        {
            let _gate = self.row_gate.write();
            self.row_epoch.fetch_add(1, SeqCst);
        }
        let cache = &self.sh.ctx.cache;
        table.for_each_newest(|k, v| {
            let rk = rowcache::row_key(self.uid.load(SeqCst), k);
            match v {
                Value::Inline(v) => cache.refresh(rk, Arc::new(rowcache::encode(k, v))),
                _ => cache.remove(rk),
            }
        });
    }

    /// The value of an entry, reading the log for pointers (`None`: deleted or expired).
    pub(crate) fn resolve(&self, e: &Entry) -> Result<Option<Vec<u8>>> {
        // The clock is read only for a pair that expires: most do not, and this is every get's path.
        let at = e.value.expire_at();
        if at != 0 && at <= self.sh.now_ms() {
            return Ok(None);
        }
        match e.value.base() {
            Value::Inline(v) => Ok(Some(v.clone())),
            Value::Tombstone | Value::Expiring { .. } => Ok(None),
            Value::Medium { ptr, len, salt } | Value::Large { ptr, len, salt } => {
                self.read_value(*ptr, *len, *salt, &e.key).map(Some)
            }
        }
    }

    /// The values of `entries` (none a tombstone), in order. Log values missing from the cache
    /// are read all at once (`Device::read_many`), so a scan pays about one device latency per
    /// batch instead of one per value.
    /// On an error, the pairs before the failing one come back with it.
    pub(crate) fn resolve_many(&self, entries: Vec<Entry>) -> (Vec<(Entry, Vec<u8>)>, Option<Error>) {
        let ctx = &self.sh.ctx;
        let mut out: Vec<(Entry, Vec<u8>)> = Vec::with_capacity(entries.len());
        // (index in out, ptr, len, salt) of the values to read
        let mut misses: Vec<(usize, u64, u32, u32)> = Vec::new();
        for e in entries {
            let value = match e.value.base() {
                Value::Inline(v) => v.clone(),
                Value::Tombstone | Value::Expiring { .. } => Vec::new(),
                Value::Medium { ptr, len, salt } | Value::Large { ptr, len, salt } => {
                    match ctx.cache.get(value_cache_key(*ptr, *salt)) {
                        Some(v) => v.to_vec(),
                        None => {
                            misses.push((out.len(), *ptr, *len, *salt));
                            Vec::new()
                        }
                    }
                }
            };
            out.push((e, value));
        }
        if misses.is_empty() {
            return (out, None);
        }
        let reqs: Vec<(u64, usize)> = misses.iter().map(|m| (m.1, m.2 as usize)).collect();
        let read = ctx.dev.read_many(&reqs, crate::device::IoKind::Read);
        for ((i, ptr, len, salt), bytes) in misses.into_iter().zip(read) {
            let key = &out[i].0.key;
            // A batched read that failed is tried again alone (pread).
            let value = match bytes {
                Ok(b) => self.value_from_read(&b, ptr, len, salt, key),
                Err(_) => self.read_value(ptr, len, salt, key),
            };
            match value {
                Ok(v) => out[i].1 = v,
                Err(e) => {
                    out.truncate(i);
                    return (out, Some(e));
                }
            }
        }
        (out, None)
    }

    pub(crate) fn read_value(&self, ptr: u64, len: u32, salt: u32, key: &[u8]) -> Result<Vec<u8>> {
        // The cache holds values already checked against their record's checksum and key.
        let ck = value_cache_key(ptr, salt);
        let ctx = &self.sh.ctx;
        if let Some(v) = ctx.cache.get(ck) {
            return Ok(v.to_vec());
        }
        let bytes = ctx.dev.read(ptr, len as usize, crate::device::IoKind::Read)?;
        self.value_from_read(&bytes, ptr, len, salt, key)
    }

    /// The value in `bytes` read at `ptr`, checked against its record's checksum, salt and key
    /// and then cached; a record not (yet) on the device as expected comes from the log tail.
    fn value_from_read(&self, bytes: &[u8], ptr: u64, len: u32, salt: u32, key: &[u8]) -> Result<Vec<u8>> {
        let value = match record::decode(bytes, Some(salt)) {
            Ok(r) if r.key == key => r.value.to_vec(),
            _ => self.read_from_tail(ptr, len, salt, key)?,
        };
        self.sh.ctx.cache.insert(value_cache_key(ptr, salt), Arc::new(value.clone()));
        Ok(value)
    }

    fn bad_ptr(&self, ptr: u64, what: &str) -> Error {
        let bits = self.sh.dev.seg_bits();
        Error::corrupt(ptr >> bits, ptr & ((1 << bits) - 1), what)
    }

    /// The value of a record appended to the large log but perhaps not yet written out.
    fn read_from_tail(&self, ptr: u64, len: u32, salt: u32, key: &[u8]) -> Result<Vec<u8>> {
        let w = self.w.lock();
        if let (Some((seg, s)), Some(_)) = (w.large.seg, w.large.position(&self.sh.dev)) {
            let base = self.sh.dev.seg_base(seg);
            if s == salt && ptr >= base {
                let at = (ptr - base) as usize;
                if let Some(Ok(r)) = w.large.image().get(at..at + len as usize).map(|b| record::decode(b, Some(salt))) {
                    if r.key == key {
                        return Ok(r.value.to_vec());
                    }
                }
            }
        }
        // The tail may have moved on (writing the record out) since the first device read.
        let bytes = self.sh.ctx.dev.read(ptr, len as usize, crate::device::IoKind::Read)?;
        drop(w);
        if let Ok(r) = record::decode(&bytes, Some(salt)) {
            if r.key == key {
                return Ok(r.value.to_vec());
            }
        }
        Err(self.bad_ptr(ptr, "log record at pointer fails its checks"))
    }
}

/// The cache key of a log value: its pointer and its segment's salt, so that a reused segment
/// never serves a stale value.
pub(crate) fn value_cache_key(ptr: u64, salt: u32) -> u128 {
    ((ptr as u128) << 32) | salt as u128
}

/// The SST of a level (sorted, disjoint) whose key range holds `key`.
fn covering<'a>(level: &'a [Arc<Sst>], key: &[u8]) -> Option<&'a Arc<Sst>> {
    let i = level.partition_point(|s| s.info.last_key.as_slice() < key);
    level.get(i).filter(|s| s.info.first_key.as_slice() <= key)
}
