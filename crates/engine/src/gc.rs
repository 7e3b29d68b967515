//! Garbage collection of the large log: when its invalid bytes pass the threshold, the
//! segments with the most invalid bytes have their still-valid pairs re-appended and are
//! freed whole.

use crate::aligned::AlignedBuf;
use crate::catalog::Edit;
use crate::device::IoKind;
use crate::error::Result;
use crate::logtail::LogKind;
use crate::memtable::Value;
use crate::record::{self, KIND_PUT};
use crate::region::{Op, Region};
use crate::view::View;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

/// One pass over a region: reclaims every candidate segment. Returns how many were freed.
pub(crate) fn run(r: &Region) -> Result<usize> {
    if r.backup || r.sh.is_poisoned() {
        return Ok(0);
    }
    let _g = r.gc_lock.lock();
    let Some(meta) = r.sh.manifest.region(r.id) else {
        return Ok(0);
    };
    r.sh.counters.gc_runs.fetch_add(1, Relaxed);
    let seg_bytes = r.sh.dev.seg_bytes();
    let tail = r.w.lock().large.seg.map(|s| s.0);
    let mut candidates: Vec<(u64, crate::catalog::LogSeg)> = meta.logs[LogKind::Large as usize]
        .iter()
        .filter(|s| Some(s.seg) != tail)
        .map(|s| (meta.large_garbage.get(&s.seg).copied().unwrap_or(0), s.clone()))
        .collect();
    let total = candidates.len() as u64 * seg_bytes;
    let mut garbage: u64 = candidates.iter().map(|c| c.0).sum();
    // The bound is on the whole log: invalid bytes may reach `gc_threshold` of it. Reaching it
    // starts a pass that takes the segments with the most invalid bytes first, down to half
    // the bound. Under skewed updates the invalid bytes gather in few segments, so this moves
    // far fewer valid pairs than collecting every segment once it passes the threshold (a
    // segment at 10% invalid costs 90% of a segment in moves) for the same space bound.
    let limit = r.sh.opts.gc_threshold * total as f64;
    if garbage == 0 || r.sh.opts.gc_threshold >= 1.0 || (garbage as f64) < limit {
        return Ok(0);
    }
    candidates.sort_by_key(|b| std::cmp::Reverse(b.0));
    let mut freed = 0;
    for (g, s) in candidates {
        if g == 0 || (garbage as f64) <= limit / 2.0 {
            break;
        }
        if reclaim(r, s.seg, s.salt, s.sealed, meta.l1_lsn)? {
            freed += 1;
            garbage -= g;
        }
    }
    Ok(freed)
}

/// Reclaims one segment; false when it must wait because recovery may still replay it.
fn reclaim(r: &Region, seg: u32, salt: u32, sealed: u64, l1_lsn: u64) -> Result<bool> {
    let dev = &r.sh.dev;
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
    let mut moved = 0u64;
    for (off, rec) in records {
        if rec.kind != KIND_PUT || rec.lsn > sealed {
            continue;
        }
        let ptr = base + off as u64;
        // Valid = the newest entry of the key still points here. Checked once against the
        // whole tree, then again under the write lock against L0, where any newer write lands.
        let view = r.view();
        let snap = r.visible.load(Relaxed);
        let Some(e) = r.lookup(&view, snap, rec.key)? else {
            continue;
        };
        if !matches!(e.value, Value::Large { ptr: p, salt: s, .. } if p == ptr && s == salt) {
            continue;
        }
        let mut w = r.w.lock();
        r.make_room(&mut w)?;
        // Writers append under the lock but insert into L0 after it: let the ones already
        // appended finish, so that L0 shows every write that could be newer than ours.
        r.quiesce(&w);
        let now = r.view();
        // No write can land while the lock is held. If a compaction published since the
        // first look, a newer write may have moved into the levels: look again in full.
        let still_valid = if Arc::ptr_eq(&now.version, &view.version) {
            let newer = |m: &crate::memtable::Memtable| m.get(rec.key, u64::MAX).is_some_and(|x| x.lsn > e.lsn);
            !newer(&now.mem) && !now.imm.as_deref().is_some_and(newer)
        } else {
            let again = r.lookup(&now, r.visible.load(Relaxed), rec.key)?;
            again.is_some_and(|x| matches!(x.value, Value::Large { ptr: p, salt: s, .. } if p == ptr && s == salt))
        };
        if !still_valid {
            continue;
        }
        let ops = [Op::Put(rec.key, rec.value)];
        let pending = r.append_locked(&mut w, &ops, false)?;
        r.finish(pending, &ops)?;
        moved += rec.len as u64;
    }
    // Every LSN up to the moved records must be durable before the old copies go: recovery
    // replays a gap-free prefix only.
    {
        let mut w = r.w.lock();
        r.write_out(&mut w)?;
    }
    if let Err(e) = dev.sync() {
        return r.sh.fail(e);
    }
    let edits = [Edit::LogRemove { log: LogKind::Large, seg }];
    let freed = match r.sh.manifest.commit(r.id, &edits) {
        Ok(f) => f,
        Err(e) => return r.sh.fail(e),
    };
    r.install(|v| View::new(v.mem.clone(), v.imm.clone(), v.version.clone(), r.sh.alloc.clone()), freed);
    let c = &r.sh.counters;
    c.gc_segments.fetch_add(1, Relaxed);
    c.gc_bytes_moved.fetch_add(moved, Relaxed);
    r.sh.ship_edits(r.id, &edits);
    Ok(true)
}
