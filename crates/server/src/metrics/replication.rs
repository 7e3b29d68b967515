//! Replication's metrics (cluster mode): what this node shipped as a primary and received as a
//! backup, backpressure from backups' queues, and each backup's acknowledged LSN.

use super::{counter, gauge, labeled_values};
use halyard_control::stats::MasterStats;
use halyard_replication::{Replica, Shipper};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::encoding::EncodeMetric;
use prometheus_client::metrics::MetricType;
use std::fmt;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

/// The collector of replication's metrics for the registry, read at each scrape.
pub struct ReplicationCollector {
    shipper: Arc<Shipper>,
    replica: Arc<Replica>,
    master: Arc<MasterStats>,
    /// The regions this node leads now (whose backups' links are reported).
    led: Box<dyn Fn() -> Vec<u32> + Send + Sync>,
}

impl ReplicationCollector {
    /// Reports the counters of `shipper`, `replica` and `master`, and the links of the
    /// regions `led` lists at each scrape.
    pub fn new(
        shipper: Arc<Shipper>,
        replica: Arc<Replica>,
        master: Arc<MasterStats>,
        led: impl Fn() -> Vec<u32> + Send + Sync + 'static,
    ) -> ReplicationCollector {
        ReplicationCollector { shipper, replica, master, led: Box::new(led) }
    }

    /// The durations of full copies (this node as a primary) and of planned handoffs (this
    /// node as the master).
    fn encode_durations(&self, e: &mut DescriptorEncoder<'_>) -> fmt::Result {
        let hists = [
            (
                "halyard_replication_copy_duration_seconds",
                "Copies to backups (full or incremental), from the capture to the last frame.",
                &*self.shipper.stats.copy_seconds,
            ),
            (
                "halyard_master_handoff_duration_seconds",
                "Planned handoffs this node's master made, from the fence request to the new primary named.",
                &self.master.handoff_seconds,
            ),
            (
                "halyard_master_handoff_fence_seconds",
                "How long the old primary took to fence a region it handed off (its L0 flush included).",
                &self.master.fence_seconds,
            ),
        ];
        for (name, help, h) in hists {
            h.encode(e.encode_descriptor(name, help, None, h.metric_type())?)?;
        }
        counter(
            e,
            "halyard_master_handoffs_rolled_back_total",
            "Planned handoffs rolled back: the primary could not fence the region.",
            self.master.handoffs_rolled_back.load(Relaxed),
        )?;
        counter(
            e,
            "halyard_master_splits_total",
            "Regions this node's master split (the map narrowed one and added its child).",
            self.master.splits.load(Relaxed),
        )?;
        counter(
            e,
            "halyard_master_merges_total",
            "Regions this node's master merged into their left neighbour (the map widened one and dropped the other).",
            self.master.merges.load(Relaxed),
        )
    }

    /// What this node queued and wrote to backups, the bytes both directions moved, and its
    /// full copies.
    fn encode_shipped(&self, e: &mut DescriptorEncoder<'_>) -> fmt::Result {
        let (st, rs) = (&self.shipper.stats, &self.replica.stats);
        counters(
            e,
            &[
                ("halyard_replication_shipped_bytes_total", "Bytes of frames queued to backups (per backup).", st.bytes.load(Relaxed)),
                ("halyard_replication_shipped_frames_total", "Frames queued to backups.", st.frames.load(Relaxed)),
                (
                    "halyard_replication_shipped_image_bytes_total",
                    "Segment image bytes (SSTs, medium runs) queued to backups before LZ4 packing (per backup).",
                    st.image_bytes.load(Relaxed),
                ),
                (
                    "halyard_replication_sent_bytes_total",
                    "Replication bytes this node wrote to sockets: frames to backups and acknowledgements to primaries.",
                    st.sent.load(Relaxed) + rs.sent.load(Relaxed),
                ),
                (
                    "halyard_replication_socket_received_bytes_total",
                    "Replication bytes this node read from sockets: frames from primaries and acknowledgements from backups.",
                    rs.bytes.load(Relaxed) + st.received.load(Relaxed),
                ),
                ("halyard_replication_link_failures_total", "Backup links that failed.", st.broken_links.load(Relaxed)),
                (
                    "halyard_replication_connections_total",
                    "Connections opened to backup nodes (one per backup node, carrying all its regions' streams).",
                    st.connections.load(Relaxed),
                ),
                (
                    "halyard_replication_socket_writes_total",
                    "Writes to backup sockets; shipped frames over this is how many frames one write carries.",
                    st.writes.load(Relaxed),
                ),
                ("halyard_replication_catch_ups_total", "Full copies started to new or returning backups.", st.catch_ups.load(Relaxed)),
                (
                    "halyard_replication_incremental_catch_ups_total",
                    "Incremental copies started to returning backups (only what they lacked was sent).",
                    st.incremental_catch_ups.load(Relaxed),
                ),
                (
                    "halyard_replication_copy_kept_bytes_total",
                    "Segment bytes incremental copies did not send: the backup held them identically.",
                    st.copy_kept_bytes.load(Relaxed),
                ),
                (
                    "halyard_replication_copy_named_bytes_total",
                    "Segment bytes copies named rather than sent: the storage nodes both stores share copied them.",
                    st.copy_named_bytes.load(Relaxed),
                ),
                (
                    "halyard_replication_copy_bytes_total",
                    "Segment bytes copies (full or incremental) read and sent (at most move_rate_mb a second each).",
                    st.copy_bytes.load(Relaxed),
                ),
                ("halyard_replication_copies_sent_total", "Copies (full or incremental) whose last frame was sent.", st.copies_sent.load(Relaxed)),
            ],
        )?;
        counter(
            e,
            "halyard_replication_copy_seconds_total",
            "Seconds full copies took, from the capture to their last frame (summed; over copies_sent: the mean).",
            st.copy_micros.load(Relaxed) as f64 / 1e6,
        )?;
        gauge(
            e,
            "halyard_replication_copy_pause_seconds_max",
            "The longest time a full copy's capture held a region's writers.",
            st.copy_pause_micros_max.load(Relaxed) as f64 / 1e6,
        )
    }

    /// Writers held back by backups' full replication queues.
    fn encode_backpressure(&self, e: &mut DescriptorEncoder<'_>) -> fmt::Result {
        let st = &self.shipper.stats;
        counters(
            e,
            &[
                (
                    "halyard_replication_throttled_waits_total",
                    "Times a writer waited for room in a backup's replication queue.",
                    st.throttled_waits.load(Relaxed),
                ),
                (
                    "halyard_replication_stuck_links_total",
                    "Backup links failed because their queue stayed full without draining for the ack timeout.",
                    st.stuck_links.load(Relaxed),
                ),
            ],
        )?;
        counter(
            e,
            "halyard_replication_throttled_seconds_total",
            "Seconds writers spent waiting for room in backups' replication queues.",
            st.throttled_micros.load(Relaxed) as f64 / 1e6,
        )?;
        gauge(
            e,
            "halyard_replication_full_links",
            "Backup links whose queue is at its bound now.",
            st.full_links.load(Relaxed) as i64,
        )?;
        let mut samples = Vec::new();
        for region in (self.led)() {
            for l in self.shipper.links(region) {
                samples.push(([("region", region.to_string()), ("backup", l.node.clone())], l.queued_bytes() as i64));
            }
        }
        labeled_values(
            e,
            "halyard_replication_queued_bytes",
            "Frame bytes queued for a backup and not yet sent.",
            MetricType::Gauge,
            samples,
        )
    }

    /// What this node took from primaries as a backup.
    fn encode_received(&self, e: &mut DescriptorEncoder<'_>) -> fmt::Result {
        let rs = &self.replica.stats;
        counters(
            e,
            &[
                ("halyard_replication_received_bytes_total", "Bytes received from primaries.", rs.bytes.load(Relaxed)),
                (
                    "halyard_replication_rejected_total",
                    "Streams or messages refused (stale epoch, unknown region).",
                    rs.rejected.load(Relaxed),
                ),
                (
                    "halyard_replication_unauthenticated_total",
                    "Connections to the replication port refused for a missing or wrong cluster secret.",
                    rs.unauthenticated.load(Relaxed),
                ),
            ],
        )
    }

    /// The last LSN each backup of each region this node leads acknowledged.
    fn encode_acked(&self, e: &mut DescriptorEncoder<'_>) -> fmt::Result {
        let mut samples = Vec::new();
        for region in (self.led)() {
            for l in self.shipper.links(region) {
                let labels =
                    [("region", region.to_string()), ("backup", l.node.clone()), ("live", l.is_live().to_string())];
                samples.push((labels, l.acked()));
            }
        }
        labeled_values(
            e,
            "halyard_replication_acked_lsn",
            "Last LSN each backup acknowledged.",
            MetricType::Gauge,
            samples,
        )
    }
}

/// Encodes each (name, help, value) as a counter.
fn counters(e: &mut DescriptorEncoder<'_>, list: &[(&str, &str, u64)]) -> fmt::Result {
    for (name, help, v) in list {
        counter(e, name, help, *v)?;
    }
    Ok(())
}

impl fmt::Debug for ReplicationCollector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ReplicationCollector")
    }
}

impl Collector for ReplicationCollector {
    fn encode(&self, mut e: DescriptorEncoder<'_>) -> fmt::Result {
        self.encode_shipped(&mut e)?;
        self.encode_backpressure(&mut e)?;
        self.encode_received(&mut e)?;
        self.encode_durations(&mut e)?;
        self.encode_acked(&mut e)
    }
}
