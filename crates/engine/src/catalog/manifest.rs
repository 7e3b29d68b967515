//! Superblocks and the redo log: how the catalog survives a crash.
//!
//! Two superblock copies at device offsets 0 and 4096 (the newer valid one wins) name the
//! first segment of the redo chain. The chain starts with a checkpoint (the catalog as
//! edits) followed by one record per committed change. Opening replays the chain, then
//! writes a fresh checkpoint into a new chain and points a superblock at it.

#![expect(
    clippy::indexing_slicing,
    reason = "superblock and redo records are read at fixed offsets of buffers whose length and crc32c are checked first"
)]

use crate::catalog::{decode_edits, encode_edits, Catalog, Edit};
use crate::device::aligned::{align_down, align_up, AlignedBuf, ALIGN};
use crate::device::alloc::{Allocator, Purpose};
use crate::device::{Device, IoKind};
use crate::error::{Error, Result};
use halyard_codec::{get_u32, get_u64, put_u32, put_u64};
use parking_lot::Mutex;
use std::collections::BTreeSet;
use std::sync::Arc;

const SB_MAGIC: &[u8; 8] = b"HALYARD1";
/// The format this build writes. Version 2 added the `LogFill` edit (tag 13); version 3 pairs
/// that expire (log record kind 3, leaf cell flag 0x10); version 4 range deletes (log record
/// kind 4, edits `AddRangeDel` and `DropRangeDel`, tags 14 and 15); version 5 region splits
/// (edit `Split`, tag 17; segments several regions name); version 6 `DropRegion` (tag 19);
/// version 7 splits that share L0 (edit `SplitSharingL0`, tag 20; log record kind 5, a mark).
/// A store of an older version opens
/// unchanged and is written as the current version from its first checkpoint on, so that a
/// build that cannot read the new records refuses it.
const FORMAT_VERSION: u32 = 7;
/// The oldest format this build reads.
const OLDEST_FORMAT_VERSION: u32 = 1;
const SB_LEN: usize = 44;

const REDO_MAGIC: u32 = 0x4F44_4552;
const REDO_HDR: usize = 20;
const T_FULL: u8 = 1;
const T_FIRST: u8 = 2;
const T_MIDDLE: u8 = 3;
const T_LAST: u8 = 4;
const T_NEXT: u8 = 5;
/// Room always kept at the end of a redo segment for a next-segment record.
const NEXT_ROOM: usize = REDO_HDR + 8;
/// A checkpoint is written when the chain holds this many segments.
const CHECKPOINT_SEGMENTS: usize = 4;

/// The fixed geometry and the redo chain's start, as a superblock records them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Superblock {
    pub generation: u64,
    pub seg_bits: u32,
    pub node_bytes: u32,
    /// Files the segments are spread over (see `Device`); stores made before the field hold
    /// 0 there and have one.
    pub data_files: u32,
    pub redo_seg: u32,
    pub redo_salt: u32,
}

impl Superblock {
    fn encode(&self) -> AlignedBuf {
        let mut b = AlignedBuf::new(ALIGN);
        b[..8].copy_from_slice(SB_MAGIC);
        put_u32(&mut b, 8, FORMAT_VERSION);
        put_u32(&mut b, 12, self.seg_bits);
        put_u32(&mut b, 16, self.node_bytes);
        put_u32(&mut b, 20, self.data_files);
        put_u64(&mut b, 24, self.generation);
        put_u32(&mut b, 32, self.redo_seg);
        put_u32(&mut b, 36, self.redo_salt);
        let crc = crc32c::crc32c(&b[..40]);
        put_u32(&mut b, 40, crc);
        b
    }

    fn decode(b: &[u8]) -> Option<Result<Superblock>> {
        if b.get(..8) != Some(&SB_MAGIC[..]) || get_u32(b, 40)? != crc32c::crc32c(b.get(..40)?) {
            return None;
        }
        let version = get_u32(b, 8)?;
        if !(OLDEST_FORMAT_VERSION..=FORMAT_VERSION).contains(&version) {
            return Some(Err(Error::Incompatible(format!(
                "format version {version}, this build reads {OLDEST_FORMAT_VERSION} to {FORMAT_VERSION}"
            ))));
        }
        Some(Ok(Superblock {
            seg_bits: get_u32(b, 12)?,
            node_bytes: get_u32(b, 16)?,
            data_files: get_u32(b, 20)?.max(1),
            generation: get_u64(b, 24)?,
            redo_seg: get_u32(b, 32)?,
            redo_salt: get_u32(b, 36)?,
        }))
    }

    /// Reads both copies; the valid one with the higher generation wins.
    pub(crate) fn read(dev: &Device) -> Result<Option<Superblock>> {
        let mut b = AlignedBuf::new(2 * ALIGN);
        dev.read_into(0, &mut b, IoKind::Catalog)?;
        let a = Superblock::decode(&b[..SB_LEN]).transpose()?;
        let c = Superblock::decode(&b[ALIGN..ALIGN + SB_LEN]).transpose()?;
        Ok(match (a, c) {
            (Some(x), Some(y)) => Some(if x.generation >= y.generation { x } else { y }),
            (x, y) => x.or(y),
        })
    }

    fn write(&self, dev: &Device) -> Result<()> {
        let slot = (self.generation % 2) * ALIGN as u64;
        dev.write(slot, &self.encode(), IoKind::Catalog)?;
        dev.sync()
    }
}

/// Appends records to the redo chain.
struct RedoWriter {
    seg: u32,
    salt: u32,
    /// Salt of the chain's first segment, which the superblock names.
    first_salt: u32,
    buf: AlignedBuf,
    pos: usize,
    written: usize,
    chain: Vec<u32>,
}

impl RedoWriter {
    fn start(dev: &Device, alloc: &Allocator) -> Result<RedoWriter> {
        let seg = alloc.alloc(Purpose::Catalog)?;
        let salt = rand::random();
        Ok(RedoWriter {
            seg,
            salt,
            first_salt: salt,
            buf: AlignedBuf::new(dev.seg_bytes() as usize),
            pos: 0,
            written: 0,
            chain: vec![seg],
        })
    }

    fn put(&mut self, ty: u8, payload: &[u8]) {
        let at = self.pos;
        let b = &mut self.buf[at..at + REDO_HDR + payload.len()];
        put_u32(b, 0, REDO_MAGIC);
        put_u32(b, 4, self.salt);
        put_u32(b, 8, payload.len() as u32);
        b[12] = ty;
        b[13..16].fill(0);
        b[REDO_HDR..].copy_from_slice(payload);
        let mut crc = crc32c::crc32c(&b[4..16]);
        crc = crc32c::crc32c_append(crc, payload);
        put_u32(b, 16, crc);
        self.pos += REDO_HDR + payload.len();
    }

    fn room(&self) -> usize {
        self.buf.len().saturating_sub(self.pos + NEXT_ROOM + REDO_HDR)
    }

    /// Appends one logical record and writes it to the device without waiting for it to be
    /// durable: the next fdatasync of the data file makes it so. A crash before then loses it
    /// (and every record after it: a reader stops at the first torn record).
    fn write(&mut self, dev: &Device, alloc: &Allocator, payload: &[u8]) -> Result<()> {
        let mut rest = payload;
        let mut first = true;
        loop {
            if self.room() == 0 || (first && self.room() < rest.len().min(4096)) {
                self.next_segment(dev, alloc)?;
            }
            let n = rest.len().min(self.room());
            let last = n == rest.len();
            let ty = match (first, last) {
                (true, true) => T_FULL,
                (true, false) => T_FIRST,
                (false, false) => T_MIDDLE,
                (false, true) => T_LAST,
            };
            self.put(ty, &rest[..n]);
            rest = &rest[n..];
            first = false;
            if last {
                break;
            }
        }
        self.flush(dev)
    }

    fn flush(&mut self, dev: &Device) -> Result<()> {
        let from = align_down(self.written, ALIGN);
        let to = align_up(self.pos, ALIGN);
        dev.write(dev.seg_base(self.seg) + from as u64, &self.buf[from..to], IoKind::Catalog)?;
        self.written = self.pos;
        Ok(())
    }

    fn next_segment(&mut self, dev: &Device, alloc: &Allocator) -> Result<()> {
        let seg = alloc.alloc(Purpose::Catalog)?;
        let salt: u32 = rand::random();
        let mut p = [0u8; 8];
        put_u32(&mut p, 0, seg);
        put_u32(&mut p, 4, salt);
        self.put(T_NEXT, &p);
        self.flush(dev)?;
        self.buf.fill(0);
        self.seg = seg;
        self.salt = salt;
        self.pos = 0;
        self.written = 0;
        self.chain.push(seg);
        Ok(())
    }
}

/// Reads a redo chain: the logical records, and the chain's segments.
fn read_chain(dev: &Device, mut seg: u32, mut salt: u32) -> Result<(Vec<Vec<u8>>, Vec<u32>)> {
    let mut records = Vec::new();
    let mut chain = vec![seg];
    let mut partial: Option<Vec<u8>> = None;
    let mut buf = AlignedBuf::new(dev.seg_bytes() as usize);
    'segments: loop {
        dev.read_into(dev.seg_base(seg), &mut buf, IoKind::Catalog)?;
        let mut pos = 0;
        loop {
            let b = &buf[pos..];
            let ok = get_u32(b, 0) == Some(REDO_MAGIC) && get_u32(b, 4) == Some(salt);
            let len = get_u32(b, 8).unwrap_or(0) as usize;
            if !ok || REDO_HDR + len > b.len() {
                break 'segments;
            }
            let payload = &b[REDO_HDR..REDO_HDR + len];
            let crc = crc32c::crc32c_append(crc32c::crc32c(&b[4..16]), payload);
            if get_u32(b, 16) != Some(crc) {
                // A torn tail: the record was never committed.
                break 'segments;
            }
            match b[12] {
                T_FULL => records.push(payload.to_vec()),
                T_FIRST => partial = Some(payload.to_vec()),
                T_MIDDLE | T_LAST => {
                    let Some(p) = partial.as_mut() else {
                        return Err(Error::corrupt(seg as u64, pos as u64, "redo fragment without a first part"));
                    };
                    p.extend_from_slice(payload);
                    if b[12] == T_LAST {
                        records.extend(partial.take());
                    }
                }
                T_NEXT => {
                    let (Some(s), Some(t)) = (get_u32(payload, 0), get_u32(payload, 4)) else {
                        break 'segments;
                    };
                    seg = s;
                    salt = t;
                    chain.push(seg);
                    continue 'segments;
                }
                other => {
                    return Err(Error::corrupt(seg as u64, pos as u64, format!("unknown redo record type {other}")))
                }
            }
            pos += REDO_HDR + len;
        }
    }
    Ok((records, chain))
}

struct Inner {
    catalog: Catalog,
    redo: RedoWriter,
    sb: Superblock,
    /// Segments the last checkpoint took; the chain is rewritten once it grows by
    /// CHECKPOINT_SEGMENTS beyond them.
    checkpoint_segments: usize,
}

/// The durable catalog: commit edits, read the current catalog, checkpoint.
pub(crate) struct Manifest {
    dev: Arc<Device>,
    alloc: Arc<Allocator>,
    inner: Mutex<Inner>,
}

/// What opening found on the device.
pub(crate) struct Loaded {
    pub sb: Superblock,
    pub catalog: Catalog,
    pub chain: Vec<u32>,
}

/// First record of every checkpoint: "CKPT" and the generation of the superblock that names
/// the chain. A chain without it (a superblock copy that outlived its chain) is refused.
fn checkpoint_marker(generation: u64) -> Vec<u8> {
    let mut m = b"CKPT".to_vec();
    m.extend_from_slice(&generation.to_le_bytes());
    m
}

/// Reads the superblock and replays the redo chain. `None` for an empty (new) data file.
pub(crate) fn load(dev: &Device) -> Result<Option<Loaded>> {
    let Some(sb) = Superblock::read(dev)? else {
        // An empty file is a new store; anything else without a valid superblock is never
        // formatted over.
        if dev.len()? == 0 {
            return Ok(None);
        }
        return Err(Error::corrupt(
            0,
            0,
            "no valid superblock copy: the data file is damaged or not a Halyard store (it is left untouched)",
        ));
    };
    if sb.seg_bits != dev.seg_bits() {
        return Err(Error::Incompatible(format!(
            "store made with {}-byte segments; open it with Options::segment_bytes = {}",
            1u64 << sb.seg_bits,
            1u64 << sb.seg_bits
        )));
    }
    if sb.data_files != dev.file_count() {
        return Err(Error::corrupt(
            0,
            0,
            format!(
                "the store's segments are spread over {} data files but {} were found next to the first: restore the missing ones (nothing was changed)",
                sb.data_files,
                dev.file_count()
            ),
        ));
    }
    let (records, chain) = read_chain(dev, sb.redo_seg, sb.redo_salt)?;
    if records.first() != Some(&checkpoint_marker(sb.generation)) {
        return Err(Error::corrupt(
            sb.redo_seg as u64,
            0,
            format!(
                "the catalog chain of superblock generation {} is not intact (the newer superblock copy is damaged \
                 and the older one's chain was reused); the store cannot be opened safely",
                sb.generation
            ),
        ));
    }
    let mut catalog = Catalog::default();
    for r in &records[1..] {
        let (region, edits) =
            decode_edits(r).map_err(|_| Error::corrupt(sb.redo_seg as u64, 0, "undecodable redo record"))?;
        catalog.apply(region, &edits);
    }
    catalog.rebuild_shared();
    if let Err((seg, what)) = catalog.check(dev.seg_bytes(), sb.node_bytes as usize) {
        return Err(Error::corrupt(
            u64::from(seg),
            0,
            format!("the catalog's description of an SST is invalid: {what}"),
        ));
    }
    Ok(Some(Loaded { sb, catalog, chain }))
}

/// Segments a catalog names.
pub(crate) fn segments_in_use(catalog: &Catalog, chain: &[u32]) -> BTreeSet<u32> {
    let mut s: BTreeSet<u32> = chain.iter().copied().collect();
    s.insert(0);
    for r in catalog.regions.values() {
        r.segments(&mut s);
    }
    s
}

impl Manifest {
    /// Writes a checkpoint of `catalog` into a new chain, points a superblock at it and
    /// releases `old_chain`. Used at open (also for a new store) and when the chain grows.
    pub(crate) fn create(
        dev: Arc<Device>,
        alloc: Arc<Allocator>,
        catalog: Catalog,
        prev: Option<Superblock>,
        node_bytes: u32,
        old_chain: &[u32],
    ) -> Result<Manifest> {
        let sb = prev.unwrap_or(Superblock {
            generation: 0,
            seg_bits: dev.seg_bits(),
            node_bytes,
            data_files: dev.file_count(),
            redo_seg: 0,
            redo_salt: 0,
        });
        let redo = RedoWriter::start(&dev, &alloc)?;
        let m = Manifest { dev, alloc, inner: Mutex::new(Inner { catalog, redo, sb, checkpoint_segments: 0 }) };
        {
            let mut g = m.inner.lock();
            m.checkpoint_locked(&mut g, old_chain.to_vec())?;
        }
        Ok(m)
    }

    /// Writes a checkpoint into `g.redo` (a fresh chain), points a superblock at it, and
    /// releases `old_chain`.
    fn checkpoint_locked(&self, g: &mut Inner, old_chain: Vec<u32>) -> Result<()> {
        g.redo.write(&self.dev, &self.alloc, &checkpoint_marker(g.sb.generation + 1))?;
        let snap: Vec<(u32, Vec<Edit>)> = g.catalog.regions.iter().map(|(id, r)| (*id, r.snapshot())).collect();
        for (id, edits) in snap {
            for part in edits.chunks(256) {
                g.redo.write(&self.dev, &self.alloc, &encode_edits(id, part))?;
            }
        }
        // One sync for the whole checkpoint, before the superblock names it.
        self.dev.sync()?;
        let sb = Superblock {
            generation: g.sb.generation + 1,
            redo_seg: g.redo.chain[0],
            redo_salt: g.redo.first_salt,
            ..g.sb
        };
        g.checkpoint_segments = g.redo.chain.len();
        // Reading the new chain from its start must see exactly the checkpoint.
        sb.write(&self.dev)?;
        g.sb = sb;
        for s in old_chain {
            self.alloc.release(s);
        }
        Ok(())
    }

    /// Makes `edits` durable, applies them, and returns the segments they freed, and those
    /// they dropped that another region still names (held for this one: see
    /// [`Allocator::hold`]); the caller releases them when no reader of its views remains.
    pub(crate) fn commit(&self, region: u32, edits: &[Edit]) -> Result<Vec<u32>> {
        let freed = {
            let mut g = self.inner.lock();
            g.redo.write(&self.dev, &self.alloc, &encode_edits(region, edits))?;
            let mut kept = Vec::new();
            let mut freed = g.catalog.apply_sharing(region, edits, &mut kept);
            for &s in &kept {
                self.alloc.hold(s);
            }
            freed.extend(kept);
            self.maybe_checkpoint(&mut g);
            freed
        };
        // The wait for durability happens outside the lock, so that a writer committing a log
        // segment (`commit_unsynced`) never queues behind a compaction's fdatasync. Syncing
        // covers every record written before it, this one included; a checkpoint that ran
        // meanwhile already holds these edits in its own durable chain.
        self.dev.sync()?;
        Ok(freed)
    }

    /// Applies `edits` and writes them to the redo log, durable with the next fdatasync of the
    /// data file. For edits that only matter together with data that is itself durable only
    /// after such a sync: a new log segment (`LogAdd`) whose records are acknowledged as durable
    /// only after the writer's or the group commit's fdatasync, which then covers this record
    /// as well. Keeps an fdatasync off the write lock each time a log moves to a new segment.
    pub(crate) fn commit_unsynced(&self, region: u32, edits: &[Edit]) -> Result<()> {
        let mut g = self.inner.lock();
        g.redo.write(&self.dev, &self.alloc, &encode_edits(region, edits))?;
        g.catalog.apply(region, edits);
        Ok(())
    }

    fn maybe_checkpoint(&self, g: &mut Inner) {
        if g.redo.chain.len() >= g.checkpoint_segments + CHECKPOINT_SEGMENTS {
            // A failed checkpoint is retried at the next commit; the current chain stays valid
            // meanwhile and holds the edits (made durable by the caller's sync).
            let old = g.redo.chain.clone();
            match RedoWriter::start(&self.dev, &self.alloc) {
                Ok(fresh) => {
                    let current = std::mem::replace(&mut g.redo, fresh);
                    if let Err(e) = self.checkpoint_locked(g, old) {
                        tracing::error!("catalog checkpoint failed, keeping the current chain: {e}");
                        for s in std::mem::replace(&mut g.redo, current).chain {
                            self.alloc.release(s);
                        }
                    }
                }
                Err(e) => tracing::warn!("catalog checkpoint postponed: {e}"),
            }
        }
    }

    /// A copy of one region's catalog.
    pub(crate) fn region(&self, id: u32) -> Option<crate::catalog::RegionMeta> {
        self.inner.lock().catalog.regions.get(&id).cloned()
    }

    /// Runs `f` on the catalog under the manifest lock.
    pub(crate) fn with<T>(&self, f: impl FnOnce(&Catalog) -> T) -> T {
        f(&self.inner.lock().catalog)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::SstInfo;

    #[test]
    fn a_superblock_from_before_data_files_has_one_file() {
        let sb = Superblock { generation: 3, seg_bits: 16, node_bytes: 2048, data_files: 8, redo_seg: 5, redo_salt: 9 };
        let mut b = sb.encode();
        assert_eq!(Superblock::decode(&b).unwrap().unwrap().data_files, 8);
        // Stores made before the field wrote 0 in its place.
        put_u32(&mut b, 20, 0);
        let crc = crc32c::crc32c(&b[..40]);
        put_u32(&mut b, 40, crc);
        let old = Superblock::decode(&b).unwrap().unwrap();
        assert_eq!((old.data_files, old.generation, old.redo_seg), (1, 3, 5));
    }

    fn sst(seg: u32) -> SstInfo {
        SstInfo {
            seg,
            used_bytes: 4096,
            leaf_count: 1,
            root_off: 0,
            height: 0,
            bloom_off: 2048,
            bloom_len: 20,
            entries: 1,
            stored_bytes: 10,
            full_bytes: 10,
            medium_ptrs: 0,
            large_ptrs: 0,
            min_lsn: 1,
            max_lsn: 1,
            first_key: format!("first-{seg:08}-{}", "k".repeat(40)).into_bytes(),
            last_key: format!("last-{seg:08}-{}", "k".repeat(40)).into_bytes(),
            range_lsn: u64::from(seg % 2),
        }
    }

    /// A checkpoint spanning several redo segments, then commits spanning more, reload exactly.
    #[test]
    fn multi_segment_checkpoint_and_chain_reload() {
        let dir = tempfile::tempdir().expect("tempdir");
        let dev = Arc::new(Device::open(&dir.path().join("d"), 1, 16, true, true).expect("device"));
        let alloc = Arc::new(Allocator::new(dev.clone(), None, &BTreeSet::from([0])).expect("alloc"));
        let mut cat = Catalog::default();
        cat.apply(7, &[Edit::CreateRegion { start: vec![], end: None, backup: false }]);
        // ~3000 SSTs of ~150 bytes each: about 7 segments of 64 KiB.
        let edits: Vec<Edit> = (10_000..13_000)
            .map(|s| Edit::AddSst { level: crate::catalog::Level::new(2).unwrap(), sst: sst(s) })
            .collect();
        cat.apply(7, &edits);
        let m = Manifest::create(dev.clone(), alloc.clone(), cat, None, 2048, &[]).expect("create");
        for s in 20_000..21_500u32 {
            m.commit(7, &[Edit::AddSst { level: crate::catalog::Level::new(3).unwrap(), sst: sst(s) }])
                .expect("commit");
        }
        let want = m.region(7).expect("region");
        drop(m);
        let loaded = load(&dev).expect("load").expect("formatted");
        let got = &loaded.catalog.regions[&7];
        assert_eq!(got.levels, want.levels);
        assert_eq!(got.levels[1].len(), 3000);
        assert_eq!(got.levels[2].len(), 1500);
        assert!(loaded.chain.len() > 1);
    }
}
