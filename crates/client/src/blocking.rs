//! A synchronous client: the async [`crate::Client`] driven by an internal runtime.
//!
//! Do not call it from inside an async runtime (blocking a runtime thread on another runtime
//! panics); use the async client there.

use std::ops::Bound;
use std::sync::Arc;

use tokio::runtime::Runtime;

use crate::{Batch, ClientOptions, Result, ScanPage};

/// A blocking connection to a Halyard server. Clones share the connection and may be used
/// from many threads at once; their requests pipeline.
#[derive(Clone)]
pub struct Client {
    // Field order matters: the connection's tasks must stop before the runtime is dropped.
    inner: crate::Client,
    rt: Arc<Runtime>,
}

impl Client {
    /// Connects and performs the handshake.
    pub fn connect(addr: impl std::net::ToSocketAddrs, opts: ClientOptions) -> Result<Client> {
        let addrs: Vec<std::net::SocketAddr> = addr.to_socket_addrs()?.collect();
        // One worker runs the connection's reader and writer; callers block on their own threads.
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("halyard-client")
            .enable_all()
            .build()?;
        let inner = rt.block_on(crate::Client::connect(addrs.as_slice(), opts))?;
        Ok(Client { inner, rt: Arc::new(rt) })
    }

    /// Round trip with no effect.
    pub fn ping(&self) -> Result<()> {
        self.rt.block_on(self.inner.ping())
    }

    /// The value of `key`, or `None`.
    pub fn get(&self, key: impl AsRef<[u8]>) -> Result<Option<Vec<u8>>> {
        self.rt.block_on(self.inner.get(key))
    }

    /// Writes `key`.
    pub fn put(&self, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> Result<()> {
        self.rt.block_on(self.inner.put(key, value))
    }

    /// Deletes `key`.
    pub fn delete(&self, key: impl AsRef<[u8]>) -> Result<()> {
        self.rt.block_on(self.inner.delete(key))
    }

    /// Deletes every key of `[start, end)`.
    pub fn delete_range(&self, start: impl AsRef<[u8]>, end: impl AsRef<[u8]>) -> Result<()> {
        self.rt.block_on(self.inner.delete_range(start, end))
    }

    /// Applies all of `batch` atomically, or none of it.
    pub fn write_batch(&self, batch: &Batch) -> Result<()> {
        self.rt.block_on(self.inner.write_batch(batch))
    }

    /// One page of a scan; see [`crate::Client::scan`].
    pub fn scan(&self, start: Bound<&[u8]>, end: Bound<&[u8]>, limit: u32, reverse: bool) -> Result<ScanPage> {
        self.rt.block_on(self.inner.scan(start, end, limit, reverse))
    }

    /// Every pair in the range, paging; see [`crate::Client::scan_all`].
    pub fn scan_all(&self, start: Bound<&[u8]>, end: Bound<&[u8]>, reverse: bool) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        self.rt.block_on(self.inner.scan_all(start, end, reverse))
    }
}

/// A blocking [`crate::ClusterClient`]: routes each request to its region's primary.
#[derive(Clone)]
pub struct ClusterClient {
    inner: crate::ClusterClient,
    rt: Arc<Runtime>,
}

impl ClusterClient {
    /// Reads the region map from the first of `seeds` (any nodes' native addresses) that answers.
    pub fn connect(seeds: &[impl AsRef<str>], opts: ClientOptions) -> Result<ClusterClient> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("halyard-client")
            .enable_all()
            .build()?;
        let inner = rt.block_on(crate::ClusterClient::connect(seeds, opts))?;
        Ok(ClusterClient { inner, rt: Arc::new(rt) })
    }

    /// The region map in use (None against a single node).
    pub fn map(&self) -> Option<Arc<halyard_cluster::ClusterFile>> {
        self.inner.map()
    }

    /// The value of `key`, or `None`.
    pub fn get(&self, key: impl AsRef<[u8]>) -> Result<Option<Vec<u8>>> {
        self.rt.block_on(self.inner.get(key))
    }

    /// Writes `key`.
    pub fn put(&self, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> Result<()> {
        self.rt.block_on(self.inner.put(key, value))
    }

    /// Deletes `key`.
    pub fn delete(&self, key: impl AsRef<[u8]>) -> Result<()> {
        self.rt.block_on(self.inner.delete(key))
    }

    /// Deletes every key of `[start, end)`.
    pub fn delete_range(&self, start: impl AsRef<[u8]>, end: impl AsRef<[u8]>) -> Result<()> {
        self.rt.block_on(self.inner.delete_range(start, end))
    }

    /// Applies `batch` atomically (its keys in one region).
    pub fn write_batch(&self, batch: &Batch) -> Result<()> {
        self.rt.block_on(self.inner.write_batch(batch))
    }

    /// Every pair of the range, across regions, in key order.
    pub fn scan_all(&self, start: Bound<&[u8]>, end: Bound<&[u8]>, reverse: bool) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        self.rt.block_on(self.inner.scan_all(start, end, reverse))
    }

    /// At most `limit` pairs (0: all) of the range, across regions, in key order.
    pub fn scan(
        &self,
        start: Bound<&[u8]>,
        end: Bound<&[u8]>,
        limit: usize,
        reverse: bool,
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        self.rt.block_on(self.inner.scan(start, end, limit, reverse))
    }
}
