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
        /// Number of regions to start with, cut evenly over the first key byte (or see
        /// --split). One is a good default: a region splits by itself once it passes the
        /// nodes' --region-max-mb or serves more than their --split-load-ops, so native and
        /// Redis keys spread as data and load arrive; pre-split for a known key space.
        #[arg(long, default_value_t = 1)]
        regions: usize,
        /// Copies of each region, the primary included.
        #[arg(long, default_value_t = 3)]
        replicas: usize,
        /// Seconds a region's group keeps the place of a member whose node went away (lease
        /// ended, or SIGTERM) before it makes the copy on another node: a node that restarts
        /// or flaps within it comes back to its places.
        #[arg(long, default_value_t = halyard_control::layout::DEFAULT_REPLACE_AFTER_SECS)]
        replace_after_secs: u64,
        /// The master does not even out copies and primaries over the nodes by itself (moves,
        /// drains and handoffs asked for still happen).
        #[arg(long)]
        no_balance: bool,
        /// The master does not merge adjacent regions that are small and idle (an operator's
        /// `halyard admin merge` still happens): the regions stay as --regions/--split cut them
        /// and as splits cut them since.
        #[arg(long)]
        no_merge: bool,
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
    /// Print the nodes (state, lease, addresses, roles), the regions (range, epoch, primary,
    /// backups, full copies under way with their bytes) and the master's unfinished changes.
    Status {
        #[command(flatten)]
        etcd: EtcdArgs,
        /// One JSON object instead of tables.
        #[arg(long)]
        json: bool,
        /// Print the status again every second until interrupted.
        #[arg(long)]
        watch: bool,
    },
    /// Show the cluster's settings, or change whether the master balances copies and primaries
    /// and merges small idle neighbouring regions by itself.
    Config {
        #[command(flatten)]
        etcd: EtcdArgs,
        /// The balancer on or off.
        #[arg(long)]
        balance: Option<bool>,
        /// Merges of small idle neighbours on or off (an operator's `admin merge` works either way).
        #[arg(long)]
        merge: Option<bool>,
    },
    /// Move every copy off a node (it stays a member, takes no new copies, and can be stopped
    /// once this returns). Refused when fewer than --replicas other nodes could take them.
    Drain {
        #[command(flatten)]
        etcd: EtcdArgs,
        /// The node to drain.
        node: String,
    },
    /// End a drain: the node may take copies again (the balancer gives it some).
    Undrain {
        #[command(flatten)]
        etcd: EtcdArgs,
        /// The drained node.
        node: String,
    },
    /// Remove a node for good: its copies move off (as for drain) and it may never register
    /// under that name again.
    Remove {
        #[command(flatten)]
        etcd: EtcdArgs,
        /// The node to remove.
        node: String,
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
            ClusterCmd::Init {
                etcd,
                regions,
                replicas,
                replace_after_secs,
                no_balance,
                no_merge,
                split,
                numeric_keys,
                bench_keys,
                redis,
            } => {
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
                let config = halyard_control::layout::ClusterConfig {
                    replicas: *replicas,
                    format: halyard_control::layout::FORMAT,
                    replace_after_secs: *replace_after_secs,
                    balance: !*no_balance,
                    merge: !*no_merge,
                };
                halyard_control::admin::init(&mut c, &layout, &config, &splits).await.map_err(|e| e.to_string())?;
                println!(
                    "cluster {} created: {} regions, {replicas} copies each; start nodes with `halyard serve --etcd {} --cluster-name {} --node NAME`",
                    layout.root(),
                    splits.len() + 1,
                    etcd.etcd.join(","),
                    etcd.cluster_name
                );
                Ok(())
            }
            ClusterCmd::Status { etcd, json, watch } => status(etcd, *json, *watch).await,
            ClusterCmd::Config { etcd, balance, merge } => {
                let mut c = connect(etcd).await?;
                let layout = Layout::new(&etcd.cluster_name);
                let config = halyard_control::operate::configure(&mut c, &layout, *balance, *merge)
                    .await
                    .map_err(|e| e.to_string())?;
                println!(
                    "cluster {}: {} copies a region, places kept {} s, balance {}, merge {}",
                    layout.root(),
                    config.replicas,
                    config.replace_after_secs,
                    config.balance,
                    config.merge
                );
                Ok(())
            }
            ClusterCmd::Drain { etcd, node } => drain(etcd, node, false).await,
            ClusterCmd::Remove { etcd, node } => drain(etcd, node, true).await,
            ClusterCmd::Undrain { etcd, node } => {
                let mut c = connect(etcd).await?;
                halyard_control::operate::undrain(&mut c, &Layout::new(&etcd.cluster_name), node)
                    .await
                    .map_err(|e| e.to_string())?;
                println!("{node} may take copies again");
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

async fn status(etcd: &EtcdArgs, json: bool, watch: bool) -> Result<(), String> {
    let layout = Layout::new(&etcd.cluster_name);
    let mut c = connect(etcd).await?;
    loop {
        let s = halyard_control::admin::status(&mut c, &layout).await.map_err(|e| e.to_string())?;
        if watch {
            // Clear the terminal and go home, as `watch` does.
            print!("\x1b[2J\x1b[H");
        }
        match json {
            true => println!("{}", serde_json::to_string_pretty(&s).map_err(|e| e.to_string())?),
            false => print!("{}", s.table()),
        }
        if !watch {
            return Ok(());
        }
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    }
}

/// A progress bar on standard error (hidden when it is not a terminal).
fn bar(len: u64, template: &str) -> indicatif::ProgressBar {
    let b = indicatif::ProgressBar::new(len);
    if let Ok(style) = indicatif::ProgressStyle::with_template(template) {
        b.set_style(style);
    }
    b
}

/// `halyard cluster drain` and `remove`: the mark, then a bar of the copies moved off.
async fn drain(etcd: &EtcdArgs, node: &str, remove: bool) -> Result<(), String> {
    let mut c = connect(etcd).await?;
    let layout = Layout::new(&etcd.cluster_name);
    let t0 = std::time::Instant::now();
    let v = halyard_control::View::load(&mut c, &layout).await.map_err(|e| e.to_string())?;
    if let Some(r) = v.storage.get(node) {
        return drain_storage(&mut c, &layout, node, &r.native, remove).await;
    }
    let start = halyard_control::operate::copies_on(&v, node) as u64;
    let b = bar(start, "{spinner} {msg} [{bar:30}] {pos}/{len} copies moved off ({elapsed})");
    b.set_message(format!("draining {node}"));
    let on = |v: &halyard_control::View| {
        b.set_position(start.saturating_sub(halyard_control::operate::copies_on(v, node) as u64))
    };
    let wait = std::time::Duration::from_secs(24 * 3600);
    halyard_control::operate::drain(&mut c, &layout, node, remove, wait, on).await.map_err(|e| e.to_string())?;
    b.finish_and_clear();
    let what = if remove {
        "removed (it may not rejoin under that name)"
    } else {
        "drained (`halyard cluster undrain` lets it take copies again)"
    };
    println!("{node}: {start} copies moved off in {:.1} s; {what}", t0.elapsed().as_secs_f64());
    Ok(())
}

/// `halyard cluster drain` and `remove` of a storage node: the mark (processing nodes then
/// move their fragments off it), then a bar of its fragments until it holds none. It is asked
/// directly, with HALYARD_CLUSTER_SECRET.
async fn drain_storage(
    c: &mut halyard_control::Client,
    layout: &Layout,
    node: &str,
    addr: &str,
    remove: bool,
) -> Result<(), String> {
    let secret = std::env::var("HALYARD_CLUSTER_SECRET").ok();
    let timeout = std::time::Duration::from_secs(5);
    let usage = |addr: String, secret: Option<String>| async move {
        tokio::task::spawn_blocking(move || halyard_segstore::remote::node_usage(&addr, secret.as_deref(), timeout))
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| format!("cannot ask storage node {node} what it holds: {e} (set HALYARD_CLUSTER_SECRET to the cluster's secret)"))
    };
    let t0 = std::time::Instant::now();
    let (start, _) = usage(addr.to_string(), secret.clone()).await?;
    let key = if remove { layout.removed(node) } else { layout.drain(node) };
    c.put(key, Vec::new(), None).await.map_err(|e| e.to_string())?;
    let b = bar(start, "{spinner} {msg} [{bar:30}] {pos}/{len} fragments moved off ({elapsed})");
    b.set_message(format!("draining storage node {node}"));
    loop {
        let (left, _) = usage(addr.to_string(), secret.clone()).await?;
        b.set_position(start.saturating_sub(left));
        if left == 0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
    b.finish_and_clear();
    let what = if remove { "removed" } else { "drained (`halyard cluster undrain` lets it take fragments again)" };
    println!("storage node {node}: {start} fragments moved off in {:.1} s; {what}", t0.elapsed().as_secs_f64());
    Ok(())
}

/// `halyard admin transfer`: asks the master for a planned handoff and waits for it.
pub async fn transfer(etcd: &EtcdArgs, region: u32, to: &str) -> Result<(), String> {
    let mut c = connect(etcd).await?;
    let layout = Layout::new(&etcd.cluster_name);
    let t0 = std::time::Instant::now();
    let wait = std::time::Duration::from_secs(60);
    let epoch =
        halyard_control::operate::transfer(&mut c, &layout, region, to, wait).await.map_err(|e| e.to_string())?;
    println!("region {region}: {to} is primary at epoch {epoch} ({} ms after the request)", t0.elapsed().as_millis());
    Ok(())
}

/// `halyard admin split`: asks the master to split a region and waits for the new map.
pub async fn split(etcd: &EtcdArgs, region: u32, at: &str) -> Result<(), String> {
    let mut c = connect(etcd).await?;
    let layout = Layout::new(&etcd.cluster_name);
    let t0 = std::time::Instant::now();
    let wait = std::time::Duration::from_secs(60);
    let child = halyard_control::operate::split(&mut c, &layout, region, at, wait).await.map_err(|e| e.to_string())?;
    println!(
        "region {region} split at {at:?}: keys from there on are region {child} ({} ms after the request)",
        t0.elapsed().as_millis()
    );
    Ok(())
}

/// `halyard admin merge`: asks the master to merge a region with the next and waits for the
/// new map.
pub async fn merge(etcd: &EtcdArgs, region: u32) -> Result<(), String> {
    let mut c = connect(etcd).await?;
    let layout = Layout::new(&etcd.cluster_name);
    let t0 = std::time::Instant::now();
    let wait = std::time::Duration::from_secs(60);
    let gone = halyard_control::operate::merge(&mut c, &layout, region, wait).await.map_err(|e| e.to_string())?;
    println!("region {gone} merged into region {region} ({} ms after the request)", t0.elapsed().as_millis());
    Ok(())
}

/// `halyard admin move`: the request, then a bar of the new copy's bytes.
pub async fn move_region(etcd: &EtcdArgs, region: u32, from: &str, to: &str) -> Result<(), String> {
    let mut c = connect(etcd).await?;
    let layout = Layout::new(&etcd.cluster_name);
    let t0 = std::time::Instant::now();
    let b = bar(0, "{spinner} {msg} [{bar:30}] {bytes}/{total_bytes} ({bytes_per_sec}, {elapsed})");
    b.set_message(format!("region {region}: {from} -> {to}"));
    let on = |v: &halyard_control::View| {
        let Some((r, _)) = v.regions.get(&region) else { return };
        if let Some((done, total)) = v.progress.get(&r.spec.primary).and_then(|p| p.copies.get(&region)?.get(to)) {
            b.set_length(*total);
            b.set_position(*done);
        }
    };
    let wait = std::time::Duration::from_secs(24 * 3600);
    halyard_control::operate::move_region(&mut c, &layout, region, from, to, wait, on)
        .await
        .map_err(|e| e.to_string())?;
    b.finish_and_clear();
    println!("region {region}: moved from {from} to {to} in {:.1} s", t0.elapsed().as_secs_f64());
    Ok(())
}

/// The region map of the cluster in etcd, as a cluster file (for `halyard admin verify`).
pub async fn map(etcd: &EtcdArgs) -> Result<halyard_cluster::ClusterFile, String> {
    let mut c = connect(etcd).await?;
    let v = halyard_control::View::load(&mut c, &Layout::new(&etcd.cluster_name)).await.map_err(|e| e.to_string())?;
    Ok(v.cluster_file())
}
