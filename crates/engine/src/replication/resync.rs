//! Incremental catch-up (docs/design.md §3): a backup that returns to its primary (a restart,
//! a lost connection) reports what it holds, and the primary's copy leaves out the segments
//! the backup holds identically. Log segments are compared by a digest of their records
//! (so that a segment a primary continued after losing records is never taken for the
//! backup's longer copy), SSTs by their description, which names their key range and LSNs.
//!
//! On the backup, [`Replication::resync_backup`] replaces the reset of a full copy: it empties
//! the region's levels and logs but keeps the segments the primary still holds, under their map
//! entries; kept L0 and large segments rejoin their logs in the primary's order
//! ([`Replication::backup_keep_log`]), kept SSTs and medium segments by the copy's last edits.

use crate::catalog::{Edit, LogKind, MapKind, RegionMeta, SstInfo};
use crate::device::aligned::AlignedBuf;
use crate::error::{Error, Result};
use crate::format::record;
use crate::replication::Replication;
use std::collections::{BTreeSet, HashMap, HashSet};

/// The level of an SST in an [`Inventory`] that an interrupted copy wrote but no edit has
/// placed yet: it matches the SST at any level.
pub const ANY_LEVEL: u8 = u8::MAX;

/// What a backup region holds, as its primary names it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Inventory {
    /// Log segments held whole: (primary segment, salt, [`log_digest`] of the records).
    pub logs: Vec<(u32, u32, u64)>,
    /// SSTs installed: (level index, primary segment, [`SstInfo::digest`]).
    pub ssts: Vec<(u8, u32, u64)>,
}

impl Inventory {
    /// Whether the backup holds nothing worth keeping.
    pub fn is_empty(&self) -> bool {
        self.logs.is_empty() && self.ssts.is_empty()
    }
}

/// A digest of the records at the start of a log segment image (up to the first torn or
/// foreign record): equal on a primary and a backup exactly when they hold the same records.
pub fn log_digest(img: &[u8], salt: u32) -> u64 {
    let (records, _) = record::scan_checked(img, salt);
    let end = records.last().map_or(0, |(o, r)| o + r.len);
    xxhash_rust::xxh3::xxh3_64(img.get(..end).unwrap_or_default())
}

impl Replication<'_> {
    /// What a backup region holds, for its primary to leave out of a copy. Reads every log
    /// segment of the region (local reads, to spare the network).
    pub fn backup_inventory(&self, region: u32) -> Result<Inventory> {
        let sh = &self.db.inner.sh;
        let meta = sh.manifest.region(region).ok_or(Error::NoSuchRegion(region))?;
        let mut inv = Inventory::default();
        let by_local: HashMap<(u32, u32), u32> = meta.log_map.iter().map(|(&(p, salt), &l)| ((l, salt), p)).collect();
        let primary_of_log = |local: u32, salt: u32| by_local.get(&(local, salt)).copied();
        let mut logs: Vec<(u32, u32, u32)> = Vec::new();
        for kind in [LogKind::L0, LogKind::Large, LogKind::Medium] {
            logs.extend(meta.log(kind).iter().filter_map(|s| Some((primary_of_log(s.seg, s.salt)?, s.salt, s.seg))));
        }
        // What an interrupted copy already wrote (no edit names it yet): medium segments, SSTs
        // of any level, and the log segments SSTs point into (those partly, so they differ).
        let h = self.backup_region(region)?;
        {
            let res = h.region.backup_state().reserved.lock();
            logs.extend(res.log.iter().map(|(&(p, salt), &l)| (p, salt, l)));
            for (&p, _) in res.index.iter() {
                if let Some(&d) = res.index_digest.get(&p) {
                    inv.ssts.push((ANY_LEVEL, p, d));
                }
            }
        }
        let mut img = AlignedBuf::new(sh.dev.seg_bytes() as usize);
        for (p, salt, local) in logs {
            sh.dev.read_into(sh.dev.seg_base(local), &mut img, crate::device::IoKind::Replication)?;
            inv.logs.push((p, salt, log_digest(&img, salt)));
        }
        let sst_primary: HashMap<u32, u32> = meta.index_map.iter().map(|(&p, &l)| (l, p)).collect();
        for (i, ssts) in meta.levels.iter().enumerate() {
            for s in ssts {
                let Some(&p) = sst_primary.get(&s.seg) else { continue };
                inv.ssts.push((i as u8, p, SstInfo { seg: p, ..s.clone() }.digest()));
            }
        }
        Ok(inv)
    }

    /// A digest of a region's levels and range deletes as its primary names them (every SST's
    /// level and [`SstInfo::digest`]): a primary's own; a Send-Index backup's through its map,
    /// None when one of its SSTs has no primary segment. A backup and its primary have equal
    /// digests exactly when their levels hold the same SSTs: a backup checks it after a Remap,
    /// since the old primary may have shipped an edit to some backups and died (or been fenced)
    /// before the others got it, and later edits would name SSTs the copies do not share.
    pub fn levels_digest(&self, region: u32) -> Result<Option<u64>> {
        let h = self.db.region(region)?;
        let meta = self.db.inner.sh.manifest.region(region).ok_or(Error::NoSuchRegion(region))?;
        let backup = h.region.is_backup();
        let sst_primary: HashMap<u32, u32> = meta.index_map.iter().map(|(&p, &l)| (l, p)).collect();
        let mut hash = xxhash_rust::xxh3::Xxh3::new();
        for (i, ssts) in meta.levels.iter().enumerate() {
            for s in ssts {
                let seg = match (backup, sst_primary.get(&s.seg)) {
                    (false, _) => s.seg,
                    (true, Some(&p)) => p,
                    (true, None) => return Ok(None),
                };
                hash.update(&[i as u8]);
                hash.update(&SstInfo { seg, ..s.clone() }.digest().to_le_bytes());
            }
        }
        for d in &meta.range_dels {
            for part in [&d.start, &d.end] {
                hash.update(&(part.len() as u32).to_le_bytes());
                hash.update(part);
            }
            hash.update(&d.lsn.to_le_bytes());
        }
        Ok(Some(hash.digest()))
    }

    /// Empties a backup region for an incremental copy: every SST, log segment and range
    /// delete leaves the catalog, but the segments `keep` names stay, their map entries
    /// re-keyed to the primary's segments, for the copy to put back (kept log segments keep the
    /// local segments any kept SST points into).
    pub fn resync_backup(&self, region: u32, keep: &Keep) -> Result<()> {
        let h = self.backup_region(region)?;
        let r = &h.region;
        let sh = &r.sh();
        let meta = sh.manifest.region(region).ok_or(Error::NoSuchRegion(region))?;
        let mut edits = super::backup::removal_edits(&meta);
        for &(primary, salt) in meta.log_map.keys() {
            edits.push(Edit::Unmap { kind: MapKind::Log, primary, salt });
        }
        for &primary in meta.index_map.keys() {
            edits.push(Edit::Unmap { kind: MapKind::Index, primary, salt: 0 });
        }
        // Segments an interrupted copy wrote (reserved: no edit names them yet) are kept the
        // same way; the reservations end.
        let (res_log, res_index): (HashMap<(u32, u32), u32>, HashMap<u32, u32>) = {
            let mut res = r.backup_state().reserved.lock();
            res.index_digest.clear();
            (res.log.drain().collect(), res.index.drain().collect())
        };
        // Mapped again in the same commit: those segments stay (see `Catalog::apply`).
        for &(key, salt, primary) in &keep.logs {
            if let Some(&local) = meta.log_map.get(&(key, salt)).or_else(|| res_log.get(&(key, salt))) {
                edits.push(Edit::Map { kind: MapKind::Log, primary, salt, local });
            }
        }
        for &(key, primary) in &keep.ssts {
            if let Some(&local) = meta.index_map.get(&key).or_else(|| res_index.get(&key)) {
                edits.push(Edit::Map { kind: MapKind::Index, primary, salt: 0, local });
            }
        }
        let stale: Vec<u32> = res_log.into_values().chain(res_index.into_values()).collect();
        let freed = match sh.manifest.commit(region, &edits) {
            Ok(f) => f,
            Err(e) => return sh.fail(e),
        };
        self.reload_levels(&h, freed);
        let mut in_use = BTreeSet::new();
        sh.manifest.with(|c| c.regions.values().for_each(|m: &RegionMeta| m.segments(&mut in_use)));
        for l in stale.into_iter().filter(|l| !in_use.contains(l)) {
            sh.alloc.release(l);
        }
        Ok(())
    }

    /// Makes a region this store led a backup region that keeps what it holds, for an
    /// incremental copy from the region's new primary: each of its log segments and SSTs is
    /// mapped to itself (the new primary's maps translate them), and its L0 in memory is
    /// dropped (its records are in its L0 log). Waits for the region's running compaction and
    /// GC; its writes must have stopped.
    pub fn demote_keeping(&self, region: u32) -> Result<()> {
        let h = self.db.region(region)?;
        if h.region.is_backup() {
            return Ok(());
        }
        let r = &h.region;
        let sh = r.sh().clone();
        let _gc = crate::placement::gc::keep_out(r);
        // Claimed for good: this region object is about to be replaced.
        crate::placement::compaction::claim_all_levels(r)?;
        let mut w = r.w().lock();
        r.write_out(&mut w)?;
        let meta = sh.manifest.region(region).ok_or(Error::NoSuchRegion(region))?;
        let mut edits = Vec::new();
        for &(primary, salt) in meta.log_map.keys() {
            edits.push(Edit::Unmap { kind: MapKind::Log, primary, salt });
        }
        for &primary in meta.index_map.keys() {
            edits.push(Edit::Unmap { kind: MapKind::Index, primary, salt: 0 });
        }
        for s in meta.logs.iter().flatten() {
            edits.push(Edit::Map { kind: MapKind::Log, primary: s.seg, salt: s.salt, local: s.seg });
        }
        for s in meta.levels.iter().flatten() {
            edits.push(Edit::Map { kind: MapKind::Index, primary: s.seg, salt: 0, local: s.seg });
        }
        edits.push(Edit::CreateRegion { start: meta.start.clone(), end: meta.end.clone(), backup: true });
        if let Err(e) = sh.manifest.commit(region, &edits) {
            return sh.fail(e);
        }
        // Its log segments may be written again in place by the new primary's copy (records
        // of its own that no backup received are replaced): no value read from them may stay
        // cached for when it leads again.
        let segs: HashSet<(u32, u32)> = meta.logs.iter().flatten().map(|s| (s.seg, s.salt)).collect();
        sh.ctx.cache.forget_values(&segs, sh.dev.seg_bits());
        let meta = sh.manifest.region(region).ok_or(Error::NoSuchRegion(region))?;
        let fresh = std::sync::Arc::new(crate::region::Region::new(
            region,
            &meta,
            sh.clone(),
            crate::tree::memtable::Memtable::new(),
            1,
        ));
        self.db.replace_region(fresh);
        drop(w);
        Ok(())
    }

    /// Puts back into its log a segment a backup kept through [`Self::resync_backup`] and the
    /// primary found identical: an incremental copy's stand-in for the segment's bytes.
    pub fn backup_keep_log(&self, region: u32, log: LogKind, primary: u32, salt: u32) -> Result<()> {
        let h = self.backup_region(region)?;
        let sh = &h.region.sh();
        sh.check()?;
        let meta = sh.manifest.region(region).ok_or(Error::NoSuchRegion(region))?;
        let Some(&local) = meta.log_map.get(&(primary, salt)) else {
            let what = format!(
                "the primary names {log:?} log segment {primary} (salt {salt}) kept, but this backup does not hold it"
            );
            return Err(Error::corrupt(u64::from(primary), 0, what));
        };
        if log == LogKind::Medium || meta.log(log).iter().any(|s| s.seg == local) {
            return Ok(());
        }
        if let Err(e) = sh.manifest.commit(region, &[Edit::LogAdd { log, seg: local, salt }]) {
            return sh.fail(e);
        }
        Ok(())
    }
}

/// What an incremental copy's backup keeps ([`Replication::resync_backup`]). A key is how the
/// backup names a segment: the primary's own number, or, on a backup that was the region's
/// primary before (its copy was its own store), the number the primary's maps translate.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Keep {
    /// (key, salt, primary segment) of every log segment of the copy.
    pub logs: Vec<(u32, u32, u32)>,
    /// (key, primary segment) of the SSTs the backup holds identically.
    pub ssts: Vec<(u32, u32)>,
}

/// What the backup holds identically, in the primary's numbering.
#[derive(Default)]
pub(crate) struct Held {
    /// Log segments `(segment, salt)` with the backup's digests.
    pub(crate) logs: HashMap<(u32, u32), u64>,
    /// SSTs (segments).
    pub(crate) ssts: HashSet<u32>,
}

/// Matches a backup's inventory against a primary's region `meta` (its levels, its log
/// segments `logs` and its own maps from the segments of the primary it was a backup of).
pub(crate) fn plan(meta: &RegionMeta, logs: &[(u32, u32)], inv: &Inventory) -> (Held, Keep) {
    let (mut held, mut keep) = (Held::default(), Keep::default());
    let ours: HashSet<(u32, u32)> = logs.iter().copied().collect();
    let old_of: HashMap<(u32, u32), u32> = meta.log_map.iter().map(|(&(p, salt), &l)| ((l, salt), p)).collect();
    for &(seg, salt) in logs {
        keep.logs.push((seg, salt, seg));
        if let Some(&old) = old_of.get(&(seg, salt)) {
            keep.logs.push((old, salt, seg));
        }
    }
    for &(key, salt, d) in &inv.logs {
        let seg = match ours.contains(&(key, salt)) {
            true => Some(key),
            false => meta.log_map.get(&(key, salt)).copied().filter(|s| ours.contains(&(*s, salt))),
        };
        if let Some(seg) = seg {
            held.logs.insert((seg, salt), d);
        }
    }
    let inv_ssts: HashSet<(u8, u32, u64)> = inv.ssts.iter().copied().collect();
    let old_sst: HashMap<u32, u32> = meta.index_map.iter().map(|(&p, &l)| (l, p)).collect();
    for (i, ssts) in meta.levels.iter().enumerate() {
        for s in ssts {
            let level = i as u8;
            let mut keys = vec![s.seg];
            keys.extend(old_sst.get(&s.seg));
            let holds = |k: u32| {
                let d = SstInfo { seg: k, ..s.clone() }.digest();
                inv_ssts.contains(&(level, k, d)) || inv_ssts.contains(&(ANY_LEVEL, k, d))
            };
            let key = keys.into_iter().find(|&k| holds(k));
            if let Some(key) = key {
                held.ssts.insert(s.seg);
                keep.ssts.push((key, s.seg));
            }
        }
    }
    (held, keep)
}
