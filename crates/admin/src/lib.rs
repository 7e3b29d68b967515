//! The admin requests a node answers on its replication port — promote a backup, host a new
//! backup region, add a backup to a region's primary, dump a page of a region for `halyard
//! admin verify` — as the master (`halyard-control`) and `halyard admin` send them: the
//! messages ([`Msg`]), the frame they travel in ([`frame`], shared with the replication
//! streams on the same port), the cluster secret every connection to the port starts with
//! ([`auth`]), and the client calls ([`promote`], [`host`], [`add_backup`], [`dump`]).
//!
//! The node side (answering the requests) is `halyard_replication::admin`. This crate links no
//! storage engine, so that a caller that only sends requests does not either. Byte layout:
//! `docs/admin.md`.

pub mod auth;
mod client;
mod error;
pub mod frame;
mod msg;

pub use auth::{matches as is_cluster_secret, secret as cluster_secret, set_cluster_secret};
pub use client::{add_backup, dump, handoff, host, merge, promote, split};
pub use error::{Error, Result};
pub use msg::{is_admin_tag, read_msg, DumpPair, Msg};
