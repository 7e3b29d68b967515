//! One (region, backup) stream as the primary keeps it: its bounded queue of frames, what the
//! backup acknowledged, and the counters every stream adds to.

use crate::wire::Msg;
use parking_lot::Mutex;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::{mpsc, watch, Notify};

/// Counters of what the primary shipped.
#[derive(Default, Debug)]
pub struct ShipStats {
    /// Frame bytes queued for backups (each backup counted).
    pub bytes: AtomicU64,
    /// Frame bytes written to backups' sockets.
    pub sent: AtomicU64,
    /// Frame bytes received from backups (acknowledgements).
    pub received: AtomicU64,
    /// Segment image bytes (SSTs, medium runs) before packing, each backup counted.
    pub image_bytes: AtomicU64,
    /// Frames queued.
    pub frames: AtomicU64,
    /// Times a link failed (disconnected, refused, or silent past the ack timeout).
    pub broken_links: AtomicU64,
    /// Full copies sent to backups that (re)joined.
    pub catch_ups: AtomicU64,
    /// Incremental copies sent to returning backups (what they held identically stayed).
    pub incremental_catch_ups: AtomicU64,
    /// Segment bytes incremental copies left out: the backup held them identically.
    pub copy_kept_bytes: AtomicU64,
    /// Segment bytes full copies read and handed to the connections' writers.
    pub copy_bytes: AtomicU64,
    /// Segment bytes copies named instead of sending them: the backup's storage, shared with
    /// this store's (storage nodes), copied them.
    pub copy_named_bytes: AtomicU64,
    /// Full copies whose last frame was handed to the writer.
    pub copies_sent: AtomicU64,
    /// Microseconds those copies took, from the capture to their last frame (summed).
    pub copy_micros: AtomicU64,
    /// The same, one observation a copy (seconds).
    pub copy_seconds: CopySeconds,
    /// The longest time a capture held a region's writers, in microseconds.
    pub copy_pause_micros_max: AtomicU64,
    /// Connections opened to backup nodes (one per backup node, again after a failure).
    pub connections: AtomicU64,
    /// Socket writes to backups (each carries whatever the node's regions had queued).
    pub writes: AtomicU64,
    /// Links whose queue holds at least the bound now (a gauge).
    pub full_links: AtomicU64,
    /// Times a writer waited for room in a backup's queue.
    pub throttled_waits: AtomicU64,
    /// Microseconds writers spent waiting for room in backups' queues (all waits summed).
    pub throttled_micros: AtomicU64,
    /// Links failed because their queue stayed full, without draining, for the ack timeout.
    pub stuck_links: AtomicU64,
}

/// Copies' durations: a histogram from 10 ms to about 3 hours.
#[derive(Debug)]
pub struct CopySeconds(Histogram);

impl Default for CopySeconds {
    fn default() -> CopySeconds {
        CopySeconds(Histogram::new(exponential_buckets(0.01, 4.0, 12)))
    }
}

impl std::ops::Deref for CopySeconds {
    type Target = Histogram;
    fn deref(&self) -> &Histogram {
        &self.0
    }
}

/// Default bound of one link's queue: frame bytes queued for one backup of one region and not
/// yet handed to the connection's writer. Writers of the region wait while a live link holds
/// this much (see [`Shipper::wait_room`]).
pub const DEFAULT_QUEUE_BYTES: u64 = 64 << 20;

/// What the reader hands the connection's writer.
pub(crate) enum Chunk {
    /// One encoded frame.
    Frame(Vec<u8>),
    /// The copy ended with its `Copied` frame: the link's later frames follow.
    Done,
    /// The copy cannot go on (a read failed): the link fails and a later session starts over.
    Failed(String),
}

/// The receiving end of a full copy (`crate::copy`), queued in the link's queue where the
/// copy belongs.
pub(crate) type Feed = mpsc::Receiver<Chunk>;

pub(crate) enum Item {
    Frame(Arc<Vec<u8>>),
    /// A full copy of the region, its frames read and encoded by the copy's reader thread
    /// (`crate::copy`) while the writer sends them; the link's later items wait behind it.
    Copy(Feed),
    /// Everything queued before this is stale (sent before the link failed); a catch-up follows.
    Restart,
}

/// One backup of one region.
pub struct Link {
    /// Backup node name.
    pub node: String,
    pub(crate) addr: String,
    pub(crate) tx: mpsc::UnboundedSender<Item>,
    pub(crate) queue: Queue,
    pub(crate) started: AtomicBool,
    /// The writer of the connection the link's queue is attached to, woken per frame.
    pub(crate) waker: parking_lot::Mutex<Option<Arc<Notify>>>,
    pub(crate) acked: watch::Sender<u64>,
    pub(crate) live: AtomicBool,
    pub(crate) stopped: AtomicBool,
    /// Whether [`Shipper::wait_all_acked`] waits for this backup (not for a learner taking its
    /// first copy).
    pub(crate) counted: AtomicBool,
    /// When the link last stopped being live (None while live).
    pub(crate) down_since: parking_lot::Mutex<Option<Instant>>,
    /// Bytes of the frames in the queue (a full copy's are not counted).
    pub(crate) queued: AtomicU64,
    /// Bytes of frames taken off the queue so far: whether the queue drains at all.
    pub(crate) drained: AtomicU64,
    /// The queue's bound in bytes.
    pub(crate) limit: u64,
    /// A full copy is on its way to the backup (its `Copied` frame not handed to the writer yet).
    pub(crate) copying: AtomicBool,
    /// Counts the link's copies: a copy's reader stops once a newer one began.
    pub(crate) copy_gen: AtomicU64,
    /// Bytes of segments the current or last copy holds, and how many were read so far.
    pub(crate) copy_total: AtomicU64,
    pub(crate) copy_done: AtomicU64,
    /// The LSN its region split at, for a link a split started (0: none): a backup that takes
    /// the stream holding the region that far (its HelloOk) applied the split, and holds the
    /// new region up to it without a frame to acknowledge.
    pub(crate) split_lsn: AtomicU64,
    /// Woken when the queue drops below its bound and when the link fails.
    pub(crate) room: Notify,
    pub(crate) stats: Arc<ShipStats>,
}

impl Link {
    pub(crate) fn fail(&self, why: &str, stats: &ShipStats) {
        if self.live.swap(false, Relaxed) {
            tracing::warn!(backup = %self.node, "replication link down: {why}; reconnecting");
            stats.broken_links.fetch_add(1, Relaxed);
            *self.down_since.lock() = Some(Instant::now());
        }
        // Wake writers waiting on this link: it no longer counts.
        self.acked.send_modify(|_| {});
        self.room.notify_waiters();
    }

    /// Counts a frame of `n` bytes into the queue (before it is sent, so that the writer cannot
    /// count it out first).
    pub(crate) fn enqueue(&self, n: u64) {
        let before = self.queued.fetch_add(n, Relaxed);
        if before < self.limit && before + n >= self.limit {
            self.stats.full_links.fetch_add(1, Relaxed);
        }
    }

    /// Counts `n` bytes of frames out of the queue; wakes the writers waiting for room once it
    /// drops below its bound.
    pub(crate) fn dequeued(&self, n: u64) {
        if n == 0 {
            return;
        }
        self.drained.fetch_add(n, Relaxed);
        let before = self.queued.fetch_sub(n, Relaxed);
        if before >= self.limit && before - n < self.limit {
            self.stats.full_links.fetch_sub(1, Relaxed);
            self.room.notify_waiters();
        }
    }

    /// Bytes of frames queued for the backup and not yet handed to the connection's writer.
    pub fn queued_bytes(&self) -> u64 {
        self.queued.load(Relaxed)
    }

    /// Whether the link's writers must wait: it is live and its queue is at its bound.
    pub fn is_full(&self) -> bool {
        self.is_live() && self.queued.load(Relaxed) >= self.limit
    }

    /// Whether the link takes frames and counts for acknowledgements.
    pub fn is_live(&self) -> bool {
        self.live.load(Relaxed)
    }

    /// Last LSN the backup acknowledged.
    pub fn acked(&self) -> u64 {
        *self.acked.borrow()
    }

    /// While a full copy is on its way to the backup: (bytes sent, bytes in all).
    pub fn copy_progress(&self) -> Option<(u64, u64)> {
        self.copying.load(Relaxed).then(|| (self.copy_done.load(Relaxed), self.copy_total.load(Relaxed)))
    }

    /// Whether the link gave up for good (the backup cannot be brought up to date).
    pub fn is_stopped(&self) -> bool {
        self.stopped.load(Relaxed)
    }

    /// Whether writes wait for this backup in [`Shipper::wait_all_acked`] (a learner taking
    /// its first full copy is shipped to but not waited for).
    pub fn set_counted(&self, counted: bool) {
        if self.counted.swap(counted, Relaxed) != counted {
            // Writers waiting on it re-check.
            self.acked.send_modify(|_| {});
        }
    }
}

/// A link's queue, shared by its sessions and, while attached, the connection's writer.
pub(crate) type Queue = Arc<Mutex<mpsc::UnboundedReceiver<Item>>>;

pub(crate) fn image_len(m: &Msg) -> u64 {
    match m {
        Msg::Sst { bytes, .. } | Msg::Medium { bytes, .. } => bytes.len() as u64,
        _ => 0,
    }
}
