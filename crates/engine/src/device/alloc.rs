//! Segment allocator. Its state is never persisted on its own: at open it is derived from
//! the catalog (every segment a catalog structure or the redo chain names is in use).

use crate::device::Device;
use crate::error::{Error, Result};
use parking_lot::Mutex;
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

/// Who asks for a segment. Client writes may not dip into the reserve that keeps
/// compaction and the catalog able to make progress when the device is nearly full, and
/// compaction may not take the last segments, which the catalog needs to checkpoint (also
/// at the next open).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Purpose {
    Writes,
    Background,
    Catalog,
}

/// A segment whose blocks the file system could not give back (it is full).
const NO_BLOCKS: Error = Error::NoSpace { what: "the file system has no free blocks for a segment" };

/// Segments only the catalog may take.
const CATALOG_RESERVE: u64 = 2;

struct Inner {
    /// Free segments whose blocks are allocated.
    free: BTreeSet<u32>,
    /// Free segments whose blocks went back to the file system.
    holes: BTreeSet<u32>,
    /// Segments (in use or free) whose unused tail went back to the file system.
    partial: BTreeSet<u32>,
    /// Segments the data file currently spans.
    file_segments: u64,
    used: u64,
    /// Copies in progress (checkpoints, backups): while any is, released segments wait in
    /// `deferred` instead of being reused or given back, so that a copy reads what it captured.
    pins: usize,
    deferred: Vec<u32>,
    /// Releases a segment still waits for before it is free, beyond the one of the region
    /// that drops it last (see [`Allocator::hold`]).
    holds: HashMap<u32, u32>,
}

pub(crate) struct Allocator {
    device: Arc<Device>,
    inner: Mutex<Inner>,
    max_segments: u64,
    reserve: u64,
}

const GROW_STEP: u64 = 32;
/// Free segments kept with their blocks allocated, at least: most are taken again soon (by
/// the next compaction's output), and allocating blocks again costs a system call. 16 held
/// 1.4% of SD's space after Run A (4M records); 8 gave the same throughput in two A/B pairs.
const MIN_POOL: usize = 8;

impl Allocator {
    /// `in_use` are the segments the catalog names (segment 0 is always in use).
    pub(crate) fn new(device: Arc<Device>, max_bytes: Option<u64>, in_use: &BTreeSet<u32>) -> Result<Allocator> {
        let seg = device.seg_bytes();
        let disk_segments = device.len()?.div_ceil(seg).max(1);
        let file_segments = disk_segments;
        let max_segments = max_bytes.map_or(u32::MAX as u64, |m| (m / seg).min(u32::MAX as u64));
        let reserve = if max_bytes.is_some() { (max_segments / 20).max(4) } else { 0 };
        let mut free = BTreeSet::new();
        let mut used = 0;
        for s in 1..file_segments as u32 {
            if in_use.contains(&s) {
                used += 1;
            } else {
                free.insert(s);
            }
        }
        // Segments named by the catalog beyond the end of the file (never written) still count.
        let file_segments = in_use.iter().next_back().map_or(file_segments, |&m| file_segments.max(m as u64 + 1));
        used += in_use.iter().filter(|&&s| s as u64 >= disk_segments).count() as u64;
        let a = Allocator {
            device,
            inner: Mutex::new(Inner {
                free,
                holes: BTreeSet::new(),
                partial: BTreeSet::new(),
                file_segments,
                used: used + 1,
                pins: 0,
                deferred: Vec::new(),
                holds: HashMap::new(),
            }),
            max_segments,
            reserve,
        };
        a.shrink_pool(&mut a.inner.lock());
        Ok(a)
    }

    pub(crate) fn alloc(&self, purpose: Purpose) -> Result<u32> {
        let mut g = self.inner.lock();
        let headroom = (g.free.len() + g.holes.len()) as u64 + self.max_segments.saturating_sub(g.file_segments);
        let need = match purpose {
            Purpose::Writes => self.reserve + CATALOG_RESERVE + 1,
            Purpose::Background if self.reserve > 0 => CATALOG_RESERVE + 1,
            _ => 1,
        };
        if headroom < need {
            return Err(Error::NoSpace {
                what: match purpose {
                    Purpose::Writes => "log segments",
                    Purpose::Background => "compaction output",
                    Purpose::Catalog => "catalog checkpoint",
                },
            });
        }
        if let Some(seg) = g.free.pop_first() {
            if g.partial.contains(&seg) && !self.fill(seg) {
                g.free.insert(seg);
                return Err(NO_BLOCKS);
            }
            g.partial.remove(&seg);
            g.used += 1;
            return Ok(seg);
        }
        if let Some(seg) = g.holes.pop_first() {
            if !self.fill(seg) {
                g.holes.insert(seg);
                return Err(NO_BLOCKS);
            }
            g.used += 1;
            return Ok(seg);
        }
        let grow = GROW_STEP.min(self.max_segments - g.file_segments);
        let new_len = (g.file_segments + grow) * self.device.seg_bytes();
        self.device.set_len(new_len)?;
        for s in g.file_segments..g.file_segments + grow {
            g.free.insert(s as u32);
        }
        g.file_segments += grow;
        let seg = g.free.pop_first().ok_or(Error::NoSpace { what: "segments" })?;
        g.used += 1;
        Ok(seg)
    }

    /// Gives a segment its blocks back before it is handed out (a log segment is written
    /// under the region's write lock, where allocating on the write path would stall it).
    /// False when the file system has no room left.
    fn fill(&self, seg: u32) -> bool {
        self.device.allocate(self.device.seg_base(seg), self.device.seg_bytes())
    }

    pub(crate) fn release(&self, seg: u32) {
        let mut g = self.inner.lock();
        if seg == 0 || g.free.contains(&seg) || g.holes.contains(&seg) {
            return;
        }
        if let Some(n) = g.holds.get_mut(&seg) {
            *n -= 1;
            if *n == 0 {
                g.holds.remove(&seg);
            }
            return;
        }
        if g.pins > 0 {
            g.deferred.push(seg);
            return;
        }
        g.used -= 1;
        g.free.insert(seg);
        self.shrink_pool(&mut g);
    }

    /// One more release of `seg` must come before it is free: a region dropped a segment that
    /// another still names (the halves of a split share their parent's), and the readers of
    /// the dropping region's views may still read it while the other region's views come and
    /// go. Each region releases it once its own readers are done; the last release frees it.
    pub(crate) fn hold(&self, seg: u32) {
        *self.inner.lock().holds.entry(seg).or_insert(0) += 1;
    }

    /// Keeps every segment released from now on until the returned pin is dropped.
    pub(crate) fn pin(self: &Arc<Self>) -> Pin {
        self.inner.lock().pins += 1;
        Pin(self.clone())
    }

    /// Space that stays free goes back to the file system, so that the store's size on disk
    /// follows its contents rather than its largest moment (space amplification). A pool of
    /// free segments keeps its blocks: most are taken again soon (the next compaction's
    /// output), and the reserve for compaction and the catalog must hold on a file system that
    /// others fill. It keeps a 64th of the used segments (a 32nd held 3% of SD's space after
    /// Run A). The highest segments go first, since allocation takes the lowest.
    fn shrink_pool(&self, g: &mut Inner) {
        let pool = MIN_POOL.max((g.used / 64) as usize).max((self.reserve + CATALOG_RESERVE + 1) as usize);
        while g.free.len() > pool {
            let Some(top) = g.free.pop_last() else { break };
            if !self.device.punch(self.device.seg_base(top), self.device.seg_bytes()) {
                g.free.insert(top);
                break;
            }
            g.partial.remove(&top);
            g.holes.insert(top);
        }
    }

    /// Gives back the blocks of a written segment past `used` bytes (an SST or a medium run
    /// that does not fill its segment).
    pub(crate) fn trim(&self, seg: u32, used: u64) {
        let used = used.next_multiple_of(crate::device::aligned::ALIGN as u64);
        let seg_bytes = self.device.seg_bytes();
        if used < seg_bytes && self.device.punch(self.device.seg_base(seg) + used, seg_bytes - used) {
            self.inner.lock().partial.insert(seg);
        }
    }

    /// (segments in use, segments the file spans)
    pub(crate) fn usage(&self) -> (u64, u64) {
        let g = self.inner.lock();
        (g.used, g.file_segments)
    }
}

/// See [`Allocator::pin`].
pub(crate) struct Pin(Arc<Allocator>);

impl Drop for Pin {
    fn drop(&mut self) {
        let deferred = {
            let mut g = self.0.inner.lock();
            g.pins = g.pins.saturating_sub(1);
            if g.pins > 0 {
                return;
            }
            std::mem::take(&mut g.deferred)
        };
        for seg in deferred {
            self.0.release(seg);
        }
    }
}
