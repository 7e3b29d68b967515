//! Server configuration, one typed definition read two ways: serde reads it from a TOML file
//! (`--config`), clap from `halyard serve`'s flags. Defaults come from `Default`; the file
//! replaces what it names; then `update_from_arg_matches` replaces what the command line names
//! (a flag has no default of its own, so an absent flag leaves the file's value). Settings with
//! no flag are `#[arg(skip)]`: only the file sets them.

use clap::{Args, ValueEnum};
use halyard_engine::{Options, SyncMode};
use serde::Deserialize;
use std::path::PathBuf;

/// How backups keep their copies.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum ReplicationMode {
    /// Backups install the primary's compaction output (no compaction of their own).
    #[default]
    SendIndex,
    /// Backups replay records into their own L0 and compact.
    BuildIndex,
}

impl From<ReplicationMode> for halyard_replication::Mode {
    fn from(m: ReplicationMode) -> Self {
        match m {
            ReplicationMode::SendIndex => halyard_replication::Mode::SendIndex,
            ReplicationMode::BuildIndex => halyard_replication::Mode::BuildIndex,
        }
    }
}

/// When a write is answered.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Ack {
    /// Once every backup holds it in memory.
    #[default]
    LastWrite,
    /// Once it is sent to every backup.
    LastFlush,
}

/// What a `halyard serve` process is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Role {
    /// Serves clients from a store of its own (on its device, or on storage nodes).
    #[default]
    Processing,
    /// Keeps processing nodes' segment fragments on its device and serves them (`--listen`).
    Storage,
}

/// Where a processing node keeps its store's segments.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum StorageMode {
    /// In data files under --dir.
    #[default]
    Local,
    /// On the storage nodes of --storage-nodes, striped with parity.
    Remote,
}

/// How --storage remote picks the storage nodes of a new segment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum StripePlacement {
    /// Sample twice the nodes needed, keep the least busy (Nova-LSM's power-of-d).
    #[default]
    PowerOfD,
    /// Any nodes, at random (the baseline power-of-d is measured against).
    Random,
}

/// When --storage remote acknowledges a write.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum RemoteLog {
    /// Once its log records are on the storage nodes (synced there under --sync always): a
    /// processing node that dies loses no acknowledged write (Nova-LSM's LogC).
    #[default]
    Pushed,
    /// Once in this node's memory; the log goes out as on a local device (chunks, the group
    /// commit, --sync always).
    Lazy,
}

/// Durability of writes (`Options::sync`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum WriteSync {
    /// Never synced by the store (the OS writes back).
    None,
    /// Synced every 5 ms by a background thread.
    #[default]
    Group,
    /// Synced before the reply (concurrent writers share one fdatasync).
    Always,
}

impl From<WriteSync> for SyncMode {
    fn from(s: WriteSync) -> Self {
        match s {
            WriteSync::None => SyncMode::None,
            WriteSync::Group => SyncMode::Group,
            WriteSync::Always => SyncMode::Always,
        }
    }
}

/// Everything `halyard serve` takes. Every field can be set in the TOML file; those with a
/// flag also on the command line, which wins.
#[derive(Clone, Debug, Deserialize, Args)]
#[serde(default, deny_unknown_fields)]
pub struct ServerConfig {
    /// Data directory [default: ./halyard-data].
    #[arg(long, required = false)]
    pub dir: PathBuf,
    /// Redis protocol (RESP2/RESP3) address [default: 127.0.0.1:6379].
    #[arg(long, required = false)]
    pub resp: String,
    /// Native protocol address [default: 127.0.0.1:7379].
    #[arg(long, required = false)]
    pub listen: String,
    /// HTTP address for /metrics, /health and the console [default: 127.0.0.1:9379].
    #[arg(long, required = false)]
    pub http: String,
    /// Require clients to AUTH with this password (none: no authentication).
    #[arg(long)]
    pub requirepass: Option<String>,
    /// Most concurrent clients, Redis and native together [default: 10000].
    #[arg(long, required = false)]
    pub max_clients: usize,
    /// Disconnect clients silent for this many seconds (0 = never) [default: 0].
    #[arg(long = "idle-timeout", required = false)]
    pub idle_timeout_secs: u64,
    /// Largest request in bytes [default: 513 MiB: a 512 MB value, Redis's `proto-max-bulk-len`, and the command around it].
    #[arg(long, required = false)]
    pub max_request_bytes: usize,
    /// Network worker threads (0 = one per core) [default: 0].
    #[arg(long, required = false)]
    pub workers: usize,
    /// Static cluster file (nodes, regions, primaries, backups); run as one of its nodes.
    #[arg(long)]
    pub cluster_file: Option<PathBuf>,
    /// This node's name (in the cluster file, or in etcd).
    #[arg(long)]
    pub node: Option<String>,
    /// How backups keep their copies: send-index (install the primary's compaction output, no
    /// compaction of their own) or build-index (replay and compact) [default: send-index].
    #[arg(long, value_enum, required = false)]
    pub replication: ReplicationMode,
    /// When a write is answered: last-write (every backup holds it in memory) or last-flush
    /// (sent) [default: last-write].
    #[arg(long, value_enum, required = false)]
    pub ack: Ack,
    /// Milliseconds a write waits for a backup's acknowledgement (also how long writers wait
    /// for a backup whose queue is full and does not drain); under etcd a backup silent this
    /// long is reported to the master, which removes it from the group [default: 5000].
    #[arg(long, required = false)]
    pub ack_timeout_ms: u64,
    /// MiB of frames a primary queues per backup and region before writes to the region wait
    /// for the backup to catch up (file only).
    #[arg(skip)]
    pub replication_queue_mb: u64,
    /// MiB a second one full copy of a region (a new or returning backup's) reads and sends at
    /// most, so that moving data leaves the disk and network to foreground work; 0: unlimited
    /// [default: 64].
    #[arg(long, required = false)]
    pub move_rate_mb: u64,
    /// Join the cluster these etcd endpoints coordinate (comma-separated URLs, e.g.
    /// http://127.0.0.1:2379); needs --node. Create the cluster first with `halyard cluster init`.
    #[arg(long, value_delimiter = ',', required = false)]
    pub etcd: Vec<String>,
    /// The cluster's name: its keys live under `/halyard/<name>/` in etcd [default: halyard].
    #[arg(long, required = false)]
    pub cluster_name: String,
    /// Node-to-node address (replication streams, admin requests) in etcd mode
    /// [default: 127.0.0.1:8379].
    #[arg(long, required = false)]
    pub replication_listen: String,
    /// Host to advertise to other nodes and clients when the listen addresses are not
    /// reachable as given (e.g. 0.0.0.0).
    #[arg(long)]
    pub advertise_host: Option<String>,
    /// Seconds of the node's etcd lease: a node silent this long loses its roles [default: 2].
    #[arg(long = "lease-ttl", required = false)]
    pub lease_ttl_secs: u64,
    /// The secret every node-to-node connection (replication streams, promotion, add-backup,
    /// dumps) must carry; give every node and every `halyard admin` command the same one.
    #[arg(long)]
    pub cluster_secret: Option<String>,
    /// Refuse writes to a region whose group holds fewer copies than this, the primary counted
    /// (like Kafka's min.insync.replicas) [default: 1].
    #[arg(long, required = false)]
    pub min_replicas: usize,
    /// Where the Redis command HALYARD.BACKUP adds backups of this node's store (none: the
    /// command is refused). Backups of one store go in one directory: each copies only the
    /// segments earlier ones lack.
    #[arg(long)]
    pub backup_dir: Option<PathBuf>,
    /// A region whose estimated size passes this many MiB splits at the key that halves it,
    /// never inside a Redis key's encoding; 0: never. In an etcd cluster the primary reports
    /// it and the master splits the region [default there: 256]. On a single node the store
    /// splits by itself, off unless set: a multi-key write (MSET, a native batch) whose keys lie
    /// on both sides of a split point is then refused, as Redis Cluster refuses CROSSSLOT writes.
    #[arg(long)]
    pub region_max_mb: Option<u64>,
    /// In an etcd cluster, a region its primary serves more than this many requests a second
    /// for `split_load_secs` splits at the key that halves its requests (a sample of the keys
    /// asked for), and the master moves one half's primary role to a cooler node; 0: never
    /// [default: 2500].
    #[arg(long, required = false)]
    pub split_load_ops: u64,
    /// Seconds a region must stay past --split-load-ops before it splits (file only)
    /// [default: 10].
    #[arg(skip)]
    pub split_load_secs: u64,
    /// processing: serve clients; storage: keep other nodes' segments (as fragments with
    /// parity) under --dir and serve them on --listen, behind --cluster-secret
    /// [default: processing].
    #[arg(long, value_enum, required = false)]
    pub role: Role,
    /// local: the store's segments in --dir; remote: on the storage nodes of --storage-nodes,
    /// each segment cut into --stripe-width fragments plus parity [default: local].
    #[arg(long, value_enum, required = false)]
    pub storage: StorageMode,
    /// Storage nodes' addresses (comma-separated host:port) for --storage remote; with --etcd
    /// and none given, the storage nodes registered there (started with --etcd and --node).
    #[arg(long, value_delimiter = ',', required = false)]
    pub storage_nodes: Vec<String>,
    /// Data fragments per segment under --storage remote (1..=8): a segment takes this many
    /// storage nodes plus one for parity [default: 2].
    #[arg(long, required = false)]
    pub stripe_width: usize,
    /// How --storage remote picks a new segment's storage nodes: power-of-d or random
    /// [default: power-of-d].
    #[arg(long, value_enum, required = false)]
    pub stripe_placement: StripePlacement,
    /// When --storage remote acknowledges a write: pushed (its log records on the storage
    /// nodes, so a processing node that dies loses none) or lazy (in this node's memory, as on
    /// a local device; --sync always still waits for the storage nodes' disks) [default: pushed].
    #[arg(long, value_enum, required = false)]
    pub remote_log: RemoteLog,
    /// Engine settings (`[engine]` in the file).
    #[command(flatten)]
    pub engine: EngineConfig,
}

/// The engine settings a server exposes.
#[derive(Clone, Debug, Deserialize, Args)]
#[serde(default, deny_unknown_fields)]
pub struct EngineConfig {
    /// Durability: none, group (synced every 5 ms) or always (synced before the reply)
    /// [default: group].
    #[arg(long, value_enum, required = false)]
    pub sync: WriteSync,
    /// Engine cache budget in MiB [default: 256].
    #[arg(long, required = false)]
    pub cache_mb: usize,
    /// Memory of the LSM bypass in MiB (`Options::lsm_bypass_bytes`; 0: off).
    #[arg(skip)]
    pub lsm_bypass_mb: usize,
    /// Read the SSTs and log values into the cache after open, while it has room
    /// (`Options::warm_cache`).
    #[arg(skip)]
    pub warm_cache: bool,
    /// L0 size in MiB.
    #[arg(skip)]
    pub l0_mb: usize,
    /// Level growth factor.
    #[arg(skip)]
    pub growth_factor: u32,
    /// KV pairs below this size (bytes) are small.
    #[arg(skip)]
    pub small_threshold: usize,
    /// KV pairs of at least this size (bytes) are large.
    #[arg(skip)]
    pub large_threshold: usize,
    /// Direct I/O.
    #[arg(skip)]
    pub direct_io: bool,
    /// Cap on the data file in MiB (0: none).
    #[arg(skip)]
    pub max_device_mb: u64,
    /// Compaction threads.
    #[arg(skip)]
    pub compaction_threads: usize,
    /// Dranges per L0 table (`Options::dranges`, 1..=64).
    #[arg(skip)]
    pub dranges: usize,
    /// Parts an L0 -> L1 merge is cut into, run at once (`Options::l0_merge_parts`, 1..=16).
    #[arg(skip)]
    pub l0_merge_parts: usize,
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
            max_request_bytes: (512 << 20) + (1 << 20),
            workers: 0,
            cluster_file: None,
            node: None,
            replication: ReplicationMode::SendIndex,
            ack: Ack::LastWrite,
            ack_timeout_ms: 5_000,
            replication_queue_mb: halyard_replication::DEFAULT_QUEUE_BYTES >> 20,
            move_rate_mb: halyard_replication::DEFAULT_COPY_RATE >> 20,
            etcd: Vec::new(),
            cluster_name: "halyard".into(),
            replication_listen: "127.0.0.1:8379".into(),
            advertise_host: None,
            lease_ttl_secs: 2,
            cluster_secret: None,
            min_replicas: 1,
            backup_dir: None,
            region_max_mb: None,
            split_load_ops: 2500,
            split_load_secs: 10,
            role: Role::Processing,
            storage: StorageMode::Local,
            storage_nodes: Vec::new(),
            stripe_width: 2,
            stripe_placement: StripePlacement::PowerOfD,
            remote_log: RemoteLog::Pushed,
            engine: EngineConfig::default(),
        }
    }
}

impl Default for EngineConfig {
    fn default() -> Self {
        let o = Options::default();
        EngineConfig {
            sync: WriteSync::Group,
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
            dranges: o.dranges,
            l0_merge_parts: o.l0_merge_parts,
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
    pub fn engine_options(&self) -> Options {
        let e = &self.engine;
        Options {
            sync: e.sync.into(),
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
            dranges: e.dranges,
            l0_merge_parts: e.l0_merge_parts,
            region_max_bytes: if self.is_cluster() { 0 } else { self.region_max_mb.unwrap_or(0) << 20 },
            split_key: Some(crate::keyspace::split_key()),
            ..Options::default()
        }
    }

    /// The size past which an etcd cluster's primary asks for its region's split (bytes; 0:
    /// never).
    pub fn cluster_region_max_bytes(&self) -> u64 {
        match self.etcd.is_empty() {
            true => 0,
            false => self.region_max_mb.unwrap_or(256) << 20,
        }
    }

    /// Whether the node is part of a cluster (etcd or a static file).
    fn is_cluster(&self) -> bool {
        !self.etcd.is_empty() || self.cluster_file.is_some()
    }

    /// The file's settings (or the defaults), then the flags present in `m`, which was parsed
    /// with this type's arguments.
    pub fn from_file_and_flags(file: Option<&std::path::Path>, m: &clap::ArgMatches) -> Result<ServerConfig, String> {
        let mut cfg = match file {
            Some(p) => ServerConfig::from_file(p)?,
            None => ServerConfig::default(),
        };
        clap::FromArgMatches::update_from_arg_matches(&mut cfg, m).map_err(|e| e.to_string())?;
        Ok(cfg)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{CommandFactory, Parser};

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        cfg: ServerConfig,
    }

    fn parse(file: Option<&str>, flags: &[&str]) -> ServerConfig {
        let m = Cli::command().no_binary_name(true).try_get_matches_from(flags).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("halyard.toml");
        if let Some(text) = file {
            std::fs::write(&path, text).unwrap();
        }
        ServerConfig::from_file_and_flags(file.map(|_| path.as_path()), &m).unwrap()
    }

    #[test]
    fn defaults_then_file_then_flags() {
        let d = parse(None, &[]);
        assert_eq!(
            (d.resp.as_str(), d.ack, d.engine.sync, d.lease_ttl_secs),
            ("127.0.0.1:6379", Ack::LastWrite, WriteSync::Group, 2)
        );
        let file = "resp = \"127.0.0.1:1\"\nack = \"last-flush\"\nlease_ttl_secs = 5\n[engine]\nsync = \"always\"\nl0_mb = 4\n";
        let f = parse(Some(file), &[]);
        assert_eq!(
            (f.resp.as_str(), f.ack, f.engine.sync, f.lease_ttl_secs, f.engine.l0_mb),
            ("127.0.0.1:1", Ack::LastFlush, WriteSync::Always, 5, 4)
        );
        assert_eq!(f.listen, "127.0.0.1:7379", "what the file does not name keeps its default");
        let both = parse(
            Some(file),
            &["--resp", "127.0.0.1:2", "--sync", "none", "--lease-ttl", "9", "--etcd", "http://a,http://b"],
        );
        assert_eq!((both.resp.as_str(), both.engine.sync, both.lease_ttl_secs), ("127.0.0.1:2", WriteSync::None, 9));
        assert_eq!((both.ack, both.engine.l0_mb), (Ack::LastFlush, 4), "flags leave what they do not name");
        assert_eq!(both.etcd, vec!["http://a".to_string(), "http://b".to_string()]);
    }

    #[test]
    fn regions_split_by_size_on_a_single_node_only_when_asked() {
        assert_eq!(parse(None, &[]).engine_options().region_max_bytes, 0);
        let one = parse(Some("region_max_mb = 64\n"), &[]);
        assert_eq!(one.engine_options().region_max_bytes, 64 << 20);
        let clustered = parse(Some("region_max_mb = 64\n"), &["--etcd", "http://a"]);
        assert_eq!(clustered.engine_options().region_max_bytes, 0, "the master splits a cluster's regions");
        assert_eq!(clustered.cluster_region_max_bytes(), 64 << 20);
        assert_eq!(parse(None, &["--etcd", "http://a"]).cluster_region_max_bytes(), 256 << 20);
        let cut = one.engine_options().split_key.unwrap();
        let field = crate::keyspace::key(b"user:1").to_vec();
        assert_eq!((cut.0)(&field), b"ruser:1".to_vec(), "a Redis key's record and fields stay together");
        assert_eq!((cut.0)(b"native-key"), b"native-key".to_vec());
    }

    #[test]
    fn bad_values_are_refused_with_the_choices() {
        let e =
            Cli::command().no_binary_name(true).try_get_matches_from(["--ack", "sometimes"]).unwrap_err().to_string();
        assert!(e.contains("last-write") && e.contains("last-flush"), "{e}");
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bad.toml");
        std::fs::write(&path, "[engine]\nsync = \"sometimes\"\n").unwrap();
        let e = ServerConfig::from_file(&path).unwrap_err();
        assert!(e.contains("always"), "{e}");
    }
}
