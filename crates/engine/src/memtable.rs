//! L0: an in-memory sorted table of versions, concurrent readers with one writer.

use crossbeam_skiplist::SkipMap;
use std::ops::Bound;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};

/// A version's key in the table: user key ascending, then LSN descending.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct MemKey {
    pub key: Vec<u8>,
    /// `u64::MAX - lsn`, so that newer versions sort first.
    pub rev: u64,
}

impl MemKey {
    pub(crate) fn new(key: &[u8], lsn: u64) -> MemKey {
        MemKey { key: key.to_vec(), rev: u64::MAX - lsn }
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

pub(crate) struct Memtable {
    map: SkipMap<MemKey, Value>,
    bytes: AtomicUsize,
    max_lsn: AtomicU64,
}

impl Memtable {
    pub(crate) fn new() -> Memtable {
        Memtable { map: SkipMap::new(), bytes: AtomicUsize::new(0), max_lsn: AtomicU64::new(0) }
    }

    pub(crate) fn insert(&self, key: &[u8], lsn: u64, value: Value) {
        self.bytes.fetch_add(key.len() + value.stored_len() + 48, Relaxed);
        self.max_lsn.fetch_max(lsn, Relaxed);
        self.map.insert(MemKey::new(key, lsn), value);
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
        let from = MemKey { key: key.to_vec(), rev: u64::MAX - snap };
        let e = self.map.lower_bound(Bound::Included(&from))?;
        (e.key().key == key).then(|| Entry { key: key.to_vec(), lsn: e.key().lsn(), value: e.value().clone() })
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
            Bound::Included(k) => Bound::Included(MemKey { key: k.to_vec(), rev: 0 }),
            Bound::Excluded(k) => Bound::Excluded(MemKey { key: k.to_vec(), rev: u64::MAX }),
            Bound::Unbounded => Bound::Unbounded,
        };
        let hi = |b: Bound<&[u8]>| match b {
            Bound::Included(k) => Bound::Included(MemKey { key: k.to_vec(), rev: u64::MAX }),
            Bound::Excluded(k) => Bound::Excluded(MemKey { key: k.to_vec(), rev: 0 }),
            Bound::Unbounded => Bound::Unbounded,
        };
        if !reverse {
            for e in self.map.range((lo(from), hi(end))) {
                let lsn = e.key().lsn();
                if lsn > snap || out.last().is_some_and(|l| l.key == e.key().key) {
                    continue;
                }
                if out.len() == max {
                    break;
                }
                out.push(Entry { key: e.key().key.clone(), lsn, value: e.value().clone() });
            }
        } else {
            // Versions of a key arrive oldest first; the last visible one wins.
            let mut cur: Option<Entry> = None;
            for e in self.map.range((lo(end), hi(from))).rev() {
                let lsn = e.key().lsn();
                if cur.as_ref().is_some_and(|c| c.key != e.key().key) {
                    if out.len() + 1 == max {
                        out.extend(cur.take());
                        break;
                    }
                    out.extend(cur.take());
                }
                if lsn <= snap {
                    cur = Some(Entry { key: e.key().key.clone(), lsn, value: e.value().clone() });
                }
            }
            if out.len() < max {
                out.extend(cur);
            }
        }
        out
    }

    /// Every version in (key asc, LSN desc) order.
    pub(crate) fn iter_all(&self) -> impl Iterator<Item = Entry> + '_ {
        self.map.iter().map(|e| Entry { key: e.key().key.clone(), lsn: e.key().lsn(), value: e.value().clone() })
    }
}
