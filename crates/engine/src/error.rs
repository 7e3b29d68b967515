//! The engine's one error type.

use std::fmt;

/// Everything that can go wrong in the engine. Each variant says what to do about it.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The operating system refused an I/O operation.
    #[error("I/O error while {context}: {source}")]
    Io {
        /// What the engine was doing.
        context: &'static str,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// A key longer than `Options::max_key_bytes`.
    #[error("key of {len} bytes is longer than the limit of {limit} bytes (Options::max_key_bytes)")]
    KeyTooLarge {
        /// Length of the rejected key.
        len: usize,
        /// The configured limit.
        limit: usize,
    },
    /// A value longer than the limit (`Options::max_value_bytes`, or what fits in one segment).
    #[error("value of {len} bytes is longer than the limit of {limit} bytes for this key (Options::max_value_bytes; a record must fit in one segment)")]
    ValueTooLarge {
        /// Length of the rejected value.
        len: usize,
        /// The limit for this key.
        limit: usize,
    },
    /// A checksum or structural check failed: the bytes on the device are not what was written.
    #[error("corruption in segment {segment} at offset {offset}: {what}")]
    Corruption {
        /// Segment number.
        segment: u64,
        /// Byte offset inside the segment.
        offset: u64,
        /// What was wrong.
        what: String,
    },
    /// The device is full (`Options::max_device_bytes` or the file system).
    #[error("no space left on the device ({what}); delete data, let garbage collection run, or raise Options::max_device_bytes")]
    NoSpace {
        /// Where the space ran out.
        what: &'static str,
    },
    /// An earlier failure (I/O error, background panic) made the store refuse writes.
    #[error("the store refuses writes after an earlier failure: {0}; reopen it to recover")]
    Poisoned(String),
    /// The options are inconsistent.
    #[error("invalid options: {0}")]
    InvalidOptions(String),
    /// No region with this id.
    #[error("no region with id {0}")]
    NoSuchRegion(u32),
    /// No region covers the key.
    #[error("no region covers this key; create one with Db::create_region")]
    NoRegionForKey,
    /// A range delete whose end is not after its start.
    #[error("empty key range: the end of a range delete must be greater than its start")]
    EmptyRange,
    /// The key is outside the region the handle is for.
    #[error("key is outside region {0}'s key range")]
    KeyOutOfRegion(u32),
    /// A new region would overlap an existing one.
    #[error("region {new} overlaps region {existing}")]
    RegionOverlap {
        /// The requested region.
        new: u32,
        /// The region it overlaps.
        existing: u32,
    },
    /// The region exists already.
    #[error("region {0} exists already")]
    RegionExists(u32),
    /// A write batch names keys of more than one region; a batch is atomic within one region.
    #[error("a write batch spans regions {0} and {1}; split it per region (Db::region)")]
    BatchSpansRegions(u32, u32),
    /// The region was split or merged while the write waited: its keys are in other regions
    /// now. `Db`'s writes route again by themselves; a [`crate::RegionHandle`]'s caller
    /// looks the key's region up again (`Db::regions`).
    #[error("region {0} was split or merged: route the write again")]
    RegionChanged(u32),
    /// The region's primary is handing it off (`RegionHandle::fence`): the write did not
    /// happen; it goes to the region's next primary once the region map names it.
    #[error("region {0} is changing primaries: the write was not applied; route it again once the region map changes")]
    RegionFenced(u32),
    /// Client writes went to a region that is a replication backup.
    #[error("region {0} is a backup: it takes replicated data only")]
    BackupRegion(u32),
    /// The store is closing; background work stops.
    #[error("the store is closing")]
    Closed,
    /// Another process has the store open.
    #[error("the store at {0} is open in another process (lock file held)")]
    Locked(String),
    /// The store was written by an incompatible format version or with other fixed geometry.
    #[error("incompatible store: {0}")]
    Incompatible(String),
}

impl Error {
    pub(crate) fn io(context: &'static str) -> impl FnOnce(std::io::Error) -> Error {
        move |source| {
            if source.raw_os_error() == Some(libc::ENOSPC) {
                Error::NoSpace { what: "file system full" }
            } else {
                Error::Io { context, source }
            }
        }
    }

    pub(crate) fn corrupt(segment: u64, offset: u64, what: impl fmt::Display) -> Error {
        Error::Corruption { segment, offset, what: what.to_string() }
    }
}

/// Result with the engine's error.
pub type Result<T, E = Error> = std::result::Result<T, E>;
