//! The native protocol front end: one task per connection, speaking `halyard_proto` frames.
//!
//! A connection reads whatever bytes are available, executes every complete frame in them in
//! order, and writes all the replies with one `write_all`: pipelined clients then cost one read
//! and one write syscall per batch rather than per request. A batch's engine calls run on the
//! connection's task. They are usually short, but a write may wait for an fdatasync or a
//! full L0, and other connections must not wait behind it: the engine runs such waits off the
//! runtime's worker ([`off_worker_hook`]); [`Offload`] moves a connection's batches off it for
//! a while after one was slow for another reason (device reads).
//!
//! In cluster mode a write to a region whose backup queue is full ([`Router::must_wait`]) is
//! not executed until the queue has room: the connection answers what it executed so far and
//! waits (asynchronously) for the region's backups to drain, then goes on.
//!
//! Framing errors (bad magic, bad checksum, oversized frame) lose the stream position, so the
//! connection gets an ERROR frame with request id 0 naming the problem and is closed. A frame that
//! is well formed but whose payload does not parse only fails that request: the next frame's
//! position is still known. Nothing a connection sends can reach the store except through a
//! fully decoded, checksummed request, and no state is shared with other connections except the
//! store and the counters.

use std::io;
use std::ops::Bound;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use halyard_engine::{Db, ScanOptions, WriteBatch};
use halyard_proto::{
    decode_frame, encode_response, scan_page_overhead, scan_pair_len, BatchOp, ErrorCode, Frame, Request, Response,
    ScanPage, ScanRequest, CONNECTION_ID, MIN_MAX_FRAME_BYTES, MIN_PROTOCOL_VERSION, PROTOCOL_VERSION,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Per-connection limits, from the server configuration.
#[derive(Debug, Clone, Copy)]
pub struct NativeLimits {
    /// Largest request frame accepted (header and checksum included); larger ones close the connection.
    /// Also caps reply frames, together with the limit the client announces in its HELLO.
    pub max_frame_bytes: usize,
    /// A connection that sends nothing for this long is sent an IdleTimeout error and closed.
    /// Also bounds how long one reply write may wait for a client that does not read.
    pub idle_timeout: Duration,
}

impl Default for NativeLimits {
    fn default() -> Self {
        NativeLimits { max_frame_bytes: halyard_proto::DEFAULT_MAX_FRAME_BYTES, idle_timeout: Duration::from_secs(300) }
    }
}

/// Counters shared by all native connections (read them for metrics).
#[derive(Debug, Default)]
pub struct NativeCounters {
    /// Request frames received (including HELLO and ones whose payload failed to parse).
    pub requests: AtomicU64,
    /// ERROR replies sent, and connections closed for idling.
    pub errors: AtomicU64,
    /// Malformed frames: bad magic or checksum, oversized, unparsable payload, truncated at close.
    pub bad_frames: AtomicU64,
    /// Bytes read from clients.
    pub bytes_in: AtomicU64,
    /// Bytes written to clients.
    pub bytes_out: AtomicU64,
    /// AUTH requests with a wrong password.
    pub auth_failures: AtomicU64,
}

/// A forwarded Redis command's outcome: its reply encoded in RESP and the (region, LSN) of its
/// writes, or the error code and message to answer with.
pub type RespOutcome = Result<(Vec<u8>, Vec<(u32, u64)>), (ErrorCode, String)>;

/// Cluster mode: which keys this node leads, and waiting for backups before answering writes.
pub trait Router: Send + Sync {
    /// The region of `key` when this node leads it; otherwise the message for a NotLeader error.
    fn route(&self, key: &[u8]) -> Result<u32, String>;
    /// Resolves once the backups hold every write listed as (region, LSN) (`last-write`);
    /// false if they may not (the writes must not be acknowledged).
    fn wait_acked<'a>(
        &'a self,
        writes: &'a [(u32, u64)],
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = bool> + Send + 'a>>;
    /// The region of `key` when a write to it must wait for room in its backups' queues.
    fn must_wait(&self, key: &[u8]) -> Option<u32>;
    /// Resolves once `region`'s backups' queues have room for writes.
    fn wait_room<'a>(&'a self, region: u32) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + 'a>>;
    /// Whether a write to `key` may run (the region's group is large enough); the error
    /// message otherwise.
    fn check_write(&self, key: &[u8]) -> Result<(), String>;
    /// The last region (no end key) when this node leads it (a reverse scan to the end).
    fn route_last(&self) -> Result<u32, String>;
    /// The node's region map as JSON (REGION_MAP).
    fn region_map(&self) -> Vec<u8>;
    /// Whether this node's epoch for `region` is `epoch` (a ROUTED request); the error to
    /// answer with otherwise.
    fn check_epoch(&self, region: u32, epoch: u64) -> Result<(), (ErrorCode, String)>;
    /// Whether `given` is the cluster secret (another node authenticating).
    fn is_cluster_secret(&self, given: &[u8]) -> bool;
    /// Runs a Redis command forwarded by another node (RESP): its encoded reply and the writes
    /// it made, or the error to answer with.
    fn resp(&self, region: u32, epoch: u64, proto: u8, args: &[&[u8]]) -> RespOutcome;
}

/// Initial receive buffer size and the amount added when it fills.
const READ_CHUNK: usize = 64 << 10;
/// Replies pending past this size are written before more requests are executed, so a pipeline
/// of small requests for large values cannot make the reply buffer grow without bound.
const FLUSH_BYTES: usize = 1 << 20;
/// A receive buffer grown past this (for one big frame) is shrunk back once it is empty.
const SHRINK_ABOVE: usize = 4 << 20;

/// Serves one native-protocol connection until the peer closes it, it idles past
/// `limits.idle_timeout`, or it sends a malformed or oversized frame. Returns an error only for
/// I/O failures (including a reply write that timed out); protocol problems are answered on the wire.
/// With a `password`, or `must_auth` (a peer beyond loopback of a node with only a cluster
/// secret: the secret is its password), every request but HELLO and AUTH waits for a
/// successful AUTH.
pub async fn serve_connection(
    stream: &mut TcpStream,
    db: Arc<Db>,
    limits: NativeLimits,
    counters: Arc<NativeCounters>,
    router: Option<Arc<dyn Router>>,
    password: Option<Arc<str>>,
    must_auth: bool,
) -> io::Result<()> {
    // Replies are written in whole batches already; Nagle would only add latency.
    let _ = stream.set_nodelay(true);
    let mut session = Session {
        db,
        counters,
        limits,
        reply_limit: limits.max_frame_bytes,
        handshaken: false,
        authed: password.is_none() && !must_auth,
        password,
        router,
        writes: Vec::new(),
        routed: Vec::new(),
    };
    let mut inbuf: Vec<u8> = Vec::with_capacity(READ_CHUNK);
    let mut out: Vec<u8> = Vec::new();
    let mut offload = Offload::new();
    loop {
        let (consumed, next) = offload.run(|| session.execute_available(&inbuf, &mut out));
        inbuf.drain(..consumed);
        send_replies(&mut session, stream, &mut out).await?;
        match next {
            Next::Close => {
                let _ = stream.shutdown().await;
                return Ok(());
            }
            Next::ReplyBufferFull => continue,
            Next::WaitRoom(region) => {
                if let Some(r) = &session.router {
                    r.wait_room(region).await;
                }
                continue;
            }
            Next::NeedBytes => {}
        }
        if inbuf.is_empty() && inbuf.capacity() > SHRINK_ABOVE {
            inbuf = Vec::with_capacity(READ_CHUNK);
        }
        if inbuf.capacity() - inbuf.len() < READ_CHUNK / 4 {
            inbuf.reserve(READ_CHUNK);
        }
        match tokio::time::timeout(limits.idle_timeout, stream.read_buf(&mut inbuf)).await {
            Err(_) => {
                session.counters.errors.fetch_add(1, Relaxed);
                let msg = format!("nothing received for {:?}; closing", limits.idle_timeout);
                error_reply(&mut out, CONNECTION_ID, ErrorCode::IdleTimeout, &msg, session.reply_limit);
                // Best effort and never blocking: the client is not talking, it may not be reading either.
                let _ = stream.try_write(&out);
                let _ = stream.shutdown().await;
                return Ok(());
            }
            Ok(Ok(0)) => {
                if !inbuf.is_empty() {
                    session.counters.bad_frames.fetch_add(1, Relaxed);
                }
                return Ok(());
            }
            Ok(Ok(n)) => session.counters.bytes_in.fetch_add(n as u64, Relaxed),
            Ok(Err(e)) => return Err(e),
        };
    }
}

/// Whether the current tokio runtime is multi-threaded (where [`Offload`] can leave the
/// worker).
fn multi_threaded() -> bool {
    tokio::runtime::Handle::try_current()
        .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread)
}

/// The engine's [`halyard_engine::WaitHook`] for a server: a wait that may last long (a writer
/// stalled on a full L0, the log's device writes, an fdatasync under `sync = always`) runs off
/// the runtime's worker (`block_in_place`: the worker's queue and I/O driver move to another
/// thread meanwhile), so that the worker's other connections are served. Outside a
/// multi-threaded runtime the wait runs where it is.
pub fn off_worker_hook() -> halyard_engine::WaitHook {
    halyard_engine::WaitHook(Arc::new(
        |f: &mut dyn FnMut()| if multi_threaded() { tokio::task::block_in_place(f) } else { f() },
    ))
}

/// A batch that took this long in the engine without announcing a wait (cache-miss reads on a
/// slow device): the connection's next batches leave the worker.
const SLOW_BATCH: Duration = Duration::from_millis(20);
/// How many batches a connection keeps leaving the worker after a slow one.
const SLOW_STAY: u32 = 64;

/// Runs a connection's batches of engine calls. The engine's own long waits leave the worker
/// through [`off_worker_hook`]; what is left is device reads of cache misses, short one by one,
/// so a batch runs inline (leaving the worker costs a thread hand-off per batch: a third of
/// pipelined SET/GET throughput when measured) unless a recent batch was slow anyway. On a
/// current-thread runtime batches always run inline.
pub struct Offload {
    multi: bool,
    /// Batches left to run off the worker.
    slow: u32,
}

impl Default for Offload {
    fn default() -> Self {
        Offload::new()
    }
}

impl Offload {
    /// For a connection on the current runtime.
    pub fn new() -> Offload {
        Offload { multi: multi_threaded(), slow: 0 }
    }

    /// Runs `f`, which calls the engine.
    pub fn run<R>(&mut self, f: impl FnOnce() -> R) -> R {
        if !self.multi {
            return f();
        }
        let off = self.slow > 0;
        self.slow = self.slow.saturating_sub(1);
        let t0 = std::time::Instant::now();
        let r = if off { tokio::task::block_in_place(f) } else { f() };
        if t0.elapsed() >= SLOW_BATCH {
            self.slow = SLOW_STAY;
        }
        r
    }
}

/// Writes a batch's replies (within the idle timeout), once the backups hold its writes
/// (last-write) in cluster mode. When a backup of the group does not acknowledge in time, the
/// client cannot know whether those writes took effect and must not be told they did: every
/// routed request of the batch is answered `OutcomeUnknown` instead, the others as they ran.
async fn send_replies(session: &mut Session, stream: &mut TcpStream, out: &mut Vec<u8>) -> io::Result<()> {
    if !session.writes.is_empty() {
        if let Some(r) = &session.router {
            if !r.wait_acked(&session.writes).await {
                session.counters.errors.fetch_add(1, Relaxed);
                *out = unknown_outcomes(out, &session.routed, session.reply_limit);
            }
        }
        session.writes.clear();
    }
    session.routed.clear();
    if !out.is_empty() {
        let written = tokio::time::timeout(session.limits.idle_timeout, stream.write_all(out)).await;
        match written {
            Ok(Ok(())) => session.counters.bytes_out.fetch_add(out.len() as u64, Relaxed),
            Ok(Err(e)) => return Err(e),
            Err(_) => return Err(io::Error::new(io::ErrorKind::TimedOut, "client did not read its replies")),
        };
        out.clear();
    }
    Ok(())
}

/// `out` with the replies at `routed` (request id, reply bytes) replaced by `OutcomeUnknown`.
fn unknown_outcomes(out: &[u8], routed: &[(u64, std::ops::Range<usize>)], limit: usize) -> Vec<u8> {
    const WHY: &str = "the region's backups did not confirm they hold this request's writes or the writes it read \
                       (a backup was silent past the ack timeout, or this node's role in the region ended): a write \
                       may or may not be kept; read it back, and resend only what is safe to run twice";
    let mut fixed = Vec::with_capacity(out.len());
    let mut at = 0;
    for (id, r) in routed {
        fixed.extend_from_slice(out.get(at..r.start).unwrap_or_default());
        error_reply(&mut fixed, *id, ErrorCode::OutcomeUnknown, WHY, limit);
        at = r.end;
    }
    fixed.extend_from_slice(out.get(at..).unwrap_or_default());
    fixed
}

/// What the connection loop does after executing the buffered frames.
enum Next {
    /// All complete frames were executed; read more.
    NeedBytes,
    /// Replies reached `FLUSH_BYTES`; write them, then execute the rest without reading.
    ReplyBufferFull,
    /// Write the replies, then close.
    Close,
    /// The next frame writes to this region, whose backups' queues are full: write the
    /// replies, wait for room, then execute the rest without reading.
    WaitRoom(u32),
}

/// What executing one frame asks of the connection.
enum Executed {
    /// Go on with the next frame.
    Next,
    /// Close after writing the replies.
    Close,
    /// Not executed: wait for room in this region's backups' queues first.
    WaitRoom(u32),
}

struct Session {
    db: Arc<Db>,
    counters: Arc<NativeCounters>,
    limits: NativeLimits,
    /// Largest reply frame: the smaller of our limit and the client's, once the HELLO is in.
    reply_limit: usize,
    handshaken: bool,
    /// The server's password (`requirepass`), if it has one.
    password: Option<Arc<str>>,
    /// No password, or AUTH gave it.
    authed: bool,
    router: Option<Arc<dyn Router>>,
    /// Cluster mode: (region, LSN) of the writes executed since the last reply write.
    writes: Vec<(u32, u64)>,
    /// Cluster mode: the requests since the last reply write that waited on `writes`, with
    /// where their replies lie in the reply buffer.
    routed: Vec<(u64, std::ops::Range<usize>)>,
}

impl Session {
    /// Executes the complete frames at the start of `inbuf`, appending replies to `out`.
    /// Returns the bytes consumed.
    fn execute_available(&mut self, inbuf: &[u8], out: &mut Vec<u8>) -> (usize, Next) {
        let mut consumed = 0;
        while out.len() < FLUSH_BYTES {
            let rest = inbuf.get(consumed..).unwrap_or_default();
            match decode_frame(rest, self.limits.max_frame_bytes) {
                Ok(None) => return (consumed, Next::NeedBytes),
                Ok(Some((frame, used))) => match self.execute(frame, out) {
                    Executed::Next => consumed += used,
                    Executed::Close => return (consumed + used, Next::Close),
                    Executed::WaitRoom(region) => return (consumed, Next::WaitRoom(region)),
                },
                Err(e) => {
                    self.counters.bad_frames.fetch_add(1, Relaxed);
                    self.error(out, CONNECTION_ID, e.code(), &format!("{e}; closing the connection"));
                    return (consumed, Next::Close);
                }
            }
        }
        (consumed, Next::ReplyBufferFull)
    }

    /// Executes one frame, unless it is a write that must wait for room first.
    fn execute(&mut self, frame: Frame<'_>, out: &mut Vec<u8>) -> Executed {
        let id = frame.id;
        let req = Request::decode(frame.kind, frame.payload);
        if let Some(region) = req.as_ref().ok().and_then(|r| self.must_wait(r)) {
            return Executed::WaitRoom(region);
        }
        self.counters.requests.fetch_add(1, Relaxed);
        let req = match req {
            Ok(req) => req,
            Err(e) => {
                // The frame itself was sound, so only this request fails.
                self.counters.bad_frames.fetch_add(1, Relaxed);
                self.error(out, id, e.code(), &e.to_string());
                return Executed::Next;
            }
        };
        let (start, waits) = (out.len(), self.writes.len());
        let open = self.execute_request(id, req, out);
        if self.writes.len() > waits {
            self.routed.push((id, start..out.len()));
        }
        if open {
            Executed::Next
        } else {
            Executed::Close
        }
    }

    /// Cluster mode: the region a write request must wait for room in (its first key's).
    fn must_wait(&self, req: &Request<'_>) -> Option<u32> {
        let router = self.router.as_ref()?;
        let key = match req {
            Request::Put { key, .. } | Request::Delete { key } => *key,
            Request::DeleteRange { start, .. } => *start,
            Request::Batch { ops } => match ops.first()? {
                BatchOp::Put { key, .. } | BatchOp::Delete { key } => *key,
            },
            Request::Routed { inner, .. } => return self.must_wait(inner),
            _ => return None,
        };
        router.must_wait(key)
    }

    /// Executes one request; false when the connection must close after the replies are written.
    fn execute_request(&mut self, id: u64, req: Request<'_>, out: &mut Vec<u8>) -> bool {
        let resp = match req {
            Request::Hello { min_version, max_version, max_frame_bytes } => {
                return self.hello(out, id, min_version, max_version, max_frame_bytes as usize);
            }
            _ if !self.handshaken => {
                self.error(out, id, ErrorCode::HandshakeRequired, "the first frame must be a HELLO; closing");
                return false;
            }
            Request::Auth { password } => Ok(self.auth(password)),
            _ if !self.authed => Ok(Response::Error {
                code: ErrorCode::AuthRequired,
                message: "this server has a password (requirepass): send AUTH first (halyard --password, ClientOptions::password)".into(),
            }),
            Request::Ping { payload } => Ok(Response::Pong { payload: payload.to_vec() }),
            Request::Get { key } if self.router.is_some() => self.routed(key, |h| h.get(key).map(Response::Value)),
            Request::Put { key, value } if self.router.is_some() => self.routed_write(key, |h| h.put(key, value)),
            Request::Delete { key } if self.router.is_some() => self.routed_write(key, |h| h.delete(key)),
            // Cluster mode: the range lies in the region of its first key (clients split it).
            Request::DeleteRange { start, end } if self.router.is_some() => {
                self.routed_write(start, |h| h.delete_range(start, end))
            }
            Request::DeleteRange { start, end } => self.db.delete_range(start, end).map(|()| Response::Done),
            Request::Get { key } => self.db.get(key).map(Response::Value),
            Request::Put { key, value } => self.db.put(key, value).map(|()| Response::Done),
            Request::Delete { key } => self.db.delete(key).map(|()| Response::Done),
            Request::Batch { ops } => self.batch(ops),
            Request::Scan(s) => self.scan(s),
            Request::Routed { region, epoch, inner } => match self.router.as_ref().map(|r| r.check_epoch(region, epoch)) {
                None | Some(Ok(())) => return self.execute_request(id, *inner, out),
                Some(Err((code, message))) => Ok(Response::Error { code, message }),
            },
            Request::Resp { region, epoch, proto, args } => match &self.router {
                Some(r) => match r.resp(region, epoch, proto, &args) {
                    Ok((reply, writes)) => {
                        self.writes.extend(writes);
                        Ok(Response::Value(Some(reply)))
                    }
                    Err((code, message)) => Ok(Response::Error { code, message }),
                },
                None => Ok(Response::Error {
                    code: ErrorCode::UnknownOp,
                    message: "a single node takes Redis commands on its Redis port only".into(),
                }),
            },
            Request::RegionMap => match &self.router {
                Some(r) => Ok(Response::Value(Some(r.region_map()))),
                None => Ok(Response::Error {
                    code: ErrorCode::UnknownOp,
                    message: "a single node has no region map: send every request here".into(),
                }),
            },
            _ => {
                self.error(out, id, ErrorCode::UnknownOp, "request not supported by this server");
                return true;
            }
        };
        match resp {
            Ok(Response::Error { code, message }) => self.error(out, id, code, &message),
            Ok(resp) => {
                if let Err(e) = encode_response(id, &resp, out, self.reply_limit) {
                    self.error(out, id, ErrorCode::ResponseTooLarge, &format!("reply {e}"));
                }
            }
            Err(e) => self.error(out, id, engine_code(&e), &e.to_string()),
        }
        true
    }

    fn hello(&mut self, out: &mut Vec<u8>, id: u64, min: u16, max: u16, client_max_frame: usize) -> bool {
        if self.handshaken {
            self.error(out, id, ErrorCode::HandshakeRequired, "duplicate HELLO; closing");
            return false;
        }
        let version = max.min(PROTOCOL_VERSION);
        if version < min.max(MIN_PROTOCOL_VERSION) {
            let msg = format!(
                "client speaks versions {min}..={max}, server {MIN_PROTOCOL_VERSION}..={PROTOCOL_VERSION}; closing"
            );
            self.error(out, id, ErrorCode::UnsupportedVersion, &msg);
            return false;
        }
        if client_max_frame < MIN_MAX_FRAME_BYTES {
            let msg = format!("client max frame of {client_max_frame} bytes is below {MIN_MAX_FRAME_BYTES}; closing");
            self.error(out, id, ErrorCode::InvalidArgument, &msg);
            return false;
        }
        self.reply_limit = client_max_frame.min(self.limits.max_frame_bytes);
        self.handshaken = true;
        let max_frame_bytes = u32::try_from(self.limits.max_frame_bytes).unwrap_or(u32::MAX);
        let hello = Response::HelloOk { version, max_frame_bytes };
        if encode_response(id, &hello, out, self.reply_limit).is_err() {
            return false; // cannot happen: the reply is 27 bytes and both limits are at least 1 KiB
        }
        true
    }

    /// AUTH: compares in time independent of where the passwords differ.
    fn auth(&mut self, given: &[u8]) -> Response {
        let want = self.password.as_deref().map(str::as_bytes);
        let same = want.is_some_and(|w| bool::from(subtle::ConstantTimeEq::ct_eq(w, given)));
        // Another node of the cluster (a forwarded command) authenticates with the cluster secret.
        let same = same || self.router.as_ref().is_some_and(|r| r.is_cluster_secret(given));
        match (want, same) {
            (None, _) if self.authed => Response::Done,
            (None, true) => {
                self.authed = true;
                Response::Done
            }
            (Some(_), true) => {
                self.authed = true;
                Response::Done
            }
            (_, false) => {
                self.counters.auth_failures.fetch_add(1, Relaxed);
                Response::Error { code: ErrorCode::AuthFailed, message: "wrong password".into() }
            }
        }
    }

    /// Cluster mode: a read of `key` on its region if this node leads it.
    ///
    /// The reply waits for replication: it goes out once the backups hold the newest version of
    /// the key the read could have seen (`RegionHandle::read_bound`), which is usually held
    /// already. A read may see a write that is not acknowledged yet; were the primary lost
    /// before its backups held it, a later read at the new primary would not see it, and the
    /// two reads would contradict each other.
    fn routed(
        &mut self,
        key: &[u8],
        f: impl FnOnce(&halyard_engine::RegionHandle) -> halyard_engine::Result<Response>,
    ) -> halyard_engine::Result<Response> {
        let Some(router) = &self.router else {
            return Err(halyard_engine::Error::NoRegionForKey);
        };
        match router.route(key) {
            Ok(region) => {
                let h = self.db.region(region)?;
                let r = f(&h);
                self.writes.push((region, h.read_bound(key)));
                r
            }
            Err(message) => Ok(Response::Error { code: ErrorCode::NotLeader, message }),
        }
    }

    /// Cluster mode: a write on the key's region, remembered with its LSN for `last-write`.
    fn routed_write(
        &mut self,
        key: &[u8],
        f: impl FnOnce(&halyard_engine::RegionHandle) -> halyard_engine::Result<u64>,
    ) -> halyard_engine::Result<Response> {
        let Some(router) = &self.router else {
            return Err(halyard_engine::Error::NoRegionForKey);
        };
        if let Err(message) = router.check_write(key) {
            return Ok(Response::Error { code: ErrorCode::NotEnoughReplicas, message });
        }
        match router.route(key) {
            Ok(region) => {
                let lsn = f(&self.db.region(region)?)?;
                self.writes.push((region, lsn));
                Ok(Response::Done)
            }
            Err(message) => Ok(Response::Error { code: ErrorCode::NotLeader, message }),
        }
    }

    fn batch(&mut self, ops: Vec<BatchOp<'_>>) -> halyard_engine::Result<Response> {
        let mut batch = WriteBatch::new();
        for op in ops {
            match op {
                BatchOp::Put { key, value } => batch.put(key, value),
                BatchOp::Delete { key } => batch.delete(key),
            };
        }
        if self.router.is_some() {
            let Some(first) = batch.keys().next().map(<[u8]>::to_vec) else {
                return Ok(Response::Done);
            };
            return self.routed_write(&first, |h| h.write(&batch));
        }
        self.db.write(&batch).map(|()| Response::Done)
    }

    /// One page: at most `limit` pairs, and no more than fits in one reply frame. The engine is
    /// asked for one pair beyond the count limit, to know whether to hand out a resume key.
    fn scan(&mut self, s: ScanRequest<'_>) -> halyard_engine::Result<Response> {
        let want = if s.limit == 0 { usize::MAX } else { s.limit as usize };
        let opts = ScanOptions { reverse: s.reverse, limit: want.checked_add(1) };
        let range: (Bound<&[u8]>, Bound<&[u8]>) = (s.start, s.end);
        let scan = match &self.router {
            // Cluster mode: the page comes from the region of the range's first key (its last
            // for a reverse scan), led here, and ends at the region's end.
            Some(router) => {
                let routed = match (s.reverse, if s.reverse { s.end } else { s.start }) {
                    (_, Bound::Included(k) | Bound::Excluded(k)) => router.route(k),
                    (false, Bound::Unbounded) => router.route(b""),
                    (true, Bound::Unbounded) => router.route_last(),
                };
                match routed {
                    Ok(region) => {
                        // As for `routed`: the page waits for what the region held to replicate.
                        let h = self.db.region(region)?;
                        self.writes.push((region, h.lsn()));
                        h.scan_with(range, opts)
                    }
                    Err(message) => return Ok(Response::Error { code: ErrorCode::NotLeader, message }),
                }
            }
            None => self.db.scan_with(range, opts),
        };
        let mut page = ScanPage::default();
        let mut size = scan_page_overhead(0);
        for kv in scan {
            let (k, v) = kv?;
            // Room for this pair and for its key again as the resume key, should the page end here.
            let grown = size + scan_pair_len(k.len(), v.len());
            if page.pairs.len() == want || grown + k.len() > self.reply_limit {
                if page.pairs.is_empty() {
                    let message = format!(
                        "a pair of {} + {} bytes does not fit in a reply frame of at most {} bytes",
                        k.len(),
                        v.len(),
                        self.reply_limit
                    );
                    return Ok(Response::Error { code: ErrorCode::ResponseTooLarge, message });
                }
                page.resume = page.pairs.last().map(|(k, _)| k.clone());
                break;
            }
            size = grown;
            page.pairs.push((k, v));
        }
        Ok(Response::ScanPage(page))
    }

    fn error(&self, out: &mut Vec<u8>, id: u64, code: ErrorCode, message: &str) {
        self.counters.errors.fetch_add(1, Relaxed);
        error_reply(out, id, code, message, self.reply_limit);
    }
}

/// Appends an ERROR frame, cutting the message (at a char boundary) if the frame would not fit.
fn error_reply(out: &mut Vec<u8>, id: u64, code: ErrorCode, message: &str, limit: usize) {
    let room = limit.saturating_sub(halyard_proto::FRAME_OVERHEAD + 2);
    let mut cut = message.len().min(room);
    while !message.is_char_boundary(cut) {
        cut -= 1;
    }
    let message = message.get(..cut).unwrap_or_default().to_owned();
    let _ = encode_response(id, &Response::Error { code, message }, out, limit);
}

/// The wire code for an engine error: clients act on the code (retry, shrink, give up), not the text.
fn engine_code(e: &halyard_engine::Error) -> ErrorCode {
    use halyard_engine::Error as E;
    match e {
        E::KeyTooLarge { .. } => ErrorCode::KeyTooLarge,
        E::ValueTooLarge { .. } => ErrorCode::ValueTooLarge,
        E::NoSpace { .. } => ErrorCode::NoSpace,
        E::Corruption { .. } => ErrorCode::Corruption,
        E::Poisoned(_) | E::BackupRegion(_) => ErrorCode::ReadOnly,
        E::Closed => ErrorCode::ShuttingDown,
        E::Io { .. } => ErrorCode::Io,
        E::NoRegionForKey | E::NoSuchRegion(_) | E::KeyOutOfRegion(_) => ErrorCode::NoRegion,
        E::RegionFenced(_) => ErrorCode::NotLeader,
        E::BatchSpansRegions(..) => ErrorCode::BatchSpansRegions,
        E::InvalidOptions(_) | E::EmptyRange => ErrorCode::InvalidArgument,
        _ => ErrorCode::Internal,
    }
}
