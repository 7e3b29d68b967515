//! The async client: typed calls over a shared, self-healing connection.

use std::net::SocketAddr;
use std::ops::Bound;
use std::sync::Arc;

use halyard_proto::{BatchOp, Request, Response, ScanPage, ScanRequest};
use tokio::net::ToSocketAddrs;

use crate::conn::Conn;
use crate::options::ClientOptions;
use crate::{Error, Result};

/// An atomic group of puts and deletes for [`Client::write_batch`].
#[derive(Debug, Clone, Default)]
pub struct Batch {
    pub(crate) ops: Vec<(Vec<u8>, Option<Vec<u8>>)>,
}

impl Batch {
    /// An empty batch.
    pub fn new() -> Batch {
        Batch::default()
    }
    /// Adds a put.
    pub fn put(&mut self, key: impl Into<Vec<u8>>, value: impl Into<Vec<u8>>) -> &mut Self {
        self.ops.push((key.into(), Some(value.into())));
        self
    }
    /// Adds a delete.
    pub fn delete(&mut self, key: impl Into<Vec<u8>>) -> &mut Self {
        self.ops.push((key.into(), None));
        self
    }
    /// Number of operations.
    pub fn len(&self) -> usize {
        self.ops.len()
    }
    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }
}

/// A connection to a Halyard server. Clones share the connection and pipeline on it.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
    /// (region, epoch) that key requests are sent for ([`Client::routed`]).
    routed: Option<(u32, u64)>,
}

struct Inner {
    addrs: Vec<SocketAddr>,
    opts: ClientOptions,
    current: parking_lot::Mutex<Arc<Conn>>,
    /// Serialises reconnects so that many callers finding the connection dead open only one.
    reconnect: tokio::sync::Mutex<()>,
}

impl Client {
    /// Connects and performs the handshake.
    pub async fn connect(addr: impl ToSocketAddrs, opts: ClientOptions) -> Result<Client> {
        let addrs: Vec<SocketAddr> = tokio::net::lookup_host(addr).await?.collect();
        let conn = Conn::open(&addrs, &opts).await?;
        let inner =
            Inner { addrs, opts, current: parking_lot::Mutex::new(Arc::new(conn)), reconnect: Default::default() };
        Ok(Client { inner: Arc::new(inner), routed: None })
    }

    /// The options this client was created with.
    pub fn options(&self) -> &ClientOptions {
        &self.inner.opts
    }

    /// Round trip with no effect.
    pub async fn ping(&self) -> Result<()> {
        match self.call(Request::Ping { payload: b"" }).await? {
            Response::Pong { .. } => Ok(()),
            other => Err(unexpected(other)),
        }
    }

    /// The value of `key`, or `None`.
    pub async fn get(&self, key: impl AsRef<[u8]>) -> Result<Option<Vec<u8>>> {
        match self.call(Request::Get { key: key.as_ref() }).await? {
            Response::Value(v) => Ok(v),
            other => Err(unexpected(other)),
        }
    }

    /// Writes `key`.
    pub async fn put(&self, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> Result<()> {
        self.done(Request::Put { key: key.as_ref(), value: value.as_ref() }).await
    }

    /// Deletes `key` (no error if absent).
    pub async fn delete(&self, key: impl AsRef<[u8]>) -> Result<()> {
        self.done(Request::Delete { key: key.as_ref() }).await
    }

    /// Deletes every key of `[start, end)` (`end` after `start`). On a single node it is one
    /// record per region; in a cluster the range must lie in one region
    /// (`ClusterClient::delete_range` splits a longer one).
    pub async fn delete_range(&self, start: impl AsRef<[u8]>, end: impl AsRef<[u8]>) -> Result<()> {
        self.done(Request::DeleteRange { start: start.as_ref(), end: end.as_ref() }).await
    }

    /// Applies all of `batch` atomically, or none of it.
    pub async fn write_batch(&self, batch: &Batch) -> Result<()> {
        let ops = batch
            .ops
            .iter()
            .map(|(k, v)| match v {
                Some(v) => BatchOp::Put { key: k, value: v },
                None => BatchOp::Delete { key: k },
            })
            .collect();
        self.done(Request::Batch { ops }).await
    }

    /// One page of the pairs between `start` and `end`: at most `limit` pairs (0: as many as fit
    /// in one reply frame), descending if `reverse`. When `resume` is set, pass it on as
    /// `Bound::Excluded` start (forward) or end (reverse) for the next page, or use [`Client::scan_all`].
    pub async fn scan(&self, start: Bound<&[u8]>, end: Bound<&[u8]>, limit: u32, reverse: bool) -> Result<ScanPage> {
        match self.call(Request::Scan(ScanRequest { start, end, reverse, limit })).await? {
            Response::ScanPage(page) => Ok(page),
            other => Err(unexpected(other)),
        }
    }

    /// Every pair between `start` and `end`, fetched in pages of `ClientOptions::scan_page_pairs`.
    /// Pages are separate reads: writes landing between them may or may not be seen.
    pub async fn scan_all(
        &self,
        start: Bound<&[u8]>,
        end: Bound<&[u8]>,
        reverse: bool,
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let mut all = Vec::new();
        let mut resume: Option<Vec<u8>> = None;
        loop {
            let (s, e) = match (&resume, reverse) {
                (None, _) => (start, end),
                (Some(k), false) => (Bound::Excluded(k.as_slice()), end),
                (Some(k), true) => (start, Bound::Excluded(k.as_slice())),
            };
            let page = self.scan(s, e, self.inner.opts.scan_page_pairs, reverse).await?;
            all.extend(page.pairs);
            match page.resume {
                Some(k) => resume = Some(k),
                None => return Ok(all),
            }
        }
    }

    async fn done(&self, req: Request<'_>) -> Result<()> {
        match self.call(req).await? {
            Response::Done => Ok(()),
            other => Err(unexpected(other)),
        }
    }

    /// The node's region map as JSON (cluster mode), or `UnknownOp` from a single node.
    pub async fn region_map(&self) -> Result<Vec<u8>> {
        match self.call(Request::RegionMap).await? {
            Response::Value(Some(v)) => Ok(v),
            other => Err(unexpected(other)),
        }
    }

    /// Runs a Redis command on the primary of `region` at `epoch` (node-to-node forwarding in a
    /// cluster): the reply as RESP `proto` bytes, or `NotLeader` / `StaleEpoch`.
    pub async fn resp(&self, region: u32, epoch: u64, proto: u8, args: &[&[u8]]) -> Result<Vec<u8>> {
        match self.call(Request::Resp { region, epoch, proto, args: args.to_vec() }).await? {
            Response::Value(Some(v)) => Ok(v),
            other => Err(unexpected(other)),
        }
    }

    /// This client on the same connection, its key requests (get, put, delete, batches, scans)
    /// sent for `region` at `epoch`: a node whose epoch for the region differs refuses them with
    /// `StaleEpoch` (the region map is out of date) instead of running them.
    pub fn routed(&self, region: u32, epoch: u64) -> Client {
        Client { inner: self.inner.clone(), routed: Some((region, epoch)) }
    }

    async fn call(&self, req: Request<'_>) -> Result<Response> {
        let req = match (self.routed, &req) {
            (
                Some((region, epoch)),
                Request::Get { .. }
                | Request::Put { .. }
                | Request::Delete { .. }
                | Request::DeleteRange { .. }
                | Request::Batch { .. }
                | Request::Scan(_),
            ) => Request::Routed { region, epoch, inner: Box::new(req) },
            _ => req,
        };
        let conn = self.conn().await?;
        let (id, reply) = conn.send(&req)?;
        match tokio::time::timeout(self.inner.opts.timeout, reply).await {
            Ok(Ok(r)) => r,
            Ok(Err(_)) => Err(Error::Closed),
            Err(_) => {
                conn.forget(id);
                Err(Error::Timeout)
            }
        }
    }

    /// The live connection, reconnecting if the last one died.
    async fn conn(&self) -> Result<Arc<Conn>> {
        let cur = self.inner.current.lock().clone();
        if !cur.is_closed() {
            return Ok(cur);
        }
        let _one_at_a_time = self.inner.reconnect.lock().await;
        let cur = self.inner.current.lock().clone();
        if !cur.is_closed() {
            return Ok(cur);
        }
        let fresh = Arc::new(Conn::open(&self.inner.addrs, &self.inner.opts).await?);
        *self.inner.current.lock() = fresh.clone();
        Ok(fresh)
    }
}

fn unexpected(resp: Response) -> Error {
    Error::Protocol(format!("reply of the wrong kind: {resp:?}"))
}
