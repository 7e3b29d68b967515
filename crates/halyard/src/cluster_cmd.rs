//! `halyard cluster`: create a cluster in etcd and show its state.

use clap::{Args, Subcommand};
use halyard_control::Layout;

/// Where the cluster's etcd is.
#[derive(Args, Debug, Clone)]
pub struct EtcdArgs {
    /// etcd endpoints, comma-separated (e.g. http://127.0.0.1:2379).
    #[arg(long, value_delimiter = ',', required = true)]
    pub etcd: Vec<String>,
    /// The cluster's name: its keys live under /halyard/<name>/ in etcd.
    #[arg(long, default_value = "halyard")]
    pub cluster_name: String,
}

/// `halyard cluster ...`.
#[derive(Subcommand, Debug)]
pub enum ClusterCmd {
    /// Create a cluster: its settings and its regions, unassigned. Nodes started with
    /// `halyard serve --etcd ... --node NAME` then join, and the elected master gives each
    /// region a primary and backups once `--replicas` nodes are up.
    Init {
        #[command(flatten)]
        etcd: EtcdArgs,
        /// Number of regions, cut evenly over the first key byte (or see --split).
        #[arg(long, default_value_t = 8)]
        regions: usize,
        /// Copies of each region, the primary included.
        #[arg(long, default_value_t = 3)]
        replicas: usize,
        /// Explicit split keys instead of --regions, comma-separated, increasing ("hex:..." for
        /// raw bytes): N keys make N+1 regions.
        #[arg(long, value_delimiter = ',')]
        split: Vec<String>,
        /// Cut --regions over keys "key0".."key9" (at most 10 regions) instead of the first byte.
        #[arg(long, conflicts_with = "bench_keys")]
        numeric_keys: bool,
        /// Cut --regions evenly over `halyard bench`'s keys ("user" and 20 digits).
        #[arg(long)]
        bench_keys: bool,
        /// The split points are Redis keys: cut the key space the Redis port stores its keys
        /// in (every split point is given the Redis key space's prefix). Without it, splits
        /// cut the native protocol's keys and every Redis key falls in one region.
        #[arg(long)]
        redis: bool,
    },
    /// Print the nodes (alive, lease, addresses, roles), the regions (range, epoch, primary,
    /// backups) and the master's unfinished changes.
    Status {
        #[command(flatten)]
        etcd: EtcdArgs,
        /// One JSON object instead of tables.
        #[arg(long)]
        json: bool,
    },
}

/// Runs a `halyard cluster` command.
pub fn run(cmd: &ClusterCmd) -> Result<(), String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))?;
    rt.block_on(async {
        match cmd {
            ClusterCmd::Init { etcd, regions, replicas, split, numeric_keys, bench_keys, redis } => {
                let layout = Layout::new(&etcd.cluster_name);
                let mut c = connect(etcd).await?;
                use halyard_control::admin::{even_splits, Keys};
                let keys = match (*numeric_keys, *bench_keys) {
                    (true, _) => Keys::Digits,
                    (_, true) => Keys::Bench,
                    _ => Keys::Bytes,
                };
                let splits = match split.is_empty() {
                    true => even_splits(*regions, keys).map_err(|e| e.to_string())?,
                    false => split.clone(),
                };
                let splits = match redis {
                    true => halyard_control::admin::redis_splits(&splits).map_err(|e| e.to_string())?,
                    false => splits,
                };
                halyard_control::admin::init(&mut c, &layout, *replicas, &splits).await.map_err(|e| e.to_string())?;
                println!(
                    "cluster {} created: {} regions, {replicas} copies each; start nodes with `halyard serve --etcd {} --cluster-name {} --node NAME`",
                    layout.root(),
                    splits.len() + 1,
                    etcd.etcd.join(","),
                    etcd.cluster_name
                );
                Ok(())
            }
            ClusterCmd::Status { etcd, json } => {
                let layout = Layout::new(&etcd.cluster_name);
                let mut c = connect(etcd).await?;
                let s = halyard_control::admin::status(&mut c, &layout).await.map_err(|e| e.to_string())?;
                if *json {
                    println!("{}", serde_json::to_string_pretty(&s).map_err(|e| e.to_string())?);
                } else {
                    print!("{}", s.table());
                }
                Ok(())
            }
        }
    })
}

async fn connect(etcd: &EtcdArgs) -> Result<halyard_control::Client, String> {
    halyard_control::session::connect(&etcd.etcd)
        .await
        .map_err(|e| format!("cannot reach etcd at {}: {e}", etcd.etcd.join(",")))
}

/// `halyard admin transfer`: asks the master for a planned handoff and waits for it.
pub async fn transfer(etcd: &EtcdArgs, region: u32, to: &str) -> Result<(), String> {
    let mut c = connect(etcd).await?;
    let layout = Layout::new(&etcd.cluster_name);
    let wait = std::time::Duration::from_secs(60);
    let t = halyard_control::admin::transfer(&mut c, &layout, region, to, wait).await.map_err(|e| e.to_string())?;
    println!("region {region}: {to} is primary at epoch {} ({} ms after the request)", t.epoch, t.took.as_millis());
    Ok(())
}

/// The region map of the cluster in etcd, as a cluster file (for `halyard admin verify`).
pub async fn map(etcd: &EtcdArgs) -> Result<halyard_cluster::ClusterFile, String> {
    let mut c = connect(etcd).await?;
    let v = halyard_control::View::load(&mut c, &Layout::new(&etcd.cluster_name)).await.map_err(|e| e.to_string())?;
    Ok(v.cluster_file())
}
