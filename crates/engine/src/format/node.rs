//! B+-tree nodes of an SST: leaves (entries) and index nodes (pivots).
//!
//! ```text
//! header  0 u8 type (1 leaf, 2 index) | 1 u8 0 | 2 u16 count | 4 u32 crc32c | 8 u16 data_start | 10 u16 0
//! slots   12.. count × u16 cell offset, growing forward
//! cells   growing backward from the node's end
//! leaf cell:  u8 kind | u16 key_len | u64 lsn | key | [u64 expire_at if kind & 0x10] | payload
//!             kind & 0x0f: 0 inline: u32 value_len, value; 1 medium / 2 large: u64 ptr, u32 len,
//!             u32 salt; 3 tombstone. Flag 0x10 (format 3): the pair expires at expire_at (ms since
//!             the Unix epoch); never with a tombstone.
//! index cell: u16 key_len | key | u32 child offset within the segment
//! ```
//! The checksum covers the whole node with the crc field taken as zero.

#![expect(
    clippy::indexing_slicing,
    reason = "node slots are read after the cell count and offsets are checked against the node length (fuzzed: sst_node)"
)]

use crate::format::entry::{Entry, Value};
use halyard_codec::{get_u16, get_u32, get_u64, put_u16, put_u32};

/// Bytes a leaf or index cell needs besides key and value.
pub(crate) const CELL_OVERHEAD: usize = 40;
/// Bytes of a node header.
pub(crate) const NODE_HEADER: usize = 12;

pub(crate) const LEAF: u8 = 1;
pub(crate) const INDEX: u8 = 2;

/// Builds one node in place.
pub(crate) struct NodeBuf {
    pub buf: Vec<u8>,
    count: usize,
    data_start: usize,
}

impl NodeBuf {
    pub(crate) fn new(size: usize, ty: u8) -> NodeBuf {
        let mut buf = vec![0u8; size];
        buf[0] = ty;
        NodeBuf { buf, count: 0, data_start: size }
    }

    pub(crate) fn count(&self) -> usize {
        self.count
    }

    pub(crate) fn fits(&self, cell_len: usize) -> bool {
        NODE_HEADER + 2 * (self.count + 1) + cell_len <= self.data_start
    }

    pub(crate) fn push(&mut self, cell: &[u8]) {
        self.data_start -= cell.len();
        self.buf[self.data_start..self.data_start + cell.len()].copy_from_slice(cell);
        put_u16(&mut self.buf, NODE_HEADER + 2 * self.count, self.data_start as u16);
        self.count += 1;
    }

    /// Seals the node (count, data start, checksum) and returns its bytes.
    pub(crate) fn finish(mut self) -> Vec<u8> {
        put_u16(&mut self.buf, 2, self.count as u16);
        put_u16(&mut self.buf, 8, self.data_start as u16);
        seal(&mut self.buf);
        self.buf
    }
}

/// Writes the checksum of a node (also after pointers in it were rewritten).
pub(crate) fn seal(node: &mut [u8]) {
    put_u32(node, 4, 0);
    let crc = crc32c::crc32c(node);
    put_u32(node, 4, crc);
}

pub(crate) fn verify(node: &[u8]) -> bool {
    let Some(stored) = get_u32(node, 4) else {
        return false;
    };
    let mut crc = crc32c::crc32c(&node[..4]);
    crc = crc32c::crc32c_append(crc, &[0, 0, 0, 0]);
    crc = crc32c::crc32c_append(crc, &node[8..]);
    crc == stored
}

/// Leaf cell kind flag: an expiry time follows the key.
pub(crate) const EXPIRES: u8 = 0x10;

pub(crate) fn leaf_cell(e: &Entry, out: &mut Vec<u8>) {
    out.clear();
    let at = e.value.expire_at();
    let kind = match e.value.base() {
        Value::Inline(_) => 0,
        Value::Medium { .. } => 1,
        Value::Large { .. } => 2,
        Value::Tombstone | Value::Expiring { .. } => 3,
    };
    out.push(if at != 0 { kind | EXPIRES } else { kind });
    out.extend_from_slice(&(e.key.len() as u16).to_le_bytes());
    out.extend_from_slice(&e.lsn.to_le_bytes());
    out.extend_from_slice(&e.key);
    if at != 0 {
        out.extend_from_slice(&at.to_le_bytes());
    }
    match e.value.base() {
        Value::Inline(v) => {
            out.extend_from_slice(&(v.len() as u32).to_le_bytes());
            out.extend_from_slice(v);
        }
        Value::Medium { ptr, len, salt } | Value::Large { ptr, len, salt } => {
            out.extend_from_slice(&ptr.to_le_bytes());
            out.extend_from_slice(&len.to_le_bytes());
            out.extend_from_slice(&salt.to_le_bytes());
        }
        Value::Tombstone | Value::Expiring { .. } => {}
    }
}

pub(crate) fn index_cell(key: &[u8], child: u32, out: &mut Vec<u8>) {
    out.clear();
    out.extend_from_slice(&(key.len() as u16).to_le_bytes());
    out.extend_from_slice(key);
    out.extend_from_slice(&child.to_le_bytes());
}

/// Malformed node contents.
#[derive(Debug)]
pub(crate) struct BadNode;

/// A verified node.
pub(crate) struct Node<'a> {
    pub bytes: &'a [u8],
}

impl<'a> Node<'a> {
    pub(crate) fn ty(&self) -> u8 {
        self.bytes[0]
    }

    pub(crate) fn count(&self) -> usize {
        get_u16(self.bytes, 2).unwrap_or(0) as usize
    }

    fn cell(&self, i: usize) -> Result<&'a [u8], BadNode> {
        let off = get_u16(self.bytes, NODE_HEADER + 2 * i).ok_or(BadNode)? as usize;
        self.bytes.get(off..).ok_or(BadNode)
    }

    pub(crate) fn key(&self, i: usize) -> Result<&'a [u8], BadNode> {
        let c = self.cell(i)?;
        if self.ty() == LEAF {
            let n = get_u16(c, 1).ok_or(BadNode)? as usize;
            c.get(11..11 + n).ok_or(BadNode)
        } else {
            let n = get_u16(c, 0).ok_or(BadNode)? as usize;
            c.get(2..2 + n).ok_or(BadNode)
        }
    }

    pub(crate) fn child(&self, i: usize) -> Result<u32, BadNode> {
        let c = self.cell(i)?;
        let n = get_u16(c, 0).ok_or(BadNode)? as usize;
        get_u32(c, 2 + n).ok_or(BadNode)
    }

    pub(crate) fn entry(&self, i: usize) -> Result<Entry, BadNode> {
        let c = self.cell(i)?;
        let kind = *c.first().ok_or(BadNode)?;
        let n = get_u16(c, 1).ok_or(BadNode)? as usize;
        let lsn = get_u64(c, 3).ok_or(BadNode)?;
        let key = c.get(11..11 + n).ok_or(BadNode)?.to_vec();
        let mut p = 11 + n;
        let mut at = 0;
        if kind & EXPIRES != 0 {
            at = get_u64(c, p).filter(|a| *a != 0).ok_or(BadNode)?;
            p += 8;
        }
        let value = match kind & !EXPIRES {
            0 => {
                let vl = get_u32(c, p).ok_or(BadNode)? as usize;
                Value::Inline(c.get(p + 4..p + 4 + vl).ok_or(BadNode)?.to_vec())
            }
            1 | 2 => {
                let ptr = get_u64(c, p).ok_or(BadNode)?;
                let len = get_u32(c, p + 8).ok_or(BadNode)?;
                let salt = get_u32(c, p + 12).ok_or(BadNode)?;
                if kind == 1 {
                    Value::Medium { ptr, len, salt }
                } else {
                    Value::Large { ptr, len, salt }
                }
            }
            // One meaning, one encoding: a tombstone does not expire.
            3 if at == 0 => Value::Tombstone,
            _ => return Err(BadNode),
        };
        Ok(Entry { key, lsn, value: Value::expiring(at, value) })
    }

    /// Index of the first key >= `key` (count if none).
    pub(crate) fn lower_bound(&self, key: &[u8]) -> Result<usize, BadNode> {
        let (mut lo, mut hi) = (0, self.count());
        while lo < hi {
            let mid = (lo + hi) / 2;
            if self.key(mid)? < key {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        Ok(lo)
    }

    /// In an index node: the child whose range holds `key` (the last pivot <= key, or the first).
    pub(crate) fn child_for(&self, key: &[u8]) -> Result<u32, BadNode> {
        let (mut lo, mut hi) = (0, self.count());
        while lo < hi {
            let mid = (lo + hi) / 2;
            if self.key(mid)? <= key {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        self.child(lo.saturating_sub(1))
    }

    /// Rewrites the log pointers of a leaf through `map` ((large, primary segment, salt) ->
    /// local segment; `large`: a pointer into the large log, else the medium log). Returns
    /// false if a pointer's segment is missing from the map.
    pub(crate) fn rewrite_pointers(
        node: &mut [u8],
        seg_bits: u32,
        map: &dyn Fn(bool, u32, u32) -> Option<u32>,
    ) -> Result<bool, BadNode> {
        if node[0] != LEAF {
            return Ok(true);
        }
        let count = get_u16(node, 2).ok_or(BadNode)? as usize;
        for i in 0..count {
            let off = get_u16(node, NODE_HEADER + 2 * i).ok_or(BadNode)? as usize;
            let kind = *node.get(off).ok_or(BadNode)?;
            if kind & !EXPIRES == 1 || kind & !EXPIRES == 2 {
                let n = get_u16(node, off + 1).ok_or(BadNode)? as usize;
                let p = off + 11 + n + if kind & EXPIRES != 0 { 8 } else { 0 };
                let ptr = get_u64(node, p).ok_or(BadNode)?;
                let salt = get_u32(node, p + 12).ok_or(BadNode)?;
                let seg = (ptr >> seg_bits) as u32;
                let Some(local) = map(kind & !EXPIRES == 2, seg, salt) else {
                    return Ok(false);
                };
                let within = ptr & ((1u64 << seg_bits) - 1);
                let new = ((local as u64) << seg_bits) | within;
                node.get_mut(p..p + 8).ok_or(BadNode)?.copy_from_slice(&new.to_le_bytes());
            }
        }
        seal(node);
        Ok(true)
    }
}
