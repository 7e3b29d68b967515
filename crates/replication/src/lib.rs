//! Replication for Halyard (docs/design.md §3, Tebis/Talos): each region's primary streams its log
//! appends to every backup's in-memory buffers and, in Send-Index mode, ships every segment its
//! compactions produce plus the edits that publish them, so that backups keep a full index
//! without compacting. Build-Index (backups replay records into their own L0 and compact) is
//! the papers' baseline, kept as a mode. Wire format: `docs/replication.md`; the admin
//! requests that share the replication port, their frames and the cluster secret are the
//! `halyard-admin` crate's (`crates/admin/docs/admin.md`), whose client calls and secret
//! setters are re-exported here.

pub mod admin;
mod copy;
mod error;
mod link;
mod peer;
pub mod primary;
pub mod replica;
pub mod wire;

pub use admin::{Hooks, NodeHooks};
pub use error::{Error, Result};
pub use halyard_admin::auth::{matches as is_cluster_secret, secret as cluster_secret, set_cluster_secret};
pub use primary::{ShipStats, Shipper, DEFAULT_COPY_RATE, DEFAULT_QUEUE_BYTES};
pub use replica::{Promoted, Replica};
pub use wire::{Absorb, Mode, Msg};
