//! Point reads: the newest version of a key visible at a snapshot, through L0 (its hash
//! index), the LSM bypass, the row cache and the levels (Bloom filters first); and the row
//! cache's epoch rule for this region's rows.

use crate::error::Result;
use crate::format::bloom;
use crate::format::record;
use crate::region::{value_cache_key, Region, NEXT_REGION_UID};
use crate::tree::memtable::{Entry, Memtable, Value};
use crate::tree::rowcache;
use crate::tree::sst::Sst;
use crate::tree::view::View;
use std::sync::atomic::Ordering::{Relaxed, SeqCst};
use std::sync::Arc;

impl Region {
    /// The newest entry for `key` visible at `snap` in `view` (tombstones included: a version
    /// a range delete hides comes back as a tombstone at the range delete's LSN).
    pub(crate) fn lookup(&self, view: &View, snap: u64, key: &[u8]) -> Result<Option<Entry>> {
        let e = match view.mem.get(key, snap) {
            Some(e) => Some(e),
            None => match view.imm.as_ref().and_then(|imm| imm.get(key, snap)) {
                Some(e) => Some(e),
                None => self.lookup_levels(view, key)?,
            },
        };
        let Some(e) = e else { return Ok(None) };
        let deleted = view.deleted_at(key, snap);
        if deleted > e.lsn {
            return Ok(Some(Entry { key: e.key, lsn: deleted, value: Value::Tombstone }));
        }
        Ok(Some(e))
    }

    /// Whether `key` may have an entry in a level above the deepest non-empty one, by the
    /// Bloom filters alone: false means that below L0 only the deepest level can hold it.
    pub(crate) fn may_be_above_last(&self, view: &View, key: &[u8]) -> Result<bool> {
        let levels = &view.version.levels;
        let Some(last) = levels.iter().rposition(|l| !l.is_empty()) else {
            return Ok(false);
        };
        let h = bloom::hash(key);
        for level in levels.iter().take(last) {
            if let Some(sst) = covering(level, key) {
                if sst.may_contain(&self.sh.ctx, h)? {
                    return Ok(true);
                }
            }
        }
        Ok(false)
    }

    /// The entry for `key` in the levels (L1 first).
    fn lookup_levels(&self, view: &View, key: &[u8]) -> Result<Option<Entry>> {
        let h = bloom::hash(key);
        for level in &view.version.levels {
            if let Some(sst) = covering(level, key) {
                if let Some(e) = sst.get(&self.sh.ctx, key, h)? {
                    return Ok(Some(e));
                }
            }
        }
        Ok(None)
    }

    pub(crate) fn get_at(&self, view: &View, snap: u64, key: &[u8]) -> Result<Option<Vec<u8>>> {
        if view.deleted_at(key, snap) != 0 {
            return self.get_covered(view, snap, key);
        }
        if let Some(v) = self.get_l0(view, snap, key)? {
            return Ok(v);
        }
        self.get_levels(view, key, None)
    }

    /// The value of `key` in L0 (`Some(None)`: deleted there), through its hash index, handing
    /// the value over without copying the key.
    fn get_l0(&self, view: &View, snap: u64, key: &[u8]) -> Result<Option<Option<Vec<u8>>>> {
        for m in std::iter::once(&view.mem).chain(view.imm.as_ref()) {
            if let Some(v) = m.get_value(key, snap) {
                let v = match v {
                    Value::Expiring { at, .. } if at <= self.sh.now_ms() => Value::Tombstone,
                    Value::Expiring { value, .. } => *value,
                    v => v,
                };
                return match v {
                    Value::Inline(v) => Ok(Some(Some(v))),
                    Value::Tombstone | Value::Expiring { .. } => Ok(Some(None)),
                    Value::Medium { ptr, len, salt } | Value::Large { ptr, len, salt } => {
                        self.read_value(ptr, len, salt, key).map(|v| Some(Some(v)))
                    }
                };
            }
        }
        Ok(None)
    }

    /// An upper bound of the LSN of the newest version of `key`, visible yet or not: no read
    /// of the key that returned before this call saw a newer one, and no write of it that
    /// returned has a later LSN. The key's newest entry in L0 and any range delete over it;
    /// for a key L0 does not hold (its versions all lie in the levels), the LSN before L0's
    /// oldest table. A primary waits for its backups to hold this LSN before answering a read.
    pub(crate) fn read_bound(&self, key: &[u8]) -> u64 {
        let view = self.view();
        let deleted = view.deleted_at(key, u64::MAX);
        let newest = view.mem.get(key, u64::MAX).or_else(|| view.imm.as_ref().and_then(|m| m.get(key, u64::MAX)));
        let entry = match newest {
            Some(e) => e.lsn,
            None => match view.imm.as_ref().unwrap_or(&view.mem).min_lsn() {
                Some(oldest) => oldest.saturating_sub(1),
                // L0 is empty: the levels may hold everything written.
                None => self.lsn(),
            },
        };
        entry.max(deleted)
    }

    pub(crate) fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        // The row epoch before the view (see `rowcache`), the view before the LSN: a view
        // installed after GC moved a value is only seen together with the moved entries.
        let epoch = self.row_epoch.load(SeqCst);
        let view = self.view();
        let snap = self.read_snap();
        if self.backup {
            return self.get_at(&view, snap, key);
        }
        if view.deleted_at(key, snap) != 0 {
            return self.get_covered(&view, snap, key);
        }
        if let Some(v) = self.get_l0(&view, snap, key)? {
            return Ok(v);
        }
        if let Some(v) = self.get_bypassed(key)? {
            return Ok(v);
        }
        self.get_levels(&view, key, Some(epoch))
    }

    /// The value of `key` through the LSM bypass, when it has a slot whose record is still
    /// the key's (`Some(None)`: the pair expired); None sends the read through the tree. The
    /// caller checked L0 and the range deletes first.
    fn get_bypassed(&self, key: &[u8]) -> Result<Option<Option<Vec<u8>>>> {
        let Some(slot) = self.bypass.as_ref().filter(|b| b.is_ready()).and_then(|b| b.get(key)) else {
            return Ok(None);
        };
        let c = &self.sh.counters;
        if slot.expire_at != 0 && slot.expire_at <= self.sh.now_ms() {
            return Ok(Some(None));
        }
        let ck = value_cache_key(slot.ptr, slot.salt);
        if let Some(v) = self.sh.ctx.cache.get(ck) {
            c.bypass_hits.fetch_add(1, Relaxed);
            return Ok(Some(Some(v.to_vec())));
        }
        let bytes = self.sh.ctx.dev.read(slot.ptr, slot.len as usize, crate::device::IoKind::Read)?;
        match record::decode(&bytes, Some(slot.salt)) {
            Ok(r) if r.key == key && r.lsn == slot.lsn => {
                c.bypass_hits.fetch_add(1, Relaxed);
                self.sh.ctx.cache.insert(ck, Arc::new(r.value.to_vec()));
                Ok(Some(Some(r.value.to_vec())))
            }
            _ => {
                c.bypass_fallbacks.fetch_add(1, Relaxed);
                Ok(None)
            }
        }
    }

    /// The value of a key a range delete covers: only a version newer than the delete is
    /// live, so the entry's LSN decides, and the row cache (which has no LSNs) is left out.
    fn get_covered(&self, view: &View, snap: u64, key: &[u8]) -> Result<Option<Vec<u8>>> {
        match self.lookup(view, snap, key)? {
            Some(e) => self.resolve(&e),
            None => Ok(None),
        }
    }

    /// The value of `key` and its expiry time, from the newest entry (no row cache).
    pub(crate) fn get_with_expiry(&self, key: &[u8]) -> Result<Option<(Vec<u8>, u64)>> {
        let view = self.view();
        let snap = self.read_snap();
        let Some(e) = self.lookup(&view, snap, key)? else { return Ok(None) };
        Ok(self.resolve(&e)?.map(|v| (v, e.value.expire_at())))
    }

    /// The value of `key` in the levels. With the row epoch taken before `view`, through the
    /// row cache (see `rowcache`); without, as of `view` only (snapshots, backups).
    fn get_levels(&self, view: &View, key: &[u8], row_epoch: Option<u64>) -> Result<Option<Vec<u8>>> {
        let cache = &self.sh.ctx.cache;
        let rk = row_epoch.map(|_| rowcache::row_key(self.uid.load(SeqCst), key));
        if let Some(row) = rk.and_then(|rk| cache.get(rk)) {
            if let Some(v) = rowcache::value_of(&row, key) {
                return Ok(Some(v.to_vec()));
            }
        }
        let Some(e) = self.lookup_levels(view, key)? else {
            return Ok(None);
        };
        let value = self.resolve(&e)?;
        // A pair that expires is not cached as a row: the row would outlive it.
        let rk = rk.filter(|_| e.value.expire_at() == 0);
        if let (Some(v), Some(rk), Some(epoch)) = (&value, rk, row_epoch) {
            let _gate = self.row_gate.read();
            if self.row_epoch.load(SeqCst) == epoch {
                cache.insert(rk, Arc::new(rowcache::encode(key, v)));
            }
        }
        Ok(value)
    }

    /// Makes every cached row unreachable: a range delete that stops hiding its keys (they
    /// left the tree) must not let rows cached before it come back. Rows cached under the old
    /// identity age out of the cache.
    pub(crate) fn forget_rows(&self) {
        let _gate = self.row_gate.write();
        self.row_epoch.fetch_add(1, SeqCst);
        self.uid.store(NEXT_REGION_UID.fetch_add(1, Relaxed), SeqCst);
    }

    /// Before an L0->L1 compaction makes its output visible: the rows of the keys it moves
    /// out of L0 may hold older values. A cached row takes the table's value where it is at
    /// hand (so hot keys stay cached across compactions) and goes otherwise.
    pub(crate) fn refresh_rows(&self, table: &Memtable) {
        {
            let _gate = self.row_gate.write();
            self.row_epoch.fetch_add(1, SeqCst);
        }
        let cache = &self.sh.ctx.cache;
        table.for_each_newest(|k, v| {
            // A split's half shares its parent's table: the other half's keys are not its own.
            if !self.contains(k) {
                return;
            }
            let rk = rowcache::row_key(self.uid.load(SeqCst), k);
            match v {
                Value::Inline(v) => cache.refresh(rk, Arc::new(rowcache::encode(k, v))),
                _ => cache.remove(rk),
            }
        });
    }
}

/// The SST of a level (sorted, disjoint) whose key range holds `key`.
fn covering<'a>(level: &'a [Arc<Sst>], key: &[u8]) -> Option<&'a Arc<Sst>> {
    let i = level.partition_point(|s| s.info.last_key.as_slice() < key);
    level.get(i).filter(|s| s.info.first_key.as_slice() <= key)
}
