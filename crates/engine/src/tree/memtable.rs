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

pub(crate) struct Memtable {
    /// Every version, ordered. A B-tree behind a lock rather than a lock-free skiplist: a
    /// skiplist search takes a cache miss per level (about twenty at 600k entries), and under
    /// Run A's updates and GC's moves that search was a fifth of the engine's CPU; the tree
    /// takes a handful of node visits, and writers hold the lock for one insert each.
    map: parking_lot::RwLock<BTreeMap<MemKey, Value>>,
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
    pub(crate) fn new() -> Memtable {
        Memtable {
            map: parking_lot::RwLock::new(BTreeMap::new()),
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
        self.map.write().insert(mk, value.clone());
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
        while batch.peek().is_some() {
            let mut map = self.map.write();
            for o in batch.by_ref().take(REMOVALS_PER_LOCK) {
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
        let map = self.map.read();
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
        let map = self.map.read();
        if !reverse {
            for (k, v) in map.range(range) {
                let lsn = k.lsn();
                if lsn > snap || out.last().is_some_and(|l| l.key[..] == k.key[..]) {
                    continue;
                }
                if out.len() == max {
                    break;
                }
                out.push(Entry { key: k.key.to_vec(), lsn, value: v.clone() });
            }
        } else {
            // Versions of a key arrive oldest first; the last visible one wins.
            let mut cur: Option<Entry> = None;
            for (k, v) in map.range(range).rev() {
                let lsn = k.lsn();
                if cur.as_ref().is_some_and(|c| c.key[..] != k.key[..]) {
                    if out.len() + 1 == max {
                        out.extend(cur.take());
                        break;
                    }
                    out.extend(cur.take());
                }
                if lsn <= snap {
                    cur = Some(Entry { key: k.key.to_vec(), lsn, value: v.clone() });
                }
            }
            if out.len() < max {
                out.extend(cur);
            }
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

    /// Every version in (key asc, LSN desc) order, read a chunk at a time: the lock is not
    /// held while the caller (a compaction writing segments) works.
    pub(crate) fn iter_all(&self) -> impl Iterator<Item = Entry> + '_ {
        let mut after: Option<MemKey> = None;
        let mut chunk = std::collections::VecDeque::new();
        std::iter::from_fn(move || {
            if chunk.is_empty() {
                let map = self.map.read();
                let from = after.take().map_or(Bound::Unbounded, Bound::Excluded);
                chunk.extend(map.range((from, Bound::Unbounded)).take(ITER_CHUNK).map(|(k, v)| Entry {
                    key: k.key.to_vec(),
                    lsn: k.lsn(),
                    value: v.clone(),
                }));
                let last = chunk.back()?;
                after = Some(MemKey::new(&last.key, last.lsn));
            }
            chunk.pop_front()
        })
        // Once done, done: without this a call after the end would start over.
        .fuse()
    }

    /// The first and the last key the table holds.
    pub(crate) fn key_range(&self) -> Option<(Vec<u8>, Vec<u8>)> {
        let map = self.map.read();
        Some((map.first_key_value()?.0.key.to_vec(), map.last_key_value()?.0.key.to_vec()))
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
}
