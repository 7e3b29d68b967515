//! What the HTTP endpoint (`--http`) serves: the registry `GET /metrics` encodes.

use crate::cluster::{ClusterNode, ReplicationCollector};
use crate::state::Shared;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::registry::Registry;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

/// The one registry /metrics encodes: this node's counters and engine statistics and, in
/// cluster mode, its replication counters.
pub fn registry(sh: Arc<Shared>, cluster: Option<Arc<ClusterNode>>) -> Registry {
    let mut r = Registry::default();
    r.register_collector(Box::new(NodeCollector(sh)));
    if let Some(c) = cluster {
        r.register_collector(Box::new(ReplicationCollector(c)));
    }
    r
}

/// The node's metrics, read at each scrape: connections, commands, the native protocol, CPU
/// time and a snapshot of the engine's statistics.
struct NodeCollector(Arc<Shared>);

impl std::fmt::Debug for NodeCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("NodeCollector")
    }
}

impl Collector for NodeCollector {
    fn encode(&self, mut e: DescriptorEncoder<'_>) -> std::fmt::Result {
        let sh = &self.0;
        crate::metrics::encode_connections(&mut e, &sh.metrics, sh.connected.load(Relaxed), &sh.native)?;
        crate::metrics::encode_commands(&mut e, &sh.metrics)?;
        crate::metrics::encode_native(&mut e, &sh.native)?;
        crate::metrics::encode_cpu(&mut e, sh.metrics.total_calls() + sh.native.requests.load(Relaxed))?;
        let stats = sh.ks.db.stats();
        crate::metrics::encode_engine_io(&mut e, &stats)?;
        crate::metrics::encode_engine_work(&mut e, &stats)
    }
}
