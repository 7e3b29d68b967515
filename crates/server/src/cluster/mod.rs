//! Cluster mode: this node's share of a cluster, given by a static cluster file
//! (`--cluster-file`, `--node`) or coordinated by etcd (`--etcd`). The node hosts the regions
//! the map gives it, as primary (takes client requests, ships to its backups) or backup (takes
//! its primary's stream), answers requests for regions it does not lead with `NotLeader`
//! naming the leader, and waits for backups' acknowledgements before answering writes under
//! `last-write`. Promotion (`halyard admin promote`, or etcd's master) turns a backup region
//! into a primary region here.
//!
//! This file holds the node's state ([`ClusterNode`], its `Peers`) and what a request sees of
//! a region ([`Target`], [`Route`]); the node's behaviour is in the files beside it, each
//! importing only this file and the ones listed before it:
//! - `peers.rs`: the other nodes: their addresses, connections to their native ports,
//!   forwarding a Redis command to a region's primary;
//! - `load.rs`: each led region's requests, sampled while it is hot, for load-based splits
//!   (imports nothing of the others);
//! - `map.rs`: the region map as requests search it (imports `load.rs`);
//! - `routing.rs`: region lookups: where a key's requests go, the targets of the map, whether a
//!   write may run;
//! - `acks.rs`: waiting for backups' acknowledgements of writes, reporting silent ones;
//! - `router.rs`: the native front end's [`crate::native::Router`];
//! - `follow.rs`: etcd mode: following the region map, taking up and dropping roles;
//! - `progress.rs`: etcd mode: this node's replication progress, published for the master;
//! - `roles.rs`: the role changes asked for over the replication port (promotion, hosting a
//!   new backup copy, adding a backup);
//! - `start.rs`: start-up from a cluster file or etcd.

mod acks;
mod follow;
mod load;
mod map;
mod peers;
mod progress;
mod roles;
mod router;
mod routing;
mod start;

pub use map::Located;

use halyard_cluster::ClusterFile;
use halyard_engine::Db;
use halyard_replication::{Mode, Replica, Shipper};
use parking_lot::RwLock;
use std::sync::Arc;

/// Where a key's requests go.
pub enum Route {
    /// This node leads the region.
    Here(u32),
    /// Another node does: the error message to send.
    Elsewhere(String),
}

/// A region as a request sees it: where to send it.
#[derive(Clone, Debug)]
pub struct Target {
    /// Region id.
    pub id: u32,
    /// The region's epoch in this node's map.
    pub epoch: u64,
    /// This node leads the region and may serve it now.
    pub local: bool,
    /// The primary's name and native address.
    pub primary: String,
    pub native: String,
    /// The region's engine keys.
    pub span: crate::keyspace::Span,
}

/// Connections to the other nodes' native ports, for forwarded Redis commands (`peers.rs`).
#[derive(Default)]
pub(crate) struct Peers {
    /// What a node sends with AUTH: the cluster secret, else the password (`requirepass`).
    pub(crate) password: Option<String>,
    /// This node's Redis address as clients reach it.
    pub(crate) resp: String,
    clients: parking_lot::Mutex<std::collections::HashMap<String, halyard_client::Client>>,
    /// Runs a command forwarded to this node (set once the Redis side exists).
    pub(crate) exec: std::sync::OnceLock<RespExec>,
}

/// Runs a Redis command forwarded to this node: (region, epoch, RESP version, arguments) to
/// the encoded reply and the writes it made, or the error code and message for the sender.
pub type RespExec = Box<dyn Fn(u32, u64, u8, &[&[u8]]) -> crate::native::RespOutcome + Send + Sync>;

/// This node's view of the cluster.
pub struct ClusterNode {
    /// This node's name.
    pub name: String,
    /// The map as the cluster file or etcd gives it; change it only through `edit_file`.
    pub(crate) file: RwLock<ClusterFile>,
    /// The map as requests search it (`routing.rs`), rebuilt with every change of `file`.
    pub(crate) map: arc_swap::ArcSwap<map::RegionMap>,
    pub(crate) db: Arc<Db>,
    /// etcd mode: the node's session (its lease is the fencing clock); None with a file.
    pub(crate) control: Option<Arc<halyard_control::Session>>,
    /// Held while the node's roles change (a promotion, applying a new map), so that one never
    /// acts on the state the other is half-way through.
    pub(crate) roles: parking_lot::Mutex<()>,
    /// Regions fenced for a planned handoff (`roles.rs`), by the epoch they were fenced at.
    pub(crate) fences: parking_lot::Mutex<map::Fences>,
    /// Backup copies found wider than the map's region since (see `follow.rs clear_way`).
    pub(crate) stale_ranges: parking_lot::Mutex<std::collections::HashMap<u32, std::time::Instant>>,
    /// Silent backups already reported: (region, node, epoch).
    pub(crate) reported: parking_lot::Mutex<std::collections::HashSet<(u32, String, u64)>>,
    /// Copies (the primary counted) a region's group must hold for writes (`--min-replicas`).
    pub(crate) min_replicas: usize,
    /// Connections for forwarded Redis commands.
    pub(crate) peers: Peers,
    /// Ships primary regions to their backups.
    pub shipper: Arc<Shipper>,
    /// Takes streams for backup regions.
    pub replica: Arc<Replica>,
    /// How backups keep their copies.
    pub mode: Mode,
    /// Wait for backups before answering writes.
    pub last_write: bool,
    /// What this node's master measured (etcd mode; nothing while another node is master).
    pub master_stats: Arc<halyard_control::stats::MasterStats>,
    /// Past this estimated size (bytes) a region led here is reported for a split (0: never).
    pub(crate) region_max_bytes: u64,
    /// Request counters of the regions led here, kept across map changes (`load.rs`).
    pub(crate) loads: load::LoadTable,
    /// When a region led here is reported for a split by load.
    pub(crate) load_split: load::LoadSplit,
}
