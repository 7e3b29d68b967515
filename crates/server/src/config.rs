//! Server configuration: defaults, a TOML file (`--config`), then command-line flags.

use halyard_engine::{Options, SyncMode};
use serde::Deserialize;
use std::path::PathBuf;

/// Everything `halyard serve` takes. Every field can be set in the TOML file.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServerConfig {
    /// Data directory.
    pub dir: PathBuf,
    /// RESP (Redis protocol) listen address.
    pub resp: String,
    /// Native protocol listen address.
    pub listen: String,
    /// HTTP listen address for /metrics and /health.
    pub http: String,
    /// Password clients must AUTH with (none: no authentication).
    pub requirepass: Option<String>,
    /// Most concurrent client connections (RESP and native together).
    pub max_clients: usize,
    /// Seconds a client may stay silent before it is disconnected (0: never).
    pub idle_timeout_secs: u64,
    /// Largest request in bytes.
    pub max_request_bytes: usize,
    /// Network worker threads (0: one per core).
    pub workers: usize,
    /// Cluster file (static cluster; None: single node, all keys local).
    pub cluster_file: Option<PathBuf>,
    /// This node's name in the cluster file.
    pub node: Option<String>,
    /// "send-index" (backups install the primary's compaction output) or "build-index"
    /// (backups replay records and compact themselves).
    pub replication: String,
    /// "last-write" (answer a write once every backup holds it in memory) or "last-flush"
    /// (answer once it is sent).
    pub ack: String,
    /// Milliseconds a write waits for a backup's acknowledgement before the backup is given up
    /// (also how long writers wait for a backup whose queue is full and does not drain).
    pub ack_timeout_ms: u64,
    /// MiB of frames a primary queues per backup and region before writes to the region wait
    /// for the backup to catch up.
    pub replication_queue_mb: u64,
    /// etcd endpoints (`--etcd`): join the cluster they coordinate (empty: no etcd).
    pub etcd: Vec<String>,
    /// The cluster's name: its keys live under `/halyard/<name>/` in etcd.
    pub cluster_name: String,
    /// Node-to-node address (replication streams, admin requests) in etcd mode.
    pub replication_listen: String,
    /// Host other nodes and clients reach this node at, when the listen addresses bind a
    /// wildcard or an address not reachable from elsewhere.
    pub advertise_host: Option<String>,
    /// Seconds of the node's etcd lease: a node silent this long loses its roles.
    pub lease_ttl_secs: u64,
    /// The secret every node-to-node connection (replication, admin requests) must carry.
    pub cluster_secret: Option<String>,
    /// Copies of a region (the primary counted) its group must hold for writes to run (Kafka's
    /// `min.insync.replicas`).
    pub min_replicas: usize,
    /// Where `HALYARD.BACKUP` adds backups (None: the command is refused). Backups of one
    /// store go in one directory: each copies only the segments earlier ones lack.
    pub backup_dir: Option<PathBuf>,
    /// Engine settings.
    pub engine: EngineConfig,
}

/// The engine settings a server exposes.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EngineConfig {
    /// "none", "group" or "always".
    pub sync: String,
    /// Cache budget in MiB.
    pub cache_mb: usize,
    /// Memory of the LSM bypass in MiB (`Options::lsm_bypass_bytes`; 0: off).
    pub lsm_bypass_mb: usize,
    /// Read the SSTs and log values into the cache after open, while it has room
    /// (`Options::warm_cache`).
    pub warm_cache: bool,
    /// L0 size in MiB.
    pub l0_mb: usize,
    /// Level growth factor.
    pub growth_factor: u32,
    /// KV pairs below this size (bytes) are small.
    pub small_threshold: usize,
    /// KV pairs of at least this size (bytes) are large.
    pub large_threshold: usize,
    /// Direct I/O.
    pub direct_io: bool,
    /// Cap on the data file in MiB (0: none).
    pub max_device_mb: u64,
    /// Compaction threads.
    pub compaction_threads: usize,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            dir: PathBuf::from("halyard-data"),
            resp: "127.0.0.1:6379".into(),
            listen: "127.0.0.1:7379".into(),
            http: "127.0.0.1:9379".into(),
            requirepass: None,
            max_clients: 10_000,
            idle_timeout_secs: 0,
            max_request_bytes: 16 << 20,
            workers: 0,
            cluster_file: None,
            node: None,
            replication: "send-index".into(),
            ack: "last-write".into(),
            ack_timeout_ms: 5_000,
            replication_queue_mb: halyard_replication::DEFAULT_QUEUE_BYTES >> 20,
            etcd: Vec::new(),
            cluster_name: "halyard".into(),
            replication_listen: "127.0.0.1:8379".into(),
            advertise_host: None,
            lease_ttl_secs: 2,
            cluster_secret: None,
            min_replicas: 1,
            backup_dir: None,
            engine: EngineConfig::default(),
        }
    }
}

impl Default for EngineConfig {
    fn default() -> Self {
        let o = Options::default();
        EngineConfig {
            sync: "group".into(),
            cache_mb: o.cache_bytes >> 20,
            lsm_bypass_mb: o.lsm_bypass_bytes >> 20,
            warm_cache: o.warm_cache,
            l0_mb: o.l0_bytes >> 20,
            growth_factor: o.growth_factor,
            small_threshold: o.small_threshold,
            large_threshold: o.large_threshold,
            direct_io: o.direct_io,
            max_device_mb: 0,
            compaction_threads: o.compaction_threads,
        }
    }
}

impl ServerConfig {
    /// Reads a TOML file.
    pub fn from_file(path: &std::path::Path) -> Result<ServerConfig, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        toml::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// `addr` as other nodes reach it: its host replaced by `advertise_host` when set.
    pub fn advertised(&self, addr: &str) -> String {
        match (&self.advertise_host, addr.rsplit_once(':')) {
            (Some(h), Some((_, port))) => format!("{h}:{port}"),
            _ => addr.to_string(),
        }
    }

    /// The engine options this configuration asks for.
    pub fn engine_options(&self) -> Result<Options, String> {
        let e = &self.engine;
        let sync = match e.sync.as_str() {
            "none" => SyncMode::None,
            "group" => SyncMode::Group,
            "always" => SyncMode::Always,
            other => return Err(format!("engine.sync must be none, group or always, not {other:?}")),
        };
        Ok(Options {
            sync,
            cache_bytes: e.cache_mb << 20,
            lsm_bypass_bytes: e.lsm_bypass_mb << 20,
            warm_cache: e.warm_cache,
            l0_bytes: (e.l0_mb << 20).max(4096),
            growth_factor: e.growth_factor,
            small_threshold: e.small_threshold,
            large_threshold: e.large_threshold,
            direct_io: e.direct_io,
            max_device_bytes: (e.max_device_mb > 0).then_some(e.max_device_mb << 20),
            compaction_threads: e.compaction_threads,
            ..Options::default()
        })
    }
}
