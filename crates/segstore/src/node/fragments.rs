//! A storage node's fragments on its local device: per fragment a data file read and written
//! with direct I/O (small writes through the page cache), and a meta file with the segment's
//! placement and a checksum per block.
//!
//! Files are `<dir>/<store>/<seg as 8 hex digits>.<fragment>` and the same name with `.meta`.
//! Meta file, version 1 (little-endian):
//!
//! ```text
//! 0     u32 magic "HSFM" | u16 version = 1 | u8 fragment | u8 0 | u32 segment
//! 12    u32 placement length n | placement (as `wire::Placement::encode`) | u32 crc32c(bytes 0..16 + n)
//! 4096  u64 per data block b: bit 63 set once the block was written, bits 0..32 its crc32c
//! ```
//!
//! A block whose entry is zero was never written and reads as zeros. The entry is written
//! after the block, so a node killed between the two answers "corrupt" for a block whose write
//! it never acknowledged; the client rebuilds that block from parity.

#![expect(clippy::indexing_slicing, reason = "buffers are sized here to whole blocks before they are indexed")]

use crate::stripe::BLOCK;
use crate::wire::{Code, Listed, Placement};
use halyard_codec::{get_u64, put_u64, Reader, Writer};
use halyard_engine::AlignedBuf;
use parking_lot::Mutex;
use std::collections::{HashMap, HashSet};
use std::fs::{File, OpenOptions};
use std::io::Read;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;

const MAGIC: u32 = 0x4d46_5348;
const VERSION: u16 = 1;
const HEADER: u64 = 4096;
const WRITTEN: u64 = 1 << 63;
/// Fragments kept open at once (two descriptors each).
const MAX_OPEN: usize = 256;

/// A request the fragments refuse: a wire error code and what to say.
pub type Refusal = (Code, String);

fn io(what: &str) -> impl FnOnce(std::io::Error) -> Refusal + '_ {
    move |e| (Code::Io, format!("{what}: {e}"))
}

type Key = (String, u32, u8);

/// Writes of at most this many bytes go through the page cache (see [`Fragments::write`]).
pub const SMALL_WRITE: usize = 64 << 10;
/// Most blocks a fragment holds (a 256 MiB segment is 65,536 blocks).
const MAX_BLOCKS: u64 = 1 << 20;

struct Frag {
    /// Opened with O_DIRECT where the file system allows.
    data: File,
    /// The same file through the page cache, for small writes.
    cached: File,
    meta: File,
}

/// The fragments a node holds (see the module documentation).
pub struct Fragments {
    dir: PathBuf,
    direct: AtomicBool,
    open: Mutex<HashMap<Key, Arc<Frag>>>,
    dirty: Mutex<HashSet<Key>>,
}

/// Store names become directory names: letters, digits, `.`, `_` and `-`, not starting with a dot.
pub fn valid_store(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && !s.starts_with('.')
        && s.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

impl Fragments {
    /// The fragments under `dir` (created if missing).
    pub fn open(dir: &Path) -> std::io::Result<Fragments> {
        std::fs::create_dir_all(dir)?;
        Ok(Fragments {
            dir: dir.to_path_buf(),
            direct: AtomicBool::new(true),
            open: Mutex::new(HashMap::new()),
            dirty: Mutex::new(HashSet::new()),
        })
    }

    /// Whether data files bypass the page cache.
    pub fn is_direct(&self) -> bool {
        self.direct.load(Relaxed)
    }

    fn store_dir(&self, store: &str) -> Result<PathBuf, Refusal> {
        if !valid_store(store) {
            return Err((Code::BadName, format!("store name {store:?} is not [A-Za-z0-9._-]{{1,64}}")));
        }
        Ok(self.dir.join(store))
    }

    fn paths(&self, store: &str, seg: u32, frag: u8) -> Result<(PathBuf, PathBuf), Refusal> {
        let d = self.store_dir(store)?;
        Ok((d.join(format!("{seg:08x}.{frag}")), d.join(format!("{seg:08x}.{frag}.meta"))))
    }

    fn open_data(&self, path: &Path, create: bool) -> std::io::Result<File> {
        let open = |flags: i32| OpenOptions::new().read(true).write(true).create(create).custom_flags(flags).open(path);
        if self.direct.load(Relaxed) {
            match open(libc::O_DIRECT) {
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                    tracing::warn!("O_DIRECT refused under {}; fragments use buffered I/O", self.dir.display());
                    self.direct.store(false, Relaxed);
                }
                other => return other,
            }
        }
        open(0)
    }

    fn get(&self, store: &str, seg: u32, frag: u8) -> Result<Arc<Frag>, Refusal> {
        let key = (store.to_string(), seg, frag);
        if let Some(f) = self.open.lock().get(&key) {
            return Ok(f.clone());
        }
        let (data, meta) = self.paths(store, seg, frag)?;
        if !meta.exists() {
            return Err((Code::NoFragment, format!("no fragment {frag} of segment {seg} of {store}")));
        }
        let f = Arc::new(Frag {
            data: self.open_data(&data, true).map_err(io("opening a fragment"))?,
            cached: OpenOptions::new().read(true).write(true).open(&data).map_err(io("opening a fragment"))?,
            meta: OpenOptions::new().read(true).write(true).open(&meta).map_err(io("opening a fragment's meta"))?,
        });
        let mut open = self.open.lock();
        if open.len() >= MAX_OPEN {
            // Bounded file descriptors: the least of evils is to start over.
            open.clear();
        }
        open.insert(key, f.clone());
        Ok(f)
    }

    /// Creates the fragment if it is new, and records `p` as its segment's placement.
    pub fn place(&self, store: &str, seg: u32, frag: u8, p: &Placement) -> Result<(), Refusal> {
        let (data, meta) = self.paths(store, seg, frag)?;
        let created = !meta.exists();
        if created {
            let d = self.store_dir(store)?;
            std::fs::create_dir_all(&d).map_err(io("creating the store's directory"))?;
            drop(self.open_data(&data, true).map_err(io("creating a fragment"))?);
        }
        let m = OpenOptions::new().read(true).write(true).create(true).truncate(false).open(&meta);
        let m = m.map_err(io("creating a fragment's meta"))?;
        m.write_all_at(&header(seg, frag, p), 0).map_err(io("writing a fragment's placement"))?;
        m.sync_data().map_err(io("syncing a fragment's placement"))?;
        if created {
            sync_dir(&self.dir.join(store)).map_err(io("syncing the store's directory"))?;
        }
        self.open.lock().remove(&(store.to_string(), seg, frag));
        Ok(())
    }

    /// Writes whole blocks of a fragment from block `block` on. A small write (a processing
    /// node's log push: a block or two, often the one it wrote before) goes through the page
    /// cache, which survives this process, and reaches the device with the next Sync or the
    /// kernel's writeback; a larger one goes to the device with direct I/O.
    pub fn write(&self, store: &str, seg: u32, frag: u8, block: u64, data: &[u8]) -> Result<(), Refusal> {
        if data.is_empty() || !data.len().is_multiple_of(BLOCK) {
            return Err((Code::Malformed, "a write carries whole 4 KiB blocks".into()));
        }
        if block.saturating_add((data.len() / BLOCK) as u64) > MAX_BLOCKS {
            return Err((Code::Malformed, "block out of range".to_string()));
        }
        let f = self.get(store, seg, frag)?;
        let off = block * BLOCK as u64;
        if data.len() <= SMALL_WRITE {
            f.cached.write_all_at(data, off).map_err(io("writing a fragment"))?;
        } else {
            let mut buf = AlignedBuf::new(data.len());
            buf[..data.len()].copy_from_slice(data);
            f.data.write_all_at(&buf[..data.len()], off).map_err(io("writing a fragment"))?;
        }
        let mut entries = vec![0u8; data.len() / BLOCK * 8];
        for (i, b) in data.chunks_exact(BLOCK).enumerate() {
            put_u64(&mut entries, i * 8, WRITTEN | u64::from(crc32c::crc32c(b)));
        }
        f.meta.write_all_at(&entries, HEADER + block * 8).map_err(io("writing a fragment's checksums"))?;
        self.dirty.lock().insert((store.to_string(), seg, frag));
        Ok(())
    }

    /// Reads `blocks` blocks of a fragment from `block` on, each checked against its checksum.
    pub fn read(&self, store: &str, seg: u32, frag: u8, block: u64, blocks: u32) -> Result<Vec<u8>, Refusal> {
        let n = blocks as usize;
        if n == 0 || n * BLOCK > crate::wire::MAX_IO {
            return Err((Code::Malformed, "a read asks for 1 block to 8 MiB".into()));
        }
        let f = self.get(store, seg, frag)?;
        let mut buf = AlignedBuf::new(n * BLOCK);
        let off = block.checked_mul(BLOCK as u64).ok_or((Code::Malformed, "block out of range".to_string()))?;
        // A direct read of a range the page cache holds dirty writes that range back first.
        let got = read_full(&f.data, &mut buf[..n * BLOCK], off).map_err(io("reading a fragment"))?;
        buf[got..n * BLOCK].fill(0);
        let mut entries = vec![0u8; n * 8];
        let e = read_full(&f.meta, &mut entries, HEADER + block * 8).map_err(io("reading a fragment's checksums"))?;
        entries[e..].fill(0);
        let mut out = buf[..n * BLOCK].to_vec();
        for (i, b) in out.chunks_exact_mut(BLOCK).enumerate() {
            let entry = get_u64(&entries, i * 8).unwrap_or(0);
            if entry == 0 {
                b.fill(0);
            } else if entry & WRITTEN == 0 || u64::from(crc32c::crc32c(b)) != entry & 0xffff_ffff {
                return Err((Code::Corrupt, format!("block {} of fragment {frag} of segment {seg}", block + i as u64)));
            }
        }
        Ok(out)
    }

    /// Makes every write to the store's fragments durable.
    pub fn sync(&self, store: &str) -> Result<(), Refusal> {
        let keys: Vec<Key> = {
            let mut d = self.dirty.lock();
            let mine: Vec<Key> = d.iter().filter(|k| k.0 == store).cloned().collect();
            for k in &mine {
                d.remove(k);
            }
            mine
        };
        for k in keys {
            let Ok(f) = self.get(&k.0, k.1, k.2) else { continue };
            let r = f.data.sync_data().and_then(|()| f.meta.sync_data());
            if let Err(e) = r {
                self.dirty.lock().insert(k);
                return Err((Code::Io, format!("syncing a fragment: {e}")));
            }
        }
        Ok(())
    }

    /// Drops every fragment of the segment held here.
    pub fn delete(&self, store: &str, seg: u32) -> Result<(), Refusal> {
        let d = self.store_dir(store)?;
        self.open.lock().retain(|k, _| !(k.0 == store && k.1 == seg));
        self.dirty.lock().retain(|k| !(k.0 == store && k.1 == seg));
        let prefix = format!("{seg:08x}.");
        let Ok(entries) = std::fs::read_dir(&d) else { return Ok(()) };
        for e in entries.flatten() {
            if e.file_name().to_string_lossy().starts_with(&prefix) {
                std::fs::remove_file(e.path()).map_err(io("removing a fragment"))?;
            }
        }
        Ok(())
    }

    /// Makes fragment `frag` of `store`'s segment `seg` a copy, made on this node, of the same
    /// fragment of another store's segment (`from`: store, segment, and the placement
    /// generation the caller knows it by), and records `p` as its placement. What `store` held
    /// of `seg` goes first. The copy is written under temporary names and renamed, data before
    /// meta, so a node killed half-way holds the fragment whole or not at all.
    pub fn adopt(&self, store: &str, seg: u32, frag: u8, from: (&str, u32, u64), p: &Placement) -> Result<(), Refusal> {
        let (from_store, from_seg, from_gen) = from;
        let (src_data, src_meta) = self.paths(from_store, from_seg, frag)?;
        let gone = || {
            let what = format!("no fragment {frag} of segment {from_seg} of {from_store} at generation {from_gen}");
            (Code::NoFragment, what)
        };
        // The data is opened before the meta: were the segment deleted and written anew
        // between the two, the meta would name a newer generation, which is refused.
        let mut data = File::open(&src_data).map_err(|_| gone())?;
        let mut meta = Vec::new();
        File::open(&src_meta).and_then(|mut f| f.read_to_end(&mut meta)).map_err(|_| gone())?;
        match parse_header(&meta) {
            Some((s, f, q)) if s == from_seg && f == frag && q.gen == from_gen => {}
            _ => return Err(gone()),
        }
        self.delete(store, seg)?;
        let d = self.store_dir(store)?;
        std::fs::create_dir_all(&d).map_err(io("creating the store's directory"))?;
        let (dst_data, dst_meta) = self.paths(store, seg, frag)?;
        let tmp_data = d.join(format!("{seg:08x}.{frag}.adopting"));
        let tmp_meta = d.join(format!("{seg:08x}.{frag}.meta.adopting"));
        let mut out = File::create(&tmp_data).map_err(io("creating an adopted fragment"))?;
        // copy_file_range underneath: the kernel copies (or, where the file system can, shares
        // the blocks), and the bytes never pass through this process.
        std::io::copy(&mut data, &mut out).map_err(io("copying an adopted fragment"))?;
        out.sync_data().map_err(io("syncing an adopted fragment"))?;
        let mut new_meta = header(seg, frag, p);
        new_meta.resize(HEADER as usize, 0);
        new_meta.extend_from_slice(meta.get(HEADER as usize..).unwrap_or_default());
        let m = File::create(&tmp_meta).map_err(io("creating an adopted fragment's meta"))?;
        m.write_all_at(&new_meta, 0).map_err(io("writing an adopted fragment's meta"))?;
        m.sync_data().map_err(io("syncing an adopted fragment's meta"))?;
        std::fs::rename(&tmp_data, &dst_data).map_err(io("naming an adopted fragment"))?;
        std::fs::rename(&tmp_meta, &dst_meta).map_err(io("naming an adopted fragment's meta"))?;
        sync_dir(&d).map_err(io("syncing the store's directory"))?;
        self.open.lock().remove(&(store.to_string(), seg, frag));
        Ok(())
    }

    /// The store's fragments held here, with the placement each recorded; a meta file that
    /// fails its checks is left out (its fragment is then rebuilt from parity).
    pub fn list(&self, store: &str) -> Result<Vec<Listed>, Refusal> {
        let d = self.store_dir(store)?;
        let Ok(entries) = std::fs::read_dir(&d) else { return Ok(Vec::new()) };
        let mut out = Vec::new();
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let Some(stem) = name.strip_suffix(".meta") else { continue };
            let mut h = vec![0u8; HEADER as usize];
            let Ok(f) = File::open(e.path()) else { continue };
            let Ok(n) = read_full(&f, &mut h, 0) else { continue };
            match parse_header(&h[..n]) {
                Some((seg, frag, placement)) if stem == format!("{seg:08x}.{frag}") => {
                    out.push(Listed { seg, frag, placement })
                }
                _ => tracing::warn!("{}: fragment meta fails its checks; left out", e.path().display()),
            }
        }
        out.sort_by_key(|l| (l.seg, l.frag));
        Ok(out)
    }

    /// (fragments, bytes of their data files) over every store.
    pub fn usage(&self) -> (u64, u64) {
        let (mut n, mut bytes) = (0, 0);
        for store in std::fs::read_dir(&self.dir).into_iter().flatten().flatten() {
            for e in std::fs::read_dir(store.path()).into_iter().flatten().flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if !name.ends_with(".meta") && !name.starts_with(super::claims::FILE) {
                    n += 1;
                    bytes += e.metadata().map_or(0, |m| m.len());
                }
            }
        }
        (n, bytes)
    }
}

/// A meta file's header (see the module documentation).
pub fn header(seg: u32, frag: u8, p: &Placement) -> Vec<u8> {
    let mut w = Writer::with_capacity(HEADER as usize);
    let enc = p.encode();
    w.u32(MAGIC).u16(VERSION).u8(frag).u8(0).u32(seg).u32(enc.len() as u32).raw(&enc);
    let crc = crc32c::crc32c(w.as_slice());
    w.u32(crc);
    w.into_inner()
}

/// Parses a meta file's header: (segment, fragment, placement); None when it fails its checks.
pub fn parse_header(h: &[u8]) -> Option<(u32, u8, Placement)> {
    let mut r = Reader::new(h);
    let (magic, version, frag, _, seg, n) =
        (r.u32().ok()?, r.u16().ok()?, r.u8().ok()?, r.u8().ok()?, r.u32().ok()?, r.u32().ok()?);
    if magic != MAGIC || version != VERSION || n as usize > h.len() {
        return None;
    }
    let p = r.take(n as usize).ok()?;
    let crc = r.u32().ok()?;
    if crc32c::crc32c(h.get(..16 + n as usize)?) != crc {
        return None;
    }
    Some((seg, frag, Placement::decode(p).ok()?))
}

fn read_full(f: &File, buf: &mut [u8], off: u64) -> std::io::Result<usize> {
    let mut done = 0;
    while done < buf.len() {
        match f.read_at(&mut buf[done..], off + done as u64) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(done)
}

fn sync_dir(d: &Path) -> std::io::Result<()> {
    File::open(d)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p() -> Placement {
        Placement { gen: 1, rho: 1, nodes: vec!["a:1".into(), "b:2".into()] }
    }

    #[test]
    fn written_blocks_read_back_and_unwritten_ones_read_as_zeros() {
        let d = tempfile::tempdir().unwrap();
        let f = Fragments::open(d.path()).unwrap();
        assert_eq!(f.write("s", 3, 0, 0, &[1; BLOCK]).unwrap_err().0, Code::NoFragment);
        f.place("s", 3, 0, &p()).unwrap();
        f.write("s", 3, 0, 1, &[7; BLOCK]).unwrap();
        let got = f.read("s", 3, 0, 0, 3).unwrap();
        assert!(got[..BLOCK].iter().all(|&b| b == 0));
        assert!(got[BLOCK..2 * BLOCK].iter().all(|&b| b == 7));
        assert!(got[2 * BLOCK..].iter().all(|&b| b == 0));
        f.sync("s").unwrap();
        assert_eq!(f.list("s").unwrap(), vec![Listed { seg: 3, frag: 0, placement: p() }]);
        f.delete("s", 3).unwrap();
        assert!(f.list("s").unwrap().is_empty());
    }

    #[test]
    fn an_adopted_fragment_is_a_copy_the_source_no_longer_changes() {
        let d = tempfile::tempdir().unwrap();
        let f = Fragments::open(d.path()).unwrap();
        f.place("a", 3, 1, &p()).unwrap();
        f.write("a", 3, 1, 0, &[7; BLOCK]).unwrap();
        f.write("a", 3, 1, 2, &[9; 20 * BLOCK]).unwrap();
        let newer = Placement { gen: 5, ..p() };
        let stale = f.adopt("b", 8, 1, ("a", 3, 4), &newer).unwrap_err();
        assert_eq!(stale.0, Code::NoFragment, "a generation the source no longer has is refused");
        f.adopt("b", 8, 1, ("a", 3, 1), &newer).unwrap();
        assert_eq!(f.read("b", 8, 1, 0, 22).unwrap(), f.read("a", 3, 1, 0, 22).unwrap());
        f.write("a", 3, 1, 0, &[1; BLOCK]).unwrap();
        assert!(f.read("b", 8, 1, 0, 1).unwrap().iter().all(|&b| b == 7), "the copy is its own");
        assert_eq!(f.list("b").unwrap(), vec![Listed { seg: 8, frag: 1, placement: newer }]);
        assert_eq!(f.adopt("b", 8, 0, ("a", 3, 1), &p()).unwrap_err().0, Code::NoFragment);
        assert_eq!(f.adopt("../x", 8, 1, ("a", 3, 1), &p()).unwrap_err().0, Code::BadName);
    }

    #[test]
    fn a_flipped_bit_is_answered_as_corrupt() {
        let d = tempfile::tempdir().unwrap();
        let f = Fragments::open(d.path()).unwrap();
        f.place("s", 0, 1, &p()).unwrap();
        f.write("s", 0, 1, 0, &[9; 2 * BLOCK]).unwrap();
        drop(f);
        let path = d.path().join("s").join("00000000.1");
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[BLOCK + 17] ^= 4;
        std::fs::write(&path, bytes).unwrap();
        let f = Fragments::open(d.path()).unwrap();
        assert!(f.read("s", 0, 1, 0, 1).is_ok());
        assert_eq!(f.read("s", 0, 1, 0, 2).unwrap_err().0, Code::Corrupt);
    }

    #[test]
    fn small_writes_through_the_page_cache_and_large_direct_ones_read_back_alike() {
        let d = tempfile::tempdir().unwrap();
        let f = Fragments::open(d.path()).unwrap();
        f.place("s", 2, 0, &p()).unwrap();
        f.write("s", 2, 0, 0, &[3; BLOCK]).unwrap();
        f.write("s", 2, 0, 1, &[4; BLOCK]).unwrap();
        assert_eq!(f.read("s", 2, 0, 0, 2).unwrap(), [[3u8; BLOCK], [4; BLOCK]].concat());
        // A large write over small ones, then small ones over it.
        let big = vec![7u8; SMALL_WRITE + BLOCK];
        f.write("s", 2, 0, 0, &big).unwrap();
        f.write("s", 2, 0, 1, &[5; BLOCK]).unwrap();
        // The process ends without a Sync: the page cache keeps the small writes.
        drop(f);
        let f = Fragments::open(d.path()).unwrap();
        assert_eq!(f.read("s", 2, 0, 0, 3).unwrap(), [[7u8; BLOCK], [5; BLOCK], [7; BLOCK]].concat());
        assert_eq!(f.write("s", 2, 0, MAX_BLOCKS, &[1; BLOCK]).unwrap_err().0, Code::Malformed);
    }

    #[test]
    fn store_names_that_escape_the_directory_are_refused() {
        for bad in ["", "..", ".x", "a/b", "a b"] {
            assert!(!valid_store(bad), "{bad:?}");
        }
        assert!(valid_store("node-1.a_b"));
    }
}
