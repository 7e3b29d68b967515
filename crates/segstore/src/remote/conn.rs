//! One storage node as a client sees it: a pool of authenticated connections, the requests in
//! flight to it, the queue it last reported, and whether it answered lately.

use crate::wire::{read_frame, write_frame, Code, Reply, Request};
use parking_lot::Mutex;
use std::io;
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering::Relaxed};
use std::time::{Duration, Instant};

/// Why a call failed.
#[derive(Debug)]
pub(crate) enum Fail {
    /// The node did not answer (refused, reset, timed out, or sent nonsense).
    Unreachable(io::Error),
    /// The node answered with an error.
    Refused(Code, String),
}

impl Fail {
    pub(crate) fn into_io(self, addr: &str) -> io::Error {
        match self {
            Fail::Unreachable(e) => io::Error::new(e.kind(), format!("storage node {addr}: {e}")),
            Fail::Refused(c, m) => io::Error::other(format!("storage node {addr} refused ({c:?}): {m}")),
        }
    }
}

/// A request on its way: the connection it went out on, or its outcome already (a failed
/// connect or send, or a refused claim).
pub(crate) struct Sent {
    started: Instant,
    stream: Option<TcpStream>,
    early: Option<io::Result<Reply>>,
}

impl Sent {
    /// The socket the reply will come on, if the request went out.
    pub(crate) fn fd(&self) -> Option<std::os::fd::RawFd> {
        use std::os::fd::AsRawFd;
        self.stream.as_ref().map(AsRawFd::as_raw_fd)
    }
}

pub(crate) struct Node {
    pub(crate) addr: String,
    pool: Mutex<Vec<TcpStream>>,
    inflight: AtomicU32,
    queue: AtomicU32,
    /// Recent microseconds per 4 KiB block a call took (an exponential moving average).
    block_us: AtomicU32,
    down_since: Mutex<Option<Instant>>,
    /// Marked drained in etcd: it takes no new fragments and its fragments move off.
    draining: AtomicBool,
    /// Drained, and this store's fragments there all moved off or dropped.
    emptied: AtomicBool,
    timeout: Duration,
    secret: Vec<u8>,
    /// The store's claim each new connection makes after Hello (`node/claims.rs`).
    claim: Mutex<Option<Request>>,
}

impl Node {
    pub(crate) fn new(addr: &str, timeout: Duration, secret: &[u8]) -> Node {
        Node {
            addr: addr.to_string(),
            pool: Mutex::new(Vec::new()),
            inflight: AtomicU32::new(0),
            queue: AtomicU32::new(0),
            block_us: AtomicU32::new(0),
            down_since: Mutex::new(None),
            draining: AtomicBool::new(false),
            emptied: AtomicBool::new(false),
            timeout,
            secret: secret.to_vec(),
            claim: Mutex::new(None),
        }
    }

    /// Makes every connection from now on claim the store with `claim` (a [`Request::Claim`]);
    /// pooled connections, which hold no claim, are dropped.
    pub(crate) fn set_claim(&self, claim: Option<Request>) {
        *self.claim.lock() = claim;
        self.forget_connections();
    }

    /// How busy the node looks (power-of-d keeps the least busy): the time it took lately per
    /// block, times the requests waiting on it (this client's in flight and the queue it
    /// reported last). A node behind a slow link or disk shows in the first factor even while
    /// nothing waits on it, which is when a new segment is usually placed.
    pub(crate) fn load(&self) -> u32 {
        let waiting = 1 + self.inflight.load(Relaxed) + self.queue.load(Relaxed);
        self.block_us.load(Relaxed).max(1).saturating_mul(waiting)
    }

    fn observe(&self, took: Duration, bytes: usize) {
        let per_block = (took.as_micros() as u64 / (1 + bytes as u64 / 4096)).min(u32::MAX as u64) as u32;
        let old = self.block_us.load(Relaxed);
        let new = if old == 0 { per_block } else { old - old / 8 + per_block / 8 };
        self.block_us.store(new, Relaxed);
    }

    pub(crate) fn draining(&self) -> bool {
        self.draining.load(Relaxed)
    }

    /// Marks the node drained or not; a node drained again is emptied again.
    pub(crate) fn set_draining(&self, on: bool) {
        if self.draining.swap(on, Relaxed) != on {
            self.emptied.store(false, Relaxed);
        }
    }

    /// Drained, answering, and still holding this store's fragments as far as it is known.
    pub(crate) fn to_empty(&self) -> bool {
        self.draining() && !self.emptied.load(Relaxed) && self.down_since().is_none()
    }

    pub(crate) fn set_emptied(&self) {
        self.emptied.store(true, Relaxed);
    }

    /// Since when calls to it fail, if they do.
    pub(crate) fn down_since(&self) -> Option<Instant> {
        *self.down_since.lock()
    }

    /// A connection that gave the secret and made the store's claim, or the node's refusal of
    /// the claim (another processing node claimed the store since).
    fn connect(&self) -> io::Result<Result<TcpStream, Reply>> {
        let addr = self
            .addr
            .to_socket_addrs()?
            .next()
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "address resolves to nothing"))?;
        let mut s = TcpStream::connect_timeout(&addr, self.timeout)?;
        s.set_nodelay(true)?;
        s.set_read_timeout(Some(self.timeout))?;
        s.set_write_timeout(Some(self.timeout))?;
        let hello = Request::Hello { secret: self.secret.clone() };
        match exchange(&mut s, &hello)? {
            (Reply::Ok, _) => {}
            (r, _) => {
                return Err(io::Error::new(io::ErrorKind::PermissionDenied, format!("refused the connection: {r:?}")))
            }
        }
        let claim = self.claim.lock().clone();
        let Some(Request::Claim { store, epoch, owner }) = claim else { return Ok(Ok(s)) };
        match exchange(&mut s, &Request::Claim { store: store.clone(), epoch, owner: owner.clone() })? {
            (Reply::Claimed { epoch: e, owner: o }, _) if e == epoch && o == owner => Ok(Ok(s)),
            (Reply::Claimed { epoch: e, owner: o }, _) => Ok(Err(fenced(&store, epoch, e, &o))),
            (r @ Reply::Error { .. }, _) => Ok(Err(r)),
            (r, _) => Ok(Err(Reply::Error { code: Code::Malformed, message: format!("answered a claim with {r:?}") })),
        }
    }

    /// Sends `req` and waits for the reply; a node that fails to answer is marked down.
    pub(crate) fn call(&self, req: &Request) -> Result<Reply, Fail> {
        let sent = self.send(req);
        self.receive(req, sent)
    }

    /// The first half of [`Node::call`]: `req` sent on a connection (or why not). Sending to
    /// several nodes before receiving from any lets them work at once without a thread each.
    pub(crate) fn send(&self, req: &Request) -> Sent {
        self.inflight.fetch_add(1, Relaxed);
        let started = Instant::now();
        let pooled = self.pool.lock().pop();
        let s = match pooled {
            Some(s) => Ok(s),
            None => match self.connect() {
                Ok(Ok(s)) => Ok(s),
                Ok(Err(refusal)) => return Sent { started, stream: None, early: Some(Ok(refusal)) },
                Err(e) => Err(e),
            },
        };
        match s.and_then(|mut s| write_frame(&mut s, &req.encode()).map(|()| s)) {
            Ok(s) => Sent { started, stream: Some(s), early: None },
            Err(e) => Sent { started, stream: None, early: Some(Err(e)) },
        }
    }

    /// The second half of [`Node::call`]: the reply to what [`Node::send`] sent.
    pub(crate) fn receive(&self, req: &Request, sent: Sent) -> Result<Reply, Fail> {
        let r = match (sent.early, sent.stream) {
            (Some(early), _) => early,
            (None, Some(mut s)) => {
                let r = self.reply_on(&mut s);
                let mut pool = self.pool.lock();
                if r.is_ok() && pool.len() < 16 {
                    pool.push(s);
                }
                r
            }
            (None, None) => Err(io::Error::other("nothing sent")),
        };
        self.inflight.fetch_sub(1, Relaxed);
        let bytes = match (req, &r) {
            (Request::Write { data, .. }, _) | (_, Ok(Reply::Data(data))) => data.len(),
            _ => 0,
        };
        self.observe(sent.started.elapsed(), bytes);
        match r {
            Ok(Reply::Error { code, message }) => Err(Fail::Refused(code, message)),
            Ok(reply) => {
                *self.down_since.lock() = None;
                Ok(reply)
            }
            Err(e) => {
                self.forget_connections();
                self.down_since.lock().get_or_insert_with(Instant::now);
                Err(Fail::Unreachable(e))
            }
        }
    }

    fn reply_on(&self, s: &mut TcpStream) -> io::Result<Reply> {
        let body = read_frame(s)?;
        let (reply, queue) =
            Reply::decode(&body).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?;
        self.queue.store(queue, Relaxed);
        Ok(reply)
    }

    /// Drops every pooled connection (after the node was seen to fail).
    pub(crate) fn forget_connections(&self) {
        self.pool.lock().clear();
    }
}

/// A storage node's fragments and their bytes, asked directly: `halyard cluster drain` of a
/// storage node waits for its fragments to reach none.
pub fn node_usage(addr: &str, secret: Option<&str>, timeout: Duration) -> io::Result<(u64, u64)> {
    let n = Node::new(addr, timeout, secret.unwrap_or_default().as_bytes());
    match n.call(&Request::Stats) {
        Ok(Reply::Stats { fragments, bytes, .. }) => Ok((fragments, bytes)),
        Ok(r) => Err(io::Error::new(io::ErrorKind::InvalidData, format!("{addr} answered Stats with {r:?}"))),
        Err(f) => Err(f.into_io(addr)),
    }
}

/// The refusal a processing node gets once another claimed its store at a later epoch.
pub(crate) fn fenced(store: &str, mine: u64, theirs: u64, owner: &str) -> Reply {
    Reply::Error {
        code: Code::Fenced,
        message: format!(
            "store {store} was claimed by {owner} at epoch {theirs} (this node's: {mine}): \
             another processing node opened this store, so this one must stop"
        ),
    }
}

fn exchange(s: &mut TcpStream, req: &Request) -> io::Result<(Reply, u32)> {
    write_frame(s, &req.encode())?;
    let body = read_frame(s)?;
    Reply::decode(&body).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))
}
