//! The catalog: regions, their levels of SSTs, their log segment lists, medium-segment
//! pointer counts and large-log garbage. It changes only through [`Edit`]s, which the
//! redo log records (see `manifest.rs`) and which replicas can replay.

pub(crate) mod manifest;

use crate::device::IoKind;
use crate::format::rangedel::{self, RangeDel};
use halyard_codec::{Reader, Short, Writer};
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// The three logs of a region.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LogKind {
    /// Small and medium pairs and tombstones: the write-ahead log of L0.
    L0 = 0,
    /// Sorted runs of medium pairs written at L0->L1.
    Medium = 1,
    /// Large pairs (values stay here; the index holds pointers).
    Large = 2,
}

impl LogKind {
    pub(crate) fn from_u8(v: u8) -> Option<LogKind> {
        match v {
            0 => Some(LogKind::L0),
            1 => Some(LogKind::Medium),
            2 => Some(LogKind::Large),
            _ => None,
        }
    }
    pub(crate) fn io(self) -> IoKind {
        match self {
            LogKind::L0 => IoKind::L0Log,
            LogKind::Medium => IoKind::MediumLog,
            LogKind::Large => IoKind::LargeLog,
        }
    }
}

/// Everything the catalog knows of one SST (it is also the SST's footer).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SstInfo {
    /// Segment holding the SST.
    pub seg: u32,
    /// Bytes of the segment used (whole blocks).
    pub used_bytes: u32,
    /// Leaves, laid out from offset 0.
    pub leaf_count: u32,
    /// Offset of the root node within the segment.
    pub root_off: u32,
    /// Height of the tree (0 = the root is a leaf).
    pub height: u8,
    /// Offset of the Bloom filter within the segment.
    pub bloom_off: u32,
    /// Length of the Bloom filter.
    pub bloom_len: u32,
    /// Number of entries.
    pub entries: u64,
    /// Bytes of keys plus in-place values or pointers, as stored.
    pub stored_bytes: u64,
    /// Bytes of keys plus values, with medium values at their full size.
    pub full_bytes: u64,
    /// Entries pointing into the medium log.
    pub medium_ptrs: u32,
    /// Entries pointing into the large log.
    pub large_ptrs: u32,
    /// Smallest LSN.
    pub min_lsn: u64,
    /// Largest LSN.
    pub max_lsn: u64,
    /// First key.
    pub first_key: Vec<u8>,
    /// Last key.
    pub last_key: Vec<u8>,
    /// No range delete with an LSN up to this one hides an entry of the SST: the merge that
    /// wrote it applied them all (0: none applied). Encoded only when not 0 (format 4).
    pub range_lsn: u64,
}

impl SstInfo {
    /// A description with every count and offset 0 and no keys, for a builder to fill in.
    pub(crate) fn blank() -> SstInfo {
        SstInfo {
            seg: 0,
            used_bytes: 0,
            leaf_count: 0,
            root_off: 0,
            height: 0,
            bloom_off: 0,
            bloom_len: 0,
            entries: 0,
            stored_bytes: 0,
            full_bytes: 0,
            medium_ptrs: 0,
            large_ptrs: 0,
            min_lsn: 0,
            max_lsn: 0,
            first_key: Vec::new(),
            last_key: Vec::new(),
            range_lsn: 0,
        }
    }

    /// Whether the SST holds keys outside `[start, end)` (`end` None: no end).
    pub(crate) fn beyond(&self, start: &[u8], end: Option<&[u8]>) -> bool {
        self.first_key.as_slice() < start || end.is_some_and(|e| self.last_key.as_slice() >= e)
    }

    /// A digest of the description (XXH3 of its encoding): how a returning backup and its
    /// primary tell that they hold the same SST (`replication/resync.rs`).
    pub fn digest(&self) -> u64 {
        xxhash_rust::xxh3::xxh3_64(&self.to_bytes())
    }
}

/// The first byte of an encoded [`Edit`]: which edit follows (`docs/format.md` §3.3). Each is
/// used by `Edit::encode` and `Edit::decode`.
mod tag {
    pub(super) const CREATE_REGION: u8 = 1;
    pub(super) const ADD_SST: u8 = 2;
    pub(super) const REMOVE_SST: u8 = 3;
    pub(super) const LOG_ADD: u8 = 4;
    pub(super) const LOG_REMOVE: u8 = 5;
    pub(super) const LOG_SEAL: u8 = 6;
    pub(super) const MEDIUM_PTRS: u8 = 7;
    pub(super) const LARGE_GARBAGE: u8 = 8;
    pub(super) const L1_LSN: u8 = 9;
    pub(super) const MAP: u8 = 10;
    pub(super) const UNMAP: u8 = 11;
    pub(super) const CLEAR_L1_LSN: u8 = 12;
    pub(super) const LOG_FILL: u8 = 13;
    pub(super) const ADD_RANGE_DEL: u8 = 14;
    pub(super) const DROP_RANGE_DEL: u8 = 15;
    /// `ADD_SST` whose SST has a `range_lsn`, which follows the description.
    pub(super) const ADD_SST_RANGED: u8 = 16;
    pub(super) const SPLIT: u8 = 17;
    pub(super) const MERGE: u8 = 18;
    pub(super) const DROP_REGION: u8 = 19;
    pub(super) const SPLIT_SHARING_L0: u8 = 20;
}

/// The deepest level an edit may name (`Options::max_levels` is at most 32).
pub(crate) const MAX_LEVEL: u8 = 32;

/// A level of SSTs: 1..=32. Level 0 is the L0 log, never a level of SSTs; none is deeper
/// than `Options::max_levels` may make. Made only through [`Level::new`] (decoding included),
/// so a level from a disk or a peer indexes a region's levels without a check.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Level(u8);

impl Level {
    /// Level 1, where L0 compacts to.
    pub const L1: Level = Level(1);

    /// Level `n`, if it is one (1..=32).
    pub fn new(n: usize) -> Option<Level> {
        u8::try_from(n).ok().filter(|n| (1..=MAX_LEVEL).contains(n)).map(Level)
    }

    /// The level whose SSTs are at `index` of a region's list of levels.
    pub fn at_index(index: usize) -> Option<Level> {
        Level::new(index.checked_add(1)?)
    }

    /// The level's number.
    pub fn get(self) -> usize {
        usize::from(self.0)
    }

    /// Where the level's SSTs are in a region's list of levels (`get() - 1`).
    pub fn index(self) -> usize {
        usize::from(self.0).saturating_sub(1)
    }
}

impl SstInfo {
    /// Checks that the description fits a segment of `seg_bytes` with nodes of `node_bytes`,
    /// so that no offset computed from it overflows or reaches past the SST. A description
    /// from a peer or the disk is checked before anything reads through it.
    pub(crate) fn check(&self, seg_bytes: u64, node_bytes: usize) -> Result<(), &'static str> {
        let nb = node_bytes as u64;
        let used = u64::from(self.used_bytes);
        if used > seg_bytes {
            return Err("SST larger than a segment");
        }
        if u64::from(self.leaf_count) * nb > used {
            return Err("SST leaves past its used bytes");
        }
        if nb == 0 || u64::from(self.root_off) % nb != 0 || u64::from(self.root_off) + nb > used {
            return Err("SST root outside its used bytes");
        }
        let leaves_end = u64::from(self.leaf_count) * nb;
        if (self.height == 0) != (u64::from(self.root_off) < leaves_end) {
            return Err("SST root is not a leaf exactly when its height is 0");
        }
        if u64::from(self.bloom_off) + u64::from(self.bloom_len) > used {
            return Err("SST Bloom filter past its used bytes");
        }
        if self.height > MAX_LEVEL {
            return Err("SST taller than any segment allows");
        }
        if u64::from(self.medium_ptrs) + u64::from(self.large_ptrs) > self.entries {
            return Err("SST with more log pointers than entries");
        }
        if self.entries > used {
            return Err("SST with more entries than bytes");
        }
        if self.first_key > self.last_key {
            return Err("SST first key after its last key");
        }
        Ok(())
    }

    pub(crate) fn encode(&self, e: &mut Writer) {
        e.u32(self.seg).u32(self.used_bytes).u32(self.leaf_count).u32(self.root_off).u8(self.height);
        e.u32(self.bloom_off).u32(self.bloom_len).u64(self.entries).u64(self.stored_bytes).u64(self.full_bytes);
        e.u32(self.medium_ptrs).u32(self.large_ptrs).u64(self.min_lsn).u64(self.max_lsn);
        e.bytes(&self.first_key).bytes(&self.last_key);
    }
    /// The footer body: the description, and `range_lsn` when it is not 0 (the footer's
    /// length says which).
    pub(crate) fn encode_footer(&self, e: &mut Writer) {
        self.encode(e);
        if self.range_lsn != 0 {
            e.u64(self.range_lsn);
        }
    }

    pub(crate) fn decode(d: &mut Reader<'_>) -> Result<SstInfo, Short> {
        Ok(SstInfo {
            seg: d.u32()?,
            used_bytes: d.u32()?,
            leaf_count: d.u32()?,
            root_off: d.u32()?,
            height: d.u8()?,
            bloom_off: d.u32()?,
            bloom_len: d.u32()?,
            entries: d.u64()?,
            stored_bytes: d.u64()?,
            full_bytes: d.u64()?,
            medium_ptrs: d.u32()?,
            large_ptrs: d.u32()?,
            min_lsn: d.u64()?,
            max_lsn: d.u64()?,
            first_key: d.bytes()?.to_vec(),
            last_key: d.bytes()?.to_vec(),
            range_lsn: 0,
        })
    }
}

/// One change to a region's catalog. A compaction's edits are applied atomically.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Edit {
    /// A region appears: key range `[start, end)` (`end` None = unbounded).
    CreateRegion {
        /// Smallest key.
        start: Vec<u8>,
        /// First key past the region, None for no limit.
        end: Option<Vec<u8>>,
        /// The region is a replication backup (no L0, no compaction).
        backup: bool,
    },
    /// An SST joins a level.
    AddSst {
        /// Level.
        level: Level,
        /// The SST.
        sst: SstInfo,
    },
    /// An SST leaves a level; its segment is freed unless the same edit list adds it again
    /// (a move to another level).
    RemoveSst {
        /// Level.
        level: Level,
        /// Segment of the SST.
        seg: u32,
    },
    /// A segment joins a log.
    LogAdd {
        /// Which log.
        log: LogKind,
        /// Segment.
        seg: u32,
        /// Salt its records carry.
        salt: u32,
    },
    /// A segment leaves a log and is freed.
    LogRemove {
        /// Which log.
        log: LogKind,
        /// Segment.
        seg: u32,
    },
    /// Records in this segment with an LSN above `max_lsn` are void (written before a crash
    /// and beyond the recovered prefix).
    LogSeal {
        /// Which log.
        log: LogKind,
        /// Segment.
        seg: u32,
        /// Largest valid LSN.
        max_lsn: u64,
    },
    /// How many bytes of a log segment hold records: written when the log's tail leaves the
    /// segment (or learnt by recovery or GC), so that GC judges a segment by the share of its
    /// written bytes that are invalid and recovery need not read it to know.
    LogFill {
        /// Which log.
        log: LogKind,
        /// Segment.
        seg: u32,
        /// Bytes from offset 0 that hold records.
        bytes: u32,
    },
    /// Change of the number of index entries pointing into a medium-log segment;
    /// at zero the segment is freed.
    MediumPtrs {
        /// Segment.
        seg: u32,
        /// Salt of the segment incarnation the pointers refer to.
        salt: u32,
        /// Change.
        delta: i64,
    },
    /// Bytes of a large-log segment that no index entry needs any more.
    LargeGarbage {
        /// Segment.
        seg: u32,
        /// Salt of the segment incarnation.
        salt: u32,
        /// Bytes.
        bytes: u64,
    },
    /// Everything up to this LSN is in L1 or below: recovery replays only later records.
    L1Lsn(u64),
    /// The region's levels were emptied to take a full copy (a Build-Index backup catching
    /// up): its L1 LSN starts again from 0, since `L1Lsn` only ever raises it.
    ClearL1Lsn,
    /// A backup's translation of a primary segment to its own (docs/design.md §3): a log segment
    /// incarnation `(primary, salt)`, or an SST's segment (`salt` 0).
    Map {
        /// Log or index map.
        kind: MapKind,
        /// The primary's segment.
        primary: u32,
        /// Salt of the incarnation (log map), 0 (index map).
        salt: u32,
        /// The backup's segment.
        local: u32,
    },
    /// A range delete leaves L0 for the levels (format 4): it hides the older versions of the
    /// keys of `[start, end)` in every level until no SST holds any.
    AddRangeDel {
        /// First key deleted.
        start: Vec<u8>,
        /// First key past the range (greater than `start`).
        end: Vec<u8>,
        /// LSN of the delete.
        lsn: u64,
    },
    /// The range delete of this LSN hides nothing any more: no SST holds a version older
    /// than it among its keys.
    DropRangeDel {
        /// LSN of the delete.
        lsn: u64,
    },
    /// The region this record is for is made from region `parent`'s keys from `at` on (format
    /// 5): it names the same SSTs, medium and large log segments (shared: a segment is freed
    /// when no region names it any more), and the parent ends at `at`. Each side hides the
    /// other's keys with a range delete at `lsn` (the parent's up to `past`, a key above every
    /// key of the parent's range), which compactions then clean up; nothing is rewritten.
    /// Both sides' levels hold everything up to `lsn`; the new region has no L0 log.
    Split {
        /// The region split.
        parent: u32,
        /// First key of the new region.
        at: Vec<u8>,
        /// LSN of the two range deletes (the parent's next LSN, taken by the split).
        lsn: u64,
        /// End of the parent's range delete: the parent's end, or past every key it may hold.
        past: Vec<u8>,
    },
    /// As [`Edit::Split`], with L0 not written out first (format 7): both sides name the
    /// parent's L0 log too, whose last segment is sealed at `lsn` (it holds the split's mark
    /// there), and keep the parent's `l1_lsn`; each replays the parent's L0 records (the other
    /// side's keys hidden by its range delete) until its own L0 merge covers them.
    SplitSharingL0 {
        /// The region split.
        parent: u32,
        /// First key of the new region.
        at: Vec<u8>,
        /// LSN of the two range deletes and of the split's mark in the parent's L0 log.
        lsn: u64,
        /// End of the parent's range delete: the parent's end, or past every key it may hold.
        past: Vec<u8>,
    },
    /// The region this record is for takes in region `right`, which starts where it ends
    /// (format 5): its levels, medium and large logs and their counts join this region's
    /// (neither holds a key of the other's range, nor a range delete), `right` is gone.
    Merge {
        /// The region merged in.
        right: u32,
    },
    /// The region this record is for leaves the catalog (format 6): a backup copy its node no
    /// longer holds, emptied first (it names no segment).
    DropRegion,
    /// Drops a map entry (a backup remapping to a new primary's segments).
    Unmap {
        /// Log or index map.
        kind: MapKind,
        /// The primary's segment.
        primary: u32,
        /// Salt of the incarnation (log map), 0 (index map).
        salt: u32,
    },
}

/// Which of a backup's two segment maps an entry belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MapKind {
    /// Log segments (replicated log segments and medium runs): keyed by (segment, salt).
    Log = 0,
    /// SST segments.
    Index = 1,
}

impl Edit {
    pub(crate) fn encode(&self, e: &mut Writer) {
        match self {
            Edit::CreateRegion { start, end, backup } => {
                e.u8(tag::CREATE_REGION).bytes(start);
                match end {
                    Some(k) => e.u8(1).bytes(k),
                    None => e.u8(0),
                };
                e.u8(*backup as u8);
            }
            // The tag of format 3 while no range delete was applied: stores without range
            // deletes write what they wrote before.
            Edit::AddSst { level, sst } if sst.range_lsn == 0 => {
                e.u8(tag::ADD_SST).u8(level.0);
                sst.encode(e);
            }
            Edit::AddSst { level, sst } => {
                e.u8(tag::ADD_SST_RANGED).u8(level.0);
                sst.encode(e);
                e.u64(sst.range_lsn);
            }
            Edit::RemoveSst { level, seg } => {
                e.u8(tag::REMOVE_SST).u8(level.0).u32(*seg);
            }
            Edit::LogAdd { log, seg, salt } => {
                e.u8(tag::LOG_ADD).u8(*log as u8).u32(*seg).u32(*salt);
            }
            Edit::LogRemove { log, seg } => {
                e.u8(tag::LOG_REMOVE).u8(*log as u8).u32(*seg);
            }
            Edit::LogSeal { log, seg, max_lsn } => {
                e.u8(tag::LOG_SEAL).u8(*log as u8).u32(*seg).u64(*max_lsn);
            }
            Edit::MediumPtrs { seg, salt, delta } => {
                e.u8(tag::MEDIUM_PTRS).u32(*seg).u32(*salt).u64(*delta as u64);
            }
            Edit::LargeGarbage { seg, salt, bytes } => {
                e.u8(tag::LARGE_GARBAGE).u32(*seg).u32(*salt).u64(*bytes);
            }
            Edit::L1Lsn(l) => {
                e.u8(tag::L1_LSN).u64(*l);
            }
            Edit::Map { kind, primary, salt, local } => {
                e.u8(tag::MAP).u8(*kind as u8).u32(*primary).u32(*salt).u32(*local);
            }
            Edit::Unmap { kind, primary, salt } => {
                e.u8(tag::UNMAP).u8(*kind as u8).u32(*primary).u32(*salt);
            }
            Edit::ClearL1Lsn => {
                e.u8(tag::CLEAR_L1_LSN);
            }
            Edit::LogFill { log, seg, bytes } => {
                e.u8(tag::LOG_FILL).u8(*log as u8).u32(*seg).u32(*bytes);
            }
            Edit::AddRangeDel { start, end, lsn } => {
                e.u8(tag::ADD_RANGE_DEL).bytes(start).bytes(end).u64(*lsn);
            }
            Edit::DropRangeDel { lsn } => {
                e.u8(tag::DROP_RANGE_DEL).u64(*lsn);
            }
            Edit::Split { parent, at, lsn, past } => {
                e.u8(tag::SPLIT).u32(*parent).bytes(at).u64(*lsn).bytes(past);
            }
            Edit::SplitSharingL0 { parent, at, lsn, past } => {
                e.u8(tag::SPLIT_SHARING_L0).u32(*parent).bytes(at).u64(*lsn).bytes(past);
            }
            Edit::Merge { right } => {
                e.u8(tag::MERGE).u32(*right);
            }
            Edit::DropRegion => {
                e.u8(tag::DROP_REGION);
            }
        }
    }

    pub(crate) fn decode(d: &mut Reader<'_>) -> Result<Edit, Short> {
        let log = |v: u8| LogKind::from_u8(v).ok_or(Short);
        // Level 0 is the L0 log, never a level of SSTs.
        let level = |v: u8| Level::new(usize::from(v)).ok_or(Short);
        let map_kind = |v: u8| match v {
            0 => Ok(MapKind::Log),
            1 => Ok(MapKind::Index),
            _ => Err(Short),
        };
        Ok(match d.u8()? {
            tag::CREATE_REGION => {
                // Flags are 0 or 1 exactly: one meaning has one encoding.
                let start = d.bytes()?.to_vec();
                let end = match d.u8()? {
                    0 => None,
                    1 => Some(d.bytes()?.to_vec()),
                    _ => return Err(Short),
                };
                let backup = match d.u8()? {
                    0 => false,
                    1 => true,
                    _ => return Err(Short),
                };
                Edit::CreateRegion { start, end, backup }
            }
            tag::ADD_SST => Edit::AddSst { level: level(d.u8()?)?, sst: SstInfo::decode(d)? },
            tag::ADD_SST_RANGED => {
                let (level, mut sst) = (level(d.u8()?)?, SstInfo::decode(d)?);
                sst.range_lsn = d.u64()?;
                // An SST with no range LSN is written as `ADD_SST`: one meaning, one encoding.
                if sst.range_lsn == 0 {
                    return Err(Short);
                }
                Edit::AddSst { level, sst }
            }
            tag::REMOVE_SST => Edit::RemoveSst { level: level(d.u8()?)?, seg: d.u32()? },
            tag::LOG_ADD => Edit::LogAdd { log: log(d.u8()?)?, seg: d.u32()?, salt: d.u32()? },
            tag::LOG_REMOVE => Edit::LogRemove { log: log(d.u8()?)?, seg: d.u32()? },
            tag::LOG_SEAL => Edit::LogSeal { log: log(d.u8()?)?, seg: d.u32()?, max_lsn: d.u64()? },
            tag::MEDIUM_PTRS => Edit::MediumPtrs { seg: d.u32()?, salt: d.u32()?, delta: d.u64()? as i64 },
            tag::LARGE_GARBAGE => Edit::LargeGarbage { seg: d.u32()?, salt: d.u32()?, bytes: d.u64()? },
            tag::L1_LSN => Edit::L1Lsn(d.u64()?),
            tag::MAP => Edit::Map { kind: map_kind(d.u8()?)?, primary: d.u32()?, salt: d.u32()?, local: d.u32()? },
            tag::UNMAP => Edit::Unmap { kind: map_kind(d.u8()?)?, primary: d.u32()?, salt: d.u32()? },
            tag::CLEAR_L1_LSN => Edit::ClearL1Lsn,
            tag::LOG_FILL => Edit::LogFill { log: log(d.u8()?)?, seg: d.u32()?, bytes: d.u32()? },
            tag::ADD_RANGE_DEL => {
                let (start, end, lsn) = (d.bytes()?.to_vec(), d.bytes()?.to_vec(), d.u64()?);
                // An empty or inverted range is never written.
                if end <= start {
                    return Err(Short);
                }
                Edit::AddRangeDel { start, end, lsn }
            }
            tag::DROP_RANGE_DEL => Edit::DropRangeDel { lsn: d.u64()? },
            tag::SPLIT => {
                let (parent, at, lsn, past) = (d.u32()?, d.bytes()?.to_vec(), d.u64()?, d.bytes()?.to_vec());
                // The parent's range delete [at, past) is never empty.
                if past <= at {
                    return Err(Short);
                }
                Edit::Split { parent, at, lsn, past }
            }
            tag::SPLIT_SHARING_L0 => {
                let (parent, at, lsn, past) = (d.u32()?, d.bytes()?.to_vec(), d.u64()?, d.bytes()?.to_vec());
                if past <= at {
                    return Err(Short);
                }
                Edit::SplitSharingL0 { parent, at, lsn, past }
            }
            tag::MERGE => Edit::Merge { right: d.u32()? },
            tag::DROP_REGION => Edit::DropRegion,
            _ => return Err(Short),
        })
    }
}

/// A segment of a log as the catalog knows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogSeg {
    /// Segment number.
    pub seg: u32,
    /// Salt its records carry.
    pub salt: u32,
    /// Largest valid LSN (u64::MAX when not sealed).
    pub sealed: u64,
    /// Bytes from offset 0 that hold records, once the log's tail has left the segment (None:
    /// not known, as for segments of stores of format 1 until recovery or GC reads them).
    pub fill: Option<u32>,
}

impl LogSeg {
    /// Bytes holding records: the fill, or the whole segment while it is not known.
    pub(crate) fn written(&self, seg_bytes: u64) -> u64 {
        self.fill.map_or(seg_bytes, u64::from)
    }

    /// Whether the log left this segment holding records in less than half of it (a restart
    /// of a store of format 1 left one per log; the tail otherwise leaves a segment full).
    pub(crate) fn partly_filled(&self, seg_bytes: u64) -> bool {
        self.fill.is_some_and(|f| u64::from(f) < seg_bytes / 2)
    }
}

/// One region's catalog.
#[derive(Clone, Debug, Default)]
pub(crate) struct RegionMeta {
    /// Smallest key.
    pub start: Vec<u8>,
    /// First key past the region.
    pub end: Option<Vec<u8>>,
    /// Replication backup.
    pub backup: bool,
    /// Everything up to this LSN is in the levels.
    pub l1_lsn: u64,
    /// levels[i] = SSTs of level i+1, sorted by first key.
    pub levels: Vec<Vec<SstInfo>>,
    /// Segments of the L0, medium and large logs, oldest first.
    pub logs: [Vec<LogSeg>; 3],
    /// Live index pointers per medium-log segment.
    pub medium_ptrs: HashMap<u32, u64>,
    /// Invalid bytes per large-log segment.
    pub large_garbage: HashMap<u32, u64>,
    /// Backup: (primary log segment, salt) -> local segment.
    pub log_map: BTreeMap<(u32, u32), u32>,
    /// Backup: primary SST segment -> local segment.
    pub index_map: BTreeMap<u32, u32>,
    /// Range deletes that left L0, by LSN.
    pub range_dels: Vec<RangeDel>,
}

impl RegionMeta {
    /// The segments of one log, oldest first.
    pub(crate) fn log(&self, kind: LogKind) -> &Vec<LogSeg> {
        let [l0, medium, large] = &self.logs;
        match kind {
            LogKind::L0 => l0,
            LogKind::Medium => medium,
            LogKind::Large => large,
        }
    }

    pub(crate) fn log_mut(&mut self, kind: LogKind) -> &mut Vec<LogSeg> {
        let [l0, medium, large] = &mut self.logs;
        match kind {
            LogKind::L0 => l0,
            LogKind::Medium => medium,
            LogKind::Large => large,
        }
    }
    fn log_salt(&self, log: LogKind, seg: u32) -> Option<u32> {
        self.log(log).iter().find(|s| s.seg == seg).map(|s| s.salt)
    }

    /// Applies one edit; returns the segments it freed.
    pub(crate) fn apply(&mut self, edit: &Edit, freed: &mut Vec<u32>) {
        match edit {
            Edit::CreateRegion { start, end, backup } => {
                self.start = start.clone();
                self.end = end.clone();
                self.backup = *backup;
            }
            Edit::AddSst { level, sst } => {
                while self.levels.len() < level.get() {
                    self.levels.push(Vec::new());
                }
                if let Some(lv) = self.levels.get_mut(level.index()) {
                    let at = lv.partition_point(|s| s.first_key < sst.first_key);
                    lv.insert(at, sst.clone());
                }
            }
            Edit::RemoveSst { level, seg } => {
                if let Some(lv) = self.levels.get_mut(level.index()) {
                    if let Some(i) = lv.iter().position(|s| s.seg == *seg) {
                        lv.remove(i);
                        freed.push(*seg);
                    }
                }
            }
            Edit::LogAdd { log, seg, salt } => {
                self.log_mut(*log).push(LogSeg { seg: *seg, salt: *salt, sealed: u64::MAX, fill: None });
            }
            Edit::LogRemove { log, seg } => {
                let v = self.log_mut(*log);
                if let Some(i) = v.iter().position(|s| s.seg == *seg) {
                    v.remove(i);
                    freed.push(*seg);
                    self.medium_ptrs.remove(seg);
                    self.large_garbage.remove(seg);
                }
            }
            Edit::LogSeal { log, seg, max_lsn } => {
                if let Some(s) = self.log_mut(*log).iter_mut().find(|s| s.seg == *seg) {
                    s.sealed = s.sealed.min(*max_lsn);
                }
            }
            Edit::LogFill { log, seg, bytes } => {
                if let Some(s) = self.log_mut(*log).iter_mut().find(|s| s.seg == *seg) {
                    s.fill = Some(*bytes);
                }
            }
            Edit::MediumPtrs { seg, salt, delta } => {
                if self.log_salt(LogKind::Medium, *seg) != Some(*salt) {
                    return;
                }
                let c = self.medium_ptrs.entry(*seg).or_insert(0);
                *c = (*c as i64 + delta).max(0) as u64;
                if *c == 0 {
                    self.apply(&Edit::LogRemove { log: LogKind::Medium, seg: *seg }, freed);
                }
            }
            Edit::LargeGarbage { seg, salt, bytes } => {
                if self.log_salt(LogKind::Large, *seg) == Some(*salt) {
                    *self.large_garbage.entry(*seg).or_insert(0) += bytes;
                }
            }
            Edit::L1Lsn(l) => self.l1_lsn = self.l1_lsn.max(*l),
            Edit::ClearL1Lsn => self.l1_lsn = 0,
            Edit::Map { kind: MapKind::Log, primary, salt, local } => {
                self.log_map.insert((*primary, *salt), *local);
            }
            Edit::Map { kind: MapKind::Index, primary, local, .. } => {
                self.index_map.insert(*primary, *local);
            }
            Edit::Unmap { kind: MapKind::Log, primary, salt } => {
                self.log_map.remove(&(*primary, *salt));
            }
            Edit::Unmap { kind: MapKind::Index, primary, .. } => {
                self.index_map.remove(primary);
            }
            Edit::AddRangeDel { start, end, lsn } => {
                rangedel::add(&mut self.range_dels, RangeDel { start: start.clone(), end: end.clone(), lsn: *lsn })
            }
            Edit::DropRangeDel { lsn } => self.range_dels.retain(|d| d.lsn != *lsn),
            // The catalog's, not one region's: `Catalog::apply`.
            Edit::Split { .. } | Edit::SplitSharingL0 { .. } | Edit::Merge { .. } | Edit::DropRegion => {}
        }
    }

    /// Edits that rebuild this region from nothing (a checkpoint).
    pub(crate) fn snapshot(&self) -> Vec<Edit> {
        let mut v = vec![
            Edit::CreateRegion { start: self.start.clone(), end: self.end.clone(), backup: self.backup },
            Edit::L1Lsn(self.l1_lsn),
        ];
        for (i, log) in self.logs.iter().enumerate() {
            let kind = LogKind::from_u8(i as u8).unwrap_or(LogKind::L0);
            for s in log {
                v.push(Edit::LogAdd { log: kind, seg: s.seg, salt: s.salt });
                if s.sealed != u64::MAX {
                    v.push(Edit::LogSeal { log: kind, seg: s.seg, max_lsn: s.sealed });
                }
                if let Some(bytes) = s.fill {
                    v.push(Edit::LogFill { log: kind, seg: s.seg, bytes });
                }
            }
        }
        for s in self.log(LogKind::Medium) {
            if let Some(&c) = self.medium_ptrs.get(&s.seg) {
                v.push(Edit::MediumPtrs { seg: s.seg, salt: s.salt, delta: c as i64 });
            }
        }
        for s in self.log(LogKind::Large) {
            if let Some(&g) = self.large_garbage.get(&s.seg) {
                v.push(Edit::LargeGarbage { seg: s.seg, salt: s.salt, bytes: g });
            }
        }
        for (i, lv) in self.levels.iter().enumerate() {
            let Some(level) = Level::at_index(i) else { continue };
            for s in lv {
                v.push(Edit::AddSst { level, sst: s.clone() });
            }
        }
        for (&(primary, salt), &local) in &self.log_map {
            v.push(Edit::Map { kind: MapKind::Log, primary, salt, local });
        }
        for (&primary, &local) in &self.index_map {
            v.push(Edit::Map { kind: MapKind::Index, primary, salt: 0, local });
        }
        for d in &self.range_dels {
            v.push(Edit::AddRangeDel { start: d.start.clone(), end: d.end.clone(), lsn: d.lsn });
        }
        v
    }

    /// Whether this region names `seg` (see [`RegionMeta::segments`]).
    fn names(&self, seg: u32) -> bool {
        self.levels.iter().flatten().any(|s| s.seg == seg)
            || self.logs.iter().flatten().any(|s| s.seg == seg)
            || self.log_map.values().any(|&l| l == seg)
            || self.index_map.values().any(|&l| l == seg)
    }

    /// Every segment this region names.
    pub(crate) fn segments(&self, out: &mut BTreeSet<u32>) {
        out.extend(self.levels.iter().flatten().map(|s| s.seg));
        out.extend(self.logs.iter().flatten().map(|s| s.seg));
        // A log-map target can be reserved before its segment joins a log (an SST pointing
        // into a log segment the backup has not received whole yet).
        out.extend(self.log_map.values());
        // Normally the SSTs of the levels; between an incremental catch-up's start and its
        // last edits, also the SSTs kept for it.
        out.extend(self.index_map.values());
    }
}

/// All regions.
#[derive(Clone, Debug, Default)]
pub(crate) struct Catalog {
    /// By region id.
    pub regions: std::collections::BTreeMap<u32, RegionMeta>,
    /// Segments more than one region may name (since a split): one of them dropping such a
    /// segment frees it only when no other names it.
    shared: BTreeSet<u32>,
}

impl Catalog {
    /// Checks every SST description (see [`SstInfo::check`]); the error names the segment.
    pub(crate) fn check(&self, seg_bytes: u64, node_bytes: usize) -> Result<(), (u32, &'static str)> {
        let ssts = self.regions.values().flat_map(|m| m.levels.iter().flatten());
        ssts.into_iter().try_for_each(|s| s.check(seg_bytes, node_bytes).map_err(|e| (s.seg, e)))
    }

    pub(crate) fn apply(&mut self, region: u32, edits: &[Edit]) -> Vec<u32> {
        self.apply_sharing(region, edits, &mut Vec::new())
    }

    /// [`Catalog::apply`], adding to `kept` the segments `region` dropped that another region
    /// still names (not freed: see [`crate::device::alloc::Allocator::hold`]).
    pub(crate) fn apply_sharing(&mut self, region: u32, edits: &[Edit], kept: &mut Vec<u32>) -> Vec<u32> {
        let mut freed = Vec::new();
        for e in edits {
            match e {
                Edit::Split { parent, at, lsn, past } => self.split(*parent, region, at, *lsn, past, false),
                Edit::SplitSharingL0 { parent, at, lsn, past } => self.split(*parent, region, at, *lsn, past, true),
                Edit::Merge { right } => self.merge(region, *right),
                Edit::DropRegion => {
                    if let Some(gone) = self.regions.remove(&region) {
                        let mut segs = BTreeSet::new();
                        gone.segments(&mut segs);
                        freed.extend(segs);
                    }
                    self.keep_shared(region, &mut freed, kept);
                    return freed;
                }
                _ => self.regions.entry(region).or_default().apply(e, &mut freed),
            }
        }
        self.keep_shared(region, &mut freed, kept);
        let meta = self.regions.entry(region).or_default();
        // An SST moved to another level keeps its segment, and so does a segment the same
        // commit maps again (a backup's incremental catch-up empties its levels and logs but
        // keeps what its primary still holds).
        freed.retain(|s| {
            !edits.iter().any(|e| match e {
                Edit::AddSst { sst, .. } => sst.seg == *s,
                Edit::Map { local, .. } => local == s,
                _ => false,
            })
        });
        if !freed.is_empty() && (!meta.log_map.is_empty() || !meta.index_map.is_empty()) {
            meta.log_map.retain(|_, l| !freed.contains(l));
            meta.index_map.retain(|_, l| !freed.contains(l));
        }
        freed
    }

    /// Applies [`Edit::Split`] (or with `shared_l0` [`Edit::SplitSharingL0`]): `child` is made
    /// from `parent`'s keys from `at` on.
    fn split(&mut self, parent: u32, child: u32, at: &[u8], lsn: u64, past: &[u8], shared_l0: bool) {
        let Some(p) = self.regions.get_mut(&parent) else { return };
        if shared_l0 {
            // No side appends to it again (a reopened side would continue in it otherwise).
            if let Some(last) = p.log_mut(LogKind::L0).last_mut().filter(|l| l.sealed == u64::MAX) {
                last.sealed = lsn;
            }
        }
        let mut c = p.clone();
        let old_end = p.end.replace(at.to_vec());
        let old_start = std::mem::replace(&mut c.start, at.to_vec());
        let end = old_end.unwrap_or_else(|| past.to_vec());
        rangedel::add(&mut p.range_dels, RangeDel { start: at.to_vec(), end, lsn });
        rangedel::add(&mut c.range_dels, RangeDel { start: old_start, end: at.to_vec(), lsn });
        if !shared_l0 {
            p.l1_lsn = p.l1_lsn.max(lsn);
            c.l1_lsn = c.l1_lsn.max(lsn);
            // L0 was written out: the parent's L0 log holds nothing the levels do not.
            c.log_mut(LogKind::L0).clear();
        }
        let mut segs = BTreeSet::new();
        c.segments(&mut segs);
        self.shared.extend(segs);
        self.regions.insert(child, c);
    }

    /// Applies [`Edit::Merge`]: `left` takes in `right`.
    fn merge(&mut self, left: u32, right: u32) {
        let Some(r) = self.regions.remove(&right) else { return };
        let l = self.regions.entry(left).or_default();
        l.end = r.end;
        l.l1_lsn = l.l1_lsn.max(r.l1_lsn);
        while l.levels.len() < r.levels.len() {
            l.levels.push(Vec::new());
        }
        for (lv, theirs) in l.levels.iter_mut().zip(r.levels) {
            // Disjoint key ranges, the right ones above: the level stays sorted.
            lv.extend(theirs);
        }
        for (mine, theirs) in l.logs.iter_mut().zip(r.logs) {
            for s in theirs {
                // A segment both name (shared since a split) is listed once.
                if !mine.iter().any(|m| m.seg == s.seg) {
                    mine.push(s);
                }
            }
        }
        for (seg, n) in r.medium_ptrs {
            *l.medium_ptrs.entry(seg).or_insert(0) += n;
        }
        for (seg, g) in r.large_garbage {
            *l.large_garbage.entry(seg).or_insert(0) += g;
        }
        l.log_map.extend(r.log_map);
        l.index_map.extend(r.index_map);
    }

    /// Moves from `freed` (dropped by `region`) to `kept` the shared segments another region
    /// names.
    fn keep_shared(&mut self, region: u32, freed: &mut Vec<u32>, kept: &mut Vec<u32>) {
        if freed.is_empty() || self.shared.is_empty() {
            return;
        }
        let (regions, shared) = (&self.regions, &mut self.shared);
        freed.retain(|&s| {
            if !shared.contains(&s) {
                return true;
            }
            let named = regions.iter().any(|(id, m)| *id != region && m.names(s));
            if named {
                kept.push(s);
            } else {
                shared.remove(&s);
            }
            !named
        });
    }

    /// Finds the segments more than one region names (after a replay: a checkpoint lists each
    /// region's segments without saying which are shared).
    pub(crate) fn rebuild_shared(&mut self) {
        let mut seen = BTreeSet::new();
        self.shared.clear();
        for m in self.regions.values() {
            let mut segs = BTreeSet::new();
            m.segments(&mut segs);
            for s in segs {
                if !seen.insert(s) {
                    self.shared.insert(s);
                }
            }
        }
    }
}

pub(crate) fn encode_edits(region: u32, edits: &[Edit]) -> Vec<u8> {
    let mut e = Writer::new();
    e.u32(region).u32(edits.len() as u32);
    for ed in edits {
        ed.encode(&mut e);
    }
    e.into_inner()
}

pub(crate) fn decode_edits(buf: &[u8]) -> Result<(u32, Vec<Edit>), Short> {
    let mut d = Reader::new(buf);
    let region = d.u32()?;
    let n = d.u32()? as usize;
    let mut v = Vec::with_capacity(n.min(buf.len()));
    for _ in 0..n {
        v.push(Edit::decode(&mut d)?);
    }
    if !d.is_empty() {
        return Err(Short);
    }
    Ok((region, v))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ranged_sst_without_its_range_lsn_is_refused() {
        let add = Edit::AddSst { level: Level::L1, sst: SstInfo { range_lsn: 7, ..sample_sst() } };
        let mut b = encode_edits(3, &[add]);
        // The range LSN is the list's last 8 bytes.
        let n = b.len();
        b[n - 8..].fill(0);
        assert!(decode_edits(&b).is_err(), "ADD_SST_RANGED with range LSN 0 has another encoding");
    }

    #[test]
    fn edits_roundtrip() {
        let sst = sample_sst();
        let edits = vec![
            Edit::CreateRegion { start: vec![], end: Some(b"z".to_vec()), backup: true },
            Edit::AddSst { level: Level::new(2).unwrap(), sst: sst.clone() },
            Edit::AddSst { level: Level::L1, sst: SstInfo { range_lsn: 7, ..sst } },
            Edit::RemoveSst { level: Level::L1, seg: 4 },
            Edit::LogAdd { log: LogKind::Large, seg: 5, salt: 77 },
            Edit::LogRemove { log: LogKind::L0, seg: 6 },
            Edit::LogSeal { log: LogKind::L0, seg: 6, max_lsn: 10 },
            Edit::LogFill { log: LogKind::Large, seg: 5, bytes: 65_000 },
            Edit::MediumPtrs { seg: 3, salt: 1, delta: -4 },
            Edit::LargeGarbage { seg: 5, salt: 77, bytes: 99 },
            Edit::L1Lsn(12),
            Edit::ClearL1Lsn,
            Edit::Map { kind: MapKind::Log, primary: 5, salt: 77, local: 40 },
            Edit::Map { kind: MapKind::Index, primary: 9, salt: 0, local: 41 },
            Edit::Unmap { kind: MapKind::Log, primary: 5, salt: 77 },
            Edit::AddRangeDel { start: b"a".to_vec(), end: b"b".to_vec(), lsn: 40 },
            Edit::DropRangeDel { lsn: 40 },
        ];
        let b = encode_edits(3, &edits);
        let (r, back) = decode_edits(&b).expect("decodes");
        assert_eq!((r, back), (3, edits));
        for cut in 0..b.len() {
            assert!(decode_edits(&b[..cut]).is_err());
        }
    }

    fn sample_sst() -> SstInfo {
        SstInfo {
            seg: 9,
            used_bytes: 16384,
            leaf_count: 2,
            root_off: 8192,
            height: 1,
            bloom_off: 12288,
            bloom_len: 100,
            entries: 3,
            stored_bytes: 30,
            full_bytes: 300,
            medium_ptrs: 1,
            large_ptrs: 1,
            min_lsn: 1,
            max_lsn: 3,
            first_key: b"a".to_vec(),
            last_key: b"c".to_vec(),
            range_lsn: 0,
        }
    }

    #[test]
    fn levels_outside_1_to_max_do_not_decode_or_exist() {
        for n in [0, MAX_LEVEL + 1, u8::MAX] {
            assert_eq!(Level::new(usize::from(n)), None);
            // Bytes naming such a level (as a disk or a peer could send) do not decode.
            let level = Level(n);
            for e in [Edit::AddSst { level, sst: sample_sst() }, Edit::RemoveSst { level, seg: 9 }] {
                assert!(decode_edits(&encode_edits(1, std::slice::from_ref(&e))).is_err(), "{e:?}");
            }
        }
        let deepest = Level::new(usize::from(MAX_LEVEL)).unwrap();
        assert!(decode_edits(&encode_edits(1, &[Edit::AddSst { level: deepest, sst: sample_sst() }])).is_ok());
        assert_eq!((Level::L1.index(), deepest.index()), (0, usize::from(MAX_LEVEL) - 1));
        assert_eq!(Level::at_index(usize::from(MAX_LEVEL)), None);
    }

    #[test]
    fn sst_descriptions_are_checked_against_the_segment() {
        let seg_bytes = 1 << 21;
        assert_eq!(sample_sst().check(seg_bytes, 4096), Ok(()));
        let bad: [fn(&mut SstInfo); 9] = [
            |s| s.used_bytes = u32::MAX,
            |s| s.leaf_count = u32::MAX,
            |s| s.root_off = 8193,
            |s| s.root_off = 16384,
            |s| s.height = 0,
            |s| s.bloom_len = u32::MAX,
            |s| s.bloom_off = u32::MAX,
            |s| s.large_ptrs = u32::MAX,
            |s| s.first_key = b"d".to_vec(),
        ];
        for (i, f) in bad.iter().enumerate() {
            let mut s = sample_sst();
            f(&mut s);
            assert!(s.check(seg_bytes, 4096).is_err(), "case {i}");
        }
        let mut c = Catalog::default();
        let mut s = sample_sst();
        s.bloom_len = u32::MAX;
        c.apply(1, &[Edit::AddSst { level: Level::L1, sst: s }]);
        assert_eq!(c.check(seg_bytes, 4096).map_err(|e| e.0), Err(9));
    }

    #[test]
    fn medium_segment_freed_at_zero_pointers() {
        let mut c = Catalog::default();
        c.apply(
            1,
            &[Edit::LogAdd { log: LogKind::Medium, seg: 7, salt: 3 }, Edit::MediumPtrs { seg: 7, salt: 3, delta: 2 }],
        );
        assert!(c.apply(1, &[Edit::MediumPtrs { seg: 7, salt: 3, delta: -1 }]).is_empty());
        // A stale salt (another incarnation of the segment) changes nothing.
        assert!(c.apply(1, &[Edit::MediumPtrs { seg: 7, salt: 4, delta: -1 }]).is_empty());
        assert_eq!(c.apply(1, &[Edit::MediumPtrs { seg: 7, salt: 3, delta: -1 }]), vec![7]);
        assert!(c.regions[&1].logs[1].is_empty());
    }
}
