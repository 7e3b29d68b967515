//! What the node does for the admin requests that change its roles ([`NodeHooks`]): the
//! server's cluster node implements it; the replication port's dispatcher (`super`) calls it.

use crate::Result;
use std::sync::Arc;

/// What the node does for admin requests that change its roles; called on a blocking thread.
pub trait NodeHooks: Send + Sync {
    /// Become the primary of `region` at `epoch` (the replica already let go of it); returns
    /// the last LSN and the records dropped.
    fn promote(&self, region: u32, epoch: u64) -> Result<(u64, u64)>;
    /// Become a backup of `region` (key range `start..end`) at `epoch`.
    fn host(&self, region: u32, epoch: u64, start: &[u8], end: Option<&[u8]>) -> Result<()>;
    /// As the primary of `region` at `epoch`, ship to one more backup.
    fn add_backup(&self, region: u32, epoch: u64, node: &str, native: &str, replication: &str) -> Result<()>;
    /// As the primary of `region` at `epoch`, stop serving it for a planned handoff and return
    /// the last LSN once every backup acknowledged it.
    fn handoff(&self, region: u32, _epoch: u64) -> Result<u64> {
        Err(crate::Error::Rejected(format!("this node does not hand off region {region}")))
    }
    /// As the primary of `region` at `epoch`, fence it (as for a handoff) and split it at `at`
    /// into `child` (fenced too); return the last LSN once every backup acknowledged it. Asked
    /// again once split, it only fences.
    fn split(&self, region: u32, _epoch: u64, _at: &[u8], _child: u32) -> Result<u64> {
        Err(crate::Error::Rejected(format!("this node does not split region {region}")))
    }
    /// As the primary of `region` at `epoch` and of `right` at `right_epoch`, fence both (as for
    /// a handoff) and merge `right` into `region`, whose streams open again at `merged_epoch`;
    /// return the merged region's last LSN. Asked again once merged, it only fences.
    fn merge(&self, region: u32, _epoch: u64, _right: (u32, u64), _merged_epoch: u64) -> Result<u64> {
        Err(crate::Error::Rejected(format!("this node does not merge region {region}")))
    }
    /// The region's last LSN if this node already leads it at `epoch` or later: a promotion
    /// asked again (its answer was lost) is answered with that instead of refused. Called on a
    /// blocking thread: it may wait for a promotion still under way.
    fn leads(&self, _region: u32, _epoch: u64) -> Option<u64> {
        None
    }
}

/// The node's hooks, shared by its connections.
pub type Hooks = Arc<dyn NodeHooks>;
