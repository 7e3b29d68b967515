//! Garbage collection of the large log: when its invalid bytes pass the threshold, the
//! segments with the most invalid bytes have their still-valid pairs re-appended and are
//! freed whole.
//!
//! Which records are still valid: compactions record the exact records they supersede
//! (`DeadRecords`), so a record is valid when it is not among them and L0 holds no newer
//! write of its key. An index lookup per record (the Parallax paper's "lookup cost": a leaf
//! read for most of them) is only needed where that record may be incomplete: segments
//! written before a restart or before a promotion.

use crate::catalog::Edit;
use crate::catalog::LogKind;
use crate::device::aligned::AlignedBuf;
use crate::device::IoKind;
use crate::error::Result;
use crate::format::record::{self, KIND_PUT};
use crate::region::write::Op;
use crate::region::{value_cache_key, Region};
use crate::tree::memtable::{Entry, Memtable, Value};
use crate::tree::view::View;
use parking_lot::MutexGuard;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

/// One pass over a region: reclaims every candidate segment. Returns how many were freed.
pub(crate) fn run(r: &Region) -> Result<usize> {
    if r.is_backup() || r.sh().is_poisoned() {
        return Ok(0);
    }
    let _g = keep_out(r);
    // A region object a split, a merge or a change of role replaced: a pass that listed it
    // before must not move records into it or drop segments its successor's catalog names.
    // A fenced one takes no LSN until its handoff ends.
    if r.is_retired() || r.is_fenced() {
        return Ok(0);
    }
    let Some(meta) = r.sh().manifest.region(r.id()) else {
        return Ok(0);
    };
    r.sh().counters.gc_runs.fetch_add(1, Relaxed);
    let seg_bytes = r.sh().dev.seg_bytes();
    let tail = r.large_tail_seg();
    let mut candidates: Vec<(u64, crate::catalog::LogSeg)> = meta
        .log(LogKind::Large)
        .iter()
        // A segment holding records L1 does not cover yet stays (see `reclaim`); one the tail
        // has left is sealed at its last record, so it is known without reading it.
        .filter(|s| Some(s.seg) != tail && (s.sealed == u64::MAX || s.sealed <= meta.l1_lsn))
        .map(|s| (meta.large_garbage.get(&s.seg).copied().unwrap_or(0), s.clone()))
        .collect();
    // Without resumed logs (a replicated node) only invalid bytes count (see the option).
    let leftovers = r.sh().opts.resume_logs;
    if leftovers {
        survey(r, &mut candidates)?;
    }
    let partly = |s: &crate::catalog::LogSeg| leftovers && s.partly_filled(seg_bytes);
    let live = |c: &(u64, crate::catalog::LogSeg)| c.1.written(seg_bytes).saturating_sub(c.0);
    // What a segment wastes: its invalid bytes and, when the log left it partly filled (as
    // stores of format 1 left one per restart), the bytes it never wrote. The few bytes a full
    // segment leaves at its end do not count: a segment without invalid bytes is never moved
    // for them.
    let waste =
        |c: &(u64, crate::catalog::LogSeg)| c.0 + if partly(&c.1) { seg_bytes - c.1.written(seg_bytes) } else { 0 };
    // A partly filled segment with few live bytes is worth taking whatever the rest of the log
    // holds: moving them frees a whole segment.
    let few = |c: &(u64, crate::catalog::LogSeg)| partly(&c.1) && live(c) < seg_bytes / FEW_LIVE;
    let total = candidates.len() as u64 * seg_bytes;
    let mut wasted: u64 = candidates.iter().map(waste).sum();
    // The bound is on the segments L1 covers: their wasted bytes may reach `gc_threshold` of
    // them. Reaching it starts a pass that takes the segments that waste the most first (of a
    // partly filled one, the largest share of its written bytes invalid or never written), down
    // to `LOW_WATER` of the bound. Under skewed updates the invalid bytes gather in few segments, so this moves far
    // fewer valid pairs than collecting every segment once it passes the threshold (a segment
    // at 10% invalid costs 90% of a segment in moves) for the same bound.
    let limit = r.sh().opts.gc_threshold * total as f64;
    let over = wasted > 0 && r.sh().opts.gc_threshold < 1.0 && (wasted as f64) >= limit;
    if !over && !candidates.iter().any(few) {
        return Ok(0);
    }
    candidates.sort_by_key(|c| std::cmp::Reverse(waste(c)));
    let mut freed = 0;
    for c in candidates {
        let take = few(&c) || (over && waste(&c) > 0 && (wasted as f64) > limit * LOW_WATER);
        if !take {
            continue;
        }
        if reclaim(r, c.1.seg, c.1.salt, c.1.sealed, meta.l1_lsn)? {
            freed += 1;
            wasted -= waste(&c);
        }
    }
    Ok(freed)
}

/// Keeps GC out of `r` while the guard lives (a pass holds it too).
pub(crate) fn keep_out(r: &Region) -> MutexGuard<'_, ()> {
    r.gc_state().lock.lock()
}

/// A partly filled segment with fewer live bytes than this share of a segment is taken by any
/// pass.
const FEW_LIVE: u64 = 16;

/// Segments whose fill is not known (written by a store of format 1, or received by a backup
/// before its promotion) read per pass to learn it.
const SURVEY_PER_PASS: usize = 16;

/// Learns the fill of up to [`SURVEY_PER_PASS`] candidates that lack it (one read each, once
/// per segment: the fill is committed).
fn survey(r: &Region, candidates: &mut [(u64, crate::catalog::LogSeg)]) -> Result<()> {
    let dev = &r.sh().dev;
    let mut edits = Vec::new();
    for (_, s) in candidates.iter_mut().filter(|c| c.1.fill.is_none()).take(SURVEY_PER_PASS) {
        let mut img = AlignedBuf::new(dev.seg_bytes() as usize);
        dev.read_into(dev.seg_base(s.seg), &mut img, IoKind::Gc)?;
        let (records, _) = record::scan_checked(&img, s.salt);
        let fill = record::end_through(records.iter().map(|(o, rec)| (*o, rec.len, rec.lsn)), s.sealed);
        s.fill = Some(fill as u32);
        edits.push(Edit::LogFill { log: LogKind::Large, seg: s.seg, bytes: fill as u32 });
    }
    if !edits.is_empty() {
        if let Err(e) = r.sh().manifest.commit(r.id(), &edits) {
            return r.sh().fail(e);
        }
    }
    Ok(())
}

/// Where a pass stops, as a fraction of the bound. Collecting just below the bound rather than
/// down to half of it leaves the invalid bytes longer where they are, so that more of them
/// gather in the segments a pass then takes. Run A, 4M records, one run each (half / 0.9): SD
/// moved 1.05 / 0.55 GB at 123k / 154k ops/s, LD 2.70 / 2.64 GB at 72k / 79k, with space after
/// the phase at 1.27 / 1.30 and 1.27 / 1.26 (a replay of the phase's updates against a model of
/// the log gave 2.1 / 1.6 bytes moved per byte written).
const LOW_WATER: f64 = 0.9;

/// Records moved per hold of the region's write lock. Each hold waits for the writers already
/// appended to become visible, and user writers queue behind it: one hold per record cost them
/// about a third of their time in LD Run A (4 client threads, 2.6M records moved).
const MOVES_PER_LOCK: usize = 32;

/// A record of the segment being reclaimed that may still be valid.
struct Candidate<'a> {
    off: u32,
    rec: record::Record<'a>,
    /// The view and entry of a first lookup outside the lock (segments whose dead records are
    /// not known).
    first: Option<(Arc<View>, Entry)>,
}

fn points_here(e: Option<&Entry>, ptr: u64, salt: u32) -> bool {
    e.is_some_and(|x| matches!(x.value.base(), Value::Large { ptr: p, salt: s, .. } if *p == ptr && *s == salt))
}

/// Re-appends the batch's records that are still valid, deciding and appending under one hold
/// of the write lock (no write can land in between); they enter L0 after it, as user writes do.
/// Empties the batch; returns the bytes moved.
fn move_batch(r: &Region, seg: u32, salt: u32, batch: &mut Vec<Candidate<'_>>) -> Result<u64> {
    if batch.is_empty() {
        return Ok(0);
    }
    let base = r.sh().dev.seg_base(seg);
    let mut w = r.w().lock();
    r.make_room(&mut w)?;
    // Split or merged meanwhile: the pass ends, its segment untouched.
    if r.is_retired() {
        return Err(crate::error::Error::RegionChanged(r.id()));
    }
    // Handed off meanwhile: a relocation would take an LSN past the one the handoff reported.
    if r.is_fenced() {
        return Err(crate::error::Error::RegionFenced(r.id()));
    }
    // Writers append under the lock but insert into L0 after it: let the ones already
    // appended finish, so that L0 shows every write that could be newer than ours.
    r.quiesce(&w);
    // No write can land while the lock is held.
    let now = r.view();
    let in_l0 = |m: &Memtable, key: &[u8]| m.get(key, u64::MAX).map(|x| x.lsn);
    let mut ops = Vec::with_capacity(batch.len());
    let mut from = Vec::with_capacity(batch.len());
    for Candidate { off, rec, first } in batch.drain(..) {
        let ptr = base + off as u64;
        let newest_l0 = in_l0(&now.mem, rec.key).or_else(|| now.imm.as_deref().and_then(|m| in_l0(m, rec.key)));
        let valid = match first {
            // A write that superseded the record is in L0, or in a level above the deepest
            // (the Bloom filters say maybe; one lookup decides), or it met the record's entry
            // in a merge, which made the record dead before the view that drops the merged L0
            // table was installed.
            None => match newest_l0 {
                Some(lsn) => lsn == rec.lsn,
                None if r.may_be_above_last(&now, rec.key)? => {
                    points_here(r.lookup(&now, u64::MAX, rec.key)?.as_ref(), ptr, salt)
                }
                None => !r.dead().is_dead(seg, salt, off),
            },
            // Nothing was published since the first look: only L0 can hold a newer write.
            Some((view, e)) if Arc::ptr_eq(&now.version, &view.version) => newest_l0.is_none_or(|lsn| lsn <= e.lsn),
            // A compaction published since: a newer write may have moved into the levels.
            Some(_) => points_here(r.lookup(&now, u64::MAX, rec.key)?.as_ref(), ptr, salt),
        };
        let valid = valid && now.deleted_at(rec.key, u64::MAX) <= rec.lsn; // no newer range delete
        #[cfg(debug_assertions)]
        {
            let by_lookup = points_here(r.lookup(&now, u64::MAX, rec.key)?.as_ref(), ptr, salt);
            debug_assert_eq!(valid, by_lookup, "GC validity of the record at {ptr:#x} (lsn {})", rec.lsn);
        }
        if valid {
            ops.push(Op::Put(rec.key, rec.value, rec.expire_at));
            from.push((ptr, rec.len as u64, rec.value));
        }
    }
    if ops.is_empty() {
        return Ok(0);
    }
    let pending = r.append_locked(&mut w, &ops, false)?;
    drop(w);
    // A cached value moves with its record: hot values are what the updates GC chases keep
    // reading, and a move would otherwise cost each of them a miss.
    let cache = &r.sh().ctx.cache;
    for (&(old, _, value), new) in from.iter().zip(pending.values()) {
        let old_key = value_cache_key(old, salt);
        if cache.contains(old_key) {
            if let Value::Large { ptr, salt, .. } = new.base() {
                cache.insert(value_cache_key(*ptr, *salt), Arc::new(value.to_vec()));
            }
            cache.remove(old_key);
        }
    }
    let queued = pending.queued;
    r.finish(pending, &ops)?;
    if queued {
        r.drain_log_writes()?;
    }
    Ok(from.iter().map(|f| f.1).sum())
}

/// Reclaims one segment; false when it must wait because recovery may still replay it.
fn reclaim(r: &Region, seg: u32, salt: u32, sealed: u64, l1_lsn: u64) -> Result<bool> {
    let dev = &r.sh().dev;
    let base = dev.seg_base(seg);
    let mut img = AlignedBuf::new(dev.seg_bytes() as usize);
    dev.read_into(base, &mut img, IoKind::Gc)?;
    let (records, clean) = record::scan_checked(&img, salt);
    if !clean {
        // Records past a damaged one cannot be read, so nothing proves they are dead: keep the
        // segment (reads of its damaged record report Corruption).
        tracing::error!("large-log segment {seg} holds a damaged record; garbage collection leaves it alone");
        return Ok(false);
    }
    // Recovery replays the large log beyond L1's LSN without gaps: a segment holding such
    // records must stay until L1 covers them.
    if records.iter().any(|(_, rec)| rec.lsn > l1_lsn && rec.lsn <= sealed) {
        return Ok(false);
    }
    // The catalog's count now, not the pass's snapshot: compactions go on during a pass. A
    // compaction adds its dead records after its commit, so in between the two differ and
    // the segment is looked up.
    let garbage = r.sh().manifest.with(|c| c.regions.get(&r.id()).and_then(|m| m.large_garbage.get(&seg).copied()));
    let known = r.dead().complete(seg, salt, garbage.unwrap_or(0));
    if known {
        r.sh().counters.gc_known_segments.fetch_add(1, Relaxed);
    }
    let moved = move_live(r, seg, salt, sealed, known, records)?;
    // Every LSN up to the moved records must be durable before the old copies go: recovery
    // replays a gap-free prefix only.
    r.write_out_logs()?;
    if let Err(e) = dev.sync() {
        return r.sh().fail(e);
    }
    let edits = [Edit::LogRemove { log: LogKind::Large, seg }];
    let freed = match r.sh().manifest.commit(r.id(), &edits) {
        Ok(f) => f,
        Err(e) => return r.sh().fail(e),
    };
    r.install(View::renewed, freed);
    r.dead().forget(seg, salt);
    let c = &r.sh().counters;
    c.gc_segments.fetch_add(1, Relaxed);
    c.gc_bytes_moved.fetch_add(moved, Relaxed);
    r.sh().ship_edits(r.id(), &edits);
    Ok(true)
}

/// Re-appends the `records` of segment `seg` (up to its seal) that are still valid, a batch per
/// hold of the write lock; `known`: the segment's dead records are complete. Returns the bytes
/// moved.
fn move_live(
    r: &Region,
    seg: u32,
    salt: u32,
    sealed: u64,
    known: bool,
    records: Vec<(usize, record::Record<'_>)>,
) -> Result<u64> {
    let base = r.sh().dev.seg_base(seg);
    let mut moved = 0u64;
    let mut batch: Vec<Candidate<'_>> = Vec::with_capacity(MOVES_PER_LOCK);
    for (off, rec) in records {
        if rec.kind != KIND_PUT || rec.lsn > sealed {
            continue;
        }
        let ptr = base + off as u64;
        // Valid = the newest entry of the key still points here. Without the dead records, a
        // first lookup in the whole tree outside the write lock weeds out most dead ones.
        let first = if known {
            if r.dead().is_dead(seg, salt, off as u32) {
                continue;
            }
            None
        } else {
            let view = r.view();
            let Some(e) = r.lookup(&view, r.lsn(), rec.key)? else {
                continue;
            };
            if !points_here(Some(&e), ptr, salt) {
                continue;
            }
            Some((view, e))
        };
        batch.push(Candidate { off: off as u32, rec, first });
        if batch.len() == MOVES_PER_LOCK {
            moved += move_batch(r, seg, salt, &mut batch)?;
        }
    }
    moved += move_batch(r, seg, salt, &mut batch)?;
    Ok(moved)
}
