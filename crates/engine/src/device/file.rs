//! The real storage: segments in data files on a file system, with direct I/O where the file
//! system allows it and io_uring for batched reads (pread where io_uring is refused).

use super::aligned::ALIGN;
use super::storage::Storage;
use crate::error::{Error, Result};
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::os::unix::io::{AsRawFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};

/// The data of a store, cut into segments and spread over `files` files: segment `s` lives in
/// file `s % files` at `(s / files) * segment_bytes`. Each file is its own inode, so when the file
/// system serialises an operation on a file (ext4 takes the inode lock exclusively and drains
/// the direct I/O in flight to punch or allocate a range) only the readers of that file wait.
pub(crate) struct FileStorage {
    files: Vec<DataFile>,
    direct: bool,
    /// Offset and length alignment of direct reads (the file system's, often 512 bytes):
    /// a log value is read with the fewest blocks around it. Writes keep [`ALIGN`].
    read_align: usize,
    seg_bits: u32,
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

impl FileStorage {
    /// Opens the data files of the store whose first data file is `first`, or creates `want`
    /// of them where none holds a byte yet (a new store, or one whose creation stopped before
    /// it wrote anything). The superblock records how many a store has; `manifest::load`
    /// checks that all were found.
    pub(crate) fn open_store(first: &Path, want: u32, seg_bits: u32, direct: bool) -> Result<FileStorage> {
        let found = data_files_on_disk(first);
        let mut empty = true;
        for p in &found {
            empty &= std::fs::metadata(p).map_err(Error::io("reading a data file's size"))?.len() == 0;
        }
        if !empty {
            return FileStorage::open(first, found.len() as u32, seg_bits, direct, false);
        }
        // Left over from a creation with another count: gone, so the next open finds `want`.
        for p in found.iter().skip(want as usize) {
            std::fs::remove_file(p).map_err(Error::io("removing an empty data file"))?;
        }
        FileStorage::open(first, want, seg_bits, direct, true)
    }

    /// Opens (or creates) the `files` data files whose first is `path`. Falls back to buffered
    /// I/O where O_DIRECT is refused.
    pub(crate) fn open(path: &Path, files: u32, seg_bits: u32, direct: bool, create: bool) -> Result<FileStorage> {
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
        let read_align = match opened.first() {
            Some(f) if direct => dio_read_align(&f.file),
            _ => 512,
        };
        Ok(FileStorage { files: opened, direct, read_align, seg_bits })
    }

    fn seg_bytes(&self) -> u64 {
        1 << self.seg_bits
    }

    /// The file of segment `seg` and the offset in it of the segment's byte `off`.
    fn locate(&self, seg: u32, off: u64) -> io::Result<(&DataFile, u64)> {
        let n = self.files.len() as u64;
        let seg = u64::from(seg);
        let f = self.files.get((seg % n) as usize).ok_or_else(|| io::Error::other("no data file"))?;
        Ok((f, ((seg / n) << self.seg_bits) | off))
    }

    /// The length file `i` has when the device is `len` bytes long: its share of the whole
    /// segments below `len`, plus the partial last segment if that one is its.
    pub(crate) fn file_end(&self, i: u64, len: u64) -> u64 {
        let n = self.files.len() as u64;
        let whole = len >> self.seg_bits;
        let part = len & (self.seg_bytes() - 1);
        let mine = (whole + n - 1 - i) / n;
        (mine << self.seg_bits) + if whole % n == i { part } else { 0 }
    }
}

impl Storage for FileStorage {
    fn seg_bits(&self) -> u32 {
        self.seg_bits
    }

    fn file_count(&self) -> u32 {
        self.files.len() as u32
    }

    fn is_direct(&self) -> bool {
        self.direct
    }

    fn read_align(&self) -> usize {
        self.read_align
    }

    fn len(&self) -> io::Result<u64> {
        let n = self.files.len() as u64;
        let mut end = 0;
        for (i, f) in self.files.iter().enumerate() {
            let flen = f.file.metadata()?.len();
            if flen > 0 {
                let last = flen - 1;
                let seg = ((last >> self.seg_bits) * n) + i as u64;
                end = end.max((seg << self.seg_bits) + (last & (self.seg_bytes() - 1)) + 1);
            }
        }
        Ok(end)
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        for (i, f) in self.files.iter().enumerate() {
            let flen = self.file_end(i as u64, len);
            let old = f.file.metadata()?.len();
            if flen == old {
                continue;
            }
            f.dirty.store(true, Relaxed);
            // Allocate the blocks now, in one extent: direct writes into a hole make the file
            // system allocate on the write path, while the writer holds the region's lock.
            if flen > old && fallocate(&f.file, 0, old, flen - old) {
                continue;
            }
            f.file.set_len(flen)?;
        }
        Ok(())
    }

    fn punch(&self, seg: u32, off: u64, len: u64) -> bool {
        let mode = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
        self.locate(seg, off).is_ok_and(|(f, fo)| fallocate(&f.file, mode, fo, len))
    }

    fn allocate(&self, seg: u32, off: u64, len: u64) -> bool {
        self.locate(seg, off).is_ok_and(|(f, fo)| {
            f.dirty.store(true, Relaxed);
            fallocate(&f.file, 0, fo, len)
        })
    }

    fn read(&self, seg: u32, off: u64, buf: &mut [u8]) -> io::Result<usize> {
        let (f, fo) = self.locate(seg, off)?;
        let mut done = 0;
        while let Some(rest) = buf.get_mut(done..).filter(|r| !r.is_empty()) {
            let got = f.file.read_at(rest, fo + done as u64)?;
            if got == 0 {
                rest.fill(0);
                break;
            }
            done += got;
        }
        Ok(done)
    }

    fn write(&self, seg: u32, off: u64, buf: &[u8]) -> io::Result<()> {
        let (f, fo) = self.locate(seg, off)?;
        f.file.write_all_at(buf, fo)?;
        f.dirty.store(true, Relaxed);
        Ok(())
    }

    fn sync(&self) -> io::Result<()> {
        for f in &self.files {
            // Cleared before the sync: a write that lands during it marks the file again.
            if f.dirty.swap(false, Relaxed) {
                if let Err(e) = f.file.sync_data() {
                    f.dirty.store(true, Relaxed);
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    fn read_batch(&self, reqs: &mut [(u32, u64, &mut [u8])]) -> Option<Vec<io::Result<usize>>> {
        if super::uring::unavailable() {
            return None;
        }
        let mut io: Vec<(RawFd, u64, &mut [u8])> = Vec::with_capacity(reqs.len());
        for (seg, off, buf) in reqs.iter_mut() {
            let (f, fo) = self.locate(*seg, *off).ok()?;
            io.push((f.file.as_raw_fd(), fo, &mut **buf));
        }
        super::uring::read_batch(&mut io)
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
