//! The `halyard` command.

mod cluster_cmd;

use clap::{Args, Parser, Subcommand, ValueEnum};
use halyard_server::config::{RemoteLog, Role, ServerConfig, StorageMode, StripePlacement};
use std::path::PathBuf;

// glibc malloc spent a tenth of a loaded server's CPU consolidating chunks when a flushed L0
// table (millions of small nodes) was freed, and stalled the request threads on its arena locks.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc's `purge_delay` (option 15 in mimalloc 2 and 3; the crate names it in neither).
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// Keeps freed memory instead of handing it back to the kernel a second later: the cache's
/// churn (values and leaves evicted and read again, a restart's warm-up) made the kernel zero
/// every page faulted back in, half of the CPU of a read phase after a reopen (Run C after a
/// reopen: 364k ops/s purging, 501k not). The memory stays bounded by the cache budget.
fn keep_freed_memory() {
    // SAFETY: sets a process-wide allocator option; mimalloc allows it at any time.
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, -1) }
}

/// Halyard: a replicated key-value store for fast storage.
///
/// `halyard serve` with no arguments runs a single-node server on the embedded default:
/// data in ./halyard-data, Redis protocol on 127.0.0.1:6379, native protocol on
/// 127.0.0.1:7379, metrics on http://127.0.0.1:9379/metrics.
#[derive(Parser, Debug)]
#[command(name = "halyard", version, about, long_about)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Run a server: a single node with all keys local (the default), a node of a cluster
    /// that etcd coordinates (--etcd, --node), or a node of a static cluster (--cluster-file,
    /// --node).
    Serve(ServeArgs),
    /// Create a cluster in etcd, show its nodes and regions.
    #[command(subcommand)]
    Cluster(cluster_cmd::ClusterCmd),
    /// Cluster administration: promote a backup, compare copies.
    #[command(subcommand)]
    Admin(AdminCmd),
    /// Run benchmarks (YCSB workloads) against Halyard and other engines side by side.
    Bench(halyard_bench::BenchArgs),
    /// Open a store directory (not in use by a server), report what opening it cost and what it
    /// holds, and close it.
    Inspect {
        /// Store directory.
        #[arg(long, default_value = "halyard-data")]
        dir: std::path::PathBuf,
        /// One JSON object instead of lines of text.
        #[arg(long)]
        json: bool,
    },
    /// Add a backup of a store directory (not in use by a server) to DIR: only the segments
    /// earlier backups there lack are copied. A running server backs itself up with the Redis
    /// command HALYARD.BACKUP into its --backup-dir.
    Backup {
        /// Store directory.
        #[arg(long, default_value = "halyard-data")]
        dir: PathBuf,
        /// Backup directory (made if missing; holds every backup of the store).
        #[arg(long)]
        to: PathBuf,
    },
    /// Build a store from a backup, checking every segment against the backup's checksums.
    Restore {
        /// Backup directory.
        #[arg(long)]
        from: PathBuf,
        /// Which backup (its number; default: the newest).
        #[arg(long)]
        backup: Option<u32>,
        /// The new store's directory (must not hold a store).
        #[arg(long)]
        to: PathBuf,
        /// Turn the regions a cluster backup node held as backups into ordinary ones (as a
        /// promotion does: their replicated logs are replayed), so that the restored store
        /// serves them on its own.
        #[arg(long)]
        promote: bool,
    },
    /// Write an openable copy of a store directory (not in use by a server) to DIR.
    Checkpoint {
        /// Store directory.
        #[arg(long, default_value = "halyard-data")]
        dir: PathBuf,
        /// The copy's directory (must not hold a store).
        #[arg(long)]
        to: PathBuf,
    },
    /// Print the value of a key (native protocol).
    Get {
        /// Key.
        key: String,
        #[command(flatten)]
        conn: ConnArgs,
    },
    /// Store a value under a key (native protocol).
    Put {
        /// Key.
        key: String,
        /// Value.
        value: String,
        #[command(flatten)]
        conn: ConnArgs,
    },
    /// Delete a key (native protocol).
    Del {
        /// Key.
        key: String,
        #[command(flatten)]
        conn: ConnArgs,
    },
    /// Delete every key of [START, END) in one record per region, whatever their number
    /// (native protocol; Redis: HALYARD.DELRANGE).
    Delrange {
        /// First key deleted.
        start: String,
        /// First key past the range (must be after START).
        end: String,
        #[command(flatten)]
        conn: ConnArgs,
    },
    /// Print the pairs of a key range in order, one "key<TAB>value" per line (native protocol).
    Scan {
        /// First key (inclusive); empty = from the first key.
        #[arg(default_value = "")]
        start: String,
        /// Last key (exclusive); omit for no upper bound.
        end: Option<String>,
        /// Most pairs to print.
        #[arg(long, default_value_t = 100)]
        limit: u32,
        /// Descending order.
        #[arg(long)]
        reverse: bool,
        #[command(flatten)]
        conn: ConnArgs,
    },
}

/// Cluster administration (talks to the nodes' replication addresses; give the cluster's
/// secret with HALYARD_CLUSTER_SECRET when it has one).
#[derive(Subcommand, Debug)]
enum AdminCmd {
    /// Make a backup of a region its primary (after the primary failed): the node rebuilds
    /// L0 from its replicated logs, the other backups remap to it, and the cluster file is
    /// rewritten with the new primary and a higher epoch.
    Promote {
        /// Region id.
        #[arg(long)]
        region: u32,
        /// The backup node to promote.
        #[arg(long)]
        node: String,
        /// The cluster file (read and rewritten).
        #[arg(long)]
        cluster_file: PathBuf,
    },
    /// Add a backup to a region while it serves: the node starts hosting a copy, the primary
    /// sends it a full copy and then its live stream, and the cluster file is rewritten. The
    /// node must be listed in the file's [[nodes]] and running. Returns once the copy is taken.
    AddBackup {
        /// Region id.
        #[arg(long)]
        region: u32,
        /// The node that becomes a backup of the region.
        #[arg(long)]
        node: String,
        /// The cluster file (read and rewritten).
        #[arg(long)]
        cluster_file: PathBuf,
    },
    /// Hand a region's primary role to one of its backups without a failover (etcd mode): the
    /// master fences the primary, waits until every backup holds its last write, promotes the
    /// backup (it rebuilds L0 from its replicated logs) and names it in the map. Clients
    /// follow the new map; no acknowledged write is lost.
    Transfer {
        /// Region id.
        #[arg(long)]
        region: u32,
        /// The backup that becomes primary.
        #[arg(long)]
        to: String,
        #[command(flatten)]
        etcd: cluster_cmd::EtcdArgs,
    },
    /// Split a region in two at a key (etcd mode): the primary fences the region and splits its
    /// store without copying data, its backups split at the same point of their streams, and
    /// one map change narrows the region and adds the new one (same group, next epoch and
    /// version). Requests wait for the new map, a few milliseconds.
    Split {
        /// Region id.
        #[arg(long)]
        region: u32,
        /// The first key of the new region (UTF-8, or hex: followed by hex digits); it must lie
        /// inside the region, past its first key. For Redis keys give the engine key's prefix
        /// `r` and no 00 byte (as `cluster init --redis` does).
        #[arg(long)]
        at: String,
        #[command(flatten)]
        etcd: cluster_cmd::EtcdArgs,
    },
    /// Merge the region that follows a region into it (etcd mode): both must have the same
    /// primary and backups. The primary fences both, compacts and merges its store without
    /// copying data, its backups join their copies, and one map change widens the region
    /// (next epoch and version) and drops the other. The master also merges small idle
    /// neighbours by itself (unless `cluster init --no-merge`).
    Merge {
        /// The left region's id (it stays, covering both).
        #[arg(long)]
        region: u32,
        #[command(flatten)]
        etcd: cluster_cmd::EtcdArgs,
    },
    /// Move a region's copy from one node to another (etcd mode): the target takes a full copy
    /// as a learner (streamed at the primary's --move-rate-mb), becomes a backup, takes the
    /// primary role if the source led, and the source leaves the group and drops its copy.
    Move {
        /// Region id.
        #[arg(long)]
        region: u32,
        /// The node giving its copy up.
        #[arg(long)]
        from: String,
        /// The node taking a copy.
        #[arg(long)]
        to: String,
        #[command(flatten)]
        etcd: cluster_cmd::EtcdArgs,
    },
    /// Compare a region's contents (keys, versions and values) on its primary and every backup;
    /// exits non-zero on any difference. Reads again when the group changed while it read.
    Verify {
        /// Region id.
        #[arg(long)]
        region: u32,
        /// The cluster file (or --etcd).
        #[arg(long, required_unless_present = "etcd")]
        cluster_file: Option<PathBuf>,
        /// etcd endpoints of a cluster that etcd coordinates (instead of --cluster-file).
        #[arg(long, value_delimiter = ',')]
        etcd: Vec<String>,
        /// The cluster's name in etcd.
        #[arg(long, default_value = "halyard")]
        cluster_name: String,
    },
}

fn admin(cmd: &AdminCmd) -> Result<(), String> {
    halyard_replication::set_cluster_secret(std::env::var("HALYARD_CLUSTER_SECRET").ok().as_deref());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))?;
    rt.block_on(async {
        match cmd {
            AdminCmd::Promote { region, node, cluster_file } => {
                let mut file = halyard_cluster::ClusterFile::load(cluster_file).map_err(|e| e.to_string())?;
                let addr = file.node(node).ok_or_else(|| format!("no node {node} in the cluster file"))?.replication.clone();
                let epoch = file.promote(*region, node).map_err(|e| e.to_string())?;
                let (lsn, dropped) = halyard_replication::admin::promote(&addr, *region, epoch)
                    .await
                    .map_err(|e| format!("promoting region {region} on {node} ({addr}): {e}"))?;
                file.save(cluster_file).map_err(|e| e.to_string())?;
                println!("region {region}: {node} is primary at epoch {epoch}; L0 rebuilt up to LSN {lsn}, {dropped} records beyond the first torn one dropped");
                Ok(())
            }
            AdminCmd::AddBackup { region, node, cluster_file } => {
                let mut file = halyard_cluster::ClusterFile::load(cluster_file).map_err(|e| e.to_string())?;
                let r = file.add_backup(*region, node).map_err(|e| e.to_string())?;
                let spec = file.node(node).cloned().ok_or_else(|| format!("no node {node} in the cluster file"))?;
                let primary = file.node(&r.primary).map(|n| n.replication.clone()).unwrap_or_default();
                halyard_replication::admin::host(&spec.replication, *region, r.epoch, r.start_bytes(), r.end_bytes())
                    .await
                    .map_err(|e| format!("{node} ({}) cannot host region {region}: {e}", spec.replication))?;
                halyard_replication::admin::add_backup(
                    &primary,
                    *region,
                    r.epoch,
                    node,
                    &spec.native,
                    &spec.replication,
                )
                .await
                .map_err(|e| format!("primary {} ({primary}) did not add {node}: {e}", r.primary))?;
                file.save(cluster_file).map_err(|e| e.to_string())?;
                println!("region {region}: {node} is a backup of {} and holds a full copy", r.primary);
                Ok(())
            }
            AdminCmd::Transfer { region, to, etcd } => cluster_cmd::transfer(etcd, *region, to).await,
            AdminCmd::Move { region, from, to, etcd } => cluster_cmd::move_region(etcd, *region, from, to).await,
            AdminCmd::Split { region, at, etcd } => cluster_cmd::split(etcd, *region, at).await,
            AdminCmd::Merge { region, etcd } => cluster_cmd::merge(etcd, *region).await,
            AdminCmd::Verify { region, cluster_file, etcd, cluster_name } => {
                let a = cluster_cmd::EtcdArgs { etcd: etcd.clone(), cluster_name: cluster_name.clone() };
                verify(*region, cluster_file.as_deref(), &a).await
            }
        }
    })
}

/// The region as the map names it now, with the replication addresses of its primary and
/// backups (in that order).
async fn group(
    region: u32,
    cluster_file: Option<&std::path::Path>,
    etcd: &cluster_cmd::EtcdArgs,
) -> Result<(halyard_cluster::RegionSpec, Vec<String>), String> {
    let file = match cluster_file {
        Some(f) => halyard_cluster::ClusterFile::load(f).map_err(|e| e.to_string())?,
        None => cluster_cmd::map(etcd).await?,
    };
    let r = file.region(region).cloned().ok_or_else(|| format!("no region {region} in the cluster file"))?;
    let addrs = std::iter::once(&r.primary)
        .chain(&r.backups)
        .map(|n| file.node(n).map(|n| n.replication.clone()).unwrap_or_default())
        .collect();
    Ok((r, addrs))
}

/// `admin verify`: dumps the region on its primary and each backup and compares them. A group
/// that changed while the copies were read (a move or handoff under way) is read again, up to
/// five times, so that a copy dropped by a finished move is not taken for a lost one.
async fn verify(
    region: u32,
    cluster_file: Option<&std::path::Path>,
    etcd: &cluster_cmd::EtcdArgs,
) -> Result<(), String> {
    let mut tries = 0;
    let (r, want, copies) = loop {
        tries += 1;
        let (r, addrs) = group(region, cluster_file, etcd).await?;
        let mut dumps = Vec::new();
        for (n, addr) in std::iter::once(&r.primary).chain(&r.backups).zip(&addrs) {
            let d = halyard_replication::admin::dump(addr, region)
                .await
                .map_err(|e| format!("reading region {region} on {n}: {e}"));
            dumps.push(d);
        }
        let (now, _) = group(region, cluster_file, etcd).await?;
        if now.epoch == r.epoch || tries == 5 {
            let mut dumps = dumps.into_iter();
            let want = dumps.next().unwrap_or_else(|| Err("no primary".into()))?;
            break (r, want, dumps.collect::<Vec<_>>());
        }
        println!(
            "region {region}: its group changed while it was read (epoch {} -> {}); reading it again",
            r.epoch, now.epoch
        );
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    };
    let mut bad = 0;
    for (b, got) in r.backups.iter().zip(copies) {
        match diff_pairs(&want, &got?) {
            None => {
                println!("region {region}: {b} matches {} ({} pairs, keys, versions and values)", r.primary, want.len())
            }
            Some(d) => {
                bad += 1;
                println!("region {region}: {b} differs from {}: {d}", r.primary);
            }
        }
    }
    if bad > 0 {
        return Err(format!("{bad} backup(s) of region {region} differ from the primary"));
    }
    Ok(())
}

type Versioned = (Vec<u8>, u64, Vec<u8>);

/// The first difference between two sorted lists of (key, version, value), described.
fn diff_pairs(want: &[Versioned], got: &[Versioned]) -> Option<String> {
    for (i, (w, g)) in want.iter().zip(got).enumerate() {
        if w.0 != g.0 {
            return Some(format!("pair {i}: key {:?} on the primary, {:?} on the backup", show(&w.0), show(&g.0)));
        }
        if w.1 != g.1 {
            return Some(format!("key {:?}: versions differ (LSN {} vs {})", show(&w.0), w.1, g.1));
        }
        if w.2 != g.2 {
            return Some(format!("key {:?}: values differ ({} vs {} bytes)", show(&w.0), w.2.len(), g.2.len()));
        }
    }
    (want.len() != got.len()).then(|| format!("{} pairs on the primary, {} on the backup", want.len(), got.len()))
}

/// Where the server is.
#[derive(Args, Debug)]
struct ConnArgs {
    /// Native protocol address of a server, or of any nodes of a cluster (comma-separated):
    /// requests go to the primary of their key's region.
    #[arg(long, default_value = "127.0.0.1:7379")]
    addr: String,
    /// Seconds to wait for the server.
    #[arg(long, default_value_t = 10)]
    timeout: u64,
    /// The server's password (its requirepass).
    #[arg(long)]
    password: Option<String>,
}

impl ConnArgs {
    fn client(&self) -> Result<halyard_client::blocking::ClusterClient, String> {
        let opts = halyard_client::ClientOptions {
            timeout: std::time::Duration::from_secs(self.timeout),
            retry_for: std::time::Duration::from_secs(self.timeout),
            password: self.password.clone(),
            ..Default::default()
        };
        let seeds: Vec<&str> = self.addr.split(',').map(str::trim).filter(|s| !s.is_empty()).collect();
        halyard_client::blocking::ClusterClient::connect(&seeds, opts)
            .map_err(|e| format!("cannot reach a server at {} (--addr): {e}", self.addr))
    }
}

fn show(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Opens a store directory that no server uses (for the offline tools).
fn open_store(dir: &std::path::Path) -> Result<halyard_engine::Db, String> {
    let opts = halyard_engine::Options { create_if_missing: false, ..Default::default() };
    halyard_engine::Db::open(dir, opts).map_err(|e| format!("{e} (is a server using {}? stop it first)", dir.display()))
}

/// Promotes every backup region of the store at `dir` (a restored backup of a backup node).
fn promote_all(dir: &std::path::Path) -> Result<(), String> {
    let opts = halyard_engine::Options { default_region: false, ..halyard_engine::Options::default() };
    let db = halyard_engine::Db::open(dir, opts).map_err(|e| format!("open {}: {e}", dir.display()))?;
    for r in db.regions().into_iter().filter(|r| r.backup) {
        let p = db.replication().promote(r.id, &[]).map_err(|e| format!("promote region {}: {e}", r.id))?;
        println!("region {} promoted at LSN {}", r.id, p.last_lsn);
    }
    db.flush().map_err(|e| format!("flush {}: {e}", dir.display()))
}

/// Prints what a backup, checkpoint or restore did.
fn copy_report(
    r: halyard_engine::Result<halyard_engine::CopyReport>,
    what: &str,
    to: &std::path::Path,
) -> Result<(), String> {
    let r = r.map_err(|e| format!("{what} to {}: {e}", to.display()))?;
    let lsns: Vec<String> = r.lsns.iter().map(|(id, lsn)| format!("region {id} at LSN {lsn}")).collect();
    let number = if r.backup > 0 { format!(" {}", r.backup) } else { String::new() };
    println!(
        "{what}{number} in {}: {} segments, {} bytes copied, {} bytes already there; {}",
        to.display(),
        r.segments,
        r.bytes_copied,
        r.bytes_reused,
        lsns.join(", ")
    );
    Ok(())
}

/// `halyard inspect`: the store's own account of its last open (see `Stats::open_seconds`).
fn inspect(dir: &std::path::Path, json: bool) -> Result<(), String> {
    let opts = halyard_engine::Options { create_if_missing: false, ..Default::default() };
    let db = halyard_engine::Db::open(dir, opts)
        .map_err(|e| format!("{e} (is a server using {}? stop it first)", dir.display()))?;
    let s = db.stats();
    let fields = [
        ("open_seconds", format!("{:.6}", s.open_seconds)),
        ("open_read_bytes", s.open_read_bytes.to_string()),
        ("space_allocated_bytes", s.space_allocated_bytes.to_string()),
        ("l0_bytes", s.l0_bytes.to_string()),
        ("l0_log_segments", s.log_segments[0].to_string()),
        ("medium_log_segments", s.log_segments[1].to_string()),
        ("large_log_segments", s.log_segments[2].to_string()),
        ("partly_filled_log_segments", s.partly_filled_log_segments.to_string()),
        ("recovery_dropped_records", s.recovery_dropped_records.to_string()),
    ];
    if json {
        let body: Vec<String> = fields.iter().map(|(k, v)| format!("\"{k}\": {v}")).collect();
        println!("{{{}}}", body.join(", "));
    } else {
        for (k, v) in fields {
            println!("{k:<28} {v}");
        }
    }
    Ok(())
}

fn tool(cmd: &Cmd) -> Result<(), String> {
    use std::ops::Bound;
    match cmd {
        Cmd::Inspect { dir, json } => inspect(dir, *json),
        Cmd::Backup { dir, to } => copy_report(open_store(dir)?.backup(to), "backup", to),
        Cmd::Checkpoint { dir, to } => copy_report(open_store(dir)?.checkpoint(to), "checkpoint", to),
        Cmd::Restore { from, backup, to, promote } => {
            copy_report(halyard_engine::restore(from, *backup, to), "restore", to)?;
            if *promote {
                promote_all(to)?;
            }
            Ok(())
        }
        Cmd::Get { key, conn } => match conn.client()?.get(key).map_err(|e| e.to_string())? {
            Some(v) => {
                println!("{}", show(&v));
                Ok(())
            }
            None => Err(format!("{key}: not found")),
        },
        Cmd::Put { key, value, conn } => conn.client()?.put(key, value).map_err(|e| e.to_string()),
        Cmd::Del { key, conn } => conn.client()?.delete(key).map_err(|e| e.to_string()),
        Cmd::Delrange { start, end, conn } => conn.client()?.delete_range(start, end).map_err(|e| e.to_string()),
        Cmd::Scan { start, end, limit, reverse, conn } => {
            let end = end.as_deref().map_or(Bound::Unbounded, |e| Bound::Excluded(e.as_bytes()));
            let pairs = conn
                .client()?
                .scan(Bound::Included(start.as_bytes()), end, *limit as usize, *reverse)
                .map_err(|e| e.to_string())?;
            for (k, v) in pairs {
                println!("{}\t{}", show(&k), show(&v));
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

/// `halyard serve`'s arguments: the server's settings (`ServerConfig`, whose flags override
/// the TOML file given with --config, which overrides the defaults) and how to log.
#[derive(Debug)]
struct ServeArgs {
    cfg: ServerConfig,
    log_format: LogFormat,
}

impl clap::FromArgMatches for ServeArgs {
    fn from_arg_matches(m: &clap::ArgMatches) -> Result<Self, clap::Error> {
        let file = m.get_one::<PathBuf>("config").map(PathBuf::as_path);
        let cfg = ServerConfig::from_file_and_flags(file, m)
            .map_err(|e| clap::Error::raw(clap::error::ErrorKind::InvalidValue, format!("{e}\n")))?;
        let log_format = m.get_one::<LogFormat>("log_format").copied().unwrap_or_default();
        Ok(ServeArgs { cfg, log_format })
    }

    fn update_from_arg_matches(&mut self, m: &clap::ArgMatches) -> Result<(), clap::Error> {
        *self = Self::from_arg_matches(m)?;
        Ok(())
    }
}

impl Args for ServeArgs {
    fn augment_args(cmd: clap::Command) -> clap::Command {
        use clap::{value_parser, Arg};
        ServerConfig::augment_args(cmd)
            .arg(
                Arg::new("config")
                    .long("config")
                    .value_name("FILE")
                    .value_parser(value_parser!(PathBuf))
                    .help("TOML file with any of these settings (and [engine] settings); flags override it"),
            )
            .arg(
                Arg::new("log_format")
                    .long("log-format")
                    .value_parser(value_parser!(LogFormat))
                    .default_value("text")
                    .help(
                        "Log lines (on stderr) as text, coloured only on a terminal, or as JSON \
                         objects, one a line, for log shippers. RUST_LOG picks what is logged [default: info]",
                    ),
            )
    }

    fn augment_args_for_update(cmd: clap::Command) -> clap::Command {
        Self::augment_args(cmd)
    }
}

/// How log lines are written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
enum LogFormat {
    /// Human-readable lines; ANSI colours only when stderr is a terminal and NO_COLOR is unset.
    #[default]
    Text,
    /// One JSON object a line (timestamp, level, fields, target, spans).
    Json,
}

/// Logs go to stderr, filtered by RUST_LOG (info by default).
fn init_logs(format: LogFormat) {
    use std::io::IsTerminal;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into());
    let logs = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    match format {
        LogFormat::Text => {
            let colour = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
            logs.with_ansi(colour).init();
        }
        LogFormat::Json => logs.json().with_ansi(false).init(),
    }
}

fn serve(a: &ServeArgs) -> Result<(), String> {
    let cfg = a.cfg.clone();
    if cfg.role == Role::Storage {
        return serve_storage(&cfg);
    }
    let workers =
        if cfg.workers == 0 { std::thread::available_parallelism().map_or(2, |n| n.get()) } else { cfg.workers };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .thread_name("halyard-net")
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))?;
    let mut fenced_by = None;
    let out = match cfg.storage {
        StorageMode::Local => rt.block_on(halyard_server::run(cfg, shutdown_signal())),
        StorageMode::Remote => {
            // The segments live on the storage nodes; --dir still keeps this node's own small
            // files (the epochs its backup copies accepted).
            std::fs::create_dir_all(&cfg.dir).map_err(|e| format!("cannot create --dir {}: {e}", cfg.dir.display()))?;
            let nodes = storage_nodes(&cfg, &rt)?;
            let remote = remote_storage(&cfg, nodes)?;
            let store = remote.clone();
            if !cfg.etcd.is_empty() {
                rt.spawn(follow_storage_nodes(cfg.clone(), std::sync::Arc::downgrade(&remote)));
            }
            let open = move |opts| halyard_engine::Db::open_on(store, opts);
            let fenced = std::sync::Arc::downgrade(&remote);
            let stop = async move {
                tokio::select! {
                    () = shutdown_signal() => {},
                    () = until_fenced(fenced) => {},
                }
            };
            let out = rt.block_on(halyard_server::run_with(cfg, open, stop));
            fenced_by = remote.fenced_by();
            let s = remote.stats();
            tracing::info!(
                bytes_sent = s.bytes_sent,
                bytes_received = s.bytes_received,
                degraded_reads = s.degraded_reads,
                fragments_moved = s.fragments_moved,
                blocks_repaired = s.blocks_repaired,
                "remote storage at exit"
            );
            out
        }
    }
    .map_err(|e| e.to_string());
    // A blocking task still running (a flush past its minute) does not hold the exit.
    rt.shutdown_timeout(std::time::Duration::from_secs(1));
    match fenced_by {
        Some(why) => Err(format!("stopped: {why}")),
        None => out,
    }
}

/// `halyard serve --role storage`: keeps fragments under --dir, serves them on --listen.
fn serve_storage(cfg: &ServerConfig) -> Result<(), String> {
    halyard_admin::set_cluster_secret(cfg.cluster_secret.as_deref());
    let node = halyard_segstore::node::StorageNode::open(&cfg.dir)
        .map_err(|e| format!("cannot open the fragment directory {}: {e}", cfg.dir.display()))?;
    let l = std::net::TcpListener::bind(&cfg.listen)
        .map_err(|e| format!("cannot listen on --listen {}: {e}", cfg.listen))?;
    let local = l.local_addr().map_err(|e| e.to_string())?;
    if cfg.cluster_secret.is_none() && !local.ip().is_loopback() {
        return Err(format!(
            "a storage node listening on {local} (beyond loopback) needs --cluster-secret: its port changes data"
        ));
    }
    // Kept alive while the node serves: it renews the node's etcd lease.
    let _etcd = match cfg.etcd.is_empty() {
        true => None,
        false => Some(register_storage(cfg)?),
    };
    tracing::info!(listen = %cfg.listen, dir = %cfg.dir.display(), "halyard storage node serving");
    node.serve(l);
    Ok(())
}

/// Registers a storage node under `storage/<name>` in etcd and keeps its lease alive, on a
/// runtime of its own (the node's connections are threads).
fn register_storage(cfg: &ServerConfig) -> Result<tokio::runtime::Runtime, String> {
    let name = cfg.node.clone().ok_or("--etcd needs --node: the storage node's name")?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))?;
    let record = halyard_control::NodeRecord {
        name,
        native: cfg.advertised(&cfg.listen),
        version: env!("CARGO_PKG_VERSION").into(),
        ..Default::default()
    };
    let layout = halyard_control::Layout::new(&cfg.cluster_name);
    let ttl = std::time::Duration::from_secs(cfg.lease_ttl_secs);
    rt.block_on(async {
        let client = halyard_control::session::connect(&cfg.etcd).await?;
        halyard_control::Session::start_storage(client, layout, record, ttl).await
    })
    .map_err(|e| format!("cannot register in etcd at {}: {e}", cfg.etcd.join(",")))?;
    Ok(rt)
}

/// The storage nodes `--storage remote` uses: --storage-nodes, or else those registered in
/// etcd.
fn storage_nodes(cfg: &ServerConfig, rt: &tokio::runtime::Runtime) -> Result<Vec<String>, String> {
    if !cfg.storage_nodes.is_empty() || cfg.etcd.is_empty() {
        return Ok(cfg.storage_nodes.clone());
    }
    let layout = halyard_control::Layout::new(&cfg.cluster_name);
    let found = rt
        .block_on(async {
            let mut client = halyard_control::session::connect(&cfg.etcd).await?;
            halyard_control::session::storage_nodes(&mut client, &layout).await
        })
        .map_err(|e| format!("--storage remote: cannot read the storage nodes from etcd: {e}"))?;
    Ok(found.into_iter().map(|n| n.native).collect())
}

/// Keeps a remote store's storage nodes in step with etcd, once a second: storage nodes that
/// register join those new segments may use; those marked drained or removed (`halyard
/// cluster drain`) take no new fragments and have theirs moved off.
async fn follow_storage_nodes(cfg: ServerConfig, remote: std::sync::Weak<halyard_segstore::RemoteStorage>) {
    let layout = halyard_control::Layout::new(&cfg.cluster_name);
    let mut client = None;
    loop {
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        let Some(rs) = remote.upgrade() else { return };
        if client.is_none() {
            client = halyard_control::session::connect(&cfg.etcd).await.ok();
        }
        let Some(c) = client.as_mut() else { continue };
        match halyard_control::View::load(c, &layout).await {
            Ok(v) => {
                let live: Vec<String> = v.storage.values().map(|r| r.native.clone()).collect();
                let draining: Vec<String> =
                    v.storage.iter().filter(|(name, _)| v.emptying(name)).map(|(_, r)| r.native.clone()).collect();
                rs.set_nodes(&live, &draining);
            }
            Err(e) => {
                tracing::debug!("cannot read the storage nodes from etcd: {e}");
                client = None;
            }
        }
    }
}

/// Returns once another processing node claimed this node's store (the storage nodes refuse
/// it every request from then on): the node stops rather than answer errors.
async fn until_fenced(remote: std::sync::Weak<halyard_segstore::RemoteStorage>) {
    loop {
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        match remote.upgrade() {
            Some(rs) if rs.is_fenced() => return,
            Some(_) => {}
            None => std::future::pending::<()>().await,
        }
    }
}

/// The remote storage `--storage remote` runs the store on.
fn remote_storage(
    cfg: &ServerConfig,
    nodes: Vec<String>,
) -> Result<std::sync::Arc<halyard_segstore::RemoteStorage>, String> {
    let opts = halyard_segstore::RemoteOptions {
        secret: cfg.cluster_secret.clone(),
        nodes,
        store: cfg.node.clone().unwrap_or_else(|| "halyard".into()),
        rho: cfg.stripe_width,
        choice: match cfg.stripe_placement {
            StripePlacement::PowerOfD => halyard_segstore::remote::Choice::PowerOfD,
            StripePlacement::Random => halyard_segstore::remote::Choice::Random,
        },
        seg_bits: cfg.engine_options().segment_bytes.trailing_zeros(),
        tails_before_ack: cfg.remote_log == RemoteLog::Pushed,
        owner: format!("{} listening on {}", cfg.node.as_deref().unwrap_or("halyard"), cfg.listen),
        ..Default::default()
    };
    halyard_segstore::RemoteStorage::open(opts).map_err(|e| format!("--storage remote: {e}"))
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
}

fn main() {
    keep_freed_memory();
    let cli = Cli::parse();
    init_logs(match &cli.cmd {
        Cmd::Serve(a) => a.log_format,
        _ => LogFormat::Text,
    });
    let r = match &cli.cmd {
        Cmd::Serve(a) => serve(a),
        Cmd::Bench(a) => halyard_bench::run(a),
        Cmd::Admin(a) => admin(a),
        Cmd::Cluster(c) => cluster_cmd::run(c),
        other => tool(other),
    };
    if let Err(e) = r {
        eprintln!("halyard: {e}");
        std::process::exit(1);
    }
}
