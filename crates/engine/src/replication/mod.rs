//! The engine side of replication (docs/design.md §3): a primary's segments read for shipping,
//! and a backup region taking them.

pub(crate) mod backup;
pub(crate) mod ship;
