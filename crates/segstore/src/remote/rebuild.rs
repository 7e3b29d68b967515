//! Moving fragments between storage nodes: a fragment a node failed to write or sync, every
//! fragment of a node unreachable for [`super::RemoteOptions::repair_after`], or of a node
//! being drained, is rebuilt from the segment's other fragments onto a node that holds none of
//! that segment's.

use super::conn::Node;
use super::placement::pick;
use super::storage::{chunks, RemoteStorage, Seg};
use crate::stripe::BLOCK;
use crate::wire::{Reply, Request};
use std::io;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

impl RemoteStorage {
    /// `want` distinct reachable nodes, none of `exclude`, by the configured choice.
    pub(super) fn choose(&self, want: usize, exclude: &[usize]) -> io::Result<Vec<usize>> {
        let nodes = self.nodes.read();
        let candidates: Vec<(usize, u32)> = nodes
            .iter()
            .enumerate()
            .filter(|(i, n)| !exclude.contains(i) && n.down_since().is_none() && !n.draining())
            .map(|(i, n)| (i, n.load()))
            .collect();
        pick(&candidates, want, self.o.choice).ok_or_else(|| {
            io::Error::other(format!(
                "{want} reachable storage nodes needed, {} available: start more storage nodes or bring failed ones back",
                candidates.len()
            ))
        })
    }

    /// Moves fragment `x` of `seg` to another node, rebuilt from the segment's other fragments;
    /// the caller holds the segment's shard.
    pub(super) fn replace(&self, seg: u32, x: usize) -> io::Result<()> {
        self.check_fenced()?;
        let Some(s) = self.seg(seg) else { return Ok(()) };
        let old = s.nodes.get(x).copied().ok_or_else(|| io::Error::other("no such fragment"))?;
        let mut exclude = s.nodes.clone();
        let mut last = None;
        for _ in 0..3 {
            // A refusal that fenced this node fails the move rather than trying another node.
            self.check_fenced()?;
            let Some(&to) = self.choose(1, &exclude)?.first() else { break };
            match self.rebuild_onto(seg, &s, x, to) {
                Ok(()) => {
                    self.counters.moved.fetch_add(1, Relaxed);
                    tracing::info!("fragment {x} of segment {seg} moved from {} to {}", self.addr(old), self.addr(to));
                    if self.nodes.read().get(old).is_some_and(|n| n.down_since().is_none()) {
                        let del = Request::Delete { store: self.o.store.clone(), seg };
                        drop(self.fan_out(vec![(old, del)]));
                    }
                    return Ok(());
                }
                Err(e) => {
                    exclude.push(to);
                    last = Some(e);
                }
            }
        }
        Err(last.unwrap_or_else(|| io::Error::other("no storage node to move a fragment to")))
    }

    fn rebuild_onto(&self, seg: u32, s: &Seg, x: usize, to: usize) -> io::Result<()> {
        let mut moved = s.clone();
        moved.gen = self.next_gen();
        if let Some(slot) = moved.nodes.get_mut(x) {
            *slot = to;
        }
        let p = self.placement_of(&moved);
        let store = self.o.store.clone();
        let call = |req: Request| match self.fan_out(vec![(to, req)]).pop() {
            Some(Ok(_)) => Ok(()),
            Some(Err(f)) => Err(f.into_io(&self.addr(to))),
            None => Err(io::Error::other("no reply")),
        };
        call(Request::Delete { store: store.clone(), seg })?;
        // The fragment is made under the placement that does not name its new node yet, and
        // named there only once all its blocks are written: a processing node that dies
        // half-way then opens the store with the old placement (an open takes the newest one
        // any node holds), not one naming a fragment that lacks blocks.
        let old = self.placement_of(s);
        call(Request::Place { store: store.clone(), seg, frag: x as u8, placement: old })?;
        let frag_blocks = self.seg_blocks().div_ceil(s.rho as u64);
        for (block, blocks) in chunks(0..frag_blocks) {
            let data = self.rebuild_blocks(seg, s, x, block..block + u64::from(blocks))?;
            self.counters.sent.fetch_add(data.len() as u64, Relaxed);
            call(Request::Write { store: store.clone(), seg, frag: x as u8, block, data })?;
        }
        call(Request::Place { store: store.clone(), seg, frag: x as u8, placement: p.clone() })?;
        // The others learn the new placement; one that misses it still names the old, older one.
        let calls = (0..=s.rho)
            .filter(|&i| i != x)
            .filter_map(|i| {
                let req = Request::Place { store: store.clone(), seg, frag: i as u8, placement: p.clone() };
                s.nodes.get(i).map(|&n| (n, req))
            })
            .collect();
        drop(self.fan_out(calls));
        self.segs.write().insert(seg, moved);
        self.dirty.lock().insert(to);
        Ok(())
    }

    /// Moves every fragment node `n` holds to other nodes; the bytes rebuilt.
    pub(super) fn evacuate(&self, n: usize) -> io::Result<u64> {
        let held: Vec<(u32, usize)> = {
            let segs = self.segs.read();
            let mut v: Vec<(u32, usize)> =
                segs.iter().filter_map(|(&seg, s)| s.nodes.iter().position(|&m| m == n).map(|x| (seg, x))).collect();
            v.sort_unstable();
            v
        };
        let mut bytes = 0;
        for (seg, _) in held {
            let _shard = self.shard(seg).lock();
            // Placements may have changed while the shard was not held.
            let Some(x) = self.seg(seg).and_then(|s| s.nodes.iter().position(|&m| m == n)) else { continue };
            self.replace(seg, x)?;
            bytes += self.seg_blocks() * BLOCK as u64 / self.seg(seg).map_or(1, |s| s.rho as u64);
        }
        Ok(bytes)
    }

    /// Probes nodes that failed; one unreachable for `repair_after` has its fragments moved,
    /// at no more than `repair_rate` bytes a second.
    fn repair_round(&self) {
        if self.is_fenced() {
            return;
        }
        let down: Vec<(usize, Instant)> = {
            let nodes = self.nodes.read();
            nodes.iter().enumerate().filter_map(|(i, n)| n.down_since().map(|t| (i, t))).collect()
        };
        for (n, since) in down {
            if self.fan_out(vec![(n, Request::Stats)]).pop().is_some_and(|r| r.is_ok()) {
                continue;
            }
            if since.elapsed() < self.o.repair_after || !self.holds_any(n) {
                continue;
            }
            tracing::warn!("storage node {} unreachable for {:?}: moving its fragments", self.addr(n), since.elapsed());
            if let Err(e) = self.evacuate_paced(n) {
                tracing::warn!("moving the fragments of {} failed: {e}", self.addr(n));
            }
        }
    }

    /// [`Self::evacuate`] at no more than `repair_rate` bytes a second.
    fn evacuate_paced(&self, n: usize) -> io::Result<()> {
        let started = Instant::now();
        let bytes = self.evacuate(n)?;
        let floor = Duration::from_secs_f64(bytes as f64 / self.o.repair_rate.max(1) as f64);
        std::thread::sleep(floor.saturating_sub(started.elapsed()));
        Ok(())
    }

    /// Empties the nodes being drained that answer (those that do not are moved as failed)
    /// and are not emptied yet: their fragments moved at no more than `repair_rate`, then this
    /// store's leftovers there dropped.
    fn drain_round(&self) {
        if self.is_fenced() {
            return;
        }
        let draining: Vec<Arc<Node>> = self.nodes.read().iter().filter(|n| n.to_empty()).cloned().collect();
        for node in draining {
            let n = self.node_index(&node.addr);
            match self.evacuate_paced(n).and_then(|()| self.drop_leftovers(n)) {
                Ok(()) => node.set_emptied(),
                Err(e) => tracing::warn!("emptying drained node {} failed: {e}", node.addr),
            }
        }
    }

    /// Deletes the fragments of this store node `n` holds that no current placement names
    /// (a segment deleted, or a fragment moved, while the node was away). Each is checked
    /// under its segment's shard, so a segment being placed is never touched.
    fn drop_leftovers(&self, n: usize) -> io::Result<()> {
        let call = |req: Request| match self.fan_out(vec![(n, req)]).pop() {
            Some(Ok(reply)) => Ok(reply),
            Some(Err(f)) => Err(f.into_io(&self.addr(n))),
            None => Err(io::Error::other("no reply")),
        };
        let Reply::Listed(listed) = call(Request::List { store: self.o.store.clone() })? else {
            return Err(io::Error::other(format!("{} answered List with something else", self.addr(n))));
        };
        for f in listed {
            let _shard = self.shard(f.seg).lock();
            if self.seg(f.seg).is_some_and(|s| s.nodes.contains(&n)) {
                continue;
            }
            call(Request::Delete { store: self.o.store.clone(), seg: f.seg })?;
            tracing::info!("dropped segment {}'s leftover fragment on drained node {}", f.seg, self.addr(n));
        }
        Ok(())
    }

    fn holds_any(&self, n: usize) -> bool {
        self.segs.read().values().any(|s| s.nodes.contains(&n))
    }
}

/// Runs [`RemoteStorage::repair_round`] every half second while the storage is alive.
pub(super) fn start_repairs(rs: &Arc<RemoteStorage>) {
    let weak: Weak<RemoteStorage> = Arc::downgrade(rs);
    let spawned = std::thread::Builder::new().name("segstore-repair".into()).spawn(move || loop {
        std::thread::sleep(Duration::from_millis(500));
        match weak.upgrade() {
            Some(rs) => {
                rs.repair_round();
                rs.drain_round();
            }
            None => return,
        }
    });
    if let Err(e) = spawned {
        tracing::warn!("no repair thread for remote storage: {e}");
    }
}
