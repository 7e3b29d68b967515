//! L0: an in-memory sorted table of versions, read and written by many threads at once.

#![expect(clippy::indexing_slicing, reason = "shard indexes are reduced modulo the shard count")]

pub(crate) use crate::format::entry::{Entry, Value};
use crate::format::rangedel::{self, RangeDel};
use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;

/// Keys up to this size live inside the tree's nodes: a search compares keys without chasing a
/// pointer per key.
type KeyBytes = smallvec::SmallVec<[u8; 32]>;

/// A version's key in the table: user key ascending, then LSN descending.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct MemKey {
    pub key: KeyBytes,
    /// `u64::MAX - lsn`, so that newer versions sort first.
    pub rev: u64,
}

impl MemKey {
    pub(crate) fn new(key: &[u8], lsn: u64) -> MemKey {
        MemKey { key: KeyBytes::from_slice(key), rev: u64::MAX - lsn }
    }
    pub(crate) fn lsn(&self) -> u64 {
        u64::MAX - self.rev
    }
}

const INDEX_SHARDS: usize = 64;

/// Superseded versions removed per hold of the tree's write lock.
const REMOVALS_PER_LOCK: usize = 64;

/// Entries [`Memtable::iter_all`] copies out per hold of the tree's read lock.
const ITER_CHUNK: usize = 1024;

/// Whether `BTreeMap::range` accepts `r` (it panics on a start after the end, or on equal
/// excluded bounds); such a range is empty.
fn valid_range(r: &(Bound<MemKey>, Bound<MemKey>)) -> bool {
    match r {
        (Bound::Included(a), Bound::Included(b)) => a <= b,
        (Bound::Included(a) | Bound::Excluded(a), Bound::Included(b) | Bound::Excluded(b)) => a < b,
        _ => true,
    }
}

/// Bytes an entry is counted for in the table: key, what its leaf entry holds, and the
/// tree slot and index entry around them.
fn entry_bytes(key: &[u8], value: &Value) -> usize {
    key.len() + value.stored_len() + 48
}

/// A version a newer write of its key superseded in this table. Nothing reads it once every
/// reader whose snapshot is below `by` is gone; it is then removed, so that the table holds
/// (about) one version per key and repeated updates of a key do not fill it. (Parallax's L0
/// is a B+-tree updated in place; versions that a live snapshot may read are kept.)
pub(crate) struct Superseded {
    key: KeyBytes,
    lsn: u64,
    by: u64,
    bytes: usize,
    /// The large-log record the version points to, which becomes garbage with it.
    large: Option<(u64, u32, u32)>,
}

#[derive(Default)]
struct IndexShard {
    newest: std::collections::HashMap<KeyBytes, (u64, Value), xxhash_rust::xxh3::Xxh3Builder>,
    superseded: Vec<Superseded>,
}

/// Removal of superseded versions, stopped for good once the table's compaction begins (it
/// then drops them itself).
#[derive(Default)]
struct Removal {
    frozen: bool,
    /// Large-log records of removed versions: garbage the table's compaction reports.
    dead_large: Vec<(u64, u32, u32)>,
}

/// One Drange of a table (Nova-LSM §4.1): the versions of the keys in its key range, in a tree
/// of their own behind a lock of their own, so that writers to different Dranges never wait for
/// each other's inserts.
#[derive(Default)]
struct Drange {
    /// Every version of the Drange's keys, ordered. A B-tree behind a lock rather than a
    /// lock-free skiplist: a skiplist search takes a cache miss per level (about twenty at 600k
    /// entries), and under Run A's updates and GC's moves that search was a fifth of the
    /// engine's CPU; the tree takes a handful of node visits, and writers hold the lock for one
    /// insert each.
    map: parking_lot::RwLock<BTreeMap<MemKey, Value>>,
    /// Versions inserted (the Drange's write load).
    writes: AtomicU64,
}

/// The first inserts of a table all add their keys to its sample.
const SAMPLE_ALL: u64 = 1024;

/// After the first [`SAMPLE_ALL`], one in this many inserts adds its key to the table's sample of written keys, from which the
/// next table's Drange bounds are drawn.
const SAMPLE_EVERY: u64 = 16;

/// The most keys a table samples (about 330 KiB): 128 for each of 64 Dranges.
const SAMPLE_MAX: usize = 8_192;

/// Inserts between two looks of a table at its Dranges' load (see [`Memtable::wants_switch`]).
const CHECK_EVERY: u64 = 32_768;

/// A key taking more than this many fair shares of the writes gets a Drange of its own (a
/// point Drange, `[k, k\0)`).
const POINT_SHARE: f64 = 1.5;

pub(crate) struct Memtable {
    /// The table's key space cut into key ranges: Drange `i` holds the keys `k` with
    /// `bounds[i-1] <= k < bounds[i]` (the first and the last are open-ended).
    dranges: Box<[Drange]>,
    bounds: Box<[KeyBytes]>,
    /// The Dranges a table cut from this one's sample would have (Nova-LSM's θ).
    theta: usize,
    /// The writes moved away from where the Dranges were cut: a table cut anew from this one's
    /// sample would spread them much more evenly (see [`Memtable::wants_switch`]).
    lopsided: AtomicBool,
    /// Every `SAMPLE_EVERY`th key inserted (at most `SAMPLE_MAX`).
    sample: parking_lot::Mutex<Vec<KeyBytes>>,
    inserts: AtomicU64,
    /// The newest version of every key, for point reads in one hash probe instead of a walk
    /// down the tree: reads of keys the table does not hold, and reads at the current
    /// snapshot, never touch the tree or its lock. (KV-Tandem's LSM bypass.)
    index: Box<[parking_lot::RwLock<IndexShard>]>,
    bytes: AtomicUsize,
    /// Bytes of the versions waiting in `IndexShard::superseded`.
    superseded_bytes: AtomicUsize,
    /// Large-log bytes of the versions superseded in this table: garbage that GC can reclaim
    /// only once the table is compacted (recovery replays the large log past L1 without gaps).
    dead_large_bytes: AtomicU64,
    /// Batches of superseded versions that no reader can see any more, to be removed.
    ready: parking_lot::Mutex<Vec<Vec<Superseded>>>,
    removal: parking_lot::Mutex<Removal>,
    max_lsn: AtomicU64,
    /// The lowest LSN inserted (u64::MAX while empty): tables hold LSN ranges in the order
    /// they were current, so the levels hold nothing at or past the oldest table's.
    min_lsn: AtomicU64,
    /// Writers that appended records for this table and are still inserting them.
    writers: AtomicUsize,
    /// Range deletes written into this table, by LSN: the versions they hide stay in the
    /// table (and in the levels) until compactions drop them.
    range_dels: parking_lot::RwLock<Arc<Vec<RangeDel>>>,
    /// Whether `range_dels` holds any: most tables hold none, and every read asks.
    has_range_dels: AtomicBool,
}

fn shard_of(key: &[u8]) -> usize {
    (xxhash_rust::xxh3::xxh3_64(key) % INDEX_SHARDS as u64) as usize
}

impl Superseded {
    /// `None` for a medium-log pointer (L0 holds medium values inline; a pointer's live count
    /// is the compaction's to keep), which then stays until the compaction drops it.
    fn of(key: &[u8], lsn: u64, by: u64, value: &Value) -> Option<Superseded> {
        let large = match *value.base() {
            Value::Large { ptr, len, salt } => Some((ptr, salt, len)),
            Value::Medium { .. } => return None,
            _ => None,
        };
        Some(Superseded { key: KeyBytes::from_slice(key), lsn, by, bytes: entry_bytes(key, value), large })
    }
}

impl Memtable {
    /// A table of one Drange.
    pub(crate) fn new() -> Memtable {
        Memtable::with_bounds(Vec::new(), 1)
    }

    /// A table whose Dranges are cut at `bounds` (sorted, distinct): `bounds.len() + 1` of them;
    /// its successor will have up to `theta`.
    pub(crate) fn with_bounds(bounds: Vec<KeyBytes>, theta: usize) -> Memtable {
        debug_assert!(bounds.windows(2).all(|w| w[0] < w[1]), "Drange bounds out of order");
        Memtable {
            dranges: (0..=bounds.len()).map(|_| Drange::default()).collect(),
            bounds: bounds.into_boxed_slice(),
            theta,
            lopsided: AtomicBool::new(false),
            sample: Default::default(),
            inserts: AtomicU64::new(0),
            index: (0..INDEX_SHARDS).map(|_| Default::default()).collect(),
            bytes: AtomicUsize::new(0),
            superseded_bytes: AtomicUsize::new(0),
            dead_large_bytes: AtomicU64::new(0),
            ready: Default::default(),
            removal: Default::default(),
            max_lsn: AtomicU64::new(0),
            min_lsn: AtomicU64::new(u64::MAX),
            writers: AtomicUsize::new(0),
            range_dels: Default::default(),
            has_range_dels: AtomicBool::new(false),
        }
    }

    /// Adds a range delete (its record is in the table's log).
    pub(crate) fn insert_range_del(&self, d: RangeDel) {
        self.bytes.fetch_add(d.start.len() + d.end.len() + 48, Relaxed);
        self.max_lsn.fetch_max(d.lsn, Relaxed);
        self.min_lsn.fetch_min(d.lsn, Relaxed);
        let mut g = self.range_dels.write();
        let mut v = Vec::clone(&g);
        rangedel::add(&mut v, d);
        *g = Arc::new(v);
        self.has_range_dels.store(true, std::sync::atomic::Ordering::Release);
    }

    /// The table's range deletes, by LSN (`None` when it has none).
    pub(crate) fn range_dels(&self) -> Option<Arc<Vec<RangeDel>>> {
        if !self.has_range_dels.load(std::sync::atomic::Ordering::Acquire) {
            return None;
        }
        Some(self.range_dels.read().clone())
    }

    /// Counts a mark's LSN ([`crate::format::record::KIND_MARK`]) as the table's: its merge
    /// then covers the LSN. No entry: readers see nothing of it.
    pub(crate) fn insert_mark(&self, lsn: u64) {
        self.max_lsn.fetch_max(lsn, Relaxed);
    }

    pub(crate) fn insert(&self, key: &[u8], lsn: u64, value: Value) {
        self.bytes.fetch_add(entry_bytes(key, &value), Relaxed);
        self.max_lsn.fetch_max(lsn, Relaxed);
        self.min_lsn.fetch_min(lsn, Relaxed);
        // The tree first: a reader that finds the index entry can always fall back to it.
        let mk = MemKey::new(key, lsn);
        let d = &self.dranges[self.drange_of(key)];
        d.map.write().insert(mk, value.clone());
        d.writes.fetch_add(1, Relaxed);
        let n = self.inserts.fetch_add(1, Relaxed);
        // Every key of a small table: its successor's bounds then come from all it saw.
        if self.theta > 1 && (n < SAMPLE_ALL || n.is_multiple_of(SAMPLE_EVERY)) {
            let mut sample = self.sample.lock();
            if sample.len() < SAMPLE_MAX {
                sample.push(KeyBytes::from_slice(key));
            }
        }
        // Only a table of one Drange (a region's first, or one recovery rebuilt) switches
        // early: one already cut waits for its switch, as the merge of a part-filled table
        // rewrites the L1 it overlaps (an ordered Zipfian Run A after a uniform load wrote
        // 2.2x the bytes when cut tables switched early too).
        if self.theta > 1 && self.dranges.len() == 1 && n > 0 && n.is_multiple_of(CHECK_EVERY) {
            self.check_balance();
        }
        let mut shard = self.index[shard_of(key)].write();
        let shard = &mut *shard;
        let old = match shard.newest.get_mut(key) {
            // Writers insert concurrently: a newer version may already be here.
            Some(e) if e.0 >= lsn => Superseded::of(key, lsn, e.0, &value),
            Some(e) => {
                let (old_lsn, old) = std::mem::replace(e, (lsn, value));
                Superseded::of(key, old_lsn, lsn, &old)
            }
            None => {
                shard.newest.insert(KeyBytes::from_slice(key), (lsn, value));
                return;
            }
        };
        if let Some(old) = old {
            self.superseded_bytes.fetch_add(old.bytes, Relaxed);
            if let Some((_, _, len)) = old.large {
                self.dead_large_bytes.fetch_add(len as u64, Relaxed);
            }
            shard.superseded.push(old);
        }
    }

    /// Large-log bytes that versions superseded in this table point to (see the field).
    pub(crate) fn dead_large_bytes(&self) -> u64 {
        self.dead_large_bytes.load(Relaxed)
    }

    /// Bytes of superseded versions not yet handed out by [`Memtable::take_superseded`].
    pub(crate) fn superseded_bytes(&self) -> usize {
        self.superseded_bytes.load(Relaxed)
    }

    /// The superseded versions whose successor is visible at `visible`: once every reader that
    /// started before now is gone, no reader can see them (a later one reads at `visible` or
    /// above, or through a snapshot it took before, which keeps its view).
    pub(crate) fn take_superseded(&self, visible: u64) -> Vec<Superseded> {
        let mut out = Vec::new();
        for shard in self.index.iter() {
            let mut s = shard.write();
            let mut i = 0;
            while i < s.superseded.len() {
                if s.superseded[i].by <= visible {
                    out.push(s.superseded.swap_remove(i));
                } else {
                    i += 1;
                }
            }
        }
        self.superseded_bytes.fetch_sub(out.iter().map(|o| o.bytes).sum(), Relaxed);
        out
    }

    /// Queues versions no reader can see any more for [`Memtable::remove_ready`].
    pub(crate) fn ready(&self, batch: Vec<Superseded>) {
        self.ready.lock().push(batch);
    }

    /// Removes the queued versions (unless another thread is at it). Returns how many.
    pub(crate) fn remove_ready(&self) -> usize {
        let batches = match self.ready.try_lock() {
            Some(mut r) if !r.is_empty() => std::mem::take(&mut *r),
            _ => return 0,
        };
        batches.into_iter().map(|b| self.remove(b)).sum()
    }

    /// Removes every superseded version at once: no reader exists yet (recovery).
    pub(crate) fn remove_all_superseded(&self) -> usize {
        let all = self.take_superseded(u64::MAX);
        self.remove(all)
    }

    fn remove(&self, batch: Vec<Superseded>) -> usize {
        let mut r = self.removal.lock();
        if r.frozen {
            return 0;
        }
        let n = batch.len();
        // A few removals per hold of the lock, so that writers never wait long behind a batch.
        let mut batch = batch.into_iter().peekable();
        while let Some(first) = batch.peek() {
            // Runs of one Drange's versions under one hold of its lock.
            let d = self.drange_of(&first.key);
            let mut map = self.dranges[d].map.write();
            for _ in 0..REMOVALS_PER_LOCK {
                let Some(o) = batch.next_if(|o| self.drange_of(&o.key) == d) else { break };
                map.remove(&MemKey { key: o.key, rev: u64::MAX - o.lsn });
                self.bytes.fetch_sub(o.bytes, Relaxed);
                r.dead_large.extend(o.large);
            }
        }
        n
    }

    /// Stops removals for good (the table's compaction begins) and returns the large-log
    /// records of the versions removed, now garbage (the same list again if a compaction that
    /// failed is retried).
    pub(crate) fn freeze(&self) -> Vec<(u64, u32, u32)> {
        let mut r = self.removal.lock();
        r.frozen = true;
        r.dead_large.clone()
    }

    pub(crate) fn writer_enter(&self) {
        self.writers.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
    }

    pub(crate) fn writer_exit(&self) {
        self.writers.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
    }

    /// Waits until every writer that appended records for this table has inserted them
    /// (before the table is compacted).
    pub(crate) fn wait_for_writers(&self) {
        while self.writers.load(std::sync::atomic::Ordering::Acquire) > 0 {
            std::thread::yield_now();
        }
    }

    pub(crate) fn bytes(&self) -> usize {
        self.bytes.load(Relaxed)
    }

    pub(crate) fn max_lsn(&self) -> u64 {
        self.max_lsn.load(Relaxed)
    }

    /// The lowest LSN inserted, None while empty.
    pub(crate) fn min_lsn(&self) -> Option<u64> {
        Some(self.min_lsn.load(Relaxed)).filter(|&l| l != u64::MAX)
    }

    /// Whether the table holds no write: no version, no range delete, no mark (each takes an
    /// LSN, and LSNs start at 1).
    pub(crate) fn is_empty(&self) -> bool {
        self.max_lsn.load(Relaxed) == 0
    }

    /// The newest version of `key` with LSN <= `snap`.
    pub(crate) fn get(&self, key: &[u8], snap: u64) -> Option<Entry> {
        match self.index[shard_of(key)].read().newest.get(key) {
            None => return None,
            Some((lsn, v)) if *lsn <= snap => return Some(Entry { key: key.to_vec(), lsn: *lsn, value: v.clone() }),
            // A snapshot older than the newest version: find its version in the tree.
            Some(_) => {}
        }
        let from = MemKey { key: KeyBytes::from_slice(key), rev: u64::MAX - snap };
        let map = self.dranges[self.drange_of(key)].map.read();
        let (k, v) = map.range(from..).next()?;
        (k.key[..] == *key).then(|| Entry { key: key.to_vec(), lsn: k.lsn(), value: v.clone() })
    }

    /// The value of the newest version of `key` with LSN <= `snap` (the point-read path:
    /// no copy of the key).
    pub(crate) fn get_value(&self, key: &[u8], snap: u64) -> Option<Value> {
        match self.index[shard_of(key)].read().newest.get(key) {
            None => return None,
            Some((lsn, v)) if *lsn <= snap => return Some(v.clone()),
            Some(_) => {}
        }
        self.get(key, snap).map(|e| e.value)
    }

    /// Up to `max` entries, the newest visible version per key, in key order starting after
    /// (or before, in reverse) `from`.
    pub(crate) fn batch(
        &self,
        from: Bound<&[u8]>,
        end: Bound<&[u8]>,
        snap: u64,
        reverse: bool,
        max: usize,
    ) -> Vec<Entry> {
        let mut out: Vec<Entry> = Vec::new();
        let lo = |b: Bound<&[u8]>| match b {
            Bound::Included(k) => Bound::Included(MemKey { key: KeyBytes::from_slice(k), rev: 0 }),
            Bound::Excluded(k) => Bound::Excluded(MemKey { key: KeyBytes::from_slice(k), rev: u64::MAX }),
            Bound::Unbounded => Bound::Unbounded,
        };
        let hi = |b: Bound<&[u8]>| match b {
            Bound::Included(k) => Bound::Included(MemKey { key: KeyBytes::from_slice(k), rev: u64::MAX }),
            Bound::Excluded(k) => Bound::Excluded(MemKey { key: KeyBytes::from_slice(k), rev: 0 }),
            Bound::Unbounded => Bound::Unbounded,
        };
        let range = if reverse { (lo(end), hi(from)) } else { (lo(from), hi(end)) };
        if !valid_range(&range) {
            return out;
        }
        // The Dranges the range reaches, in the order they are read: a key lives in one Drange,
        // so the batch is theirs one after the other.
        let (low, high) = if reverse { (end, from) } else { (from, end) };
        let first = match low {
            Bound::Included(k) | Bound::Excluded(k) => self.drange_of(k),
            Bound::Unbounded => 0,
        };
        let last = match high {
            Bound::Included(k) | Bound::Excluded(k) => self.drange_of(k),
            Bound::Unbounded => self.dranges.len() - 1,
        };
        let order: Box<dyn Iterator<Item = usize>> =
            if reverse { Box::new((first..=last).rev()) } else { Box::new(first..=last) };
        for d in order {
            if out.len() >= max {
                break;
            }
            batch_in(&self.dranges[d].map.read(), &range, snap, reverse, max, &mut out);
        }
        out
    }

    /// Calls `f` with every key the table holds and its newest value (in no order).
    pub(crate) fn for_each_newest(&self, mut f: impl FnMut(&[u8], &Value)) {
        for shard in self.index.iter() {
            for (k, (_, v)) in shard.read().newest.iter() {
                f(k, v);
            }
        }
    }

    /// Every version in (key asc, LSN desc) order, read a chunk at a time: no lock is held
    /// while the caller (a compaction writing segments) works.
    pub(crate) fn iter_all(&self) -> impl Iterator<Item = Entry> + '_ {
        (0..self.dranges.len()).flat_map(move |d| self.iter_drange(d))
    }

    /// [`Memtable::iter_all`] over Drange `d` only.
    pub(crate) fn iter_drange(&self, d: usize) -> impl Iterator<Item = Entry> + '_ {
        self.iter_drange_from(d, Bound::Unbounded)
    }

    /// [`Memtable::iter_all`] over the keys in `[from, to)` (`None`: open), reading only the
    /// Dranges that range reaches: one part of a merge cut by key range.
    pub(crate) fn iter_range<'a>(
        &'a self,
        from: Option<&[u8]>,
        to: Option<&'a [u8]>,
    ) -> impl Iterator<Item = Entry> + 'a {
        let first = from.map_or(0, |k| self.drange_of(k));
        let last = to.map_or(self.dranges.len() - 1, |k| self.drange_of(k));
        // The newest version of `from` sorts first among its versions.
        let start = from.map(|k| MemKey { key: KeyBytes::from_slice(k), rev: 0 });
        (first..=last)
            .flat_map(move |d| {
                let start =
                    if d == first { start.clone().map_or(Bound::Unbounded, Bound::Included) } else { Bound::Unbounded };
                self.iter_drange_from(d, start)
            })
            .take_while(move |e| to.is_none_or(|t| e.key.as_slice() < t))
    }

    fn iter_drange_from(&self, d: usize, start: Bound<MemKey>) -> impl Iterator<Item = Entry> + '_ {
        let mut from = Some(start);
        let mut chunk = std::collections::VecDeque::new();
        std::iter::from_fn(move || {
            if chunk.is_empty() {
                let map = self.dranges.get(d)?.map.read();
                chunk.extend(map.range((from.take()?, Bound::Unbounded)).take(ITER_CHUNK).map(|(k, v)| Entry {
                    key: k.key.to_vec(),
                    lsn: k.lsn(),
                    value: v.clone(),
                }));
                let last = chunk.back()?;
                from = Some(Bound::Excluded(MemKey::new(&last.key, last.lsn)));
            }
            chunk.pop_front()
        })
        // Once done, done: without this a call after the end would start over.
        .fuse()
    }

    /// The first and the last key the table holds.
    pub(crate) fn key_range(&self) -> Option<(Vec<u8>, Vec<u8>)> {
        let first = self.dranges.iter().find_map(|d| d.map.read().first_key_value().map(|(k, _)| k.key.to_vec()))?;
        let last =
            self.dranges.iter().rev().find_map(|d| d.map.read().last_key_value().map(|(k, _)| k.key.to_vec()))?;
        Some((first, last))
    }

    /// The Drange that holds `key`.
    fn drange_of(&self, key: &[u8]) -> usize {
        self.bounds.partition_point(|b| b[..] <= *key)
    }

    /// How many Dranges the table has.
    pub(crate) fn dranges(&self) -> usize {
        self.dranges.len()
    }

    /// The table, its successor to have up to `theta` Dranges.
    pub(crate) fn with_theta(mut self, theta: usize) -> Memtable {
        self.theta = theta;
        self
    }

    /// Whether the table, one Drange where `theta` would share its writes, should give way to
    /// one cut from its sample before it fills (Nova-LSM reorganises when a Drange takes much
    /// more than its share; here the whole table is cut, as its major reorganisation does).
    pub(crate) fn wants_switch(&self) -> bool {
        self.lopsided.load(Relaxed)
    }

    /// Sets [`Memtable::wants_switch`] when the busiest Drange took over 1.5 fair shares of the
    /// sampled writes and over 1.5 times what the busiest would take if cut anew.
    fn check_balance(&self) {
        let mut sample = self.sample.lock().clone();
        sample.sort_unstable();
        let next = drange_bounds(&sample, self.theta);
        let busiest = |bounds: &[KeyBytes]| {
            let mut counts = vec![0usize; bounds.len() + 1];
            for k in &sample {
                counts[bounds.partition_point(|b| b <= k)] += 1;
            }
            counts.into_iter().max().unwrap_or(0) as f64 / sample.len().max(1) as f64
        };
        let (now, cut) = (busiest(&self.bounds), busiest(&next));
        if now > 1.5 / self.theta as f64 && now > 1.5 * cut {
            self.lopsided.store(true, Relaxed);
        }
    }

    /// Where the Dranges are cut.
    pub(crate) fn bounds(&self) -> &[KeyBytes] {
        &self.bounds
    }

    /// The versions inserted into each Drange.
    pub(crate) fn drange_writes(&self) -> Vec<u64> {
        self.dranges.iter().map(|d| d.writes.load(Relaxed)).collect()
    }

    /// Where the next table's `theta` Dranges should be cut so that each takes about as many
    /// of the writes this table sampled (Nova-LSM's major reorganisation, done at each switch
    /// of tables); see [`drange_bounds`].
    pub(crate) fn next_bounds(&self, theta: usize) -> Vec<KeyBytes> {
        // Taken: the table is switched out, and its sample served its purpose.
        let mut sample = std::mem::take(&mut *self.sample.lock());
        sample.sort_unstable();
        drange_bounds(&sample, theta)
    }
}

/// Nova-LSM's load imbalance: the standard deviation of the Dranges' shares of the writes
/// (0 when they took equal shares; 0 for no writes).
pub(crate) fn load_imbalance(writes: &[u64]) -> f64 {
    let total: u64 = writes.iter().sum();
    if total == 0 || writes.is_empty() {
        return 0.0;
    }
    let n = writes.len() as f64;
    let shares = writes.iter().map(|&w| w as f64 / total as f64);
    let mean = 1.0 / n;
    (shares.map(|s| (s - mean) * (s - mean)).sum::<f64>() / n).sqrt()
}

/// Bounds that cut the sorted keys `sample` (a sample of the writes, a key once per write) into
/// at most `theta` ranges of about equal count. A key whose writes exceed `POINT_SHARE` times a
/// fair share gets a range of its own, `[k, k\0)`, so that its versions never share a tree
/// (and later a merge) with its neighbours'. Empty when there is too little to go by.
fn drange_bounds(sample: &[KeyBytes], theta: usize) -> Vec<KeyBytes> {
    let mut bounds: Vec<KeyBytes> = Vec::new();
    if theta < 2 || sample.len() < theta * 4 {
        return bounds;
    }
    let fair = sample.len() as f64 / theta as f64;
    let push = |bounds: &mut Vec<KeyBytes>, k: KeyBytes| {
        if bounds.len() + 1 < theta && bounds.last().is_none_or(|l| *l < k) {
            bounds.push(k);
        }
    };
    // Writes counted into the range being filled.
    let mut filled = 0usize;
    let mut i = 0;
    while i < sample.len() {
        let key = &sample[i];
        let n = sample[i..].iter().take_while(|k| *k == key).count();
        if n as f64 > POINT_SHARE * fair {
            if filled > 0 {
                push(&mut bounds, key.clone());
            }
            let mut after = key.clone();
            after.push(0);
            push(&mut bounds, after);
            filled = 0;
        } else {
            if filled > 0 && (filled + n) as f64 > fair {
                push(&mut bounds, key.clone());
                filled = 0;
            }
            filled += n;
        }
        i += n;
    }
    bounds
}

/// [`Memtable::batch`] within one Drange's tree: appends to `out` until it holds `max`.
fn batch_in(
    map: &BTreeMap<MemKey, Value>,
    range: &(Bound<MemKey>, Bound<MemKey>),
    snap: u64,
    reverse: bool,
    max: usize,
    out: &mut Vec<Entry>,
) {
    let range = (range.0.as_ref(), range.1.as_ref());
    if !reverse {
        for (k, v) in map.range::<MemKey, _>(range) {
            let lsn = k.lsn();
            if lsn > snap || out.last().is_some_and(|l| l.key[..] == k.key[..]) {
                continue;
            }
            if out.len() >= max {
                break;
            }
            out.push(Entry { key: k.key.to_vec(), lsn, value: v.clone() });
        }
        return;
    }
    // Versions of a key arrive oldest first; the last visible one wins.
    let mut cur: Option<Entry> = None;
    for (k, v) in map.range::<MemKey, _>(range).rev() {
        if cur.as_ref().is_some_and(|c| c.key[..] != k.key[..]) {
            out.extend(cur.take());
            if out.len() >= max {
                return;
            }
        }
        let lsn = k.lsn();
        if lsn <= snap {
            cur = Some(Entry { key: k.key.to_vec(), lsn, value: v.clone() });
        }
    }
    if out.len() < max {
        out.extend(cur);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn versions(m: &Memtable, key: &[u8]) -> Vec<u64> {
        m.iter_all().filter(|e| e.key == key).map(|e| e.lsn).collect()
    }

    #[test]
    fn superseded_versions_go_only_once_their_successor_is_visible_and_released() {
        let m = Memtable::new();
        m.insert(b"k", 1, Value::Inline(b"a".to_vec()));
        m.insert(b"k", 3, Value::Inline(b"c".to_vec()));
        // A writer that finished late: its version is older than the one already there.
        m.insert(b"k", 2, Value::Inline(b"b".to_vec()));
        m.insert(b"j", 4, Value::Inline(b"x".to_vec()));
        let one = entry_bytes(b"k", &Value::Inline(b"a".to_vec()));
        assert_eq!(m.bytes(), 4 * one);
        assert_eq!(m.superseded_bytes(), 2 * one);
        // Both were superseded by LSN 3: nothing goes while 3 is not visible.
        assert!(m.take_superseded(2).is_empty());
        let batch = m.take_superseded(3);
        assert_eq!(batch.len(), 2);
        assert_eq!(m.superseded_bytes(), 0);
        // Handed out but not released: a reader of an older view may still read them.
        assert_eq!(m.get(b"k", 1).map(|e| e.value), Some(Value::Inline(b"a".to_vec())));
        assert_eq!(m.remove_ready(), 0);
        m.ready(batch);
        assert_eq!(m.remove_ready(), 2);
        assert_eq!(versions(&m, b"k"), vec![3]);
        assert_eq!(m.get(b"k", u64::MAX).map(|e| e.value), Some(Value::Inline(b"c".to_vec())));
        assert_eq!(m.bytes(), 2 * one);
    }

    #[test]
    fn superseded_large_versions_count_their_log_bytes() {
        let m = Memtable::new();
        m.insert(b"k", 1, Value::Large { ptr: 100, len: 2000, salt: 7 });
        m.insert(b"k", 2, Value::Inline(b"small now".to_vec()));
        m.insert(b"k", 3, Value::Large { ptr: 5000, len: 3000, salt: 7 });
        // Out of order: j's version 4 arrives after 5 and is superseded on arrival.
        m.insert(b"j", 5, Value::Large { ptr: 9000, len: 500, salt: 7 });
        m.insert(b"j", 4, Value::Large { ptr: 8000, len: 700, salt: 7 });
        assert_eq!(m.dead_large_bytes(), 2000 + 700);
    }

    #[test]
    fn a_frozen_table_keeps_its_versions_and_reports_dropped_large_records_once() {
        let m = Memtable::new();
        m.insert(b"k", 1, Value::Large { ptr: 100, len: 2000, salt: 7 });
        m.insert(b"k", 2, Value::Large { ptr: 5000, len: 2000, salt: 7 });
        m.insert(b"n", 3, Value::Inline(b"v".to_vec()));
        m.insert(b"n", 4, Value::Tombstone);
        assert_eq!(m.remove_all_superseded(), 2);
        assert_eq!(versions(&m, b"k"), vec![2]);
        assert_eq!(versions(&m, b"n"), vec![4]);
        m.insert(b"k", 5, Value::Large { ptr: 9000, len: 2000, salt: 7 });
        let late = m.take_superseded(u64::MAX);
        assert_eq!(m.freeze(), vec![(100, 7, 2000)]);
        // Removal after the freeze would hide a version the compaction must see.
        m.ready(late);
        assert_eq!(m.remove_ready(), 0);
        assert_eq!(versions(&m, b"k"), vec![5, 2]);
        assert_eq!(m.freeze(), vec![(100, 7, 2000)], "a retried compaction gets the same list");
    }

    #[test]
    fn iteration_crosses_chunks_without_losing_or_repeating_a_version() {
        let m = Memtable::new();
        assert_eq!(m.key_range(), None);
        assert_eq!(m.iter_all().count(), 0);
        // Three versions of each key, so that chunk ends fall between versions of one key.
        let keys = ITER_CHUNK + 7;
        for lsn in 1..=3u64 {
            for i in 0..keys {
                m.insert(format!("k{i:06}").as_bytes(), lsn * 10_000 + i as u64, Value::Tombstone);
            }
        }
        let all: Vec<(Vec<u8>, u64)> = m.iter_all().map(|e| (e.key, e.lsn)).collect();
        let mut want = all.clone();
        want.sort_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
        want.dedup();
        assert_eq!(all.len(), 3 * keys);
        assert_eq!(all, want, "key ascending, LSN descending, each version once");
        let mut it = m.iter_all();
        assert_eq!(it.by_ref().count(), 3 * keys);
        assert!(it.next().is_none(), "an iterator at its end stays there");
        assert_eq!(m.key_range(), Some((b"k000000".to_vec(), format!("k{:06}", keys - 1).into_bytes())));
    }

    #[test]
    fn empty_and_inverted_ranges_read_nothing() {
        let m = Memtable::new();
        for (i, k) in [b"a", b"b", b"c"].iter().enumerate() {
            m.insert(*k, i as u64 + 1, Value::Inline(k.to_vec()));
        }
        let keys = |from, end, reverse| -> Vec<Vec<u8>> {
            m.batch(from, end, u64::MAX, reverse, 10).into_iter().map(|e| e.key).collect()
        };
        use Bound::{Excluded, Included, Unbounded};
        // Forward from c to a, backward from a to c.
        assert!(keys(Included(&b"c"[..]), Included(&b"a"[..]), false).is_empty());
        assert!(keys(Included(&b"a"[..]), Included(&b"c"[..]), true).is_empty());
        assert_eq!(keys(Included(&b"c"[..]), Included(&b"a"[..]), true).len(), 3);
        for reverse in [false, true] {
            assert!(keys(Excluded(&b"b"[..]), Excluded(&b"b"[..]), reverse).is_empty());
            assert!(keys(Included(&b"b"[..]), Excluded(&b"b"[..]), reverse).is_empty());
            assert_eq!(keys(Included(&b"b"[..]), Included(&b"b"[..]), reverse), vec![b"b".to_vec()]);
        }
        assert_eq!(keys(Excluded(&b"a"[..]), Unbounded, false), vec![b"b".to_vec(), b"c".to_vec()]);
        assert_eq!(keys(Excluded(&b"c"[..]), Unbounded, true), vec![b"b".to_vec(), b"a".to_vec()]);
    }

    #[test]
    fn medium_pointers_stay_until_the_compaction() {
        let m = Memtable::new();
        m.insert(b"k", 1, Value::Medium { ptr: 1, len: 200, salt: 1 });
        m.insert(b"k", 2, Value::Inline(b"v".to_vec()));
        assert_eq!(m.superseded_bytes(), 0);
        assert_eq!(m.remove_all_superseded(), 0);
        assert_eq!(versions(&m, b"k"), vec![2, 1]);
    }

    fn kb(s: &str) -> KeyBytes {
        KeyBytes::from_slice(s.as_bytes())
    }

    #[test]
    fn drange_bounds_cut_equal_shares_and_give_a_hot_key_its_own() {
        // Uniform: 800 distinct keys in 4 ranges of 200.
        let uniform: Vec<KeyBytes> = (0..800).map(|i| kb(&format!("k{i:04}"))).collect();
        let b = drange_bounds(&uniform, 4);
        assert_eq!(b, vec![kb("k0200"), kb("k0400"), kb("k0600")]);
        // One key takes half the writes: it gets [k, k\0) to itself.
        let mut skew: Vec<KeyBytes> = (0..400).map(|i| kb(&format!("k{i:04}"))).collect();
        skew.extend(std::iter::repeat_n(kb("k0100"), 400));
        skew.sort();
        let b = drange_bounds(&skew, 4);
        let mut after = kb("k0100");
        after.push(0);
        assert!(b.contains(&kb("k0100")) && b.contains(&after), "{b:?}");
        assert!(b.len() <= 3 && b.windows(2).all(|w| w[0] < w[1]), "{b:?}");
        // Too few samples, or one Drange: no cut.
        assert!(drange_bounds(&uniform[..10], 4).is_empty());
        assert!(drange_bounds(&uniform, 1).is_empty());
    }

    #[test]
    fn load_imbalance_is_the_spread_of_the_shares() {
        assert_eq!(load_imbalance(&[5, 5, 5, 5]), 0.0);
        assert_eq!(load_imbalance(&[]), 0.0);
        assert_eq!(load_imbalance(&[0, 0]), 0.0);
        // Shares 1 and 0 around a mean of 1/2.
        assert!((load_imbalance(&[7, 0]) - 0.5).abs() < 1e-12);
    }

    #[test]
    fn a_table_samples_its_writes_for_the_next() {
        assert!(Memtable::new().next_bounds(4).is_empty(), "a table of one Drange samples nothing");
        let m = Memtable::new().with_theta(4);
        for i in 0..4000u64 {
            // Keys 0..99 take three quarters of the writes.
            let k = if i % 4 == 0 { format!("k{:04}", 100 + i % 900) } else { format!("k{:04}", i % 100) };
            m.insert(k.as_bytes(), i + 1, Value::Tombstone);
        }
        let b = m.next_bounds(4);
        assert_eq!(b.len(), 3, "{b:?}");
        // The hot hundred keys are cut into about three ranges of their own.
        assert!(b[1] < kb("k0100"), "{b:?}");
        let next = Memtable::with_bounds(b, 4);
        assert_eq!(next.dranges(), 4);
        next.insert(b"k0000", 1, Value::Tombstone);
        next.insert(b"k0999", 2, Value::Tombstone);
        assert_eq!(next.drange_writes().iter().sum::<u64>(), 2);
        assert_eq!(next.drange_writes()[0], 1);
        assert_eq!(next.drange_writes()[3], 1);
    }

    #[test]
    fn an_uncut_table_asks_to_be_cut_and_a_cut_one_waits_for_its_switch() {
        // A region's first table: one Drange for writes spread over k0000..k0999.
        let first = Memtable::new().with_theta(4);
        for i in 0..CHECK_EVERY + 1 {
            first.insert(format!("k{:04}", (i * 7) % 1000).as_bytes(), i + 1, Value::Tombstone);
        }
        assert!(first.wants_switch(), "one Drange where four would share the writes");
        // Cut for spread keys, then every write goes to the first tenth: it waits for its
        // switch (switching early would add a merge of a part-filled table).
        let cut = Memtable::with_bounds(["k0250", "k0500", "k0750"].map(kb).to_vec(), 4);
        for i in 0..CHECK_EVERY + 1 {
            cut.insert(format!("k{:04}", i % 100).as_bytes(), i + 1, Value::Tombstone);
        }
        assert!(!cut.wants_switch());
        // θ = 1: nothing to cut.
        let one = Memtable::new();
        for i in 0..CHECK_EVERY + 1 {
            one.insert(format!("k{:04}", (i * 7) % 1000).as_bytes(), i + 1, Value::Tombstone);
        }
        assert!(!one.wants_switch());
    }

    mod dranges_model {
        use super::super::*;
        use proptest::prelude::*;

        fn key(i: u8) -> Vec<u8> {
            format!("k{:02}", i % 40).into_bytes()
        }

        proptest! {
            /// A table cut into Dranges reads exactly as a table of one: every key lands in
            /// the one Drange whose bounds hold it, and reads and scans that cross bounds
            /// (forward, backward, at snapshots, with limits) see the same versions.
            #[test]
            fn dranges_read_as_one_table(
                cuts in proptest::collection::btree_set(0u8..40, 0..6),
                writes in proptest::collection::vec((any::<u8>(), any::<bool>()), 1..120),
                scans in proptest::collection::vec((any::<u8>(), any::<u8>(), any::<bool>(), 0usize..12, 0u64..130), 1..20),
            ) {
                let bounds: Vec<KeyBytes> = cuts.iter().map(|&c| KeyBytes::from_slice(&key(c))).collect();
                let one = Memtable::new();
                let cut = Memtable::with_bounds(bounds.clone(), 1);
                for (lsn, (k, tomb)) in writes.iter().enumerate() {
                    let v = if *tomb { Value::Tombstone } else { Value::Inline(vec![*k]) };
                    one.insert(&key(*k), lsn as u64 + 1, v.clone());
                    cut.insert(&key(*k), lsn as u64 + 1, v);
                }
                // The bounds partition the key space.
                for i in 0..40u8 {
                    let k = key(i);
                    let d = cut.drange_of(&k);
                    prop_assert!(d == 0 || bounds[d - 1][..] <= k[..]);
                    prop_assert!(d == bounds.len() || k[..] < bounds[d][..]);
                }
                let all = |m: &Memtable| m.iter_all().map(|e| (e.key, e.lsn, e.value)).collect::<Vec<_>>();
                prop_assert_eq!(all(&one), all(&cut));
                prop_assert_eq!(one.key_range(), cut.key_range());
                for (a, b, reverse, max, snap) in scans {
                    let (a, b) = (key(a), key(b));
                    for (from, end) in [
                        (Bound::Included(&a[..]), Bound::Excluded(&b[..])),
                        (Bound::Excluded(&a[..]), Bound::Unbounded),
                        (Bound::Unbounded, Bound::Included(&b[..])),
                    ] {
                        let x = one.batch(from, end, snap, reverse, max);
                        let y = cut.batch(from, end, snap, reverse, max);
                        prop_assert_eq!(x, y);
                    }
                    prop_assert_eq!(one.get(&a, snap), cut.get(&a, snap));
                }
            }
        }
    }
}
