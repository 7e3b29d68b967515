//! The hooks through which a primary region hands what it writes to replication.

use crate::catalog::{Edit, LogKind, SstInfo};

/// Receives what a primary must ship to its backups (docs/design.md §3). Log appends come from
/// writers under the region's write lock, in LSN order; segments and edits from compaction and
/// GC threads, in the order things happen. Keep every call quick (queue and return).
pub trait ShipListener: Send + Sync {
    /// Bytes appended to a log (L0 or large) at `offset` of segment `seg` (whose records carry
    /// `salt`); `last_lsn` is the last LSN they hold. Offsets continue where the previous call
    /// for this segment stopped.
    #[allow(clippy::too_many_arguments)]
    fn log_append(&self, region: u32, log: LogKind, seg: u32, salt: u32, offset: u32, bytes: &[u8], last_lsn: u64);
    /// The log moves on from `seg`: nothing more will be appended to it (step 2's `flush`).
    fn log_sealed(&self, region: u32, log: LogKind, seg: u32, salt: u32);
    /// A finished compaction output segment, before the edit that publishes it.
    fn segment(&self, region: u32, seg: ShippedSegment<'_>);
    /// The edits a compaction or GC committed, in primary segment numbers.
    fn edits(&self, region: u32, edits: &[Edit]);
    /// `region` split at key `at` and LSN `lsn`: its keys from `at` on are region `child` now
    /// ([`crate::Db::split_region`]). Called after both log tails were sealed and before either
    /// half appends; a backup applies it with [`crate::Replication::backup_split`]. Ignored by
    /// default (a listener that ships no splits has no backups that follow them).
    fn split(&self, region: u32, at: &[u8], lsn: u64, child: u32) {
        let _ = (region, at, lsn, child);
    }
}

/// A compaction output segment.
#[derive(Clone, Copy, Debug)]
pub enum ShippedSegment<'a> {
    /// An SST: its leaves hold log pointers that a backup rewrites (`Replication::backup_sst`).
    Sst {
        /// Its description (`info.seg` is the primary's segment).
        info: &'a SstInfo,
        /// The used part of the segment.
        bytes: &'a [u8],
    },
    /// A segment of the medium log holding part of a sorted run.
    MediumRun {
        /// The primary's segment.
        seg: u32,
        /// Salt of the records in it.
        salt: u32,
        /// The written part of the segment.
        bytes: &'a [u8],
    },
}
