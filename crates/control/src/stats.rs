//! What the master measures of the changes it makes, for the node's metrics endpoint (every
//! node runs a master; only the elected one observes anything).

use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use std::sync::atomic::AtomicU64;

/// Planned handoffs' durations and outcomes.
#[derive(Debug)]
pub struct MasterStats {
    /// Seconds from the handoff's start (the primary asked to fence) to the new primary named.
    pub handoff_seconds: Histogram,
    /// Seconds the old primary took to fence: flush its L0, stop admitting writes, wait for its
    /// backups' acknowledgements.
    pub fence_seconds: Histogram,
    /// Handoffs rolled back (the primary could not fence the region).
    pub handoffs_rolled_back: AtomicU64,
    /// Regions split (the map narrowed one and added its child).
    pub splits: AtomicU64,
    /// Regions merged into their left neighbour (the map widened one and dropped the other).
    pub merges: AtomicU64,
}

impl Default for MasterStats {
    fn default() -> MasterStats {
        // 5 ms to about 80 s.
        let buckets = || exponential_buckets(0.005, 2.0, 15);
        MasterStats {
            handoff_seconds: Histogram::new(buckets()),
            fence_seconds: Histogram::new(buckets()),
            handoffs_rolled_back: AtomicU64::new(0),
            splits: AtomicU64::new(0),
            merges: AtomicU64::new(0),
        }
    }
}
