//! The log pointers in an SST image's leaves: rewritten through a backup's segment map, or
//! voided in the image a primary ships where they point into segments it dropped.

use crate::catalog::SstInfo;
use crate::error::{Error, Result};
use crate::format::node::Node;
use std::collections::HashSet;

/// The segment a shipped SST's pointer names when the primary no longer holds the large-log
/// segment it pointed into (a shadowed version whose value GC moved; never read). No device
/// has this many segments, so a read through it fails rather than finding other data.
pub(crate) const VOID_SEG: u32 = u32::MAX;

/// An SST image to ship, its pointers into large-log segments that `live` does not hold
/// (segment, salt) set to [`VOID_SEG`]: a backup would otherwise keep a segment for each that
/// never arrives (and a promoted backup would copy them on). The SST on disk is unchanged.
pub(crate) fn void_dead_pointers(
    used: &[u8],
    info: &SstInfo,
    nb: usize,
    seg_bits: u32,
    live: &HashSet<(u32, u32)>,
) -> Result<Vec<u8>> {
    let mut img = used.to_vec();
    let map = |large: bool, seg: u32, salt: u32| match large && !live.contains(&(seg, salt)) {
        true => Some(VOID_SEG),
        false => Some(seg),
    };
    rewrite_sst(&mut img, info, nb, seg_bits, &map)?;
    Ok(img)
}

/// Rewrites the log pointers in an SST image's leaves through `map` (index nodes hold
/// segment-relative offsets and need nothing).
pub(crate) fn rewrite_sst(
    img: &mut [u8],
    info: &SstInfo,
    nb: usize,
    seg_bits: u32,
    map: &dyn Fn(bool, u32, u32) -> Option<u32>,
) -> Result<()> {
    for l in 0..info.leaf_count as usize {
        let off = l * nb;
        let node = img
            .get_mut(off..off + nb)
            .ok_or_else(|| Error::corrupt(info.seg as u64, off as u64, "leaf past the image"))?;
        if !crate::format::node::verify(node) {
            return Err(Error::corrupt(info.seg as u64, off as u64, "node checksum mismatch"));
        }
        match Node::rewrite_pointers(node, seg_bits, map) {
            Ok(true) => {}
            Ok(false) => {
                return Err(Error::corrupt(info.seg as u64, off as u64, "pointer into an unmapped log segment"))
            }
            Err(_) => return Err(Error::corrupt(info.seg as u64, off as u64, "malformed node")),
        }
    }
    Ok(())
}
