//! What a region's committed compactions found dead in its large log, for GC to trust.

use parking_lot::Mutex;
use std::collections::{HashMap, HashSet};

/// The large-log records that committed compactions found superseded (by a newer write or a
/// delete), per segment incarnation (segment, salt). Kept in memory only. GC trusts this record
/// of a segment only if this region object opened the segment itself, so that every record in
/// it was written, and every one superseded, in this process while the region was a primary
/// (not so after a restart, or for segments a backup received before its promotion, whose
/// catalog counts may include garbage it never saw), and only when its bytes equal the
/// catalog's count for the segment (a compaction adds its records just after its commit).
#[derive(Default)]
pub(crate) struct DeadRecords {
    segs: Mutex<HashMap<(u32, u32), Dead>>,
}

#[derive(Default)]
struct Dead {
    /// The region object opened the segment for its own writes.
    own: bool,
    bytes: u64,
    offsets: HashSet<u32>,
}

impl DeadRecords {
    /// Records superseded by a compaction whose edits are committed: (pointer, salt, length),
    /// counted exactly as its `LargeGarbage` edits count them.
    pub(crate) fn add(&self, seg_bits: u32, records: &[(u64, u32, u32)]) {
        if records.is_empty() {
            return;
        }
        let mut g = self.segs.lock();
        for &(ptr, salt, len) in records {
            let d = g.entry(((ptr >> seg_bits) as u32, salt)).or_default();
            d.bytes += len as u64;
            d.offsets.insert((ptr & ((1u64 << seg_bits) - 1)) as u32);
        }
    }

    /// A large-log segment this region object opened for its own writes.
    pub(crate) fn opened(&self, seg: u32, salt: u32) {
        self.segs.lock().entry((seg, salt)).or_default().own = true;
    }

    /// Whether the segment's dead records can be trusted: it is the region's own and they
    /// account for all of its `garbage` bytes.
    pub(crate) fn complete(&self, seg: u32, salt: u32, garbage: u64) -> bool {
        self.segs.lock().get(&(seg, salt)).is_some_and(|d| d.own && d.bytes == garbage)
    }

    pub(crate) fn is_dead(&self, seg: u32, salt: u32, off: u32) -> bool {
        self.segs.lock().get(&(seg, salt)).is_some_and(|d| d.offsets.contains(&off))
    }

    pub(crate) fn forget(&self, seg: u32, salt: u32) {
        self.segs.lock().remove(&(seg, salt));
    }
}
