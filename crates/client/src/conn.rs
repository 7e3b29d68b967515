//! One multiplexed connection: handshake, a writer task, a reader task and the table of
//! requests waiting for replies.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use halyard_proto::{
    decode_frame, encode_request, Frame, ProtoError, Request, Response, CONNECTION_ID, MIN_PROTOCOL_VERSION,
    PROTOCOL_VERSION,
};
use parking_lot::Mutex;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use tokio::sync::{oneshot, Notify};
use tokio::task::JoinHandle;

use crate::options::ClientOptions;
use crate::{Error, Result};

type Waiter = oneshot::Sender<Result<Response>>;

/// State shared by the caller-facing handle and the two tasks (which must not own the handle,
/// or dropping the last client would never stop them).
struct Shared {
    /// Requests sent and not yet answered; `closed` once the connection is gone.
    pending: Mutex<Pending>,
    /// Encoded frames not yet written. Callers append, the writer takes everything at once,
    /// so requests queued while a write is in progress go out together in the next one.
    outbox: Mutex<Vec<u8>>,
    wake_writer: Notify,
}

#[derive(Default)]
struct Pending {
    waiters: HashMap<u64, Waiter>,
    closed: Option<Error>,
}

impl Shared {
    /// Marks the connection dead and fails every waiting request with `why`.
    fn fail(&self, why: Error) {
        let mut p = self.pending.lock();
        for (_, w) in p.waiters.drain() {
            let _ = w.send(Err(why.replicate()));
        }
        p.closed.get_or_insert(why);
    }
}

/// A live connection. Dropping it stops its tasks and closes the socket.
pub(crate) struct Conn {
    shared: Arc<Shared>,
    next_id: AtomicU64,
    server_max_frame: usize,
    tasks: [JoinHandle<()>; 2],
}

impl Drop for Conn {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

impl Conn {
    /// Connects to the first address that accepts and performs the handshake.
    pub(crate) async fn open(addrs: &[SocketAddr], opts: &ClientOptions) -> Result<Conn> {
        let mut last = Error::Io(std::io::Error::new(std::io::ErrorKind::InvalidInput, "no address to connect to"));
        for addr in addrs {
            match tokio::time::timeout(opts.timeout, Self::open_one(*addr, opts)).await {
                Ok(Ok(conn)) => return Ok(conn),
                Ok(Err(e)) => last = e,
                Err(_) => last = Error::Timeout,
            }
        }
        Err(last)
    }

    async fn open_one(addr: SocketAddr, opts: &ClientOptions) -> Result<Conn> {
        let mut stream = TcpStream::connect(addr).await?;
        // Requests are already coalesced by the writer; Nagle would only delay them.
        stream.set_nodelay(true)?;
        let (server_max_frame, leftover) = handshake(&mut stream, opts).await?;
        let (rd, wr) = stream.into_split();
        let shared = Arc::new(Shared {
            pending: Mutex::new(Pending::default()),
            outbox: Mutex::new(Vec::new()),
            wake_writer: Notify::new(),
        });
        let reader = tokio::spawn(read_loop(rd, leftover, opts.max_frame_bytes, shared.clone()));
        let writer = tokio::spawn(write_loop(wr, shared.clone()));
        Ok(Conn { shared, next_id: AtomicU64::new(1), server_max_frame, tasks: [reader, writer] })
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.shared.pending.lock().closed.is_some()
    }

    /// Queues `req`; returns its id and the channel its reply will arrive on.
    pub(crate) fn send(&self, req: &Request<'_>) -> Result<(u64, oneshot::Receiver<Result<Response>>)> {
        // Id 0 is reserved for connection-level errors from the server.
        let id = self.next_id.fetch_add(1, Relaxed);
        let (tx, rx) = oneshot::channel();
        {
            // Register before the frame can be written, or a fast reply could find no waiter.
            let mut p = self.shared.pending.lock();
            if let Some(e) = &p.closed {
                return Err(e.replicate());
            }
            p.waiters.insert(id, tx);
        }
        let encoded = encode_request(id, req, &mut self.shared.outbox.lock(), self.server_max_frame);
        if let Err(e) = encoded {
            self.forget(id);
            return Err(match e {
                ProtoError::FrameTooLarge { size, max } => Error::RequestTooLarge { size, max },
                other => Error::Protocol(other.to_string()),
            });
        }
        self.shared.wake_writer.notify_one();
        Ok((id, rx))
    }

    /// Drops the waiter of a request that timed out; a late reply is then discarded.
    pub(crate) fn forget(&self, id: u64) {
        self.shared.pending.lock().waiters.remove(&id);
    }
}

/// Sends HELLO and waits for HELLO_OK. Returns the server's frame limit and any bytes read past
/// the reply (none in practice: the server sends nothing unprompted before the handshake ends).
async fn handshake(stream: &mut TcpStream, opts: &ClientOptions) -> Result<(usize, Vec<u8>)> {
    let hello = Request::Hello {
        min_version: MIN_PROTOCOL_VERSION,
        max_version: PROTOCOL_VERSION,
        max_frame_bytes: u32::try_from(opts.max_frame_bytes).unwrap_or(u32::MAX),
    };
    let mut buf = Vec::new();
    let max_frame = match exchange(stream, &mut buf, &hello, opts).await? {
        Response::HelloOk { version, max_frame_bytes } if version >= MIN_PROTOCOL_VERSION => max_frame_bytes as usize,
        Response::Error { code, message } => return Err(Error::Server { code, message }),
        other => return Err(Error::Protocol(format!("unexpected handshake reply {other:?}"))),
    };
    if let Some(p) = &opts.password {
        match exchange(stream, &mut buf, &Request::Auth { password: p.as_bytes() }, opts).await? {
            Response::Done => {}
            Response::Error { code, message } => return Err(Error::Server { code, message }),
            other => return Err(Error::Protocol(format!("unexpected AUTH reply {other:?}"))),
        }
    }
    Ok((max_frame, buf))
}

/// Sends one connection-level request and reads its reply; what arrived after the reply stays
/// in `buf`.
async fn exchange(
    stream: &mut TcpStream,
    buf: &mut Vec<u8>,
    req: &Request<'_>,
    opts: &ClientOptions,
) -> Result<Response> {
    let mut frame = Vec::new();
    encode_request(CONNECTION_ID, req, &mut frame, usize::MAX).map_err(|e| Error::Protocol(e.to_string()))?;
    stream.write_all(&frame).await?;
    loop {
        if let Some((frame, used)) = decode_frame(buf, opts.max_frame_bytes).map_err(proto)? {
            let reply = Response::decode(frame.kind, frame.payload).map_err(proto)?;
            buf.drain(..used);
            return Ok(reply);
        }
        buf.reserve(4096);
        if stream.read_buf(buf).await? == 0 {
            return Err(Error::Closed);
        }
    }
}

fn proto(e: ProtoError) -> Error {
    Error::Protocol(e.to_string())
}

async fn write_loop(mut wr: OwnedWriteHalf, shared: Arc<Shared>) {
    // Double buffering: the outbox keeps an allocation while this one is on the wire.
    let mut spare = Vec::new();
    loop {
        shared.wake_writer.notified().await;
        std::mem::swap(&mut spare, &mut *shared.outbox.lock());
        if spare.is_empty() {
            continue;
        }
        if let Err(e) = wr.write_all(&spare).await {
            shared.fail(Error::Io(e));
            return;
        }
        spare.clear();
    }
}

async fn read_loop(mut rd: OwnedReadHalf, mut buf: Vec<u8>, max_frame: usize, shared: Arc<Shared>) {
    let why = loop {
        match dispatch(&buf, max_frame, &shared) {
            Ok(used) => {
                buf.drain(..used);
            }
            Err(e) => break e,
        }
        if buf.capacity() - buf.len() < 16 << 10 {
            buf.reserve(64 << 10);
        }
        match rd.read_buf(&mut buf).await {
            Ok(0) => break Error::Closed,
            Ok(_) => {}
            Err(e) => break Error::Io(e),
        }
    };
    shared.fail(why);
}

/// Hands every complete reply in `buf` to its waiter; returns the bytes consumed.
fn dispatch(buf: &[u8], max_frame: usize, shared: &Shared) -> Result<usize> {
    let mut used = 0;
    while let Some((frame, n)) = decode_frame(buf.get(used..).unwrap_or_default(), max_frame).map_err(proto)? {
        used += n;
        deliver(frame, shared)?;
    }
    Ok(used)
}

fn deliver(frame: Frame<'_>, shared: &Shared) -> Result<()> {
    let resp = Response::decode(frame.kind, frame.payload).map_err(proto)?;
    if frame.id == CONNECTION_ID {
        // The server is closing the connection and says why (idle timeout, bad frame, ...).
        return Err(match resp {
            Response::Error { code, message } => Error::Server { code, message },
            other => Error::Protocol(format!("unsolicited reply {other:?}")),
        });
    }
    let waiter = shared.pending.lock().waiters.remove(&frame.id);
    // No waiter: the request timed out and its caller has gone; drop the late reply.
    if let Some(w) = waiter {
        let _ = w.send(match resp {
            Response::Error { code, message } => Err(Error::Server { code, message }),
            other => Ok(other),
        });
    }
    Ok(())
}
