//! The LSM bypass (KV-Tandem §3.2, "direct mode", adapted to hybrid placement): for the keys
//! whose newest version in the levels keeps its value in the medium or large log, a hash map
//! from a fingerprint of the key to that log record. A point read that L0 misses reads the
//! record at once (one device read on a cache miss) instead of walking an SST to its leaf and
//! then reading the log.
//!
//! Exactness: a slot names the newest version of its key in the levels, or nothing. Versions
//! reach the levels only through the L0->L1 merge, which sets or clears the slot of every key
//! it moves; a merge that turns a pointer into an inline value (medium pairs merged in place),
//! drops a version (a range delete, an expired pair) or frees an SST hidden by a range delete
//! clears the slot of that version. Changes are applied after the merge commits and before
//! its output is visible: a reader of the older view still finds the key in L0 (which it
//! checks first) or reads a record whose segment its view keeps allocated. Every change names
//! its version's LSN: a set never replaces a newer version, a clear never removes one. Reads
//! through a slot check the record's checksum, salt, key and LSN and fall back to the tree on
//! any difference, so a slot can make a read slower, never wrong; snapshots, ranges deletes
//! over the key and backups take the tree as before.
//!
//! A region's map starts empty and is filled from its levels by a job that holds every level
//! (after an open or a promotion) before reads use it. Its memory is bounded by
//! `Options::lsm_bypass_bytes`: once full, keys without a slot are read through the tree.

#![expect(clippy::indexing_slicing, reason = "shard indexes are reduced modulo the shard count")]

use parking_lot::RwLock;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed};

const SHARDS: usize = 64;

/// Bytes one slot costs: the map key, the slot, and the hash table's control byte and spare
/// capacity (7/8 full at most).
pub(crate) const SLOT_BYTES: usize = (8 + std::mem::size_of::<Slot>() + 1) * 8 / 7;

/// Where the newest version of a key keeps its value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Slot {
    pub lsn: u64,
    /// Device offset of the log record.
    pub ptr: u64,
    pub len: u32,
    pub salt: u32,
    /// When the pair expires (ms since the Unix epoch; 0: never).
    pub expire_at: u64,
    /// A second hash of the key: with the map's key, 96 bits tell keys apart, so a value the
    /// cache holds for the record (cached by position, without its key) is served only to
    /// its own key.
    pub check: u32,
}

/// A change a merge makes, applied once it commits. Only the L0->L1 merge sets slots: what it
/// writes is the newest version of each key in the levels (L1 is the top one), while a deeper
/// merge may rewrite an old version that a newer inline one hides.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Change {
    /// The key's version `slot.lsn` keeps its value in the log at `slot`.
    Set(u64, Slot),
    /// The key's version of this LSN (and any older one) is not a log value.
    Clear(u64, u64),
}

/// The map's key and the slot's check for `key`.
pub(crate) fn hashes(key: &[u8]) -> (u64, u32) {
    let h = xxhash_rust::xxh3::xxh3_128(key);
    (h as u64, (h >> 64) as u32)
}

pub(crate) struct Bypass {
    shards: Box<[RwLock<HashMap<u64, Slot, xxhash_rust::xxh3::Xxh3Builder>>]>,
    slots: AtomicUsize,
    max_slots: usize,
    /// Filled from the levels: reads may use it.
    ready: AtomicBool,
}

impl Bypass {
    pub(crate) fn new(max_bytes: usize) -> Bypass {
        Bypass {
            shards: (0..SHARDS).map(|_| Default::default()).collect(),
            slots: AtomicUsize::new(0),
            max_slots: max_bytes / SLOT_BYTES,
            ready: AtomicBool::new(false),
        }
    }

    fn shard(&self, fp: u64) -> &RwLock<HashMap<u64, Slot, xxhash_rust::xxh3::Xxh3Builder>> {
        // The low bits pick the slot within a shard's table: take the shard from the high ones.
        &self.shards[(fp >> 58) as usize % SHARDS]
    }

    pub(crate) fn is_ready(&self) -> bool {
        self.ready.load(std::sync::atomic::Ordering::Acquire)
    }

    pub(crate) fn set_ready(&self) {
        self.ready.store(true, std::sync::atomic::Ordering::Release);
    }

    /// The slot of `key`, if one is kept and it is `key`'s.
    pub(crate) fn get(&self, key: &[u8]) -> Option<Slot> {
        let (fp, check) = hashes(key);
        self.shard(fp).read().get(&fp).copied().filter(|s| s.check == check)
    }

    pub(crate) fn apply(&self, changes: &[Change]) {
        for c in changes {
            match *c {
                Change::Set(fp, slot) => self.set(fp, slot),
                Change::Clear(fp, lsn) => self.clear(fp, lsn),
            }
        }
    }

    fn set(&self, fp: u64, slot: Slot) {
        let mut m = self.shard(fp).write();
        match m.get_mut(&fp) {
            Some(cur) if cur.lsn <= slot.lsn => *cur = slot,
            Some(_) => {}
            None if self.slots.load(Relaxed) < self.max_slots => {
                m.insert(fp, slot);
                self.slots.fetch_add(1, Relaxed);
            }
            None => {}
        }
    }

    fn clear(&self, fp: u64, lsn: u64) {
        let mut m = self.shard(fp).write();
        // Another key's slot under the same map key goes too when it is older: that key then
        // reads through the tree.
        if m.get(&fp).is_some_and(|cur| cur.lsn <= lsn) {
            m.remove(&fp);
            self.slots.fetch_sub(1, Relaxed);
        }
    }

    /// Slots kept, and the bytes they cost.
    pub(crate) fn usage(&self) -> (u64, u64) {
        let n = self.slots.load(Relaxed) as u64;
        (n, n * SLOT_BYTES as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slot(lsn: u64, key: &[u8]) -> (u64, Slot) {
        let (fp, check) = hashes(key);
        (fp, Slot { lsn, ptr: lsn * 100, len: 10, salt: 1, expire_at: 0, check })
    }

    #[test]
    fn a_set_never_replaces_a_newer_version_and_a_clear_never_removes_one() {
        let b = Bypass::new(1 << 20);
        let (fp, s5) = slot(5, b"k");
        b.apply(&[Change::Set(fp, s5)]);
        assert_eq!(b.get(b"k"), Some(s5));
        assert_eq!(b.get(b"other"), None);
        let (_, s3) = slot(3, b"k");
        b.apply(&[Change::Set(fp, s3), Change::Clear(fp, 4)]);
        assert_eq!(b.get(b"k"), Some(s5), "older set and clear change nothing");
        b.apply(&[Change::Clear(fp, 7)]);
        assert_eq!(b.get(b"k"), None);
        assert_eq!(b.usage().0, 0);
    }

    #[test]
    fn the_map_stops_growing_at_its_bound() {
        let b = Bypass::new(SLOT_BYTES * 10);
        for i in 0..100u64 {
            let (fp, s) = slot(i + 1, format!("key{i}").as_bytes());
            b.apply(&[Change::Set(fp, s)]);
        }
        assert_eq!(b.usage().0, 10);
        // A key that has a slot still gets updated.
        let (fp, s) = slot(500, b"key0");
        b.apply(&[Change::Set(fp, s)]);
        assert_eq!(b.get(b"key0"), Some(s));
    }
}
