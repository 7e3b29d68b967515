//! Entry points for fuzzing the decoders of bytes read from the device (which a damaged or
//! hostile data file controls). Not part of the API: used by `fuzz/` and by tests.

use crate::catalog::{decode_edits, encode_edits, Catalog};
use crate::format::node::{Node, INDEX, LEAF};

/// Log record decoding: must never panic; a decoded record must re-encode to the same bytes.
/// Returns whether `data` starts with a valid record.
pub fn record(data: &[u8]) -> bool {
    let valid = crate::format::record::decode(data, None).is_ok();
    if let Ok(r) = crate::format::record::decode(data, None) {
        let mut out = vec![0u8; r.len];
        let salt = crate::format::codec::get_u32(data, 4).unwrap_or(0);
        crate::format::record::encode(&mut out, r.kind, salt, r.lsn, r.key, r.value, r.batch_remaining);
        assert_eq!(&out[..], &data[..r.len]);
    }
    for _ in crate::format::record::scan(data, 0) {}
    valid
}

/// Redo record payload decoding: must never panic; a decoded list re-encodes identically.
/// Applies what decodes to a catalog, as recovery and a backup do, and checks the SSTs it
/// then describes.
pub fn edits(data: &[u8]) {
    if let Ok((region, edits)) = decode_edits(data) {
        assert_eq!(encode_edits(region, &edits), data);
        let mut catalog = Catalog::default();
        catalog.apply(region, &edits);
        let _ = catalog.check(1 << 21, 4096);
        for m in catalog.regions.values() {
            let _ = m.snapshot();
        }
    }
}

/// Node parsing as gets and scans do it, on a buffer that passed or failed its checksum.
pub fn node(data: &[u8]) {
    if data.len() < 16 {
        return;
    }
    let _ = crate::format::node::verify(data);
    let n = Node { bytes: data };
    match n.ty() {
        LEAF => {
            for i in 0..n.count().min(4096) {
                let _ = n.entry(i);
            }
            let _ = n.lower_bound(b"m");
        }
        INDEX => {
            let _ = n.child_for(b"m");
        }
        _ => {}
    }
    let mut copy = data.to_vec();
    let _ = Node::rewrite_pointers(&mut copy, 21, &|s, _| Some(s));
}

/// Bloom filter checks on arbitrary bytes.
pub fn bloom(data: &[u8]) {
    let _ = crate::format::bloom::verify(data);
    let _ = crate::format::bloom::may_contain(data, 0x1234_5678_9abc_def0);
}
