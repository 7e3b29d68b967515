//! Garbage collection of the large log: segments whose invalid bytes pass the threshold
//! have their still-valid pairs re-appended, then are freed whole.

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
    let threshold = ((r.sh.opts.gc_threshold * seg_bytes as f64) as u64).max(1);
    let tail = r.w.lock().large.seg.map(|s| s.0);
    let candidates: Vec<_> = meta.logs[LogKind::Large as usize]
        .iter()
        .filter(|s| Some(s.seg) != tail && meta.large_garbage.get(&s.seg).copied().unwrap_or(0) >= threshold)
        .cloned()
        .collect();
    let mut freed = 0;
    for s in candidates {
        if reclaim(r, s.seg, s.salt, s.sealed, meta.l1_lsn)? {
            freed += 1;
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
