//! How big a region is and where it splits in two, from its catalog alone (the SSTs'
//! descriptors and the large log's fill): no scan, no read of the device.
//!
//! A split's halves name the parent's SSTs and large-log segments until their compactions and
//! GC move on, so a region counts an SST that lies inside its range whole, one that straddles
//! a bound half, and one outside not at all; large values count through the SSTs' pointers to
//! them, at the region's average large record size. Right after a split each half therefore
//! counts about half of the parent, and shrinks to its exact share as it is cleaned up.

use crate::catalog::{LogKind, RegionMeta, SstInfo};
use crate::db::{Db, DbInner, SizeEstimate};
use crate::error::Result;
use crate::region::Region;
use std::sync::Arc;

impl Db {
    /// Splits every region whose estimated size passes [`crate::Options::region_max_bytes`]
    /// at the key that halves it; returns the new regions' ids. The background thread does
    /// this by itself every `gc_interval_ms` when that option is set.
    pub fn split_oversized(&self) -> Result<Vec<u32>> {
        self.inner.split_oversized()
    }

    /// A region's estimated size in bytes and the key that halves it (see `db/size.rs`).
    pub fn region_size(&self, id: u32) -> Result<(u64, Option<Vec<u8>>)> {
        let meta = self.inner.sh.manifest.region(id).ok_or(crate::error::Error::NoSuchRegion(id))?;
        Ok(size_and_middle(&meta, self.inner.large_per_ptr()))
    }

    /// Where region `id` splits when its estimated size passes `max` bytes (what
    /// [`Db::split_oversized`] would do, for a caller that splits by other means: a cluster's
    /// master): its estimated size and the key, moved by [`crate::Options::split_key`]. None
    /// within `max`, while it still shares SSTs with a split sibling, or when no key inside it
    /// can be named.
    pub fn split_point(&self, id: u32, max: u64) -> Result<Option<(u64, Vec<u8>)>> {
        let found = self.split_points(&[id], max)?.pop();
        Ok(found.and_then(|(_, size, at)| Some((size, at?))))
    }

    /// The estimated size of each region of `ids` and, for those [`Db::split_point`] would
    /// split (`max` 0: none), the key: (id, size, key). The store's average large record size,
    /// which every estimate takes, is computed once.
    pub fn split_points(&self, ids: &[u32], max: u64) -> Result<Vec<SizeEstimate>> {
        let per_ptr = self.inner.large_per_ptr();
        let mut out = Vec::new();
        for &id in ids {
            let r = self.inner.get(id)?;
            let meta = self.inner.sh.manifest.region(id).ok_or(crate::error::Error::NoSuchRegion(id))?;
            let (size, at) = self.inner.split_point(&r, &meta, max, per_ptr)?;
            out.push((id, size, at));
        }
        Ok(out)
    }
}

impl DbInner {
    pub(crate) fn split_oversized(&self) -> Result<Vec<u32>> {
        let max = self.sh.opts.region_max_bytes;
        let mut new = Vec::new();
        if max == 0 {
            return Ok(new);
        }
        let regions: Vec<Arc<Region>> = self.regions.read().values().cloned().collect();
        let per_ptr = self.large_per_ptr();
        for r in regions.iter().filter(|r| !r.is_backup() && !r.is_retired() && !r.is_quiet()) {
            let Some(meta) = self.sh.manifest.region(r.id()) else { continue };
            let (size, Some(at)) = self.split_point(r, &meta, max, per_ptr)? else { continue };
            let next = self.sh.manifest.with(|c| c.regions.keys().max().copied()).unwrap_or(0);
            let Some(id) = next.checked_add(1) else { continue };
            match self.split(r.id(), &at, id, None) {
                Ok(_) => {}
                // Writes raced it (a split of a live region gives up rather than hold them):
                // the next pass tries again.
                // Or another caller took the id meanwhile.
                Err(crate::error::Error::InvalidOptions(why)) => {
                    tracing::debug!(region = r.id(), %why, "size split put off");
                    continue;
                }
                Err(crate::error::Error::RegionExists(_)) => continue,
                Err(e) => return Err(e),
            }
            tracing::info!(region = r.id(), bytes = size, new = id, "region split by size");
            new.push(id);
        }
        Ok(new)
    }

    /// The region's estimated size, and where it splits (see [`Db::split_point`]).
    fn split_point(&self, r: &Region, meta: &RegionMeta, max: u64, per_ptr: u64) -> Result<(u64, Option<Vec<u8>>)> {
        let (size, middle) = size_and_middle(meta, per_ptr);
        // A split's half whose compactions have not cleaned the other half's keys out yet
        // counts the SSTs they share by estimate (half each): it splits again only when the
        // SSTs wholly inside it pass the limit by themselves, lest the estimate alone split it
        // into a sliver. (Waiting for the clean-up instead held a loaded region's halves for
        // as long as its deepest level went uncompacted.)
        if max == 0 || size <= max || (straddles(meta) && inner_size(meta, per_ptr) <= max) {
            return Ok((size, None));
        }
        let Some(at) = middle.map_or_else(|| root_middle(r, meta), |m| Ok(Some(m)))? else { return Ok((size, None)) };
        let at = match &self.sh.opts.split_key {
            Some(f) => (f.0)(&at),
            None => at,
        };
        Ok((size, inside(meta, &at).then_some(at)))
    }

    fn large_per_ptr(&self) -> u64 {
        let seg_bytes = self.sh.dev.seg_bytes();
        self.sh.manifest.with(|c| large_per_ptr(&c.regions, seg_bytes))
    }
}

/// An SST as the size estimate sees it: first key, last key, bytes counted in the region's
/// size, bytes weighed for its middle.
type Weighed<'a> = (&'a [u8], &'a [u8], u64, u64);

/// A region's estimated logical size in bytes and the key that halves it, if the estimate
/// can name one inside the region (a key past its first); `per_ptr` is what a pointer to a
/// large value stands for ([`large_per_ptr`]). The size counts every level (but SSTs a range
/// delete hides whole). The key is the start of an SST of the level holding the most bytes
/// that best balances the bytes of every level lying wholly on each side of it, counting only
/// SSTs wholly inside the region (how one the cut crosses, or one a split's sibling still
/// shares, divides is not known); none if even that leaves less than a quarter on one side (an
/// eighth let slivers through, which their compactions then shrank): see `root_middle`.
pub(crate) fn size_and_middle(meta: &RegionMeta, per_ptr: u64) -> (u64, Option<Vec<u8>>) {
    let levels: Vec<Vec<Weighed<'_>>> = meta
        .levels
        .iter()
        .map(|ssts| {
            ssts.iter()
                .map(|s| {
                    // An SST a later range delete hides whole holds nothing live (its reclaim
                    // may not have run yet): it counts for nothing.
                    let hidden =
                        meta.range_dels.iter().any(|d| d.lsn > s.max_lsn && d.holds(&s.first_key, &s.last_key));
                    let bytes = if hidden { 0 } else { s.full_bytes + u64::from(s.large_ptrs) * per_ptr };
                    let weighed = if s.beyond(&meta.start, meta.end.as_deref()) { 0 } else { bytes };
                    (s.first_key.as_slice(), s.last_key.as_slice(), share(meta, s, bytes), weighed)
                })
                .filter(|w| w.2 > 0)
                .collect()
        })
        .collect();
    let all = || levels.iter().flatten();
    let total: u64 = all().map(|w| w.2).sum();
    let weighed: u64 = all().map(|w| w.3).sum();
    let Some(biggest) = levels.iter().max_by_key(|l| l.iter().map(|w| w.2).sum::<u64>()) else {
        return (total, None);
    };
    // The bytes wholly below a cut at `k` and wholly above it.
    let sides = |k: &[u8]| -> (u64, u64) {
        let below = all().filter(|w| w.1 < k).map(|w| w.3).sum();
        let above = all().filter(|w| w.0 >= k).map(|w| w.3).sum();
        (below, above)
    };
    let mut best: Option<(u64, &[u8])> = None;
    for &(first, ..) in biggest.iter().filter(|w| inside(meta, w.0)) {
        let (below, above) = sides(first);
        let off = below.abs_diff(above);
        if below.min(above) >= weighed / 4 && best.is_none_or(|b| off < b.0) {
            best = Some((off, first));
        }
    }
    (total, best.map(|b| b.1.to_vec()))
}

/// Where a region too few SSTs begin in (a split's halves, whose SSTs still span both)
/// divides: the middle one of the keys of its biggest SST's root node that lie inside the
/// region. One read of a node, usually cached.
fn root_middle(r: &Region, meta: &RegionMeta) -> Result<Option<Vec<u8>>> {
    let view = r.view();
    let biggest = view.version.levels.iter().flatten().max_by_key(|s| share(meta, &s.info, s.info.full_bytes));
    // (The biggest SST of any level: a level with one SST has it as its biggest anyway.)
    let Some(sst) = biggest else { return Ok(None) };
    let keys: Vec<Vec<u8>> = sst.root_keys(&r.sh().ctx)?.into_iter().filter(|k| inside(meta, k)).collect();
    Ok(keys.get(keys.len() / 2).cloned())
}

/// The estimated size of the region's SSTs that lie wholly inside its range.
fn inner_size(meta: &RegionMeta, per_ptr: u64) -> u64 {
    let inner = meta.levels.iter().flatten().filter(|s| !s.beyond(&meta.start, meta.end.as_deref()));
    inner.map(|s| s.full_bytes + u64::from(s.large_ptrs) * per_ptr).sum()
}

/// Whether an SST of the region holds keys beyond its range.
fn straddles(meta: &RegionMeta) -> bool {
    meta.levels.iter().flatten().any(|s| s.beyond(&meta.start, meta.end.as_deref()))
}

/// Whether `k` may cut the region: inside it, past its first key.
fn inside(meta: &RegionMeta, k: &[u8]) -> bool {
    k > meta.start.as_slice() && meta.end.as_deref().is_none_or(|e| k < e)
}

/// The store's average large record size: the large logs' written bytes over the SSTs'
/// pointers into them, each segment and SST counted once however many regions name it (the
/// halves of a split share them, and a half that cleaned the other's keys up still names
/// all of the segments: a per-region average would grow with every split).
pub(crate) fn large_per_ptr(regions: &std::collections::BTreeMap<u32, RegionMeta>, seg_bytes: u64) -> u64 {
    let mut segs = std::collections::BTreeMap::new();
    let mut ssts = std::collections::BTreeMap::new();
    for m in regions.values().filter(|m| !m.backup) {
        for s in m.log(LogKind::Large) {
            segs.insert(s.seg, s.written(seg_bytes));
        }
        for s in m.levels.iter().flatten() {
            ssts.insert(s.seg, u64::from(s.large_ptrs));
        }
    }
    segs.values().sum::<u64>().checked_div(ssts.values().sum()).unwrap_or(0)
}

/// The part of an SST's `bytes` a region counts: whole inside its range, half across a
/// bound, none outside.
fn share(meta: &RegionMeta, s: &SstInfo, bytes: u64) -> u64 {
    let below = s.last_key.as_slice() < meta.start.as_slice();
    let above = meta.end.as_ref().is_some_and(|e| s.first_key.as_slice() >= e.as_slice());
    if below || above {
        return 0;
    }
    if s.beyond(&meta.start, meta.end.as_deref()) {
        bytes / 2
    } else {
        bytes
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing, reason = "test code")]
    use super::*;

    fn sst(first: &str, last: &str, bytes: u64) -> SstInfo {
        SstInfo {
            stored_bytes: bytes,
            full_bytes: bytes,
            first_key: first.into(),
            last_key: last.into(),
            ..SstInfo::blank()
        }
    }

    fn meta(start: &str, end: Option<&str>, ssts: Vec<SstInfo>) -> RegionMeta {
        RegionMeta { start: start.into(), end: end.map(Into::into), levels: vec![ssts], ..RegionMeta::default() }
    }

    #[test]
    fn the_middle_halves_the_bytes_and_lies_inside() {
        let m = meta("", None, vec![sst("a", "c", 100), sst("d", "f", 100), sst("g", "i", 100), sst("j", "l", 100)]);
        assert_eq!(size_and_middle(&m, 0), (400, Some(b"g".to_vec())));
        // Weighted by bytes: the best cut leaves a side below a quarter, so none is named.
        let m = meta("", None, vec![sst("a", "c", 900), sst("d", "f", 50), sst("g", "i", 50)]);
        assert_eq!(size_and_middle(&m, 0).1, None);
        let m = meta("", None, vec![sst("a", "c", 300), sst("d", "f", 500), sst("g", "i", 200)]);
        assert_eq!(size_and_middle(&m, 0).1, Some(b"d".to_vec()));
        // One SST: no key inside to cut at.
        let m = meta("a", None, vec![sst("a", "z", 900)]);
        assert_eq!(size_and_middle(&m, 0), (900, None));
    }

    #[test]
    fn the_middle_balances_every_level_and_weighs_only_what_lies_inside() {
        // The biggest level alone would cut at d; the level above holds its bytes on the right.
        let mut m = meta("", None, vec![sst("a", "c", 400), sst("d", "f", 100), sst("g", "i", 100)]);
        m.levels.insert(0, vec![sst("x", "z", 500)]);
        assert_eq!(size_and_middle(&m, 0), (1100, Some(b"g".to_vec())));
        // An SST reaching below the region's start counts half in its size but is not weighed.
        let ssts = vec![sst("a", "e", 1000), sst("f", "h", 100), sst("i", "k", 100), sst("l", "n", 100)];
        assert_eq!(size_and_middle(&meta("d", None, ssts), 0), (800, Some(b"i".to_vec())));
    }

    #[test]
    fn a_split_half_counts_what_lies_in_its_range() {
        let ssts = vec![sst("a", "c", 100), sst("d", "h", 100), sst("i", "l", 100)];
        assert_eq!(size_and_middle(&meta("", Some("e"), ssts.clone()), 0).0, 150);
        assert_eq!(size_and_middle(&meta("e", None, ssts.clone()), 0).0, 150);
        assert_eq!(size_and_middle(&meta("m", None, ssts), 0), (0, None));
    }
}
