//! Views: what a reader sees (L0 tables and levels), and deferred release of segments.
//!
//! Every change of the tree installs a new view. A segment the change frees is attached to
//! the view it replaced. Each view holds the next newer one, so a view is dropped only after
//! every older view is: a segment is reused only once no reader, iterator or snapshot that
//! could see it remains.

use crate::catalog::{Edit, RegionMeta};
use crate::device::alloc::Allocator;
use crate::tree::memtable::Memtable;
use crate::tree::sst::Sst;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

/// The levels of a region: `levels[0]` is L1. Each level is sorted by key and non-overlapping.
#[derive(Default, Clone)]
pub(crate) struct Version {
    pub levels: Vec<Vec<Arc<Sst>>>,
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
        Version { levels }
    }

    /// This version with the SST edits of a committed list applied, as the catalog applies
    /// them (`RegionMeta::apply`): an SST added is taken from `made` (built with its image),
    /// else from this version (a move between levels), else opened from its description.
    pub(crate) fn apply(&self, edits: &[Edit], made: &[Arc<Sst>]) -> Version {
        let mut levels = self.levels.clone();
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
                _ => {}
            }
        }
        Version { levels }
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
