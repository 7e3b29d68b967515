//! Opening a [`RemoteStorage`]: connecting, and learning the store's placements from what
//! every storage node lists.

use super::conn::Node;
use super::rebuild::start_repairs;
use super::storage::{invalid, Counters, RemoteOptions, RemoteStorage, Seg, Shard, SHARDS};
use crate::stripe::MAX_RHO;
use crate::wire::{Placement, Reply, Request};
use parking_lot::{Mutex, RwLock};
use std::collections::{HashMap, HashSet};
use std::io;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

impl RemoteStorage {
    /// Connects to the storage nodes and learns the store's placements from them; starts the
    /// thread that rebuilds an unreachable node's fragments elsewhere.
    pub fn open(o: RemoteOptions) -> io::Result<Arc<RemoteStorage>> {
        if !(1..=MAX_RHO).contains(&o.rho) || o.nodes.len() < o.rho + 1 {
            return Err(invalid(format!(
                "{} data fragments need {} storage nodes at least; {} given",
                o.rho,
                o.rho + 1,
                o.nodes.len()
            )));
        }
        if !crate::node::fragments::valid_store(&o.store) || !(16..=28).contains(&o.seg_bits) {
            return Err(invalid(format!("store name {:?} or segment size unusable", o.store)));
        }
        let nodes = o
            .nodes
            .iter()
            .map(|a| Arc::new(Node::new(a, o.timeout, o.secret.as_deref().unwrap_or_default().as_bytes())))
            .collect();
        let rs = Arc::new(RemoteStorage {
            nodes: RwLock::new(nodes),
            segs: RwLock::new(HashMap::new()),
            shards: (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect(),
            len: AtomicU64::new(0),
            dirty: Mutex::new(HashSet::new()),
            last_gen: AtomicU64::new(0),
            counters: Counters::default(),
            o,
        });
        rs.learn_placements()?;
        start_repairs(&rs);
        Ok(rs)
    }

    fn learn_placements(&self) -> io::Result<()> {
        let n = self.nodes.read().len();
        let calls = (0..n).map(|i| (i, Request::List { store: self.o.store.clone() })).collect();
        let mut best: HashMap<u32, Placement> = HashMap::new();
        let mut held: HashMap<u32, Vec<(u8, String, u64)>> = HashMap::new();
        let mut answered = 0;
        for (i, r) in self.fan_out(calls).into_iter().enumerate() {
            match r {
                Ok(Reply::Listed(l)) => {
                    answered += 1;
                    for f in l {
                        held.entry(f.seg).or_default().push((f.frag, self.addr(i), f.placement.gen));
                        if best.get(&f.seg).is_none_or(|p| p.gen < f.placement.gen) {
                            best.insert(f.seg, f.placement);
                        }
                    }
                }
                other => tracing::warn!("storage node {} did not list its fragments: {other:?}", self.addr(i)),
            }
        }
        if answered == 0 {
            return Err(io::Error::new(io::ErrorKind::NotConnected, "no storage node answered; are they running?"));
        }
        let max_gen = best.values().map(|p| p.gen).max().unwrap_or(0);
        self.last_gen.store(max_gen, Relaxed);
        let mut segs = HashMap::new();
        for (seg, p) in best {
            let listed = held.remove(&seg).unwrap_or_default();
            // A fragment counts when it records this placement, or sits where it names (a
            // fragment that missed a later Place still holds the older generation).
            let mut present: Vec<u8> = listed
                .iter()
                .filter(|(f, a, g)| *g == p.gen || p.nodes.get(*f as usize) == Some(a))
                .map(|(f, _, _)| *f)
                .collect();
            present.sort_unstable();
            present.dedup();
            if present.len() < p.rho as usize {
                // Fewer fragments than rebuild needs: what a node that missed the segment's
                // deletion kept, or a creation that never finished. Not a segment; its files
                // stay (a storage node named under another address would look the same).
                tracing::warn!("segment {seg}: {} fragments listed, {} needed; left out", present.len(), p.rho);
                continue;
            }
            let nodes = p.nodes.iter().map(|a| self.node_index(a)).collect();
            segs.insert(seg, Seg { gen: p.gen, rho: p.rho as usize, nodes });
        }
        let max_seg = segs.keys().copied().max();
        *self.segs.write() = segs;
        self.len.store(max_seg.map_or(0, |s| (u64::from(s) + 1) << self.o.seg_bits), Relaxed);
        Ok(())
    }
}
