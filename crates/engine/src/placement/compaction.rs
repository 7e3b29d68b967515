//! Compactions: L0 -> L1 and partial Li -> Li+1 merges that build new SSTs bottom-up,
//! write medium runs, merge medium pairs in place at the last level(s), and account for
//! the log space they make invalid.

#![expect(
    clippy::indexing_slicing,
    reason = "levels and output buffers are indexed within the sizes this module gave them"
)]

use crate::catalog::LogKind;
use crate::catalog::{Edit, Level};
use crate::device::aligned::{align_down, AlignedBuf};
use crate::device::alloc::Purpose;
use crate::device::IoKind;
use crate::error::{Error, Result};
use crate::format::node::Node;
use crate::format::rangedel::{self, RangeDel};
use crate::format::record::{self, RECORD_OVERHEAD};
use crate::log::listener::ShippedSegment;
use crate::log::tail::LogTail;
use crate::options::MediumPlacement;
use crate::region::{category, Category, Region};
use crate::tree::bypass::{self, Change, Slot};
use crate::tree::memtable::{Entry, Memtable, Value};
use crate::tree::pointers::void_dead_pointers;
use crate::tree::sst::{decode_all, Sst, SstBuilder};
use crate::tree::view::{Version, View};
use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::rc::Rc;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;

/// A unit of compaction work.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Job {
    /// The immutable L0 table into L1.
    L0,
    /// Part of level i (1-based) into level i+1.
    Level(usize),
    /// Frees the SSTs that range deletes hide whole, rewrites (with `true`) those that keep a
    /// range delete alive, and drops the range deletes that hide nothing any more (every level
    /// taking part).
    Reclaim(bool),
    /// Fills the LSM bypass from the levels (after an open or a promotion), every level
    /// taking part so that none changes meanwhile.
    BuildBypass,
}

/// Range deletes a region keeps before the SSTs that keep them alive are rewritten: every read
/// of a key in a range checks it, so they must not pile up; a few wait for the merges that
/// come anyway.
const IDLE_RANGE_DELS: usize = 8;

impl Job {
    fn levels(self) -> (usize, usize) {
        match self {
            Job::L0 => (0, 1),
            Job::Level(i) => (i, i + 1),
            Job::Reclaim(_) | Job::BuildBypass => (0, usize::MAX),
        }
    }
}

/// Picks the most urgent job whose levels are idle, and marks them busy.
pub(crate) fn pick(r: &Region) -> Option<Job> {
    pick_with(r, false)
}

/// [`pick`]; with `thorough`, range deletes are let go as soon as rewrites can (a manual
/// compaction), not only once more than [`IDLE_RANGE_DELS`] are held.
pub(crate) fn pick_with(r: &Region, thorough: bool) -> Option<Job> {
    if r.is_backup() {
        return None;
    }
    let view = r.view();
    let o = &r.sh().opts;
    let mut busy = r.compaction_state().busy.lock();
    if r.compaction_state().claiming.load(Relaxed) {
        return None;
    }
    if r.bypass().is_some_and(|b| !b.is_ready()) && busy.iter().all(|b| !*b) {
        busy.iter_mut().for_each(|b| *b = true);
        return Some(Job::BuildBypass);
    }
    if view.imm.is_some() && !busy[0] && !busy[1] {
        busy[0] = true;
        busy[1] = true;
        return Some(Job::L0);
    }
    if !view.version.range_dels.is_empty() && busy.iter().all(|b| !*b) {
        let mut plan = view.version.range_reclaim();
        plan.drops.retain(|&lsn| droppable(&view, lsn));
        let rewrite = thorough || view.version.range_dels.len() > IDLE_RANGE_DELS;
        if !plan.hidden.is_empty() || !plan.drops.is_empty() || (rewrite && !plan.blocking.is_empty()) {
            busy.iter_mut().for_each(|b| *b = true);
            return Some(Job::Reclaim(rewrite));
        }
    }
    let mut best: Option<(f64, usize)> = None;
    for i in 1..o.max_levels {
        let (_, full) = view.version.level_bytes(i - 1);
        let budget = o.l0_bytes as f64 * (o.growth_factor as f64).powi(i as i32);
        let score = full as f64 / budget;
        if score > 1.0 && !busy[i] && !busy[i + 1] && best.is_none_or(|b| score > b.0) {
            best = Some((score, i));
        }
    }
    let (_, i) = best?;
    busy[i] = true;
    busy[i + 1] = true;
    Some(Job::Level(i))
}

/// Runs a picked job and frees its levels.
pub(crate) fn run(r: &Region, job: Job) -> Result<()> {
    let res = match job {
        Job::L0 => compact_l0(r),
        Job::Level(i) => compact_level(r, i),
        Job::Reclaim(rewrite) => reclaim(r, rewrite),
        Job::BuildBypass => build_bypass(r),
    };
    let (a, b) = job.levels();
    let mut busy = r.compaction_state().busy.lock();
    for (i, flag) in busy.iter_mut().enumerate() {
        if i == a || i == b || b == usize::MAX {
            *flag = false;
        }
    }
    drop(busy);
    r.wake_writers();
    res
}

/// Marks every level busy once no compaction of `r` runs, so that none starts; the caller
/// clears the marks ([`release_all_levels`]) or drops the region object.
pub(crate) fn claim_all_levels(r: &Region) -> Result<()> {
    let state = r.compaction_state();
    state.claiming.store(true, Relaxed);
    let claimed = loop {
        if let Err(e) = r.sh().check() {
            break Err(e);
        }
        let mut busy = state.busy.lock();
        if busy.iter().all(|b| !*b) {
            busy.iter_mut().for_each(|b| *b = true);
            break Ok(());
        }
        drop(busy);
        std::thread::sleep(std::time::Duration::from_millis(2));
    };
    state.claiming.store(false, Relaxed);
    claimed
}

/// Clears the marks of [`claim_all_levels`] and wakes the workers.
pub(crate) fn release_all_levels(r: &Region) {
    r.compaction_state().busy.lock().iter_mut().for_each(|b| *b = false);
    r.sh().wake();
}

/// Whether a job that may be publishing an L0 merge of `r` runs (L0 is busy).
pub(crate) fn l0_running(r: &Region) -> bool {
    r.compaction_state().busy.lock().first().copied().unwrap_or(false)
}

/// Whether a compaction of `r` runs (some level is busy).
pub(crate) fn running(r: &Region) -> bool {
    r.compaction_state().busy.lock().iter().any(|b| *b)
}

/// Key ranges (first and last key) and heat of the hot input leaves of one level that the
/// cache held when the merge read them, in key order. The output leaves that overlap them
/// take their place in the cache when the output becomes visible: an L0->L1 merge rewrites
/// every leaf of L1, and without this the cache would lose its whole hot set to new node keys
/// at every merge and win it back one miss at a time. The copies wait in memory until then, so
/// only the hottest leaves, up to half the cache, are carried over (`warm_threshold`).
type Warm = Rc<RefCell<Vec<(Vec<u8>, Vec<u8>, u16)>>>;

/// The highest heat among the ranges of `warm` that overlap `first..=last`, if any does.
fn warm_heat(warm: &[(Vec<u8>, Vec<u8>, u16)], first: &[u8], last: &[u8]) -> Option<u16> {
    let at = warm.partition_point(|(_, l, _)| l.as_slice() < first);
    warm[at..].iter().take_while(|(f, _, _)| f.as_slice() <= last).map(|w| w.2).max()
}

/// The least heat an input leaf needs to be carried over: the cached input leaves that reach
/// it hold at most `budget` bytes (all of them when the hottest alone are more).
fn warm_threshold(r: &Region, inputs: &[&Arc<Sst>], budget: usize) -> u16 {
    let (cache, nb) = (&r.sh().ctx.cache, r.sh().opts.node_bytes);
    let mut by_heat: BTreeMap<u16, usize> = BTreeMap::new();
    for s in inputs {
        for h in (0..s.info.leaf_count as usize).filter_map(|l| s.cached_heat(cache, l, nb, 1)) {
            *by_heat.entry(h).or_default() += nb;
        }
    }
    let mut bytes = 0;
    let mut threshold = None;
    for (&h, &b) in by_heat.iter().rev() {
        bytes += b;
        if bytes > budget && threshold.is_some() {
            break;
        }
        threshold = Some(h);
    }
    threshold.unwrap_or(u16::MAX)
}

/// The first and last key of a leaf.
fn leaf_range(bytes: &[u8]) -> Option<(&[u8], &[u8])> {
    let node = Node { bytes };
    let n = node.count();
    Some((node.key(0).ok()?, node.key(n.checked_sub(1)?).ok()?))
}

/// Entries of a list of SSTs in key order, reading one whole segment at a time.
struct SstStream<'a> {
    r: &'a Region,
    ssts: VecDeque<Arc<Sst>>,
    buf: std::vec::IntoIter<Entry>,
    warm: Warm,
    min_heat: u16,
    /// When the stream reports the L0 merge's progress (writers are paced to it): the inputs
    /// of every part of the merge read so far, and their number (not 0); the share is
    /// reported in thousandths.
    progress: Option<(&'a AtomicUsize, usize)>,
}

impl<'a> SstStream<'a> {
    fn new(r: &'a Region, ssts: VecDeque<Arc<Sst>>, min_heat: u16) -> SstStream<'a> {
        SstStream { r, ssts, buf: Vec::new().into_iter(), warm: Warm::default(), min_heat, progress: None }
    }

    fn next(&mut self) -> Result<Option<Entry>> {
        loop {
            if let Some(e) = self.buf.next() {
                return Ok(Some(e));
            }
            if let Some((read, total)) = self.progress {
                self.r.report_l0_merge((read.load(Relaxed) * 1000 / total) as u32);
            }
            let Some(sst) = self.ssts.pop_front() else {
                return Ok(None);
            };
            if let Some((read, _)) = self.progress {
                read.fetch_add(1, Relaxed);
            }
            let img = read_leaves(self.r, &sst)?;
            self.buf = decode_all(&sst.info, &img, self.r.sh().opts.node_bytes)?.into_iter();
            let (cache, nb) = (&self.r.sh().ctx.cache, self.r.sh().opts.node_bytes);
            let mut warm = self.warm.borrow_mut();
            for l in 0..sst.info.leaf_count as usize {
                let Some(heat) = sst.cached_heat(cache, l, nb, self.min_heat) else { continue };
                if let Some((f, last)) = img.get(l * nb..(l + 1) * nb).and_then(leaf_range) {
                    warm.push((f.to_vec(), last.to_vec(), heat));
                }
            }
        }
    }
}

/// The leaves of an input SST. Those the cache holds are copied from it and only the others
/// are read, each run of neighbouring ones in one read: readers keep the hot part of a level in
/// the cache, and the merge that rewrites the level need not read that part again. With none
/// cached, the SST is read in one piece as before.
fn read_leaves(r: &Region, sst: &Sst) -> Result<AlignedBuf> {
    let (cache, nb, dev) = (&r.sh().ctx.cache, r.sh().opts.node_bytes, &r.sh().dev);
    let n = sst.info.leaf_count as usize;
    let base = dev.seg_base(sst.info.seg);
    // One look per leaf: what is decided below holds even if the cache changes meanwhile.
    let cached: Vec<_> = (0..n).map(|l| cache.peek(sst.leaf_key(l, nb)).filter(|b| b.len() == nb)).collect();
    if cached.iter().all(Option::is_none) {
        let mut img = AlignedBuf::new(sst.info.used_bytes as usize);
        dev.read_into(base, &mut img, IoKind::CompactionRead)?;
        return Ok(img);
    }
    let mut img = AlignedBuf::new(n * nb);
    let mut from_cache = 0u64;
    let mut l = 0;
    while l < n {
        if let Some(leaf) = &cached[l] {
            img[l * nb..(l + 1) * nb].copy_from_slice(leaf);
            from_cache += nb as u64;
            l += 1;
            continue;
        }
        let start = l;
        while l < n && cached[l].is_none() {
            l += 1;
        }
        let bytes = dev.read(base + (start * nb) as u64, (l - start) * nb, IoKind::CompactionRead)?;
        img[start * nb..l * nb].copy_from_slice(&bytes);
    }
    r.sh().counters.compaction_cached_bytes.fetch_add(from_cache, Relaxed);
    Ok(img)
}

/// Reads medium values for in-place merging, one 256 KiB chunk of the medium log at a time.
struct ChunkReader {
    chunks: HashMap<u64, Arc<AlignedBuf>>,
    order: VecDeque<u64>,
}

const CHUNK: usize = 256 << 10;
const MAX_CHUNKS: usize = 64;

impl ChunkReader {
    fn read(&mut self, r: &Region, ptr: u64, len: u32, salt: u32, key: &[u8]) -> Result<Vec<u8>> {
        let chunk_len = CHUNK.min(r.sh().dev.seg_bytes() as usize);
        let base = align_down(ptr as usize, chunk_len) as u64;
        let within = (ptr - base) as usize;
        if within + len as usize > chunk_len {
            return r.read_value(ptr, len, salt, key);
        }
        let chunk = match self.chunks.get(&base) {
            Some(c) => c.clone(),
            None => {
                let mut b = AlignedBuf::new(chunk_len);
                r.sh().dev.read_into(base, &mut b, IoKind::MediumLog)?;
                let b = Arc::new(b);
                if self.order.len() == MAX_CHUNKS {
                    if let Some(old) = self.order.pop_front() {
                        self.chunks.remove(&old);
                    }
                }
                self.order.push_back(base);
                self.chunks.insert(base, b.clone());
                b
            }
        };
        match record::decode(&chunk[within..within + len as usize], Some(salt)) {
            Ok(rec) if rec.key == key => Ok(rec.value.to_vec()),
            _ => Err(Error::corrupt(
                ptr >> r.sh().dev.seg_bits(),
                ptr & (r.sh().dev.seg_bytes() - 1),
                "medium log record at pointer fails its checks",
            )),
        }
    }
}

/// Builds a compaction's output and the edits describing it.
struct Output<'a> {
    r: &'a Region,
    dest: Level,
    inplace: bool,
    bottom: bool,
    log_medium: bool,
    builder: Option<SstBuilder>,
    ssts: Vec<Arc<Sst>>,
    /// The warm input leaves of each input level (see `Warm`).
    warm_in: Vec<Warm>,
    /// Output leaves to cache once the output is visible, at most `warm_budget` bytes.
    warm: Vec<(u128, Arc<Vec<u8>>)>,
    warm_budget: usize,
    medium: Option<LogTail>,
    medium_segs: Vec<(u32, u32)>,
    medium_delta: HashMap<(u32, u32), i64>,
    /// Large-log records superseded by this merge: (pointer, salt, length). Their bytes per
    /// segment become `LargeGarbage` edits, and GC learns which records they are.
    large_dead: Vec<(u64, u32, u32)>,
    chunks: ChunkReader,
    allocated: Vec<u32>,
    /// The clock as the compaction started: pairs expired by then are dropped.
    now: u64,
    /// The durable range deletes (the levels', and the L0 table's being merged): the versions
    /// they hide are dropped.
    dels: Vec<RangeDel>,
    /// The LSM bypass's changes (`tree/bypass.rs`), when the region keeps one.
    bypass: Option<Vec<Change>>,
    /// This is the L0->L1 merge: it sets the bypass slots of what it writes.
    sets_slots: bool,
    /// The bytes the value being placed counts for in its SST (a medium value moved to the
    /// log: its whole length).
    full_len: usize,
}

impl<'a> Output<'a> {
    fn seg_of(&self, ptr: u64) -> u32 {
        (ptr >> self.r.sh().dev.seg_bits()) as u32
    }

    /// An entry that leaves the tree: its log space stops being needed.
    fn dropped(&mut self, e: &Entry) {
        if let (Some(ch), Value::Medium { .. } | Value::Large { .. }) = (&mut self.bypass, e.value.base()) {
            ch.push(Change::Clear(bypass::hashes(&e.key).0, e.lsn));
        }
        match *e.value.base() {
            Value::Medium { ptr, salt, .. } => *self.medium_delta.entry((self.seg_of(ptr), salt)).or_default() -= 1,
            Value::Large { ptr, len, salt } => self.large_dead.push((ptr, salt, len)),
            _ => {}
        }
    }

    fn alloc(&mut self) -> Result<u32> {
        let s = self.r.sh().alloc.alloc(Purpose::Background)?;
        self.allocated.push(s);
        Ok(s)
    }

    /// Places `e` in the output; `newer`: it comes from the newer input of the merge.
    fn emit(&mut self, mut e: Entry, newer: bool) -> Result<()> {
        let was = log_ptr(&e.value);
        // Hidden from every reader of the output (older snapshots read the inputs): it goes,
        // with no tombstone, as the range delete stays until no older version is left.
        if rangedel::hides(&self.dels, &e.key, e.lsn, u64::MAX) {
            self.dropped(&e);
            self.r.sh().counters.range_covered_dropped.fetch_add(1, Relaxed);
            return Ok(());
        }
        // A pair expired by the time the merge started leaves the tree (its log space too); a
        // tombstone takes its place while an older version may lie below. One that has not
        // expired is placed as any other and keeps its expiry.
        let mut at = e.value.expire_at();
        if at != 0 && at <= self.now {
            self.dropped(&e);
            self.r.sh().counters.expired_dropped.fetch_add(1, Relaxed);
            if self.bottom {
                return Ok(());
            }
            e.value = Value::Tombstone;
            at = 0;
        } else if at != 0 {
            if let Value::Expiring { value, .. } = std::mem::replace(&mut e.value, Value::Tombstone) {
                e.value = *value;
            }
        }
        self.place(&mut e)?;
        let placed = std::mem::replace(&mut e.value, Value::Tombstone);
        e.value = Value::expiring(at, placed);
        self.note_slot(&e, was, newer);
        self.add(e)
    }

    /// The bypass change an entry written makes: the L0->L1 merge sets the slot of each key
    /// it brings in or moves to the log, and clears it for one that is no log value; a deeper
    /// merge clears the slot of a value it merges back in place.
    fn note_slot(&mut self, e: &Entry, was: Option<(u64, u32)>, newer: bool) {
        let Some(ch) = &mut self.bypass else { return };
        match *e.value.base() {
            Value::Medium { ptr, len, salt } | Value::Large { ptr, len, salt }
                if self.sets_slots && (newer || was != Some((ptr, salt))) =>
            {
                let (fp, check) = bypass::hashes(&e.key);
                let expire_at = e.value.expire_at();
                ch.push(Change::Set(fp, Slot { lsn: e.lsn, ptr, len, salt, expire_at, check }));
            }
            Value::Medium { .. } | Value::Large { .. } => {}
            _ if (self.sets_slots && newer) || was.is_some() => {
                ch.push(Change::Clear(bypass::hashes(&e.key).0, e.lsn));
            }
            _ => {}
        }
    }

    /// Where a value goes at the output's level: a medium value moves to the medium log when
    /// the level keeps them there, or back in place when it merges them in place.
    fn place(&mut self, e: &mut Entry) -> Result<()> {
        let o = &self.r.sh().opts;
        self.full_len = 0;
        match &e.value {
            Value::Tombstone if self.bottom => return Ok(()),
            Value::Inline(v)
                if self.log_medium
                    && !self.inplace
                    && category(o.small_threshold, o.large_threshold, e.key.len() + v.len()) == Category::Medium =>
            {
                self.full_len = e.key.len() + v.len();
                let v = v.clone();
                e.value = self.append_medium(&e.key, e.lsn, &v)?;
            }
            Value::Medium { ptr, len, salt } if self.inplace => {
                let (ptr, len, salt) = (*ptr, *len, *salt);
                let v = self.chunks.read(self.r, ptr, len, salt, &e.key)?;
                *self.medium_delta.entry((self.seg_of(ptr), salt)).or_default() -= 1;
                self.r.sh().counters.medium_merged.fetch_add(1, Relaxed);
                e.value = Value::Inline(v);
            }
            Value::Medium { len, .. } => self.full_len = *len as usize - RECORD_OVERHEAD,
            _ => {}
        }
        Ok(())
    }

    /// Adds a placed entry to the SST being built, starting another when it is full.
    fn add(&mut self, e: Entry) -> Result<()> {
        // Keys must come strictly ascending: a merge of inputs that overlap where they may not
        // (a level's SSTs) would otherwise write an SST its own reads and every reopen refuse.
        let last = self.builder.as_ref().and_then(SstBuilder::last_key);
        let last = last.or_else(|| self.ssts.last().map(|s| s.info.last_key.as_slice()));
        if last.is_some_and(|k| e.key.as_slice() <= k) {
            return Err(Error::Poisoned(format!(
                "region {}: a compaction's merge yielded keys out of order (its inputs overlap); nothing was written",
                self.r.id()
            )));
        }
        let o = &self.r.sh().opts;
        let full_len = self.full_len;
        let b = self.builder.get_or_insert_with(|| {
            SstBuilder::new(o.node_bytes, o.segment_bytes as usize, o.bloom_bits_per_key, o.max_key_bytes)
        });
        if !b.add(&e, full_len) {
            self.finish_sst()?;
            let b = self.builder.get_or_insert_with(|| {
                SstBuilder::new(o.node_bytes, o.segment_bytes as usize, o.bloom_bits_per_key, o.max_key_bytes)
            });
            if !b.add(&e, full_len) {
                return Err(Error::Poisoned("an entry does not fit in an empty SST".into()));
            }
        }
        Ok(())
    }

    fn append_medium(&mut self, key: &[u8], lsn: u64, v: &[u8]) -> Result<Value> {
        let need = record::encoded_len(key.len(), v.len());
        let dev = self.r.sh().dev.clone();
        if self.medium.as_ref().is_none_or(|t| t.remaining() < need) {
            self.finish_medium_seg()?;
            let seg = self.alloc()?;
            let salt: u32 = rand::random();
            let t = self.medium.get_or_insert_with(|| {
                LogTail::new(LogKind::Medium, dev.seg_bytes() as usize, dev.seg_bytes() as usize)
            });
            t.switch(&dev, seg, salt)?;
            self.medium_segs.push((seg, salt));
        }
        let t = self.medium.as_mut().ok_or(Error::Poisoned("medium run missing".into()))?;
        let salt = t.seg.map_or(0, |s| s.1);
        let (ptr, len) =
            t.append(&dev, record::Body { kind: record::KIND_PUT, key, value: v, expire_at: 0 }, lsn, 0)?;
        *self.medium_delta.entry((self.seg_of(ptr), salt)).or_default() += 1;
        Ok(Value::Medium { ptr, len, salt })
    }

    fn finish_medium_seg(&mut self) -> Result<()> {
        if let Some(t) = self.medium.as_mut() {
            if let Some((seg, salt)) = t.seg {
                t.write_out(&self.r.sh().dev)?;
                self.r.sh().alloc.trim(seg, t.image().len() as u64);
                self.r.sh().ship_segment(self.r.id(), ShippedSegment::MediumRun { seg, salt, bytes: t.image() });
                t.close();
            }
        }
        Ok(())
    }

    fn finish_sst(&mut self) -> Result<()> {
        let Some(mut b) = self.builder.take() else {
            return Ok(());
        };
        if b.is_empty() {
            return Ok(());
        }
        // The range deletes applied are every one up to the newest of them (the durable ones
        // are a prefix by LSN: those of L1 and below, then those of the table merged).
        b.set_range_lsn(self.dels.iter().map(|d| d.lsn).max().unwrap_or(0));
        let seg = self.alloc()?;
        let (img, info) = b.finish(seg);
        let used = &img[..info.used_bytes as usize];
        let dev = &self.r.sh().dev;
        dev.write(dev.seg_base(seg), used, IoKind::Compaction)?;
        self.r.sh().alloc.trim(seg, info.used_bytes as u64);
        if self.r.sh().listener().is_some() {
            let shipped = self.shipped_image(&info, used)?;
            self.r.sh().ship_segment(self.r.id(), ShippedSegment::Sst { info: &info, bytes: &shipped });
        }
        let sst = Sst::from_image(info, used, self.r.sh().opts.node_bytes);
        self.keep_warm(&sst, used);
        self.fill_room(&sst, used);
        self.ssts.push(Arc::new(sst));
        Ok(())
    }

    /// The image of a new SST as backups get it: its pointers into large-log segments the
    /// region no longer holds voided (see [`void_dead_pointers`]).
    fn shipped_image(&self, info: &crate::catalog::SstInfo, used: &[u8]) -> Result<Vec<u8>> {
        let sh = self.r.sh();
        let live = sh.manifest.with(|c| {
            c.regions
                .get(&self.r.id())
                .map_or_else(Default::default, |m| m.log(LogKind::Large).iter().map(|s| (s.seg, s.salt)).collect())
        });
        void_dead_pointers(used, info, sh.opts.node_bytes, sh.dev.seg_bits(), &live)
    }

    /// Copies the leaves of a new SST that cover warm input leaves, for the cache.
    fn keep_warm(&mut self, sst: &Sst, img: &[u8]) {
        let nb = self.r.sh().opts.node_bytes;
        for l in 0..sst.info.leaf_count as usize {
            if (self.warm.len() + 1) * nb > self.warm_budget {
                return;
            }
            let Some(bytes) = img.get(l * nb..(l + 1) * nb) else { return };
            let Some((first, last)) = leaf_range(bytes) else { continue };
            if let Some(heat) = self.warm_in.iter().filter_map(|w| warm_heat(&w.borrow(), first, last)).max() {
                self.warm.push((sst.leaf_key(l, nb), Arc::new(bytes.to_vec())));
                // Halved, so that a leaf stays hot across merges only while it is read.
                sst.set_heat(l, heat.div_ceil(2));
            }
        }
    }

    /// Puts the leaves of a new SST in the cache while it has room for them without evicting
    /// anything. When nothing reads (a load), the cache would otherwise sit empty while every
    /// merge reads the level it rewrites back from the device; with readers it is full and this
    /// does nothing. The leaves are keyed by the new SST, which no reader sees before the output
    /// is published, and one never published leaves behind entries no key reaches again.
    fn fill_room(&self, sst: &Sst, img: &[u8]) {
        sst.cache_leaves(&self.r.sh().ctx.cache, img, self.r.sh().opts.node_bytes);
    }

    /// Closes the output; returns the edits that publish it.
    fn finish(&mut self) -> Result<Vec<Edit>> {
        self.finish_sst()?;
        self.finish_medium_seg()?;
        let mut edits = Vec::new();
        for &(seg, salt) in &self.medium_segs {
            edits.push(Edit::LogAdd { log: LogKind::Medium, seg, salt });
        }
        for s in &self.ssts {
            edits.push(Edit::AddSst { level: self.dest, sst: s.info.clone() });
        }
        // Increments first, so that a run's segment is not freed by a decrement that
        // happens to be listed before them.
        let mut deltas: Vec<_> = self
            .medium_delta
            .iter()
            .filter(|(_, &d)| d != 0)
            .map(|(&(seg, salt), &delta)| Edit::MediumPtrs { seg, salt, delta })
            .collect();
        deltas.sort_by_key(|e| match e {
            Edit::MediumPtrs { delta, .. } => -delta,
            _ => 0,
        });
        edits.extend(deltas);
        let mut garbage: BTreeMap<(u32, u32), u64> = BTreeMap::new();
        for &(ptr, salt, len) in &self.large_dead {
            *garbage.entry((self.seg_of(ptr), salt)).or_default() += len as u64;
        }
        edits.extend(garbage.into_iter().map(|((seg, salt), bytes)| Edit::LargeGarbage { seg, salt, bytes }));
        Ok(edits)
    }

    fn abort(&self) {
        for &s in &self.allocated {
            self.r.sh().alloc.release(s);
        }
    }
}

/// What one part of an L0 merge made, handed to the thread that publishes the merge.
struct Part {
    ssts: Vec<Arc<Sst>>,
    warm: Vec<(u128, Arc<Vec<u8>>)>,
    medium_segs: Vec<(u32, u32)>,
    medium_delta: HashMap<(u32, u32), i64>,
    large_dead: Vec<(u64, u32, u32)>,
    allocated: Vec<u32>,
    bypass: Option<Vec<Change>>,
}

impl Output<'_> {
    /// Closes the output of one part of a merge and hands over what it made.
    fn into_part(mut self) -> Result<Part> {
        if let Err(e) = self.finish_sst().and_then(|()| self.finish_medium_seg()) {
            self.abort();
            return Err(e);
        }
        Ok(Part {
            ssts: std::mem::take(&mut self.ssts),
            warm: std::mem::take(&mut self.warm),
            medium_segs: std::mem::take(&mut self.medium_segs),
            medium_delta: std::mem::take(&mut self.medium_delta),
            large_dead: std::mem::take(&mut self.large_dead),
            allocated: std::mem::take(&mut self.allocated),
            bypass: self.bypass.take(),
        })
    }

    /// Takes in what a part made (parts are absorbed in key order).
    fn absorb(&mut self, p: Part) {
        self.ssts.extend(p.ssts);
        self.warm.extend(p.warm);
        self.medium_segs.extend(p.medium_segs);
        for (k, d) in p.medium_delta {
            *self.medium_delta.entry(k).or_default() += d;
        }
        self.large_dead.extend(p.large_dead);
        self.allocated.extend(p.allocated);
        if let (Some(mine), Some(theirs)) = (&mut self.bypass, p.bypass) {
            mine.extend(theirs);
        }
    }
}

fn placement(r: &Region, version: &Version, dest: usize) -> (bool, bool) {
    let last = version.deepest().max(dest);
    let inplace_level = match r.sh().opts.medium_placement {
        MediumPlacement::Last => last,
        MediumPlacement::LastMinus1 => (last - 1).max(1),
    };
    let bottom = version.levels.iter().skip(dest).all(|l| l.is_empty());
    (dest >= inplace_level, bottom)
}

fn overlapping(level: &[Arc<Sst>], first: &[u8], last: &[u8]) -> Vec<Arc<Sst>> {
    level
        .iter()
        .filter(|s| s.info.last_key.as_slice() >= first && s.info.first_key.as_slice() <= last)
        .cloned()
        .collect()
}

/// Where a log value is (pointer, salt); None for a value that is not in a log.
fn log_ptr(v: &Value) -> Option<(u64, u32)> {
    match *v.base() {
        Value::Medium { ptr, salt, .. } | Value::Large { ptr, salt, .. } => Some((ptr, salt)),
        _ => None,
    }
}

/// Merges `newer` over `older` (both sorted, one entry per key) into `out`.
fn merge(
    out: &mut Output<'_>,
    newer: &mut dyn FnMut() -> Result<Option<Entry>>,
    older: &mut SstStream<'_>,
) -> Result<()> {
    let mut a = newer()?;
    let mut b = older.next()?;
    loop {
        match (a.take(), b.take()) {
            (None, None) => return Ok(()),
            (Some(x), None) => {
                out.emit(x, true)?;
                a = newer()?;
            }
            (None, Some(y)) => {
                out.emit(y, false)?;
                b = older.next()?;
            }
            (Some(x), Some(y)) => match x.key.cmp(&y.key) {
                std::cmp::Ordering::Less => {
                    out.emit(x, true)?;
                    a = newer()?;
                    b = Some(y);
                }
                std::cmp::Ordering::Greater => {
                    out.emit(y, false)?;
                    b = older.next()?;
                    a = Some(x);
                }
                std::cmp::Ordering::Equal => {
                    out.dropped(&y);
                    out.emit(x, true)?;
                    a = newer()?;
                    b = older.next()?;
                }
            },
        }
    }
}

fn new_output<'a>(r: &'a Region, version: &Version, dest: Level, log_medium: bool) -> Output<'a> {
    let (inplace, bottom) = placement(r, version, dest.get());
    Output {
        r,
        dest,
        inplace,
        bottom,
        log_medium,
        builder: None,
        ssts: Vec::new(),
        warm_in: Vec::new(),
        warm: Vec::new(),
        warm_budget: r.sh().ctx.cache.capacity() as usize / 2,
        medium: None,
        medium_segs: Vec::new(),
        medium_delta: HashMap::new(),
        large_dead: Vec::new(),
        chunks: ChunkReader { chunks: HashMap::new(), order: VecDeque::new() },
        allocated: Vec::new(),
        now: r.sh().now_ms(),
        dels: version.range_dels.clone(),
        bypass: r.bypass().map(|_| Vec::new()),
        sets_slots: dest == Level::L1 && log_medium,
        full_len: 0,
    }
}

fn compact_l0(r: &Region) -> Result<()> {
    let view = r.view();
    let Some(imm) = view.imm.clone() else {
        return Ok(());
    };
    // Writers that appended for this table may still be inserting into it.
    imm.wait_for_writers();
    let l1: &[Arc<Sst>] = view.version.levels.first().map_or(&[], |v| v.as_slice());
    let mut out = new_output(r, &view.version, Level::L1, true);
    // From here the table is fixed: versions it dropped early are garbage this merge reports.
    out.large_dead = imm.freeze();
    // A split's half shares its parent's table: the parts of its range deletes beyond the
    // half's range are the other half's.
    let table_dels: Vec<RangeDel> =
        imm.range_dels().map(|d| d.iter().filter_map(|d| r.clip(d.clone())).collect()).unwrap_or_default();
    // A split's half merges only its part of the table it shares: L1 is rewritten once over
    // the two halves, not twice.
    let (start, end) = (r.start(), r.end());
    let inputs = imm.key_range().map_or_else(Vec::new, |(f, l)| {
        let f = f.max(start.clone());
        let l = end.as_ref().map_or(l.clone(), |e| l.min(e.clone()));
        if f <= l {
            overlapping(l1, &f, &l)
        } else {
            Vec::new()
        }
    });
    let cuts = l0_cuts(&imm, &inputs, r.sh().opts.l0_merge_parts);
    let parts = l0_parts(&cuts, &inputs);
    let merge = L0Merge {
        r,
        imm: &imm,
        version: &view.version,
        dels: &table_dels,
        min_heat: warm_threshold(r, &inputs.iter().collect::<Vec<_>>(), out.warm_budget),
        warm_budget: out.warm_budget / parts.len(),
        read: AtomicUsize::new(0),
        total: inputs.len(),
    };
    if inputs.is_empty() {
        // The merge only writes the table out: nothing to pace writers to.
        r.report_l0_merge(1000);
    }
    if parts.len() > 1 {
        r.sh().counters.l0_merge_parts.fetch_add(parts.len() as u64, Relaxed);
    }
    let mut failed = None;
    for part in run_l0_parts(&merge, &parts) {
        match part {
            Ok(p) => out.absorb(p),
            Err(e) => failed = failed.or(Some(e)),
        }
    }
    let result = match failed {
        Some(e) => Err(e),
        None => out.finish(),
    };
    let mut edits = match result {
        Ok(e) => e,
        Err(e) => {
            out.abort();
            return Err(e);
        }
    };
    for s in &inputs {
        edits.push(Edit::RemoveSst { level: Level::L1, seg: s.info.seg });
    }
    // The table's range deletes leave with its log: the catalog keeps them from here.
    edits.extend(table_dels.into_iter().map(|d| Edit::AddRangeDel { start: d.start, end: d.end, lsn: d.lsn }));
    edits.push(Edit::L1Lsn(imm.max_lsn()));
    // Large values the new L1 points to must be durable before the L0 log that also
    // covered them goes away.
    let l0_segs = match r.take_imm_l0_segs() {
        Ok(segs) => segs,
        Err(e) => {
            out.abort();
            return r.sh().fail(e);
        }
    };
    for seg in l0_segs {
        edits.push(Edit::LogRemove { log: LogKind::L0, seg });
    }
    let merged = inputs.iter().map(|s| (1, s.clone())).collect();
    r.refresh_rows(&imm);
    publish(r, edits, &mut out, merged, true)
}

/// What the parts of one L0 merge share.
struct L0Merge<'a> {
    r: &'a Region,
    imm: &'a Memtable,
    version: &'a Version,
    /// The table's range deletes (within the region).
    dels: &'a [RangeDel],
    min_heat: u16,
    warm_budget: usize,
    /// L1 inputs read so far by all parts, of `total`: the merge's progress.
    read: AtomicUsize,
    total: usize,
}

/// One part of an L0 merge: the table's keys in `[from, to)` (`None`: open) and the L1 SSTs
/// among them.
struct L0Part<'a> {
    from: Option<&'a [u8]>,
    to: Option<&'a [u8]>,
    l1: VecDeque<Arc<Sst>>,
}

/// Where an L0 merge is cut into (at most) `parts` parts of about equal work: the L1 bytes
/// and the table's bytes (spread over its Dranges by their write counts) each part merges.
/// A cut that falls inside an L1 SST moves to that SST's first key, so that each L1 SST
/// belongs to one part; cuts are distinct and ascending.
fn l0_cuts(imm: &Memtable, inputs: &[Arc<Sst>], parts: usize) -> Vec<Vec<u8>> {
    if parts <= 1 {
        return Vec::new();
    }
    // (key, bytes of work from that key on): L1 SSTs at their first key, Dranges at their
    // lower bound.
    let writes = imm.drange_writes();
    let all_writes = writes.iter().sum::<u64>().max(1) as f64;
    let table = imm.bytes() as f64;
    let mut points: Vec<(&[u8], f64)> =
        inputs.iter().map(|s| (s.info.first_key.as_slice(), s.info.used_bytes as f64)).collect();
    let lower = std::iter::once(&[][..]).chain(imm.bounds().iter().map(|b| &b[..]));
    points.extend(lower.zip(&writes).map(|(k, &w)| (k, table * w as f64 / all_writes)));
    points.sort_by(|a, b| a.0.cmp(b.0));
    let total: f64 = points.iter().map(|p| p.1).sum();
    let mut cuts: Vec<Vec<u8>> = Vec::new();
    let mut done = 0.0;
    for &(key, work) in &points {
        let next = cuts.len() + 1;
        if next < parts && done >= total * next as f64 / parts as f64 && !key.is_empty() {
            let within = inputs.iter().find(|s| s.info.first_key.as_slice() < key && key <= s.info.last_key.as_slice());
            let cut = within.map_or(key, |s| s.info.first_key.as_slice());
            if cuts.last().is_none_or(|c| c.as_slice() < cut) {
                cuts.push(cut.to_vec());
            }
        }
        done += work;
    }
    cuts
}

/// The parts an L0 merge cut at `cuts` makes, in key order.
fn l0_parts<'a>(cuts: &'a [Vec<u8>], inputs: &[Arc<Sst>]) -> Vec<L0Part<'a>> {
    (0..=cuts.len())
        .map(|j| {
            let from = j.checked_sub(1).and_then(|i| cuts.get(i)).map(Vec::as_slice);
            let to = cuts.get(j).map(Vec::as_slice);
            let l1 = inputs
                .iter()
                .filter(|s| {
                    let first = s.info.first_key.as_slice();
                    from.is_none_or(|f| first >= f) && to.is_none_or(|t| first < t)
                })
                .cloned()
                .collect();
            L0Part { from, to, l1 }
        })
        .collect()
}

/// Runs the parts of an L0 merge, each but the first on a thread of its own (on this one
/// when the system refuses a thread); their results in key order.
fn run_l0_parts(m: &L0Merge<'_>, parts: &[L0Part<'_>]) -> Vec<Result<Part>> {
    let Some((first, rest)) = parts.split_first() else { return Vec::new() };
    std::thread::scope(|s| {
        let others: Vec<_> = rest
            .iter()
            .map(|p| {
                std::thread::Builder::new()
                    .name("l0-merge-part".into())
                    .spawn_scoped(s, move || merge_l0_part(m, p))
                    .map_err(|_| p)
            })
            .collect();
        let mut all = vec![merge_l0_part(m, first)];
        for h in others {
            all.push(match h {
                Ok(h) => h.join().unwrap_or_else(|_| Err(Error::Poisoned("a part of an L0 merge panicked".into()))),
                Err(p) => merge_l0_part(m, p),
            });
        }
        all
    })
}

/// Merges one part of the table into the L1 SSTs it overlaps.
fn merge_l0_part(m: &L0Merge<'_>, part: &L0Part<'_>) -> Result<Part> {
    let r = m.r;
    let mut out = new_output(r, m.version, Level::L1, true);
    out.dels.extend(m.dels.iter().cloned());
    out.warm_budget = m.warm_budget;
    let mut table_dead = Vec::new();
    let result = {
        let mut it = m.imm.iter_range(part.from, part.to).peekable();
        // The newest version of each key wins; older ones in the table are dropped. The other
        // half's entries leave this half (their large values are garbage here).
        let mut newer = || -> Result<Option<Entry>> {
            loop {
                let Some(e) = it.next() else { return Ok(None) };
                while it.peek().is_some_and(|n| n.key == e.key) {
                    if let Some(Value::Large { ptr, len, salt }) = it.next().map(|x| x.value.base().clone()) {
                        table_dead.push((ptr, salt, len));
                    }
                }
                if r.contains(&e.key) {
                    return Ok(Some(e));
                }
                if let Value::Large { ptr, len, salt } = *e.value.base() {
                    table_dead.push((ptr, salt, len));
                }
            }
        };
        let mut older = SstStream::new(r, part.l1.clone(), m.min_heat);
        if m.total > 0 {
            older.progress = Some((&m.read, m.total));
        }
        out.warm_in.push(older.warm.clone());
        merge(&mut out, &mut newer, &mut older)
    };
    out.large_dead.append(&mut table_dead);
    match result {
        Ok(()) => out.into_part(),
        Err(e) => {
            out.abort();
            Err(e)
        }
    }
}

/// Whether the range delete of `lsn` may leave the catalog as far as L0 goes: a split's also
/// hides the other half's entries in the L0 tables the halves share (or replayed from the log
/// they share), so it stays while L0 holds a version older than it.
fn droppable(view: &View, lsn: u64) -> bool {
    let oldest = [Some(&view.mem), view.imm.as_ref()].into_iter().flatten().filter_map(|m| m.min_lsn()).min();
    oldest.is_none_or(|o| o >= lsn)
}

fn compact_level(r: &Region, i: usize) -> Result<()> {
    let (Some(from), Some(to)) = (Level::new(i), Level::new(i + 1)) else {
        return Err(Error::InvalidOptions(format!("no level {} to compact level {i} into", i + 1)));
    };
    let view = r.view();
    let Some(src) = view.version.levels.get(i - 1).filter(|l| !l.is_empty()) else {
        return Ok(());
    };
    let pick = {
        let mut cur = r.compaction_state().cursor.lock();
        let at = src.iter().position(|s| s.info.first_key > cur[i]).unwrap_or(0);
        cur[i].clone_from(&src[at].info.last_key);
        src[at].clone()
    };
    let empty = Vec::new();
    let dest_level = view.version.levels.get(i).unwrap_or(&empty);
    let mut overlap = overlapping(dest_level, &pick.info.first_key, &pick.info.last_key);
    let (inplace, _) = placement(r, &view.version, i + 1);
    let small = (pick.info.used_bytes as u64) < r.sh().dev.seg_bytes() / 2;
    if overlap.is_empty() && small {
        // A part-filled SST moved down as it is would hold a whole segment at every level:
        // merge it with its neighbour below instead, so that SSTs fill up as they descend.
        let at = dest_level.partition_point(|s| s.info.last_key < pick.info.first_key);
        let neighbour = at.checked_sub(1).and_then(|j| dest_level.get(j)).or_else(|| dest_level.get(at));
        overlap.extend(neighbour.cloned());
    }
    if overlap.is_empty() && (pick.info.medium_ptrs == 0 || !inplace) {
        // Nothing to merge with: move the SST down as it is.
        let edits = vec![
            Edit::RemoveSst { level: from, seg: pick.info.seg },
            Edit::AddSst { level: to, sst: pick.info.clone() },
        ];
        r.sh().counters.trivial_moves.fetch_add(1, Relaxed);
        let mut out = new_output(r, &view.version, to, false);
        return publish(r, edits, &mut out, Vec::new(), false);
    }
    let mut out = new_output(r, &view.version, to, false);
    let result = (|| {
        let min_heat = warm_threshold(r, &overlap.iter().chain([&pick]).collect::<Vec<_>>(), out.warm_budget);
        let mut upper = SstStream::new(r, VecDeque::from([pick.clone()]), min_heat);
        let mut older = SstStream::new(r, overlap.iter().cloned().collect(), min_heat);
        out.warm_in.push(upper.warm.clone());
        out.warm_in.push(older.warm.clone());
        let mut newer = || upper.next();
        merge(&mut out, &mut newer, &mut older)?;
        out.finish()
    })();
    let mut edits = match result {
        Ok(e) => e,
        Err(e) => {
            out.abort();
            return Err(e);
        }
    };
    edits.push(Edit::RemoveSst { level: from, seg: pick.info.seg });
    for s in &overlap {
        edits.push(Edit::RemoveSst { level: to, seg: s.info.seg });
    }
    let merged = std::iter::once((i, pick)).chain(overlap.into_iter().map(|s| (i + 1, s))).collect();
    publish(r, edits, &mut out, merged, false)
}

/// Frees the SSTs range deletes hide whole without rewriting them: only those that point
/// into the medium or large log have their leaves read, for the log space they release. With
/// `rewrite`, rewrites each SST that keeps a range delete alive in its level (the merge drops
/// the versions the deletes hide). Then drops the range deletes that hide nothing any more.
fn reclaim(r: &Region, rewrite: bool) -> Result<()> {
    let view = r.view();
    let plan = view.version.range_reclaim();
    let mut edits = Vec::new();
    let mut out = new_output(r, &view.version, Level::L1, false);
    let freed = (|| {
        for (i, sst) in &plan.hidden {
            if sst.info.medium_ptrs + sst.info.large_ptrs > 0 {
                let mut leaves = SstStream::new(r, VecDeque::from([sst.clone()]), u16::MAX);
                while let Some(e) = leaves.next()? {
                    out.dropped(&e);
                }
            }
            edits.push(Edit::RemoveSst { level: level_at(*i)?, seg: sst.info.seg });
        }
        out.finish()
    })();
    match freed {
        Ok(e) => edits.extend(e),
        Err(e) => {
            out.abort();
            return Err(e);
        }
    }
    let c = &r.sh().counters;
    c.range_ssts_freed.fetch_add(plan.hidden.len() as u64, Relaxed);
    c.range_covered_dropped.fetch_add(plan.hidden.iter().map(|(_, s)| s.info.entries).sum::<u64>(), Relaxed);
    let mut drops = plan.drops;
    if rewrite && !plan.blocking.is_empty() {
        // Rewritten, no SST keeps any of them: every one goes.
        drops = view.version.range_dels.iter().map(|d| d.lsn).collect();
    }
    drops.retain(|&lsn| droppable(&view, lsn));
    edits.extend(drops.iter().map(|&lsn| Edit::DropRangeDel { lsn }));
    let merged = plan.hidden.into_iter().map(|(i, s)| (i + 1, s)).collect();
    if rewrite {
        for (i, sst) in &plan.blocking {
            rewrite_sst(r, &view.version, *i, sst)?;
        }
    }
    publish(r, edits, &mut out, merged, false)?;
    if !drops.is_empty() {
        // Rows cached before a dropped delete must not come back with it gone.
        r.forget_rows();
    }
    Ok(())
}

/// Fills the bypass from the levels, deepest first, so that each key's last change comes from
/// its newest version: a slot for a log value, none for anything else or a version a range
/// delete hides. SSTs without log pointers are read only once a deeper level set a slot.
fn build_bypass(r: &Region) -> Result<()> {
    let Some(b) = r.bypass() else { return Ok(()) };
    let view = r.view();
    let v = &view.version;
    let mut any_set = false;
    for level in v.levels.iter().rev() {
        for sst in level {
            if !any_set && sst.info.medium_ptrs + sst.info.large_ptrs == 0 {
                continue;
            }
            let img = read_leaves(r, sst)?;
            let entries = decode_all(&sst.info, &img, r.sh().opts.node_bytes)?;
            let changes: Vec<Change> = entries
                .iter()
                .map(|e| {
                    let (fp, check) = bypass::hashes(&e.key);
                    match *e.value.base() {
                        Value::Medium { ptr, len, salt } | Value::Large { ptr, len, salt }
                            if !rangedel::hides(&v.range_dels, &e.key, e.lsn, u64::MAX) =>
                        {
                            let expire_at = e.value.expire_at();
                            Change::Set(fp, Slot { lsn: e.lsn, ptr, len, salt, expire_at, check })
                        }
                        _ => Change::Clear(fp, e.lsn),
                    }
                })
                .collect();
            any_set |= changes.iter().any(|c| matches!(c, Change::Set(..)));
            b.apply(&changes);
        }
    }
    b.set_ready();
    Ok(())
}

fn level_at(i: usize) -> Result<Level> {
    Level::at_index(i).ok_or(Error::Poisoned(format!("a level at index {i}, past the deepest")))
}

/// Merges one SST with nothing into its own level: the versions the range deletes hide (and
/// expired pairs) leave it.
fn rewrite_sst(r: &Region, version: &Version, i: usize, sst: &Arc<Sst>) -> Result<()> {
    let level = level_at(i)?;
    let mut out = new_output(r, version, level, false);
    let result = (|| {
        let mut upper = SstStream::new(r, VecDeque::from([sst.clone()]), u16::MAX);
        let mut older = SstStream::new(r, VecDeque::new(), u16::MAX);
        let mut newer = || upper.next();
        merge(&mut out, &mut newer, &mut older)?;
        out.finish()
    })();
    let mut edits = match result {
        Ok(e) => e,
        Err(e) => {
            out.abort();
            return Err(e);
        }
    };
    edits.push(Edit::RemoveSst { level, seg: sst.info.seg });
    publish(r, edits, &mut out, vec![(i + 1, sst.clone())], false)
}

/// Makes the output durable, commits the edits, installs the new view, ships the edits.
/// `merged` are the input SSTs the output replaces, each with the level it leaves (an SST
/// moved down unchanged is only in the edits).
fn publish(
    r: &Region,
    edits: Vec<Edit>,
    out: &mut Output<'_>,
    merged: Vec<(usize, Arc<Sst>)>,
    drop_imm: bool,
) -> Result<()> {
    if let Err(e) = r.sh().dev.sync() {
        out.abort();
        return r.sh().fail(e);
    }
    let freed = match r.sh().manifest.commit(r.id(), &edits) {
        Ok(f) => f,
        Err(e) => {
            out.abort();
            return r.sh().fail(e);
        }
    };
    // Known dead before the view that drops the superseding L0 entries is installed, so that
    // GC, which checks L0 first and then these, never misses both (see `region::dead::DeadRecords`).
    r.dead().add(r.sh().dev.seg_bits(), &out.large_dead);
    // Committed, not yet visible: see `tree/bypass.rs` on exactness.
    if let (Some(b), Some(ch)) = (r.bypass(), out.bypass.take()) {
        b.apply(&ch);
    }
    r.install(
        |v| {
            let imm = if drop_imm { None } else { v.imm.clone() };
            View::new(v.mem.clone(), imm, Arc::new(v.version.apply(&edits, &out.ssts)), r.sh().alloc.clone())
        },
        freed,
    );
    // The merged SSTs' leaves give their room to the output leaves that replace them; removed
    // first, so that those enter the cache as hot (see `Warm`).
    let (cache, nb) = (&r.sh().ctx.cache, r.sh().opts.node_bytes);
    for (_, s) in &merged {
        for l in 0..s.info.leaf_count as usize {
            cache.remove(s.leaf_key(l, nb));
        }
    }
    r.sh().counters.warmed_leaves.fetch_add(out.warm.len() as u64, Relaxed);
    for (k, leaf) in out.warm.drain(..) {
        cache.insert(k, leaf);
    }
    r.sh().counters.compactions.fetch_add(1, Relaxed);
    r.wake_writers();
    r.sh().ship_edits(r.id(), &edits);
    Ok(())
}
