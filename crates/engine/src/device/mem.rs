//! Segments in memory, with a drive's volatile write cache: a write is visible at once and
//! durable only at the next sync; [`MemStorage::power_loss`] drops every write since the last
//! sync. Tests run whole stores on it, and the fault-injecting storage builds on it.

#![expect(
    clippy::indexing_slicing,
    reason = "blocks are whole BLOCK-sized buffers and offsets are reduced within them"
)]

use super::storage::Storage;
use parking_lot::Mutex;
use std::collections::{HashMap, HashSet};
use std::io;

/// Bytes per stored block.
const BLOCK: u64 = 4096;

/// An in-memory [`Storage`] (see the module documentation).
pub struct MemStorage {
    seg_bits: u32,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// What reads see, by block number; a block never written reads as zeros.
    current: HashMap<u64, Box<[u8]>>,
    /// What survives a power loss.
    durable: HashMap<u64, Box<[u8]>>,
    /// Blocks written (or punched) since the last sync.
    dirty: HashSet<u64>,
    len: u64,
    durable_len: u64,
}

impl MemStorage {
    /// Empty storage with segments of `1 << seg_bits` bytes.
    pub fn new(seg_bits: u32) -> MemStorage {
        MemStorage { seg_bits, state: Mutex::new(State::default()) }
    }

    /// Power fails: every write since the last completed sync is lost.
    pub fn power_loss(&self) {
        let mut s = self.state.lock();
        let st = &mut *s;
        for b in st.dirty.drain() {
            match st.durable.get(&b) {
                Some(d) => st.current.insert(b, d.clone()),
                None => st.current.remove(&b),
            };
        }
        st.len = st.durable_len;
    }

    fn at(&self, seg: u32, off: u64) -> u64 {
        (u64::from(seg) << self.seg_bits) + off
    }
}

/// Calls `f(block, offset in block, range of the buffer)` for each block `len` bytes at `pos`
/// touch.
fn blocks(pos: u64, len: usize, mut f: impl FnMut(u64, usize, std::ops::Range<usize>)) {
    let mut done = 0;
    while done < len {
        let p = pos + done as u64;
        let within = (p % BLOCK) as usize;
        let n = (BLOCK as usize - within).min(len - done);
        f(p / BLOCK, within, done..done + n);
        done += n;
    }
}

impl Storage for MemStorage {
    fn seg_bits(&self) -> u32 {
        self.seg_bits
    }

    fn read(&self, seg: u32, off: u64, buf: &mut [u8]) -> io::Result<usize> {
        let s = self.state.lock();
        let pos = self.at(seg, off);
        blocks(pos, buf.len(), |b, within, r| {
            let dst = &mut buf[r];
            match s.current.get(&b) {
                Some(blk) => dst.copy_from_slice(&blk[within..within + dst.len()]),
                None => dst.fill(0),
            }
        });
        Ok(buf.len())
    }

    fn write(&self, seg: u32, off: u64, buf: &[u8]) -> io::Result<()> {
        let mut s = self.state.lock();
        let st = &mut *s;
        let pos = self.at(seg, off);
        blocks(pos, buf.len(), |b, within, r| {
            let blk = st.current.entry(b).or_insert_with(|| vec![0; BLOCK as usize].into_boxed_slice());
            blk[within..within + r.len()].copy_from_slice(&buf[r]);
            st.dirty.insert(b);
        });
        st.len = st.len.max(pos + buf.len() as u64);
        Ok(())
    }

    fn sync(&self) -> io::Result<()> {
        let mut s = self.state.lock();
        let st = &mut *s;
        for b in st.dirty.drain() {
            match st.current.get(&b) {
                Some(c) => st.durable.insert(b, c.clone()),
                None => st.durable.remove(&b),
            };
        }
        st.durable_len = st.len;
        Ok(())
    }

    fn len(&self) -> io::Result<u64> {
        Ok(self.state.lock().len)
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        let mut s = self.state.lock();
        let st = &mut *s;
        if len < st.len {
            let gone: Vec<u64> = st.current.keys().copied().filter(|&b| b * BLOCK >= len).collect();
            for b in gone {
                st.current.remove(&b);
                st.dirty.insert(b);
            }
        }
        st.len = len;
        Ok(())
    }

    fn punch(&self, seg: u32, off: u64, len: u64) -> bool {
        let mut s = self.state.lock();
        let st = &mut *s;
        blocks(self.at(seg, off), len as usize, |b, within, r| {
            if r.len() == BLOCK as usize {
                st.current.remove(&b);
            } else if let Some(blk) = st.current.get_mut(&b) {
                blk[within..within + r.len()].fill(0);
            }
            st.dirty.insert(b);
        });
        true
    }

    fn allocate(&self, _seg: u32, _off: u64, _len: u64) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unsynced_writes_are_lost_with_power() {
        let m = MemStorage::new(16);
        m.write(1, 4096, &[7; 8192]).unwrap();
        m.sync().unwrap();
        m.write(1, 8192, &[9; 4096]).unwrap();
        m.write(2, 100, &[5; 10]).unwrap();
        let mut b = vec![0; 12288];
        m.read(1, 4096, &mut b).unwrap();
        assert!(b[..4096].iter().all(|&x| x == 7) && b[4096..8192].iter().all(|&x| x == 9));
        assert_eq!(m.len().unwrap(), (2 << 16) + 110);
        m.power_loss();
        m.read(1, 4096, &mut b).unwrap();
        assert!(b[..8192].iter().all(|&x| x == 7) && b[8192..].iter().all(|&x| x == 0));
        assert_eq!(m.len().unwrap(), (1 << 16) + 12288);
        let mut c = [1u8; 10];
        m.read(2, 100, &mut c).unwrap();
        assert_eq!(c, [0; 10]);
        assert!(m.punch(1, 4096, 4096));
        m.read(1, 4096, &mut b).unwrap();
        assert!(b[..4096].iter().all(|&x| x == 0));
    }
}
