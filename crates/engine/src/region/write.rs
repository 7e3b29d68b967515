//! The write path: a batch of puts, deletes and range deletes checked, appended to the L0 and
//! large logs under the write lock (segments reserved first, so that a batch is written whole
//! or not at all), inserted into L0 outside it and published in LSN order; the memtable switch;
//! the log tails written out and synced; a flush of L0 into L1.

#![expect(clippy::indexing_slicing, reason = "the per-category counters have an entry per `Category`")]

use crate::catalog::{Edit, LogKind};
use crate::device::alloc::Purpose;
use crate::error::{Error, Result};
use crate::format::rangedel::RangeDel;
use crate::format::record::{self, KIND_DELETE, KIND_PUT, KIND_RANGE_DELETE};
use crate::log::listener::ShipListener;
use crate::region::{category, Category, Region, WriteState, LONG_WAIT};
use crate::tree::memtable::{load_imbalance, Memtable, Value};
use crate::tree::view::View;
use parking_lot::{Mutex, MutexGuard};
use std::collections::VecDeque;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use std::sync::Arc;
use std::time::Duration;

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
    /// No change: an LSN of its own in the L0 log (a split's, `db/reshape.rs`).
    Mark,
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
            Op::Mark => record::Body { kind: record::KIND_MARK, key: &[], value: &[], expire_at: 0 },
        }
    }

    fn key(&self) -> &[u8] {
        match self {
            Op::Put(k, ..) | Op::Delete(k) | Op::DeleteRange(k, _) => k,
            Op::Mark => &[],
        }
    }

    /// A delete of one key or of a range: it may use the space kept for compaction.
    fn deletes(&self) -> bool {
        matches!(self, Op::Delete(_) | Op::DeleteRange(..) | Op::Mark)
    }
}

impl Region {
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
        // A mark has no key: it holds an LSN only.
        if !matches!(op, Op::Mark) && !self.contains(key) {
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
            // After the wait for room, which lets the lock go.
            if self.is_retired() {
                return Err(Error::RegionChanged(self.id));
            }
            if self.is_fenced() {
                return Err(Error::RegionFenced(self.id));
            }
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
        } else if self.sh.dev.tails_before_ack() {
            self.write_out_to(last, false)?;
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
                (KIND_DELETE | KIND_RANGE_DELETE | record::KIND_MARK, _) => Value::Tombstone,
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
                Op::Mark => p.mem.insert_mark(lsn),
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
        let next = self.next_table();
        self.install(|v| View::new(next, Some(v.mem.clone()), v.version.clone(), self.sh.alloc.clone()), vec![]);
        self.sh.wake();
        Ok(())
    }

    /// The table that follows the mutable one, its Dranges cut from the writes that one sampled
    /// (Nova-LSM's major reorganisation).
    fn next_table(&self) -> Arc<Memtable> {
        let theta = self.sh.opts.dranges;
        if theta < 2 {
            return Arc::new(Memtable::new());
        }
        let old = self.view().mem.clone();
        let bounds = old.next_bounds(theta);
        let c = &self.sh.counters;
        if old.dranges() > 1 {
            c.drange_imbalance.store(load_imbalance(&old.drange_writes()).to_bits(), Relaxed);
        }
        if old.bounds() != bounds.as_slice() {
            c.drange_reorganisations.fetch_add(1, Relaxed);
        }
        Arc::new(Memtable::with_bounds(bounds, theta))
    }

    /// Takes a split parent's L0 as this new half's: `imm` (the parent's immutable table, or
    /// its mutable one when it had none) becomes its immutable table, with the L0 log segments
    /// `imm_segs`; the entries in its range of `mem` (the parent's mutable table, when `imm` is
    /// its immutable one) are copied into its mutable table, with their segments `mem_segs`.
    /// Its first L0 merges write them out; `mark` is the split's LSN.
    pub(crate) fn adopt_l0(
        &self,
        imm: Arc<Memtable>,
        imm_segs: Vec<u32>,
        mem: Option<(&Memtable, Vec<u32>)>,
        mark: u64,
    ) {
        let mut w = self.w.lock();
        w.imm_l0_segs = imm_segs;
        let fresh = Memtable::new();
        w.mem_l0_segs = match mem {
            Some((m, segs)) => {
                for e in m.iter_all().filter(|e| self.contains(&e.key)) {
                    fresh.insert(&e.key, e.lsn, e.value);
                }
                for d in m.range_dels().iter().flat_map(|d| d.iter()) {
                    if let Some(d) = self.clip(d.clone()) {
                        fresh.insert_range_del(d);
                    }
                }
                fresh.insert_mark(mark);
                segs
            }
            None => Vec::new(),
        };
        let fresh = Arc::new(fresh);
        self.install(|v| View::new(fresh, Some(imm), v.version.clone(), self.sh.alloc.clone()), vec![]);
        self.sh.wake();
    }

    /// Writes both log tails out (no sync). Caller holds the write lock.
    pub(crate) fn write_out(&self, w: &mut WriteState) -> Result<()> {
        self.queue_out(w)?;
        self.drain_log_writes()
    }

    /// Writes both log tails out (no sync), taking the write lock for it.
    pub(crate) fn write_out_logs(&self) -> Result<()> {
        let mut w = self.w.lock();
        self.write_out(&mut w)
    }

    /// The large-log segment the tail is filling, if any.
    pub(crate) fn large_tail_seg(&self) -> Option<u32> {
        self.w.lock().large.seg.map(|s| s.0)
    }

    /// For the L0->L1 merge about to publish: writes the large log's tail out (the large values
    /// the new L1 points to must be durable before the L0 log that also covered them goes) and
    /// takes the L0-log segments of the immutable table, which the merge removes. An error is
    /// the device's, not yet reported through [`crate::region::shared::Shared::fail`].
    pub(crate) fn take_imm_l0_segs(&self) -> Result<Vec<u32>> {
        let mut w = self.w.lock();
        w.large.write_out(&self.sh.dev)?;
        Ok(std::mem::take(&mut w.imm_l0_segs))
    }

    /// Queues the unwritten parts of both log tails (see [`crate::log::tail::LogTail::queue_out`]).
    fn queue_out(&self, w: &mut WriteState) -> Result<()> {
        let dev = &self.sh.dev;
        if let Err(e) = w.large.queue_out(dev).and_then(|_| w.l0.queue_out(dev)) {
            return self.sh.fail(e);
        }
        Ok(())
    }

    /// Writes the log chunks queued so far (see [`crate::log::writer::LogWriter`]).
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
        self.write_out_to(lsn, true)
    }

    /// Writes every record up to `lsn` to the storage, and syncs it if `durable`; concurrent
    /// callers share one write (and one fdatasync).
    fn write_out_to(&self, lsn: u64, durable: bool) -> Result<()> {
        let mut done = match durable {
            true => self.lock_long(&self.synced),
            // A push is a round trip to other machines: a writer that finds one under way
            // leaves the runtime's worker at once, so that other connections' writes join the
            // next push rather than wait behind this worker.
            false => self.pushed.try_lock().unwrap_or_else(|| self.sh.waiting(|| self.pushed.lock())),
        };
        if *done >= lsn {
            return Ok(());
        }
        let upto = {
            let mut w = self.w.lock();
            self.queue_out(&mut w)?;
            w.next_lsn - 1
        };
        self.drain_log_writes()?;
        if durable {
            if let Err(e) = self.sh.waiting(|| self.sh.dev.sync()) {
                return self.sh.fail(e);
            }
        }
        *done = upto;
        Ok(())
    }

    /// Writes the region's L0 into L1 (waiting for the merge) and makes every acknowledged
    /// write durable.
    pub(crate) fn flush(&self) -> Result<()> {
        loop {
            let mut w = self.w.lock();
            self.sh.check()?;
            // Its successors (a split's halves) write its table out; its levels stay claimed.
            if self.is_replaced() {
                return Ok(());
            }
            let v = self.view();
            if v.imm.is_some() {
                if self.no_space.load(Relaxed) {
                    return Err(Error::NoSpace { what: "flush: compaction found no free segment" });
                }
                if self.sh.shutdown.load(Relaxed) {
                    return Err(Error::Closed);
                }
                self.sh.wake();
                self.w_cv.wait_for(&mut w, Duration::from_millis(20));
                continue;
            }
            if !v.mem.is_empty() {
                self.switch_memtable(&mut w)?;
            }
            break;
        }
        loop {
            self.sh.check()?;
            // The compaction workers stop at close: a flush then would wait for them forever.
            if self.sh.shutdown.load(Relaxed) {
                return Err(Error::Closed);
            }
            if self.view().imm.is_none() || self.is_replaced() {
                break;
            }
            if self.no_space.load(Relaxed) {
                return Err(Error::NoSpace { what: "flush: compaction found no free segment" });
            }
            self.sh.wake();
            let mut w = self.w.lock();
            self.w_cv.wait_for(&mut w, Duration::from_millis(20));
        }
        self.sync_to(u64::MAX)
    }
}
