//! Scans: one source per L0 table and per level, merged in key order (or reverse); only the
//! winning version of a key has its value fetched.

#![expect(
    clippy::indexing_slicing,
    reason = "merge sources are indexed by positions this iterator keeps within its source list"
)]

use crate::error::Result;
use crate::format::rangedel::{self, RangeDel};
use crate::region::Region;
use crate::tree::memtable::{Entry, Memtable, Value};
use crate::tree::sst::Sst;
use crate::tree::view::View;
use std::cmp::Ordering;
use std::collections::VecDeque;
use std::ops::Bound;
use std::sync::Arc;

const MEM_BATCH: usize = 256;
const MEM_FIRST_BATCH: usize = 8;
/// Pairs gathered before their log values are read together, for a scan of unknown length;
/// it doubles up to [`MAX_VALUE_BATCH`]. A scan with a limit gathers up to the limit at once.
const FIRST_VALUE_BATCH: usize = 16;
const MAX_VALUE_BATCH: usize = 256;
/// Log value bytes one batch reads at most (values reach a segment's size).
const MAX_BATCH_BYTES: usize = 4 << 20;

/// A key, the LSN of its live version, and its value.
pub type Versioned = (Vec<u8>, u64, Vec<u8>);

enum Src {
    /// `want`: entries the next batch copies out of the table. It starts small and doubles:
    /// a short scan (YCSB E: 1..100 pairs) takes a handful of entries from an L0 table that
    /// holds a sliver of the key space, and copying a full batch of 256 (a value allocation
    /// each) was most of its CPU.
    Mem {
        mt: Arc<Memtable>,
        resume: Option<Vec<u8>>,
        want: usize,
    },
    Level {
        ssts: Vec<Arc<Sst>>,
        pos: Option<(usize, u32)>,
    },
}

struct Source {
    src: Src,
    buf: VecDeque<Entry>,
    done: bool,
}

fn before(b: &Bound<Vec<u8>>, k: &[u8]) -> bool {
    // true if k is below the lower bound
    match b {
        Bound::Included(x) => k < x.as_slice(),
        Bound::Excluded(x) => k <= x.as_slice(),
        Bound::Unbounded => false,
    }
}

fn after(b: &Bound<Vec<u8>>, k: &[u8]) -> bool {
    match b {
        Bound::Included(x) => k > x.as_slice(),
        Bound::Excluded(x) => k >= x.as_slice(),
        Bound::Unbounded => false,
    }
}

/// The key of a bound (empty for none).
fn bound_key(b: &Bound<Vec<u8>>) -> &[u8] {
    match b {
        Bound::Included(x) | Bound::Excluded(x) => x,
        Bound::Unbounded => &[],
    }
}

fn as_ref(b: &Bound<Vec<u8>>) -> Bound<&[u8]> {
    match b {
        Bound::Included(x) => Bound::Included(x),
        Bound::Excluded(x) => Bound::Excluded(x),
        Bound::Unbounded => Bound::Unbounded,
    }
}

/// An ordered iterator over one region as of a snapshot.
pub(crate) struct RegionScan {
    region: Arc<Region>,
    _view: Arc<View>,
    snap: u64,
    /// The clock as the scan started: pairs expired by then are not returned.
    now: u64,
    /// The range deletes the snapshot sees that overlap the scan's bounds.
    dels: Vec<RangeDel>,
    lo: Bound<Vec<u8>>,
    hi: Bound<Vec<u8>>,
    reverse: bool,
    sources: Vec<Source>,
    failed: bool,
    /// Pairs merged and resolved, not yet handed out.
    ready: VecDeque<Versioned>,
    /// Size of the next batch of pairs whose values are read together.
    batch: usize,
    /// Pairs the caller may still take (its limit), as far as known.
    limit: usize,
    /// An error met while gathering a batch, reported after the pairs before it.
    pending_err: Option<crate::error::Error>,
    /// Keys left out before their values are read (see [`VersionedScan::skipping`]).
    skip: Option<KeySkip>,
}

/// Which keys a scan leaves out unread.
pub type KeySkip = Box<dyn Fn(&[u8]) -> bool + Send>;

impl RegionScan {
    pub(crate) fn new(
        region: Arc<Region>,
        view: Arc<View>,
        snap: u64,
        lo: Bound<Vec<u8>>,
        hi: Bound<Vec<u8>>,
        reverse: bool,
        limit: Option<usize>,
    ) -> RegionScan {
        let mut sources = vec![Source {
            src: Src::Mem { mt: view.mem.clone(), resume: None, want: MEM_FIRST_BATCH },
            buf: VecDeque::new(),
            done: false,
        }];
        if let Some(imm) = &view.imm {
            sources.push(Source {
                src: Src::Mem { mt: imm.clone(), resume: None, want: MEM_FIRST_BATCH },
                buf: VecDeque::new(),
                done: false,
            });
        }
        for l in &view.version.levels {
            if !l.is_empty() {
                sources.push(Source {
                    src: Src::Level { ssts: l.clone(), pos: None },
                    buf: VecDeque::new(),
                    done: false,
                });
            }
        }
        let batch = limit.map_or(FIRST_VALUE_BATCH, |l| l.clamp(1, MAX_VALUE_BATCH));
        let mut dels = view.range_dels(snap);
        // Only those that can hide a key of the scan (one whose end is at or below the lower
        // bound cannot).
        dels.retain(|d| !after(&hi, &d.start) && d.end.as_slice() > bound_key(&lo));
        RegionScan {
            dels,
            now: region.sh.now_ms(),
            region,
            _view: view,
            snap,
            lo,
            hi,
            reverse,
            sources,
            failed: false,
            ready: VecDeque::new(),
            batch,
            limit: limit.unwrap_or(usize::MAX),
            pending_err: None,
            skip: None,
        }
    }

    fn fill(&mut self, i: usize) -> Result<()> {
        let (lo, hi, rev, snap) = (&self.lo, &self.hi, self.reverse, self.snap);
        let ctx = &self.region.sh.ctx;
        let s = &mut self.sources[i];
        while s.buf.is_empty() && !s.done {
            match &mut s.src {
                Src::Mem { mt, resume, want } => {
                    let (from, end) = if rev { (hi, lo) } else { (lo, hi) };
                    let from = resume.as_ref().map_or(as_ref(from), |k| Bound::Excluded(k.as_slice()));
                    let batch = mt.batch(from, as_ref(end), snap, rev, *want);
                    if batch.len() < *want {
                        s.done = true;
                    }
                    *want = (*want * 2).min(MEM_BATCH);
                    *resume = batch.last().map(|e| e.key.clone());
                    s.buf.extend(batch);
                }
                Src::Level { ssts, pos } => {
                    let next = match *pos {
                        None => {
                            if !rev {
                                let i = match lo {
                                    Bound::Unbounded => 0,
                                    Bound::Included(k) | Bound::Excluded(k) => {
                                        ssts.partition_point(|s| s.info.last_key < *k)
                                    }
                                };
                                match ssts.get(i) {
                                    None => None,
                                    Some(sst) => Some((
                                        i,
                                        match lo {
                                            Bound::Unbounded => 0,
                                            Bound::Included(k) | Bound::Excluded(k) => sst.leaf_for(ctx, k)?,
                                        },
                                    )),
                                }
                            } else {
                                let i = match hi {
                                    Bound::Unbounded => ssts.len(),
                                    Bound::Included(k) | Bound::Excluded(k) => {
                                        ssts.partition_point(|s| s.info.first_key <= *k)
                                    }
                                };
                                match i.checked_sub(1) {
                                    None => None,
                                    Some(i) => Some((
                                        i,
                                        match hi {
                                            Bound::Unbounded => ssts[i].info.leaf_count.saturating_sub(1),
                                            Bound::Included(k) | Bound::Excluded(k) => ssts[i].leaf_for(ctx, k)?,
                                        },
                                    )),
                                }
                            }
                        }
                        Some((i, leaf)) => {
                            if !rev {
                                if leaf + 1 < ssts[i].info.leaf_count {
                                    Some((i, leaf + 1))
                                } else if i + 1 < ssts.len() {
                                    Some((i + 1, 0))
                                } else {
                                    None
                                }
                            } else if leaf > 0 {
                                Some((i, leaf - 1))
                            } else if i > 0 {
                                Some((i - 1, ssts[i - 1].info.leaf_count.saturating_sub(1)))
                            } else {
                                None
                            }
                        }
                    };
                    let Some((i, leaf)) = next else {
                        s.done = true;
                        break;
                    };
                    *pos = Some((i, leaf));
                    let (mut entries, beyond) = ssts[i].leaf_entries_in(ctx, leaf, as_ref(lo), as_ref(hi), rev)?;
                    if rev {
                        entries.reverse();
                    }
                    // The leaf reaches past the scan's far bound: later leaves are all outside.
                    if beyond {
                        s.done = true;
                    }
                    s.buf.extend(entries.into_iter().filter(|e| !before(lo, &e.key) && !after(hi, &e.key)));
                }
            }
        }
        Ok(())
    }

    /// The next live pair, with the LSN of its version. Pairs are merged a batch at a time and
    /// the batch's log values read together (only the winning version's value is fetched).
    pub(crate) fn step(&mut self) -> Result<Option<Versioned>> {
        if let Some(v) = self.ready.pop_front() {
            return Ok(Some(v));
        }
        if let Some(e) = self.pending_err.take() {
            return Err(e);
        }
        let want = self.batch.min(self.limit).max(1);
        let mut batch = Vec::with_capacity(want);
        let mut bytes = 0;
        while batch.len() < want && bytes < MAX_BATCH_BYTES {
            match self.next_entry() {
                Ok(Some(e)) if self.skip.as_ref().is_some_and(|f| f(&e.key)) => {}
                Ok(Some(e)) => {
                    if let Value::Medium { len, .. } | Value::Large { len, .. } = e.value.base() {
                        bytes += *len as usize;
                    }
                    batch.push(e);
                }
                Ok(None) => break,
                Err(e) if batch.is_empty() => return Err(e),
                Err(e) => {
                    self.pending_err = Some(e);
                    break;
                }
            }
        }
        if batch.is_empty() {
            return Ok(None);
        }
        self.limit = self.limit.saturating_sub(batch.len());
        self.batch = (self.batch * 2).min(MAX_VALUE_BATCH);
        let (resolved, err) = self.region.resolve_many(batch);
        for (e, v) in resolved {
            self.ready.push_back((e.key, e.lsn, v));
        }
        if let Some(e) = err {
            // Reported at its place: after the pairs before it, instead of any after it.
            self.pending_err = Some(e);
        }
        match self.ready.pop_front() {
            Some(v) => Ok(Some(v)),
            None => self.pending_err.take().map_or(Ok(None), Err),
        }
    }

    /// The next live entry in scan order (value not yet resolved).
    fn next_entry(&mut self) -> Result<Option<Entry>> {
        loop {
            let mut best: Option<usize> = None;
            for i in 0..self.sources.len() {
                self.fill(i)?;
                let Some(h) = self.sources[i].buf.front() else {
                    continue;
                };
                best = match best {
                    None => Some(i),
                    Some(b) => {
                        let bk = &self.sources[b].buf[0].key;
                        let ord = h.key.cmp(bk);
                        let wins = if self.reverse { ord == Ordering::Greater } else { ord == Ordering::Less };
                        if wins {
                            Some(i)
                        } else {
                            Some(b)
                        }
                    }
                };
            }
            let Some(b) = best else { return Ok(None) };
            let Some(e) = self.sources[b].buf.pop_front() else {
                return Ok(None);
            };
            for s in &mut self.sources {
                if s.buf.front().is_some_and(|h| h.key == e.key) {
                    s.buf.pop_front();
                }
            }
            if e.value.is_gone(self.now) || rangedel::hides(&self.dels, &e.key, e.lsn, self.snap) {
                continue;
            }
            return Ok(Some(e));
        }
    }
}

impl Iterator for RegionScan {
    type Item = Result<(Vec<u8>, Vec<u8>)>;
    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        match self.step() {
            Ok(x) => x.map(|(k, _, v)| Ok((k, v))),
            Err(e) => {
                self.failed = true;
                Some(Err(e))
            }
        }
    }
}

/// A scan of one region that also yields each pair's version (the LSN that wrote it).
pub struct VersionedScan(pub(crate) RegionScan);

impl VersionedScan {
    /// Leaves out the keys `skip` names without reading their values: a caller that overlays
    /// newer versions of its own (a backup's replicated logs) must not read what they
    /// supersede, which may point into log segments already collected.
    pub fn skipping(mut self, skip: KeySkip) -> VersionedScan {
        self.0.skip = Some(skip);
        self
    }
}

impl Iterator for VersionedScan {
    type Item = Result<Versioned>;
    fn next(&mut self) -> Option<Self::Item> {
        if self.0.failed {
            return None;
        }
        match self.0.step() {
            Ok(x) => x.map(Ok),
            Err(e) => {
                self.0.failed = true;
                Some(Err(e))
            }
        }
    }
}
