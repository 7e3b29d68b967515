//! Views: what a reader sees (L0 tables and levels), and deferred release of segments.
//!
//! Every change of the tree installs a new view. A segment the change frees is attached to
//! the view it replaced. Each view holds the next newer one, so a view is dropped only after
//! every older view is: a segment is reused only once no reader, iterator or snapshot that
//! could see it remains.

use crate::catalog::{Edit, RegionMeta};
use crate::device::alloc::Allocator;
use crate::format::rangedel::{self, RangeDel};
use crate::tree::memtable::Memtable;
use crate::tree::sst::Sst;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

/// What a region's range deletes let go: `hidden`, the SSTs one of them hides whole (every key
/// inside its range, every version older than it), freed without a merge; `blocking`, the
/// other SSTs that may still hold a version one of them hides (they reach into its range, hold
/// versions older than it, and no merge applied it to them), rewritten to let it go; `drops`,
/// the LSNs of those that hide nothing once `hidden` is gone. SSTs are given with the index of
/// their level.
#[derive(Default)]
pub(crate) struct RangeReclaim {
    pub hidden: Vec<(usize, Arc<Sst>)>,
    pub blocking: Vec<(usize, Arc<Sst>)>,
    pub drops: Vec<u64>,
}

/// The levels of a region: `levels[0]` is L1. Each level is sorted by key and non-overlapping.
#[derive(Default, Clone)]
pub(crate) struct Version {
    pub levels: Vec<Vec<Arc<Sst>>>,
    /// Range deletes that left L0 (the catalog's), by LSN.
    pub range_dels: Vec<RangeDel>,
}

impl Version {
    pub(crate) fn level_bytes(&self, i: usize) -> (u64, u64) {
        self.levels
            .get(i)
            .map_or((0, 0), |l| l.iter().fold((0, 0), |(s, f), t| (s + t.info.stored_bytes, f + t.info.full_bytes)))
    }

    /// The levels `meta` describes, reusing this version's SST objects (their cached index
    /// nodes and filters) for the SSTs it still names unchanged.
    pub(crate) fn rebuilt(&self, meta: &RegionMeta) -> Version {
        let old: HashMap<u32, &Arc<Sst>> = self.levels.iter().flatten().map(|s| (s.info.seg, s)).collect();
        let levels = meta
            .levels
            .iter()
            .map(|l| {
                l.iter()
                    .map(|i| match old.get(&i.seg) {
                        Some(s) if s.info == *i => Arc::clone(s),
                        _ => Arc::new(Sst::new(i.clone())),
                    })
                    .collect()
            })
            .collect();
        Version { levels, range_dels: meta.range_dels.clone() }
    }

    /// This version with the SST edits of a committed list applied, as the catalog applies
    /// them (`RegionMeta::apply`): an SST added is taken from `made` (built with its image),
    /// else from this version (a move between levels), else opened from its description.
    pub(crate) fn apply(&self, edits: &[Edit], made: &[Arc<Sst>]) -> Version {
        let mut levels = self.levels.clone();
        let mut range_dels = self.range_dels.clone();
        let known: HashMap<u32, Arc<Sst>> =
            self.levels.iter().flatten().chain(made).map(|s| (s.info.seg, Arc::clone(s))).collect();
        for e in edits {
            match e {
                Edit::RemoveSst { level, seg } => {
                    if let Some(lv) = levels.get_mut(level.index()) {
                        lv.retain(|s| s.info.seg != *seg);
                    }
                }
                Edit::AddSst { level, sst } => {
                    while levels.len() < level.get() {
                        levels.push(Vec::new());
                    }
                    let s = match known.get(&sst.seg) {
                        Some(s) if s.info == *sst => Arc::clone(s),
                        _ => Arc::new(Sst::new(sst.clone())),
                    };
                    if let Some(lv) = levels.get_mut(level.index()) {
                        let at = lv.partition_point(|x| x.info.first_key < s.info.first_key);
                        lv.insert(at, s);
                    }
                }
                Edit::AddRangeDel { start, end, lsn } => {
                    rangedel::add(&mut range_dels, RangeDel { start: start.clone(), end: end.clone(), lsn: *lsn })
                }
                Edit::DropRangeDel { lsn } => range_dels.retain(|d| d.lsn != *lsn),
                _ => {}
            }
        }
        Version { levels, range_dels }
    }

    /// What the levels' range deletes let go, and what keeps them (see [`RangeReclaim`]).
    pub(crate) fn range_reclaim(&self) -> RangeReclaim {
        let mut out = RangeReclaim::default();
        if self.range_dels.is_empty() {
            return out;
        }
        let mut blocked = vec![false; self.range_dels.len()];
        for (i, level) in self.levels.iter().enumerate() {
            for s in level {
                let (first, last) = (&s.info.first_key, &s.info.last_key);
                if self.range_dels.iter().any(|d| d.lsn > s.info.max_lsn && d.holds(first, last)) {
                    out.hidden.push((i, Arc::clone(s)));
                    continue;
                }
                let mut blocks = false;
                for (d, b) in self.range_dels.iter().zip(blocked.iter_mut()) {
                    // It may hold a version the delete hides: older than it, not cleaned by it.
                    if s.info.min_lsn < d.lsn && s.info.range_lsn < d.lsn && d.overlaps(first, last) {
                        *b = true;
                        blocks = true;
                    }
                }
                if blocks {
                    out.blocking.push((i, Arc::clone(s)));
                }
            }
        }
        out.drops = self.range_dels.iter().zip(blocked).filter(|(_, b)| !b).map(|(d, _)| d.lsn).collect();
        out
    }

    /// 1-based number of the deepest level holding data (0 when there is none).
    pub(crate) fn deepest(&self) -> usize {
        self.levels.iter().rposition(|l| !l.is_empty()).map_or(0, |i| i + 1)
    }
}

pub(crate) struct View {
    pub mem: Arc<Memtable>,
    pub imm: Option<Arc<Memtable>>,
    pub version: Arc<Version>,
    next: OnceLock<Arc<View>>,
    free_on_drop: Mutex<Vec<u32>>,
    /// Work that may run only once no reader of this view or an older one remains.
    on_drop: Mutex<Vec<Box<dyn FnOnce() + Send>>>,
    alloc: Arc<Allocator>,
}

impl View {
    pub(crate) fn new(
        mem: Arc<Memtable>,
        imm: Option<Arc<Memtable>>,
        version: Arc<Version>,
        alloc: Arc<Allocator>,
    ) -> View {
        View {
            mem,
            imm,
            version,
            next: OnceLock::new(),
            free_on_drop: Mutex::new(Vec::new()),
            on_drop: Mutex::new(Vec::new()),
            alloc,
        }
    }

    /// The LSN of the newest range delete a reader at `snap` sees over `key`; 0 for none.
    pub(crate) fn deleted_at(&self, key: &[u8], snap: u64) -> u64 {
        let mut at = rangedel::deleted_at(&self.version.range_dels, key, snap);
        for m in std::iter::once(&self.mem).chain(self.imm.as_ref()) {
            if let Some(d) = m.range_dels() {
                at = at.max(rangedel::deleted_at(&d, key, snap));
            }
        }
        at
    }

    /// Every range delete a reader at `snap` sees (L0's and the levels').
    pub(crate) fn range_dels(&self, snap: u64) -> Vec<RangeDel> {
        let mut out: Vec<RangeDel> = self.version.range_dels.iter().filter(|d| d.lsn <= snap).cloned().collect();
        for m in std::iter::once(&self.mem).chain(self.imm.as_ref()) {
            if let Some(d) = m.range_dels() {
                out.extend(d.iter().filter(|d| d.lsn <= snap).cloned());
            }
        }
        out
    }

    /// A new view of the same tables and levels (for a change that frees segments or releases
    /// work only once the readers of this one are gone).
    pub(crate) fn renewed(&self) -> View {
        View::new(self.mem.clone(), self.imm.clone(), self.version.clone(), self.alloc.clone())
    }

    /// Links `self` (the view being replaced) to its successor and hands it the segments the
    /// change freed.
    pub(crate) fn retire(&self, next: Arc<View>, freed: Vec<u32>) {
        self.free_on_drop.lock().extend(freed);
        let _ = self.next.set(next);
    }

    /// Runs `f` once no reader of this view or an older one remains.
    pub(crate) fn on_release(&self, f: Box<dyn FnOnce() + Send>) {
        self.on_drop.lock().push(f);
    }

    fn release(&mut self) {
        for s in self.free_on_drop.get_mut().drain(..) {
            self.alloc.release(s);
        }
        for f in self.on_drop.get_mut().drain(..) {
            f();
        }
    }
}

impl Drop for View {
    fn drop(&mut self) {
        self.release();
        // Unlink the chain iteratively so a long chain cannot overflow the stack.
        let mut next = self.next.take();
        while let Some(v) = next {
            match Arc::try_unwrap(v) {
                Ok(mut v) => {
                    next = v.next.take();
                    v.release();
                }
                Err(_) => break,
            }
        }
    }
}
