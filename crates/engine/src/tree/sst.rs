//! Segment-sized SSTs: a B+-tree built bottom-up, left to right, from a sorted stream.
//!
//! ```text
//! offset 0          leaves (node_bytes each), in key order
//! after the leaves  index nodes, level by level, the root last
//! then              Bloom filter
//! then              footer: u64 magic "HLYSST01" | u32 length N | SstInfo (N bytes) | u32 crc32c
//! ```
//! Child offsets are relative to the segment, so an SST can move to another segment unchanged.

#![expect(
    clippy::indexing_slicing,
    reason = "builder buffers and node images are indexed within the node size this module allocated"
)]

use crate::catalog::SstInfo;
use crate::device::aligned::{align_up, AlignedBuf, ALIGN};
use crate::device::{Device, IoKind};
use crate::error::{Error, Result};
use crate::format::bloom;
use crate::format::node::{self, index_cell, leaf_cell, Node, NodeBuf, INDEX, LEAF};
use crate::options::NODE_HEADER;
use crate::tree::cache::Cache;
use crate::tree::memtable::{Entry, Value};
use halyard_codec::{put_u32, Writer};
use std::ops::Bound;
use std::sync::atomic::{AtomicU16, Ordering::Relaxed};
use std::sync::{Arc, OnceLock};

pub(crate) const FOOTER_MAGIC: &[u8; 8] = b"HLYSST01";

/// Builds one SST into a segment image.
pub(crate) struct SstBuilder {
    node_bytes: usize,
    seg_bytes: usize,
    bits_per_key: usize,
    max_key: usize,
    buf: AlignedBuf,
    leaf: NodeBuf,
    leaf_first: Vec<u8>,
    pivots: Vec<(Vec<u8>, u32)>,
    pivot_cost: usize,
    next_off: usize,
    hashes: Vec<u64>,
    cell: Vec<u8>,
    info: SstInfo,
}

impl SstBuilder {
    pub(crate) fn new(node_bytes: usize, seg_bytes: usize, bits_per_key: usize, max_key: usize) -> SstBuilder {
        SstBuilder {
            node_bytes,
            seg_bytes,
            bits_per_key,
            max_key,
            buf: AlignedBuf::new(seg_bytes),
            leaf: NodeBuf::new(node_bytes, LEAF),
            leaf_first: Vec::new(),
            pivots: Vec::new(),
            pivot_cost: 0,
            next_off: 0,
            hashes: Vec::new(),
            cell: Vec::new(),
            info: SstInfo { min_lsn: u64::MAX, ..SstInfo::blank() },
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.info.entries == 0
    }

    /// The last key added, if any.
    pub(crate) fn last_key(&self) -> Option<&[u8]> {
        (self.info.entries > 0).then_some(self.info.last_key.as_slice())
    }

    /// Records that every range delete up to `lsn` was applied to the entries added.
    pub(crate) fn set_range_lsn(&mut self, lsn: u64) {
        self.info.range_lsn = lsn;
    }

    /// Bytes the index, filter and footer need if the SST gets `extra` more pivots and keys.
    fn reserve(&self, extra_pivot: usize, extra_keys: usize) -> usize {
        let usable = self.node_bytes - NODE_HEADER;
        let cost = self.pivot_cost + extra_pivot;
        let l1 = if self.pivots.is_empty() { 0 } else { (2 * cost).div_ceil(usable) + 1 };
        let index = (2 * l1 + 1) * self.node_bytes;
        let filter = bloom::encoded_len(self.hashes.len() + extra_keys, self.bits_per_key);
        let footer = 160 + 2 * self.max_key;
        index + filter + footer + 2 * ALIGN
    }

    /// Adds the next entry (keys strictly ascending). False when the SST is full: the entry
    /// was not added and belongs to the next SST.
    pub(crate) fn add(&mut self, e: &Entry, full_len: usize) -> bool {
        leaf_cell(e, &mut self.cell);
        if !self.leaf.fits(self.cell.len()) {
            let pivot = 8 + e.key.len();
            if self.next_off + 2 * self.node_bytes + self.reserve(pivot, 1) > self.seg_bytes {
                return false;
            }
            self.flush_leaf();
        } else if self.leaf.count() == 0 {
            let pivot = 8 + e.key.len();
            if self.next_off + self.node_bytes + self.reserve(pivot, 1) > self.seg_bytes {
                return false;
            }
        }
        if self.leaf.count() == 0 {
            self.leaf_first = e.key.clone();
        }
        self.leaf.push(&self.cell);
        self.hashes.push(bloom::hash(&e.key));
        let i = &mut self.info;
        if i.entries == 0 {
            i.first_key = e.key.clone();
        }
        i.last_key.clone_from(&e.key);
        i.entries += 1;
        i.min_lsn = i.min_lsn.min(e.lsn);
        i.max_lsn = i.max_lsn.max(e.lsn);
        let stored = e.key.len() + e.value.stored_len();
        i.stored_bytes += stored as u64;
        match e.value.base() {
            Value::Medium { .. } => {
                i.medium_ptrs += 1;
                i.full_bytes += full_len as u64;
            }
            Value::Large { .. } => {
                i.large_ptrs += 1;
                i.full_bytes += stored as u64;
            }
            _ => i.full_bytes += stored as u64,
        }
        true
    }

    fn flush_leaf(&mut self) {
        let leaf = std::mem::replace(&mut self.leaf, NodeBuf::new(self.node_bytes, LEAF));
        let bytes = leaf.finish();
        let off = self.next_off;
        self.buf[off..off + self.node_bytes].copy_from_slice(&bytes);
        let key = std::mem::take(&mut self.leaf_first);
        self.pivot_cost += 8 + key.len();
        self.pivots.push((key, off as u32));
        self.next_off += self.node_bytes;
        self.info.leaf_count += 1;
    }

    /// Writes the index bottom-up, the filter and the footer. Returns the segment image
    /// (only `used_bytes` of it matter) and the SST's description.
    pub(crate) fn finish(mut self, seg: u32) -> (AlignedBuf, SstInfo) {
        if self.leaf.count() > 0 {
            self.flush_leaf();
        }
        let mut level = std::mem::take(&mut self.pivots);
        let mut height = 0u8;
        while level.len() > 1 {
            height += 1;
            let mut next = Vec::new();
            let mut nb = NodeBuf::new(self.node_bytes, INDEX);
            let mut first: Option<Vec<u8>> = None;
            for (key, child) in &level {
                index_cell(key, *child, &mut self.cell);
                if !nb.fits(self.cell.len()) {
                    let n = std::mem::replace(&mut nb, NodeBuf::new(self.node_bytes, INDEX));
                    next.push((first.take().unwrap_or_default(), self.put_node(n)));
                }
                if first.is_none() {
                    first = Some(key.clone());
                }
                nb.push(&self.cell);
            }
            next.push((first.unwrap_or_default(), self.put_node(nb)));
            level = next;
        }
        let root_off = level.first().map_or(0, |p| p.1);
        let filter = bloom::build(&self.hashes, self.bits_per_key);
        let bloom_off = self.next_off;
        self.buf[bloom_off..bloom_off + filter.len()].copy_from_slice(&filter);
        self.next_off += filter.len();
        let i = &mut self.info;
        i.seg = seg;
        i.root_off = root_off;
        i.height = height;
        i.bloom_off = bloom_off as u32;
        i.bloom_len = filter.len() as u32;
        let mut e = Writer::new();
        i.encode_footer(&mut e);
        let footer_off = self.next_off;
        let body = e.into_inner();
        let footer_len = 8 + 4 + body.len() + 4;
        i.used_bytes = align_up(footer_off + footer_len, ALIGN) as u32;
        // used_bytes is part of the encoded info; encode again now that it is known.
        let mut e = Writer::new();
        i.encode_footer(&mut e);
        let body = e.into_inner();
        let f = &mut self.buf[footer_off..footer_off + footer_len];
        f[..8].copy_from_slice(FOOTER_MAGIC);
        put_u32(f, 8, body.len() as u32);
        f[12..12 + body.len()].copy_from_slice(&body);
        let crc = crc32c::crc32c(&f[..12 + body.len()]);
        put_u32(f, 12 + body.len(), crc);
        (self.buf, self.info)
    }

    fn put_node(&mut self, n: NodeBuf) -> u32 {
        let off = self.next_off;
        self.buf[off..off + self.node_bytes].copy_from_slice(&n.finish());
        self.next_off += self.node_bytes;
        off as u32
    }
}

/// What reads need: the device, the cache and the geometry.
pub(crate) struct ReadCtx {
    pub dev: Arc<Device>,
    pub cache: Cache,
    pub node_bytes: usize,
}

impl ReadCtx {
    /// Reads a verified node through the cache.
    pub(crate) fn node(&self, uid: u64, seg: u32, off: u32) -> Result<Arc<Vec<u8>>> {
        let at = self.dev.seg_base(seg) + off as u64;
        let key = node_cache_key(uid, off);
        if let Some(n) = self.cache.get(key) {
            return Ok(n);
        }
        let bytes = self.dev.read(at, self.node_bytes, IoKind::Read)?;
        if !node::verify(&bytes) {
            return Err(Error::corrupt(seg as u64, off as u64, "node checksum mismatch"));
        }
        let n = Arc::new(bytes);
        self.cache.insert(key, n.clone());
        Ok(n)
    }
}

/// The cache key of the node at `off` of the SST object `uid`: bit 127 set (see `rowcache`).
fn node_cache_key(uid: u64, off: u32) -> u128 {
    (1u128 << 127) | ((uid as u128) << 32) | off as u128
}

/// An SST as a level holds it.
pub(crate) struct Sst {
    pub info: SstInfo,
    /// Identity for the cache: unique per SST object in this process.
    uid: u64,
    bloom: OnceLock<Vec<u8>>,
    /// The index nodes (everything between the last leaf and the root, inclusive), read
    /// and verified once and then kept out of the cache: every point read walks them.
    index: OnceLock<Vec<u8>>,
    /// Reads of each leaf (saturating; racing increments may be lost): how hot a leaf is when
    /// a compaction decides which of its replacements to cache (see `compaction::Warm`).
    heat: Box<[AtomicU16]>,
}

static NEXT_UID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

fn bad(seg: u32, off: u32) -> impl Fn(node::BadNode) -> Error {
    move |_| Error::corrupt(seg as u64, off as u64, "malformed node")
}

impl Sst {
    pub(crate) fn new(info: SstInfo) -> Sst {
        Sst {
            uid: NEXT_UID.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            bloom: OnceLock::new(),
            index: OnceLock::new(),
            // Bounded: a segment holds at most 2^18 of the smallest nodes.
            heat: (0..info.leaf_count.clamp(1, 1 << 18)).map(|_| AtomicU16::new(0)).collect(),
            info,
        }
    }

    /// Reads of leaf `leaf` so far, if at least `min` (and one) and the leaf is cached.
    pub(crate) fn cached_heat(&self, cache: &Cache, leaf: usize, node_bytes: usize, min: u16) -> Option<u16> {
        let h = self.heat.get(leaf).map_or(0, |h| h.load(Relaxed));
        (h >= min.max(1) && cache.contains(self.leaf_key(leaf, node_bytes))).then_some(h)
    }

    pub(crate) fn set_heat(&self, leaf: usize, v: u16) {
        if let Some(h) = self.heat.get(leaf) {
            h.store(v, Relaxed);
        }
    }

    fn touch(&self, ctx: &ReadCtx, off: u32) {
        if let Some(h) = self.heat.get((off / ctx.node_bytes as u32) as usize) {
            let v = h.load(Relaxed);
            h.store(v.saturating_add(1), Relaxed);
        }
    }

    /// An SST just built from `img`, its segment image: the index nodes and the filter are
    /// taken from the image instead of being read back at the first lookup.
    pub(crate) fn from_image(info: SstInfo, img: &[u8], node_bytes: usize) -> Sst {
        let sst = Sst::new(info);
        sst.pin_from_image(img, node_bytes, false);
        sst
    }

    /// Keeps the index nodes and the filter of `img`, this SST's image, as a first lookup
    /// would (checking them first when the image comes from the device).
    fn pin_from_image(&self, img: &[u8], nb: usize, check: bool) {
        let i = &self.info;
        let index = (i.leaf_count as usize * nb)..(i.root_off as usize + nb);
        if let Some(b) = img.get(index).filter(|b| i.height > 0 && (!check || b.chunks(nb).all(node::verify))) {
            let _ = self.index.set(b.to_vec());
        }
        let filter = i.bloom_off as usize..i.bloom_off as usize + i.bloom_len as usize;
        if let Some(b) = img.get(filter).filter(|b| !check || bloom::verify(b)) {
            let _ = self.bloom.set(b.to_vec());
        }
    }

    /// Puts the leaves of `img`, this SST's image, in the cache if it has room for all of
    /// them without evicting anything. Returns the bytes cached.
    pub(crate) fn cache_leaves(&self, cache: &Cache, img: &[u8], nb: usize) -> u64 {
        let n = self.info.leaf_count as usize;
        if cache.room() < (n * (nb + super::cache::ENTRY_OVERHEAD)) as u64 {
            return 0;
        }
        let mut cached = 0;
        for (l, bytes) in img.chunks_exact(nb).take(n).enumerate() {
            let key = self.leaf_key(l, nb);
            if !cache.contains(key) {
                cache.insert(key, Arc::new(bytes.to_vec()));
                cached += nb as u64;
            }
        }
        cached
    }

    /// Fills the cache from this SST read whole in one device read, as a restarted store
    /// warms up: the index nodes and the filter are pinned as a first lookup would pin them,
    /// and the leaves go into the cache if it has room for all of them without evicting
    /// anything. Returns the leaf bytes cached (0: no room, nothing read).
    pub(crate) fn warm(&self, ctx: &ReadCtx) -> Result<u64> {
        let (nb, n) = (ctx.node_bytes, self.info.leaf_count as usize);
        if ctx.cache.room() < (n * (nb + super::cache::ENTRY_OVERHEAD)) as u64 {
            return Ok(0);
        }
        let seg = self.info.seg;
        let used = (self.info.used_bytes as u64).min(ctx.dev.seg_bytes()) as usize;
        let img = ctx.dev.read(ctx.dev.seg_base(seg), used, IoKind::Warm)?;
        if let Some(l) = img.chunks_exact(nb).take(n).position(|b| !node::verify(b)) {
            return Err(Error::corrupt(seg as u64, (l * nb) as u64, "node checksum mismatch"));
        }
        let cached = self.cache_leaves(&ctx.cache, &img, nb);
        self.pin_from_image(&img, nb, true);
        // What the image did not hold whole and valid is read (and checked) as a lookup would.
        self.index_nodes(ctx)?;
        self.filter(ctx)?;
        Ok(cached)
    }

    /// The cache key of this SST's leaf `leaf`.
    pub(crate) fn leaf_key(&self, leaf: usize, node_bytes: usize) -> u128 {
        node_cache_key(self.uid, (leaf * node_bytes) as u32)
    }

    /// Bytes held in memory outside the cache (filter and index nodes) once loaded.
    pub(crate) fn pinned_bytes(&self) -> usize {
        self.bloom.get().map_or(0, Vec::len) + self.index.get().map_or(0, Vec::len)
    }

    fn index_start(&self, ctx: &ReadCtx) -> u32 {
        self.info.leaf_count * ctx.node_bytes as u32
    }

    /// The index nodes, read and checked once. An SST of one leaf (height 0) has none: its
    /// root is that leaf, at offset 0, before where the index would start.
    fn index_nodes(&self, ctx: &ReadCtx) -> Result<&[u8]> {
        if self.info.height == 0 {
            return Ok(&[]);
        }
        if let Some(i) = self.index.get() {
            return Ok(i);
        }
        let (seg, start) = (self.info.seg, self.index_start(ctx));
        let end = self.info.root_off as u64 + ctx.node_bytes as u64;
        if self.info.root_off < start || end > ctx.dev.seg_bytes() {
            return Err(Error::corrupt(seg as u64, self.info.root_off as u64, "root outside the index area"));
        }
        let at = ctx.dev.seg_base(seg) + start as u64;
        let bytes = ctx.dev.read(at, (end - start as u64) as usize, IoKind::Read)?;
        for (i, n) in bytes.chunks(ctx.node_bytes).enumerate() {
            if !node::verify(n) {
                let off = start as u64 + (i * ctx.node_bytes) as u64;
                return Err(Error::corrupt(seg as u64, off, "node checksum mismatch"));
            }
        }
        Ok(self.index.get_or_init(|| bytes))
    }

    /// Follows index nodes from the root down to the offset of the leaf for `key`.
    fn descend(&self, ctx: &ReadCtx, key: &[u8]) -> Result<u32> {
        let seg = self.info.seg;
        if self.info.height == 0 {
            return Ok(self.info.root_off);
        }
        let start = self.index_start(ctx);
        let index = self.index_nodes(ctx)?;
        let mut off = self.info.root_off;
        for _ in 0..self.info.height {
            let at = off.checked_sub(start).map(|o| o as usize);
            let bytes = at
                .and_then(|o| index.get(o..o + ctx.node_bytes))
                .ok_or_else(|| Error::corrupt(seg as u64, off as u64, "index child outside the index area"))?;
            let node = Node { bytes };
            if node.ty() != INDEX {
                return Err(Error::corrupt(seg as u64, off as u64, "expected an index node"));
            }
            off = node.child_for(key).map_err(bad(seg, off))?;
        }
        if off >= start {
            return Err(Error::corrupt(seg as u64, off as u64, "leaf offset inside the index area"));
        }
        Ok(off)
    }

    fn filter(&self, ctx: &ReadCtx) -> Result<&[u8]> {
        if let Some(f) = self.bloom.get() {
            return Ok(f);
        }
        let at = ctx.dev.seg_base(self.info.seg) + self.info.bloom_off as u64;
        let f = ctx.dev.read(at, self.info.bloom_len as usize, IoKind::Read)?;
        if !bloom::verify(&f) {
            return Err(Error::corrupt(
                self.info.seg as u64,
                self.info.bloom_off as u64,
                "Bloom filter checksum mismatch",
            ));
        }
        Ok(self.bloom.get_or_init(|| f))
    }

    /// Whether the Bloom filter admits the key whose hash is `h`.
    pub(crate) fn may_contain(&self, ctx: &ReadCtx, h: u64) -> Result<bool> {
        Ok(bloom::may_contain(self.filter(ctx)?, h))
    }

    /// The keys of the root node, in order: they divide the SST's entries into about equal
    /// parts (its leaves' first keys when the root is a leaf's parent).
    pub(crate) fn root_keys(&self, ctx: &ReadCtx) -> Result<Vec<Vec<u8>>> {
        let (seg, off) = (self.info.seg, self.info.root_off);
        let n = ctx.node(self.uid, seg, off)?;
        let node = Node { bytes: &n };
        (0..node.count()).map(|i| node.key(i).map(|k| k.to_vec()).map_err(bad(seg, off))).collect()
    }

    /// The entry for `key`, if this SST has one.
    pub(crate) fn get(&self, ctx: &ReadCtx, key: &[u8], h: u64) -> Result<Option<Entry>> {
        if !bloom::may_contain(self.filter(ctx)?, h) {
            return Ok(None);
        }
        let seg = self.info.seg;
        let off = self.descend(ctx, key)?;
        let n = ctx.node(self.uid, seg, off)?;
        self.touch(ctx, off);
        let node = Node { bytes: &n };
        if node.ty() != LEAF {
            return Err(Error::corrupt(seg as u64, off as u64, "expected a leaf"));
        }
        let i = node.lower_bound(key).map_err(bad(seg, off))?;
        if i < node.count() && node.key(i).map_err(bad(seg, off))? == key {
            return Ok(Some(node.entry(i).map_err(bad(seg, off))?));
        }
        Ok(None)
    }

    /// The leaf number whose range holds `key`.
    pub(crate) fn leaf_for(&self, ctx: &ReadCtx, key: &[u8]) -> Result<u32> {
        Ok(self.descend(ctx, key)? / ctx.node_bytes as u32)
    }

    /// All entries of leaf `i`.
    /// The entries of leaf `i` whose keys may lie in `lo..hi` (bounds are applied by key
    /// position only: the caller still filters exclusive bounds), decoded without touching the
    /// rest of the leaf; and whether the leaf holds keys past the far bound of a scan going
    /// forward (`hi`) or in `reverse` (`lo`).
    pub(crate) fn leaf_entries_in(
        &self,
        ctx: &ReadCtx,
        i: u32,
        lo: Bound<&[u8]>,
        hi: Bound<&[u8]>,
        reverse: bool,
    ) -> Result<(Vec<Entry>, bool)> {
        let off = i * ctx.node_bytes as u32;
        let n = ctx.node(self.uid, self.info.seg, off)?;
        self.touch(ctx, off);
        let node = Node { bytes: &n };
        if node.ty() != LEAF {
            return Err(Error::corrupt(self.info.seg as u64, off as u64, "expected a leaf"));
        }
        let count = node.count();
        let start = match lo {
            Bound::Unbounded => 0,
            Bound::Included(k) | Bound::Excluded(k) => node.lower_bound(k).map_err(bad(self.info.seg, off))?,
        };
        let end = match hi {
            Bound::Unbounded => count,
            Bound::Included(k) | Bound::Excluded(k) => {
                let mut e = node.lower_bound(k).map_err(bad(self.info.seg, off))?;
                if e < count && node.key(e).map_err(bad(self.info.seg, off))? == k {
                    e += 1;
                }
                e
            }
        };
        let beyond = if reverse { start > 0 } else { end < count };
        let entries: Result<Vec<Entry>> =
            (start..end.max(start)).map(|j| node.entry(j).map_err(bad(self.info.seg, off))).collect();
        Ok((entries?, beyond))
    }
}

/// Decodes every entry of an SST from its whole segment image (compaction input), checking
/// each leaf's checksum.
pub(crate) fn decode_all(info: &SstInfo, img: &[u8], node_bytes: usize) -> Result<Vec<Entry>> {
    let mut out = Vec::with_capacity(info.entries as usize);
    for l in 0..info.leaf_count as usize {
        let off = l * node_bytes;
        let bytes = img
            .get(off..off + node_bytes)
            .ok_or_else(|| Error::corrupt(info.seg as u64, off as u64, "leaf past the segment"))?;
        if !node::verify(bytes) {
            return Err(Error::corrupt(info.seg as u64, off as u64, "node checksum mismatch"));
        }
        let node = Node { bytes };
        for j in 0..node.count() {
            out.push(node.entry(j).map_err(bad(info.seg, off as u32))?);
        }
    }
    Ok(out)
}
