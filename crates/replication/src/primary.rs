//! The primary side: a [`ShipListener`] that turns what the engine does (log appends and seals,
//! compaction output, edits) into frames, one stream per (region, backup) over one connection per
//! backup node ([`crate::peer`]), and tracks what each backup acknowledged so that writers can
//! wait for `last-write` durability.
//!
//! A link is *live* once its backup is connected and has been sent a full copy of the region
//! (catch-up) or, after a promotion, the `Remap` that aligns it: only live links get frames and
//! only live links make writers wait. A link that fails goes back to connecting, and catches up
//! again when it reconnects; the region keeps serving meanwhile with fewer copies (logged and
//! counted).
//!
//! Each link's queue is bounded in bytes ([`DEFAULT_QUEUE_BYTES`], or the bound given to
//! [`Shipper::with_queue_limit`]). The engine queues frames under the region's write lock, so
//! queueing never waits; instead writers ask [`Shipper::wait_room`] before they write, and wait
//! while a live link of the region holds its bound's worth of frames: a slow backup slows the
//! primary's writers down rather than growing the primary's memory. A link whose queue stays
//! full without draining for the ack timeout is failed (it catches up later, as any link that
//! failed), so that a backup that stopped reading cannot hold writers forever. The full copy a
//! catch-up queues is not counted: it never makes writers wait.

use crate::link::{image_len, Item, Link};
pub use crate::link::{ShipStats, DEFAULT_QUEUE_BYTES};
use crate::peer::Peers;
use crate::wire::{Absorb, Mode, Msg};
use halyard_engine::{encode_shipped_edits, Db, Edit, Inventory, LogKind, RegionCopy, ShipListener, ShippedSegment};
use parking_lot::{Mutex, RwLock};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, OnceLock, Weak};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, watch, Notify};

/// Bytes a second one full copy reads and sends by default (64 MiB/s, `move_rate_mb`).
pub const DEFAULT_COPY_RATE: u64 = 64 << 20;

/// The streams of one region.
pub struct RegionStream {
    region: u32,
    /// Shared by the region's streams as links come and go: raised when the group changes.
    epoch: Arc<AtomicU64>,
    mode: Mode,
    links: Vec<Arc<Link>>,
    /// The region this stream's backups join into theirs when it opens (it was merged here).
    absorb: Arc<Mutex<Option<Absorb>>>,
}

/// Ships every primary region of a store to its backups.
pub struct Shipper {
    regions: RwLock<HashMap<u32, Arc<RegionStream>>>,
    /// Counters.
    pub stats: Arc<ShipStats>,
    ack_timeout: Duration,
    queue_limit: u64,
    /// Bytes a second a full copy reads and sends at most (0: unlimited).
    copy_rate: AtomicU64,
    db: OnceLock<Weak<Db>>,
    peers: Peers,
    /// This shipper, for the streams a split starts from inside the engine's hook.
    me: Weak<Shipper>,
    /// The runtime the links run on (the first [`Shipper::start`]'s).
    rt: OnceLock<tokio::runtime::Handle>,
}

impl Shipper {
    /// A shipper with no regions yet; writers stop waiting for a backup silent for
    /// `ack_timeout` (the link is then restarted). Each link queues up to
    /// [`DEFAULT_QUEUE_BYTES`].
    pub fn new(ack_timeout: Duration) -> Arc<Shipper> {
        Shipper::with_queue_limit(ack_timeout, DEFAULT_QUEUE_BYTES)
    }

    /// As [`Shipper::new`], with links that queue up to `queue_bytes` (at least 1) before
    /// writers wait.
    pub fn with_queue_limit(ack_timeout: Duration, queue_bytes: u64) -> Arc<Shipper> {
        Arc::new_cyclic(|me| Shipper {
            regions: RwLock::new(HashMap::new()),
            stats: Arc::default(),
            ack_timeout,
            queue_limit: queue_bytes.max(1),
            copy_rate: AtomicU64::new(DEFAULT_COPY_RATE),
            db: OnceLock::new(),
            peers: Peers::default(),
            me: me.clone(),
            rt: OnceLock::new(),
        })
    }

    /// Limits full copies to `bytes_per_sec` each (0: unlimited; default [`DEFAULT_COPY_RATE`]).
    pub fn set_copy_rate(&self, bytes_per_sec: u64) {
        self.copy_rate.store(bytes_per_sec, Relaxed);
    }

    /// The store whose regions are shipped (needed for full copies).
    pub fn set_db(&self, db: &Arc<Db>) {
        let _ = self.db.set(Arc::downgrade(db));
    }

    /// Starts streaming `region` (epoch `epoch`) to `backups` (name, replication address).
    /// With `aligned`, the backups already hold the region (after a promotion: frames queue
    /// from now on and go out after the `Remap` given to [`Shipper::start`]); otherwise each
    /// link catches its backup up with a full copy when it connects.
    pub fn add_region(
        &self,
        region: u32,
        epoch: u64,
        mode: Mode,
        backups: &[(String, String)],
        aligned: bool,
    ) -> Arc<RegionStream> {
        let links = backups.iter().map(|(node, addr)| self.new_link(node, addr, aligned, true)).collect();
        let s = Arc::new(RegionStream {
            region,
            epoch: Arc::new(AtomicU64::new(epoch)),
            mode,
            links,
            absorb: Arc::default(),
        });
        self.regions.write().insert(region, s.clone());
        s
    }

    /// A link to `node`; with `wait`, writers wait for it (up to the ack timeout) while it
    /// connects, as for a backup the region already counted on.
    fn new_link(&self, node: &str, addr: &str, live: bool, wait: bool) -> Arc<Link> {
        let (tx, rx) = mpsc::unbounded_channel();
        let now = Instant::now();
        let down_since = match (live, wait) {
            (true, _) => None,
            (false, true) => Some(now),
            (false, false) => Some(now.checked_sub(self.ack_timeout).unwrap_or(now)),
        };
        Arc::new(Link {
            node: node.to_string(),
            addr: addr.to_string(),
            tx,
            queue: Arc::new(parking_lot::Mutex::new(rx)),
            started: AtomicBool::new(false),
            waker: parking_lot::Mutex::new(None),
            acked: watch::Sender::new(0),
            live: AtomicBool::new(live),
            stopped: AtomicBool::new(false),
            counted: AtomicBool::new(true),
            down_since: parking_lot::Mutex::new(down_since),
            queued: AtomicU64::new(0),
            drained: AtomicU64::new(0),
            limit: self.queue_limit,
            copying: AtomicBool::new(false),
            copy_gen: AtomicU64::new(0),
            copy_total: AtomicU64::new(0),
            copy_done: AtomicU64::new(0),
            split_lsn: AtomicU64::new(0),
            room: Notify::new(),
            stats: self.stats.clone(),
        })
    }

    /// Ships `region` to one more backup, which first gets a full copy. Writers do not wait
    /// for it until it has been sent that copy. Returns the new link.
    pub fn add_link(self: &Arc<Self>, region: u32, node: &str, addr: &str) -> crate::Result<Arc<Link>> {
        let stream = {
            let mut map = self.regions.write();
            let s =
                map.get(&region).ok_or_else(|| crate::Error::Rejected(format!("region {region} is not led here")))?;
            if s.links.iter().any(|l| l.node == node) {
                return Err(crate::Error::Rejected(format!("{node} is already a backup of region {region}")));
            }
            let mut links = s.links.clone();
            links.push(self.new_link(node, addr, false, false));
            let ns = Arc::new(RegionStream {
                region,
                epoch: s.epoch.clone(),
                mode: s.mode,
                links,
                absorb: s.absorb.clone(),
            });
            map.insert(region, ns.clone());
            ns
        };
        let link = stream.links.last().cloned().ok_or_else(|| crate::Error::Protocol("no link".into()))?;
        self.start(&stream, None);
        Ok(link)
    }

    /// Connects the links of a region added with [`Shipper::add_region`] (on the current
    /// tokio runtime); `first` goes out right after the handshake.
    pub fn start(self: &Arc<Self>, stream: &Arc<RegionStream>, first: Option<Msg>) {
        let _ = self.rt.set(tokio::runtime::Handle::current());
        for l in &stream.links {
            if l.started.swap(true, Relaxed) {
                continue;
            }
            let (me, l, stream, first) = (self.clone(), l.clone(), stream.clone(), first.clone());
            tokio::spawn(async move { me.run_link(&stream, &l, first).await });
        }
    }

    /// Makes the backups of `region` (added with [`Shipper::add_region`], not started yet) join
    /// their copies of `absorb.right` into theirs when its streams open: the region took that
    /// one in here ([`halyard_engine::Db::merge_regions`]).
    pub fn set_absorb(&self, region: u32, absorb: Absorb) {
        if let Some(s) = self.regions.read().get(&region) {
            *s.absorb.lock() = Some(absorb);
        }
    }

    /// Stops shipping a region (it is no longer led here).
    pub fn remove_region(&self, region: u32) {
        if let Some(s) = self.regions.write().remove(&region) {
            for l in &s.links {
                l.stopped.store(true, Relaxed);
                l.fail("region no longer led by this node", &self.stats);
            }
        }
    }

    /// Stops shipping `region` to `node` (it left the group); writers no longer wait for it.
    pub fn remove_link(&self, region: u32, node: &str) {
        let mut map = self.regions.write();
        let Some(s) = map.get(&region).cloned() else { return };
        let (gone, kept): (Vec<_>, Vec<_>) = s.links.iter().cloned().partition(|l| l.node == node);
        if gone.is_empty() {
            return;
        }
        let absorb = s.absorb.clone();
        map.insert(
            region,
            Arc::new(RegionStream { region, epoch: s.epoch.clone(), mode: s.mode, links: kept, absorb }),
        );
        drop(map);
        for l in gone {
            l.stopped.store(true, Relaxed);
            l.fail("the backup left the region's group", &self.stats);
        }
    }

    /// Raises the epoch the region's frames carry (the group changed).
    pub fn set_epoch(&self, region: u32, epoch: u64) {
        if let Some(s) = self.regions.read().get(&region) {
            s.epoch.fetch_max(epoch, Relaxed);
        }
    }

    /// The epoch `region`'s frames carry, if this node ships it.
    pub fn epoch(&self, region: u32) -> Option<u64> {
        self.regions.read().get(&region).map(|s| s.epoch.load(Relaxed))
    }

    /// Whether this node ships `region` (leads it).
    pub fn leads(&self, region: u32) -> bool {
        self.regions.read().contains_key(&region)
    }

    /// The link of `region` to `node`, if it has one.
    pub fn link(&self, region: u32, node: &str) -> Option<Arc<Link>> {
        self.regions.read().get(&region)?.links.iter().find(|l| l.node == node).cloned()
    }

    /// The links of a region.
    pub fn links(&self, region: u32) -> Vec<Arc<Link>> {
        self.regions.read().get(&region).map(|s| s.links.clone()).unwrap_or_default()
    }

    /// Waits until every backup of `region` acknowledged `lsn` (`last-write`). A backup that is
    /// reconnecting is waited for until it has been down for the ack timeout; a live backup
    /// silent for the ack timeout stops counting (its link restarts): writes then go on with
    /// fewer copies (logged and counted) instead of blocking forever.
    pub async fn wait_acked(&self, region: u32, lsn: u64) {
        for l in self.links(region) {
            // A backup taking a full copy counts from its end (it acknowledges nothing before).
            if l.stopped.load(Relaxed) || l.copying.load(Relaxed) {
                continue;
            }
            let deadline = match *l.down_since.lock() {
                Some(t) => t + self.ack_timeout,
                None => Instant::now() + self.ack_timeout,
            };
            let Some(left) = deadline.checked_duration_since(Instant::now()) else {
                continue;
            };
            let mut rx = l.acked.subscribe();
            let r = tokio::time::timeout(left, rx.wait_for(|v| l.is_live() && *v >= lsn)).await;
            if r.is_err() && l.is_live() {
                l.fail(&format!("no acknowledgement of LSN {lsn} within {:?}", self.ack_timeout), &self.stats);
            }
        }
    }

    /// Waits until every backup of `region` in its group (learners aside) acknowledged `lsn`,
    /// whether its link is live, reconnecting or catching up (etcd mode: a backup leaves the group only when the
    /// master removes it). Err with the backups that did not within the ack timeout: the write
    /// must not be acknowledged (it may or may not survive). Ok(true) when at least one backup
    /// counted and every one acknowledged `lsn` itself, so the write stands whatever became of
    /// this node's role meanwhile; Ok(false) when links that stopped ended the wait.
    pub async fn wait_all_acked(&self, region: u32, lsn: u64) -> Result<bool, Vec<String>> {
        let deadline = Instant::now() + self.ack_timeout;
        let mut silent = Vec::new();
        let (mut held, mut skipped) = (0usize, false);
        for l in self.links(region) {
            if l.stopped.load(Relaxed) || !l.counted.load(Relaxed) {
                skipped |= l.stopped.load(Relaxed);
                continue;
            }
            let mut rx = l.acked.subscribe();
            let left = deadline.saturating_duration_since(Instant::now());
            let done = |v: &u64| l.stopped.load(Relaxed) || !l.counted.load(Relaxed) || (l.is_live() && *v >= lsn);
            // The value is copied out at once: the guard holds the watch's lock.
            match tokio::time::timeout(left, rx.wait_for(done)).await.map(|r| r.map(|v| *v)) {
                Ok(Ok(v)) if v >= lsn => held += 1,
                Ok(Ok(_)) => skipped = true,
                _ => silent.push(l.node.clone()),
            }
        }
        if silent.is_empty() {
            Ok(held > 0 && !skipped)
        } else {
            Err(silent)
        }
    }

    /// Whether a write to `region` (every region with `None`) must wait for room: a live link
    /// of it holds its queue's bound. One atomic load while no link is full.
    pub fn is_full(&self, region: Option<u32>) -> bool {
        if self.stats.full_links.load(Relaxed) == 0 {
            return false;
        }
        let map = self.regions.read();
        match region {
            Some(r) => map.get(&r).is_some_and(|s| s.links.iter().any(|l| l.is_full())),
            None => map.values().any(|s| s.links.iter().any(|l| l.is_full())),
        }
    }

    /// Waits until no live link of `region` (of any region with `None`) holds its queue's bound
    /// (writers call this before writing: the engine's queueing itself never waits). A link
    /// whose queue stays full without draining for the ack timeout is failed and no longer
    /// counts: it catches up once it reconnects. Waits are counted in
    /// [`ShipStats::throttled_waits`] and [`ShipStats::throttled_micros`].
    pub async fn wait_room(&self, region: Option<u32>) {
        if !self.is_full(region) {
            return;
        }
        let t0 = Instant::now();
        let links: Vec<Arc<Link>> = match region {
            Some(r) => self.links(r),
            None => self.regions.read().values().flat_map(|s| s.links.iter().cloned()).collect(),
        };
        for l in links {
            loop {
                let room = l.room.notified();
                tokio::pin!(room);
                room.as_mut().enable();
                if !l.is_full() {
                    break;
                }
                let drained = l.drained.load(Relaxed);
                if tokio::time::timeout(self.ack_timeout, room).await.is_err()
                    && l.drained.load(Relaxed) == drained
                    && l.is_full()
                {
                    self.stats.stuck_links.fetch_add(1, Relaxed);
                    let why = format!("its queue stayed full ({} bytes) for {:?}", l.queued_bytes(), self.ack_timeout);
                    l.fail(&why, &self.stats);
                }
            }
        }
        self.stats.throttled_waits.fetch_add(1, Relaxed);
        self.stats.throttled_micros.fetch_add(t0.elapsed().as_micros() as u64, Relaxed);
    }

    fn send(&self, region: u32, sst_stream: bool, msg: impl FnOnce(u64, u64) -> Msg) {
        let Some(s) = self.regions.read().get(&region).cloned() else {
            return;
        };
        if sst_stream && s.mode == Mode::BuildIndex {
            return; // Build-Index backups compact for themselves.
        }
        // The highest LSN every live backup holds: a prefix any new primary will have too.
        let commit = s.links.iter().filter(|l| l.is_live()).map(|l| l.acked()).min().unwrap_or(0);
        let m = msg(s.epoch.load(Relaxed), commit);
        let image = image_len(&m);
        let frame = Arc::new(m.encode());
        for l in s.links.iter().filter(|l| l.is_live()) {
            let n = frame.len() as u64;
            l.enqueue(n);
            if l.tx.send(Item::Frame(frame.clone())).is_ok() {
                self.stats.bytes.fetch_add(n, Relaxed);
                self.stats.image_bytes.fetch_add(image, Relaxed);
                self.stats.frames.fetch_add(1, Relaxed);
            } else {
                l.dequeued(n);
            }
            if let Some(w) = l.waker.lock().as_ref() {
                w.notify_one();
            }
        }
    }

    /// Captures the region for a full copy, queues the copy's feed on `l` and makes the link
    /// live, atomically with the region's stream (no write, compaction or GC runs in
    /// between); the copy's segments are then read and sent by its reader ([`crate::copy`]).
    /// With a backup's inventory `held` (not empty), the copy is incremental: what the backup
    /// holds identically is not sent again.
    fn catch_up(&self, s: &RegionStream, l: &Arc<Link>, held: &Inventory, named: bool) -> crate::Result<()> {
        let db = self.db.get().and_then(Weak::upgrade).ok_or_else(|| crate::Error::Protocol("store closed".into()))?;
        let (region, epoch) = (s.region, s.epoch.load(Relaxed));
        let rate = self.copy_rate.load(Relaxed);
        let incremental = !held.is_empty() && s.mode == Mode::SendIndex;
        let copying = db.replication().with_copy(region, |mut copy: RegionCopy| {
            let _ = l.tx.send(Item::Restart);
            // A region that never held anything has nothing to copy.
            let copying = !copy.is_empty();
            copy.by_name(named);
            if copying {
                let resync = incremental.then(|| copy.resync(held));
                if resync.is_some() {
                    let (logs, ssts) = copy.matched();
                    tracing::info!(region, backup = %l.node, logs, ssts, of_logs = held.logs.len(), of_ssts = held.ssts.len(), "incremental copy: what the backup holds that this copy names");
                }
                let _ = l.tx.send(Item::Copy(crate::copy::start(copy, region, epoch, l, rate, resync)));
            }
            l.live.store(true, Relaxed);
            *l.down_since.lock() = None;
            l.acked.send_replace(0);
            copying
        })?;
        match (copying, incremental) {
            (true, true) => self.stats.incremental_catch_ups.fetch_add(1, Relaxed),
            (true, false) => self.stats.catch_ups.fetch_add(1, Relaxed),
            (false, _) => 0,
        };
        Ok(())
    }

    async fn run_link(self: Arc<Self>, s: &Arc<RegionStream>, l: &Arc<Link>, mut first: Option<Msg>) {
        let max = Duration::from_secs(1);
        let mut delays = backon::BackoffBuilder::build(
            backon::ExponentialBuilder::default()
                .with_min_delay(Duration::from_millis(20))
                .with_max_delay(max)
                .without_max_times(),
        );
        // An aligned link streams what queued since it was added. Once frames may have been
        // lost (a session failed while streaming, or the link stopped taking frames), every
        // later session starts with a full copy.
        let mut aligned = l.is_live();
        while !l.stopped.load(Relaxed) {
            if !l.is_live() {
                aligned = false;
            }
            let mut streamed = false;
            let catching_up = !aligned;
            let e = self.clone().session(s, l, aligned, &mut first, &mut streamed).await;
            if aligned && !streamed {
                // Nothing left the queue: keep queueing while the backup comes up.
                tracing::debug!(backup = %l.node, "connecting: {e}; retrying");
            } else {
                aligned = false;
                if catching_up && streamed {
                    tracing::warn!(backup = %l.node, region = s.region, "catching up failed: {e}; retrying");
                }
                l.fail(&e.to_string(), &self.stats);
            }
            tokio::time::sleep(delays.next().unwrap_or(max)).await;
        }
    }

    /// One session on the backup node's shared connection: handshake, alignment (Remap, or a
    /// full copy unless `aligned`), then the link's queue goes to the connection's writer until
    /// the link or the connection fails; returns why it ended.
    async fn session(
        self: Arc<Self>,
        s: &Arc<RegionStream>,
        l: &Arc<Link>,
        aligned: bool,
        first: &mut Option<Msg>,
        streamed: &mut bool,
    ) -> crate::Error {
        let conn = match self.peers.get(&l.addr).conn(&self.stats).await {
            Ok(c) => c,
            Err(e) => return e,
        };
        let (route, mut replies) = conn.open(s.region, l);
        let lost = || crate::Error::Protocol("the connection to the backup node failed".into());
        let epoch = s.epoch.load(Relaxed);
        let absorb = s.absorb.lock().clone();
        let hello = Msg::Hello {
            version: crate::wire::VERSION,
            epoch,
            region: s.region,
            mode: s.mode,
            inventory: !aligned,
            absorb,
        };
        conn.send(&hello.encode());
        let (held, named) = match replies.recv().await {
            Some(Msg::HelloOk { held, lsn, named, .. }) => {
                let split = l.split_lsn.load(Relaxed);
                if aligned && split > 0 && lsn >= split {
                    l.acked.send_if_modified(|v| std::mem::replace(v, (*v).max(split)) < split);
                }
                (held, named)
            }
            Some(Msg::Reject { reason, .. }) => return crate::Error::Rejected(reason),
            Some(m) => return crate::Error::Protocol(format!("{m:?} instead of HelloOk")),
            None => return lost(),
        };
        if let Some(m) = first.take() {
            conn.send(&m.encode());
        }
        *streamed = true;
        if !aligned {
            let (me, s2, l2) = (self.clone(), s.clone(), l.clone());
            let r = tokio::task::spawn_blocking(move || me.catch_up(&s2, &l2, &held, named))
                .await
                .map_err(|e| crate::Error::Protocol(e.to_string()))
                .and_then(|r| r);
            if let Err(e) = r {
                return e;
            }
        }
        // A full copy was queued behind a Restart: what queued before it is stale.
        conn.attach(&route, l.queue.clone(), !aligned);
        let mut changes = l.acked.subscribe();
        loop {
            tokio::select! {
                m = replies.recv() => return match m {
                    Some(Msg::Reject { reason, .. }) => crate::Error::Rejected(reason),
                    Some(m) => crate::Error::Protocol(format!("unexpected {m:?}")),
                    None => lost(),
                },
                // The link failed (ack timeout, region no longer led here).
                _ = changes.changed() => if !l.is_live() {
                    return crate::Error::Protocol("link failed".into());
                },
            }
        }
    }
}

impl ShipListener for Shipper {
    fn log_append(&self, region: u32, log: LogKind, seg: u32, salt: u32, offset: u32, bytes: &[u8], last_lsn: u64) {
        self.send(region, false, |epoch, commit| Msg::Append {
            epoch,
            region,
            log: log as u8,
            seg,
            salt,
            offset,
            last_lsn,
            commit,
            bytes: bytes.to_vec(),
        });
    }

    fn log_sealed(&self, region: u32, log: LogKind, seg: u32, salt: u32) {
        self.send(region, false, |epoch, _| Msg::Seal { epoch, region, log: log as u8, seg, salt });
    }

    fn segment(&self, region: u32, seg: ShippedSegment<'_>) {
        match seg {
            ShippedSegment::Sst { info, bytes } => self.send(region, true, |epoch, _| Msg::Sst {
                epoch,
                region,
                info: info.to_bytes(),
                bytes: bytes.to_vec(),
            }),
            ShippedSegment::MediumRun { seg, salt, bytes } => {
                self.send(region, true, |epoch, _| Msg::Medium { epoch, region, seg, salt, bytes: bytes.to_vec() })
            }
        }
    }

    fn edits(&self, region: u32, edits: &[Edit]) {
        self.send(region, true, |epoch, _| Msg::Edits { epoch, region, edits: encode_shipped_edits(region, edits) });
    }

    /// The parent's live Send-Index backups get the split in its stream, and the child's stream
    /// starts at once, aligned with them: its frames queue until the backup, having split, takes
    /// the child's stream. A backup that does not take the split (its link was down, a
    /// Build-Index copy) gets the child by a copy when it hosts it.
    fn split(&self, region: u32, at: &[u8], lsn: u64, child: u32) {
        let Some(s) = self.regions.read().get(&region).cloned() else { return };
        let carried = s.mode == Mode::SendIndex;
        if carried {
            self.send(region, false, |epoch, _| Msg::Split { epoch, region, at: at.to_vec(), lsn, child });
        }
        let links = s
            .links
            .iter()
            .map(|l| {
                let n = self.new_link(&l.node, &l.addr, carried && l.is_live(), true);
                n.counted.store(l.counted.load(Relaxed), Relaxed);
                n.split_lsn.store(lsn, Relaxed);
                n
            })
            .collect();
        let epoch = Arc::new(AtomicU64::new(s.epoch.load(Relaxed)));
        let cs = Arc::new(RegionStream { region: child, epoch, mode: s.mode, links, absorb: Arc::default() });
        self.regions.write().insert(child, cs.clone());
        if let (Some(me), Some(rt)) = (self.me.upgrade(), self.rt.get()) {
            let _in = rt.enter();
            me.start(&cs, None);
        }
        tracing::info!(region, child, lsn, "split; the child's stream starts");
    }
}
