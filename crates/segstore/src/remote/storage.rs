//! The remote storage's state: options, placements, shards, counters, and fanning requests
//! out to nodes. Its reads and writes are `io_path`'s, moving fragments `rebuild`'s.

#![expect(clippy::indexing_slicing, reason = "buffers are sized here to whole blocks of the ranges they hold")]

use super::conn::{Fail, Node};
use super::placement::Choice;
use crate::stripe::BLOCK;
use crate::wire::{Code, Placement, Reply, Request, MAX_IO};
use parking_lot::{Mutex, RwLock};
use std::collections::{HashMap, HashSet};
use std::io;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

/// How a processing node reaches its storage nodes.
#[derive(Clone, Debug)]
pub struct RemoteOptions {
    /// Storage nodes' addresses (`host:port`); more are learnt from the placements found.
    pub nodes: Vec<String>,
    /// The store's name on the storage nodes (the processing node's name).
    pub store: String,
    /// Data fragments per segment (1..=8); each segment takes ρ + 1 nodes.
    pub rho: usize,
    /// log2 of the segment size (as `Options::segment_bytes`).
    pub seg_bits: u32,
    /// Power-of-d or random placement.
    pub choice: Choice,
    /// How long a node may take to answer before it counts as failed.
    pub timeout: Duration,
    /// How long a node stays unreachable before its fragments are rebuilt elsewhere.
    pub repair_after: Duration,
    /// Bytes per second rebuilding a lost node's fragments may write.
    pub repair_rate: u64,
    /// The cluster secret the storage nodes require (`--cluster-secret`).
    pub secret: Option<String>,
    /// A write is acknowledged once its log records are on the storage nodes (in their page
    /// cache, synced only under `sync = always`); false leaves them in the
    /// processing node's memory until a chunk fills or the group commit, as on a local device.
    pub tails_before_ack: bool,
    /// How this processing node names itself in its claim of the store (the process id and
    /// start time are added, so that each opening is a distinct owner).
    pub owner: String,
}

impl Default for RemoteOptions {
    fn default() -> Self {
        RemoteOptions {
            nodes: Vec::new(),
            store: String::new(),
            rho: 2,
            seg_bits: 21,
            choice: Choice::PowerOfD,
            timeout: Duration::from_secs(2),
            repair_after: Duration::from_secs(5),
            repair_rate: 64 << 20,
            secret: None,
            owner: String::new(),
            tails_before_ack: true,
        }
    }
}

/// Counters of a [`RemoteStorage`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RemoteStats {
    /// Bytes sent in Write requests (data and parity).
    pub bytes_sent: u64,
    /// Bytes received in Read replies.
    pub bytes_received: u64,
    /// Reads answered by rebuilding a fragment from parity.
    pub degraded_reads: u64,
    /// Fragments moved to another node (rebuilt there).
    pub fragments_moved: u64,
    /// Corrupt blocks rewritten in place.
    pub blocks_repaired: u64,
    /// Segments copied from another store by the storage nodes holding them.
    pub segments_adopted: u64,
}

#[derive(Default)]
pub(super) struct Counters {
    pub(super) sent: AtomicU64,
    pub(super) received: AtomicU64,
    pub(super) degraded: AtomicU64,
    pub(super) moved: AtomicU64,
    pub(super) repaired: AtomicU64,
    pub(super) adopted: AtomicU64,
}

/// A segment's placement: node indexes, fragment i on `nodes[i]`, parity last.
#[derive(Clone, Debug)]
pub(super) struct Seg {
    pub(super) gen: u64,
    pub(super) rho: usize,
    pub(super) nodes: Vec<usize>,
}

/// Writes to one segment, and rebuilding reads of it, go one at a time (a parity update reads
/// the stripe's other blocks); the last partial stripe written is kept to save reading it.
#[derive(Default)]
pub(super) struct Shard {
    pub(super) tails: HashMap<u32, (u64, Vec<u8>)>,
}

pub(super) const SHARDS: usize = 64;

/// A [`Storage`] over storage nodes (see the module documentation).
pub struct RemoteStorage {
    pub(super) o: RemoteOptions,
    pub(super) nodes: RwLock<Vec<Arc<Node>>>,
    pub(super) segs: RwLock<HashMap<u32, Seg>>,
    pub(super) shards: Vec<Mutex<Shard>>,
    pub(super) len: AtomicU64,
    pub(super) dirty: Mutex<HashSet<usize>>,
    pub(super) last_gen: AtomicU64,
    pub(super) counters: Counters,
    /// The claim every connection makes (`open.rs`), set once the store is claimed.
    pub(super) claim: Mutex<Option<Request>>,
    /// Why the store refuses this processing node, once a storage node said it was fenced:
    /// every call fails from then on, and no fragment moves.
    pub(super) fenced: Mutex<Option<String>>,
}

pub(super) fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

impl RemoteStorage {
    pub(super) fn node_index(&self, addr: &str) -> usize {
        if let Some(i) = self.nodes.read().iter().position(|n| n.addr == addr) {
            return i;
        }
        let mut nodes = self.nodes.write();
        // Another thread may have added it between the two locks.
        if let Some(i) = nodes.iter().position(|n| n.addr == addr) {
            return i;
        }
        let node = Node::new(addr, self.o.timeout, self.o.secret.as_deref().unwrap_or_default().as_bytes());
        node.set_claim(self.claim.lock().clone());
        nodes.push(Arc::new(node));
        nodes.len() - 1
    }

    /// Fails once a storage node said another processing node claimed the store.
    pub(super) fn check_fenced(&self) -> io::Result<()> {
        match &*self.fenced.lock() {
            Some(why) => Err(io::Error::new(io::ErrorKind::PermissionDenied, why.clone())),
            None => Ok(()),
        }
    }

    /// Whether another processing node took the store from this one.
    pub fn is_fenced(&self) -> bool {
        self.fenced.lock().is_some()
    }

    /// What the storage node said when it refused the store to this processing node.
    pub fn fenced_by(&self) -> Option<String> {
        self.fenced.lock().clone()
    }

    fn note_fenced(&self, results: &[Result<Reply, Fail>]) {
        for r in results {
            if let Err(Fail::Refused(Code::Fenced, why)) = r {
                let mut f = self.fenced.lock();
                if f.is_none() {
                    tracing::error!("{why}");
                    *f = Some(why.clone());
                }
            }
        }
    }

    /// The storage nodes the cluster lists now: new ones join the nodes new fragments may go
    /// to; those of `draining` take none and the repair thread moves their fragments off (and
    /// drops what they hold of this store that no placement names).
    pub fn set_nodes(&self, live: &[String], draining: &[String]) {
        for a in live.iter().chain(draining) {
            self.node_index(a);
        }
        for n in self.nodes.read().iter() {
            let on = draining.contains(&n.addr);
            if on != n.draining() {
                tracing::info!("storage node {}: {}", n.addr, if on { "draining" } else { "no longer draining" });
            }
            n.set_draining(on);
        }
    }

    pub(super) fn addr(&self, i: usize) -> String {
        self.nodes.read().get(i).map_or_else(|| format!("node #{i}"), |n| n.addr.clone())
    }

    /// The counters so far.
    pub fn stats(&self) -> RemoteStats {
        let c = &self.counters;
        RemoteStats {
            bytes_sent: c.sent.load(Relaxed),
            bytes_received: c.received.load(Relaxed),
            degraded_reads: c.degraded.load(Relaxed),
            fragments_moved: c.moved.load(Relaxed),
            blocks_repaired: c.repaired.load(Relaxed),
            segments_adopted: c.adopted.load(Relaxed),
        }
    }

    /// The storage nodes each segment's fragments are on (data fragments first, parity last).
    pub fn placements(&self) -> Vec<(u32, Vec<String>)> {
        let nodes = self.nodes.read();
        let mut v: Vec<(u32, Vec<String>)> = self
            .segs
            .read()
            .iter()
            .map(|(&s, p)| (s, p.nodes.iter().filter_map(|&i| nodes.get(i).map(|n| n.addr.clone())).collect()))
            .collect();
        v.sort();
        v
    }

    /// Sends each request to its node, all at once; the replies in order.
    pub(super) fn fan_out(&self, calls: Vec<(usize, Request)>) -> Vec<Result<Reply, Fail>> {
        let nodes = self.nodes.read().clone();
        let one = |(i, r): &(usize, Request)| match nodes.get(*i) {
            Some(n) => n.call(r),
            None => Err(Fail::Unreachable(io::Error::other("unknown storage node"))),
        };
        let results = if calls.len() <= 1 {
            calls.iter().map(one).collect()
        } else if calls.iter().all(|(_, r)| small(r)) {
            pipelined(&nodes, &calls, self.o.timeout)
        } else {
            in_threads(&calls, one)
        };
        self.note_fenced(&results);
        results
    }

    pub(super) fn shard(&self, seg: u32) -> &Mutex<Shard> {
        &self.shards[seg as usize % SHARDS]
    }

    pub(super) fn seg(&self, seg: u32) -> Option<Seg> {
        self.segs.read().get(&seg).cloned()
    }

    pub(super) fn seg_blocks(&self) -> u64 {
        (1u64 << self.o.seg_bits) / BLOCK as u64
    }

    pub(super) fn next_gen(&self) -> u64 {
        let now =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_micros() as u64);
        let prev = self.last_gen.fetch_update(Relaxed, Relaxed, |g| Some(g.max(now) + 1)).unwrap_or(now);
        prev.max(now) + 1
    }

    pub(super) fn placement_of(&self, s: &Seg) -> Placement {
        let nodes = s.nodes.iter().map(|&i| self.addr(i)).collect();
        Placement { gen: s.gen, rho: s.rho as u8, nodes }
    }
}

/// Most bytes a request (or its reply) may carry to go out without a thread: larger ones,
/// sent one after another, would wait for each other on slow links.
const SMALL_IO: usize = 64 << 10;

fn small(r: &Request) -> bool {
    match r {
        Request::Write { data, .. } => data.len() <= SMALL_IO,
        Request::Read { blocks, .. } => (*blocks as usize) * crate::stripe::BLOCK <= SMALL_IO,
        _ => true,
    }
}

/// Every request out, then every reply in as it arrives: the nodes work at once, with no
/// thread started per call (a log push is a few blocks to each of ρ + 1 nodes), and each
/// node's time is its own (what power-of-d weighs).
fn pipelined(nodes: &[Arc<Node>], calls: &[(usize, Request)], timeout: Duration) -> Vec<Result<Reply, Fail>> {
    let unknown = || Err(Fail::Unreachable(io::Error::other("unknown storage node")));
    let mut sent: Vec<Option<super::conn::Sent>> =
        calls.iter().map(|(i, r)| nodes.get(*i).map(|n| n.send(r))).collect();
    let mut out: Vec<Option<Result<Reply, Fail>>> = calls.iter().map(|_| None).collect();
    let receive = |k: usize, sent: &mut [Option<super::conn::Sent>], out: &mut [Option<Result<Reply, Fail>>]| {
        let ((i, r), s) = (&calls[k], sent[k].take());
        out[k] = Some(match (nodes.get(*i), s) {
            (Some(n), Some(s)) => n.receive(r, s),
            _ => unknown(),
        });
    };
    loop {
        let waiting: Vec<(usize, i32)> =
            sent.iter().enumerate().filter_map(|(k, s)| s.as_ref().and_then(|s| s.fd()).map(|fd| (k, fd))).collect();
        if waiting.is_empty() {
            break;
        }
        let mut fds: Vec<libc::pollfd> =
            waiting.iter().map(|&(_, fd)| libc::pollfd { fd, events: libc::POLLIN, revents: 0 }).collect();
        let ms = i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX);
        // SAFETY: `fds` is a live array of `fds.len()` pollfd structs for the call's duration.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
        let ready: Vec<usize> = match n {
            // Nothing in time (or poll failed): each read waits out its socket's own timeout.
            n if n <= 0 => waiting.iter().map(|w| w.0).collect(),
            _ => waiting.iter().zip(&fds).filter(|(_, f)| f.revents != 0).map(|(w, _)| w.0).collect(),
        };
        for k in ready {
            receive(k, &mut sent, &mut out);
        }
    }
    // Calls whose request never went out (their outcome is already known).
    for k in 0..calls.len() {
        if out[k].is_none() {
            receive(k, &mut sent, &mut out);
        }
    }
    out.into_iter().map(|r| r.unwrap_or_else(unknown)).collect()
}

/// Each call on a thread of its own: a fan-out waits for the slowest node, not the sum.
fn in_threads(
    calls: &[(usize, Request)],
    one: impl Fn(&(usize, Request)) -> Result<Reply, Fail> + Sync,
) -> Vec<Result<Reply, Fail>> {
    let one = &one;
    std::thread::scope(|sc| {
        let handles: Vec<_> = calls.iter().map(|c| sc.spawn(move || one(c))).collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err(Fail::Unreachable(io::Error::other("request thread panicked")))))
            .collect()
    })
}

/// Fragment block ranges cut to what one request carries.
pub(super) fn chunks(r: Range<u64>) -> impl Iterator<Item = (u64, u32)> {
    let most = (MAX_IO / BLOCK) as u64;
    r.clone().step_by(most as usize).map(move |b| (b, (r.end - b).min(most) as u32))
}
