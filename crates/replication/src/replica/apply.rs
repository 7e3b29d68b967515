//! Applying one message of a region's stream (`docs/replication.md` §2, §3.2): Appends are
//! copied into the log buffers on the receive path; the index work of a Seal, Sst, Medium or
//! Edits (and a Build-Index replay) goes to the stream's job queue; Remap and Reset, which
//! replace the region's state, wait for the queue first.

use super::build::{build_index, replay_job};
use super::jobs::{run_now, Job};
use super::{log_kind, tail_images, Buf, Replica, ReplicaRegion};
use crate::wire::{self, LogTail, Mode, Msg};
use crate::{Error, Result};
use halyard_engine::{decode_shipped_edits, Db, LogKind, ReplicaMaps, SstInfo};
use std::collections::BTreeMap;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use tokio::sync::mpsc;

impl Replica {
    /// Applies one message; returns the LSN to acknowledge for appends. With `jobs` (a
    /// Send-Index stream) segment writes and installs are queued there in order instead of
    /// run before the next message is read; messages that replace the region's state wait
    /// for the queue first.
    pub(super) async fn apply(
        &self,
        r: &Arc<ReplicaRegion>,
        m: Msg,
        jobs: Option<&mpsc::Sender<Job>>,
    ) -> Result<Option<u64>> {
        let db = self.db.clone();
        // A Build-Index copy taking its full copy applies in line: its last Edits rebuilds L0
        // from the buffers as they are, which no queued job may change behind it.
        let work = Work { r, jobs: jobs.filter(|_| r.mode == Mode::SendIndex || !r.copying.load(Relaxed)) };
        match m {
            Msg::Append { log, seg, salt, offset, last_lsn, commit, bytes, .. } => {
                r.append(log, seg, salt, offset, &bytes)?;
                r.received.fetch_max(last_lsn, Relaxed);
                r.commit.fetch_max(commit, Relaxed);
                if !r.takes_segments() {
                    work.queue(replay_job(db, r, log)).await?;
                }
                return Ok(Some(last_lsn));
            }
            Msg::Seal { log, seg, salt, .. } => apply_seal(&work, db, log, seg, salt).await?,
            Msg::Copied { lsn, .. } => {
                r.incomplete.store(false, Relaxed);
                r.received.fetch_max(lsn, Relaxed);
                return Ok(Some(lsn));
            }
            Msg::Sst { info, bytes, .. } => {
                let (region, info) = (r.id, SstInfo::from_bytes(&info)?);
                work.queue(Box::new(move || {
                    db.replication().backup_sst(region, &info, &bytes)?;
                    Ok(())
                }))
                .await?
            }
            Msg::Medium { seg, salt, bytes, .. } => {
                let region = r.id;
                work.queue(Box::new(move || {
                    db.replication().backup_medium_run(region, seg, salt, &bytes)?;
                    Ok(())
                }))
                .await?
            }
            Msg::Edits { edits, .. } => apply_edits(&work, db, &edits).await?,
            Msg::Remap { last_lsn, tails, log, index, levels, .. } => {
                r.settle().await?;
                let maps =
                    ReplicaMaps { log: log.iter().map(|&(p, s, n)| ((p, s), n)).collect(), index: index.to_vec() };
                apply_remap(db, r, last_lsn, &tails, maps, levels).await?;
                // Aligned with the new primary up to its last LSN: acknowledged at once, so that
                // the new primary knows it (a handoff right after waits for exactly that).
                r.received.fetch_max(last_lsn, Relaxed);
                return Ok(Some(last_lsn));
            }
            Msg::Reset { .. } => {
                r.settle().await?;
                r.incomplete.store(r.mode == Mode::SendIndex, Relaxed);
                apply_reset(db, r).await?
            }
            Msg::Resync { keep, .. } if r.mode == Mode::SendIndex => {
                r.settle().await?;
                r.incomplete.store(true, Relaxed);
                r.bufs.lock().clear();
                let region = r.id;
                run_now(Box::new(move || Ok(db.replication().resync_backup(region, &keep)?))).await?
            }
            Msg::Split { at, lsn, child, .. } if r.mode == Mode::SendIndex => {
                // Whatever the stream delivered before the split is installed first (the tails
                // the primary sealed for it among them); the child's own stream then finds it.
                r.settle().await?;
                let (region, epoch) = (r.id, r.epoch.load(Relaxed));
                run_now(Box::new(move || Ok(db.replication().backup_split(region, &at, lsn, child).map(drop)?)))
                    .await?;
                self.add_region(child, Mode::SendIndex, epoch)?;
                tracing::info!(region, child, lsn, "split where the primary did");
                // The split takes an LSN of its own, which reads of the parent's keys that no
                // later write touched wait for: acknowledged here, as no Append carries it.
                r.received.fetch_max(lsn, Relaxed);
                return Ok(Some(lsn));
            }
            Msg::Kept { log, seg, salt, .. } => {
                let (region, kind) = (r.id, log_kind(log)?);
                work.queue(Box::new(move || Ok(db.replication().backup_keep_log(region, kind, seg, salt)?))).await?
            }
            Msg::Named { piece, seg, salt, valid, info, name, .. } if r.mode == Mode::SendIndex => {
                work.queue(self.named_job(r.id, piece, (seg, salt, valid), &info, name)?).await?
            }
            m => return Err(Error::Protocol(format!("{m:?} inside a replication stream"))),
        }
        Ok(None)
    }
}

impl Replica {
    /// The job that has this store's storage copy a segment the primary named on it. If it
    /// cannot, the copy fails and the region's next copy comes as bytes.
    fn named_job(
        &self,
        region: u32,
        piece: u8,
        (seg, salt, valid): (u32, u32, u32),
        info: &[u8],
        name: Vec<u8>,
    ) -> Result<Job> {
        let what = match piece {
            wire::NAMED_SST => Named::Sst(SstInfo::from_bytes(info)?),
            p if p == LogKind::Medium as u8 => Named::Medium,
            p => Named::Log(log_kind(p)?),
        };
        let (db, unnamed) = (self.db.clone(), self.unnamed.clone());
        Ok(Box::new(move || {
            let rep = db.replication();
            let done = match what {
                Named::Sst(info) => rep.backup_named_sst(region, &info, &name),
                Named::Medium => rep.backup_named_medium_run(region, seg, salt, &name),
                Named::Log(kind) => rep.backup_named_log_segment(region, kind, (seg, salt), &name, valid),
            };
            if let Err(e) = &done {
                tracing::warn!(region, "the storage nodes could not copy a segment the primary named ({e}); the region's next copy comes as bytes");
                unnamed.lock().insert(region);
            }
            done?;
            Ok(())
        }))
    }
}

/// What a Named message names.
enum Named {
    Sst(SstInfo),
    Medium,
    Log(LogKind),
}

/// Where a message's index work runs: behind the stream's earlier jobs when it has a queue
/// (see `jobs.rs`), else on a blocking thread before the next message is read.
struct Work<'a> {
    r: &'a Arc<ReplicaRegion>,
    jobs: Option<&'a mpsc::Sender<Job>>,
}

impl Work<'_> {
    async fn queue(&self, f: Job) -> Result<()> {
        match self.jobs {
            Some(tx) => self.r.deferred.queue(tx, f).await,
            None => run_now(f).await,
        }
    }
}

impl ReplicaRegion {
    /// Copies an Append's bytes into its log's buffer at the primary's offset.
    fn append(&self, log: u8, seg: u32, salt: u32, offset: u32, bytes: &[u8]) -> Result<()> {
        log_kind(log)?;
        let end = offset as usize + bytes.len();
        if end > wire::MAX_BODY {
            return Err(Error::Malformed("append past any segment"));
        }
        let mut bufs = self.bufs.lock();
        let b = bufs.entry(log).or_default();
        if (b.seg, b.salt) != (seg, salt) {
            // A stream can join a segment midway (a promoted Build-Index node continues its
            // own log): records start at the first offset received.
            *b = Buf { seg, salt, bytes: Vec::new(), decoded: offset as usize };
        }
        if b.bytes.len() < end {
            b.bytes.resize(end, 0);
        }
        if let Some(dst) = b.bytes.get_mut(offset as usize..end) {
            dst.copy_from_slice(bytes);
        }
        Ok(())
    }
}

/// A Seal: a copy that takes segments stores the buffer as the segment; Build-Index replays.
async fn apply_seal(work: &Work<'_>, db: Arc<Db>, log: u8, seg: u32, salt: u32) -> Result<()> {
    let r = work.r;
    let kind = log_kind(log)?;
    let b = r.bufs.lock().remove(&log);
    if r.takes_segments() {
        let bytes = match b {
            Some(b) if (b.seg, b.salt) == (seg, salt) => b.bytes,
            _ => Vec::new(),
        };
        let region = r.id;
        return work
            .queue(Box::new(move || {
                db.replication().backup_log_segment(region, kind, seg, salt, &bytes)?;
                Ok(())
            }))
            .await;
    }
    if let Some(b) = b {
        // Build-Index: the replay job of its last appends may not have decoded them yet; the
        // buffer waits for it beside the next segment's.
        r.sealed.lock().push(b);
        work.queue(replay_job(db, r, log)).await?;
    }
    Ok(())
}

/// Shipped edits (Send-Index; on a Build-Index copy, the end of a full copy).
async fn apply_edits(work: &Work<'_>, db: Arc<Db>, edits: &[u8]) -> Result<()> {
    let (_, edits) = decode_shipped_edits(edits)?;
    let r = work.r.clone();
    work.queue(Box::new(move || {
        db.replication().backup_edits(r.id, &edits)?;
        if r.mode == Mode::BuildIndex && r.copying.load(Relaxed) {
            // Build-Index streams carry no other Edits than a full copy's last.
            finish_full_copy(&db, &r)?;
        }
        Ok(())
    }))
    .await
}

/// Build-Index: a full copy is complete; rebuilds L0 from the copied logs and tails, and the
/// region replays from there on.
fn finish_full_copy(db: &Db, r: &ReplicaRegion) -> Result<()> {
    let tails = r.tails();
    let p = db.replication().promote(r.id, &tail_images(&tails))?;
    for b in r.bufs.lock().values_mut() {
        b.decoded = b.bytes.len();
    }
    *r.build.lock() = (BTreeMap::new(), p.last_lsn + 1);
    r.copying.store(false, Relaxed);
    tracing::info!(region = r.id, lsn = p.last_lsn, "Build-Index copy caught up");
    Ok(())
}

/// A Remap from a newly promoted primary: its history wins. Our own buffers may hold records
/// it never received (sent by the old primary as it died); its tails replace them.
async fn apply_remap(
    db: Arc<Db>,
    r: &Arc<ReplicaRegion>,
    last_lsn: u64,
    tails: &[LogTail],
    maps: ReplicaMaps,
    levels: u64,
) -> Result<()> {
    {
        let mut bufs = r.bufs.lock();
        bufs.clear();
        for (log, seg, salt, bytes) in tails {
            bufs.insert(*log, Buf { seg: *seg, salt: *salt, bytes: bytes.clone(), decoded: 0 });
        }
    }
    let r = r.clone();
    match r.mode {
        Mode::BuildIndex => run_now(Box::new(move || remap_build_index(&db, &r, last_lsn))).await,
        Mode::SendIndex => run_now(Box::new(move || remap_send_index(&db, &r, &maps, levels))).await,
    }
}

/// Build-Index: replays the new primary's tails up to its last LSN.
fn remap_build_index(db: &Db, r: &ReplicaRegion, last_lsn: u64) -> Result<()> {
    r.commit.fetch_max(last_lsn, Relaxed);
    for log in [0, 2] {
        build_index(db, r, log, last_lsn)?;
    }
    Ok(())
}

/// Send-Index: stores the new primary's tails as whole segments and renumbers the region's
/// segments and SSTs to the new primary's. Levels that then differ from the new primary's
/// (`levels`, its digest; 0: not checked) end the stream: the old primary shipped an edit to
/// only some of its backups, and the next session's incremental copy aligns this one.
fn remap_send_index(db: &Db, r: &ReplicaRegion, maps: &ReplicaMaps, levels: u64) -> Result<()> {
    let seg_bytes = db.options().segment_bytes as usize;
    let bufs: Vec<(u8, Buf)> = r.bufs.lock().drain().collect();
    for (log, b) in bufs {
        // Whole segments: bytes of our own longer copy must not survive.
        let mut img = b.bytes;
        img.resize(seg_bytes.max(img.len()), 0);
        db.replication().backup_log_segment(r.id, log_kind(log)?, b.seg, b.salt, &img)?;
    }
    db.replication().remap(r.id, maps)?;
    let ours = db.replication().levels_digest(r.id)?;
    if levels != 0 && ours != Some(levels) {
        tracing::warn!(
            region = r.id,
            "levels differ from the new primary's after its Remap; an incremental copy follows"
        );
        return Err(Error::Rejected(format!(
            "region {}: this copy's levels differ from the new primary's; catch it up with an incremental copy",
            r.id
        )));
    }
    Ok(())
}

/// A Reset: the primary starts the region's copy over (Send-Index: empty backup; Build-Index:
/// a full copy taken the Send-Index way).
async fn apply_reset(db: Arc<Db>, r: &Arc<ReplicaRegion>) -> Result<()> {
    r.bufs.lock().clear();
    r.sealed.lock().clear();
    let r = r.clone();
    run_now(Box::new(move || {
        match r.mode {
            Mode::SendIndex => db.replication().reset_backup(r.id)?,
            Mode::BuildIndex => {
                db.replication().demote_to_backup(r.id)?;
                *r.build.lock() = (BTreeMap::new(), 1);
                r.copying.store(true, Relaxed);
            }
        }
        Ok(())
    }))
    .await
}
