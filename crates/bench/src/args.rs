//! Command-line arguments and their validation into a [`Config`].
//!
//! Lists (`--engines`, `--workloads`, `--mix`) are taken as plain strings and parsed here
//! rather than by clap so that every bad value gets one message naming the accepted ones,
//! and so that the checks can be unit-tested without a process.

#![expect(clippy::indexing_slicing, reason = "indexes within argument lists whose lengths are checked")]

use crate::workload::{Dist, KeyScheme, Mix, Workload};
use clap::Args;
use serde::Serialize;
use std::path::PathBuf;

/// Arguments of `halyard bench`.
#[derive(Args, Debug, Clone)]
pub struct BenchArgs {
    /// Directory for the engines' data; each engine and mix gets a fresh subdirectory.
    #[arg(long, default_value = "halyard-bench")]
    pub dir: PathBuf,
    /// Engines to run in turn, comma-separated: halyard, rocksdb, blobdb (the last two need
    /// a build with the `rocksdb` feature), redis (a `redis-server` child on a free loopback
    /// port, AOF with appendfsync everysec, as a reference for the server path). `faulty` is
    /// a Halyard that fails after 1000 writes, for testing the failure path.
    /// [default: halyard, or none when --target is given]
    #[arg(long)]
    pub engines: Option<String>,
    /// Running servers to benchmark through the network, after the engines: resp://HOST:PORT
    /// (Redis protocol; Halyard or Redis) or halyard://HOST:PORT (native protocol).
    /// Repeatable or comma-separated. The servers are not emptied first.
    #[arg(long)]
    pub target: Vec<String>,
    /// Prometheus endpoint of the Halyard server behind --target (e.g.
    /// http://127.0.0.1:9379/metrics): device bytes, CPU, space and stalls then come from the
    /// server. Without it those figures are reported as unknown (CPU: client side).
    #[arg(long)]
    pub metrics: Option<String>,
    /// The password of halyard:// targets (their `requirepass`), for servers bound beyond
    /// loopback.
    #[arg(long)]
    pub password: Option<String>,
    /// Start a local cluster of N `halyard serve` processes and run the workloads through it
    /// once per mode of --replication (node n1 leads every region; the others hold the
    /// backups, so that primary and backup work are measured per process).
    #[arg(long)]
    pub cluster: Option<usize>,
    /// Copies of each region in --cluster runs, the primary included.
    #[arg(long, default_value_t = 3)]
    pub replicas: usize,
    /// Replication modes for --cluster, comma-separated: send-index, build-index, none
    /// (no backups: the unreplicated reference).
    #[arg(long, default_value = "send-index,build-index,none")]
    pub replication: String,
    /// Regions in --cluster runs.
    #[arg(long, default_value_t = 32)]
    pub regions: u32,
    /// Network worker threads of each --cluster process (0: the server's default, one per
    /// core; the processes then share the cores).
    #[arg(long, default_value_t = 0)]
    pub node_workers: usize,
    /// YCSB workloads in order, comma-separated: load-a, run-a .. run-f, and run-w (updates
    /// only, Nova-LSM's write-only mix; not in the default list). Run workloads need a loaded
    /// store: load-a is put first when missing.
    #[arg(long, default_value = "load-a,run-a,run-b,run-c,run-d,run-e,run-f")]
    pub workloads: String,
    /// KV size mixes, comma-separated: S, M, L, SD, MD, LD or custom:S%,M%,L% (33 / 148 /
    /// 1228 B pairs with 24 B keys), or YCSB-CXX's ycsb-cxx-sd, ycsb-cxx-md, ycsb-cxx-ld
    /// (values of 5 / 100 / 2000 B, sizes cycling per thread through six of the main size,
    /// two of the next and two of the last, as Parallax's harness makes them). A custom mix
    /// must be the only or the last entry.
    #[arg(long, default_value = "SD")]
    pub mix: String,
    /// Key scheme: ycsb ("user" + 20 zero-padded digits of FNV-64, 24 B) or fnv (YCSB-CXX's
    /// bare decimal FNV-64, 19.4 B on average).
    #[arg(long, default_value = "ycsb")]
    pub keys: String,
    /// Request distribution: zipfian (0.99, scrambled), zipfian-ordered (the smallest keys the
    /// most popular, adjacent), uniform or latest, optionally followed by
    /// per-workload choices (`zipfian,run-a=uniform` is YCSB-CXX's workloads A and C). Run D
    /// uses latest unless told otherwise.
    #[arg(long, default_value = "zipfian")]
    pub dist: String,
    /// Updates of Run A and Run B read the pair first (a read-modify-write, as YCSB-CXX's
    /// updates of ten-field records do).
    #[arg(long)]
    pub update_rmw: bool,
    /// Close the engines and open them again between phases (in-process engines only), as
    /// YCSB-CXX does; each phase then reports the reopen before it and the close after it.
    #[arg(long)]
    pub reopen_between_phases: bool,
    /// Records inserted by load-a.
    #[arg(long, default_value_t = 100_000)]
    pub records: u64,
    /// Operations of each run workload.
    #[arg(long, default_value_t = 100_000)]
    pub ops: u64,
    /// Client threads sharing one engine.
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// Cache budget of every engine (MiB).
    #[arg(long, default_value_t = 256)]
    pub cache_mb: u64,
    /// Halyard's LSM bypass (MiB), taken out of its cache budget so that every engine has
    /// the same memory: point reads of keys whose values are in its logs skip the SSTs.
    /// 0: off.
    #[arg(long, default_value_t = 0)]
    pub lsm_bypass_mb: u64,
    /// Halyard's large-log GC threshold: the share of the log's bytes that may be invalid
    /// before GC moves the valid pairs out of the worst segments (0..=1; 1: never) [default:
    /// the engine's].
    #[arg(long)]
    pub gc_threshold: Option<f64>,
    /// L0 / memtable budget of every engine (MiB; in --cluster runs, of each region).
    #[arg(long, default_value_t = 64)]
    pub l0_mb: u64,
    /// Halyard's Dranges per L0 table (Nova-LSM's θ, 1..=64): key ranges of about equal
    /// write load, each with its own tree and lock [default: the engine's].
    #[arg(long)]
    pub dranges: Option<usize>,
    /// Halyard's parts per L0 -> L1 merge (1..=16): the merge cut by key range, its parts
    /// run at once [default: the engine's].
    #[arg(long)]
    pub l0_merge_parts: Option<usize>,
    /// Size ratio between consecutive levels.
    #[arg(long, default_value_t = 8)]
    pub growth_factor: u32,
    /// Durability of writes: none, group or always.
    #[arg(long, default_value = "group")]
    pub sync: String,
    /// Seed of the operation sequence (the same on every engine).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Write the results as JSON to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Write charts to this file (.svg or .png).
    #[arg(long)]
    pub plot: Option<PathBuf>,
    /// No progress bar.
    #[arg(long)]
    pub quiet: bool,
    /// Keep the engines' directories after the run (they are removed by default).
    #[arg(long)]
    pub keep: bool,
}

/// Protocol of a remote target.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Proto {
    /// RESP2 (Redis protocol), to a Halyard server or a real Redis.
    Resp,
    /// Halyard's native protocol through `halyard-client`.
    Native,
}

/// A running server given with `--target`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// Protocol, from the URL's scheme.
    pub proto: Proto,
    /// `host:port`.
    pub addr: String,
    /// The URL as normalised (`scheme://host:port`): the engine's name in the report.
    pub url: String,
}

impl Target {
    /// Parses `resp://host[:port]` or `halyard://host[:port]` (default ports 6379 / 7379).
    pub fn parse(s: &str) -> Result<Target, String> {
        let bad = |why: &str| format!("--target `{s}`: {why} (expected resp://HOST:PORT or halyard://HOST:PORT)");
        let (scheme, rest) = s.split_once("://").ok_or_else(|| bad("no scheme"))?;
        let (proto, port) = match scheme.to_ascii_lowercase().as_str() {
            "resp" | "redis" => (Proto::Resp, 6379),
            "halyard" => (Proto::Native, 7379),
            _ => return Err(bad(&format!("unknown scheme `{scheme}`"))),
        };
        let host = rest.strip_suffix('/').unwrap_or(rest);
        if host.is_empty() || host.contains('/') || host.contains('@') {
            return Err(bad("only a host and port are accepted"));
        }
        // A bracketed IPv6 address has colons of its own; a port follows the bracket.
        let has_port = match host.rfind(']') {
            Some(i) => host[i..].contains(':'),
            None => host.contains(':'),
        };
        let addr = if has_port { host.to_string() } else { format!("{host}:{port}") };
        let p = addr.rsplit(':').next().unwrap_or("");
        if p.parse::<u16>().is_err() {
            return Err(bad(&format!("bad port `{p}`")));
        }
        let scheme = if proto == Proto::Resp { "resp" } else { "halyard" };
        Ok(Target { proto, url: format!("{scheme}://{addr}"), addr })
    }
}

/// An engine to benchmark.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EngineKind {
    /// Halyard's engine.
    Halyard,
    /// RocksDB, values in place.
    Rocksdb,
    /// RocksDB with blob files and blob GC.
    Blobdb,
    /// Halyard that fails after a number of writes (tests the failure path).
    Faulty,
    /// A `redis-server` child spoken to over RESP.
    Redis,
    /// A running server given with `--target`.
    Remote(Target),
    /// A local cluster started by the bench (`--cluster`), in one replication mode.
    Cluster(Replication),
}

/// Replication mode of a `--cluster` run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Replication {
    /// Backups install the primary's compaction output.
    SendIndex,
    /// Backups replay and compact themselves.
    BuildIndex,
    /// No backups.
    None,
}

impl Replication {
    /// The command-line name.
    pub fn name(self) -> &'static str {
        match self {
            Replication::SendIndex => "send-index",
            Replication::BuildIndex => "build-index",
            Replication::None => "none",
        }
    }
}

/// The shape of a `--cluster` run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ClusterSpec {
    /// Processes.
    pub nodes: usize,
    /// Copies per region, the primary included.
    pub replicas: usize,
    /// Regions.
    pub regions: u32,
    /// Network worker threads per process (0: the server's default).
    pub workers: usize,
}

impl EngineKind {
    /// Name as given on the command line (the URL for a target).
    pub fn name(&self) -> &str {
        match self {
            EngineKind::Halyard => "halyard",
            EngineKind::Rocksdb => "rocksdb",
            EngineKind::Blobdb => "blobdb",
            EngineKind::Faulty => "faulty",
            EngineKind::Redis => "redis",
            EngineKind::Remote(t) => &t.url,
            EngineKind::Cluster(Replication::SendIndex) => "cluster-send-index",
            EngineKind::Cluster(Replication::BuildIndex) => "cluster-build-index",
            EngineKind::Cluster(Replication::None) => "cluster-none",
        }
    }

    /// Whether requests go through a server rather than into this process.
    pub fn is_server(&self) -> bool {
        matches!(self, EngineKind::Redis | EngineKind::Remote(_) | EngineKind::Cluster(_))
    }
}

// The JSON names engines as on the command line, a target by its URL.
impl Serialize for EngineKind {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

/// Durability of writes, mapped onto each engine's own knobs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Sync {
    /// No per-write durability (Halyard `SyncMode::None`, RocksDB WAL disabled).
    None,
    /// Group commit (Halyard `SyncMode::Group`, RocksDB WAL without sync).
    Group,
    /// Durable on return (Halyard `SyncMode::Always`, RocksDB `sync = true`).
    Always,
}

/// Validated arguments.
#[derive(Clone, Debug, Serialize)]
pub struct Config {
    /// Parent directory of the engines' directories.
    pub dir: PathBuf,
    /// Engines in order.
    pub engines: Vec<EngineKind>,
    /// Workloads in order.
    pub workloads: Vec<Workload>,
    /// Mixes in order.
    pub mixes: Vec<Mix>,
    /// Request distribution.
    pub dist: Dist,
    /// Per-workload request distributions that override `dist`.
    pub dist_by: Vec<(Workload, Dist)>,
    /// Key scheme.
    pub keys: KeyScheme,
    /// Updates are read-modify-writes.
    pub update_rmw: bool,
    /// Close and reopen between phases.
    pub reopen: bool,
    /// Records of load-a.
    pub records: u64,
    /// Operations per run workload.
    pub ops: u64,
    /// Client threads.
    pub threads: usize,
    /// Cache budget in bytes.
    pub cache_bytes: u64,
    /// Halyard's LSM bypass budget in bytes (within `cache_bytes`).
    pub lsm_bypass_bytes: u64,
    /// Halyard's large-log GC threshold (`None`: the engine's default).
    pub gc_threshold: Option<f64>,
    /// L0 / memtable budget in bytes.
    pub l0_bytes: u64,
    /// Halyard's Dranges per L0 table (`None`: the engine's default).
    pub dranges: Option<usize>,
    /// Halyard's parts per L0 merge (`None`: the engine's default).
    pub l0_merge_parts: Option<usize>,
    /// Level size ratio.
    pub growth_factor: u32,
    /// Durability.
    pub sync: Sync,
    /// Seed.
    pub seed: u64,
    /// JSON output.
    pub json: Option<PathBuf>,
    /// Chart output.
    pub plot: Option<PathBuf>,
    /// No progress bar.
    pub quiet: bool,
    /// Keep data directories.
    pub keep: bool,
    /// Prometheus endpoint of the Halyard server behind the targets.
    pub metrics: Option<String>,
    /// Password of halyard:// targets.
    pub password: Option<String>,
    /// `--cluster`.
    pub cluster: Option<ClusterSpec>,
}

fn list(s: &str) -> impl Iterator<Item = &str> {
    s.split(',').map(str::trim).filter(|x| !x.is_empty())
}

/// Parses `--dist`: a distribution, then `workload=distribution` overrides.
pub fn parse_dist(s: &str) -> Result<(Dist, Vec<(Workload, Dist)>), String> {
    let mut dist = None;
    let mut by = Vec::new();
    for item in list(s) {
        match item.split_once('=') {
            Some((w, d)) => by.push((Workload::parse(w.trim())?, Dist::parse(d.trim())?)),
            None if dist.is_none() => dist = Some(Dist::parse(item)?),
            None => return Err(format!("--dist `{s}`: one default distribution, then WORKLOAD=DIST items")),
        }
    }
    Ok((dist.unwrap_or(Dist::Zipfian), by))
}

/// Parses `--engines`.
pub fn parse_engines(s: &str) -> Result<Vec<EngineKind>, String> {
    let mut v = Vec::new();
    for e in list(s) {
        let k = match e.to_ascii_lowercase().as_str() {
            "halyard" => EngineKind::Halyard,
            "rocksdb" => EngineKind::Rocksdb,
            "blobdb" => EngineKind::Blobdb,
            "faulty" => EngineKind::Faulty,
            "redis" => EngineKind::Redis,
            _ => return Err(format!("unknown engine `{e}` (expected halyard, rocksdb, blobdb or redis)")),
        };
        if matches!(k, EngineKind::Rocksdb | EngineKind::Blobdb) && !cfg!(feature = "rocksdb") {
            return Err(format!(
                "engine `{e}` needs a build with the `rocksdb` feature (librocksdb-dev, \
                 ROCKSDB_LIB_DIR=/usr/lib/x86_64-linux-gnu)"
            ));
        }
        if v.contains(&k) {
            return Err(format!("engine `{e}` is listed twice"));
        }
        v.push(k);
    }
    Ok(v)
}

/// The engines of `--engines` followed by the servers of `--target`.
pub fn parse_engine_list(engines: Option<&str>, targets: &[String]) -> Result<Vec<EngineKind>, String> {
    let mut v = match engines {
        Some(e) => parse_engines(e)?,
        None if targets.is_empty() => vec![EngineKind::Halyard],
        None => Vec::new(),
    };
    for t in targets.iter().flat_map(|t| list(t)) {
        let k = EngineKind::Remote(Target::parse(t)?);
        if v.contains(&k) {
            return Err(format!("target `{t}` is listed twice"));
        }
        v.push(k);
    }
    if v.is_empty() {
        return Err("--engines is empty".into());
    }
    Ok(v)
}

/// Parses `--workloads`; puts load-a first when only run workloads are given.
pub fn parse_workloads(s: &str) -> Result<Vec<Workload>, String> {
    let mut v = Vec::new();
    for w in list(s) {
        v.push(Workload::parse(w)?);
    }
    if v.is_empty() {
        return Err("--workloads is empty".into());
    }
    if v[0] != Workload::LoadA {
        if v.contains(&Workload::LoadA) {
            return Err("load-a must come first in --workloads: run workloads need a loaded store".into());
        }
        v.insert(0, Workload::LoadA);
    }
    Ok(v)
}

/// Parses `--mix`. `custom:a,b,c` swallows the rest of the list, so it comes last.
pub fn parse_mixes(s: &str) -> Result<Vec<Mix>, String> {
    let mut v = Vec::new();
    let (named, custom) = match s.find("custom:") {
        Some(i) => (&s[..i], Some(&s[i..])),
        None => (s, None),
    };
    for m in list(named) {
        v.push(Mix::parse(m)?);
    }
    if let Some(c) = custom {
        v.push(Mix::parse(c)?);
    }
    if v.is_empty() {
        return Err("--mix is empty".into());
    }
    Ok(v)
}

impl Config {
    /// Checks the arguments.
    pub fn from_args(a: &BenchArgs) -> Result<Config, String> {
        let (dist, dist_by) = parse_dist(&a.dist)?;
        let sync = match a.sync.to_ascii_lowercase().as_str() {
            "none" => Sync::None,
            "group" => Sync::Group,
            "always" => Sync::Always,
            s => return Err(format!("unknown --sync `{s}` (expected none, group or always)")),
        };
        if a.records == 0 {
            return Err("--records must be at least 1".into());
        }
        if a.threads == 0 || a.threads > 1024 {
            return Err(format!("--threads {} must be in 1..=1024", a.threads));
        }
        if a.lsm_bypass_mb >= a.cache_mb {
            return Err(format!("--lsm-bypass-mb {} must leave some of --cache-mb {}", a.lsm_bypass_mb, a.cache_mb));
        }
        if a.gc_threshold.is_some_and(|t| !(0.0..=1.0).contains(&t)) {
            return Err("--gc-threshold must be in 0..=1".into());
        }
        if a.cache_mb == 0 {
            return Err("--cache-mb must be at least 1".into());
        }
        if a.l0_mb == 0 || a.l0_mb > 4096 {
            return Err(format!("--l0-mb {} must be in 1..=4096", a.l0_mb));
        }
        if !(2..=100).contains(&a.growth_factor) {
            return Err(format!("--growth-factor {} must be in 2..=100", a.growth_factor));
        }
        if let Some(m) = &a.metrics {
            if !m.starts_with("http://") {
                return Err(format!("--metrics `{m}`: expected an http:// URL"));
            }
        }
        if let Some(p) = &a.plot {
            let ext = p.extension().and_then(|e| e.to_str()).unwrap_or("").to_ascii_lowercase();
            if ext != "svg" && ext != "png" {
                return Err(format!("--plot {}: the file name must end in .svg or .png", p.display()));
            }
        }
        let cluster = cluster_spec(a)?;
        let mut engines = if cluster.is_some() && a.engines.is_none() && a.target.is_empty() {
            Vec::new()
        } else {
            parse_engine_list(a.engines.as_deref(), &a.target)?
        };
        if cluster.is_some() {
            add_cluster_runs(&a.replication, &mut engines)?;
        }
        if let Some(e) =
            engines.iter().find(|e| a.reopen_between_phases && (e.is_server() || **e == EngineKind::Faulty))
        {
            return Err(format!(
                "--reopen-between-phases reopens in-process engines only (halyard, rocksdb, blobdb), not {}",
                e.name()
            ));
        }
        Ok(Config {
            dir: a.dir.clone(),
            engines,
            cluster,
            workloads: parse_workloads(&a.workloads)?,
            mixes: parse_mixes(&a.mix)?,
            dist,
            dist_by,
            keys: KeyScheme::parse(&a.keys)?,
            update_rmw: a.update_rmw,
            reopen: a.reopen_between_phases,
            records: a.records,
            ops: a.ops,
            threads: a.threads,
            cache_bytes: a.cache_mb << 20,
            lsm_bypass_bytes: a.lsm_bypass_mb << 20,
            gc_threshold: a.gc_threshold,
            l0_bytes: a.l0_mb << 20,
            dranges: a.dranges,
            l0_merge_parts: a.l0_merge_parts,
            growth_factor: a.growth_factor,
            sync,
            seed: a.seed,
            json: a.json.clone(),
            plot: a.plot.clone(),
            quiet: a.quiet,
            keep: a.keep,
            metrics: a.metrics.clone(),
            password: a.password.clone(),
        })
    }
}

impl Config {
    /// The request distribution of workload `w`.
    pub fn dist_of(&self, w: Workload) -> Dist {
        match self.dist_by.iter().find(|(x, _)| *x == w) {
            Some((_, d)) => *d,
            None if w == Workload::RunD => Dist::Latest,
            None => self.dist,
        }
    }
}

/// `--cluster N` with its `--replicas`, `--regions` and `--node-workers`, checked.
fn cluster_spec(a: &BenchArgs) -> Result<Option<ClusterSpec>, String> {
    let Some(n) = a.cluster else { return Ok(None) };
    if !(1..=16).contains(&n) {
        return Err(format!("--cluster {n} must be in 1..=16"));
    }
    if !(1..=n).contains(&a.replicas) {
        return Err(format!("--replicas {} must be in 1..={n} (the nodes of --cluster)", a.replicas));
    }
    if !(1..=1024).contains(&a.regions) {
        return Err(format!("--regions {} must be in 1..=1024", a.regions));
    }
    if a.node_workers > 64 {
        return Err(format!("--node-workers {} must be at most 64", a.node_workers));
    }
    Ok(Some(ClusterSpec { nodes: n, replicas: a.replicas, regions: a.regions, workers: a.node_workers }))
}

/// One cluster run per mode of `--replication` (a comma-separated list).
fn add_cluster_runs(replication: &str, engines: &mut Vec<EngineKind>) -> Result<(), String> {
    for m in list(replication) {
        let mode = match m {
            "send-index" => Replication::SendIndex,
            "build-index" => Replication::BuildIndex,
            "none" => Replication::None,
            _ => return Err(format!("--replication `{m}`: expected send-index, build-index or none")),
        };
        if engines.contains(&EngineKind::Cluster(mode)) {
            return Err(format!("--replication `{m}` is listed twice"));
        }
        engines.push(EngineKind::Cluster(mode));
    }
    if !engines.iter().any(|e| matches!(e, EngineKind::Cluster(_))) {
        return Err("--replication is empty".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        a: BenchArgs,
    }

    fn cfg(args: &[&str]) -> Result<Config, String> {
        let cli =
            Cli::try_parse_from(std::iter::once("bench").chain(args.iter().copied())).map_err(|e| e.to_string())?;
        Config::from_args(&cli.a)
    }

    #[test]
    fn defaults_are_valid() {
        let c = cfg(&[]).unwrap();
        assert_eq!(c.engines, vec![EngineKind::Halyard]);
        assert_eq!(c.workloads.len(), 7);
        assert_eq!(c.sync, Sync::Group);
    }

    #[test]
    fn bad_values_are_named() {
        let e = cfg(&["--engines", "halyard,leveldb"]).unwrap_err();
        assert!(e.contains("leveldb"), "{e}");
        let e = cfg(&["--workloads", "load-a,run-z"]).unwrap_err();
        assert!(e.contains("run-z"), "{e}");
        let e = cfg(&["--mix", "XL"]).unwrap_err();
        assert!(e.contains("XL"), "{e}");
        let e = cfg(&["--mix", "custom:50,60,10"]).unwrap_err();
        assert!(e.contains("100"), "{e}");
        let e = cfg(&["--dist", "pareto"]).unwrap_err();
        assert!(e.contains("pareto"), "{e}");
        let e = cfg(&["--sync", "sometimes"]).unwrap_err();
        assert!(e.contains("sometimes"), "{e}");
        assert!(cfg(&["--threads", "0"]).unwrap_err().contains("--threads"));
        assert!(cfg(&["--records", "0"]).unwrap_err().contains("--records"));
        assert!(cfg(&["--growth-factor", "1"]).unwrap_err().contains("--growth-factor"));
        assert!(cfg(&["--plot", "x.pdf"]).unwrap_err().contains(".svg"));
        assert!(cfg(&["--engines", "halyard,halyard"]).unwrap_err().contains("twice"));
        assert!(cfg(&["--records", "lots"]).is_err());
        assert!(cfg(&["--workloads", "run-a,load-a"]).unwrap_err().contains("first"));
    }

    #[test]
    fn lists_parse() {
        let c = cfg(&["--mix", "SD,MD,custom:10%,20%,70%", "--workloads", "run-c,run-e"]).unwrap();
        assert_eq!(c.mixes.len(), 3);
        assert_eq!(c.mixes[2].percent, [10, 20, 70]);
        assert_eq!(c.workloads, vec![Workload::LoadA, Workload::RunC, Workload::RunE]);
    }

    #[test]
    fn ycsb_cxx_settings_parse() {
        let c =
            cfg(&["--dist", "zipfian,run-a=uniform", "--keys", "fnv", "--mix", "ycsb-cxx-sd", "--update-rmw"]).unwrap();
        assert_eq!((c.dist_of(Workload::RunA), c.dist_of(Workload::RunC)), (Dist::Uniform, Dist::Zipfian));
        assert_eq!(c.dist_of(Workload::RunD), Dist::Latest);
        assert_eq!(c.keys, KeyScheme::Fnv);
        assert!(c.update_rmw && !c.reopen);
        assert!(cfg(&["--dist", "zipfian,uniform"]).unwrap_err().contains("WORKLOAD=DIST"));
        assert!(cfg(&["--dist", "run-q=uniform"]).unwrap_err().contains("run-q"));
        let e = cfg(&["--reopen-between-phases", "--target", "resp://h:1"]).unwrap_err();
        assert!(e.contains("in-process"), "{e}");
        assert!(cfg(&["--reopen-between-phases", "--workloads", "load-a,verify"]).unwrap().reopen);
    }

    #[test]
    fn targets_parse() {
        let c = cfg(&["--target", "resp://127.0.0.1:6380,halyard://localhost", "--target", "resp://[::1]"]).unwrap();
        let names: Vec<&str> = c.engines.iter().map(|e| e.name()).collect();
        assert_eq!(names, ["resp://127.0.0.1:6380", "halyard://localhost:7379", "resp://[::1]:6379"]);
        assert!(c.engines.iter().all(|e| e.is_server()));
        let c = cfg(&["--engines", "halyard,redis", "--target", "resp://h:1"]).unwrap();
        assert_eq!(c.engines.len(), 3);
        assert!(cfg(&["--target", "http://h:1"]).unwrap_err().contains("scheme"));
        assert!(cfg(&["--target", "resp://h:x"]).unwrap_err().contains("port"));
        assert!(cfg(&["--target", "resp://h:1,resp://h:1"]).unwrap_err().contains("twice"));
        assert!(cfg(&["--metrics", "h:9379"]).unwrap_err().contains("http://"));
    }

    #[cfg(not(feature = "rocksdb"))]
    #[test]
    fn rocksdb_needs_the_feature() {
        assert!(cfg(&["--engines", "halyard,rocksdb"]).unwrap_err().contains("feature"));
    }
}
