//! The data file: segments, direct I/O, and byte counters by purpose.

use crate::aligned::{align_down, align_up, AlignedBuf, ALIGN};
use crate::error::{Error, Result};
use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::os::unix::io::{AsRawFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};

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

/// The data of a store, cut into segments and spread over `files` files: segment `s` lives in
/// file `s % files` at `(s / files) * segment_bytes`. Each file is its own inode, so when the file
/// system serialises an operation on a file (ext4 takes the inode lock exclusively and drains
/// the direct I/O in flight to punch or allocate a range) only the readers of that file wait.
pub(crate) struct Device {
    files: Vec<DataFile>,
    direct: bool,
    /// Offset and length alignment of direct reads (the file system's, often 512 bytes):
    /// a log value is read with the fewest blocks around it. Writes keep [`ALIGN`].
    read_align: usize,
    seg_bits: u32,
    counters: IoCounters,
}

struct DataFile {
    file: File,
    /// Written, grown or allocated since its last fdatasync: a sync skips the clean files.
    dirty: AtomicBool,
}

/// Path of data file `i` of the store whose first data file is `first`: `first` itself, then
/// `first.1`, `first.2`, ...
pub(crate) fn data_file_path(first: &Path, i: u32) -> PathBuf {
    if i == 0 {
        return first.to_path_buf();
    }
    let mut name = first.as_os_str().to_owned();
    name.push(format!(".{i}"));
    PathBuf::from(name)
}

/// The data files of the store whose first data file is `first`, as found on disk: `first`
/// and each `first.1`, `first.2`, ... up to the first one missing. Empty when `first` is missing.
pub(crate) fn data_files_on_disk(first: &Path) -> Vec<PathBuf> {
    (0..).map(|i| data_file_path(first, i)).take_while(|p| p.exists()).collect()
}

impl Device {
    /// Opens the data files of the store whose first data file is `first`, or creates `want`
    /// of them where none holds a byte yet (a new store, or one whose creation stopped before
    /// it wrote anything). The superblock records how many a store has; `manifest::load`
    /// checks that all were found.
    pub(crate) fn open_store(first: &Path, want: u32, seg_bits: u32, direct: bool) -> Result<Device> {
        let found = data_files_on_disk(first);
        let mut empty = true;
        for p in &found {
            empty &= std::fs::metadata(p).map_err(Error::io("reading a data file's size"))?.len() == 0;
        }
        if !empty {
            return Device::open(first, found.len() as u32, seg_bits, direct, false);
        }
        // Left over from a creation with another count: gone, so the next open finds `want`.
        for p in found.iter().skip(want as usize) {
            std::fs::remove_file(p).map_err(Error::io("removing an empty data file"))?;
        }
        Device::open(first, want, seg_bits, direct, true)
    }

    /// Opens (or creates) the `files` data files whose first is `path`. Falls back to buffered
    /// I/O where O_DIRECT is refused.
    pub(crate) fn open(path: &Path, files: u32, seg_bits: u32, direct: bool, create: bool) -> Result<Device> {
        let mut direct = direct;
        let mut opened = Vec::with_capacity(files.max(1) as usize);
        // The first file last: a store whose first file exists has all of its others.
        for i in (0..files.max(1)).rev() {
            let p = data_file_path(path, i);
            let open =
                |flags: i32| OpenOptions::new().read(true).write(true).create(create).custom_flags(flags).open(&p);
            let file = if direct {
                match open(libc::O_DIRECT) {
                    Ok(f) => f,
                    Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                        tracing::warn!("O_DIRECT refused for {}; using buffered I/O", p.display());
                        direct = false;
                        open(0).map_err(Error::io("opening a data file"))?
                    }
                    Err(e) => return Err(Error::io("opening a data file")(e)),
                }
            } else {
                open(0).map_err(Error::io("opening a data file"))?
            };
            opened.push(DataFile { file, dirty: AtomicBool::new(false) });
        }
        opened.reverse();
        if !direct {
            // One refused O_DIRECT: every file goes buffered, so all reads see the same data.
            for (i, f) in opened.iter_mut().enumerate() {
                let p = data_file_path(path, i as u32);
                f.file =
                    OpenOptions::new().read(true).write(true).open(&p).map_err(Error::io("opening a data file"))?;
            }
        }
        let read_align = if direct { dio_read_align(&opened[0].file) } else { 512 };
        Ok(Device { files: opened, direct, read_align, seg_bits, counters: IoCounters::default() })
    }

    /// How many files hold the segments.
    pub(crate) fn file_count(&self) -> u32 {
        self.files.len() as u32
    }

    /// The file and the offset in it of device offset `off`.
    fn locate(&self, off: u64) -> (&DataFile, u64) {
        let n = self.files.len() as u64;
        let seg = off >> self.seg_bits;
        let within = off & (self.seg_bytes() - 1);
        (&self.files[(seg % n) as usize], ((seg / n) << self.seg_bits) | within)
    }

    /// Cuts `len` bytes at device offset `off` at segment boundaries: per piece its file, the
    /// offset in that file, and where the piece starts within the range.
    fn pieces(&self, off: u64, len: u64) -> impl Iterator<Item = (&DataFile, u64, u64, u64)> + '_ {
        let seg = self.seg_bytes();
        let mut at = 0u64;
        std::iter::from_fn(move || {
            if at >= len {
                return None;
            }
            let o = off + at;
            let n = (seg - (o & (seg - 1))).min(len - at);
            let (f, fo) = self.locate(o);
            let piece = (f, fo, at, n);
            at += n;
            Some(piece)
        })
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

    /// The device's length: the end of the furthest byte any data file holds.
    pub(crate) fn len(&self) -> Result<u64> {
        let n = self.files.len() as u64;
        let mut end = 0;
        for (i, f) in self.files.iter().enumerate() {
            let flen = f.file.metadata().map_err(Error::io("reading a data file's size"))?.len();
            if flen > 0 {
                let last = flen - 1;
                let seg = ((last >> self.seg_bits) * n) + i as u64;
                end = end.max((seg << self.seg_bits) + (last & (self.seg_bytes() - 1)) + 1);
            }
        }
        Ok(end)
    }

    /// The length file `i` has when the device is `len` bytes long: its share of the whole
    /// segments below `len`, plus the partial last segment if that one is its.
    fn file_end(&self, i: u64, len: u64) -> u64 {
        let n = self.files.len() as u64;
        let whole = len >> self.seg_bits;
        let part = len & (self.seg_bytes() - 1);
        let mine = (whole + n - 1 - i) / n;
        (mine << self.seg_bits) + if whole % n == i { part } else { 0 }
    }

    /// Grows (or shrinks) the device to `len` bytes.
    pub(crate) fn set_len(&self, len: u64) -> Result<()> {
        for (i, f) in self.files.iter().enumerate() {
            let flen = self.file_end(i as u64, len);
            let old = f.file.metadata().map_err(Error::io("reading a data file's size"))?.len();
            if flen == old {
                continue;
            }
            f.dirty.store(true, Relaxed);
            // Allocate the blocks now, in one extent: direct writes into a hole make the file
            // system allocate on the write path, while the writer holds the region's lock.
            if flen > old && fallocate(&f.file, 0, old, flen - old) {
                continue;
            }
            f.file.set_len(flen).map_err(Error::io("growing a data file"))?;
        }
        Ok(())
    }

    /// Gives the blocks of a range back to the file system (the files keep their sizes); reads
    /// of it return zeros. False where the file system cannot.
    pub(crate) fn punch(&self, off: u64, len: u64) -> bool {
        let mode = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
        self.pieces(off, len).fold(true, |ok, (f, fo, _, n)| fallocate(&f.file, mode, fo, n) && ok)
    }

    /// Allocates the blocks of a range (growing the files if it ends beyond them). False where
    /// the file system cannot; writes then allocate as they go.
    pub(crate) fn allocate(&self, off: u64, len: u64) -> bool {
        self.pieces(off, len).fold(true, |ok, (f, fo, _, n)| {
            f.dirty.store(true, Relaxed);
            fallocate(&f.file, 0, fo, n) && ok
        })
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
        let seg = self.seg_bytes();
        if windows.iter().any(|&(start, wlen, _)| (start & (seg - 1)) + wlen as u64 > seg) {
            // A window over two segments is two files' reads; rare enough to take one by one.
            return one_by_one();
        }
        let out = with_scratch(at, |buf| {
            let done = {
                // The windows lie back to back, each taking its length rounded up to ALIGN.
                let mut rest: &mut [u8] = &mut buf[..at];
                let mut io: Vec<(RawFd, u64, &mut [u8])> = Vec::with_capacity(windows.len());
                for &(start, wlen, _) in &windows {
                    let (mine, tail) = std::mem::take(&mut rest).split_at_mut(align_up(wlen, ALIGN));
                    let (f, fo) = self.locate(start);
                    io.push((f.file.as_raw_fd(), fo, &mut mine[..wlen]));
                    rest = tail;
                }
                crate::uring::read_batch(&mut io)
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

    /// Reads into an aligned buffer at an aligned offset; bytes past the end of a file read as
    /// zero.
    pub(crate) fn read_into(&self, off: u64, buf: &mut [u8], kind: IoKind) -> Result<()> {
        let mut total = 0;
        for (f, fo, at, n) in self.pieces(off, buf.len() as u64) {
            let piece = &mut buf[at as usize..(at + n) as usize];
            let mut done = 0;
            while done < piece.len() {
                let got =
                    f.file.read_at(&mut piece[done..], fo + done as u64).map_err(Error::io("reading a data file"))?;
                if got == 0 {
                    piece[done..].fill(0);
                    break;
                }
                done += got;
            }
            total += done as u64;
        }
        self.counters.read[kind as usize].fetch_add(total, Relaxed);
        Ok(())
    }

    /// Writes an aligned buffer at an aligned offset.
    pub(crate) fn write(&self, off: u64, buf: &[u8], kind: IoKind) -> Result<()> {
        debug_assert!((off as usize).is_multiple_of(ALIGN) && buf.len().is_multiple_of(ALIGN));
        for (f, fo, at, n) in self.pieces(off, buf.len() as u64) {
            f.file.write_all_at(&buf[at as usize..(at + n) as usize], fo).map_err(Error::io("writing a data file"))?;
            f.dirty.store(true, Relaxed);
        }
        self.counters.write[kind as usize].fetch_add(buf.len() as u64, Relaxed);
        Ok(())
    }

    /// fdatasync of every file written since its last one: everything written so far is durable.
    pub(crate) fn sync(&self) -> Result<()> {
        self.counters.syncs.fetch_add(1, Relaxed);
        for f in &self.files {
            // Cleared before the sync: a write that lands during it marks the file again.
            if f.dirty.swap(false, Relaxed) {
                if let Err(e) = f.file.sync_data() {
                    f.dirty.store(true, Relaxed);
                    return Err(Error::io("syncing a data file")(e));
                }
            }
        }
        Ok(())
    }
}

/// fallocate(2) on `file`; false where it fails (file systems without the mode).
fn fallocate(file: &File, mode: i32, off: u64, len: u64) -> bool {
    // SAFETY: fallocate on a valid descriptor has no memory effects.
    len == 0 || unsafe { libc::fallocate(file.as_raw_fd(), mode, off as i64, len as i64) } == 0
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

#[cfg(test)]
mod tests {
    use super::*;

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
            let dev = Device::open_store(&dir.path().join(format!("f{files}")), files, BITS, false).unwrap();
            for len in [0, 1, SEG - 1, SEG, SEG + 1, 3 * SEG, 7 * SEG + 512, 17 * SEG, 17 * SEG + 9] {
                let shares: Vec<u64> = (0..files as u64).map(|i| dev.file_end(i, len)).collect();
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
