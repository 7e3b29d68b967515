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

    /// The bytes a region takes on the device: its SSTs' used bytes and its log segments
    /// (counted whole). 0: the region holds nothing.
    pub fn region_bytes(&self, region: u32) -> Result<u64> {
        let meta = self.db.inner.sh.manifest.region(region).ok_or(Error::NoSuchRegion(region))?;
        let ssts: u64 = meta.levels.iter().flatten().map(|s| u64::from(s.used_bytes)).sum();
        let segs = meta.logs.iter().map(|l| l.len() as u64).sum::<u64>();
        Ok(ssts + segs * self.db.inner.sh.dev.seg_bytes())
    }

    /// The SSTs of a region per level (L1 first), as a primary would ship them to a new backup.
    pub fn level_ssts(&self, region: u32) -> Result<Vec<Vec<SstInfo>>> {
        let meta = self.db.inner.sh.manifest.region(region).ok_or(Error::NoSuchRegion(region))?;
        Ok(meta.levels)
    }
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

/// A region's state captured at one instant for a backup that starts from nothing (a full
/// copy), read segment by segment afterwards while the region goes on. The allocator stays
/// pinned while the copy lives, so no segment it names is reused before it is read; the log
/// tails' contents at the capture are held in memory (later appends are not part of it).
///
/// Ship its pieces in order ([`RegionCopy::read`]: L0 and large segments as log bytes, sealed
/// unless a tail; medium segments as compaction output; then SSTs), then [`RegionCopy::edits`],
/// which install them on the backup.
pub struct RegionCopy {
    /// The last LSN the copy holds.
    pub lsn: u64,
    /// How long the capture held the region's writers (its write lock).
    pub paused: std::time::Duration,
    pieces: Vec<Piece>,
    edits: Vec<crate::catalog::Edit>,
    /// An incremental copy: what the backup holds.
    held: super::resync::Held,
    /// The backup takes segments by their names on a storage both stores share.
    by_name: bool,
    /// The region's catalog entry at the capture.
    meta: crate::catalog::RegionMeta,
    /// Its large-log segments (segment, salt): pointers elsewhere are voided in shipped SSTs.
    large_live: std::collections::HashSet<(u32, u32)>,
    dev: std::sync::Arc<crate::device::Device>,
    node_bytes: usize,
    _pin: crate::device::alloc::Pin,
}

/// One segment of a [`RegionCopy`], not read yet.
enum Piece {
    Log { kind: LogKind, seg: crate::catalog::LogSeg, tail: Option<Vec<u8>> },
    Sst(SstInfo),
}

/// One segment of a [`RegionCopy`] as read.
pub enum CopyImage {
    /// A log segment: (log, segment, salt, is a tail, image). Tail images hold the bytes
    /// appended up to the capture; later appends continue at their end.
    Log(LogKind, u32, u32, bool, Vec<u8>),
    /// An SST and its image (`info.used_bytes` long).
    Sst(SstInfo, Vec<u8>),
    /// A segment the backup holds identically (an incremental copy), `bytes` long: a log
    /// segment (`Some((log, segment, salt))`; an L0 or large one rejoins its log on the backup
    /// through [`Replication::backup_keep_log`]) or an SST (None; the last edits install it).
    Held {
        /// The log segment, or None for an SST.
        log: Option<(LogKind, u32, u32)>,
        /// Its size.
        bytes: u64,
    },
    /// A segment the backup copies through the storage both stores share (storage nodes),
    /// by its name there ([`RegionCopy::by_name`]): none of its bytes are read here.
    Named {
        /// What the segment is.
        piece: NamedPiece,
        /// Its size.
        bytes: u64,
        /// Its name on the storage.
        name: Vec<u8>,
    },
}

/// What a [`CopyImage::Named`] segment is.
pub enum NamedPiece {
    /// A log segment (log, segment, salt, valid): its records lie in its first `valid` bytes,
    /// and what follows them (records a crash voided) is cleared on the backup.
    Log(LogKind, u32, u32, u32),
    /// An SST holding no log pointers (its image is the same on the backup).
    Sst(SstInfo),
}

impl RegionCopy {
    /// How many segments the copy holds.
    pub fn pieces(&self) -> usize {
        self.pieces.len()
    }

    /// Bytes the copy's images add up to, at most (a sealed L0 or large segment is counted by
    /// its fill and sent up to its last valid record; a medium segment is sent whole).
    pub fn total_bytes(&self) -> u64 {
        let seg_bytes = self.dev.seg_bytes();
        self.pieces
            .iter()
            .map(|p| match p {
                Piece::Log { tail: Some(t), .. } => t.len() as u64,
                Piece::Log { kind: LogKind::Medium, .. } => seg_bytes,
                Piece::Log { seg, .. } => seg.written(seg_bytes),
                Piece::Sst(info) => u64::from(info.used_bytes),
            })
            .sum()
    }

    /// Whether the region never held anything (nothing to copy).
    pub fn is_empty(&self) -> bool {
        self.lsn == 0 && !self.pieces.iter().any(|p| matches!(p, Piece::Sst(_)))
    }

    /// Lets the copy name segments instead of reading them, for a backup whose storage can
    /// take them so ([`CopyImage::Named`]; where this store's storage names none, nothing
    /// changes). Log segments a crash cut, tails, SSTs pointing into logs (the backup rewrites
    /// their pointers) and what an incremental copy compares are still read.
    pub fn by_name(&mut self, yes: bool) {
        self.by_name = yes;
    }

    /// Reads piece `i` (0-based, in shipping order) from the device.
    pub fn read(&self, i: usize) -> Result<CopyImage> {
        let Some(p) = self.pieces.get(i) else {
            return Err(Error::InvalidOptions(format!("a copy of {} pieces has no piece {i}", self.pieces.len())));
        };
        if let Some(named) = self.named(p) {
            return Ok(named);
        }
        let dev = &self.dev;
        match p {
            Piece::Log { kind, seg, tail: Some(t) } => Ok(CopyImage::Log(*kind, seg.seg, seg.salt, true, t.clone())),
            Piece::Log { kind, seg, tail: None } => {
                let mut img = AlignedBuf::new(dev.seg_bytes() as usize);
                dev.read_into(dev.seg_base(seg.seg), &mut img, IoKind::Replication)?;
                let len = valid_len(*kind, &img, seg);
                let held = self.held.logs.get(&(seg.seg, seg.salt));
                if held.is_some_and(|d| *d == super::resync::log_digest(&img[..len], seg.salt)) {
                    return Ok(CopyImage::Held { log: Some((*kind, seg.seg, seg.salt)), bytes: len as u64 });
                }
                Ok(CopyImage::Log(*kind, seg.seg, seg.salt, false, img[..len].to_vec()))
            }
            Piece::Sst(info) if self.held.ssts.contains(&info.seg) => {
                Ok(CopyImage::Held { log: None, bytes: u64::from(info.used_bytes) })
            }
            Piece::Sst(info) => {
                let mut img = AlignedBuf::new(info.used_bytes as usize);
                dev.read_into(dev.seg_base(info.seg), &mut img, IoKind::Replication)?;
                let (nb, live) = (self.node_bytes, &self.large_live);
                let shipped = crate::tree::pointers::void_dead_pointers(&img[..], info, nb, dev.seg_bits(), live)?;
                Ok(CopyImage::Sst(info.clone(), shipped))
            }
        }
    }

    fn named(&self, p: &Piece) -> Option<CopyImage> {
        if !self.by_name {
            return None;
        }
        let seg_bytes = self.dev.seg_bytes();
        let (piece, seg, bytes) = match p {
            Piece::Log { tail: Some(_), .. } => return None,
            Piece::Log { kind, seg, tail: None } => {
                if self.held.logs.contains_key(&(seg.seg, seg.salt)) {
                    return None;
                }
                let valid = match (kind, seg.fill) {
                    (LogKind::Medium, _) => seg_bytes,
                    // Whole, as the bytes would be sent.
                    (_, _) if seg.sealed == u64::MAX => seg_bytes,
                    // A sealed large segment's fill is where its valid records end (a
                    // recovery computes it so too); a short rest is cleared on the backup,
                    // a long one is cheaper to cut here.
                    (LogKind::Large, Some(f)) if seg_bytes - u64::from(f) <= seg_bytes / 8 => u64::from(f),
                    _ => return None,
                };
                (NamedPiece::Log(*kind, seg.seg, seg.salt, valid as u32), seg.seg, valid)
            }
            Piece::Sst(info) => {
                if info.medium_ptrs > 0 || info.large_ptrs > 0 || self.held.ssts.contains(&info.seg) {
                    return None;
                }
                (NamedPiece::Sst(info.clone()), info.seg, u64::from(info.used_bytes))
            }
        };
        let name = self.dev.segment_ref(seg)?;
        Some(CopyImage::Named { piece, bytes, name })
    }

    /// Makes this an incremental copy for a backup holding `inv`: SSTs it holds identically are
    /// not read, log segments whose records it holds are not sent. Returns what the backup's
    /// [`Replication::resync_backup`] keeps.
    pub fn resync(&mut self, inv: &super::resync::Inventory) -> super::resync::Keep {
        let logs: Vec<(u32, u32)> = self
            .pieces
            .iter()
            .filter_map(|p| match p {
                Piece::Log { seg, .. } => Some((seg.seg, seg.salt)),
                Piece::Sst(_) => None,
            })
            .collect();
        let (held, keep) = super::resync::plan(&self.meta, &logs, inv);
        self.held = held;
        keep
    }

    /// How many of the backup's log segments and SSTs an incremental copy found among its
    /// own (a log segment is then left out only if its records are the same).
    pub fn matched(&self) -> (usize, usize) {
        (self.held.logs.len(), self.held.ssts.len())
    }

    /// The edits that publish the levels, the medium log and GC accounting on the backup, once
    /// every piece arrived.
    pub fn edits(&self) -> &[crate::catalog::Edit] {
        &self.edits
    }
}

/// The catalog edits a backup applies after a full copy's segments to hold the region as `meta`.
fn copy_edits(meta: &crate::catalog::RegionMeta) -> Vec<crate::catalog::Edit> {
    use crate::catalog::Edit;
    let mut edits = vec![Edit::L1Lsn(meta.l1_lsn)];
    for (i, ssts_of_level) in meta.levels.iter().enumerate() {
        let Some(level) = Level::at_index(i) else { continue };
        edits.extend(ssts_of_level.iter().map(|sst| Edit::AddSst { level, sst: sst.clone() }));
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
    edits
}

impl Replication<'_> {
    /// Captures a primary region for a full copy to a new or returning backup and calls `f`
    /// with it while no write, compaction or GC of the region can run: whatever the region
    /// ships after `f` returns follows the copy exactly. The region's writers wait only while
    /// the capture copies the log tails' in-memory images (and `f` runs); running compactions
    /// finish first, without holding writers. The copy's segments are read afterwards, from
    /// the returned [`RegionCopy`], with writes going on.
    pub fn with_copy<T>(&self, region: u32, f: impl FnOnce(RegionCopy) -> T) -> Result<T> {
        let h = self.db.region(region)?;
        let r = &h.region;
        if r.is_backup() {
            return Err(Error::BackupRegion(region));
        }
        let sh = r.sh();
        let pin = sh.alloc.pin();
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
        let w = r.w().lock();
        let t0 = std::time::Instant::now();
        // The chunks of sealed segments still queued for the device reach it before they are
        // read (what is queued is at most a few chunks: the log writer drains continuously).
        r.drain_log_writes()?;
        let meta = sh.manifest.region(region).ok_or(Error::NoSuchRegion(region))?;
        let tails: Vec<(u32, Vec<u8>)> =
            [&w.l0, &w.large].iter().filter_map(|t| Some((t.seg?.0, t.image().to_vec()))).collect();
        let mut pieces = Vec::new();
        for kind in [LogKind::L0, LogKind::Large, LogKind::Medium] {
            for s in meta.log(kind) {
                let tail = tails.iter().find(|t| t.0 == s.seg).map(|t| t.1.clone());
                pieces.push(Piece::Log { kind, seg: s.clone(), tail });
            }
        }
        pieces.extend(meta.levels.iter().flatten().map(|info| Piece::Sst(info.clone())));
        let lsn = w.next_lsn.saturating_sub(1);
        let paused = t0.elapsed();
        let copy = RegionCopy {
            lsn,
            paused,
            pieces,
            edits: copy_edits(&meta),
            held: Default::default(),
            by_name: false,
            large_live: meta.log(LogKind::Large).iter().map(|s| (s.seg, s.salt)).collect(),
            meta,
            dev: sh.dev.clone(),
            node_bytes: sh.opts.node_bytes,
            _pin: pin,
        };
        let out = f(copy);
        drop(w);
        Ok(out)
    }
}
