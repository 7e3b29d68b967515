//! Reads, writes and syncs of a [`RemoteStorage`]: the [`Storage`] the engine calls.

#![expect(clippy::indexing_slicing, reason = "buffers are sized here to whole blocks of the ranges they hold")]

use super::conn::Fail;
use super::storage::{chunks, invalid, RemoteStorage, Seg};
use crate::stripe::{fragment_range, segment_block, xor_into, BLOCK};
use crate::wire::{Code, Reply, Request};
use halyard_engine::Storage;
use std::io;
use std::sync::atomic::Ordering::Relaxed;

/// The fragments a read could not get: (fragment, what its node said).
pub(super) type Missing = Vec<(usize, Fail)>;

fn aligned(off: u64, len: usize) -> io::Result<(u64, u64)> {
    if !off.is_multiple_of(BLOCK as u64) || !len.is_multiple_of(BLOCK) {
        return Err(invalid(format!("remote storage takes whole 4 KiB blocks ({len} bytes at {off})")));
    }
    Ok((off / BLOCK as u64, (off + len as u64) / BLOCK as u64))
}

impl RemoteStorage {
    /// Reads segment blocks `b0..b1` from their data fragments, all at once: the blocks, and
    /// the fragments that could not be read (their blocks left zero).
    pub(super) fn read_blocks(&self, seg: u32, s: &Seg, b0: u64, b1: u64) -> (Vec<u8>, Missing) {
        let mut out = vec![0u8; ((b1 - b0) as usize) * BLOCK];
        let (mut calls, mut whom) = (Vec::new(), Vec::new());
        for i in 0..s.rho {
            for (block, blocks) in chunks(fragment_range(i, b0, b1, s.rho)) {
                calls.push((s.nodes[i], self.read_req(seg, i, block, blocks)));
                whom.push((i, block, blocks as usize));
            }
        }
        let mut missing = Vec::new();
        for ((i, block, n), r) in whom.into_iter().zip(self.fan_out(calls)) {
            match r {
                Ok(Reply::Data(d)) if d.len() == n * BLOCK => {
                    self.counters.received.fetch_add(d.len() as u64, Relaxed);
                    for (k, b) in d.chunks_exact(BLOCK).enumerate() {
                        let at = (segment_block(i, block + k as u64, s.rho) - b0) as usize * BLOCK;
                        out[at..at + BLOCK].copy_from_slice(b);
                    }
                }
                Ok(other) => missing.push((i, Fail::Refused(Code::Malformed, format!("{other:?}")))),
                Err(f) => missing.push((i, f)),
            }
        }
        (out, missing)
    }

    pub(super) fn read_req(&self, seg: u32, frag: usize, block: u64, blocks: u32) -> Request {
        Request::Read { store: self.o.store.clone(), seg, frag: frag as u8, block, blocks }
    }

    /// Reads blocks `b0..b1` rebuilding one missing fragment from the others; the caller holds
    /// the segment's shard, so no write changes the stripes meanwhile.
    pub(super) fn read_rebuilding(&self, seg: u32, b0: u64, b1: u64) -> io::Result<Vec<u8>> {
        let Some(s) = self.seg(seg) else { return Ok(vec![0; ((b1 - b0) as usize) * BLOCK]) };
        let (mut out, mut missing) = self.read_blocks(seg, &s, b0, b1);
        let Some((x, why)) = missing.pop() else { return Ok(out) };
        if let Some((i, f)) = missing.into_iter().find(|(i, _)| *i != x) {
            return Err(f.into_io(&format!(
                "{} (and {} for fragment {x})",
                self.addr(s.nodes[i]),
                self.addr(s.nodes[x])
            )));
        }
        self.counters.degraded.fetch_add(1, Relaxed);
        let fr = fragment_range(x, b0, b1, s.rho);
        let rebuilt = self.rebuild_blocks(seg, &s, x, fr.clone())?;
        for (k, b) in rebuilt.chunks_exact(BLOCK).enumerate() {
            let at = (segment_block(x, fr.start + k as u64, s.rho) - b0) as usize * BLOCK;
            out[at..at + BLOCK].copy_from_slice(b);
        }
        self.mend(seg, &s, x, fr.start, &rebuilt, &why)?;
        Ok(out)
    }

    /// Blocks `r` of fragment `x` (data or parity), rebuilt as the XOR of the same blocks of
    /// every other fragment of the segment.
    pub(super) fn rebuild_blocks(&self, seg: u32, s: &Seg, x: usize, r: std::ops::Range<u64>) -> io::Result<Vec<u8>> {
        let mut acc = vec![0u8; ((r.end - r.start) as usize) * BLOCK];
        let others: Vec<usize> = (0..=s.rho).filter(|&i| i != x).collect();
        for (block, blocks) in chunks(r.clone()) {
            // Every other fragment's blocks at once: a rebuild waits for the slowest, not the sum.
            let calls = others.iter().map(|&i| (s.nodes[i], self.read_req(seg, i, block, blocks))).collect();
            let at = ((block - r.start) as usize) * BLOCK;
            let dst = &mut acc[at..at + blocks as usize * BLOCK];
            for (&i, reply) in others.iter().zip(self.fan_out(calls)) {
                match reply {
                    Ok(Reply::Data(d)) if d.len() == dst.len() => {
                        self.counters.received.fetch_add(d.len() as u64, Relaxed);
                        xor_into(dst, &d);
                    }
                    Err(f) => return Err(f.into_io(&self.addr(s.nodes[i]))),
                    other => {
                        return Err(io::Error::other(format!("storage node {}: {other:?}", self.addr(s.nodes[i]))))
                    }
                }
            }
        }
        Ok(acc)
    }

    /// After a rebuilding read: a corrupt block is written back in place; a fragment its node
    /// lost moves to another node. An unreachable node is left to the repair thread.
    fn mend(&self, seg: u32, s: &Seg, x: usize, block: u64, data: &[u8], why: &Fail) -> io::Result<()> {
        match why {
            Fail::Refused(Code::Corrupt, _) => {
                let req =
                    Request::Write { store: self.o.store.clone(), seg, frag: x as u8, block, data: data.to_vec() };
                if self.fan_out(vec![(s.nodes[x], req)]).pop().is_some_and(|r| r.is_ok()) {
                    self.counters.repaired.fetch_add((data.len() / BLOCK) as u64, Relaxed);
                    self.dirty.lock().insert(s.nodes[x]);
                    return Ok(());
                }
                self.replace(seg, x)
            }
            Fail::Refused(Code::Fenced, _) => self.check_fenced(),
            Fail::Refused(..) => self.replace(seg, x),
            Fail::Unreachable(_) => Ok(()),
        }
    }

    /// The placement of a segment about to be written, choosing one for a new segment.
    fn placement_for_write(&self, seg: u32) -> io::Result<Seg> {
        if let Some(s) = self.seg(seg) {
            return Ok(s);
        }
        let mut exclude = Vec::new();
        for _ in 0..3 {
            let nodes = self.choose(self.o.rho + 1, &exclude)?;
            let s = Seg { gen: self.next_gen(), rho: self.o.rho, nodes };
            let p = self.placement_of(&s);
            // A node may keep files of the segment's earlier life (it was down when the
            // segment was deleted): they go first, so that unwritten blocks read as zeros.
            let deletes = s.nodes.iter().map(|&n| (n, Request::Delete { store: self.o.store.clone(), seg })).collect();
            drop(self.fan_out(deletes));
            let calls = (0..=s.rho)
                .map(|i| {
                    let req = Request::Place { store: self.o.store.clone(), seg, frag: i as u8, placement: p.clone() };
                    (s.nodes[i], req)
                })
                .collect();
            let failed: Vec<usize> =
                self.fan_out(calls).iter().enumerate().filter(|(_, r)| r.is_err()).map(|(i, _)| s.nodes[i]).collect();
            if failed.is_empty() {
                self.segs.write().insert(seg, s.clone());
                return Ok(s);
            }
            self.check_fenced()?;
            exclude.extend(failed);
        }
        Err(io::Error::other("no set of storage nodes took a new segment's fragments (three tries)"))
    }

    /// The whole stripes around blocks `b0..b1`, holding `buf` where it goes and the blocks
    /// around it as stored (from the last write's stripe where it has them).
    fn stripes(
        &self,
        seg: u32,
        tail: Option<&(u64, Vec<u8>)>,
        rho: usize,
        b0: u64,
        b1: u64,
        buf: &[u8],
    ) -> io::Result<Vec<u8>> {
        let rho64 = rho as u64;
        let lo = b0 / rho64 * rho64;
        let hi = (b1.div_ceil(rho64) * rho64).max(lo + rho64);
        let mut st = vec![0u8; ((hi - lo) as usize) * BLOCK];
        let end = hi.min(self.seg_blocks());
        for (g0, g1) in [(lo, b0), (b1, end)] {
            if g0 >= g1 {
                continue;
            }
            let dst = &mut st[((g0 - lo) as usize) * BLOCK..((g1 - lo) as usize) * BLOCK];
            match tail {
                Some((t, blocks)) if *t <= g0 && g1 <= t + rho64 => {
                    dst.copy_from_slice(&blocks[((g0 - t) as usize) * BLOCK..((g1 - t) as usize) * BLOCK])
                }
                _ => dst.copy_from_slice(&self.read_rebuilding(seg, g0, g1)?),
            }
        }
        st[((b0 - lo) as usize) * BLOCK..((b1 - lo) as usize) * BLOCK].copy_from_slice(buf);
        Ok(st)
    }

    /// The Write requests of a write: each data fragment's new blocks, and the parity of every
    /// stripe touched, computed from `st` (whole stripes from block `lo`).
    fn write_calls(&self, seg: u32, s: &Seg, st: &[u8], lo: u64, b0: u64, b1: u64) -> Vec<(usize, Request)> {
        let rho = s.rho;
        let mut calls = Vec::new();
        let write = |frag: usize, block: u64, data: Vec<u8>| Request::Write {
            store: self.o.store.clone(),
            seg,
            frag: frag as u8,
            block,
            data,
        };
        for i in 0..rho {
            for (block, blocks) in chunks(fragment_range(i, b0, b1, rho)) {
                let mut data = Vec::with_capacity(blocks as usize * BLOCK);
                for fb in block..block + u64::from(blocks) {
                    let at = ((segment_block(i, fb, rho) - lo) as usize) * BLOCK;
                    data.extend_from_slice(&st[at..at + BLOCK]);
                }
                calls.push((s.nodes[i], write(i, block, data)));
            }
        }
        let stripe_bytes = rho * BLOCK;
        let mut parity = Vec::with_capacity(st.len() / rho);
        for stripe in st.chunks_exact(stripe_bytes) {
            let mut p = stripe[..BLOCK].to_vec();
            for b in stripe[BLOCK..].chunks_exact(BLOCK) {
                xor_into(&mut p, b);
            }
            parity.extend_from_slice(&p);
        }
        let s0 = lo / rho as u64;
        for (block, blocks) in chunks(s0..s0 + (parity.len() / BLOCK) as u64) {
            let at = ((block - s0) as usize) * BLOCK;
            calls.push((s.nodes[rho], write(rho, block, parity[at..at + blocks as usize * BLOCK].to_vec())));
        }
        calls
    }

    fn write_locked(&self, seg: u32, b0: u64, b1: u64, buf: &[u8]) -> io::Result<()> {
        let mut shard = self.shard(seg).lock();
        let s = self.placement_for_write(seg)?;
        let tail = shard.tails.remove(&seg);
        let st = self.stripes(seg, tail.as_ref(), s.rho, b0, b1, buf)?;
        let rho = s.rho as u64;
        let lo = b0 / rho * rho;
        let calls = self.write_calls(seg, &s, &st, lo, b0, b1);
        let writes = calls.iter().filter_map(|(_, r)| match r {
            Request::Write { frag, data, .. } => Some((usize::from(*frag), data.len() as u64)),
            _ => None,
        });
        let (frags, sent): (Vec<usize>, Vec<u64>) = writes.unzip();
        self.counters.sent.fetch_add(sent.iter().sum(), Relaxed);
        let results = self.fan_out(calls);
        self.check_fenced()?;
        let mut failed: Vec<usize> = results.iter().zip(&frags).filter(|(r, _)| r.is_err()).map(|(_, &f)| f).collect();
        failed.sort_unstable();
        failed.dedup();
        match failed.as_slice() {
            [] => {}
            // The others took the write: rebuilding the failed fragment from them gives its new
            // contents.
            [x] => self.replace(seg, *x)?,
            _ => {
                let why: Vec<String> = results
                    .into_iter()
                    .zip(frags)
                    .filter_map(|(r, f)| r.err().map(|e| e.into_io(&self.addr(s.nodes[f])).to_string()))
                    .collect();
                return Err(io::Error::other(format!(
                    "two storage nodes of segment {seg} failed a write: {}",
                    why.join("; ")
                )));
            }
        }
        if !b1.is_multiple_of(rho) {
            let t = (b1 - 1) / rho * rho;
            let at = ((t - lo) as usize) * BLOCK;
            shard.tails.insert(seg, (t, st[at..at + s.rho * BLOCK].to_vec()));
        }
        self.dirty.lock().extend(self.seg(seg).map_or(s.nodes, |s| s.nodes));
        Ok(())
    }

    /// Syncs every node written since the last sync. A node that fails its sync may have lost
    /// those writes: its fragments move, rebuilt from the others, and the nodes they moved to
    /// are synced in the next round (writes that arrive meanwhile wait for the next sync).
    fn sync_all(&self) -> io::Result<()> {
        for _ in 0..4 {
            let nodes: Vec<usize> = self.dirty.lock().drain().collect();
            let calls = nodes.iter().map(|&n| (n, Request::Sync { store: self.o.store.clone() })).collect();
            let failed: Vec<usize> =
                self.fan_out(calls).iter().zip(&nodes).filter(|(r, _)| r.is_err()).map(|(_, &n)| n).collect();
            if failed.is_empty() {
                return Ok(());
            }
            for n in failed {
                self.evacuate(n)?;
            }
        }
        Err(io::Error::other("storage nodes kept failing their syncs"))
    }

    pub(super) fn delete_segment(&self, seg: u32) {
        if self.is_fenced() {
            return;
        }
        let mut shard = self.shard(seg).lock();
        shard.tails.remove(&seg);
        let Some(s) = self.segs.write().remove(&seg) else { return };
        let calls = s.nodes.iter().map(|&n| (n, Request::Delete { store: self.o.store.clone(), seg })).collect();
        drop(self.fan_out(calls));
    }
}

impl Storage for RemoteStorage {
    fn seg_bits(&self) -> u32 {
        self.o.seg_bits
    }

    fn read(&self, seg: u32, off: u64, buf: &mut [u8]) -> io::Result<usize> {
        self.check_fenced()?;
        let (b0, b1) = aligned(off, buf.len())?;
        if b0 == b1 {
            return Ok(0);
        }
        let data = match self.seg(seg) {
            None => {
                buf.fill(0);
                return Ok(buf.len());
            }
            Some(s) => match self.read_blocks(seg, &s, b0, b1) {
                (d, missing) if missing.is_empty() => d,
                _ => {
                    self.check_fenced()?;
                    let _shard = self.shard(seg).lock();
                    self.read_rebuilding(seg, b0, b1)?
                }
            },
        };
        buf.copy_from_slice(&data);
        Ok(buf.len())
    }

    fn write(&self, seg: u32, off: u64, buf: &[u8]) -> io::Result<()> {
        self.check_fenced()?;
        let (b0, b1) = aligned(off, buf.len())?;
        if b1 > self.seg_blocks() {
            return Err(invalid(format!("write past the end of segment {seg}")));
        }
        if b0 == b1 {
            return Ok(());
        }
        self.write_locked(seg, b0, b1, buf)?;
        self.len.fetch_max((u64::from(seg) << self.o.seg_bits) + off + buf.len() as u64, Relaxed);
        Ok(())
    }

    fn sync(&self) -> io::Result<()> {
        self.check_fenced()?;
        self.sync_all()
    }

    fn len(&self) -> io::Result<u64> {
        Ok(self.len.load(Relaxed))
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.check_fenced()?;
        let keep = len.div_ceil(1 << self.o.seg_bits);
        let gone: Vec<u32> = self.segs.read().keys().copied().filter(|&s| u64::from(s) >= keep).collect();
        for seg in gone {
            self.delete_segment(seg);
        }
        self.len.store(len, Relaxed);
        Ok(())
    }

    fn punch(&self, seg: u32, off: u64, len: u64) -> bool {
        if off != 0 || len != 1 << self.o.seg_bits {
            return false;
        }
        self.delete_segment(seg);
        true
    }

    /// Storage nodes reserve nothing ahead: a segment's fragments are made at its first write.
    fn allocate(&self, _seg: u32, _off: u64, _len: u64) -> bool {
        true
    }

    fn is_direct(&self) -> bool {
        true
    }

    fn tails_before_ack(&self) -> bool {
        self.o.tails_before_ack
    }

    fn segment_ref(&self, seg: u32) -> Option<Vec<u8>> {
        RemoteStorage::segment_ref(self, seg)
    }

    fn can_adopt(&self) -> bool {
        !self.is_fenced()
    }

    fn adopt(&self, seg: u32, r: &[u8]) -> io::Result<()> {
        RemoteStorage::adopt(self, seg, r)
    }
}
