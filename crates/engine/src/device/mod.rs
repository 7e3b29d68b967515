//! The storage seam: the engine reaches its segments only through [`Device`], which counts
//! bytes by purpose and cuts I/O at segment boundaries over a [`Storage`]: the real data files
//! ([`file`]), memory ([`mem`]), or memory that fails, tears writes and loses power on a plan
//! ([`fault`]). Storage is segment-oriented so that a remote segment store can be one too.

#![expect(
    clippy::indexing_slicing,
    reason = "windows into scratch buffers this module sized; pieces never cross a segment"
)]

pub(crate) mod alloc;

pub(crate) mod aligned;
pub(crate) mod fault;
pub(crate) mod file;
pub(crate) mod mem;
pub(crate) mod storage;
pub(crate) mod uring;

use crate::error::{Error, Result};
use aligned::{align_down, align_up, AlignedBuf, ALIGN};
#[cfg(test)]
use file::data_file_path;
pub(crate) use file::data_files_on_disk;
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
pub use storage::Storage;

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
    /// SSTs and log segments read to warm the cache after open.
    Warm = 9,
}

pub(crate) const IO_KINDS: usize = 10;

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

/// A store's segments with byte counters by purpose, over any [`Storage`].
pub(crate) struct Device {
    store: Arc<dyn Storage>,
    read_align: usize,
    seg_bits: u32,
    counters: IoCounters,
}

fn io_err(what: &'static str) -> impl FnOnce(io::Error) -> Error {
    Error::io(what)
}

impl Device {
    /// The data files of the store whose first data file is `first` (see
    /// [`file::FileStorage::open_store`]).
    pub(crate) fn open_store(first: &Path, want: u32, seg_bits: u32, direct: bool) -> Result<Device> {
        Ok(Device::new(Arc::new(file::FileStorage::open_store(first, want, seg_bits, direct)?)))
    }

    /// Opens (or creates) the `files` data files whose first is `path`.
    #[cfg(test)]
    pub(crate) fn open(path: &Path, files: u32, seg_bits: u32, direct: bool, create: bool) -> Result<Device> {
        Ok(Device::new(Arc::new(file::FileStorage::open(path, files, seg_bits, direct, create)?)))
    }

    /// A device over `store`.
    pub(crate) fn new(store: Arc<dyn Storage>) -> Device {
        let read_align = store.read_align().clamp(1, ALIGN);
        Device { seg_bits: store.seg_bits(), read_align, store, counters: IoCounters::default() }
    }

    /// How many files hold the segments.
    pub(crate) fn file_count(&self) -> u32 {
        self.store.file_count()
    }

    /// Cuts `len` bytes at device offset `off` at segment boundaries: per piece its segment,
    /// the offset in it, and where the piece starts within the range.
    fn pieces(&self, off: u64, len: u64) -> impl Iterator<Item = (u32, u64, u64, u64)> + '_ {
        let seg = self.seg_bytes();
        let mut at = 0u64;
        std::iter::from_fn(move || {
            if at >= len {
                return None;
            }
            let o = off + at;
            let n = (seg - (o & (seg - 1))).min(len - at);
            let piece = ((o >> self.seg_bits) as u32, o & (seg - 1), at, n);
            at += n;
            Some(piece)
        })
    }

    /// Whether reads and writes bypass the page cache.
    pub(crate) fn is_direct(&self) -> bool {
        self.store.is_direct()
    }

    /// Whether writes wait for their log records to reach the storage ([`Storage::tails_before_ack`]).
    pub(crate) fn tails_before_ack(&self) -> bool {
        self.store.tails_before_ack()
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

    /// The device's length: the end of the furthest byte stored.
    pub(crate) fn len(&self) -> Result<u64> {
        self.store.len().map_err(io_err("reading a data file's size"))
    }

    /// Grows (or shrinks) the device to `len` bytes.
    pub(crate) fn set_len(&self, len: u64) -> Result<()> {
        self.store.set_len(len).map_err(io_err("growing a data file"))
    }

    /// Gives the blocks of a range back (the files keep their sizes); reads of it return
    /// zeros. False where the storage cannot.
    pub(crate) fn punch(&self, off: u64, len: u64) -> bool {
        self.pieces(off, len).fold(true, |ok, (s, so, _, n)| self.store.punch(s, so, n) && ok)
    }

    /// Allocates the blocks of a range (growing the files if it ends beyond them). False where
    /// the storage cannot; writes then allocate as they go.
    pub(crate) fn allocate(&self, off: u64, len: u64) -> bool {
        self.pieces(off, len).fold(true, |ok, (s, so, _, n)| self.store.allocate(s, so, n) && ok)
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

    /// Reads each `(offset, len)` of `reqs`, all at once where the storage allows it
    /// (io_uring), else one after another. One result per request, in order.
    pub(crate) fn read_many(&self, reqs: &[(u64, usize)], kind: IoKind) -> Vec<Result<Vec<u8>>> {
        let one_by_one = || reqs.iter().map(|&(off, len)| self.read(off, len, kind)).collect();
        if reqs.len() < 2 {
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
        let seg = self.seg_bytes();
        if windows.iter().any(|&(start, wlen, _)| (start & (seg - 1)) + wlen as u64 > seg) {
            // A window over two segments is two reads; rare enough to take one by one.
            return one_by_one();
        }
        let out = with_scratch(at, |buf| self.read_windows(reqs, &windows, &mut buf[..at], kind));
        // The storage could not batch: nothing was read.
        out.unwrap_or_else(one_by_one)
    }

    /// [`Device::read_many`]'s batch: `buf` holds the windows back to back, each taking its
    /// length rounded up to [`ALIGN`].
    fn read_windows(
        &self,
        reqs: &[(u64, usize)],
        windows: &[(u64, usize, usize)],
        buf: &mut [u8],
        kind: IoKind,
    ) -> Option<Vec<Result<Vec<u8>>>> {
        let done = {
            let mut rest: &mut [u8] = buf;
            let mut io: Vec<(u32, u64, &mut [u8])> = Vec::with_capacity(windows.len());
            for &(start, wlen, _) in windows {
                let (mine, tail) = std::mem::take(&mut rest).split_at_mut(align_up(wlen, ALIGN));
                io.push(((start >> self.seg_bits) as u32, start & (self.seg_bytes() - 1), &mut mine[..wlen]));
                rest = tail;
            }
            self.store.read_batch(&mut io)?
        };
        let mut total = 0;
        let out = reqs
            .iter()
            .zip(windows)
            .zip(done)
            .map(|((&(off, len), &(start, wlen, place)), res)| {
                let n = res.map_err(Error::io("reading the data file"))?;
                let w = &mut buf[place..place + wlen];
                // Past what is stored reads as zero, as in `read_into`.
                w[n.min(wlen)..].fill(0);
                total += n as u64;
                let skip = (off - start) as usize;
                Ok(w[skip..skip + len].to_vec())
            })
            .collect();
        self.counters.read[kind as usize].fetch_add(total, Relaxed);
        Some(out)
    }

    /// Reads into an aligned buffer at an aligned offset; bytes never stored read as zero.
    pub(crate) fn read_into(&self, off: u64, buf: &mut [u8], kind: IoKind) -> Result<()> {
        let mut total = 0;
        for (s, so, at, n) in self.pieces(off, buf.len() as u64) {
            let piece = &mut buf[at as usize..(at + n) as usize];
            total += self.store.read(s, so, piece).map_err(io_err("reading a data file"))? as u64;
        }
        self.counters.read[kind as usize].fetch_add(total, Relaxed);
        Ok(())
    }

    /// Writes an aligned buffer at an aligned offset.
    pub(crate) fn write(&self, off: u64, buf: &[u8], kind: IoKind) -> Result<()> {
        debug_assert!((off as usize).is_multiple_of(ALIGN) && buf.len().is_multiple_of(ALIGN));
        for (s, so, at, n) in self.pieces(off, buf.len() as u64) {
            self.store.write(s, so, &buf[at as usize..(at + n) as usize]).map_err(io_err("writing a data file"))?;
        }
        self.counters.write[kind as usize].fetch_add(buf.len() as u64, Relaxed);
        Ok(())
    }

    /// A name of segment `seg` that another store on the same storage can adopt.
    pub(crate) fn segment_ref(&self, seg: u32) -> Option<Vec<u8>> {
        self.store.segment_ref(seg)
    }

    /// Whether this device can take another store's segments by reference.
    pub(crate) fn can_adopt(&self) -> bool {
        self.store.can_adopt()
    }

    /// Makes segment `seg` a copy of the one another store's [`Device::segment_ref`] named.
    pub(crate) fn adopt(&self, seg: u32, r: &[u8]) -> Result<()> {
        self.store.adopt(seg, r).map_err(io_err("taking another store's segment"))
    }

    /// Makes everything written so far durable (fdatasync of the files written since their
    /// last one).
    pub(crate) fn sync(&self) -> Result<()> {
        self.counters.syncs.fetch_add(1, Relaxed);
        self.store.sync().map_err(io_err("syncing a data file"))
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::File;
    use std::os::unix::fs::FileExt;

    const BITS: u32 = 16;
    const SEG: u64 = 1 << BITS;

    fn pattern(len: usize, seed: u8) -> AlignedBuf {
        let mut b = AlignedBuf::new(len);
        for (i, x) in b.iter_mut().enumerate() {
            *x = (i as u8).wrapping_mul(31).wrapping_add(seed);
        }
        b
    }

    #[test]
    fn segments_go_round_robin_over_the_files() {
        let dir = tempfile::tempdir().unwrap();
        let first = dir.path().join("d");
        let dev = Device::open_store(&first, 3, BITS, true).unwrap();
        assert_eq!(dev.file_count(), 3);
        dev.set_len(7 * SEG).unwrap();
        assert_eq!(dev.len().unwrap(), 7 * SEG);
        // Segments 0,3,6 / 1,4 / 2,5.
        let sizes: Vec<u64> = data_files_on_disk(&first).iter().map(|p| std::fs::metadata(p).unwrap().len()).collect();
        assert_eq!(sizes, vec![3 * SEG, 2 * SEG, 2 * SEG]);
        // A write over segments 4 and 5 lands in files 1 and 2; reading it back joins them.
        let buf = pattern(SEG as usize, 7);
        let off = 4 * SEG + SEG / 2;
        dev.write(off, &buf, IoKind::Compaction).unwrap();
        let mut back = AlignedBuf::new(SEG as usize);
        dev.read_into(off, &mut back, IoKind::Read).unwrap();
        assert_eq!(&back[..], &buf[..]);
        let in_file = |i: u32, at: u64, len: usize| {
            let f = File::open(data_file_path(&first, i)).unwrap();
            let mut b = vec![0; len];
            f.read_exact_at(&mut b, at).unwrap();
            b
        };
        let half = (SEG / 2) as usize;
        assert_eq!(in_file(1, SEG + SEG / 2, half), &buf[..half], "segment 4 is file 1's second");
        assert_eq!(in_file(2, SEG, half), &buf[half..], "segment 5 is file 2's second");
        // Unaligned reads and batched reads see the same bytes.
        assert_eq!(dev.read(off + 100, 5000, IoKind::Read).unwrap(), &buf[100..5100]);
        let many = dev.read_many(&[(off + 10, 100), (5 * SEG + 8, 300), (off + half as u64 - 50, 100)], IoKind::Read);
        let many: Vec<Vec<u8>> = many.into_iter().map(|r| r.unwrap()).collect();
        assert_eq!(many[0], &buf[10..110]);
        assert_eq!(many[1], &buf[half + 8..half + 308]);
        assert_eq!(many[2], &buf[half - 50..half + 50], "a read over two files");
        // Punching segment 4 zeroes it alone.
        assert!(dev.punch(4 * SEG, SEG));
        assert_eq!(dev.read(off, half, IoKind::Read).unwrap(), vec![0; half]);
        assert_eq!(dev.read(5 * SEG, half, IoKind::Read).unwrap(), &buf[half..]);
        dev.sync().unwrap();
        // Growing by a partial segment ends the right file there.
        dev.set_len(9 * SEG + 4096).unwrap();
        assert_eq!(dev.len().unwrap(), 9 * SEG + 4096);
        assert_eq!(std::fs::metadata(data_file_path(&first, 0)).unwrap().len(), 3 * SEG + 4096);
    }

    #[test]
    fn file_shares_add_up_to_the_device_length() {
        let dir = tempfile::tempdir().unwrap();
        for files in [1, 2, 3, 8] {
            let fs = file::FileStorage::open_store(&dir.path().join(format!("f{files}")), files, BITS, false).unwrap();
            for len in [0, 1, SEG - 1, SEG, SEG + 1, 3 * SEG, 7 * SEG + 512, 17 * SEG, 17 * SEG + 9] {
                let shares: Vec<u64> = (0..files as u64).map(|i| fs.file_end(i, len)).collect();
                assert_eq!(shares.iter().sum::<u64>(), len, "{files} files, {len} bytes: {shares:?}");
                // No file is more than one segment longer than another.
                let (lo, hi) = (shares.iter().min().unwrap(), shares.iter().max().unwrap());
                assert!(hi - lo <= SEG, "{files} files, {len} bytes: {shares:?}");
            }
        }
    }

    #[test]
    fn reopening_finds_the_files_a_store_has() {
        let dir = tempfile::tempdir().unwrap();
        let first = dir.path().join("d");
        {
            let dev = Device::open_store(&first, 4, BITS, true).unwrap();
            dev.set_len(SEG).unwrap();
            dev.write(0, &pattern(4096, 1), IoKind::Catalog).unwrap();
        }
        // A store with bytes keeps its count whatever the options ask.
        assert_eq!(Device::open_store(&first, 2, BITS, true).unwrap().file_count(), 4);
        // Files that never held a byte are a store not yet made: the options decide.
        let empty = dir.path().join("e");
        drop(Device::open_store(&empty, 5, BITS, true).unwrap());
        assert_eq!(data_files_on_disk(&empty).len(), 5);
        assert_eq!(Device::open_store(&empty, 2, BITS, true).unwrap().file_count(), 2);
        assert_eq!(data_files_on_disk(&empty).len(), 2, "the empty leftovers are gone");
    }
}
