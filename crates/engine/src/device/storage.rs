//! The trait every storage of a store's segments implements.

use super::aligned::ALIGN;
use std::io;

/// Where a store's segments live. Offsets are within segment `seg` (`0..1 << seg_bits`); an
/// I/O never crosses a segment. Reads and writes of the engine come aligned to 4 KiB, except
/// reads aligned to [`Storage::read_align`].
#[expect(clippy::len_without_is_empty, reason = "a storage's length is its extent, not a count")]
pub trait Storage: Send + Sync {
    /// log2 of the segment size.
    fn seg_bits(&self) -> u32;
    /// Reads `buf.len()` bytes at `off` of segment `seg`; returns how many were stored there,
    /// and bytes past them read as zero.
    fn read(&self, seg: u32, off: u64, buf: &mut [u8]) -> io::Result<usize>;
    /// Writes `buf` at `off` of segment `seg`. Durable only after the next [`Storage::sync`].
    fn write(&self, seg: u32, off: u64, buf: &[u8]) -> io::Result<()>;
    /// Makes every write that completed before the call durable.
    fn sync(&self) -> io::Result<()>;
    /// The end of the furthest byte stored, from the start of segment 0.
    fn len(&self) -> io::Result<u64>;
    /// Grows (or shrinks) the storage to `len` bytes.
    fn set_len(&self, len: u64) -> io::Result<()>;
    /// Gives back the room of a range (reads of it return zeros); false where it cannot.
    fn punch(&self, _seg: u32, _off: u64, _len: u64) -> bool {
        false
    }
    /// Reserves the room of a range ahead of writes; false where it cannot.
    fn allocate(&self, _seg: u32, _off: u64, _len: u64) -> bool {
        false
    }
    /// Reads each `(seg, offset, buffer)` at once, returning per read the bytes stored (as
    /// [`Storage::read`]); `None` where the storage cannot batch (nothing was read then).
    fn read_batch(&self, _reqs: &mut [(u32, u64, &mut [u8])]) -> Option<Vec<io::Result<usize>>> {
        None
    }
    /// Whether reads and writes bypass the page cache.
    fn is_direct(&self) -> bool {
        false
    }
    /// Offset and length alignment of reads.
    fn read_align(&self) -> usize {
        ALIGN
    }
    /// How many files hold the segments (1 where there are no files).
    fn file_count(&self) -> u32 {
        1
    }
    /// Whether a write is acknowledged only once its log records were written here, under
    /// every sync mode (synced only under `SyncMode::Always`). A storage on other machines
    /// (storage nodes) says yes: a processing node that dies then loses no acknowledged write.
    fn tails_before_ack(&self) -> bool {
        false
    }
    /// Names segment `seg` so that another store on the same storage can take a copy of it
    /// with [`Storage::adopt`] without reading it (storage nodes copy their fragments within
    /// themselves); None where the storage cannot.
    fn segment_ref(&self, _seg: u32) -> Option<Vec<u8>> {
        None
    }
    /// Whether [`Storage::adopt`] can work here.
    fn can_adopt(&self) -> bool {
        false
    }
    /// Makes segment `seg` a copy of the segment another store's [`Storage::segment_ref`]
    /// named.
    fn adopt(&self, _seg: u32, _r: &[u8]) -> io::Result<()> {
        Err(io::Error::new(io::ErrorKind::Unsupported, "this storage cannot adopt another store's segments"))
    }
}
