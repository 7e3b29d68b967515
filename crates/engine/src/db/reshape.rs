//! Regions that change shape: a split cuts one region in two at a key without rewriting any
//! data (`docs/design.md` §5). Both halves name the parent's SSTs and medium and large log
//! segments (the catalog frees a segment only when no region names it), and each hides the
//! other's keys with a range delete that its compactions clean up.

use crate::catalog::{Edit, LogKind};
use crate::db::{Db, RegionHandle};
use crate::error::{Error, Result};
use crate::placement::{compaction, gc};
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
        let _one = self.inner.reshaping.lock();
        let r = self.region(id)?.region;
        if !r.contains(at) || at == r.start().as_slice() {
            return Err(Error::InvalidOptions(format!(
                "split key must lie inside region {id} and after its first key; it is outside or at its start"
            )));
        }
        let o = &self.inner.sh.opts;
        if at.len() > o.max_key_bytes {
            return Err(Error::KeyTooLarge { len: at.len(), limit: o.max_key_bytes });
        }
        if self.inner.regions.read().contains_key(&new_id) {
            return Err(Error::RegionExists(new_id));
        }
        self.inner.sh.check()?;
        if !r.is_backup() {
            // The bulk of L0 goes out while writes go on.
            r.flush()?;
        }
        r.set_retired(true);
        let split = self.split_retired(&r, at, new_id);
        if split.is_err() {
            r.set_retired(false);
        }
        split
    }

    /// The split once no write appends to `r` any more.
    fn split_retired(&self, r: &Arc<Region>, at: &[u8], new_id: u32) -> Result<RegionHandle> {
        let sh = r.sh().clone();
        if !r.is_backup() {
            r.flush()?;
        }
        let _gc = gc::keep_out(r);
        compaction::claim_all_levels(r)?;
        let mut w = r.w().lock();
        let v = r.view();
        if !v.mem.is_empty() || v.imm.is_some() {
            drop(w);
            compaction::release_all_levels(r);
            return Err(Error::InvalidOptions(format!("region {} took writes during its split", r.id())));
        }
        if let Err(e) = r.write_out(&mut w) {
            compaction::release_all_levels(r);
            return Err(e);
        }
        // The split takes an LSN of its own: its range deletes hide everything before it, and
        // both halves write after it.
        let lsn = w.next_lsn;
        let mut edits = Vec::new();
        if let Some((seg, _)) = w.large.seg {
            // Neither half writes the parent's large-log tail again: what it holds is known.
            let fill = (sh.dev.seg_bytes() as usize).saturating_sub(w.large.remaining()) as u32;
            edits.push(Edit::LogSeal { log: LogKind::Large, seg, max_lsn: w.large.last_lsn });
            edits.push(Edit::LogFill { log: LogKind::Large, seg, bytes: fill });
        }
        let past = vec![u8::MAX; sh.opts.max_key_bytes + 1];
        let split = Edit::Split { parent: r.id(), at: at.to_vec(), lsn, past };
        let committed = sh.manifest.commit(r.id(), &edits).and_then(|_| sh.manifest.commit(new_id, &[split]));
        if let Err(e) = committed {
            drop(w);
            compaction::release_all_levels(r);
            return sh.fail(e);
        }
        // The old object's levels stay claimed for good: it is about to be replaced. Its
        // readers keep their views; segments the halves free are not reused before the last
        // of those views is gone (with the old object).
        let pin = sh.alloc.pin();
        r.view().on_release(Box::new(move || drop(pin)));
        let halves = [r.id(), new_id].map(|id| {
            let meta = sh.manifest.region(id).ok_or(Error::NoSuchRegion(id))?;
            Ok(Arc::new(Region::new(id, &meta, sh.clone(), Memtable::new(), lsn + 1)))
        });
        let [parent, child] = halves;
        let (parent, child) = (parent?, child?);
        self.install_regions(vec![parent, child.clone()], &[]);
        sh.counters.splits.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        drop(w);
        Ok(RegionHandle { region: child })
    }
}
