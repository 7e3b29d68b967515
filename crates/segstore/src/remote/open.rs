//! Opening a [`RemoteStorage`]: connecting, claiming the store (fencing the processing node
//! that held it before), and learning the store's placements from what every storage node
//! lists.

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
            claim: Mutex::new(None),
            fenced: Mutex::new(None),
            o,
        });
        rs.claim_store()?;
        rs.learn_placements()?;
        start_repairs(&rs);
        Ok(rs)
    }

    /// Claims the store at an epoch above every storage node's: from then on the nodes refuse
    /// the store to the processing node that held it before, should it still run. A majority
    /// of the nodes must answer and take the claim (so that the epoch is above any claim a
    /// majority holds), and so must all but ρ of them: then every segment (ρ + 1 nodes) has a
    /// node that took it, which refuses the old owner's next write there, and lists the
    /// segment's placement when asked. A node that does not answer now gets the claim when
    /// this node first connects to it.
    fn claim_store(&self) -> io::Result<()> {
        let owner = owner_name(&self.o.owner);
        let store = self.o.store.clone();
        let ask = |epoch: u64| -> Vec<(usize, Request)> {
            let n = self.nodes.read().len();
            (0..n).map(|i| (i, Request::Claim { store: store.clone(), epoch, owner: owner.clone() })).collect()
        };
        let n = self.nodes.read().len();
        let need = (n / 2 + 1).max(self.all_but_rho(n));
        let majority = |k: usize, what: &str| match k >= need {
            true => Ok(()),
            false => Err(io::Error::new(
                io::ErrorKind::NotConnected,
                format!(
                    "{k} of {n} storage nodes {what}; a store is claimed on {need} (a majority, and all but {} so that \
                     every segment's {} nodes include one): are they running?",
                    self.o.rho,
                    self.o.rho + 1
                ),
            )),
        };
        let (mut newest, mut answered) = (0, 0);
        for (i, r) in self.fan_out(ask(0)).into_iter().enumerate() {
            match r {
                Ok(Reply::Claimed { epoch, .. }) => (newest, answered) = (newest.max(epoch), answered + 1),
                other => tracing::warn!("storage node {} did not answer a claim: {other:?}", self.addr(i)),
            }
        }
        majority(answered, "answered")?;
        let epoch = newest.checked_add(1).ok_or_else(|| {
            io::Error::other(format!("a storage node's claim file of store {store} is damaged (see its log)"))
        })?;
        let claim = Request::Claim { store: store.clone(), epoch, owner: owner.clone() };
        *self.claim.lock() = Some(claim.clone());
        for n in self.nodes.read().iter() {
            n.set_claim(Some(claim.clone()));
        }
        let mut taken = 0;
        for (i, r) in self.fan_out(ask(epoch)).into_iter().enumerate() {
            match r {
                Ok(Reply::Claimed { epoch: e, owner: o }) if e == epoch && o == owner => taken += 1,
                Ok(Reply::Claimed { epoch: e, owner: o }) => {
                    return Err(io::Error::new(
                        io::ErrorKind::AddrInUse,
                        format!(
                            "storage node {} gave store {store} to {o} (epoch {e}) while this node claimed epoch \
                             {epoch}: two processing nodes are opening one store; run one only",
                            self.addr(i)
                        ),
                    ));
                }
                Err(super::conn::Fail::Refused(crate::wire::Code::Fenced, why)) => {
                    return Err(io::Error::new(io::ErrorKind::AddrInUse, why))
                }
                other => tracing::warn!("storage node {} did not take the claim: {other:?}", self.addr(i)),
            }
        }
        majority(taken, "took the claim")?;
        tracing::info!("store {store} claimed at epoch {epoch} on {taken} storage nodes");
        Ok(())
    }

    /// All the storage nodes but ρ (at least one): with that many answering, every segment
    /// (ρ + 1 nodes) has one among them.
    fn all_but_rho(&self, n: usize) -> usize {
        n.saturating_sub(self.o.rho).max(1)
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
        // With fewer, a segment all of whose nodes are out of reach would be unknown here, and
        // read as never written.
        let need = self.all_but_rho(n);
        if answered < need {
            return Err(io::Error::new(
                io::ErrorKind::NotConnected,
                format!("{answered} of {n} storage nodes listed the store's fragments; {need} must: are they running?"),
            ));
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

/// The owner a claim names: the configured name, with the process and the time it opened the
/// store, so that each opening is a distinct owner.
fn owner_name(name: &str) -> String {
    let mut end = name.len().min(160);
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    let name = if name.is_empty() { "a processing node" } else { &name[..end] };
    let at = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_micros());
    format!("{name} (pid {}, opened at {at} µs)", std::process::id())
}
