//! Build-Index replay (`docs/replication.md` §3.3): a Build-Index backup decodes the records
//! its log buffers gain and applies, as write batches, every complete batch whose LSNs follow
//! the last one applied, up to the primary's commit point (the two logs interleave by LSN);
//! what lies beyond waits in memory. Promotion applies everything complete, and the verify dump
//! overlays what waits.

use super::jobs::Job;
use super::{Buf, ReplicaRegion};
use crate::Result;
use halyard_engine::{decode_log_records, replay_batches, Db, WriteBatch};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

/// The job that replays what `log`'s buffer gained, up to the commit point.
pub(super) fn replay_job(db: Arc<Db>, r: &Arc<ReplicaRegion>, log: u8) -> Job {
    let r = r.clone();
    Box::new(move || build_index(&db, &r, log, r.commit.load(Relaxed)))
}

/// What the buffers hold beyond the applied LSN (received but not yet known to be on every
/// backup): the newest value per key of the complete batches, in LSN order.
pub(super) fn build_overlay(r: &ReplicaRegion, now: u64) -> halyard_engine::Overlay {
    let build = r.build.lock();
    let mut recs = build.0.clone();
    for b in r.bufs.lock().values() {
        let (found, _) = decode_log_records(&b.bytes, b.salt, b.decoded);
        recs.extend(found.into_iter().map(|x| (x.lsn, x)));
    }
    let mut out = halyard_engine::Overlay::default();
    replay_batches(&mut recs, build.1, u64::MAX, |x| out.apply(x, now));
    out
}

/// Decodes the records a buffer gained and applies every complete batch whose LSNs follow the
/// last applied one, up to `upto` (the two logs interleave by LSN).
pub(super) fn build_index(db: &Db, r: &ReplicaRegion, log: u8, upto: u64) -> Result<()> {
    let mut build = r.build.lock();
    // Pending records are ordered by LSN, so sealed buffers of either log can go in now.
    let sealed = std::mem::take(&mut *r.sealed.lock());
    let mut take = |b: &mut Buf| {
        let (recs, end) = decode_log_records(&b.bytes, b.salt, b.decoded);
        b.decoded = end;
        // Records already applied (a Remap's tails start at offset 0) are not pending.
        let next = build.1;
        for rec in recs.into_iter().filter(|x| x.lsn >= next) {
            build.0.insert(rec.lsn, rec);
        }
    };
    for mut b in sealed {
        take(&mut b);
    }
    if let Some(b) = r.bufs.lock().get_mut(&log) {
        take(b);
    }
    let handle = db.region(r.id)?;
    let (pending, next) = &mut *build;
    // One engine batch per primary batch: the backup's LSNs follow the primary's.
    let mut batch = WriteBatch::new();
    let mut failed = None;
    *next = replay_batches(pending, *next, upto, |x| {
        match (x.value, x.range_end) {
            // A split's mark (an empty range) changes nothing.
            (_, Some(end)) if end <= x.key => {}
            (_, Some(end)) => {
                batch.delete_range(x.key, end);
            }
            (Some(v), None) => {
                batch.put_expiring(x.key, v, x.expire_at);
            }
            (None, None) => {
                batch.delete(x.key);
            }
        }
        if x.batch_remaining == 0 && failed.is_none() {
            if let Err(e) = handle.write(&batch) {
                failed = Some(e);
            }
            batch = WriteBatch::new();
        }
    });
    match failed {
        Some(e) => Err(e.into()),
        None => Ok(()),
    }
}
