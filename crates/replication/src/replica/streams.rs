//! Serving a primary node's connection (`docs/replication.md` §3): it carries the streams of
//! any number of its regions, each opened by its own Hello (checked: protocol version, region,
//! epoch, mode), frames routed by region and checked against the region's epoch, applied under
//! the region's gate, and acknowledged together after each read.

use super::jobs::{run_now, Job};
use super::{Replica, ReplicaRegion};
use crate::wire::{self, Absorb, Mode, Msg};
use crate::{Error, Result};
use halyard_engine::Inventory;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;

/// A region's stream open on a connection.
struct Sub {
    r: Arc<ReplicaRegion>,
    /// The region's stream generation when it opened: a newer stream makes this one stale.
    gen: u64,
    jobs: mpsc::Sender<Job>,
}

/// The streams open on one connection, by region.
type Subs = Arc<Mutex<HashMap<u32, Sub>>>;

/// A connection's write half, shared by its reader (acknowledgements) and its Hello answers.
type Writer = Arc<tokio::sync::Mutex<tokio::net::tcp::OwnedWriteHalf>>;

/// The region a connection's reader is applying frames of, with its gate held (shared).
struct Current {
    region: u32,
    r: Arc<ReplicaRegion>,
    jobs: mpsc::Sender<Job>,
    _gate: tokio::sync::OwnedRwLockReadGuard<()>,
}

impl Replica {
    /// Checks a Hello and, if the stream may start, makes it the region's newest stream and
    /// starts its job runner (after the previous stream's jobs); returns it and the region's
    /// LSN, or why it is refused.
    async fn accept_stream(&self, version: u16, epoch: u64, region: u32, mode: Mode) -> Result<(Sub, u64)> {
        if version != wire::VERSION {
            return Err(Error::Rejected(format!(
                "replication protocol version {version} is not this node's {}: run the same halyard release on every node",
                wire::VERSION
            )));
        }
        let Some(r) = self.region(region) else {
            return Err(Error::Rejected(format!("this node is not a backup of region {region}")));
        };
        if epoch < r.epoch.load(Relaxed) || mode != r.mode {
            return Err(Error::Rejected(format!(
                "stream at epoch {epoch} ({}) refused: the region is at epoch {} ({})",
                mode.name(),
                r.epoch.load(Relaxed),
                r.mode.name()
            )));
        }
        if epoch > r.epoch.load(Relaxed) {
            self.epochs.store(region, epoch)?;
            r.epoch.store(epoch, Relaxed);
        }
        // Taken under the gate: an older stream's message in flight is queued before this, and
        // its next one sees the new generation.
        let gen = {
            let _gate = r.gate.write().await;
            r.stream_gen.fetch_add(1, Relaxed) + 1
        };
        // A failure of the previous stream's jobs ended that stream; this one starts over.
        let _ = r.settle().await;
        let jobs = r.deferred.start();
        let lsn = self.db.region(region)?.lsn();
        Ok((Sub { r, gen, jobs }, lsn))
    }

    /// Serves one primary node's connection, which carries the streams of any number of its
    /// regions, each opened by its own Hello (`first` is the connection's first message).
    pub(crate) async fn streams(self: Arc<Self>, s: TcpStream, first: Msg) -> Result<()> {
        let (mut rd, wr) = s.into_split();
        let wr = Arc::new(tokio::sync::Mutex::new(wr));
        let subs: Subs = Arc::default();
        if matches!(first, Msg::Hello { version, .. } if version != wire::VERSION) {
            // Nothing else on this connection will be understood either.
            self.clone().open(first, subs, wr).await;
            return Ok(());
        }
        tokio::spawn(self.clone().open(first, subs.clone(), wr.clone()));
        let mut buf: Vec<u8> = Vec::with_capacity(1 << 20);
        let mut out: Vec<u8> = Vec::with_capacity(4096);
        loop {
            // Everything that arrived is processed before the acknowledgements go back, one
            // write for all the regions.
            let n = rd.read_buf(&mut buf).await?;
            if n == 0 {
                return Ok(());
            }
            self.stats.bytes.fetch_add(n as u64, Relaxed);
            let used = self.frames(&buf, &subs, &wr, &mut out).await?;
            buf.drain(..used);
        }
    }

    /// Applies every whole frame at the start of `buf` and sends their acknowledgements;
    /// returns the bytes used (an incomplete frame waits for the next read).
    async fn frames(self: &Arc<Self>, buf: &[u8], subs: &Subs, wr: &Writer, out: &mut Vec<u8>) -> Result<usize> {
        let mut used = 0;
        let mut acks: Vec<(Arc<ReplicaRegion>, u64)> = Vec::new();
        // The region whose frames are being applied, under its gate (shared): one region's
        // gate at a time, so two connections can never wait on each other's.
        let mut cur: Option<Current> = None;
        while let Some((m, len)) = wire::decode_frame(buf.get(used..).unwrap_or_default())? {
            used += len;
            if let Msg::Hello { .. } = m {
                tokio::spawn(self.clone().open(m, subs.clone(), wr.clone()));
                continue;
            }
            let Some((region, epoch)) = stream_ids(&m) else {
                return Err(Error::Protocol(format!("{m:?} inside a replication stream")));
            };
            if cur.as_ref().is_none_or(|c| c.region != region) {
                // The previous region's gate goes first: one gate held at a time.
                drop(cur.take());
                cur = self.enter(subs, region, out).await;
            }
            let Some(c) = cur.as_ref() else { continue };
            let current = c.r.epoch.load(Relaxed);
            if epoch < current {
                let why = format!("message of epoch {epoch} below the region's {current}");
                cur = None;
                self.close_sub(subs, region, why, out);
                continue;
            }
            match self.apply(&c.r, m, Some(&c.jobs)).await {
                // The logs of one write arrive one after the other (L0, then large): the
                // acknowledgement is the highest LSN received, not the last one.
                Ok(Some(lsn)) => match acks.iter_mut().find(|a| a.0.id == region) {
                    Some(a) => a.1 = a.1.max(lsn),
                    None => acks.push((c.r.clone(), lsn)),
                },
                Ok(None) => {}
                Err(e) => {
                    // Tell the primary why: it gives the link up and logs the reason.
                    cur = None;
                    acks.retain(|a| a.0.id != region);
                    self.close_sub(subs, region, e.to_string(), out);
                }
            }
        }
        drop(cur);
        self.send_acks(subs, acks, out, wr).await?;
        Ok(used)
    }

    /// The region's stream on this connection, with its gate held (shared); None when the
    /// stream is not open here (refused, or closed with a Reject already sent) or a newer
    /// stream of the region took over (closed now).
    async fn enter(&self, subs: &Subs, region: u32, out: &mut Vec<u8>) -> Option<Current> {
        let (r, gen, jobs) = subs.lock().get(&region).map(|s| (s.r.clone(), s.gen, s.jobs.clone()))?;
        let gate = r.gate.clone().read_owned().await;
        if r.stream_gen.load(Relaxed) != gen {
            drop(gate);
            let why = format!("a newer stream of region {region} took over from this connection");
            self.close_sub(subs, region, why, out);
            return None;
        }
        Some(Current { region, r, jobs, _gate: gate })
    }

    /// Writes the acknowledgements of a batch of frames, with the Rejects already in `out`:
    /// a region whose queued job failed gets a Reject instead of its acknowledgement.
    async fn send_acks(
        &self,
        subs: &Subs,
        acks: Vec<(Arc<ReplicaRegion>, u64)>,
        out: &mut Vec<u8>,
        wr: &Writer,
    ) -> Result<()> {
        for (r, lsn) in acks {
            match r.deferred.failure() {
                Some(e) => self.close_sub(subs, r.id, e, out),
                None => out.extend_from_slice(&Msg::Ack { region: r.id, lsn }.encode()),
            }
        }
        if !out.is_empty() {
            wr.lock().await.write_all(out).await?;
            self.stats.sent.fetch_add(out.len() as u64, Relaxed);
            out.clear();
        }
        Ok(())
    }

    /// Answers one Hello on a connection: the region's stream opens there, or a Reject says why
    /// not.
    async fn open(self: Arc<Self>, hello: Msg, subs: Subs, wr: Writer) {
        let Msg::Hello { version, epoch, region, mode, inventory, absorb } = hello else { return };
        let mut accepted = self.accept_stream(version, epoch, region, mode).await;
        if let (Ok(_), Some(a)) = (&accepted, absorb.filter(|_| mode == Mode::SendIndex)) {
            if let Err(e) = self.absorb(region, a).await {
                tracing::warn!(region, "joining the merged region's copies failed: {e}");
                accepted = Err(e);
            }
        }
        let reply = match accepted {
            Ok((sub, lsn)) => {
                let held = match inventory && mode == Mode::SendIndex {
                    true => self.inventory(region).await,
                    false => Inventory::default(),
                };
                let named = mode == Mode::SendIndex
                    && self.db.replication().takes_named_segments()
                    && !self.unnamed.lock().contains(&region);
                // Open before the HelloOk leaves: the primary streams once it has it.
                subs.lock().insert(region, sub);
                Msg::HelloOk { region, lsn, held, named }
            }
            Err(e) => {
                self.stats.rejected.fetch_add(1, Relaxed);
                let reason = match e {
                    Error::Rejected(r) => r,
                    e => e.to_string(),
                };
                Msg::Reject { region, reason }
            }
        };
        let _ = wr.lock().await.write_all(&reply.encode()).await;
    }

    /// The primary merged `absorb.right` into `left`: that region's streams end, and its copy
    /// here joins `left`'s (or, none held, `left` widens to the merged range), so that the
    /// inventory reported next names both halves' segments.
    async fn absorb(&self, left: u32, a: Absorb) -> Result<()> {
        if let Some(rr) = self.region(a.right) {
            {
                let _gate = rr.gate.write().await;
                rr.stream_gen.fetch_add(1, Relaxed);
            }
            let _ = rr.settle().await;
            self.remove_region(a.right);
        }
        let db = self.db.clone();
        let followed: std::collections::HashSet<u32> = self.regions.lock().keys().copied().collect();
        run_now(Box::new(move || {
            let regions = db.regions();
            let rep = db.replication();
            let Some(l) = regions.iter().find(|r| r.id == left) else { return Ok(()) };
            match regions.iter().find(|r| r.id == a.right && r.backup) {
                Some(r) if l.end.as_ref() == Some(&r.start) => {
                    rep.backup_merge(left, a.right)?;
                    tracing::info!(region = left, right = a.right, "joined the copies of a merged region");
                    return Ok(());
                }
                // A copy from before this node's copy of `left` took the merged range (it
                // joined the group later): in the way, and of no use to the copy that follows.
                Some(_) => {
                    rep.drop_backup_region(a.right)?;
                    tracing::info!(region = left, right = a.right, "dropped a stale copy of a merged region");
                }
                None => {}
            }
            if l.end != a.end {
                // Copies this node follows no stream of (left behind by moves) that lie in the
                // merged range are in its way.
                let inside =
                    |r: &halyard_engine::RegionInfo| r.start >= l.start && a.end.as_ref().is_none_or(|e| r.start < *e);
                for r in regions
                    .iter()
                    .filter(|r| r.id != left && r.id != a.right && r.backup && !followed.contains(&r.id) && inside(r))
                {
                    rep.drop_backup_region(r.id)?;
                }
                rep.set_backup_range(left, &l.start, a.end.as_deref())?;
                tracing::info!(
                    region = left,
                    right = a.right,
                    "widened to the merged range (no copy of its other side here)"
                );
            }
            Ok(())
        }))
        .await
    }

    /// What the backup region holds, for an incremental copy (nothing when it cannot tell:
    /// the copy is then a full one).
    async fn inventory(&self, region: u32) -> Inventory {
        let db = self.db.clone();
        match tokio::task::spawn_blocking(move || db.replication().backup_inventory(region)).await {
            Ok(Ok(inv)) => {
                tracing::info!(region, logs = inv.logs.len(), ssts = inv.ssts.len(), "reported what this copy holds");
                inv
            }
            Ok(Err(e)) => {
                tracing::warn!(region, "taking the region's inventory failed: {e}; a full copy follows");
                Inventory::default()
            }
            Err(_) => Inventory::default(),
        }
    }

    /// Ends a region's stream on this connection with a Reject saying why; its later frames
    /// on the connection are dropped until the primary opens the stream again.
    fn close_sub(&self, subs: &Subs, region: u32, reason: String, out: &mut Vec<u8>) {
        self.stats.rejected.fetch_add(1, Relaxed);
        subs.lock().remove(&region);
        out.extend_from_slice(&Msg::Reject { region, reason }.encode());
    }
}

/// The region and epoch of a message that belongs in a stream; None for any other.
fn stream_ids(m: &Msg) -> Option<(u32, u64)> {
    match m {
        Msg::Append { region, epoch, .. }
        | Msg::Seal { region, epoch, .. }
        | Msg::Sst { region, epoch, .. }
        | Msg::Medium { region, epoch, .. }
        | Msg::Edits { region, epoch, .. }
        | Msg::Remap { region, epoch, .. }
        | Msg::Reset { region, epoch, .. }
        | Msg::Resync { region, epoch, .. }
        | Msg::Kept { region, epoch, .. }
        | Msg::Named { region, epoch, .. }
        | Msg::Split { region, epoch, .. }
        | Msg::Copied { region, epoch, .. } => Some((*region, *epoch)),
        _ => None,
    }
}
