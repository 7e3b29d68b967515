//! Small writes a storage node holds in memory before they reach its device (Nova-LSM's LogC):
//! a processing node pushes its log tails' last blocks before it acknowledges a write, often
//! the same block again and again, and a device write each time would bound it by the disk's
//! I/O rate. A staged block's checksum entry is written at once (to the page cache), its data
//! later: by the flusher (every [`FLUSH_EVERY`]), by a Sync of its store, or by a larger write
//! over it. So a node killed before the flush answers "corrupt" for the block (its entry names
//! data the file does not hold) and the client rebuilds it from the other fragments, as for
//! any block a node lost.

use crate::stripe::BLOCK;
use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::time::Duration;

/// Writes of at most this many bytes are staged; larger ones go to the device at once.
pub const MAX_WRITE: usize = 64 << 10;
/// Staged bytes past which a write waits for a flush first.
pub const MAX_BYTES: usize = 64 << 20;
/// How often the flusher writes staged blocks out.
pub const FLUSH_EVERY: Duration = Duration::from_millis(20);

/// A fragment: (store, segment, fragment index).
pub type Key = (String, u32, u8);

/// A run of consecutive staged blocks to write out: its first block, its bytes, and each
/// block's version (a block staged again meanwhile stays staged).
pub struct Run {
    /// The run's first block.
    pub block: u64,
    /// Its bytes, whole blocks.
    pub data: Vec<u8>,
    versions: Vec<u64>,
}

/// A fragment's staged blocks: block -> (version, its bytes).
type Blocks = BTreeMap<u64, (u64, Box<[u8]>)>;

/// The staged blocks of every fragment.
#[derive(Default)]
pub struct Staged {
    map: Mutex<HashMap<Key, Blocks>>,
    bytes: AtomicUsize,
    version: AtomicU64,
}

impl Staged {
    /// Stages whole blocks of `key` from block `block` on.
    pub fn put(&self, key: &Key, block: u64, data: &[u8]) {
        let mut m = self.map.lock();
        let blocks = m.entry(key.clone()).or_default();
        for (i, b) in data.chunks_exact(BLOCK).enumerate() {
            let v = self.version.fetch_add(1, Relaxed);
            if blocks.insert(block + i as u64, (v, b.into())).is_none() {
                self.bytes.fetch_add(BLOCK, Relaxed);
            }
        }
    }

    /// Copies of the staged blocks of `key` in `b0..b1`.
    pub fn copy(&self, key: &Key, b0: u64, b1: u64) -> Vec<(u64, Box<[u8]>)> {
        let m = self.map.lock();
        let Some(blocks) = m.get(key) else { return Vec::new() };
        blocks.range(b0..b1).map(|(&b, (_, d))| (b, d.clone())).collect()
    }

    /// Forgets the staged blocks of `key` in `b0..b1` (a write to the device replaces them).
    pub fn forget(&self, key: &Key, b0: u64, b1: u64) {
        let mut m = self.map.lock();
        let Some(blocks) = m.get_mut(key) else { return };
        let gone: Vec<u64> = blocks.range(b0..b1).map(|(&b, _)| b).collect();
        for b in gone {
            blocks.remove(&b);
            self.bytes.fetch_sub(BLOCK, Relaxed);
        }
        if blocks.is_empty() {
            m.remove(key);
        }
    }

    /// Forgets every staged block of the segment's fragments.
    pub fn forget_segment(&self, store: &str, seg: u32) {
        let mut m = self.map.lock();
        m.retain(|k, blocks| {
            let keep = !(k.0 == store && k.1 == seg);
            if !keep {
                self.bytes.fetch_sub(blocks.len() * BLOCK, Relaxed);
            }
            keep
        });
    }

    /// The fragments with staged blocks that `pick` chooses.
    pub fn keys(&self, pick: impl Fn(&Key) -> bool) -> Vec<Key> {
        self.map.lock().keys().filter(|k| pick(k)).cloned().collect()
    }

    /// The staged blocks of `key` as runs of consecutive blocks.
    pub fn runs(&self, key: &Key) -> Vec<Run> {
        let m = self.map.lock();
        let Some(blocks) = m.get(key) else { return Vec::new() };
        let mut runs: Vec<Run> = Vec::new();
        for (&b, (v, d)) in blocks {
            match runs.last_mut() {
                Some(r) if r.block + r.versions.len() as u64 == b && r.data.len() < crate::wire::MAX_IO => {
                    r.data.extend_from_slice(d);
                    r.versions.push(*v);
                }
                _ => runs.push(Run { block: b, data: d.to_vec(), versions: vec![*v] }),
            }
        }
        runs
    }

    /// Forgets the blocks of `run` that were not staged again since [`Staged::runs`].
    pub fn settle(&self, key: &Key, run: &Run) {
        let mut m = self.map.lock();
        let Some(blocks) = m.get_mut(key) else { return };
        for (i, v) in run.versions.iter().enumerate() {
            let b = run.block + i as u64;
            if blocks.get(&b).is_some_and(|(now, _)| now == v) {
                blocks.remove(&b);
                self.bytes.fetch_sub(BLOCK, Relaxed);
            }
        }
        if blocks.is_empty() {
            m.remove(key);
        }
    }

    /// Bytes staged.
    pub fn bytes(&self) -> usize {
        self.bytes.load(Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> Key {
        ("s".into(), 1, 0)
    }

    #[test]
    fn runs_settle_only_blocks_not_staged_again() {
        let s = Staged::default();
        s.put(&key(), 3, &[1; 2 * BLOCK]);
        s.put(&key(), 7, &[2; BLOCK]);
        let runs = s.runs(&key());
        assert_eq!(runs.iter().map(|r| (r.block, r.data.len() / BLOCK)).collect::<Vec<_>>(), vec![(3, 2), (7, 1)]);
        s.put(&key(), 4, &[9; BLOCK]);
        for r in &runs {
            s.settle(&key(), r);
        }
        let left = s.copy(&key(), 0, 100);
        assert_eq!(left.len(), 1, "block 4 was staged again and stays");
        assert_eq!((left[0].0, left[0].1[0]), (4, 9));
        assert_eq!(s.bytes(), BLOCK);
        s.forget_segment("s", 1);
        assert_eq!(s.bytes(), 0);
        assert!(s.keys(|_| true).is_empty());
    }
}
