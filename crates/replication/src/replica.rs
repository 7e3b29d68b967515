//! The backup side: accepts a primary node's connection and the streams of its regions on it
//! (each opened by its own Hello, frames routed by region), keeps one buffer per log written
//! at the primary's offsets (the receive path copies bytes and acknowledges, nothing else),
//! stores a buffer as a segment when the primary seals it, installs shipped SSTs and edits
//! (Send-Index) or replays records into its own L0 (Build-Index), and rejects streams of an
//! older epoch.

use crate::wire::{self, LogTail, Mode, Msg};
use crate::{Error, Result};
use halyard_engine::{
    decode_log_records, decode_shipped_edits, replay_batches, Db, LogKind, LogRecord, ReplicaMaps, SstInfo, TailImage,
    WriteBatch,
};
use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, watch};

/// Index work taken off a Send-Index stream's receive path (a segment write, an SST install).
type Job = Box<dyn FnOnce() -> Result<()> + Send>;

/// Jobs a Send-Index stream queued, in arrival order. A write to a region is acknowledged once
/// its record is in the buffer: were the stream to install a shipped SST before reading on,
/// every write to the region would wait for that install, and with requests spread over the
/// regions every client soon would.
struct Deferred {
    queued: AtomicU64,
    done: watch::Sender<u64>,
    /// The first job that failed; the stream then closes and later jobs are skipped.
    failed: Mutex<Option<String>>,
}

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

/// Jobs queued ahead of the receive path at most: the primary waits (TCP) beyond this.
const QUEUED_JOBS: usize = 64;

/// One log's buffer: the primary's segment, its salt, the bytes received.
#[derive(Default)]
struct Buf {
    seg: u32,
    salt: u32,
    bytes: Vec<u8>,
    /// Build-Index: bytes already decoded into records.
    decoded: usize,
}

/// A region this node is a backup of.
pub struct ReplicaRegion {
    /// Region id.
    pub id: u32,
    /// How the copy is kept.
    pub mode: Mode,
    epoch: AtomicU64,
    bufs: Mutex<HashMap<u8, Buf>>,
    /// Build-Index: buffers sealed before their records were all decoded (the replay runs
    /// behind the receive path); the next replay decodes them.
    sealed: Mutex<Vec<Buf>>,
    /// Build-Index: records waiting for the LSNs before them, and the next LSN to apply.
    build: Mutex<(BTreeMap<u64, LogRecord>, u64)>,
    /// Highest LSN received.
    pub received: AtomicU64,
    /// Highest LSN every backup holds (from the primary): Build-Index applies up to here.
    commit: AtomicU64,
    /// Build-Index: a full copy (catch-up) is arriving; it is taken the Send-Index way and
    /// the region becomes a Build-Index copy again when its Edits arrive.
    copying: AtomicBool,
    /// The newest stream of the region: an older one (its primary reconnected while the old
    /// connection stayed half-open) applies nothing more, so two job queues never interleave.
    stream_gen: AtomicU64,
    deferred: Deferred,
    /// Held (shared) by a stream from a batch's epoch checks until its messages are applied or
    /// queued, and (exclusively) by a promotion while it raises the epoch: what promotion
    /// waits for afterwards is then everything a stale primary will ever get applied; and
    /// (exclusively) by a verify dump, which must see the jobs' results and the tails at rest.
    gate: Arc<tokio::sync::RwLock<()>>,
}

impl ReplicaRegion {
    /// Whether the region keeps the primary's segments now (Send-Index, or a Build-Index copy
    /// taking a full copy) rather than replaying records.
    fn takes_segments(&self) -> bool {
        self.mode == Mode::SendIndex || self.copying.load(Relaxed)
    }

    /// Waits until every job queued so far has run; returns the first failure, if any.
    async fn settle(&self) -> Result<()> {
        let target = self.deferred.queued.load(Relaxed);
        let mut rx = self.deferred.done.subscribe();
        let _ = rx.wait_for(|d| *d >= target).await;
        match self.deferred.failed.lock().clone() {
            Some(e) => Err(Error::Protocol(format!("installing shipped index data failed: {e}"))),
            None => Ok(()),
        }
    }

    /// Starts the job runner of a new stream (after [`ReplicaRegion::settle`], so that the
    /// previous stream's jobs are done): one job at a time, in order, on a blocking thread.
    fn start_jobs(self: &Arc<Self>) -> mpsc::Sender<Job> {
        *self.deferred.failed.lock() = None;
        let (tx, mut rx) = mpsc::channel::<Job>(QUEUED_JOBS);
        let r = self.clone();
        tokio::spawn(async move {
            // Runs until the stream is gone and its queue is empty: queued jobs belong to
            // messages already accepted.
            while let Some(job) = rx.recv().await {
                if r.deferred.failed.lock().is_none() {
                    let res = tokio::task::spawn_blocking(job).await.map_err(|e| Error::Protocol(e.to_string()));
                    if let Err(e) = res.and_then(|r| r) {
                        *r.deferred.failed.lock() = Some(e.to_string());
                    }
                }
                r.deferred.done.send_modify(|d| *d += 1);
            }
        });
        tx
    }
}

/// Counters of what a backup received.
#[derive(Default, Debug)]
pub struct ReplicaStats {
    /// Frame bytes received.
    pub bytes: AtomicU64,
    /// Frame bytes sent back to primaries (acknowledgements).
    pub sent: AtomicU64,
    /// Streams refused (stale epoch, unknown region).
    pub rejected: AtomicU64,
    /// Connections refused for a missing or wrong cluster secret.
    pub unauthenticated: AtomicU64,
}

/// What a promotion did.
#[derive(Debug)]
pub struct Promoted {
    /// Last LSN of the region.
    pub last_lsn: u64,
    /// Records received but not replayed (beyond a torn record or a gap).
    pub dropped: u64,
    /// The log tails (log, primary segment, salt, bytes) the region was rebuilt with.
    pub tails: Vec<LogTail>,
}

/// What the node does for admin requests that change its roles; called on a blocking thread.
pub trait NodeHooks: Send + Sync {
    /// Become the primary of `region` at `epoch` (the replica already let go of it); returns
    /// the last LSN and the records dropped.
    fn promote(&self, region: u32, epoch: u64) -> Result<(u64, u64)>;
    /// Become a backup of `region` (key range `start..end`) at `epoch`.
    fn host(&self, region: u32, epoch: u64, start: &[u8], end: Option<&[u8]>) -> Result<()>;
    /// As the primary of `region` at `epoch`, ship to one more backup.
    fn add_backup(&self, region: u32, epoch: u64, node: &str, native: &str, replication: &str) -> Result<()>;
    /// The region's last LSN if this node already leads it at `epoch` or later: a promotion
    /// asked again (its answer was lost) is answered with that instead of refused.
    fn leads(&self, _region: u32, _epoch: u64) -> Option<u64> {
        None
    }
}

/// The node's hooks, shared by its connections.
pub type Hooks = Arc<dyn NodeHooks>;

/// The backup regions of one node.
pub struct Replica {
    db: Arc<Db>,
    regions: Mutex<HashMap<u32, Arc<ReplicaRegion>>>,
    epochs_file: PathBuf,
    epochs_turn: Mutex<()>,
    /// Counters.
    pub stats: ReplicaStats,
}

impl Replica {
    /// The replica of a store; epochs seen are kept in `epochs_file`.
    pub fn new(db: Arc<Db>, epochs_file: PathBuf) -> Arc<Replica> {
        Arc::new(Replica {
            db,
            regions: Mutex::new(HashMap::new()),
            epochs_file,
            epochs_turn: Mutex::new(()),
            stats: ReplicaStats::default(),
        })
    }

    fn stored_epochs(&self) -> HashMap<u32, u64> {
        let text = std::fs::read_to_string(&self.epochs_file).unwrap_or_default();
        text.lines()
            .filter_map(|l| {
                let (r, e) = l.split_once(' ')?;
                Some((r.parse().ok()?, e.parse().ok()?))
            })
            .collect()
    }

    fn store_epoch(&self, region: u32, epoch: u64) -> Result<()> {
        // Streams of several regions open at once: each rewrites the whole file through one
        // temporary, so they take turns (or one's rename fails and another's epoch is lost).
        let _turn = self.epochs_turn.lock();
        let mut all = self.stored_epochs();
        all.insert(region, epoch);
        let text: String = all.iter().map(|(r, e)| format!("{r} {e}\n")).collect();
        let tmp = self.epochs_file.with_extension("tmp");
        {
            use std::io::Write;
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(text.as_bytes())?;
            // An epoch a backup has promised to enforce must survive a crash.
            f.sync_all()?;
        }
        std::fs::rename(&tmp, &self.epochs_file)?;
        if let Some(dir) = self.epochs_file.parent() {
            std::fs::File::open(dir)?.sync_all()?;
        }
        Ok(())
    }

    /// Declares this node a backup of `region` at (at least) `epoch`.
    pub fn add_region(&self, id: u32, mode: Mode, epoch: u64) -> Result<()> {
        let epoch = epoch.max(self.stored_epochs().get(&id).copied().unwrap_or(0));
        self.store_epoch(id, epoch)?;
        let next = self.db.region(id)?.lsn() + 1;
        let r = ReplicaRegion {
            id,
            mode,
            epoch: AtomicU64::new(epoch),
            bufs: Mutex::new(HashMap::new()),
            sealed: Mutex::new(Vec::new()),
            build: Mutex::new((BTreeMap::new(), next)),
            received: AtomicU64::new(0),
            commit: AtomicU64::new(0),
            copying: AtomicBool::new(false),
            stream_gen: AtomicU64::new(0),
            deferred: Deferred { queued: AtomicU64::new(0), done: watch::Sender::new(0), failed: Mutex::new(None) },
            gate: Arc::new(tokio::sync::RwLock::new(())),
        };
        self.regions.lock().insert(id, Arc::new(r));
        Ok(())
    }

    /// Stops being a backup of `region` (it left the group): its streams are refused.
    pub fn remove_region(&self, id: u32) {
        self.regions.lock().remove(&id);
    }

    /// The backup regions.
    pub fn region(&self, id: u32) -> Option<Arc<ReplicaRegion>> {
        self.regions.lock().get(&id).cloned()
    }

    /// Handles one inbound connection: a primary's stream, or an admin request.
    pub async fn serve_connection(self: Arc<Self>, mut s: TcpStream, hooks: Hooks) -> Result<()> {
        s.set_nodelay(true)?;
        let Some(first) = self.authenticate(&mut s).await? else { return Ok(()) };
        match first {
            m @ Msg::Hello { .. } => self.streams(s, m).await,
            Msg::Promote { epoch, region } => {
                let reply = match self.promote(region, epoch, &hooks).await {
                    Ok((last_lsn, dropped)) => Msg::Promoted { region, last_lsn, dropped },
                    Err(e) => Msg::Reject { region, reason: e.to_string() },
                };
                s.write_all(&reply.encode()).await?;
                Ok(())
            }
            Msg::Dump { region, after, limit } => {
                // What a stream accepted counts as held here: finish installing it first, and
                // keep the stream from applying more until the page is read (a sealed
                // segment's buffer is gone from the tails before its write job has run).
                let r = self.region(region);
                let (_gate, settled) = match &r {
                    Some(r) => {
                        let gate = r.gate.write().await;
                        (Some(gate), r.settle().await)
                    }
                    None => (None, Ok(())),
                };
                let (db, me) = (self.db.clone(), self.clone());
                let reply = match settled {
                    Ok(()) => tokio::task::spawn_blocking(move || me.dump(&db, region, after, limit))
                        .await
                        .map_err(|e| Error::Protocol(e.to_string()))?,
                    Err(e) => Err(e),
                };
                let reply = reply.unwrap_or_else(|e| Msg::Reject { region, reason: e.to_string() });
                s.write_all(&reply.encode()).await?;
                Ok(())
            }
            Msg::Host { epoch, region, start, end } => {
                let h = hooks.clone();
                let r = tokio::task::spawn_blocking(move || h.host(region, epoch, &start, end.as_deref())).await;
                reply_done(&mut s, region, r).await
            }
            Msg::AddBackup { epoch, region, node, native, replication } => {
                let h = hooks.clone();
                let r = tokio::task::spawn_blocking(move || h.add_backup(region, epoch, &node, &native, &replication))
                    .await;
                reply_done(&mut s, region, r).await
            }
            m => Err(Error::Protocol(format!("{m:?} cannot open a connection"))),
        }
    }

    /// The connection's first message after its `Auth` frame, which must carry the cluster
    /// secret when this process has one (crate::auth); None (after a Reject saying why) if it
    /// does not.
    async fn authenticate(&self, s: &mut TcpStream) -> Result<Option<Msg>> {
        let first = wire::read_msg(s).await?;
        let (ok, next) = match first {
            Msg::Auth { secret } => (crate::auth::matches(&secret), None),
            m => (crate::auth::secret().is_none(), Some(m)),
        };
        if !ok {
            self.stats.unauthenticated.fetch_add(1, Relaxed);
            let reason = "this node requires the cluster secret: give every node and every `halyard admin` or \
                          `halyard cluster` command the same --cluster-secret"
                .to_string();
            tracing::warn!(peer = ?s.peer_addr().ok(), "replication connection refused: missing or wrong cluster secret");
            s.write_all(&Msg::Reject { region: 0, reason }.encode()).await?;
            return Ok(None);
        }
        match next {
            Some(m) => Ok(Some(m)),
            None => Ok(Some(wire::read_msg(s).await?)),
        }
    }

    async fn promote(&self, region: u32, epoch: u64, hook: &Hooks) -> Result<(u64, u64)> {
        let Some(r) = self.region(region) else {
            return match hook.leads(region, epoch) {
                Some(lsn) => Ok((lsn, 0)),
                None => Err(Error::Rejected(format!("not a backup of region {region}"))),
            };
        };
        if epoch <= r.epoch.load(Relaxed) {
            return Err(Error::Rejected(format!("promotion epoch {epoch} is not above {}", r.epoch.load(Relaxed))));
        }
        // From here the old primary's messages (lower epoch) are refused.
        {
            let _gate = r.gate.write().await;
            self.store_epoch(region, epoch)?;
            r.epoch.store(epoch, Relaxed);
        }
        // What the old primary's stream accepted before that is installed before the rebuild;
        // a job that failed leaves the copy incomplete, and the promotion is refused.
        r.settle().await?;
        let hook = hook.clone();
        tokio::task::spawn_blocking(move || hook.promote(region, epoch))
            .await
            .map_err(|e| Error::Protocol(e.to_string()))?
    }

    /// Stops being a backup of `region` and rebuilds it as a primary region (docs/design.md §3 step
    /// 6): Send-Index rebuilds L0 from the replicated logs plus the buffers; Build-Index applies
    /// what its buffers hold beyond the commit point. Returns the last LSN, the records not
    /// replayed, and the log tails it used (the other backups adopt them with the Remap).
    pub fn promote_region(&self, region: u32) -> Result<Promoted> {
        let r = self
            .regions
            .lock()
            .remove(&region)
            .ok_or_else(|| Error::Rejected(format!("not a backup of region {region}")))?;
        if r.mode == Mode::BuildIndex && r.copying.load(Relaxed) {
            self.regions.lock().insert(region, r);
            return Err(Error::Rejected(format!(
                "region {region} is still taking its full copy here and cannot lead yet; promote another backup"
            )));
        }
        let tails: Vec<LogTail> = r.bufs.lock().iter().map(|(log, b)| (*log, b.seg, b.salt, b.bytes.clone())).collect();
        if r.mode == Mode::BuildIndex {
            for log in [0, 2] {
                build_index(&self.db, &r, log, u64::MAX)?;
            }
            let last = self.db.region(region)?.lsn();
            let dropped = r.build.lock().0.len() as u64;
            return Ok(Promoted { last_lsn: last, dropped, tails });
        }
        let p = self.db.replication().promote(region, &tail_images(&tails))?;
        Ok(Promoted { last_lsn: p.last_lsn, dropped: p.dropped_records, tails })
    }

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
            self.store_epoch(region, epoch)?;
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
        let jobs = r.start_jobs();
        let lsn = self.db.region(region)?.lsn();
        Ok((Sub { r, gen, jobs }, lsn))
    }

    /// Serves one primary node's connection, which carries the streams of any number of its
    /// regions, each opened by its own Hello (`first` is the connection's first message).
    async fn streams(self: Arc<Self>, s: TcpStream, first: Msg) -> Result<()> {
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
                    cur = self.enter(&subs, region, &mut out).await;
                }
                let Some(c) = cur.as_ref() else { continue };
                let current = c.r.epoch.load(Relaxed);
                if epoch < current {
                    let why = format!("message of epoch {epoch} below the region's {current}");
                    cur = None;
                    self.close_sub(&subs, region, why, &mut out);
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
                        self.close_sub(&subs, region, e.to_string(), &mut out);
                    }
                }
            }
            drop(cur);
            buf.drain(..used);
            self.send_acks(&subs, acks, &mut out, &wr).await?;
        }
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
            let failed = r.deferred.failed.lock().clone();
            match failed {
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
        let Msg::Hello { version, epoch, region, mode } = hello else { return };
        let reply = match self.accept_stream(version, epoch, region, mode).await {
            Ok((sub, lsn)) => {
                // Open before the HelloOk leaves: the primary streams once it has it.
                subs.lock().insert(region, sub);
                Msg::HelloOk { region, lsn }
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

    /// Ends a region's stream on this connection with a Reject saying why; its later frames
    /// on the connection are dropped until the primary opens the stream again.
    fn close_sub(&self, subs: &Subs, region: u32, reason: String, out: &mut Vec<u8>) {
        self.stats.rejected.fetch_add(1, Relaxed);
        subs.lock().remove(&region);
        out.extend_from_slice(&Msg::Reject { region, reason }.encode());
    }

    /// Applies one message; returns the LSN to acknowledge for appends. With `jobs` (a
    /// Send-Index stream) segment writes and installs are queued there in order instead of
    /// run before the next message is read; messages that replace the region's state wait
    /// for the queue first.
    async fn apply(&self, r: &Arc<ReplicaRegion>, m: Msg, jobs: Option<&mpsc::Sender<Job>>) -> Result<Option<u64>> {
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
            Msg::Remap { last_lsn, tails, log, index, .. } => {
                r.settle().await?;
                let maps =
                    ReplicaMaps { log: log.iter().map(|&(p, s, n)| ((p, s), n)).collect(), index: index.to_vec() };
                apply_remap(db, r, last_lsn, &tails, maps).await?
            }
            Msg::Reset { .. } => {
                r.settle().await?;
                apply_reset(db, r).await?
            }
            m => return Err(Error::Protocol(format!("{m:?} inside a replication stream"))),
        }
        Ok(None)
    }
}

/// Where a message's index work runs: behind the stream's earlier jobs when it has a queue
/// (see [`Deferred`]), else on a blocking thread before the next message is read.
struct Work<'a> {
    r: &'a Arc<ReplicaRegion>,
    jobs: Option<&'a mpsc::Sender<Job>>,
}

impl Work<'_> {
    async fn queue(&self, f: Job) -> Result<()> {
        let Some(tx) = self.jobs else { return run_now(f).await };
        self.r.deferred.queued.fetch_add(1, Relaxed);
        if tx.send(f).await.is_err() {
            // The runner is gone only with the runtime.
            self.r.deferred.done.send_modify(|d| *d += 1);
            return Err(Error::Protocol("index job runner stopped".into()));
        }
        Ok(())
    }
}

/// Runs `f` on a blocking thread and waits for it.
async fn run_now(f: Job) -> Result<()> {
    tokio::task::spawn_blocking(f).await.map_err(|e| Error::Protocol(e.to_string()))?
}

/// Build-Index: the job that replays what `log`'s buffer gained, up to the commit point.
fn replay_job(db: Arc<Db>, r: &Arc<ReplicaRegion>, log: u8) -> Job {
    let r = r.clone();
    Box::new(move || build_index(&db, &r, log, r.commit.load(Relaxed)))
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
    let tails: Vec<LogTail> = r.bufs.lock().iter().map(|(l, b)| (*l, b.seg, b.salt, b.bytes.clone())).collect();
    let p = db.replication().promote(r.id, &tail_images(&tails))?;
    for b in r.bufs.lock().values_mut() {
        b.decoded = b.bytes.len();
    }
    *r.build.lock() = (BTreeMap::new(), p.last_lsn + 1);
    r.copying.store(false, Relaxed);
    tracing::info!(region = r.id, lsn = p.last_lsn, "Build-Index copy caught up");
    Ok(())
}

/// The engine's view of log tails (log, primary segment, salt, bytes); logs other than L0 and
/// large are left out.
fn tail_images(tails: &[LogTail]) -> Vec<TailImage<'_>> {
    tails
        .iter()
        .filter_map(|(log, seg, salt, b)| {
            Some(TailImage { log: log_kind(*log).ok()?, primary: *seg, salt: *salt, bytes: b })
        })
        .collect()
}

/// A Remap from a newly promoted primary: its history wins. Our own buffers may hold records
/// it never received (sent by the old primary as it died); its tails replace them.
async fn apply_remap(
    db: Arc<Db>,
    r: &Arc<ReplicaRegion>,
    last_lsn: u64,
    tails: &[LogTail],
    maps: ReplicaMaps,
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
        Mode::SendIndex => run_now(Box::new(move || remap_send_index(&db, &r, &maps))).await,
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
/// segments and SSTs to the new primary's.
fn remap_send_index(db: &Db, r: &ReplicaRegion, maps: &ReplicaMaps) -> Result<()> {
    let seg_bytes = db.options().segment_bytes as usize;
    let bufs: Vec<(u8, Buf)> = r.bufs.lock().drain().collect();
    for (log, b) in bufs {
        // Whole segments: bytes of our own longer copy must not survive.
        let mut img = b.bytes;
        img.resize(seg_bytes.max(img.len()), 0);
        db.replication().backup_log_segment(r.id, log_kind(log)?, b.seg, b.salt, &img)?;
    }
    db.replication().remap(r.id, maps)?;
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

async fn reply_done(
    s: &mut TcpStream,
    region: u32,
    r: std::result::Result<Result<()>, tokio::task::JoinError>,
) -> Result<()> {
    let reply = match r {
        Ok(Ok(())) => Msg::Done { region },
        Ok(Err(e)) => Msg::Reject { region, reason: e.to_string() },
        Err(e) => Msg::Reject { region, reason: e.to_string() },
    };
    s.write_all(&reply.encode()).await?;
    Ok(())
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
        | Msg::Copied { region, epoch, .. } => Some((*region, *epoch)),
        _ => None,
    }
}

fn log_kind(v: u8) -> Result<LogKind> {
    match v {
        0 => Ok(LogKind::L0),
        2 => Ok(LogKind::Large),
        _ => Err(Error::Malformed("log other than L0 or large in a record stream")),
    }
}

/// Build-Index: what the buffers hold beyond the applied LSN (received but not yet known to
/// be on every backup): the newest value per key of the complete batches, in LSN order.
fn build_overlay(r: &ReplicaRegion, now: u64) -> halyard_engine::Overlay {
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

/// Build-Index: decodes the records a buffer gained and applies every complete batch whose
/// LSNs follow the last applied one (the two logs interleave by LSN).
fn build_index(db: &Db, r: &ReplicaRegion, log: u8, upto: u64) -> Result<()> {
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
            (_, Some(end)) => batch.delete_range(x.key, end),
            (Some(v), None) => batch.put_expiring(x.key, v, x.expire_at),
            (None, None) => batch.delete(x.key),
        };
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

impl Replica {
    /// One page of a region's logical contents (for `halyard admin verify`). On a Send-Index
    /// backup that is its levels overlaid with the records of its replicated logs and buffers
    /// beyond them (what promotion would rebuild); elsewhere the region as it reads.
    fn dump(&self, db: &Db, region: u32, after: Option<Vec<u8>>, limit: u32) -> Result<Msg> {
        use std::ops::Bound;
        let h = db.region(region)?;
        let start = match &after {
            Some(k) => Bound::Excluded(k.as_slice()),
            None => Bound::Unbounded,
        };
        let limit = if limit == 0 { 1000 } else { limit.min(10_000) } as usize;
        let overlay = match self.region(region) {
            Some(r) if r.takes_segments() => {
                let bufs = r.bufs.lock();
                for b in bufs.values() {
                    db.replication().backup_stage_tail(region, b.seg, b.salt, &b.bytes)?;
                }
                let tails: Vec<TailImage<'_>> = bufs
                    .iter()
                    .filter_map(|(log, b)| {
                        Some(TailImage { log: log_kind(*log).ok()?, primary: b.seg, salt: b.salt, bytes: &b.bytes })
                    })
                    .collect();
                db.replication().backup_overlay(region, &tails)?
            }
            Some(r) => build_overlay(&r, db.now_ms()),
            None => halyard_engine::Overlay::default(),
        };
        // The levels' scan and the logs' overlay, merged lazily in key order; the overlay is
        // newer where both hold a key.
        let mut pairs =
            overlay.pairs.clone().into_iter().filter(|(k, _)| after.as_ref().is_none_or(|a| k > a)).peekable();
        // The levels' pairs a range delete of the overlay hides are not there once promoted.
        let scan = h.scan_versions((start, Bound::<&[u8]>::Unbounded));
        let mut scan = scan.filter(|x| x.as_ref().map_or(true, |(k, ..)| !overlay.hides(k))).peekable();
        // (key, version, value; None for a delete).
        type Entry = (Vec<u8>, u64, Option<Vec<u8>>);
        let mut next = || -> Result<Option<Entry>> {
            let take_overlay = match (scan.peek(), pairs.peek()) {
                (_, None) => false,
                (None, Some(_)) => true,
                (Some(Err(_)), _) => false,
                (Some(Ok((k, ..))), Some((o, _))) => o <= k,
            };
            if take_overlay {
                let Some((k, (lsn, v))) = pairs.next() else { return Ok(None) };
                if scan.peek().is_some_and(|x| x.as_ref().is_ok_and(|x| x.0 == k)) {
                    scan.next();
                }
                return Ok(Some((k, lsn, v)));
            }
            match scan.next() {
                Some(x) => {
                    let (k, lsn, v) = x?;
                    Ok(Some((k, lsn, Some(v))))
                }
                None => Ok(None),
            }
        };
        // A page stays well inside the frame limit whatever the pair sizes.
        let (mut pairs, mut bytes, mut more) = (Vec::new(), 0usize, false);
        while let Some((k, lsn, v)) = next()? {
            let Some(v) = v else { continue };
            if pairs.len() == limit || (bytes + k.len() + v.len() > (8 << 20) && !pairs.is_empty()) {
                more = true;
                break;
            }
            bytes += k.len() + v.len();
            pairs.push((k, lsn, v));
        }
        Ok(Msg::DumpPage { region, lsn: h.lsn(), pairs, more })
    }
}
