//! The row cache (KV-Tandem): values of single keys read from the levels, kept in the same
//! byte budget as nodes and log values. Under skewed point reads it holds many more hot keys
//! per byte than whole 8 KiB leaves do, and a hit needs no index walk and no log read.
//!
//! Validity: a row is only consulted after L0 missed the key, and L0 holds every write newer
//! than the levels. A write leaves L0 only through an L0->L1 compaction, which first bumps the
//! region's row epoch and then replaces (with the table's value) or removes the rows of every
//! key it moves, before the new L1 is visible. A reader takes the epoch before its view and inserts its row only if the epoch has
//! not moved, checked and inserted under a gate the bump takes exclusively: a row is either in
//! place before the bump (and then removed with the others) or never inserted, so a value read
//! from an older view never outlives the compaction that replaced it. Snapshot reads and
//! backup regions do not use it.

/// Cache key of `key` in the region object `uid`. Bit 127 clear and bit 126 set: node keys
/// set bit 127 and log value keys leave bits 96.. clear, so the three never meet.
pub(crate) fn row_key(uid: u64, key: &[u8]) -> u128 {
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    h.update(&uid.to_le_bytes());
    h.update(key);
    (h.digest128() & ((1u128 << 126) - 1)) | (1u128 << 126)
}

/// A cached row: the key (to rule out hash collisions) and the value.
pub(crate) fn encode(key: &[u8], value: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(2 + key.len() + value.len());
    v.extend_from_slice(&(key.len() as u16).to_le_bytes());
    v.extend_from_slice(key);
    v.extend_from_slice(value);
    v
}

/// The value of a cached row, if it is `key`'s.
pub(crate) fn value_of<'a>(row: &'a [u8], key: &[u8]) -> Option<&'a [u8]> {
    let n = u16::from_le_bytes([*row.first()?, *row.get(1)?]) as usize;
    (row.get(2..2 + n)? == key).then(|| row.get(2 + n..)).flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_hold_their_key() {
        let r = encode(b"key", b"value");
        assert_eq!(value_of(&r, b"key"), Some(&b"value"[..]));
        assert_eq!(value_of(&r, b"kez"), None);
        assert_eq!(value_of(&r, b"ke"), None);
        assert_eq!(value_of(&[1], b""), None);
    }

    #[test]
    fn row_keys_differ_by_region_object() {
        assert_ne!(row_key(1, b"k"), row_key(2, b"k"));
        assert_eq!(row_key(1, b"k") >> 126, 1);
    }
}
