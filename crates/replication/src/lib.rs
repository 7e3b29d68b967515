//! Replication for Halyard (docs/design.md §3, Tebis/Talos): each region's primary streams its log
//! appends to every backup's in-memory buffers and, in Send-Index mode, ships every segment its
//! compactions produce plus the edits that publish them, so that backups keep a full index
//! without compacting. Build-Index (backups replay records into their own L0 and compact) is
//! the papers' baseline, kept as a mode. Wire format: `docs/replication.md`.

pub mod admin;
pub mod auth;
mod error;
mod link;
mod peer;
pub mod primary;
pub mod replica;
pub mod wire;

pub use auth::{matches as is_cluster_secret, secret as cluster_secret, set_cluster_secret};
pub use error::{Error, Result};
pub use primary::{ShipStats, Shipper, DEFAULT_QUEUE_BYTES};
pub use replica::{Hooks, NodeHooks, Promoted, Replica};
pub use wire::{Mode, Msg};
