//! Device writes of a region's log tails, taken out of the region's write lock.
//!
//! Appends fill a tail's segment image under the write lock, and every completed chunk used to
//! be written to the device right there: in LD Run A a writer then waited for the lock about a
//! third of its time, behind chunk writes of 0.2 ms and more. Now the lock holder only copies
//! the chunk into a job, and the job is written after the lock is released, by the thread that
//! queued it (or by whichever thread drains first).
//!
//! Order: jobs are written one at a time in the order they were queued, by whoever holds
//! `io`, so that a job that rewrites the partial last block of an earlier one (after a
//! `write_out` of the partial tail) always lands after it. Whoever needs the bytes on the
//! device drains the queue first: the tail before it leaves a segment (nothing may reach a
//! segment once it can be freed or read back as a whole), and every sync.

#![expect(clippy::indexing_slicing, reason = "job buffers are allocated at least as long as what they carry")]

use crate::device::aligned::{align_up, AlignedBuf, ALIGN};
use crate::device::{Device, IoKind};
use crate::error::Result;
use parking_lot::Mutex;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Spare job buffers kept for reuse: allocating a fresh aligned chunk per job costs a page
/// fault per page.
const SPARE: usize = 8;

struct Job {
    off: u64,
    len: usize,
    buf: AlignedBuf,
    kind: IoKind,
}

/// The queue of log writes of one region.
pub(crate) struct LogWriter {
    jobs: Mutex<VecDeque<Job>>,
    /// Held while writing: jobs reach the device in queue order, one at a time.
    io: Mutex<()>,
    spare: Mutex<Vec<AlignedBuf>>,
    /// Size of pooled buffers: a chunk and the blocks around it.
    buf_bytes: usize,
    queued: AtomicU64,
}

impl LogWriter {
    pub(crate) fn new(chunk: usize) -> LogWriter {
        LogWriter {
            jobs: Mutex::new(VecDeque::new()),
            io: Mutex::new(()),
            spare: Mutex::new(Vec::new()),
            buf_bytes: align_up(chunk + 2 * ALIGN, ALIGN),
            queued: AtomicU64::new(0),
        }
    }

    /// Queues a copy of `bytes` for the device at `off` (both aligned).
    pub(crate) fn push(&self, off: u64, bytes: &[u8], kind: IoKind) {
        let mut buf = match self.spare.lock().pop() {
            Some(b) if b.len() >= bytes.len() => b,
            _ => AlignedBuf::new(bytes.len().max(self.buf_bytes)),
        };
        buf[..bytes.len()].copy_from_slice(bytes);
        self.jobs.lock().push_back(Job { off, len: bytes.len(), buf, kind });
        self.queued.fetch_add(1, Relaxed);
    }

    /// Jobs queued so far (a writer compares it before and after its append to know whether
    /// it queued one).
    pub(crate) fn queued(&self) -> u64 {
        self.queued.load(Relaxed)
    }

    /// Writes every queued job. When it returns, every job queued before the call is on the
    /// device (written, not synced), by this thread or another.
    pub(crate) fn drain(&self, dev: &Device) -> Result<()> {
        let _io = self.io.lock();
        loop {
            let Some(job) = self.jobs.lock().pop_front() else {
                return Ok(());
            };
            dev.write(job.off, &job.buf[..job.len], job.kind)?;
            let mut spare = self.spare.lock();
            if spare.len() < SPARE && job.buf.len() == self.buf_bytes {
                spare.push(job.buf);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn device(dir: &std::path::Path) -> Device {
        Device::open(&dir.join("data"), 1, 20, true, true).unwrap()
    }

    #[test]
    fn later_jobs_land_after_earlier_ones_on_the_same_block() {
        let dir = tempfile::tempdir().unwrap();
        let dev = device(dir.path());
        let w = LogWriter::new(4 * ALIGN);
        let base = dev.seg_base(1);
        // A partial block written out, then the whole chunk that completes it.
        w.push(base, &[1u8; ALIGN], IoKind::LargeLog);
        w.push(base, &[2u8; 4 * ALIGN], IoKind::LargeLog);
        assert_eq!(w.queued(), 2);
        let mut b = AlignedBuf::new(4 * ALIGN);
        dev.read_into(base, &mut b, IoKind::Read).unwrap();
        assert!(b.iter().all(|&x| x == 0), "nothing reaches the device before a drain");
        w.drain(&dev).unwrap();
        dev.read_into(base, &mut b, IoKind::Read).unwrap();
        assert!(b.iter().all(|&x| x == 2), "the later job wins");
        // Buffers are reused, and a reused one carries no bytes of its last job.
        w.push(base + 4 * ALIGN as u64, &[3u8; ALIGN], IoKind::LargeLog);
        w.drain(&dev).unwrap();
        dev.read_into(base, &mut b, IoKind::Read).unwrap();
        assert!(b.iter().all(|&x| x == 2));
        let mut c = AlignedBuf::new(2 * ALIGN);
        dev.read_into(base + 4 * ALIGN as u64, &mut c, IoKind::Read).unwrap();
        assert!(c[..ALIGN].iter().all(|&x| x == 3) && c[ALIGN..].iter().all(|&x| x == 0));
    }
}
