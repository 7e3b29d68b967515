//! Entry points for fuzzing the decoders of bytes read from the device (which a damaged or
//! hostile data file controls). Not part of the API: used by `fuzz/` and by tests.

#![expect(clippy::indexing_slicing, reason = "fuzz entry points assert on buffers they built")]

use crate::catalog::{decode_edits, encode_edits, Catalog, SstInfo};
use crate::device::aligned::AlignedBuf;
use crate::device::mem::MemStorage;
use crate::device::{Device, IoKind};
use crate::format::node::{Node, INDEX, LEAF};
use crate::tree::cache::Cache;
use crate::tree::pointers::rewrite_sst;
use crate::tree::sst::{decode_all, ReadCtx, Sst};
use std::ops::Bound;
use std::sync::Arc;

/// Log record decoding: must never panic; a decoded record must re-encode to the same bytes.
/// Returns whether `data` starts with a valid record.
pub fn record(data: &[u8]) -> bool {
    let valid = crate::format::record::decode(data, None).is_ok();
    if let Ok(r) = crate::format::record::decode(data, None) {
        let mut out = vec![0u8; r.len];
        let salt = halyard_codec::get_u32(data, 4).unwrap_or(0);
        crate::format::record::encode(&mut out, r.body(), salt, r.lsn, r.batch_remaining);
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
    let _ = Node::rewrite_pointers(&mut copy, 21, &|_, s, _| Some(s));
}

/// Bloom filter checks on arbitrary bytes.
pub fn bloom(data: &[u8]) {
    let _ = crate::format::bloom::verify(data);
    let _ = crate::format::bloom::may_contain(data, 0x1234_5678_9abc_def0);
}

/// An SST description and image as a backup receives them (`[u16 description length |
/// description | image]`): a description that passes [`SstInfo::check`] is read through as
/// gets, scans, compaction input and a backup's pointer rewrite read it.
pub fn sst(data: &[u8]) {
    const SEG_BITS: u32 = 16;
    const NODE: usize = 2048;
    let Some((len, rest)) = data.split_first_chunk::<2>() else {
        return;
    };
    let Some((desc, img)) = rest.split_at_checked(usize::from(u16::from_le_bytes(*len))) else {
        return;
    };
    let Ok(mut info) = SstInfo::from_bytes(desc) else {
        return;
    };
    info.seg = 1;
    if info.check(1 << SEG_BITS, NODE).is_err() || img.len() > 1 << SEG_BITS {
        return;
    }
    let dev = Arc::new(Device::new(Arc::new(MemStorage::new(SEG_BITS))));
    let mut buf = AlignedBuf::new(1 << SEG_BITS);
    buf[..img.len()].copy_from_slice(img);
    if dev.write(dev.seg_base(1), &buf, IoKind::Replication).is_err() {
        return;
    }
    let ctx = ReadCtx { dev, cache: Cache::new(1 << 20, 1024), node_bytes: NODE };
    let sst = Sst::new(info.clone());
    for key in [&b""[..], b"m", b"\xff\xff"] {
        let _ = sst.get(&ctx, key, crate::format::bloom::hash(key));
        if let Ok(leaf) = sst.leaf_for(&ctx, key) {
            let _ = sst.leaf_entries_in(&ctx, leaf, Bound::Unbounded, Bound::Unbounded, false);
        }
    }
    let _ = decode_all(&info, &buf, NODE);
    let _ = rewrite_sst(&mut buf, &info, NODE, SEG_BITS, &|_, s, _| Some(s));
    let _ = Sst::from_image(info, &buf, NODE);
}

/// Backup list decoding (a `backup-<n>` file, read from a backup directory): must never panic;
/// a list that decodes re-encodes to the same bytes.
pub fn backup_list(data: &[u8]) {
    crate::db::checkpoint::fuzz_list(data);
}
