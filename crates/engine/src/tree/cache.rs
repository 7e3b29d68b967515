//! The engine's own cache of nodes and log values, with a byte budget. Direct I/O keeps the
//! page cache out of the way, so this is the only cache and its size is what a user sets.

use quick_cache::Weighter;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

/// What the cache charges per entry beyond its bytes (key, bookkeeping).
pub(crate) const ENTRY_OVERHEAD: usize = 64;

#[derive(Clone)]
struct Bytes;

impl Weighter<u128, Arc<Vec<u8>>> for Bytes {
    fn weight(&self, _k: &u128, v: &Arc<Vec<u8>>) -> u64 {
        (v.len() + ENTRY_OVERHEAD) as u64
    }
}

/// Cache keyed by SST identity and node offset, or by log pointer and segment salt, so that a
/// reused segment never serves stale entries.
pub(crate) struct Cache {
    inner: Option<quick_cache::sync::Cache<u128, Arc<Vec<u8>>, Bytes>>,
    hits: AtomicU64,
    misses: AtomicU64,
    row_hits: AtomicU64,
    row_misses: AtomicU64,
}

/// Row keys set bit 126 and clear bit 127 (see `rowcache::row_key`).
fn is_row(key: u128) -> bool {
    key >> 126 == 1
}

impl Cache {
    /// A cache of `bytes`; `item_bytes` is the typical entry size, which sizes the policy's
    /// bookkeeping (its record of recently evicted keys decides what is hot enough to keep).
    pub(crate) fn new(bytes: usize, item_bytes: usize) -> Cache {
        let inner = (bytes >= 4096).then(|| {
            let items = (bytes / item_bytes.max(64)).max(16);
            quick_cache::sync::Cache::with_weighter(items, bytes as u64, Bytes)
        });
        Cache {
            inner,
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            row_hits: AtomicU64::new(0),
            row_misses: AtomicU64::new(0),
        }
    }

    pub(crate) fn get(&self, off: u128) -> Option<Arc<Vec<u8>>> {
        let v = self.inner.as_ref().and_then(|c| c.get(&off));
        let (hits, misses) = if is_row(off) { (&self.row_hits, &self.row_misses) } else { (&self.hits, &self.misses) };
        if v.is_some() {
            hits.fetch_add(1, Relaxed);
        } else {
            misses.fetch_add(1, Relaxed);
        }
        v
    }

    pub(crate) fn insert(&self, off: u128, v: Arc<Vec<u8>>) {
        if let Some(c) = &self.inner {
            c.insert(off, v);
        }
    }

    /// The entry of `off` for background work (compaction reading its inputs): counts neither a
    /// hit nor a miss and does not make the entry look used.
    pub(crate) fn peek(&self, off: u128) -> Option<Arc<Vec<u8>>> {
        self.inner.as_ref().and_then(|c| c.peek(&off))
    }

    /// Bytes the cache can take before it has to evict anything.
    pub(crate) fn room(&self) -> u64 {
        self.inner.as_ref().map_or(0, |c| c.capacity().saturating_sub(c.weight()))
    }

    /// Whether `off` is cached; counts neither a hit nor a miss and does not make it look used.
    pub(crate) fn contains(&self, off: u128) -> bool {
        self.inner.as_ref().is_some_and(|c| c.contains_key(&off))
    }

    /// The byte budget.
    pub(crate) fn capacity(&self) -> u64 {
        self.inner.as_ref().map_or(0, |c| c.capacity())
    }

    /// Replaces an entry that is present, without making it look used.
    pub(crate) fn refresh(&self, off: u128, v: Arc<Vec<u8>>) {
        if let Some(c) = &self.inner {
            let _ = c.replace(off, v, true);
        }
    }

    pub(crate) fn remove(&self, off: u128) {
        if let Some(c) = &self.inner {
            c.remove(&off);
        }
    }

    /// Drops the cached values of the log segments `segs` (`(segment, salt)`; keys of
    /// `region::value_cache_key`: the pointer above the salt). Walks the whole cache: for a
    /// region whose segments may be written again in place, which is rare.
    pub(crate) fn forget_values(&self, segs: &std::collections::HashSet<(u32, u32)>, seg_bits: u32) {
        if let Some(c) = &self.inner {
            c.retain(|k, _| {
                let (ptr, salt) = ((k >> 32) as u64, *k as u32);
                is_row(*k) || !segs.contains(&((ptr >> seg_bits) as u32, salt))
            });
        }
    }

    /// (node and value hits, their misses, bytes held)
    pub(crate) fn stats(&self) -> (u64, u64, u64) {
        let used = self.inner.as_ref().map_or(0, |c| c.weight());
        (self.hits.load(Relaxed), self.misses.load(Relaxed), used)
    }

    /// (row hits, row misses)
    pub(crate) fn row_stats(&self) -> (u64, u64) {
        (self.row_hits.load(Relaxed), self.row_misses.load(Relaxed))
    }
}
