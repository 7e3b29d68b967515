//! Halyard's cluster control plane on etcd (docs/cluster.md, docs/design.md §4).
//!
//! - [`layout`]: the keys under one prefix per cluster and the JSON values stored there.
//! - [`view`]: one consistent read of everything under the prefix (nodes, regions, the region
//!   log, the master), and the [`halyard_cluster::ClusterFile`] a node routes with.
//! - [`session`]: a node's membership: its lease, kept alive, and the fencing clock that says
//!   until when the node may certainly act as a primary.
//! - [`master`]: the elected master: assigns regions, replaces lost primaries and backups,
//!   and logs each multi-step change in the region log before carrying it out.
//! - [`admin`]: `halyard cluster init` and `halyard cluster status`.
//! - [`operate`]: an operator's requests: transfer, move, drain, undrain, remove.
//! - [`schedule`]: the master's placement decisions: leaving nodes, moves, drains, balancing.
//! - [`etcd`]: the etcd v3 client (gRPC stubs generated from etcd's protos, committed).
//!
//! Only the master writes the region map, always in a transaction that compares its term (the
//! create revision of its election key), so a deposed master changes nothing. Nodes read the
//! map and bring their roles in line with it; the master talks to them only to promote a
//! backup and to wait for a new backup's full copy, over the replication port's admin
//! messages (the `halyard-admin` crate, which links no storage engine).

pub mod admin;
mod error;
pub mod etcd;
pub mod layout;
pub mod master;
pub mod operate;
pub mod schedule;
pub mod session;
pub mod stats;
pub mod view;

pub use error::{Error, Result};
/// The etcd client the control plane uses.
pub use etcd::Client;
pub use layout::{ClusterConfig, Intent, Layout, NodeRecord, RegionRecord, Report, Request};
pub use session::Session;
pub use view::View;
