//! A full copy of a region streamed to one backup (catch-up of a new or returning backup).
//!
//! The engine captures the region in microseconds under its write lock
//! ([`halyard_engine::Replication::with_copy`]: segment list, log tails' in-memory images,
//! allocator pinned); the link goes live at that instant, so that its later frames queue behind
//! the copy. A reader thread then reads the copy's segments one at a time, outside any lock of
//! the region, turns each into frames and hands them to the connection's writer through a
//! channel of [`FEED_FRAMES`] frames, at most `rate` bytes a second. Memory on the primary is
//! therefore a few segments for the copy plus the link's bounded queue of live frames (writers
//! wait when it is full, as for any slow backup); the backup applies frames as they arrive.
//!
//! An incremental copy (a returning backup reported what it holds) starts with Resync instead
//! of Reset; the segments the backup holds identically are read (to compare their digests) but
//! not sent: a Kept frame stands for each L0 or large log segment, nothing for the others.
//!
//! A backup whose storage shares this store's storage nodes (its HelloOk said `named`) gets
//! most segments as names instead ([`CopyImage::Named`]): its storage nodes copy them. The
//! reader then keeps its pin until the backup acknowledged the copy, so that no segment a name
//! points to is reused before the backup's storage copied it.
//!
//! The reader stops, releasing its pin, as soon as the link is no longer live, a newer copy of
//! the link started, or the writer dropped the feed; the next session sends a copy anew.

use crate::link::{Chunk, Feed, Link};
use crate::wire::Msg;
use halyard_engine::{encode_shipped_edits, CopyImage, Keep, LogKind, NamedPiece, RegionCopy};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc::{self, error::TrySendError};

/// Frames of a copy waiting for the connection's writer, at most (each up to a segment).
pub(crate) const FEED_FRAMES: usize = 2;

/// How long a copy that named segments keeps them from reuse, at most, waiting for the backup
/// to acknowledge it.
const NAMED_PIN: Duration = Duration::from_secs(120);

/// One copy being read.
struct Reader {
    copy: RegionCopy,
    region: u32,
    epoch: u64,
    link: Arc<Link>,
    tx: mpsc::Sender<Chunk>,
    /// Bytes a second (0: as fast as the writer takes them).
    rate: u64,
    gen: u64,
    /// An incremental copy: what the backup keeps (see `Msg::Resync`).
    resync: Option<Keep>,
}

/// Starts reading `copy` for `link` at `rate` bytes a second (0: unlimited) and returns the
/// feed to queue on the link. Called under the region's write lock: it only spawns a thread.
pub(crate) fn start(
    copy: RegionCopy,
    region: u32,
    epoch: u64,
    link: &Arc<Link>,
    rate: u64,
    resync: Option<Keep>,
) -> Feed {
    let (tx, rx) = mpsc::channel(FEED_FRAMES);
    let gen = link.copy_gen.fetch_add(1, Relaxed) + 1;
    link.copy_total.store(copy.total_bytes(), Relaxed);
    link.copy_done.store(0, Relaxed);
    link.copying.store(true, Relaxed);
    let r = Reader { copy, region, epoch, link: link.clone(), tx: tx.clone(), rate, gen, resync };
    let spawned = std::thread::Builder::new().name(format!("halyard-copy-{region}")).spawn(move || r.run());
    if let Err(e) = spawned {
        let _ = tx.try_send(Chunk::Failed(format!("starting the copy's reader: {e}")));
    }
    rx
}

impl Reader {
    fn run(mut self) {
        let (epoch, region) = (self.epoch, self.region);
        let t0 = Instant::now();
        let total = self.copy.total_bytes();
        let paused_us = self.copy.paused.as_micros() as u64;
        let kind = if self.resync.is_some() { "incremental" } else { "full" };
        tracing::info!(region, backup = %self.link.node, bytes = total, paused_us, kind, "copy started");
        self.link.stats.copy_pause_micros_max.fetch_max(paused_us, Relaxed);
        let (mut done, mut sent) = (0u64, 0u64);
        // Bytes sent by kind (logs, SSTs, medium segments), to tell what an incremental copy
        // could not leave out.
        let mut by_kind = [0u64; 3];
        let (mut held_pieces, mut named) = (0usize, 0u64);
        let first = match self.resync.take() {
            Some(keep) => Msg::Resync { epoch, region, keep },
            None => Msg::Reset { epoch, region },
        };
        if !self.put_msg(first) {
            return;
        }
        for i in 0..self.copy.pieces() {
            let img = match self.copy.read(i) {
                Ok(img) => img,
                Err(e) => {
                    self.put(Chunk::Failed(format!("reading region {region}'s copy: {e}")));
                    return;
                }
            };
            let n = image_bytes(&img);
            let held = matches!(img, CopyImage::Held { .. });
            match &img {
                CopyImage::Log(LogKind::Medium, ..) => by_kind[2] += n,
                CopyImage::Log(..) => by_kind[0] += n,
                CopyImage::Sst(..) => by_kind[1] += n,
                CopyImage::Held { .. } => held_pieces += 1,
                CopyImage::Named { .. } => named += n,
            }
            let is_named = matches!(img, CopyImage::Named { .. });
            if !held && !is_named && !matches!(img, CopyImage::Log(LogKind::L0 | LogKind::Large, ..)) {
                self.link.stats.image_bytes.fetch_add(n, Relaxed);
            }
            for m in self.frames(img) {
                if !self.put_msg(m) {
                    return;
                }
            }
            done += n;
            self.link.copy_done.fetch_add(n, Relaxed);
            if held {
                self.link.stats.copy_kept_bytes.fetch_add(n, Relaxed);
            } else if is_named {
                self.link.stats.copy_named_bytes.fetch_add(n, Relaxed);
            } else {
                sent += n;
                self.link.stats.copy_bytes.fetch_add(n, Relaxed);
                pace(t0, sent, self.rate);
            }
        }
        let edits = encode_shipped_edits(region, self.copy.edits());
        if self.put_msg(Msg::Edits { epoch, region, edits })
            && self.put_msg(Msg::Copied { epoch, region, lsn: self.copy.lsn })
        {
            let secs = t0.elapsed().as_secs_f64();
            let mib_s = sent as f64 / (1 << 20) as f64 / secs.max(1e-9);
            let [logs, ssts, medium] = by_kind;
            let kept = done - sent - named;
            tracing::info!(region, backup = %self.link.node, sent, logs, ssts, medium, kept, named, held_pieces, pieces = self.copy.pieces(), secs, mib_s, kind, "copy sent");
            let st = &self.link.stats;
            st.copies_sent.fetch_add(1, Relaxed);
            st.copy_micros.fetch_add(t0.elapsed().as_micros() as u64, Relaxed);
            st.copy_seconds.observe(secs);
            self.put(Chunk::Done);
            if named > 0 {
                self.await_ack();
            }
        }
    }

    /// Waits (keeping the copy, and so its pin) until the backup acknowledged the copy's LSN,
    /// or the copy was abandoned, or [`NAMED_PIN`] passed.
    fn await_ack(&self) {
        let (t0, l) = (Instant::now(), &self.link);
        while l.acked() < self.copy.lsn && t0.elapsed() < NAMED_PIN {
            if l.is_stopped() || !l.is_live() || l.copy_gen.load(Relaxed) != self.gen {
                return;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// The frames that carry one segment of the copy.
    fn frames(&self, img: CopyImage) -> Vec<Msg> {
        let (epoch, region) = (self.epoch, self.region);
        match img {
            CopyImage::Log(LogKind::Medium, seg, salt, _, bytes) => {
                vec![Msg::Medium { epoch, region, seg, salt, bytes }]
            }
            CopyImage::Log(log, seg, salt, tail, bytes) => {
                // No LSN rides on a copy's appends: the backup acknowledges the copy's LSN only
                // at `Copied`, once every segment arrived. (An LSN on the tail, which goes out
                // first, let a learner count as holding the region with most of it missing.)
                let log = log as u8;
                let append = Msg::Append { epoch, region, log, seg, salt, offset: 0, last_lsn: 0, commit: 0, bytes };
                if tail {
                    vec![append]
                } else {
                    vec![append, Msg::Seal { epoch, region, log, seg, salt }]
                }
            }
            CopyImage::Sst(info, bytes) => vec![Msg::Sst { epoch, region, info: info.to_bytes(), bytes }],
            CopyImage::Held { log: Some((log @ (LogKind::L0 | LogKind::Large), seg, salt)), .. } => {
                vec![Msg::Kept { epoch, region, log: log as u8, seg, salt }]
            }
            // Kept medium segments and SSTs rejoin the region with the copy's last edits.
            CopyImage::Held { .. } => Vec::new(),
            CopyImage::Named { piece, name, .. } => {
                let (piece, seg, salt, valid, info) = match piece {
                    NamedPiece::Log(log, seg, salt, valid) => (log as u8, seg, salt, valid, Vec::new()),
                    NamedPiece::Sst(info) => (crate::wire::NAMED_SST, info.seg, 0, 0, info.to_bytes()),
                };
                vec![Msg::Named { epoch, region, piece, seg, salt, valid, info, name }]
            }
        }
    }

    fn put_msg(&self, m: Msg) -> bool {
        self.put(Chunk::Frame(m.encode()))
    }

    /// Hands a chunk to the writer, waiting while the feed is full; false once the copy is
    /// abandoned (the writer dropped the feed, the link failed or stopped, a newer copy began).
    fn put(&self, mut c: Chunk) -> bool {
        loop {
            match self.tx.try_send(c) {
                Ok(()) => {
                    if let Some(w) = self.link.waker.lock().as_ref() {
                        w.notify_one();
                    }
                    return true;
                }
                Err(TrySendError::Closed(_)) => return false,
                Err(TrySendError::Full(back)) => {
                    let l = &self.link;
                    if l.is_stopped() || !l.is_live() || l.copy_gen.load(Relaxed) != self.gen {
                        return false;
                    }
                    c = back;
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
        }
    }
}

fn image_bytes(img: &CopyImage) -> u64 {
    match img {
        CopyImage::Log(.., bytes) | CopyImage::Sst(_, bytes) => bytes.len() as u64,
        CopyImage::Held { bytes, .. } | CopyImage::Named { bytes, .. } => *bytes,
    }
}

/// Sleeps until `done` bytes are due at `rate` bytes a second since `t0`.
fn pace(t0: Instant, done: u64, rate: u64) {
    if rate == 0 {
        return;
    }
    let due = Duration::from_secs_f64(done as f64 / rate as f64);
    if let Some(wait) = due.checked_sub(t0.elapsed()) {
        std::thread::sleep(wait);
    }
}
