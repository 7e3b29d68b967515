//! A primary node's connection to one backup node, shared by every region it ships there.
//!
//! With one connection per (region, backup), every replicated write cost the primary one send
//! and one acknowledgement read of its own, however many writes were in flight. Over one
//! connection per node pair, one writer task sends whatever the regions' links have queued in
//! one write, and the backup answers what arrived together with one write of acknowledgements.
//!
//! Each region's session opens a *route* on the connection: it sends its Hello, gets HelloOk or
//! Reject for its region back, and then *attaches* its link's queue, which the writer drains
//! from then on. A route's acknowledgements count only after its HelloOk (acknowledgements that
//! arrive earlier belong to an older stream of the region on the same connection). A Reject ends
//! one route; a connection that fails ends them all, and the next session connects anew.

use crate::link::{Item, Link, Queue, ShipStats};
use crate::wire::{self, Msg};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::{mpsc, Notify};

/// Bytes one write gathers at most before it goes out.
const MAX_BATCH: usize = 1 << 20;

/// The connections of a primary node, one per backup address.
#[derive(Default)]
pub(crate) struct Peers {
    map: Mutex<HashMap<String, Arc<Peer>>>,
}

impl Peers {
    pub(crate) fn get(&self, addr: &str) -> Arc<Peer> {
        self.map.lock().entry(addr.to_string()).or_insert_with(|| Arc::new(Peer::new(addr))).clone()
    }
}

/// One backup node's address and its current connection.
pub(crate) struct Peer {
    addr: String,
    conn: tokio::sync::Mutex<Option<Arc<Conn>>>,
}

impl Peer {
    fn new(addr: &str) -> Peer {
        Peer { addr: addr.to_string(), conn: tokio::sync::Mutex::new(None) }
    }

    /// The open connection, or a new one (sessions asking at once share one attempt).
    pub(crate) async fn conn(&self, stats: &Arc<ShipStats>) -> crate::Result<Arc<Conn>> {
        let mut slot = self.conn.lock().await;
        if let Some(c) = slot.as_ref().filter(|c| !c.dead.load(Relaxed)) {
            return Ok(c.clone());
        }
        let mut stream = tokio::net::TcpStream::connect(&self.addr).await?;
        stream.set_nodelay(true)?;
        if let Some(f) = halyard_admin::auth::hello_frame() {
            stream.write_all(&f).await?;
        }
        let (rd, wr) = stream.into_split();
        let c = Arc::new(Conn {
            direct: Mutex::new(Vec::new()),
            attached: Mutex::new(Vec::new()),
            routes: Mutex::new(HashMap::new()),
            wake: Arc::new(Notify::new()),
            dead: AtomicBool::new(false),
            next_id: AtomicU64::new(1),
            stats: stats.clone(),
        });
        stats.connections.fetch_add(1, Relaxed);
        tokio::spawn(c.clone().write_loop(wr));
        tokio::spawn(c.clone().read_loop(rd));
        *slot = Some(c.clone());
        Ok(c)
    }
}

struct Route {
    id: u64,
    link: Arc<Link>,
    /// HelloOk arrived: acknowledgements count from here on.
    open: bool,
    /// HelloOk and Reject for the session.
    tx: mpsc::UnboundedSender<Msg>,
}

struct Attached {
    id: u64,
    link: Arc<Link>,
    queue: Queue,
    /// Frames queued before the next Restart are stale (the session sent a full copy).
    skip: bool,
    /// The full copy being sent: the link's queue waits behind it.
    feed: Option<crate::link::Feed>,
}

/// One TCP connection to a backup node.
pub(crate) struct Conn {
    /// Frames a session sends itself (Hello, Remap), ahead of any attached queue's.
    direct: Mutex<Vec<u8>>,
    attached: Mutex<Vec<Attached>>,
    routes: Mutex<HashMap<u32, Route>>,
    wake: Arc<Notify>,
    dead: AtomicBool,
    next_id: AtomicU64,
    stats: Arc<ShipStats>,
}

/// A session's route; dropping it closes the route and detaches its queue.
pub(crate) struct RouteGuard {
    conn: Arc<Conn>,
    region: u32,
    id: u64,
    link: Arc<Link>,
}

impl Drop for RouteGuard {
    fn drop(&mut self) {
        let mut routes = self.conn.routes.lock();
        if routes.get(&self.region).is_some_and(|r| r.id == self.id) {
            routes.remove(&self.region);
        }
        drop(routes);
        self.conn.attached.lock().retain(|a| a.id != self.id);
        let mut w = self.link.waker.lock();
        if w.as_ref().is_some_and(|w| Arc::ptr_eq(w, &self.conn.wake)) {
            *w = None;
        }
    }
}

impl Conn {
    /// Opens `region`'s route for `link` (replacing an older session's) and returns it with
    /// the receiver of the backup's HelloOk or Reject.
    pub(crate) fn open(self: &Arc<Self>, region: u32, link: &Arc<Link>) -> (RouteGuard, mpsc::UnboundedReceiver<Msg>) {
        let id = self.next_id.fetch_add(1, Relaxed);
        let (tx, rx) = mpsc::unbounded_channel();
        if !self.dead.load(Relaxed) {
            self.routes.lock().insert(region, Route { id, link: link.clone(), open: false, tx });
        }
        // A connection that died before this (its routes were cleared) leaves `rx` closed.
        (RouteGuard { conn: self.clone(), region, id, link: link.clone() }, rx)
    }

    /// Sends a frame ahead of the attached queues.
    pub(crate) fn send(&self, frame: &[u8]) {
        self.direct.lock().extend_from_slice(frame);
        self.wake.notify_one();
    }

    /// Hands the route's link queue to the writer, which sends what it holds and what comes.
    pub(crate) fn attach(&self, route: &RouteGuard, queue: Queue, skip: bool) {
        self.attached.lock().push(Attached { id: route.id, link: route.link.clone(), queue, skip, feed: None });
        *route.link.waker.lock() = Some(self.wake.clone());
        self.wake.notify_one();
    }

    fn kill(&self, why: &str) {
        if !self.dead.swap(true, Relaxed) {
            tracing::warn!("replication connection lost: {why}");
        }
        // Dropping the routes' senders ends every session waiting on this connection.
        self.routes.lock().clear();
        self.attached.lock().clear();
        self.wake.notify_one();
    }

    /// Moves what is waiting into `batch`: the direct frames, then each attached live link's
    /// queue, starting one link further on each round so that a full copy cannot starve the
    /// other regions.
    fn fill(&self, batch: &mut Vec<u8>, round: usize) {
        batch.append(&mut self.direct.lock());
        let mut attached = self.attached.lock();
        let n = attached.len();
        for i in 0..n {
            if batch.len() >= MAX_BATCH {
                break;
            }
            let Some(a) = attached.get_mut((round + i) % n) else { continue };
            if !a.link.is_live() {
                continue; // It stopped taking frames; its session is ending.
            }
            let start = batch.len();
            let queue = a.queue.clone();
            let mut q = queue.lock();
            let mut taken = 0;
            while batch.len() < MAX_BATCH {
                if a.feed.is_some() {
                    if self.take_copy(a, batch) {
                        continue;
                    }
                    break;
                }
                let Ok(item) = q.try_recv() else { break };
                match item {
                    Item::Restart => {
                        a.skip = false;
                        batch.truncate(start);
                    }
                    Item::Frame(f) => {
                        taken += f.len() as u64;
                        if !a.skip {
                            batch.extend_from_slice(&f);
                        }
                    }
                    // A stale copy (before the Restart) is dropped: its reader stops.
                    Item::Copy(feed) => a.feed = (!a.skip).then_some(feed),
                }
            }
            drop(q);
            a.link.dequeued(taken);
        }
    }

    /// Moves the next chunk of the copy being sent into `batch`; false when none is ready yet
    /// (or the copy failed) and the link's queue must wait.
    fn take_copy(&self, a: &mut Attached, batch: &mut Vec<u8>) -> bool {
        use crate::link::Chunk;
        use tokio::sync::mpsc::error::TryRecvError;
        let Some(feed) = a.feed.as_mut() else { return true };
        let why = match feed.try_recv() {
            Ok(Chunk::Frame(f)) => {
                batch.extend_from_slice(&f);
                self.stats.bytes.fetch_add(f.len() as u64, Relaxed);
                // The queue's stall check sees the link making progress.
                a.link.drained.fetch_add(f.len() as u64, Relaxed);
                return true;
            }
            Ok(Chunk::Done) => {
                a.feed = None;
                a.link.copying.store(false, Relaxed);
                a.link.acked.send_modify(|_| {});
                return true;
            }
            Err(TryRecvError::Empty) => return false,
            Ok(Chunk::Failed(why)) => why,
            Err(TryRecvError::Disconnected) => "the copy's reader stopped".to_string(),
        };
        a.feed = None;
        a.link.fail(&why, &self.stats);
        false
    }

    async fn write_loop(self: Arc<Self>, mut wr: OwnedWriteHalf) {
        let mut batch = Vec::with_capacity(256 << 10);
        let mut round = 0usize;
        loop {
            self.wake.notified().await;
            // Requests that arrived together are being handled by the tasks ready on this
            // worker: let them queue their frames first, so that one write carries them all.
            tokio::task::yield_now().await;
            loop {
                if self.dead.load(Relaxed) {
                    return; // Dropping the write half tells the backup.
                }
                batch.clear();
                round = round.wrapping_add(1);
                self.fill(&mut batch, round);
                if batch.is_empty() {
                    break;
                }
                if let Err(e) = wr.write_all(&batch).await {
                    return self.kill(&e.to_string());
                }
                self.stats.sent.fetch_add(batch.len() as u64, Relaxed);
                self.stats.writes.fetch_add(1, Relaxed);
            }
        }
    }

    async fn read_loop(self: Arc<Self>, mut rd: OwnedReadHalf) {
        let mut buf: Vec<u8> = Vec::with_capacity(64 << 10);
        let why = loop {
            match rd.read_buf(&mut buf).await {
                Ok(0) => break "the backup closed the connection".to_string(),
                Ok(n) => self.stats.received.fetch_add(n as u64, Relaxed),
                Err(e) => break e.to_string(),
            };
            let mut used = 0;
            let r = loop {
                match wire::decode_frame(buf.get(used..).unwrap_or_default()) {
                    Ok(Some((m, len))) => {
                        used += len;
                        if let Err(e) = self.dispatch(m) {
                            break Err(e);
                        }
                    }
                    Ok(None) => break Ok(()),
                    Err(e) => break Err(e.to_string()),
                }
            };
            buf.drain(..used);
            if let Err(e) = r {
                break e;
            }
            if self.dead.load(Relaxed) {
                return;
            }
        };
        self.kill(&why);
    }

    fn dispatch(&self, m: Msg) -> Result<(), String> {
        let mut routes = self.routes.lock();
        match m {
            Msg::Ack { region, lsn } => {
                // No route: the session is gone; not open: an older stream's acknowledgement.
                if let Some(r) = routes.get(&region).filter(|r| r.open) {
                    r.link.acked.send_if_modified(|v| {
                        let grew = lsn > *v;
                        if grew {
                            *v = lsn;
                        }
                        grew
                    });
                }
            }
            Msg::HelloOk { region, .. } => {
                if let Some(r) = routes.get_mut(&region) {
                    r.open = true;
                    let _ = r.tx.send(m);
                }
            }
            Msg::Reject { region, .. } => {
                if let Some(r) = routes.remove(&region) {
                    let _ = r.tx.send(m);
                }
            }
            m => return Err(format!("unexpected {m:?} from a backup")),
        }
        Ok(())
    }
}
