//! Batched reads: many independent reads issued at once through io_uring (one submission, one
//! wait), so that a scan's log values cost about one device latency instead of one each
//! (KV-Tandem's parallel scan prefetch; the device serves ~4x the IOPS at queue depth 32 as
//! at queue depth 1). Where io_uring is refused (some container runtimes block it) the caller
//! falls back to one pread after another.

use io_uring::{opcode, types, IoUring};
use std::cell::RefCell;
use std::io;
use std::os::unix::io::RawFd;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};

/// Reads in flight at once per thread.
const RING_ENTRIES: u32 = 64;

static UNAVAILABLE: AtomicBool = AtomicBool::new(false);

thread_local! {
    /// One ring per thread: no locking, and a ring's memory stays warm for the next batch.
    static RING: RefCell<Option<IoUring>> = const { RefCell::new(None) };
}

/// Whether io_uring was found unusable here (batched reads then use pread).
pub(crate) fn unavailable() -> bool {
    UNAVAILABLE.load(Relaxed)
}

/// Reads each `(file, offset, buffer)` of `reqs`. Returns per read the bytes read (short at
/// the end of the file) or its error; `None` when io_uring cannot be used here, in which case
/// nothing was read.
pub(crate) fn read_batch(reqs: &mut [(RawFd, u64, &mut [u8])]) -> Option<Vec<io::Result<usize>>> {
    if UNAVAILABLE.load(Relaxed) {
        return None;
    }
    RING.with(|cell| {
        let mut slot = cell.borrow_mut();
        if slot.is_none() {
            match IoUring::new(RING_ENTRIES) {
                Ok(r) => *slot = Some(r),
                Err(e) => {
                    tracing::info!("io_uring is not available ({e}); batched reads use pread");
                    UNAVAILABLE.store(true, Relaxed);
                    return None;
                }
            }
        }
        let ring = slot.as_mut()?;
        let mut out: Vec<io::Result<usize>> = Vec::with_capacity(reqs.len());
        out.resize_with(reqs.len(), || Ok(0));
        for (ci, chunk) in reqs.chunks_mut(RING_ENTRIES as usize).enumerate() {
            let base = ci * RING_ENTRIES as usize;
            let mut queued = 0;
            for (i, (fd, off, buf)) in chunk.iter_mut().enumerate() {
                let e = opcode::Read::new(types::Fd(*fd), buf.as_mut_ptr(), buf.len() as u32)
                    .offset(*off)
                    .build()
                    .user_data((base + i) as u64);
                // SAFETY: every buffer stays borrowed until `wait_all` has collected the
                // completion of each read the kernel took.
                if unsafe { ring.submission().push(&e) }.is_ok() {
                    queued += 1;
                } else {
                    if let Some(o) = out.get_mut(base + i) {
                        *o = Err(io::Error::other("io_uring submission queue full"));
                    }
                }
            }
            if let Err(e) = submit_all(ring) {
                if ring.submission().len() == queued {
                    // The kernel took none of the reads: nothing is in flight, so the ring can
                    // go and pread can do the work (an environment that lets io_uring be set up
                    // but not entered).
                    tracing::info!("io_uring cannot submit ({e}); batched reads use pread");
                    UNAVAILABLE.store(true, Relaxed);
                    *slot = None;
                    return None;
                }
            }
            wait_all(ring, queued, &mut out[..]);
        }
        Some(out)
    })
}

fn transient(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EINTR | libc::EAGAIN | libc::EBUSY))
}

/// Hands every queued read to the kernel, retrying what is transient.
fn submit_all(ring: &mut IoUring) -> io::Result<()> {
    for _ in 0..1000 {
        match ring.submit() {
            Ok(_) if ring.submission().is_empty() => return Ok(()),
            Ok(_) => {}
            Err(e) if transient(&e) => {}
            Err(e) => return Err(e),
        }
    }
    Err(io::Error::other("io_uring takes no more submissions"))
}

/// Collects `n` completions into `out` (indexed by user data), submitting what is still queued.
fn wait_all(ring: &mut IoUring, n: usize, out: &mut [io::Result<usize>]) {
    let mut got = 0;
    let mut failures = 0;
    while got < n {
        if let Err(e) = ring.submit_and_wait(n - got) {
            // Reads are in flight: their buffers must not be released before they complete, so
            // keep waiting. Transient errors clear; anything else that persists is a broken
            // kernel interface, where stopping is the only memory-safe choice.
            if !transient(&e) {
                failures += 1;
                if failures > 1000 {
                    tracing::error!("io_uring keeps failing ({e}) with reads in flight; aborting");
                    std::process::abort();
                }
                std::thread::yield_now();
            }
        }
        for cqe in ring.completion() {
            let i = cqe.user_data() as usize;
            let res = cqe.result();
            if let Some(slot) = out.get_mut(i) {
                *slot = if res < 0 { Err(io::Error::from_raw_os_error(-res)) } else { Ok(res as usize) };
            }
            got += 1;
        }
    }
}
