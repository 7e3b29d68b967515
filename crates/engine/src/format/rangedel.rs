//! Range tombstones: a delete of every key in `[start, end)` at one LSN.
//!
//! A version of a key is hidden by a tombstone that covers the key and is newer than it
//! (`version.lsn < tombstone.lsn`) and that the reader's snapshot sees (`tombstone.lsn <=
//! snapshot`). Comparing LSNs rather than positions in the tree keeps this true wherever the
//! version and the tombstone are: an L0 table, a level, the catalog.

/// One range delete.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct RangeDel {
    /// First key deleted.
    pub start: Vec<u8>,
    /// First key past the range (greater than `start`).
    pub end: Vec<u8>,
    /// LSN of the delete.
    pub lsn: u64,
}

impl RangeDel {
    pub(crate) fn covers(&self, key: &[u8]) -> bool {
        key >= self.start.as_slice() && key < self.end.as_slice()
    }

    /// Whether the range holds every key of `[first, last]`.
    pub(crate) fn holds(&self, first: &[u8], last: &[u8]) -> bool {
        first >= self.start.as_slice() && last < self.end.as_slice()
    }

    /// Whether the range shares a key with `[first, last]`.
    pub(crate) fn overlaps(&self, first: &[u8], last: &[u8]) -> bool {
        last >= self.start.as_slice() && first < self.end.as_slice()
    }
}

/// Adds `d` to `dels` (ordered by LSN), unless one of its LSN is there.
pub(crate) fn add(dels: &mut Vec<RangeDel>, d: RangeDel) {
    if !dels.iter().any(|x| x.lsn == d.lsn) {
        let at = dels.partition_point(|x| x.lsn < d.lsn);
        dels.insert(at, d);
    }
}

/// The LSN of the newest tombstone of `dels` that covers `key` and that a reader at `snap`
/// sees; 0 for none.
pub(crate) fn deleted_at(dels: &[RangeDel], key: &[u8], snap: u64) -> u64 {
    dels.iter().filter(|d| d.lsn <= snap && d.covers(key)).map(|d| d.lsn).max().unwrap_or(0)
}

/// Whether a version of `key` written at `lsn` is hidden from a reader at `snap`.
pub(crate) fn hides(dels: &[RangeDel], key: &[u8], lsn: u64, snap: u64) -> bool {
    dels.iter().any(|d| d.lsn > lsn && d.lsn <= snap && d.covers(key))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn del(s: &[u8], e: &[u8], lsn: u64) -> RangeDel {
        RangeDel { start: s.to_vec(), end: e.to_vec(), lsn }
    }

    #[test]
    fn a_tombstone_hides_older_versions_of_the_keys_it_covers_from_readers_that_see_it() {
        let dels = [del(b"b", b"d", 10), del(b"c", b"e", 20)];
        assert!(hides(&dels, b"b", 9, 10));
        assert!(!hides(&dels, b"b", 9, 9), "a snapshot before the delete");
        assert!(!hides(&dels, b"b", 11, 30), "a newer version");
        assert!(!hides(&dels, b"d", 9, 10), "end is exclusive");
        assert!(hides(&dels, b"d", 15, 20));
        assert_eq!(deleted_at(&dels, b"c", 30), 20);
        assert_eq!(deleted_at(&dels, b"c", 19), 10);
        assert_eq!(deleted_at(&dels, b"a", 30), 0);
        assert!(dels[0].holds(b"b", b"cz") && !dels[0].holds(b"b", b"d"));
        assert!(dels[0].overlaps(b"a", b"b") && !dels[0].overlaps(b"d", b"e"));
    }
}
