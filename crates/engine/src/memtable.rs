//! L0: an in-memory sorted table of versions, concurrent readers with one writer.

use crossbeam_skiplist::SkipMap;
use std::ops::Bound;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};

/// Keys up to this size live inside the skiplist node: a lookup compares keys without
/// chasing a pointer per node (which dominated point reads of a large table).
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

/// Where a version's value is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Value {
    /// Small or medium pair: the value itself.
    Inline(Vec<u8>),
    /// In the medium log: record offset, record length, segment salt.
    Medium { ptr: u64, len: u32, salt: u32 },
    /// In the large log.
    Large { ptr: u64, len: u32, salt: u32 },
    /// Deleted.
    Tombstone,
}

impl Value {
    /// Bytes this entry takes in an SST leaf besides the key.
    pub(crate) fn stored_len(&self) -> usize {
        match self {
            Value::Inline(v) => 4 + v.len(),
            Value::Medium { .. } | Value::Large { .. } => 16,
            Value::Tombstone => 0,
        }
    }
}

/// One version of a key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Entry {
    pub key: Vec<u8>,
    pub lsn: u64,
    pub value: Value,
}

const INDEX_SHARDS: usize = 64;

type IndexShard =
    parking_lot::RwLock<std::collections::HashMap<KeyBytes, (u64, Value), xxhash_rust::xxh3::Xxh3Builder>>;

pub(crate) struct Memtable {
    map: SkipMap<MemKey, Value>,
    /// The newest version of every key, for point reads in one hash probe instead of a walk
    /// down the skiplist (a cache miss per node): reads of keys the table does not hold, and
    /// reads at the current snapshot, never touch the skiplist. (KV-Tandem's LSM bypass.)
    index: Box<[IndexShard]>,
    bytes: AtomicUsize,
    max_lsn: AtomicU64,
    /// Writers that appended records for this table and are still inserting them.
    writers: AtomicUsize,
}

fn shard_of(key: &[u8]) -> usize {
    (xxhash_rust::xxh3::xxh3_64(key) % INDEX_SHARDS as u64) as usize
}

impl Memtable {
    pub(crate) fn new() -> Memtable {
        Memtable {
            map: SkipMap::new(),
            index: (0..INDEX_SHARDS).map(|_| IndexShard::default()).collect(),
            bytes: AtomicUsize::new(0),
            max_lsn: AtomicU64::new(0),
            writers: AtomicUsize::new(0),
        }
    }

    pub(crate) fn insert(&self, key: &[u8], lsn: u64, value: Value) {
        self.bytes.fetch_add(key.len() + value.stored_len() + 48, Relaxed);
        self.max_lsn.fetch_max(lsn, Relaxed);
        // The skiplist first: a reader that finds the index entry can always fall back to it.
        self.map.insert(MemKey::new(key, lsn), value.clone());
        let mut shard = self.index[shard_of(key)].write();
        match shard.get_mut(key) {
            Some(e) if e.0 >= lsn => {}
            Some(e) => *e = (lsn, value),
            None => {
                shard.insert(KeyBytes::from_slice(key), (lsn, value));
            }
        }
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

    pub(crate) fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// The newest version of `key` with LSN <= `snap`.
    pub(crate) fn get(&self, key: &[u8], snap: u64) -> Option<Entry> {
        match self.index[shard_of(key)].read().get(key) {
            None => return None,
            Some((lsn, v)) if *lsn <= snap => return Some(Entry { key: key.to_vec(), lsn: *lsn, value: v.clone() }),
            // A snapshot older than the newest version: find its version in the skiplist.
            Some(_) => {}
        }
        let from = MemKey { key: KeyBytes::from_slice(key), rev: u64::MAX - snap };
        let e = self.map.lower_bound(Bound::Included(&from))?;
        (e.key().key[..] == *key).then(|| Entry { key: key.to_vec(), lsn: e.key().lsn(), value: e.value().clone() })
    }

    /// The value of the newest version of `key` with LSN <= `snap` (the point-read path:
    /// no copy of the key).
    pub(crate) fn get_value(&self, key: &[u8], snap: u64) -> Option<Value> {
        match self.index[shard_of(key)].read().get(key) {
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
        if !reverse {
            for e in self.map.range((lo(from), hi(end))) {
                let lsn = e.key().lsn();
                if lsn > snap || out.last().is_some_and(|l| l.key[..] == e.key().key[..]) {
                    continue;
                }
                if out.len() == max {
                    break;
                }
                out.push(Entry { key: e.key().key.to_vec(), lsn, value: e.value().clone() });
            }
        } else {
            // Versions of a key arrive oldest first; the last visible one wins.
            let mut cur: Option<Entry> = None;
            for e in self.map.range((lo(end), hi(from))).rev() {
                let lsn = e.key().lsn();
                if cur.as_ref().is_some_and(|c| c.key[..] != e.key().key[..]) {
                    if out.len() + 1 == max {
                        out.extend(cur.take());
                        break;
                    }
                    out.extend(cur.take());
                }
                if lsn <= snap {
                    cur = Some(Entry { key: e.key().key.to_vec(), lsn, value: e.value().clone() });
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
            for (k, (_, v)) in shard.read().iter() {
                f(k, v);
            }
        }
    }

    /// Every version in (key asc, LSN desc) order.
    pub(crate) fn iter_all(&self) -> impl Iterator<Item = Entry> + '_ {
        self.map.iter().map(|e| Entry { key: e.key().key.to_vec(), lsn: e.key().lsn(), value: e.value().clone() })
    }
}
