//! The primary side: a [`ShipListener`] that turns what the engine does (log appends and seals,
//! compaction output, edits) into frames, one stream per (region, backup), and tracks what each
//! backup acknowledged so that writers can wait for `last-write` durability.

use crate::wire::{Mode, Msg};
use halyard_engine::{encode_shipped_edits, Edit, LogKind, ShipListener, ShippedSegment};
use parking_lot::RwLock;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::sync::{mpsc, watch};

/// Acked LSN value that marks a link as given up (writers stop waiting for it).
const BROKEN: u64 = u64::MAX;

/// Counters of what the primary shipped.
#[derive(Default, Debug)]
pub struct ShipStats {
    /// Frame bytes queued for backups (each backup counted).
    pub bytes: AtomicU64,
    /// Frames queued.
    pub frames: AtomicU64,
    /// Links given up (disconnected or silent past the ack timeout).
    pub broken_links: AtomicU64,
}

/// One backup of one region.
pub struct Link {
    /// Backup node name.
    pub node: String,
    addr: String,
    tx: mpsc::UnboundedSender<Arc<Vec<u8>>>,
    rx: parking_lot::Mutex<Option<mpsc::UnboundedReceiver<Arc<Vec<u8>>>>>,
    acked: watch::Sender<u64>,
    broken: AtomicBool,
}

impl Link {
    fn give_up(&self, why: &str, stats: &ShipStats) {
        if !self.broken.swap(true, Relaxed) {
            tracing::warn!(backup = %self.node, "replication link given up: {why}");
            stats.broken_links.fetch_add(1, Relaxed);
            self.acked.send_replace(BROKEN);
        }
    }

    /// Whether the link was given up.
    pub fn is_broken(&self) -> bool {
        self.broken.load(Relaxed)
    }

    /// Last LSN the backup acknowledged.
    pub fn acked(&self) -> u64 {
        *self.acked.borrow()
    }
}

/// The streams of one region.
pub struct RegionStream {
    region: u32,
    epoch: u64,
    mode: Mode,
    links: Vec<Arc<Link>>,
}

/// Ships every primary region of a store to its backups.
pub struct Shipper {
    regions: RwLock<HashMap<u32, Arc<RegionStream>>>,
    /// Counters.
    pub stats: Arc<ShipStats>,
    ack_timeout: Duration,
}

impl Shipper {
    /// A shipper with no regions yet; writers give up on a backup silent for `ack_timeout`.
    pub fn new(ack_timeout: Duration) -> Arc<Shipper> {
        Arc::new(Shipper { regions: RwLock::new(HashMap::new()), stats: Arc::default(), ack_timeout })
    }

    /// Starts streaming `region` (epoch `epoch`) to `backups` (name, replication address).
    /// Frames queue from now on; each link connects (retrying) and sends `Hello`, then
    /// `first` (a `Remap` after a promotion), then the queue. Call before the region can
    /// produce anything to ship.
    pub fn add_region(&self, region: u32, epoch: u64, mode: Mode, backups: &[(String, String)]) -> Arc<RegionStream> {
        let links = backups
            .iter()
            .map(|(node, addr)| {
                let (tx, rx) = mpsc::unbounded_channel();
                Arc::new(Link {
                    node: node.clone(),
                    addr: addr.clone(),
                    tx,
                    rx: parking_lot::Mutex::new(Some(rx)),
                    acked: watch::Sender::new(0),
                    broken: AtomicBool::new(false),
                })
            })
            .collect();
        let s = Arc::new(RegionStream { region, epoch, mode, links });
        self.regions.write().insert(region, s.clone());
        s
    }

    /// Connects the links of a region added with [`Shipper::add_region`] (on the current
    /// tokio runtime).
    pub fn start(&self, stream: &Arc<RegionStream>, first: Option<Msg>) {
        for l in &stream.links {
            let Some(rx) = l.rx.lock().take() else {
                continue;
            };
            let hello = Msg::Hello { epoch: stream.epoch, region: stream.region, mode: stream.mode };
            let first = first.clone();
            let (l, stats) = (l.clone(), self.stats.clone());
            tokio::spawn(async move {
                if let Err(e) = run_link(&l, hello, first, rx, &stats).await {
                    l.give_up(&e.to_string(), &stats);
                }
            });
        }
    }

    /// Stops shipping a region (it is no longer led here).
    pub fn remove_region(&self, region: u32) {
        if let Some(s) = self.regions.write().remove(&region) {
            for l in &s.links {
                l.give_up("region no longer led by this node", &self.stats);
            }
        }
    }

    /// The links of a region.
    pub fn links(&self, region: u32) -> Vec<Arc<Link>> {
        self.regions.read().get(&region).map(|s| s.links.clone()).unwrap_or_default()
    }

    /// Waits until every live backup of `region` acknowledged `lsn` (`last-write`). A backup
    /// silent past the ack timeout is given up (the region runs with fewer copies, logged and
    /// counted) rather than blocking writes forever.
    pub async fn wait_acked(&self, region: u32, lsn: u64) {
        let links = self.links(region);
        for l in links {
            let mut rx = l.acked.subscribe();
            let r = tokio::time::timeout(self.ack_timeout, rx.wait_for(|v| *v >= lsn)).await;
            if r.is_err() {
                l.give_up(&format!("no acknowledgement of LSN {lsn} within {:?}", self.ack_timeout), &self.stats);
            }
        }
    }

    fn send(&self, region: u32, sst_stream: bool, msg: impl FnOnce(u64, u64) -> Msg) {
        let Some(s) = self.regions.read().get(&region).cloned() else {
            return;
        };
        if sst_stream && s.mode == Mode::BuildIndex {
            return; // Build-Index backups compact for themselves.
        }
        // The highest LSN every live backup holds: a prefix any new primary will have too.
        let commit = s.links.iter().map(|l| l.acked()).filter(|&a| a != BROKEN).min().unwrap_or(0);
        let frame = Arc::new(msg(s.epoch, commit).encode());
        for l in &s.links {
            if !l.is_broken() && l.tx.send(frame.clone()).is_ok() {
                self.stats.bytes.fetch_add(frame.len() as u64, Relaxed);
                self.stats.frames.fetch_add(1, Relaxed);
            }
        }
    }
}

async fn run_link(
    l: &Arc<Link>,
    hello: Msg,
    first: Option<Msg>,
    mut rx: mpsc::UnboundedReceiver<Arc<Vec<u8>>>,
    stats: &Arc<ShipStats>,
) -> crate::Result<()> {
    let mut delay = Duration::from_millis(20);
    let stream = loop {
        match tokio::net::TcpStream::connect(&l.addr).await {
            Ok(s) => break s,
            Err(e) => {
                if l.is_broken() {
                    return Err(e.into());
                }
                tracing::debug!(backup = %l.node, "connecting to {}: {e}; retrying", l.addr);
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(1));
            }
        }
    };
    stream.set_nodelay(true)?;
    let (mut rd, mut wr) = stream.into_split();
    wr.write_all(&hello.encode()).await?;
    match crate::wire::read_msg(&mut rd).await? {
        Msg::HelloOk { .. } => {}
        Msg::Reject { reason, .. } => return Err(crate::Error::Rejected(reason)),
        m => return Err(crate::Error::Protocol(format!("{m:?} instead of HelloOk"))),
    }
    if let Some(m) = first {
        wr.write_all(&m.encode()).await?;
    }
    let (reader_link, reader_stats) = (l.clone(), stats.clone());
    tokio::spawn(async move {
        loop {
            match crate::wire::read_msg(&mut rd).await {
                Ok(Msg::Ack { lsn, .. }) => {
                    reader_link.acked.send_if_modified(|v| {
                        let grew = lsn > *v && *v != BROKEN;
                        if grew {
                            *v = lsn;
                        }
                        grew
                    });
                }
                Ok(Msg::Reject { reason, .. }) => return reader_link.give_up(&reason, &reader_stats),
                Ok(m) => return reader_link.give_up(&format!("unexpected {m:?}"), &reader_stats),
                Err(e) => return reader_link.give_up(&e.to_string(), &reader_stats),
            }
        }
    });
    let mut batch = Vec::with_capacity(256 << 10);
    while let Some(f) = rx.recv().await {
        batch.clear();
        batch.extend_from_slice(&f);
        while batch.len() < (1 << 20) {
            match rx.try_recv() {
                Ok(f) => batch.extend_from_slice(&f),
                Err(_) => break,
            }
        }
        if l.is_broken() {
            break;
        }
        wr.write_all(&batch).await?;
    }
    Ok(())
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
}
