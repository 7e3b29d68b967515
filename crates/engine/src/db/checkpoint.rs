//! Copies of a live store: a checkpoint (an openable store) and an incremental backup (a
//! directory of segment files), both holding exactly each region's state at one LSN, taken
//! without stopping writes.
//!
//! A copy first *captures* every region: under its write lock, for as long as it takes to copy
//! the log tails' in-memory images, it notes the region's last LSN and its committed catalog
//! entry. The allocator is pinned meanwhile and until the copy ends, so no segment that entry
//! names is reused or given back while it is read. Then, with writes going on, it reads the
//! segments the entries name: SSTs up to their used bytes, sealed log segments up to their fill,
//! the current log tails as captured (their later appends are not part of the copy). The copy
//! opens like a store after a crash at that LSN: recovery replays its L0 log above L1.
//!
//! Backup directory (version 1):
//!
//! ```text
//! segments/<seg>-<id>.seg   one per copied segment; <id> is 16 hex digits of an XXH3 of what
//!                           identifies the segment's bytes (an SST's description, a sealed log
//!                           segment's salt and fill, a tail's contents), so a later backup
//!                           that finds the same name reuses the file: incremental by
//!                           construction
//! backup-<n>                one per backup, n = 1, 2, ... ; the newest is restored by default
//!
//! backup-<n>:  "HLYBKUP1" | u32 version (1) | u32 seg_bits | u32 node_bytes | u32 data_files
//!              | u32 regions, each: u32 id | u64 lsn | u32 len, edit list (encode_edits)
//!              | u32 segments, each: u32 seg | u32 len | u32 crc32c | u32 len, name (UTF-8)
//!              | u32 crc32c of everything before it
//! ```
//! Restore reads every segment file, checks its length and CRC-32C against the list (naming the
//! segment when one differs), writes it at its segment in a new store, and writes the catalog
//! there; the store then opens normally.

use crate::catalog::manifest::{segments_in_use, Manifest};
use crate::catalog::{decode_edits, encode_edits, Catalog, RegionMeta};
use crate::db::{Db, DATA_FILE};
use crate::device::aligned::{AlignedBuf, ALIGN};
use crate::device::alloc::Allocator;
use crate::device::file::FileStorage;
use crate::device::{Device, IoKind};
use crate::error::{Error, Result};
use halyard_codec::{Reader, Writer};
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

const MAGIC: &[u8; 8] = b"HLYBKUP1";
const VERSION: u32 = 1;

/// What a checkpoint, backup or restore did.
#[derive(Clone, Debug, Default)]
pub struct CopyReport {
    /// Each region and the LSN the copy holds it at.
    pub lsns: Vec<(u32, u64)>,
    /// Segments the copy holds.
    pub segments: u64,
    /// Bytes written: segments copied (a backup: not found in an earlier one).
    pub bytes_copied: u64,
    /// Bytes of segments an earlier backup already held (a backup only).
    pub bytes_reused: u64,
    /// The longest time a region's writers waited for the capture.
    pub longest_pause: Duration,
    /// The backup's number (a backup or restore only).
    pub backup: u32,
}

/// One region's state at the capture.
struct Captured {
    id: u32,
    lsn: u64,
    meta: RegionMeta,
    /// The log tails' contents at the capture, by segment.
    tails: HashMap<u32, Vec<u8>>,
}

/// A segment of the copy: its number, how to name it in a backup, and its bytes.
struct Piece {
    seg: u32,
    id: Vec<u8>,
    bytes: Vec<u8>,
}

impl Db {
    /// Writes an openable copy of the store into `dir` (which must not hold one), holding each
    /// region exactly as of one LSN (in the report), while writes go on.
    pub fn checkpoint(&self, dir: impl AsRef<Path>) -> Result<CopyReport> {
        let dir = dir.as_ref();
        if dir.join(DATA_FILE).exists() {
            return Err(Error::InvalidOptions(format!("{} already holds a store", dir.display())));
        }
        let sh = &self.inner.sh;
        let _pin = sh.alloc.pin();
        let (captured, pause) = self.capture_regions()?;
        let mut report = CopyReport { longest_pause: pause, ..CopyReport::default() };
        let catalog = catalog_of(&captured, &mut report);
        let target = StoreWriter::create(dir, sh.dev.file_count(), sh.dev.seg_bits())?;
        for c in &captured {
            for p in self.pieces(c)? {
                report.segments += 1;
                report.bytes_copied += p.bytes.len() as u64;
                target.put(p.seg, &p.bytes)?;
            }
        }
        target.finish(catalog, sh.opts.node_bytes as u32)?;
        Ok(report)
    }

    /// Adds a backup of the store to the directory `dir` (made if missing): the segments no
    /// earlier backup there holds, and the list of every segment and the catalog, each region
    /// exactly as of one LSN (in the report). Writes go on meanwhile.
    pub fn backup(&self, dir: impl AsRef<Path>) -> Result<CopyReport> {
        let dir = dir.as_ref();
        let segs = dir.join("segments");
        std::fs::create_dir_all(&segs).map_err(Error::io("creating the backup directory"))?;
        let sh = &self.inner.sh;
        let _pin = sh.alloc.pin();
        let (captured, pause) = self.capture_regions()?;
        let mut report = CopyReport { longest_pause: pause, backup: next_backup(dir)?, ..CopyReport::default() };
        let mut list = Vec::new();
        for c in &captured {
            for p in self.pieces(c)? {
                let name = format!("{:08}-{:016x}.seg", p.seg, xxhash_rust::xxh3::xxh3_64(&p.id));
                let path = segs.join(&name);
                report.segments += 1;
                if std::fs::metadata(&path).is_ok_and(|m| m.len() == p.bytes.len() as u64) {
                    report.bytes_reused += p.bytes.len() as u64;
                } else {
                    write_durably(&path, &p.bytes)?;
                    report.bytes_copied += p.bytes.len() as u64;
                }
                list.push((p.seg, p.bytes.len() as u32, crc32c::crc32c(&p.bytes), name));
            }
        }
        let seg_bits = sh.dev.seg_bits();
        let regions: Vec<(u32, u64, Vec<u8>)> =
            captured.iter().map(|c| (c.id, c.lsn, encode_edits(c.id, &c.meta.snapshot()))).collect();
        report.lsns = captured.iter().map(|c| (c.id, c.lsn)).collect();
        let header = [seg_bits, sh.opts.node_bytes as u32, sh.dev.file_count()];
        let bytes = encode_list(header, &regions, &list);
        write_durably(&dir.join(format!("backup-{}", report.backup)), &bytes)?;
        sync_dir(&segs)?;
        sync_dir(dir)?;
        Ok(report)
    }

    /// Captures every region: its LSN, catalog entry and log tails, under its write lock.
    fn capture_regions(&self) -> Result<(Vec<Captured>, Duration)> {
        let mut out = Vec::new();
        let mut longest = Duration::ZERO;
        for r in self.regions_list() {
            let t0 = Instant::now();
            let w = r.w().lock();
            let lsn = w.next_lsn.saturating_sub(1);
            let tails: HashMap<u32, Vec<u8>> =
                [&w.l0, &w.large].iter().filter_map(|t| Some((t.seg?.0, t.image().to_vec()))).collect();
            let meta = self.inner.sh.manifest.region(r.id());
            drop(w);
            longest = longest.max(t0.elapsed());
            // The chunks of earlier segments still queued for the device reach it now.
            r.drain_log_writes()?;
            if let Some(meta) = meta {
                out.push(Captured { id: r.id(), lsn, meta, tails });
            }
        }
        Ok((out, longest))
    }

    /// The segments of a captured region, read from the device (tails from the capture).
    fn pieces(&self, c: &Captured) -> Result<Vec<Piece>> {
        let dev = &self.inner.sh.dev;
        let seg_bytes = dev.seg_bytes();
        let mut out = Vec::new();
        for sst in c.meta.levels.iter().flatten() {
            let bytes = read_segment(dev, sst.seg, u64::from(sst.used_bytes))?;
            out.push(Piece { seg: sst.seg, id: [b"sst".as_slice(), &sst.to_bytes()].concat(), bytes });
        }
        for (k, log) in c.meta.logs.iter().enumerate() {
            for s in log {
                let (bytes, id) = match c.tails.get(&s.seg) {
                    Some(img) => {
                        let mut b = img.clone();
                        b.resize(b.len().next_multiple_of(ALIGN), 0);
                        let id = [b"tail".as_slice(), &xxhash_rust::xxh3::xxh3_64(&b).to_le_bytes()].concat();
                        (b, id)
                    }
                    None => {
                        let len = s.written(seg_bytes);
                        let id = [b"log".as_slice(), &[k as u8], &s.salt.to_le_bytes(), &len.to_le_bytes()].concat();
                        (read_segment(dev, s.seg, len)?, id)
                    }
                };
                out.push(Piece { seg: s.seg, id, bytes });
            }
        }
        // A backup region's reserved log-map targets (not in a log yet) hold nothing to copy.
        Ok(out)
    }
}

/// The catalog of the captured regions, noting their LSNs in the report.
fn catalog_of(captured: &[Captured], report: &mut CopyReport) -> Catalog {
    let mut catalog = Catalog::default();
    for c in captured {
        catalog.regions.insert(c.id, c.meta.clone());
        report.lsns.push((c.id, c.lsn));
    }
    catalog
}

/// The first `len` bytes of segment `seg` (rounded up to the I/O alignment).
fn read_segment(dev: &Device, seg: u32, len: u64) -> Result<Vec<u8>> {
    let len = (len.min(dev.seg_bytes()) as usize).next_multiple_of(ALIGN);
    let mut buf = AlignedBuf::new(len);
    dev.read_into(dev.seg_base(seg), &mut buf, IoKind::Read)?;
    Ok(buf.to_vec())
}

/// A new store being written segment by segment.
struct StoreWriter {
    dev: Arc<Device>,
}

impl StoreWriter {
    fn create(dir: &Path, files: u32, seg_bits: u32) -> Result<StoreWriter> {
        std::fs::create_dir_all(dir).map_err(Error::io("creating the copy's directory"))?;
        let storage = FileStorage::open(&dir.join(DATA_FILE), files, seg_bits, false, true)?;
        Ok(StoreWriter { dev: Arc::new(Device::new(Arc::new(storage))) })
    }

    fn put(&self, seg: u32, bytes: &[u8]) -> Result<()> {
        let mut buf = AlignedBuf::new(bytes.len().next_multiple_of(ALIGN));
        if let Some(b) = buf.get_mut(..bytes.len()) {
            b.copy_from_slice(bytes);
        }
        self.dev.write(self.dev.seg_base(seg), &buf, IoKind::Compaction)
    }

    /// Syncs the segments and writes the catalog (a checkpoint chain and a superblock).
    fn finish(self, catalog: Catalog, node_bytes: u32) -> Result<()> {
        self.dev.sync()?;
        let alloc = Arc::new(Allocator::new(self.dev.clone(), None, &segments_in_use(&catalog, &[]))?);
        Manifest::create(self.dev.clone(), alloc, catalog, None, node_bytes, &[])?;
        Ok(())
    }
}

/// Builds a store in `store` (which must not hold one) from backup number `which` of `dir`
/// (the newest when None), checking every segment file against the backup's list.
pub fn restore(dir: impl AsRef<Path>, which: Option<u32>, store: impl AsRef<Path>) -> Result<CopyReport> {
    let (dir, store) = (dir.as_ref(), store.as_ref());
    if store.join(DATA_FILE).exists() {
        return Err(Error::InvalidOptions(format!("{} already holds a store", store.display())));
    }
    let n = match which {
        Some(n) => n,
        None => next_backup(dir)?
            .checked_sub(1)
            .filter(|n| *n > 0)
            .ok_or_else(|| Error::InvalidOptions(format!("{} holds no backup (no backup-<n> file)", dir.display())))?,
    };
    let path = dir.join(format!("backup-{n}"));
    let bytes = std::fs::read(&path).map_err(Error::io("reading the backup's list"))?;
    let list = decode_list(&bytes).map_err(|what| Error::corrupt(0, 0, format!("{}: {what}", path.display())))?;
    let [seg_bits, node_bytes, files] = list.header;
    let target = StoreWriter::create(store, files, seg_bits)?;
    let mut report = CopyReport { backup: n, ..CopyReport::default() };
    for (seg, len, crc, name) in &list.segments {
        let file = dir.join("segments").join(name);
        let b = std::fs::read(&file).map_err(Error::io("reading a backup segment file"))?;
        if b.len() != *len as usize || crc32c::crc32c(&b) != *crc {
            let what =
                format!("backup segment file {} (segment {seg}) is damaged: length or CRC-32C differ", file.display());
            return Err(Error::corrupt(u64::from(*seg), 0, what));
        }
        target.put(*seg, &b)?;
        report.segments += 1;
        report.bytes_copied += b.len() as u64;
    }
    let mut catalog = Catalog::default();
    for (id, lsn, edits) in &list.regions {
        let (region, edits) =
            decode_edits(edits).map_err(|_| Error::corrupt(0, 0, "a backup's catalog does not decode"))?;
        if region != *id {
            return Err(Error::corrupt(0, 0, "a backup's catalog names another region"));
        }
        catalog.apply(*id, &edits);
        report.lsns.push((*id, *lsn));
    }
    target.finish(catalog, node_bytes)?;
    Ok(report)
}

/// The number the next backup in `dir` takes.
fn next_backup(dir: &Path) -> Result<u32> {
    let Ok(rd) = std::fs::read_dir(dir) else { return Ok(1) };
    let mut n: u32 = 0;
    for e in rd.flatten() {
        if let Some(k) = e.file_name().to_str().and_then(|s| s.strip_prefix("backup-")).and_then(|s| s.parse().ok()) {
            n = n.max(k);
        }
    }
    n.checked_add(1).ok_or_else(|| Error::InvalidOptions("too many backups in one directory".into()))
}

/// A decoded `backup-<n>` file.
struct List {
    header: [u32; 3],
    regions: Vec<(u32, u64, Vec<u8>)>,
    segments: Vec<(u32, u32, u32, String)>,
}

fn encode_list(header: [u32; 3], regions: &[(u32, u64, Vec<u8>)], segments: &[(u32, u32, u32, String)]) -> Vec<u8> {
    let mut w = Writer::new();
    w.raw(MAGIC).u32(VERSION);
    for h in header {
        w.u32(h);
    }
    w.u32(regions.len() as u32);
    for (id, lsn, edits) in regions {
        w.u32(*id).u64(*lsn).bytes(edits);
    }
    w.u32(segments.len() as u32);
    for (seg, len, crc, name) in segments {
        w.u32(*seg).u32(*len).u32(*crc).bytes(name.as_bytes());
    }
    let mut out = w.into_inner();
    let crc = crc32c::crc32c(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

fn decode_list(b: &[u8]) -> std::result::Result<List, &'static str> {
    let body_len = b.len().checked_sub(4).ok_or("too short")?;
    let (body, crc) = b.split_at(body_len);
    if crc32c::crc32c(body).to_le_bytes() != crc {
        return Err("checksum mismatch");
    }
    let mut d = Reader::new(body);
    let short = |_| "cut short";
    if d.take(MAGIC.len()).map_err(short)? != MAGIC || d.u32().map_err(short)? != VERSION {
        return Err("not a backup list of version 1");
    }
    let header = [d.u32().map_err(short)?, d.u32().map_err(short)?, d.u32().map_err(short)?];
    let mut regions = Vec::new();
    for _ in 0..d.u32().map_err(short)? {
        let (id, lsn) = (d.u32().map_err(short)?, d.u64().map_err(short)?);
        regions.push((id, lsn, d.bytes().map_err(short)?.to_vec()));
    }
    let mut segments = Vec::new();
    for _ in 0..d.u32().map_err(short)? {
        let (seg, len, crc) = (d.u32().map_err(short)?, d.u32().map_err(short)?, d.u32().map_err(short)?);
        let name = String::from_utf8(d.bytes().map_err(short)?.to_vec()).map_err(|_| "a name is not UTF-8")?;
        if name.contains('/') || name.starts_with('.') {
            return Err("a segment file name leaves the backup directory");
        }
        segments.push((seg, len, crc, name));
    }
    Ok(List { header, regions, segments })
}

/// See [`crate::fuzzing::backup_list`].
pub(crate) fn fuzz_list(data: &[u8]) {
    if let Ok(l) = decode_list(data) {
        assert_eq!(encode_list(l.header, &l.regions, &l.segments), data, "a decoded list re-encodes differently");
    }
}

fn write_durably(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = path.with_extension("tmp");
    let f = std::fs::File::create(&tmp).map_err(Error::io("writing a backup file"))?;
    std::io::Write::write_all(&mut &f, bytes).map_err(Error::io("writing a backup file"))?;
    f.sync_all().map_err(Error::io("syncing a backup file"))?;
    std::fs::rename(&tmp, path).map_err(Error::io("naming a backup file"))
}

fn sync_dir(dir: &Path) -> Result<()> {
    std::fs::File::open(dir).and_then(|d| d.sync_all()).map_err(Error::io("syncing the backup directory"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_list_roundtrips_and_damage_is_refused() {
        let regions = vec![(1, 42, vec![1, 2, 3])];
        let segs = vec![(7, 4096, 99, "00000007-00000000000000aa.seg".to_string())];
        let b = encode_list([21, 8192, 8], &regions, &segs);
        let l = decode_list(&b).expect("decodes");
        assert_eq!((l.header, l.regions, l.segments), ([21, 8192, 8], regions, segs));
        for i in 0..b.len() {
            let mut d = b.clone();
            d[i] ^= 1;
            assert!(decode_list(&d).is_err(), "flip at {i} accepted");
        }
    }
}
