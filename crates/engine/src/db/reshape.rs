//! Regions that change shape: a split cuts one region in two at a key without rewriting any
//! data (`docs/design.md` §5). Both halves name the parent's SSTs and medium and large log
//! segments (the catalog frees a segment only when no region names it), and each hides the
//! other's keys with a range delete that its compactions clean up.

use crate::catalog::{Edit, LogKind};
use crate::db::{Db, DbInner, RegionHandle};
use crate::error::{Error, Result};
use crate::placement::{compaction, gc};
use crate::region::write::Op;
use crate::region::Region;
use crate::tree::memtable::Memtable;
use std::sync::Arc;

impl Db {
    /// Splits region `id` at `at`: its keys from `at` on become region `new_id` (returned),
    /// and `id` ends at `at`. No data is copied or rewritten: the two share the parent's
    /// segments until their compactions and GC have moved on. The region's writers wait while
    /// its L0 is written out (a flush runs first with writes going on, so that only what
    /// arrived during it is left) and the catalog records the split in one durable record:
    /// after a crash the store holds the region whole or split, never a mix. `Db`'s own writes
    /// route again by themselves; a [`RegionHandle`] of the parent answers
    /// [`Error::RegionChanged`] from then on.
    pub fn split_region(&self, id: u32, at: &[u8], new_id: u32) -> Result<RegionHandle> {
        self.inner.split(id, at, new_id, None)
    }

    /// Merges region `right` into region `left`, which ends where `right` starts: `left`
    /// then covers both ranges and `right` is gone. Nothing is copied: `left`'s catalog takes
    /// in `right`'s SSTs and log segments, in one durable record. Both regions' writers wait
    /// while their L0s are written out. Refused while either region still holds keys or range
    /// deletes beyond its own range (a split's halves until their compactions cleaned up:
    /// `Db::compact` does it) or a range delete of its own (their LSNs are counted per region,
    /// so two regions' could meet).
    pub fn merge_regions(&self, left: u32, right: u32) -> Result<RegionHandle> {
        self.inner.merge(left, right)
    }
}

impl DbInner {
    /// A region object by id.
    pub(crate) fn get(&self, id: u32) -> Result<Arc<Region>> {
        self.regions.read().get(&id).cloned().ok_or(Error::NoSuchRegion(id))
    }

    /// [`Db::split_region`] of a primary region, or with `backup_lsn` of a backup region at the
    /// LSN its primary split at ([`crate::Replication::backup_split`]).
    pub(crate) fn split(&self, id: u32, at: &[u8], new_id: u32, backup_lsn: Option<u64>) -> Result<RegionHandle> {
        let _one = self.reshaping.lock();
        let r = self.get(id)?;
        match (r.is_backup(), backup_lsn) {
            (true, None) => return Err(Error::BackupRegion(id)),
            (false, Some(_)) => return Err(Error::InvalidOptions(format!("region {id} is not a backup"))),
            _ => {}
        }
        if !r.contains(at) || at == r.start().as_slice() {
            return Err(Error::InvalidOptions(format!(
                "split key must lie inside region {id} and after its first key; it is outside or at its start"
            )));
        }
        let o = &self.sh.opts;
        if at.len() > o.max_key_bytes {
            return Err(Error::KeyTooLarge { len: at.len(), limit: o.max_key_bytes });
        }
        if self.regions.read().contains_key(&new_id) {
            return Err(Error::RegionExists(new_id));
        }
        self.sh.check()?;
        if !r.is_backup() {
            // The bulk of L0 goes out while writes go on.
            r.flush()?;
        }
        // Running GC passes and compactions end before the writers wait, not while they do.
        let _gc = gc::keep_out(&r);
        compaction::claim_all_levels(&r)?;
        // The writers are held from the moment the region retires (under its write lock, which
        // the split may first wait for behind a writer of its own) until the halves take over.
        r.set_retired(true);
        let (t0, written) = (std::time::Instant::now(), self.sh.dev.counters().total_written());
        let split = self.split_retired(&r, at, new_id, backup_lsn);
        if split.is_err() {
            compaction::release_all_levels(&r);
            r.set_retired(false);
        }
        let c = &self.sh.counters;
        c.split_pause_max_us.fetch_max(t0.elapsed().as_micros() as u64, std::sync::atomic::Ordering::Relaxed);
        let written = self.sh.dev.counters().total_written().saturating_sub(written);
        c.split_pause_max_written.fetch_max(written, std::sync::atomic::Ordering::Relaxed);
        split
    }

    /// The split once no write appends to `r` any more and its levels are claimed. The halves
    /// share the parent's L0 table (and its log) as their immutable one, each writing it out
    /// in its first L0 merge: the writers wait only for the catalog record.
    fn split_retired(&self, r: &Arc<Region>, at: &[u8], new_id: u32, backup_lsn: Option<u64>) -> Result<RegionHandle> {
        let sh = r.sh().clone();
        // A writer that appended before the region retired may still be inserting into its
        // table (outside the write lock).
        r.view().mem.wait_for_writers();
        let mut w = r.w().lock();
        let refused = if r.is_backup() && !r.backup_state().reserved.lock().is_empty() {
            // Its primary splits with no compaction running: every SST shipped before is
            // installed by then, unless the stream broke off in between.
            Some("it holds shipped segments no edit has installed yet")
        } else {
            None
        };
        if let Some(why) = refused {
            return Err(Error::InvalidOptions(format!("region {} cannot split: {why}", r.id())));
        }
        // The split takes an LSN of its own, held by a mark in the L0 log the halves share (a
        // replay finds no gap): its range deletes hide everything before it, and both halves
        // write after it. A backup splits at its primary's, whose mark it received.
        let lsn = match backup_lsn {
            Some(lsn) => lsn,
            None => {
                let p = r.append_locked(&mut w, &[Op::Mark], false)?;
                r.finish(p, &[Op::Mark])?
            }
        };
        let past = vec![u8::MAX; sh.opts.max_key_bytes + 1];
        let split = Edit::SplitSharingL0 { parent: r.id(), at: at.to_vec(), lsn, past };
        // The mark is durable before the record that names the LSN it holds: a half reopened
        // with no write of its own continues after it.
        let committed = seal_large_tail(r, &mut w)
            .and_then(|_| sh.waiting(|| sh.dev.sync()))
            .and_then(|_| sh.manifest.commit(new_id, &[split]));
        if let Err(e) = committed {
            drop(w);
            return sh.fail(e);
        }
        // Backups split at the same point of the stream: after the tails sealed above (the
        // mark among them), before any write of either half.
        if let Some(l) = sh.listener().filter(|_| !r.is_backup()) {
            l.split(r.id(), at, lsn, new_id);
        }
        // The old object's levels stay claimed for good: it is about to be replaced.
        keep_views(r);
        // Its immutable table when it has one (the mutable one filled since the levels were
        // claimed: the halves copy their parts of it), else its mutable one.
        let v = r.view();
        let (imm_segs, mem_segs) = (w.imm_l0_segs.clone(), w.mem_l0_segs.clone());
        let halves = [r.id(), new_id].map(|id| {
            let meta = sh.manifest.region(id).ok_or(Error::NoSuchRegion(id))?;
            let half = Arc::new(Region::new(id, &meta, sh.clone(), Memtable::new(), lsn + 1));
            match &v.imm {
                _ if r.is_backup() => {}
                Some(imm) => half.adopt_l0(imm.clone(), imm_segs.clone(), Some((&v.mem, mem_segs.clone())), lsn),
                None => half.adopt_l0(v.mem.clone(), [&imm_segs[..], &mem_segs[..]].concat(), None, lsn),
            }
            Ok(half)
        });
        let [parent, child] = halves;
        let (parent, child) = (parent?, child?);
        self.install_regions(vec![parent, child.clone()], &[]);
        sh.counters.splits.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        drop(w);
        Ok(RegionHandle { region: child })
    }
}

impl DbInner {
    /// See [`Db::merge_regions`].
    fn merge(&self, left: u32, right: u32) -> Result<RegionHandle> {
        let _one = self.reshaping.lock();
        let (l, r) = (self.get(left)?, self.get(right)?);
        if l.end().as_deref() != Some(r.start().as_slice()) || left == right {
            return Err(Error::InvalidOptions(format!("region {left} does not end where region {right} starts")));
        }
        if l.is_backup() || r.is_backup() {
            return Err(Error::BackupRegion(if l.is_backup() { left } else { right }));
        }
        self.sh.check()?;
        for x in [&l, &r] {
            x.flush()?;
            // Its L0 is checked once no GC pass or writer can append (`merge_retired`).
            check_mergeable(x, false)?;
        }
        for x in [&l, &r] {
            x.set_retired(true);
        }
        let merged = self.merge_retired(&l, &r);
        if merged.is_err() {
            for x in [&l, &r] {
                x.set_retired(false);
            }
        }
        merged
    }

    /// The merge once no write appends to either region any more.
    fn merge_retired(&self, l: &Arc<Region>, r: &Arc<Region>) -> Result<RegionHandle> {
        let sh = l.sh().clone();
        // See `split_retired`: GC passes end first, appends made before retiring may still be
        // inserting.
        let _gc = (gc::keep_out(l), gc::keep_out(r));
        for x in [l, r] {
            x.view().mem.wait_for_writers();
            x.flush()?;
        }
        compaction::claim_all_levels(l)?;
        if let Err(e) = compaction::claim_all_levels(r) {
            compaction::release_all_levels(l);
            return Err(e);
        }
        let release = || [l, r].iter().for_each(|x| compaction::release_all_levels(x));
        let (mut wl, mut wr) = (l.w().lock(), r.w().lock());
        let ready = check_mergeable(l, true).and_then(|_| check_mergeable(r, true));
        let sealed = ready.and_then(|_| seal_large_tail(l, &mut wl)).and_then(|_| seal_large_tail(r, &mut wr));
        let committed = sealed.and_then(|_| sh.manifest.commit(l.id(), &[Edit::Merge { right: r.id() }]));
        if let Err(e) = committed {
            drop((wl, wr));
            release();
            return match e {
                Error::InvalidOptions(_) => Err(e),
                e => sh.fail(e),
            };
        }
        let next_lsn = wl.next_lsn.max(wr.next_lsn);
        for x in [l, r] {
            keep_views(x);
        }
        let meta = sh.manifest.region(l.id()).ok_or(Error::NoSuchRegion(l.id()))?;
        let joined = Arc::new(Region::new(l.id(), &meta, sh.clone(), Memtable::new(), next_lsn));
        self.install_regions(vec![joined.clone()], &[r.id()]);
        sh.counters.merges.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        drop((wl, wr));
        Ok(RegionHandle { region: joined })
    }
}

impl DbInner {
    /// Joins backup region `right` into backup region `left`, which ends where it starts, as
    /// their primary merged them ([`crate::Replication::backup_merge`]): `left`'s catalog takes
    /// in `right`'s SSTs, log segments and maps in one durable record, and the segments shipped
    /// to either but not installed yet stay reserved. Unlike a primary's merge nothing is
    /// checked of the levels: the merged region's incremental copy follows, which keeps what
    /// the two held and installs the primary's levels.
    pub(crate) fn merge_backups(&self, left: u32, right: u32) -> Result<RegionHandle> {
        let _one = self.reshaping.lock();
        let (l, r) = (self.get(left)?, self.get(right)?);
        if l.end().as_deref() != Some(r.start().as_slice()) || left == right {
            return Err(Error::InvalidOptions(format!("region {left} does not end where region {right} starts")));
        }
        for x in [&l, &r] {
            if !x.is_backup() {
                return Err(Error::InvalidOptions(format!("region {} is not a backup", x.id())));
            }
        }
        let sh = self.sh.clone();
        sh.check()?;
        if let Err(e) = sh.manifest.commit(left, &[Edit::Merge { right }]) {
            return sh.fail(e);
        }
        for x in [&l, &r] {
            keep_views(x);
        }
        let meta = sh.manifest.region(left).ok_or(Error::NoSuchRegion(left))?;
        let joined = Arc::new(Region::new(left, &meta, sh.clone(), Memtable::new(), 1));
        {
            let mut into = joined.backup_state().reserved.lock();
            for x in [&l, &r] {
                into.take_from(&mut x.backup_state().reserved.lock());
            }
        }
        self.install_regions(vec![joined.clone()], &[right]);
        sh.counters.merges.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(RegionHandle { region: joined })
    }

    /// Gives backup region `id` the key range `[start, end)` (its primary's merged region,
    /// when this node held no copy of the other side; an incremental copy follows).
    pub(crate) fn set_backup_range(&self, id: u32, start: &[u8], end: Option<&[u8]>) -> Result<RegionHandle> {
        let _one = self.reshaping.lock();
        let old = self.get(id)?;
        if !old.is_backup() {
            return Err(Error::InvalidOptions(format!("region {id} is not a backup")));
        }
        let sh = self.sh.clone();
        sh.check()?;
        if let Some(o) = self.regions.read().values().find(|o| o.id() != id && !o.disjoint(start, end)) {
            return Err(Error::RegionOverlap { new: id, existing: o.id() });
        }
        let role = Edit::CreateRegion { start: start.to_vec(), end: end.map(<[u8]>::to_vec), backup: true };
        if let Err(e) = sh.manifest.commit(id, &[role]) {
            return sh.fail(e);
        }
        keep_views(&old);
        let meta = sh.manifest.region(id).ok_or(Error::NoSuchRegion(id))?;
        let fresh = Arc::new(Region::new(id, &meta, sh.clone(), Memtable::new(), 1));
        fresh.backup_state().reserved.lock().take_from(&mut old.backup_state().reserved.lock());
        self.install_regions(vec![fresh.clone()], &[]);
        Ok(RegionHandle { region: fresh })
    }
}

/// Keeps the segments the readers of a replaced region object may read: none freed from now
/// on is reused before the last of its views is gone (with the object).
fn keep_views(r: &Region) {
    let pin = r.sh().alloc.pin();
    r.view().on_release(Box::new(move || drop(pin)));
}

/// Whether `r` may be merged: no range delete, no SST beyond its range and, with `l0`, an
/// empty L0.
fn check_mergeable(r: &Region, l0: bool) -> Result<()> {
    let v = r.view();
    let refuse = |why: &str| Err(Error::InvalidOptions(format!("region {} cannot be merged yet: {why}", r.id())));
    if l0 && (!v.mem.is_empty() || v.imm.is_some()) {
        return refuse("it took writes while its L0 was written out");
    }
    if !v.version.range_dels.is_empty() {
        return refuse("it holds range deletes that its compactions have not cleaned up yet (Db::compact)");
    }
    let (start, end) = (r.start(), r.end());
    if v.version.levels.iter().flatten().any(|s| s.info.beyond(start, end.as_deref())) {
        return refuse("an SST still holds keys beyond its range (Db::compact cleans a split's halves up)");
    }
    Ok(())
}

/// Seals the large-log segment the region's tail is filling: no region object writes it again.
/// Backups are told (they store their buffers of both tails as segments), as at a switch.
fn seal_large_tail(r: &Region, w: &mut crate::region::WriteState) -> Result<()> {
    r.write_out(w)?;
    if let Some(l) = r.sh().listener().filter(|_| !r.is_backup()) {
        w.l0.ship(l.as_ref(), r.id(), true);
        w.large.ship(l.as_ref(), r.id(), true);
    }
    let Some((seg, _)) = w.large.seg else { return Ok(()) };
    let sh = r.sh();
    let fill = (sh.dev.seg_bytes() as usize).saturating_sub(w.large.remaining()) as u32;
    let edits = [
        Edit::LogSeal { log: LogKind::Large, seg, max_lsn: w.large.last_lsn },
        Edit::LogFill { log: LogKind::Large, seg, bytes: fill },
    ];
    sh.manifest.commit(r.id(), &edits).map(|_| ())
}
