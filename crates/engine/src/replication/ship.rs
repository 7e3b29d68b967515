//! What a replication primary offers beyond the live stream ([`crate::ShipListener`]): its
//! logs and levels as they are now, for a backup that catches up.

#![expect(clippy::indexing_slicing, reason = "lengths come from records found within the same image")]

use crate::catalog::LogKind;
use crate::catalog::{Level, SstInfo};
use crate::device::aligned::AlignedBuf;
use crate::device::IoKind;
use crate::error::{Error, Result};
use crate::format::record;
use crate::placement::{compaction, gc};
use crate::replication::Replication;

impl Replication<'_> {
    /// The segments of a region's log with their salts, oldest first (for shipping a whole
    /// log to a new backup).
    pub fn log_segments(&self, region: u32, log: LogKind) -> Result<Vec<(u32, u32)>> {
        let meta = self.db.inner.sh.manifest.region(region).ok_or(Error::NoSuchRegion(region))?;
        Ok(meta.log(log).iter().map(|s| (s.seg, s.salt)).collect())
    }

    /// Reads a whole segment image (after writing out the region's log tails, so that a
    /// live log segment is read as far as it was appended).
    pub fn read_segment(&self, region: u32, seg: u32) -> Result<Vec<u8>> {
        let h = self.db.region(region)?;
        h.region.write_out_logs()?;
        let dev = &self.db.inner.sh.dev;
        let mut buf = AlignedBuf::new(dev.seg_bytes() as usize);
        dev.read_into(dev.seg_base(seg), &mut buf, IoKind::Read)?;
        Ok(buf.to_vec())
    }

    /// The SSTs of a region per level (L1 first), as a primary would ship them to a new backup.
    pub fn level_ssts(&self, region: u32) -> Result<Vec<Vec<SstInfo>>> {
        let meta = self.db.inner.sh.manifest.region(region).ok_or(Error::NoSuchRegion(region))?;
        Ok(meta.levels)
    }
}

/// A region's whole state at one instant, for a backup that starts from nothing (catch-up):
/// ship `logs` (L0 and large segments as log bytes, sealed unless `tail`; medium segments as
/// compaction output), then `ssts`, then `edits`, which install them on the backup.
pub struct RegionSnapshot {
    /// (log, segment, salt, is the current tail, image). Tail images hold the bytes appended
    /// so far; later appends continue at their end.
    pub logs: Vec<(LogKind, u32, u32, bool, Vec<u8>)>,
    /// SSTs and their images (`info.used_bytes` long).
    pub ssts: Vec<(SstInfo, Vec<u8>)>,
    /// The edits that publish the levels, the medium log and GC accounting.
    pub edits: Vec<crate::catalog::Edit>,
}

/// The bytes of a log segment a backup may take: a sealed L0 or large segment up to its last
/// record within the seal, so that records a crash voided (beyond the recovered prefix, their
/// LSNs handed out again since) never reach a backup, which would replay them; other segments
/// whole.
fn valid_len(kind: LogKind, img: &[u8], s: &crate::catalog::LogSeg) -> usize {
    if kind == LogKind::Medium || s.sealed == u64::MAX {
        return img.len();
    }
    let (records, _) = record::scan_checked(img, s.salt);
    record::end_through(records.iter().map(|(o, r)| (*o, r.len, r.lsn)), s.sealed)
}

impl Replication<'_> {
    /// Takes a snapshot of a primary region for a new or returning backup and calls `f` with
    /// it while no write, compaction or GC of the region can run: whatever the region ships
    /// after `f` returns follows the snapshot exactly. The region's writers wait meanwhile.
    pub fn with_snapshot<T>(&self, region: u32, f: impl FnOnce(RegionSnapshot) -> T) -> Result<T> {
        use crate::catalog::Edit;
        let h = self.db.region(region)?;
        let r = &h.region;
        if r.is_backup() {
            return Err(Error::BackupRegion(region));
        }
        let _gc = gc::keep_out(r);
        // Claim every level so that no compaction starts, once the running ones finish.
        compaction::claim_all_levels(r)?;
        struct Release<'a>(&'a crate::region::Region);
        impl Drop for Release<'_> {
            fn drop(&mut self) {
                compaction::release_all_levels(self.0);
            }
        }
        let _release = Release(r);
        let mut w = r.w().lock();
        r.write_out(&mut w)?;
        let meta = r.sh().manifest.region(region).ok_or(Error::NoSuchRegion(region))?;
        let dev = &r.sh().dev;
        let tails = [w.l0.seg.map(|s| (s.0, w.l0.image().len())), w.large.seg.map(|s| (s.0, w.large.image().len()))];
        let mut logs = Vec::new();
        for kind in [LogKind::L0, LogKind::Large, LogKind::Medium] {
            for s in meta.log(kind) {
                let mut img = AlignedBuf::new(dev.seg_bytes() as usize);
                dev.read_into(dev.seg_base(s.seg), &mut img, IoKind::Read)?;
                let tail = tails.iter().flatten().find(|t| t.0 == s.seg).map(|t| t.1);
                let len = tail.unwrap_or_else(|| valid_len(kind, &img, s));
                logs.push((kind, s.seg, s.salt, tail.is_some(), img[..len].to_vec()));
            }
        }
        let mut ssts = Vec::new();
        let mut edits = vec![Edit::L1Lsn(meta.l1_lsn)];
        for (i, ssts_of_level) in meta.levels.iter().enumerate() {
            let Some(level) = Level::at_index(i) else { continue };
            for info in ssts_of_level {
                let mut img = AlignedBuf::new(info.used_bytes as usize);
                dev.read_into(dev.seg_base(info.seg), &mut img, IoKind::Read)?;
                ssts.push((info.clone(), img.to_vec()));
                edits.push(Edit::AddSst { level, sst: info.clone() });
            }
        }
        for s in meta.log(LogKind::Medium) {
            edits.push(Edit::LogAdd { log: LogKind::Medium, seg: s.seg, salt: s.salt });
            if let Some(&n) = meta.medium_ptrs.get(&s.seg) {
                edits.push(Edit::MediumPtrs { seg: s.seg, salt: s.salt, delta: n as i64 });
            }
        }
        for s in meta.log(LogKind::Large) {
            if let Some(&g) = meta.large_garbage.get(&s.seg) {
                edits.push(Edit::LargeGarbage { seg: s.seg, salt: s.salt, bytes: g });
            }
        }
        for d in &meta.range_dels {
            edits.push(Edit::AddRangeDel { start: d.start.clone(), end: d.end.clone(), lsn: d.lsn });
        }
        let out = f(RegionSnapshot { logs, ssts, edits });
        drop(w);
        Ok(out)
    }
}
