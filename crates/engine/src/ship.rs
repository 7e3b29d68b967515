//! What a replication backup needs from the engine (DESIGN.md §3): install shipped segments
//! with their log pointers rewritten through a segment map, install shipped edits, and take
//! whole replicated log segments. A region created with `Db::create_backup_region` keeps no
//! L0 and never compacts.

use crate::aligned::{align_up, AlignedBuf, ALIGN};
use crate::alloc::Purpose;
use crate::catalog::{Edit, SstInfo};
use crate::db::{Db, RegionHandle};
use crate::device::IoKind;
use crate::error::{Error, Result};
use crate::logtail::LogKind;
use crate::node::Node;
use crate::sst::Sst;
use crate::view::{Version, View};
use std::sync::Arc;

/// A segment number translation (primary segment -> local segment).
pub type SegmentMap<'a> = &'a dyn Fn(u32) -> Option<u32>;

/// A log segment translation ((primary segment, salt of the records) -> local segment). The
/// salt tells incarnations of a reused primary segment apart.
pub type LogMap<'a> = &'a dyn Fn(u32, u32) -> Option<u32>;

impl Db {
    /// Reserves a local segment for a shipped segment (its contents arrive later through
    /// [`Db::write_segment`]). An unused reservation is freed by the next restart.
    pub fn alloc_segment(&self) -> Result<u32> {
        self.inner.sh.alloc.alloc(Purpose::Background)
    }

    /// Writes a segment image (a shipped SST after [`Db::rewrite_sst`], a medium run, or a
    /// replicated log segment) into local segment `seg`.
    pub fn write_segment(&self, seg: u32, bytes: &[u8]) -> Result<()> {
        let dev = &self.inner.sh.dev;
        if bytes.len() as u64 > dev.seg_bytes() {
            return Err(Error::InvalidOptions("segment image larger than a segment".into()));
        }
        let mut buf = AlignedBuf::new(align_up(bytes.len(), ALIGN));
        buf[..bytes.len()].copy_from_slice(bytes);
        dev.write(dev.seg_base(seg), &buf, IoKind::Compaction)?;
        dev.sync()
    }

    /// Rewrites the log pointers in a shipped SST image's leaves through `map`
    /// (index nodes hold segment-relative offsets and need nothing). A pointer into a
    /// segment the map lacks is an error: the caller maps medium segments it has not seen
    /// yet to freshly reserved ones (`Db::alloc_segment`) before calling this.
    pub fn rewrite_sst(&self, img: &mut [u8], info: &SstInfo, map: LogMap<'_>) -> Result<()> {
        let nb = self.inner.sh.opts.node_bytes;
        let bits = self.inner.sh.dev.seg_bits();
        for l in 0..info.leaf_count as usize {
            let off = l * nb;
            let node = img
                .get_mut(off..off + nb)
                .ok_or_else(|| Error::corrupt(info.seg as u64, off as u64, "leaf past the image"))?;
            if !crate::node::verify(node) {
                return Err(Error::corrupt(info.seg as u64, off as u64, "node checksum mismatch"));
            }
            match Node::rewrite_pointers(node, bits, map) {
                Ok(true) => {}
                Ok(false) => {
                    return Err(Error::corrupt(
                        info.seg as u64,
                        off as u64,
                        "pointer into a segment missing from the log map",
                    ))
                }
                Err(_) => return Err(Error::corrupt(info.seg as u64, off as u64, "malformed node")),
            }
        }
        Ok(())
    }

    /// Translates shipped edits through `map`, commits them to a backup region atomically,
    /// and installs the new levels. Edits about the primary's L0 log do not apply to a backup.
    pub fn install_edits(&self, region: u32, edits: &[Edit], map: SegmentMap<'_>) -> Result<()> {
        let h = self.region(region)?;
        let r = &h.region;
        if !r.backup {
            return Err(Error::InvalidOptions(format!("region {region} is not a backup")));
        }
        let tr = |s: u32| {
            map(s).ok_or_else(|| Error::corrupt(s as u64, 0, "shipped edit names a segment missing from the map"))
        };
        let mut local = Vec::with_capacity(edits.len());
        for e in edits {
            local.push(match e {
                Edit::AddSst { level, sst } => {
                    Edit::AddSst { level: *level, sst: SstInfo { seg: tr(sst.seg)?, ..sst.clone() } }
                }
                Edit::RemoveSst { level, seg } => Edit::RemoveSst { level: *level, seg: tr(*seg)? },
                Edit::LogAdd { log: LogKind::L0, .. }
                | Edit::LogRemove { log: LogKind::L0, .. }
                | Edit::LogSeal { .. } => continue,
                Edit::LogAdd { log, seg, salt } => Edit::LogAdd { log: *log, seg: tr(*seg)?, salt: *salt },
                Edit::LogRemove { log, seg } => Edit::LogRemove { log: *log, seg: tr(*seg)? },
                Edit::MediumPtrs { seg, salt, delta } => {
                    Edit::MediumPtrs { seg: tr(*seg)?, salt: *salt, delta: *delta }
                }
                Edit::LargeGarbage { seg, salt, bytes } => {
                    Edit::LargeGarbage { seg: tr(*seg)?, salt: *salt, bytes: *bytes }
                }
                Edit::L1Lsn(l) => Edit::L1Lsn(*l),
                Edit::CreateRegion { .. } => continue,
            });
        }
        let sh = &r.sh;
        let freed = match sh.manifest.commit(r.id, &local) {
            Ok(f) => f,
            Err(e) => return sh.fail(e),
        };
        self.reload_levels(&h, freed);
        Ok(())
    }

    /// Adds a replicated log segment (already written with [`Db::write_segment`]) to a backup
    /// region's log.
    pub fn install_log_segment(&self, region: u32, log: LogKind, seg: u32, salt: u32) -> Result<()> {
        let h = self.region(region)?;
        let sh = &h.region.sh;
        if let Err(e) = sh.manifest.commit(region, &[Edit::LogAdd { log, seg, salt }]) {
            return sh.fail(e);
        }
        Ok(())
    }

    /// The segments of a region's log with their salts, oldest first (for shipping a whole
    /// log to a new backup).
    pub fn log_segments(&self, region: u32, log: LogKind) -> Result<Vec<(u32, u32)>> {
        let meta = self.inner.sh.manifest.region(region).ok_or(Error::NoSuchRegion(region))?;
        Ok(meta.logs[log as usize].iter().map(|s| (s.seg, s.salt)).collect())
    }

    /// Reads a whole segment image (after writing out the region's log tails, so that a
    /// live log segment is read as far as it was appended).
    pub fn read_segment(&self, region: u32, seg: u32) -> Result<Vec<u8>> {
        let h = self.region(region)?;
        {
            let mut w = h.region.w.lock();
            h.region.write_out(&mut w)?;
        }
        let dev = &self.inner.sh.dev;
        let mut buf = AlignedBuf::new(dev.seg_bytes() as usize);
        dev.read_into(dev.seg_base(seg), &mut buf, IoKind::Read)?;
        Ok(buf.to_vec())
    }

    /// The SSTs of a region per level (L1 first), as a primary would ship them to a new backup.
    pub fn level_ssts(&self, region: u32) -> Result<Vec<Vec<SstInfo>>> {
        let meta = self.inner.sh.manifest.region(region).ok_or(Error::NoSuchRegion(region))?;
        Ok(meta.levels)
    }

    fn reload_levels(&self, h: &RegionHandle, freed: Vec<u32>) {
        let r = &h.region;
        let Some(meta) = r.sh.manifest.region(r.id) else {
            return;
        };
        r.install(
            |v| {
                let old: std::collections::HashMap<u32, Arc<Sst>> =
                    v.version.levels.iter().flatten().map(|s| (s.info.seg, s.clone())).collect();
                let levels = meta
                    .levels
                    .iter()
                    .map(|l| {
                        l.iter()
                            .map(|i| {
                                old.get(&i.seg)
                                    .filter(|s| s.info == *i)
                                    .cloned()
                                    .unwrap_or_else(|| Arc::new(Sst::new(i.clone())))
                            })
                            .collect()
                    })
                    .collect();
                View::new(v.mem.clone(), v.imm.clone(), Arc::new(Version { levels }), r.sh.alloc.clone())
            },
            freed,
        );
    }
}
