//! A stream's job queue: the index work of a Send-Index stream (a segment write, an SST
//! install) and the replay of a Build-Index one, taken off the receive path and run one job at
//! a time, in arrival order, on a blocking thread. A write to a region is acknowledged once
//! its record is in the buffer: were the stream to install a shipped SST before reading on,
//! every write to the region would wait for that install, and with requests spread over the
//! regions every client soon would.

use crate::{Error, Result};
use parking_lot::Mutex;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use tokio::sync::{mpsc, watch};

/// Index work taken off a stream's receive path.
pub(super) type Job = Box<dyn FnOnce() -> Result<()> + Send>;

/// Jobs queued ahead of the receive path at most: the primary waits (TCP) beyond this.
const QUEUED_JOBS: usize = 64;

/// The jobs a region's streams queued, in arrival order.
pub(super) struct Deferred {
    queued: AtomicU64,
    done: watch::Sender<u64>,
    /// The first job that failed; the stream then closes and later jobs are skipped.
    failed: Mutex<Option<String>>,
}

impl Deferred {
    pub(super) fn new() -> Deferred {
        Deferred { queued: AtomicU64::new(0), done: watch::Sender::new(0), failed: Mutex::new(None) }
    }

    /// Waits until every job queued so far has run; returns the first failure, if any.
    pub(super) async fn settle(&self) -> Result<()> {
        let target = self.queued.load(Relaxed);
        let mut rx = self.done.subscribe();
        let _ = rx.wait_for(|d| *d >= target).await;
        match self.failed.lock().clone() {
            Some(e) => Err(Error::Protocol(format!("installing shipped index data failed: {e}"))),
            None => Ok(()),
        }
    }

    /// The first failure of the current stream's jobs, if one failed.
    pub(super) fn failure(&self) -> Option<String> {
        self.failed.lock().clone()
    }

    /// Starts the job runner of a new stream (after [`Deferred::settle`], so that the
    /// previous stream's jobs are done): one job at a time, in order, on a blocking thread.
    pub(super) fn start(self: &Arc<Self>) -> mpsc::Sender<Job> {
        *self.failed.lock() = None;
        let (tx, mut rx) = mpsc::channel::<Job>(QUEUED_JOBS);
        let d = self.clone();
        tokio::spawn(async move {
            // Runs until the stream is gone and its queue is empty: queued jobs belong to
            // messages already accepted.
            while let Some(job) = rx.recv().await {
                if d.failed.lock().is_none() {
                    let res = tokio::task::spawn_blocking(job).await.map_err(|e| Error::Protocol(e.to_string()));
                    if let Err(e) = res.and_then(|r| r) {
                        *d.failed.lock() = Some(e.to_string());
                    }
                }
                d.done.send_modify(|d| *d += 1);
            }
        });
        tx
    }

    /// Queues `f` on the stream's runner `tx`, behind the jobs queued before it.
    pub(super) async fn queue(&self, tx: &mpsc::Sender<Job>, f: Job) -> Result<()> {
        self.queued.fetch_add(1, Relaxed);
        if tx.send(f).await.is_err() {
            // The runner is gone only with the runtime.
            self.done.send_modify(|d| *d += 1);
            return Err(Error::Protocol("index job runner stopped".into()));
        }
        Ok(())
    }
}

/// Runs `f` on a blocking thread and waits for it.
pub(super) async fn run_now(f: Job) -> Result<()> {
    tokio::task::spawn_blocking(f).await.map_err(|e| Error::Protocol(e.to_string()))?
}
