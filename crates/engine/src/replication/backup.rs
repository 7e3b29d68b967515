//! The backup side of replication (docs/design.md §3): a backup region takes its primary's log
//! segments whole, its compaction output segments as they are produced and the edits that
//! publish them, translating the primary's segment numbers through two maps kept in the
//! catalog (so they survive a restart). It keeps no L0 and never compacts. Promotion turns
//! it into a primary: L0 is rebuilt from the replicated logs.

#![expect(clippy::indexing_slicing, reason = "images are checked against the segment size before they are copied")]

use crate::catalog::LogKind;
use crate::catalog::{Edit, Level, MapKind, RegionMeta, SstInfo};
use crate::db::RegionHandle;
use crate::device::aligned::{align_up, AlignedBuf, ALIGN};
use crate::device::alloc::Purpose;
use crate::device::IoKind;
use crate::error::{Error, Result};
use crate::placement::{compaction, gc};
use crate::region::slots::Reserved;
use crate::region::Region;
use crate::replication::Replication;
use crate::tree::pointers::{rewrite_sst, VOID_SEG};
use crate::tree::view::View;
use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// A backup's two segment maps (primary segment -> local segment).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReplicaMaps {
    /// ((primary log segment, salt), local segment).
    pub log: Vec<((u32, u32), u32)>,
    /// (primary SST segment, local segment).
    pub index: Vec<(u32, u32)>,
}

/// The unflushed part of a replicated log a backup holds in memory, handed to promotion.
#[derive(Clone, Copy, Debug)]
pub struct TailImage<'a> {
    /// Which log.
    pub log: LogKind,
    /// The primary's segment.
    pub primary: u32,
    /// Salt of its records.
    pub salt: u32,
    /// The bytes received, from offset 0 of the segment.
    pub bytes: &'a [u8],
}

/// What a promotion recovered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Promotion {
    /// Last LSN in the rebuilt L0 (or in the levels when L0 is empty).
    pub last_lsn: u64,
    /// Valid records beyond the first gap or torn record, not replayed.
    pub dropped_records: u64,
}

impl Replication<'_> {
    pub(super) fn backup_region(&self, region: u32) -> Result<RegionHandle> {
        let h = self.db.region(region)?;
        if !h.region.is_backup() {
            return Err(Error::InvalidOptions(format!("region {region} is not a backup")));
        }
        Ok(h)
    }

    fn write_image(&self, seg: u32, bytes: &[u8]) -> Result<()> {
        self.write_padded(seg, bytes, align_up(bytes.len().max(1), ALIGN))
    }

    /// Writes `bytes` at the start of `seg` and zeros after them up to `len`.
    fn write_padded(&self, seg: u32, bytes: &[u8], len: usize) -> Result<()> {
        let dev = &self.db.inner.sh.dev;
        if bytes.len() as u64 > dev.seg_bytes() {
            return Err(Error::InvalidOptions("segment image larger than a segment".into()));
        }
        let mut buf = AlignedBuf::new(len);
        buf[..bytes.len()].copy_from_slice(bytes);
        dev.write(dev.seg_base(seg), &buf, IoKind::Replication)
    }

    /// The local segment for a primary log segment incarnation: mapped, reserved, or new.
    fn log_local(&self, r: &Region, meta: &RegionMeta, primary: u32, salt: u32) -> Result<(u32, bool)> {
        if let Some(&l) = meta.log_map.get(&(primary, salt)) {
            return Ok((l, true));
        }
        let mut res = r.backup_state().reserved.lock();
        if let Some(&l) = res.log.get(&(primary, salt)) {
            return Ok((l, false));
        }
        let l = self.db.inner.sh.alloc.alloc(Purpose::Background)?;
        res.log.insert((primary, salt), l);
        Ok((l, false))
    }

    /// Stores a whole replicated segment of the L0 or large log (the primary sealed it, or a
    /// new backup is catching up) and adds it to the region's log with its map entry.
    /// Receiving it again (a catch-up repeating itself) rewrites it in place.
    pub fn backup_log_segment(&self, region: u32, log: LogKind, primary: u32, salt: u32, bytes: &[u8]) -> Result<u32> {
        self.log_segment_from(region, log, primary, salt, Body::Bytes(bytes))
    }

    /// [`Replication::backup_log_segment`] for a segment the storage copies from the primary's
    /// store, by its name there ([`crate::CopyImage::Named`]). An error leaves the store as
    /// it was: the primary then sends the bytes.
    /// Its records end within the first `valid` bytes: what follows is cleared.
    pub fn backup_named_log_segment(
        &self,
        region: u32,
        log: LogKind,
        (primary, salt): (u32, u32),
        name: &[u8],
        valid: u32,
    ) -> Result<u32> {
        self.log_segment_from(region, log, primary, salt, Body::Named(name, valid as usize))
    }

    fn log_segment_from(&self, region: u32, log: LogKind, primary: u32, salt: u32, body: Body<'_>) -> Result<u32> {
        let h = self.backup_region(region)?;
        let r = &h.region;
        let sh = &r.sh();
        sh.check()?;
        if log == LogKind::Medium {
            return Err(Error::InvalidOptions("medium-log segments arrive as compaction output".into()));
        }
        let meta = sh.manifest.region(region).ok_or(Error::NoSuchRegion(region))?;
        let (local, mapped) = self.log_local(r, &meta, primary, salt)?;
        // The whole segment: a copy received before (the same incarnation, which a primary
        // continues after a restart) may hold records past this image that the primary lost.
        let whole = sh.dev.seg_bytes() as usize;
        self.put(local, body, whole)?;
        if let Err(e) = sh.dev.sync() {
            return sh.fail(e);
        }
        let mut edits = Vec::new();
        if !meta.log(log).iter().any(|s| s.seg == local) {
            edits.push(Edit::LogAdd { log, seg: local, salt });
        }
        if !mapped {
            edits.push(Edit::Map { kind: MapKind::Log, primary, salt, local });
        }
        if !edits.is_empty() {
            if let Err(e) = sh.manifest.commit(region, &edits) {
                return sh.fail(e);
            }
        }
        r.backup_state().reserved.lock().log.remove(&(primary, salt));
        Ok(local)
    }

    /// Writes the part of a log segment received so far into the local segment reserved for
    /// it, if an SST already points into it (so that reads through those pointers work before
    /// the segment is sealed). Changes nothing in the catalog.
    pub fn backup_stage_tail(&self, region: u32, primary: u32, salt: u32, bytes: &[u8]) -> Result<()> {
        let h = self.backup_region(region)?;
        let r = &h.region;
        let meta = r.sh().manifest.region(region).ok_or(Error::NoSuchRegion(region))?;
        let mapped = meta.log_map.get(&(primary, salt)).copied();
        let local = mapped.or_else(|| r.backup_state().reserved.lock().log.get(&(primary, salt)).copied());
        match local {
            Some(l) => self.write_image(l, bytes),
            None => Ok(()),
        }
    }

    /// Stores a medium-log segment a primary's L0->L1 compaction wrote (it joins the medium
    /// log with the compaction's edits).
    pub fn backup_medium_run(&self, region: u32, primary: u32, salt: u32, bytes: &[u8]) -> Result<u32> {
        self.medium_run_from(region, primary, salt, Body::Bytes(bytes))
    }

    /// [`Replication::backup_medium_run`] for a segment named on the storage (see
    /// [`Replication::backup_named_log_segment`]).
    pub fn backup_named_medium_run(&self, region: u32, primary: u32, salt: u32, name: &[u8]) -> Result<u32> {
        self.medium_run_from(region, primary, salt, Body::Named(name, usize::MAX))
    }

    fn medium_run_from(&self, region: u32, primary: u32, salt: u32, body: Body<'_>) -> Result<u32> {
        let h = self.backup_region(region)?;
        let r = &h.region;
        r.sh().check()?;
        let meta = r.sh().manifest.region(region).ok_or(Error::NoSuchRegion(region))?;
        let (local, _) = self.log_local(r, &meta, primary, salt)?;
        let len = match body {
            Body::Bytes(b) => align_up(b.len().max(1), ALIGN),
            Body::Named(..) => r.sh().dev.seg_bytes() as usize,
        };
        self.put(local, body, len)?;
        r.sh().alloc.trim(local, len as u64);
        Ok(local)
    }

    /// Puts a segment's contents at local segment `seg`: bytes padded with zeros to `len`, or
    /// a copy the storage makes of a named segment, cleared from its valid end to `len`. A
    /// failed write fails the store; a failed copy only the call.
    fn put(&self, seg: u32, body: Body<'_>, len: usize) -> Result<()> {
        let sh = &self.db.inner.sh;
        match body {
            Body::Bytes(b) => match self.write_padded(seg, b, len) {
                Ok(()) => Ok(()),
                Err(e) => sh.fail(e),
            },
            Body::Named(name, valid) => {
                sh.dev.adopt(seg, name)?;
                match valid < len {
                    true => self.clear_from(seg, valid, len),
                    false => Ok(()),
                }
            }
        }
    }

    /// Writes zeros over bytes `from..len` of segment `seg`.
    fn clear_from(&self, seg: u32, from: usize, len: usize) -> Result<()> {
        let dev = &self.db.inner.sh.dev;
        let start = from / ALIGN * ALIGN;
        let mut buf = AlignedBuf::new(len - start);
        if from > start {
            let mut first = AlignedBuf::new(ALIGN);
            dev.read_into(dev.seg_base(seg) + start as u64, &mut first, IoKind::Replication)?;
            buf[..from - start].copy_from_slice(&first[..from - start]);
        }
        dev.write(dev.seg_base(seg) + start as u64, &buf, IoKind::Replication)
    }

    /// Stores an SST a primary's compaction produced: its log pointers are rewritten through
    /// the log map (a log segment not received yet gets a reserved local segment), and it is
    /// written to a new local segment. It joins a level with the edits that name it.
    pub fn backup_sst(&self, region: u32, info: &SstInfo, bytes: &[u8]) -> Result<u32> {
        self.sst_from(region, info, Body::Bytes(bytes))
    }

    /// [`Replication::backup_sst`] for an SST named on the storage, which holds no log
    /// pointers (see [`Replication::backup_named_log_segment`]).
    pub fn backup_named_sst(&self, region: u32, info: &SstInfo, name: &[u8]) -> Result<u32> {
        if info.medium_ptrs > 0 || info.large_ptrs > 0 {
            return Err(Error::InvalidOptions("an SST pointing into logs is shipped as bytes".into()));
        }
        self.sst_from(region, info, Body::Named(name, usize::MAX))
    }

    fn sst_from(&self, region: u32, info: &SstInfo, body: Body<'_>) -> Result<u32> {
        let h = self.backup_region(region)?;
        let r = &h.region;
        let sh = &r.sh();
        sh.check()?;
        let meta = sh.manifest.region(region).ok_or(Error::NoSuchRegion(region))?;
        let local = match body {
            Body::Bytes(bytes) => self.sst_image(r, &meta, info, bytes)?,
            Body::Named(name, _) => {
                check_shipped(info, 0, sh.dev.seg_bytes(), sh.opts.node_bytes)?;
                let local = sh.alloc.alloc(Purpose::Background)?;
                if let Err(e) = sh.dev.adopt(local, name) {
                    sh.alloc.release(local);
                    return Err(e);
                }
                sh.alloc.trim(local, u64::from(info.used_bytes));
                local
            }
        };
        let mut res = r.backup_state().reserved.lock();
        res.index_digest.insert(info.seg, info.digest());
        if let Some(old) = res.index.insert(info.seg, local) {
            // The same primary segment shipped twice before its edit: the first copy is void.
            sh.alloc.release(old);
        }
        Ok(local)
    }

    /// Writes a shipped SST image, its log pointers rewritten through the log map, to a new
    /// local segment.
    fn sst_image(&self, r: &Region, meta: &RegionMeta, info: &SstInfo, bytes: &[u8]) -> Result<u32> {
        let sh = &r.sh();
        check_shipped(info, bytes.len(), sh.dev.seg_bytes(), sh.opts.node_bytes)?;
        let mut img = bytes.to_vec();
        let failed = RefCell::new(None);
        let map = |_, seg: u32, salt: u32| {
            // A pointer its primary voided (into a segment it had dropped) stays void: a local
            // segment reserved for it would never be received nor freed.
            if seg == VOID_SEG {
                return Some(VOID_SEG);
            }
            match self.log_local(r, meta, seg, salt) {
                Ok((l, _)) => Some(l),
                Err(e) => {
                    failed.borrow_mut().get_or_insert(e);
                    None
                }
            }
        };
        rewrite_sst(&mut img, info, sh.opts.node_bytes, sh.dev.seg_bits(), &map)?;
        if let Some(e) = failed.into_inner() {
            return Err(e);
        }
        let local = sh.alloc.alloc(Purpose::Background)?;
        if let Err(e) = self.write_image(local, &img) {
            sh.alloc.release(local);
            return sh.fail(e);
        }
        sh.alloc.trim(local, img.len() as u64);
        Ok(local)
    }

    /// Applies the edits a primary committed (compaction, GC), translated to local segments,
    /// atomically; frees what they remove and trims the L0 log after L0->L1.
    pub fn backup_edits(&self, region: u32, edits: &[Edit]) -> Result<()> {
        let h = self.backup_region(region)?;
        let r = &h.region;
        let sh = &r.sh();
        sh.check()?;
        let meta = sh.manifest.region(region).ok_or(Error::NoSuchRegion(region))?;
        let mut res = r.backup_state().reserved.lock();
        let (mut local, used_index) = {
            let mut t = Translation {
                meta: &meta,
                res: &res,
                seg_bytes: sh.dev.seg_bytes(),
                node_bytes: sh.opts.node_bytes,
                local: Vec::with_capacity(edits.len() + res.log.len()),
                used_index: Vec::new(),
            };
            for e in edits {
                t.add(e)?;
            }
            (t.local, t.used_index)
        };
        // Reserved log segments become map entries now: SSTs installed here may point into
        // them, so they must survive a restart even before their log segment arrives.
        for (&(primary, salt), &l) in &res.log {
            local.push(Edit::Map { kind: MapKind::Log, primary, salt, local: l });
        }
        let freed = match sh.manifest.commit(region, &local) {
            Ok(f) => f,
            Err(e) => return sh.fail(e),
        };
        res.log.clear();
        for s in used_index {
            res.index.remove(&s);
            res.index_digest.remove(&s);
        }
        drop(res);
        self.reload_levels(&h, freed);
        Ok(())
    }

    /// What a backup region holds beyond its levels (for comparing copies): the newest record
    /// of each key in its replicated L0 and large logs after the levels' LSN, and in `tails`,
    /// in LSN order up to the first gap (None: deleted). Its levels plus this are what the
    /// region would hold if promoted now.
    pub fn backup_overlay(&self, region: u32, tails: &[TailImage<'_>]) -> Result<Overlay> {
        let sh = &self.db.inner.sh;
        let meta = sh.manifest.region(region).ok_or(Error::NoSuchRegion(region))?;
        let mut recs: BTreeMap<u64, LogRecord> = BTreeMap::new();
        let mut img = AlignedBuf::new(sh.dev.seg_bytes() as usize);
        for kind in [LogKind::L0, LogKind::Large] {
            for s in meta.log(kind) {
                sh.dev.read_into(sh.dev.seg_base(s.seg), &mut img, kind.io())?;
                let (found, _) = decode_log_records(&img, s.salt, 0);
                recs.extend(found.into_iter().filter(|r| r.lsn > meta.l1_lsn && r.lsn <= s.sealed).map(|r| (r.lsn, r)));
            }
        }
        for t in tails {
            let (found, _) = decode_log_records(t.bytes, t.salt, 0);
            recs.extend(found.into_iter().filter(|r| r.lsn > meta.l1_lsn).map(|r| (r.lsn, r)));
        }
        let mut out = Overlay::default();
        let now = sh.now_ms();
        replay_batches(&mut recs, meta.l1_lsn + 1, u64::MAX, |r| out.apply(r, now));
        Ok(out)
    }

    /// Empties a region that took writes of its own (a Build-Index backup, which replays and
    /// compacts) and makes it a backup region, ready for a full copy through the Send-Index
    /// path ([`Replication::promote`] turns it back when the copy is complete). Waits for the region's
    /// running compaction and GC; its writes must have stopped.
    pub fn demote_to_backup(&self, region: u32) -> Result<()> {
        let h = self.db.region(region)?;
        if h.region.is_backup() {
            return self.reset_backup(region);
        }
        let r = &h.region;
        let sh = r.sh().clone();
        let _gc = gc::keep_out(r);
        // Claimed for good: this region object is about to be replaced.
        compaction::claim_all_levels(r)?;
        let mut w = r.w().lock();
        // Nothing of the old log tails may reach a segment after it is freed.
        r.write_out(&mut w)?;
        let meta = sh.manifest.region(region).ok_or(Error::NoSuchRegion(region))?;
        let mut edits = removal_edits(&meta);
        edits.push(Edit::CreateRegion { start: meta.start.clone(), end: meta.end.clone(), backup: true });
        let freed = match sh.manifest.commit(region, &edits) {
            Ok(f) => f,
            Err(e) => return sh.fail(e),
        };
        // The old object's views (a reader may hold one) keep the freed segments until they go.
        self.reload_levels(&h, freed);
        let meta = sh.manifest.region(region).ok_or(Error::NoSuchRegion(region))?;
        let fresh = Arc::new(Region::new(region, &meta, sh.clone(), crate::tree::memtable::Memtable::new(), 1));
        self.db.replace_region(fresh);
        drop(w);
        Ok(())
    }

    /// Splits a backup region where its primary split (the listener's
    /// [`crate::ShipListener::split`]): at key `at`, at LSN `lsn`, its keys from `at` on
    /// becoming backup region `child` with the same segments and maps. Apply it in stream order:
    /// after the tails the primary sealed for it (stored with [`Self::backup_log_segment`]),
    /// before anything either half ships.
    pub fn backup_split(&self, region: u32, at: &[u8], lsn: u64, child: u32) -> Result<RegionHandle> {
        self.db.inner.split(region, at, child, Some(lsn))
    }

    /// Merges backup region `right` into `left` where their primary merged them, before the
    /// merged region's incremental copy (which aligns the levels): see
    /// [`crate::Db::merge_regions`] for the primary's side.
    pub fn backup_merge(&self, left: u32, right: u32) -> Result<RegionHandle> {
        self.db.inner.merge_backups(left, right)
    }

    /// Widens (or narrows) backup region `id` to `[start, end)`: its primary merged it with a
    /// region this store holds no copy of, whose part the incremental copy then brings.
    pub fn set_backup_range(&self, id: u32, start: &[u8], end: Option<&[u8]>) -> Result<RegionHandle> {
        self.db.inner.set_backup_range(id, start, end)
    }

    /// Drops backup region `id` from the store: emptied (its space goes back), then gone from
    /// the catalog in one more record. A node does it to a copy no map names it for whose range
    /// a region it must hold now overlaps (the other side of a split or merge it missed).
    pub fn drop_backup_region(&self, id: u32) -> Result<()> {
        self.reset_backup(id)?;
        let sh = &self.db.inner.sh;
        if let Err(e) = sh.manifest.commit(id, &[Edit::DropRegion]) {
            return sh.fail(e);
        }
        self.db.inner.install_regions(Vec::new(), &[id]);
        Ok(())
    }

    /// Empties a backup region (levels, logs, maps, reservations) before a full copy.
    pub fn reset_backup(&self, region: u32) -> Result<()> {
        let h = self.backup_region(region)?;
        let r = &h.region;
        let sh = &r.sh();
        let meta = sh.manifest.region(region).ok_or(Error::NoSuchRegion(region))?;
        let mut edits = removal_edits(&meta);
        for &(primary, salt) in meta.log_map.keys() {
            edits.push(Edit::Unmap { kind: MapKind::Log, primary, salt });
        }
        for &primary in meta.index_map.keys() {
            edits.push(Edit::Unmap { kind: MapKind::Index, primary, salt: 0 });
        }
        let freed = match sh.manifest.commit(region, &edits) {
            Ok(f) => f,
            Err(e) => return sh.fail(e),
        };
        // Map targets never added to a log (reserved for SSTs) are not freed by the edits.
        let mut extra: Vec<u32> = meta.log_map.values().copied().filter(|l| !freed.contains(l)).collect();
        {
            let mut res = r.backup_state().reserved.lock();
            extra.extend(res.log.drain().map(|(_, l)| l));
            extra.extend(res.index.drain().map(|(_, l)| l));
            res.index_digest.clear();
        }
        self.reload_levels(&h, freed);
        for l in extra {
            let in_use = sh.manifest.with(|c| {
                c.regions.values().any(|m| {
                    let mut set = std::collections::BTreeSet::new();
                    m.segments(&mut set);
                    set.contains(&l)
                })
            });
            if !in_use {
                sh.alloc.release(l);
            }
        }
        Ok(())
    }

    /// A backup region's maps, for the other backups to remap after this one is promoted.
    pub fn replica_maps(&self, region: u32) -> Result<ReplicaMaps> {
        let meta = self.db.inner.sh.manifest.region(region).ok_or(Error::NoSuchRegion(region))?;
        Ok(ReplicaMaps {
            log: meta.log_map.iter().map(|(k, v)| (*k, *v)).collect(),
            index: meta.index_map.iter().map(|(k, v)| (*k, *v)).collect(),
        })
    }

    /// Re-keys this backup's maps from the old primary's segments to those of a new primary
    /// (a backup promoted, which sent its own maps of the old primary's segments). Entries
    /// the new primary lacks are dropped.
    pub fn remap(&self, region: u32, new_primary: &ReplicaMaps) -> Result<()> {
        let h = self.backup_region(region)?;
        let sh = &h.region.sh();
        let meta = sh.manifest.region(region).ok_or(Error::NoSuchRegion(region))?;
        let plog: HashMap<(u32, u32), u32> = new_primary.log.iter().copied().collect();
        let pindex: HashMap<u32, u32> = new_primary.index.iter().copied().collect();
        let mut edits = Vec::new();
        for &(p, salt) in meta.log_map.keys() {
            edits.push(Edit::Unmap { kind: MapKind::Log, primary: p, salt });
        }
        for &p in meta.index_map.keys() {
            edits.push(Edit::Unmap { kind: MapKind::Index, primary: p, salt: 0 });
        }
        for (&(p, salt), &l) in &meta.log_map {
            if let Some(&np) = plog.get(&(p, salt)) {
                edits.push(Edit::Map { kind: MapKind::Log, primary: np, salt, local: l });
            }
        }
        for (p, &l) in &meta.index_map {
            if let Some(&np) = pindex.get(p) {
                edits.push(Edit::Map { kind: MapKind::Index, primary: np, salt: 0, local: l });
            }
        }
        if let Err(e) = sh.manifest.commit(region, &edits) {
            return sh.fail(e);
        }
        Ok(())
    }

    /// Makes a backup region a primary (docs/design.md §3 step 6): the unflushed log tails it
    /// holds in memory are stored like sealed segments, then L0 is rebuilt from the
    /// replicated L0 and large logs beyond the levels' LSN, stopping at the first torn or
    /// missing record. The region then takes writes (and compacts) like any other.
    pub fn promote(&self, region: u32, tails: &[TailImage<'_>]) -> Result<Promotion> {
        for t in tails {
            self.backup_log_segment(region, t.log, t.primary, t.salt, t.bytes)?;
        }
        let h = self.backup_region(region)?;
        let sh = h.region.sh().clone();
        let meta = sh.manifest.region(region).ok_or(Error::NoSuchRegion(region))?;
        let role = Edit::CreateRegion { start: meta.start.clone(), end: meta.end.clone(), backup: false };
        if let Err(e) = sh.manifest.commit(region, &[role]) {
            return sh.fail(e);
        }
        let meta = sh.manifest.region(region).ok_or(Error::NoSuchRegion(region))?;
        let rec = crate::region::recovery::replay(&sh.dev, &meta, crate::region::recovery::How::Promote)?;
        let (mem, last, dropped) = (rec.mem, rec.last, rec.dropped);
        if let Err(e) = sh.manifest.commit(region, &rec.edits) {
            return sh.fail(e);
        }
        let meta = sh.manifest.region(region).ok_or(Error::NoSuchRegion(region))?;
        let fresh = Arc::new(Region::new(region, &meta, sh.clone(), mem, last + 1));
        self.db.replace_region(fresh);
        sh.wake();
        Ok(Promotion { last_lsn: last, dropped_records: dropped })
    }
}

impl Replication<'_> {
    pub(crate) fn reload_levels(&self, h: &RegionHandle, freed: Vec<u32>) {
        let r = &h.region;
        let Some(meta) = r.sh().manifest.region(r.id()) else {
            return;
        };
        r.install(
            |v| View::new(v.mem.clone(), v.imm.clone(), Arc::new(v.version.rebuilt(&meta)), r.sh().alloc.clone()),
            freed,
        );
    }
}

/// A primary's edits translated into a backup region's: segments through its maps and its
/// reserved segments.
struct Translation<'a> {
    meta: &'a RegionMeta,
    res: &'a Reserved,
    seg_bytes: u64,
    node_bytes: usize,
    /// The local edits so far.
    local: Vec<Edit>,
    /// Primary SST segments whose reserved local copy an edit named.
    used_index: Vec<u32>,
}

impl Translation<'_> {
    /// The local segment of a primary log segment incarnation, mapped or reserved.
    fn log_of(&self, primary: u32, salt: u32) -> Option<u32> {
        self.meta.log_map.get(&(primary, salt)).or_else(|| self.res.log.get(&(primary, salt))).copied()
    }

    /// Adds the local form of `e` (none for an edit a backup does not take).
    fn add(&mut self, e: &Edit) -> Result<()> {
        match e {
            Edit::AddSst { level, sst } => {
                check_shipped(sst, 0, self.seg_bytes, self.node_bytes)?;
                let seg = match self.res.index.get(&sst.seg) {
                    Some(&l) => {
                        self.used_index.push(sst.seg);
                        self.local.push(Edit::Map { kind: MapKind::Index, primary: sst.seg, salt: 0, local: l });
                        l
                    }
                    None => *self.meta.index_map.get(&sst.seg).ok_or_else(|| missing("SST", sst.seg))?,
                };
                self.local.push(Edit::AddSst { level: *level, sst: SstInfo { seg, ..sst.clone() } });
            }
            Edit::RemoveSst { level, seg } => {
                let l = *self.meta.index_map.get(seg).ok_or_else(|| missing("SST", *seg))?;
                let added = |e: &Edit| matches!(e, Edit::AddSst { level: x, sst } if x == level && sst.seg == l);
                let held = self.meta.levels.get(level.index()).is_some_and(|lv| lv.iter().any(|s| s.seg == l))
                    || self.local.iter().any(added);
                if !held {
                    // The copies differ: taking the rest would leave the replaced SST beside its
                    // replacement, a level of overlapping SSTs that a compaction after a
                    // promotion would merge out of order. Refused: the primary copies again.
                    return Err(Error::corrupt(
                        u64::from(l),
                        0,
                        format!(
                            "shipped edit removes SST segment {seg} from level {}, where this backup does not hold it",
                            level.get()
                        ),
                    ));
                }
                self.local.push(Edit::RemoveSst { level: *level, seg: l });
            }
            Edit::LogAdd { log: LogKind::Medium, seg, salt } => {
                let l = self.log_of(*seg, *salt).ok_or_else(|| missing("medium-log", *seg))?;
                self.local.push(Edit::LogAdd { log: LogKind::Medium, seg: l, salt: *salt });
            }
            Edit::LogRemove { log, seg } => {
                // Seg-only edits name the current incarnation: the one in that log.
                let l = self
                    .meta
                    .log_map
                    .iter()
                    .filter(|((p, _), _)| p == seg)
                    .map(|(_, l)| *l)
                    .find(|l| self.meta.log(*log).iter().any(|s| s.seg == *l));
                // An L0 segment a backup never received whole (it joined later) is no loss.
                if let Some(l) = l {
                    self.local.push(Edit::LogRemove { log: *log, seg: l });
                }
            }
            Edit::MediumPtrs { seg, salt, delta } => {
                let l = self.log_of(*seg, *salt).ok_or_else(|| missing("medium-log", *seg))?;
                self.local.push(Edit::MediumPtrs { seg: l, salt: *salt, delta: *delta });
            }
            Edit::LargeGarbage { seg, salt, bytes } => {
                if let Some(l) = self.log_of(*seg, *salt) {
                    self.local.push(Edit::LargeGarbage { seg: l, salt: *salt, bytes: *bytes });
                }
            }
            Edit::L1Lsn(l) => self.local.push(Edit::L1Lsn(*l)),
            // Keys, not segments: as the primary wrote them.
            Edit::AddRangeDel { .. } | Edit::DropRangeDel { .. } => self.local.push(e.clone()),
            Edit::ClearL1Lsn => self.local.push(Edit::ClearL1Lsn),
            // A split is not shipped as an edit: a backup splits its own copy.
            Edit::Split { .. } | Edit::SplitSharingL0 { .. } | Edit::Merge { .. } | Edit::DropRegion => {
                let what = "a shipped edit splits, merges or drops regions; those are not replicated as edits";
                return Err(Error::InvalidOptions(what.into()));
            }
            // The backup's own copies of the L0 and large logs arrive whole
            // (`backup_log_segment`); the rest is never shipped.
            Edit::LogAdd { .. }
            | Edit::LogSeal { .. }
            | Edit::LogFill { .. }
            | Edit::CreateRegion { .. }
            | Edit::Map { .. }
            | Edit::Unmap { .. } => {}
        }
        Ok(())
    }
}

/// A shipped edit names a segment this backup never received.
fn missing(what: &str, seg: u32) -> Error {
    Error::corrupt(seg as u64, 0, format!("shipped edit names {what} segment {seg} this backup never received"))
}

/// Edits that remove every SST, every log segment (freeing them) and every range delete of a
/// region, and reset its L1 LSN.
pub(super) fn removal_edits(meta: &RegionMeta) -> Vec<Edit> {
    let mut edits = Vec::new();
    for (i, ssts) in meta.levels.iter().enumerate() {
        let Some(level) = Level::at_index(i) else { continue };
        for s in ssts {
            edits.push(Edit::RemoveSst { level, seg: s.seg });
        }
    }
    for (k, log) in meta.logs.iter().enumerate() {
        let Some(kind) = LogKind::from_u8(k as u8) else { continue };
        for s in log {
            edits.push(Edit::LogRemove { log: kind, seg: s.seg });
        }
    }
    edits.extend(meta.range_dels.iter().map(|d| Edit::DropRangeDel { lsn: d.lsn }));
    // Its levels now cover nothing: a copy's L1 LSN may be below the one it had (`L1Lsn` only
    // raises it), and promotion replays the log only past it.
    edits.push(Edit::ClearL1Lsn);
    edits
}

/// Checks a shipped SST description, and that its image (`image_len` bytes, 0 for none)
/// holds its used bytes.
fn check_shipped(info: &SstInfo, image_len: usize, seg_bytes: u64, node_bytes: usize) -> Result<()> {
    let bad = |what: &str| Error::corrupt(u64::from(info.seg), 0, format!("shipped SST description: {what}"));
    info.check(seg_bytes, node_bytes).map_err(bad)?;
    if image_len != 0 && (image_len as u64) < u64::from(info.used_bytes) {
        return Err(bad("image shorter than its used bytes"));
    }
    Ok(())
}

/// Where a shipped segment's contents come from.
#[derive(Clone, Copy)]
enum Body<'a> {
    /// Its bytes, as sent.
    Bytes(&'a [u8]),
    /// Its name on a storage the primary's store shares ([`crate::CopyImage::Named`]), and
    /// how many of its first bytes hold what it holds (the rest is cleared).
    Named(&'a [u8], usize),
}

/// Encodes a region's edits for shipping (the redo-record payload of `docs/format.md` §3.3).
pub fn encode_shipped_edits(region: u32, edits: &[Edit]) -> Vec<u8> {
    crate::catalog::encode_edits(region, edits)
}

/// Decodes what [`encode_shipped_edits`] made; bytes from the network are untrusted.
pub fn decode_shipped_edits(bytes: &[u8]) -> Result<(u32, Vec<Edit>)> {
    crate::catalog::decode_edits(bytes).map_err(|_| Error::corrupt(0, 0, "malformed shipped edits"))
}

impl SstInfo {
    /// The SST description as bytes (the footer body of `docs/format.md` §5).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut e = halyard_codec::Writer::new();
        self.encode_footer(&mut e);
        e.into_inner()
    }

    /// Decodes [`SstInfo::to_bytes`]; every byte must be used.
    pub fn from_bytes(bytes: &[u8]) -> Result<SstInfo> {
        let mut d = halyard_codec::Reader::new(bytes);
        let malformed = |_| Error::corrupt(0, 0, "malformed SST description");
        let mut info = SstInfo::decode(&mut d).map_err(malformed)?;
        if !d.is_empty() {
            info.range_lsn = d.u64().map_err(malformed)?;
        }
        d.finish().map_err(|_| Error::corrupt(0, 0, "trailing bytes after an SST description"))?;
        Ok(info)
    }
}

/// Takes out of `recs` every whole atomic batch whose LSNs follow on from `next` without a gap,
/// up to LSN `upto`, in LSN order, handing each record to `apply`; returns the next LSN. What is
/// left waits for a missing LSN (or lies beyond `upto`).
pub fn replay_batches(
    recs: &mut BTreeMap<u64, LogRecord>,
    mut next: u64,
    upto: u64,
    mut apply: impl FnMut(LogRecord),
) -> u64 {
    while let Some(first) = recs.get(&next) {
        let n = first.batch_remaining as u64 + 1;
        if next + n - 1 > upto || !(next..next + n).all(|l| recs.contains_key(&l)) {
            break;
        }
        for l in next..next + n {
            if let Some(r) = recs.remove(&l) {
                apply(r);
            }
        }
        next += n;
    }
    next
}

/// What a backup's logs say beyond its levels, all of it newer than anything the levels hold.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Overlay {
    /// Key → (LSN, value; None for a delete, or for a put whose time has passed).
    pub pairs: BTreeMap<Vec<u8>, (u64, Option<Vec<u8>>)>,
    /// Range deletes: (first key, first key past the range, LSN). They hide every key of
    /// their range in the levels, and the pairs above written before them.
    pub ranges: Vec<(Vec<u8>, Vec<u8>, u64)>,
}

impl Overlay {
    /// Adds a record replayed in LSN order; `now` decides which puts have expired.
    pub fn apply(&mut self, r: LogRecord, now: u64) {
        if let Some(end) = r.range_end {
            if end <= r.key {
                return;
            }
            let hidden: Vec<Vec<u8>> = self.pairs.range(r.key.clone()..end.clone()).map(|(k, _)| k.clone()).collect();
            for k in hidden {
                self.pairs.remove(&k);
            }
            self.ranges.push((r.key, end, r.lsn));
            return;
        }
        // A put past its time reads as a delete, as on the primary.
        let value = r.value.filter(|_| r.expire_at == 0 || r.expire_at > now);
        self.pairs.insert(r.key, (r.lsn, value));
    }

    /// Whether a range delete of the overlay hides `key` in the levels below it.
    pub fn hides(&self, key: &[u8]) -> bool {
        self.ranges.iter().any(|(s, e, _)| key >= s.as_slice() && key < e.as_slice())
    }
}

/// A log record as a Build-Index backup replays it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogRecord {
    /// Its LSN on the primary.
    pub lsn: u64,
    /// Key.
    pub key: Vec<u8>,
    /// Value (None: a delete, or a range delete).
    pub value: Option<Vec<u8>>,
    /// A range delete: the first key past its range (`key` is its first key). A split's
    /// mark, which holds an LSN and changes nothing, is an empty range (both empty).
    pub range_end: Option<Vec<u8>>,
    /// When a put expires (ms since the Unix epoch; 0: never).
    pub expire_at: u64,
    /// Records after this one in the same atomic batch.
    pub batch_remaining: u32,
}

/// The valid records of a log segment image carrying `salt`, from offset `from`, up to the
/// first torn or invalid one; also returns the offset just past the last valid record.
pub fn decode_log_records(img: &[u8], salt: u32, from: usize) -> (Vec<LogRecord>, usize) {
    let mut out = Vec::new();
    let mut at = from;
    while let Some(rest) = img.get(at..) {
        let Ok(r) = crate::format::record::decode(rest, Some(salt)) else {
            break;
        };
        out.push(LogRecord {
            lsn: r.lsn,
            key: r.key.to_vec(),
            value: (r.kind == crate::format::record::KIND_PUT).then(|| r.value.to_vec()),
            // A mark (a split's LSN) is an empty range delete: it deletes nothing.
            range_end: matches!(r.kind, crate::format::record::KIND_RANGE_DELETE | crate::format::record::KIND_MARK)
                .then(|| r.value.to_vec()),
            expire_at: r.expire_at,
            batch_remaining: r.batch_remaining,
        });
        at += r.len;
    }
    (out, at)
}
