//! The data file: segments, direct I/O, and byte counters by purpose.

use crate::aligned::{align_down, align_up, AlignedBuf, ALIGN};
use crate::error::{Error, Result};
use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// What an I/O was for; device bytes are counted per purpose.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IoKind {
    /// L0 recovery log appends and replay.
    L0Log = 0,
    /// Medium log runs (written at L0->L1) and in-place merge reads.
    MediumLog = 1,
    /// Large log appends.
    LargeLog = 2,
    /// SST segments written by compactions.
    Compaction = 3,
    /// SST segments read by compactions.
    CompactionRead = 4,
    /// Node and value reads serving gets and scans.
    Read = 5,
    /// Garbage collection reads and rewrites.
    Gc = 6,
    /// Superblocks, redo log and catalog checkpoints.
    Catalog = 7,
    /// Segments a replication backup receives (log segments, SSTs, medium runs).
    Replication = 8,
}

pub(crate) const IO_KINDS: usize = 9;

/// Device byte counters, split by [`IoKind`].
#[derive(Default)]
pub(crate) struct IoCounters {
    read: [AtomicU64; IO_KINDS],
    write: [AtomicU64; IO_KINDS],
    syncs: AtomicU64,
}

impl IoCounters {
    /// Bytes read for `kind`.
    pub(crate) fn read(&self, kind: IoKind) -> u64 {
        self.read[kind as usize].load(Relaxed)
    }
    /// Bytes written for `kind`.
    pub(crate) fn written(&self, kind: IoKind) -> u64 {
        self.write[kind as usize].load(Relaxed)
    }
    /// All bytes read.
    pub(crate) fn total_read(&self) -> u64 {
        self.read.iter().map(|a| a.load(Relaxed)).sum()
    }
    /// All bytes written.
    pub(crate) fn total_written(&self) -> u64 {
        self.write.iter().map(|a| a.load(Relaxed)).sum()
    }
    /// Number of fdatasync calls.
    pub(crate) fn syncs(&self) -> u64 {
        self.syncs.load(Relaxed)
    }
}

/// The data file cut into segments.
pub(crate) struct Device {
    file: File,
    direct: bool,
    /// Offset and length alignment of direct reads (the file system's, often 512 bytes):
    /// a log value is read with the fewest blocks around it. Writes keep [`ALIGN`].
    read_align: usize,
    seg_bits: u32,
    counters: IoCounters,
}

impl Device {
    /// Opens (or creates) the data file. Falls back to buffered I/O where O_DIRECT is refused.
    pub(crate) fn open(path: &Path, seg_bits: u32, direct: bool, create: bool) -> Result<Device> {
        let open = |flags: i32| OpenOptions::new().read(true).write(true).create(create).custom_flags(flags).open(path);
        let (file, direct) = if direct {
            match open(libc::O_DIRECT) {
                Ok(f) => (f, true),
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                    tracing::warn!("O_DIRECT refused for {}; using buffered I/O", path.display());
                    (open(0).map_err(Error::io("opening the data file"))?, false)
                }
                Err(e) => return Err(Error::io("opening the data file")(e)),
            }
        } else {
            (open(0).map_err(Error::io("opening the data file"))?, false)
        };
        let read_align = if direct { dio_read_align(&file) } else { 512 };
        Ok(Device { file, direct, read_align, seg_bits, counters: IoCounters::default() })
    }

    /// Whether reads and writes bypass the page cache.
    pub(crate) fn is_direct(&self) -> bool {
        self.direct
    }

    /// Byte counters.
    pub(crate) fn counters(&self) -> &IoCounters {
        &self.counters
    }

    pub(crate) fn seg_bytes(&self) -> u64 {
        1 << self.seg_bits
    }

    pub(crate) fn seg_bits(&self) -> u32 {
        self.seg_bits
    }

    /// Device offset of a segment's first byte.
    pub(crate) fn seg_base(&self, seg: u32) -> u64 {
        (seg as u64) << self.seg_bits
    }

    pub(crate) fn len(&self) -> Result<u64> {
        Ok(self.file.metadata().map_err(Error::io("reading the data file size"))?.len())
    }

    pub(crate) fn set_len(&self, len: u64) -> Result<()> {
        let old = self.len()?;
        // Allocate the blocks now, in one extent: direct writes into a hole make the file
        // system allocate on the write path, while the writer holds the region's lock.
        if len > old && self.allocate(old, len - old) {
            return Ok(());
        }
        self.file.set_len(len).map_err(Error::io("growing the data file"))
    }

    /// Gives the blocks of a range back to the file system (the file keeps its size); reads
    /// of it return zeros. False where the file system cannot.
    pub(crate) fn punch(&self, off: u64, len: u64) -> bool {
        let mode = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
        // SAFETY: fallocate on a valid descriptor has no memory effects.
        len == 0 || unsafe { libc::fallocate(self.file.as_raw_fd(), mode, off as i64, len as i64) } == 0
    }

    /// Allocates the blocks of a range (growing the file if it ends beyond it). False where
    /// the file system cannot; writes then allocate as they go.
    pub(crate) fn allocate(&self, off: u64, len: u64) -> bool {
        // SAFETY: as above.
        unsafe { libc::fallocate(self.file.as_raw_fd(), 0, off as i64, len as i64) == 0 }
    }

    /// The aligned window around `len` bytes at `off`: its start and length.
    fn window(&self, off: u64, len: usize) -> (u64, usize) {
        let start = align_down(off as usize, self.read_align);
        let end = align_up(off as usize + len, self.read_align);
        (start as u64, end - start)
    }

    /// Reads `len` bytes at any offset (reads the aligned window around it).
    pub(crate) fn read(&self, off: u64, len: usize, kind: IoKind) -> Result<Vec<u8>> {
        let (start, wlen) = self.window(off, len);
        with_scratch(wlen, |buf| {
            self.read_into(start, &mut buf[..wlen], kind)?;
            let skip = (off - start) as usize;
            Ok(buf[skip..skip + len].to_vec())
        })
    }

    /// Reads each `(offset, len)` of `reqs`, all at once where the kernel allows it (io_uring),
    /// else one after another. One result per request, in order.
    pub(crate) fn read_many(&self, reqs: &[(u64, usize)], kind: IoKind) -> Vec<Result<Vec<u8>>> {
        let one_by_one = || reqs.iter().map(|&(off, len)| self.read(off, len, kind)).collect();
        if reqs.len() < 2 || crate::uring::unavailable() {
            return one_by_one();
        }
        // Every window at an aligned place of one buffer.
        let mut at = 0;
        let windows: Vec<(u64, usize, usize)> = reqs
            .iter()
            .map(|&(off, len)| {
                let (start, wlen) = self.window(off, len);
                let place = at;
                at = align_up(at + wlen, ALIGN);
                (start, wlen, place)
            })
            .collect();
        let out = with_scratch(at, |buf| {
            let done = {
                // The windows lie back to back, each taking its length rounded up to ALIGN.
                let mut rest: &mut [u8] = &mut buf[..at];
                let mut io: Vec<(u64, &mut [u8])> = Vec::with_capacity(windows.len());
                for &(start, wlen, _) in &windows {
                    let (mine, tail) = std::mem::take(&mut rest).split_at_mut(align_up(wlen, ALIGN));
                    io.push((start, &mut mine[..wlen]));
                    rest = tail;
                }
                crate::uring::read_batch(self.file.as_raw_fd(), &mut io)
            };
            let done = done?;
            let mut total = 0;
            let out: Vec<Result<Vec<u8>>> = reqs
                .iter()
                .zip(&windows)
                .zip(done)
                .map(|((&(off, len), &(start, wlen, place)), res)| {
                    let n = res.map_err(Error::io("reading the data file"))?;
                    let w = &mut buf[place..place + wlen];
                    // Past the end of the file reads as zero, as in `read_into`.
                    w[n.min(wlen)..].fill(0);
                    total += n as u64;
                    let skip = (off - start) as usize;
                    Ok(w[skip..skip + len].to_vec())
                })
                .collect();
            self.counters.read[kind as usize].fetch_add(total, Relaxed);
            Some(out)
        });
        // io_uring turned out to be unavailable: nothing was read.
        out.unwrap_or_else(one_by_one)
    }

    /// Reads into an aligned buffer at an aligned offset; bytes past the end of file read as zero.
    pub(crate) fn read_into(&self, off: u64, buf: &mut [u8], kind: IoKind) -> Result<()> {
        let mut done = 0;
        while done < buf.len() {
            let n =
                self.file.read_at(&mut buf[done..], off + done as u64).map_err(Error::io("reading the data file"))?;
            if n == 0 {
                buf[done..].fill(0);
                break;
            }
            done += n;
        }
        self.counters.read[kind as usize].fetch_add(done as u64, Relaxed);
        Ok(())
    }

    /// Writes an aligned buffer at an aligned offset.
    pub(crate) fn write(&self, off: u64, buf: &[u8], kind: IoKind) -> Result<()> {
        debug_assert!((off as usize).is_multiple_of(ALIGN) && buf.len().is_multiple_of(ALIGN));
        self.file.write_all_at(buf, off).map_err(Error::io("writing the data file"))?;
        self.counters.write[kind as usize].fetch_add(buf.len() as u64, Relaxed);
        Ok(())
    }

    /// fdatasync: everything written so far is durable.
    pub(crate) fn sync(&self) -> Result<()> {
        self.counters.syncs.fetch_add(1, Relaxed);
        self.file.sync_data().map_err(Error::io("syncing the data file"))
    }
}

/// The file system's offset alignment for direct reads (statx STATX_DIOALIGN), or [`ALIGN`]
/// where it does not say. Buffers stay [`ALIGN`]-aligned, which satisfies any memory alignment.
fn dio_read_align(file: &File) -> usize {
    // SAFETY: statx writes into the zeroed struct we own; the empty path with AT_EMPTY_PATH
    // names the open descriptor.
    let mut stx: libc::statx = unsafe { std::mem::zeroed() };
    let rc =
        unsafe { libc::statx(file.as_raw_fd(), c"".as_ptr(), libc::AT_EMPTY_PATH, libc::STATX_DIOALIGN, &mut stx) };
    let a = stx.stx_dio_offset_align as usize;
    if rc == 0 && stx.stx_mask & libc::STATX_DIOALIGN != 0 && a.is_power_of_two() && a <= ALIGN {
        a
    } else {
        ALIGN
    }
}

thread_local! {
    /// A reusable aligned buffer per thread for reads whose bytes are copied out: reads are
    /// the hot path of gets and scans, and a fresh zeroed buffer per read showed in profiles.
    static SCRATCH: std::cell::RefCell<AlignedBuf> = std::cell::RefCell::new(AlignedBuf::new(64 << 10));
}

/// Buffers up to this size are kept for the next read on the thread.
const SCRATCH_KEEP: usize = 8 << 20;

/// Runs `f` on an aligned buffer of at least `len` bytes (contents unspecified).
fn with_scratch<T>(len: usize, f: impl FnOnce(&mut [u8]) -> T) -> T {
    SCRATCH.with(|cell| match cell.try_borrow_mut() {
        Ok(mut buf) if len <= SCRATCH_KEEP => {
            if buf.len() < len {
                *buf = AlignedBuf::new(len.next_power_of_two());
            }
            f(&mut buf[..])
        }
        // Larger than worth keeping, or already in use further up the stack.
        _ => f(&mut AlignedBuf::new(len)),
    })
}
