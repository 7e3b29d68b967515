//! `--cluster N`: a local cluster of `halyard serve` processes started by the bench, one run per
//! replication mode (Send-Index, Build-Index, none), measured per role.
//!
//! Layout: node n1 is the primary of every region and the other nodes hold the backups
//! (`replicas - 1` per region, spread round-robin), so that one process does all the primary
//! work and the others all the backup work: the papers' primary/backup split, measured per
//! process through /proc. Regions split the bench's key space ("user" + 20 digits) evenly.

#![expect(clippy::indexing_slicing, reason = "node and port lists are built with one entry per node")]

use super::api::{bench_thread, Engine, EngineConfig, EngineStats, ServerSample};
use super::server::{metric_of, Probe};
use crate::args::{ClusterSpec, Replication};
use halyard_client::{blocking::ClusterClient, ClientOptions};
use halyard_cluster::{ClusterFile, NodeSpec, RegionSpec};
use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

struct NodeProc {
    child: Child,
    data: PathBuf,
    http: String,
}

impl Drop for NodeProc {
    fn drop(&mut self) {
        super::server::stop_child(&mut self.child);
    }
}

pub(super) struct Cluster {
    nodes: Vec<NodeProc>,
    /// Per bench thread, one region-aware client.
    clients: Vec<ClusterClient>,
    mode: Replication,
    settings: Vec<(String, String)>,
}

/// The `halyard` binary: $HALYARD_BIN, this executable when it is `halyard`, or its sibling.
fn halyard_bin() -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os("HALYARD_BIN") {
        return Ok(PathBuf::from(p));
    }
    let me = std::env::current_exe().map_err(|e| format!("cannot find this executable: {e}"))?;
    if me.file_name().is_some_and(|n| n == "halyard") {
        return Ok(me);
    }
    let sibling = me.with_file_name("halyard");
    if sibling.exists() {
        return Ok(sibling);
    }
    Err("--cluster needs the `halyard` binary: set HALYARD_BIN or run `halyard bench`".into())
}

/// `n` distinct free loopback ports (held together while chosen, so none repeats).
fn ports(n: usize) -> Result<Vec<u16>, String> {
    let ls = (0..n)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| format!("no free loopback port: {e}")))
        .collect::<Result<Vec<_>, _>>()?;
    ls.iter().map(|l| l.local_addr().map(|a| a.port()).map_err(|e| e.to_string())).collect()
}

fn split(i: u32, n: u32) -> String {
    format!("user{:020}", (u64::MAX / n as u64) * i as u64)
}

/// The cluster of `n` nodes on ports `p` (four per node): n1 the primary of every region,
/// `replicas - 1` backups per region spread round-robin over the others.
fn cluster_file(spec: &ClusterSpec, n: usize, replicas: usize, p: &[u16]) -> ClusterFile {
    let nodes = (1..=n)
        .map(|i| NodeSpec {
            name: format!("n{i}"),
            native: format!("127.0.0.1:{}", p[4 * (i - 1)]),
            replication: format!("127.0.0.1:{}", p[4 * (i - 1) + 1]),
            resp: Some(format!("127.0.0.1:{}", p[4 * (i - 1) + 3])),
        })
        .collect();
    let regions = (0..spec.regions)
        .map(|i| RegionSpec {
            id: i + 1,
            start: if i == 0 { String::new() } else { split(i, spec.regions) },
            end: (i + 1 < spec.regions).then(|| split(i + 1, spec.regions)),
            primary: "n1".into(),
            backups: (0..replicas - 1).map(|j| format!("n{}", 2 + (i as usize + j) % (n - 1).max(1))).collect(),
            epoch: 1,
            leases: Default::default(),
            learners: Vec::new(),
            away: Default::default(),
        })
        .collect();
    ClusterFile { nodes, regions }
}

/// What every node's `halyard serve` is given.
struct ServeArgs<'a> {
    bin: &'a Path,
    dir: &'a Path,
    conf: &'a Path,
    file: &'a Path,
    repl: &'a str,
}

/// Starts one node; its stderr goes to `<dir>/<node>.log`.
fn start_node(a: &ServeArgs<'_>, node: &NodeSpec, http: &str, resp: u16) -> Result<NodeProc, String> {
    let data = a.dir.join(&node.name);
    let log = std::fs::File::create(a.dir.join(format!("{}.log", node.name))).map_err(|e| e.to_string())?;
    let child = Command::new(a.bin)
        .arg("serve")
        .arg("--config")
        .arg(a.conf)
        .arg("--dir")
        .arg(&data)
        .args(["--listen", &node.native, "--http", http])
        .args(["--resp", &format!("127.0.0.1:{resp}")])
        .arg("--cluster-file")
        .arg(a.file)
        .args(["--node", &node.name, "--replication", a.repl])
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::from(log))
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", a.bin.display()))?;
    Ok(NodeProc { child, data, http: format!("http://{http}/metrics") })
}

/// Waits up to 30 s for a node's native port to accept connections.
fn wait_up(dir: &Path, node: &NodeSpec) -> Result<(), String> {
    let t0 = Instant::now();
    while std::net::TcpStream::connect(&node.native).is_err() {
        if t0.elapsed() > Duration::from_secs(30) {
            return Err(format!("node {} did not come up (see {}/{}.log)", node.name, dir.display(), node.name));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// Per bench thread, one region-aware client (one connection per node it talks to), which
/// reads the region map from the nodes.
fn connect_all(file: &ClusterFile, threads: usize) -> Result<Vec<ClusterClient>, String> {
    let opts = ClientOptions { timeout: Duration::from_secs(60), ..Default::default() };
    let seeds: Vec<&str> = file.nodes.iter().map(|n| n.native.as_str()).collect();
    (0..threads)
        .map(|_| ClusterClient::connect(&seeds, opts.clone()).map_err(|e| format!("connect {}: {e}", seeds.join(","))))
        .collect()
}

impl Cluster {
    pub(super) fn spawn(
        dir: &Path,
        cfg: &EngineConfig,
        spec: &ClusterSpec,
        mode: Replication,
    ) -> Result<Cluster, String> {
        let bin = halyard_bin()?;
        std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        let n = spec.nodes.max(1);
        let replicas = if mode == Replication::None { 1 } else { spec.replicas.clamp(1, n) };
        // Four per node: native, replication, HTTP, RESP.
        let p = ports(4 * n)?;
        let file = cluster_file(spec, n, replicas, &p);
        let path = dir.join("cluster.toml");
        file.save(&path).map_err(|e| e.to_string())?;
        let sync = match cfg.sync {
            crate::args::Sync::None => "none",
            crate::args::Sync::Group => "group",
            crate::args::Sync::Always => "always",
        };
        let conf = dir.join("server.toml");
        let text = format!(
            "workers = {}\n[engine]\nl0_mb = {}\ngrowth_factor = {}\ncache_mb = {}\nsync = \"{sync}\"\n",
            spec.workers,
            (cfg.l0_bytes >> 20).max(1),
            cfg.growth_factor,
            (cfg.cache_bytes >> 20).max(1)
        );
        std::fs::write(&conf, text).map_err(|e| format!("cannot write {}: {e}", conf.display()))?;
        let repl = if mode == Replication::BuildIndex { "build-index" } else { "send-index" };
        let mut procs = Vec::new();
        for (i, node) in file.nodes.iter().enumerate() {
            let (http, resp) = (format!("127.0.0.1:{}", p[4 * i + 2]), p[4 * i + 3]);
            let args = ServeArgs { bin: &bin, dir, conf: &conf, file: &path, repl };
            procs.push(start_node(&args, node, &http, resp)?);
        }
        for node in &file.nodes {
            wait_up(dir, node)?;
        }
        let clients = connect_all(&file, cfg.threads.max(1))?;
        // The cache is per process; L0 is per region (each region has its own in-memory L0).
        let workers = match spec.workers {
            0 => "0 (one per core)".to_string(),
            w => w.to_string(),
        };
        let settings = vec![
            ("cluster".into(), format!("{n} local `halyard serve` processes, {} regions, {replicas} copies each", spec.regions)),
            ("replication".into(), mode.name().into()),
            ("layout".into(), "n1 is the primary of every region; backups spread over n2..".into()),
            ("ack".into(), "last-write (every backup holds a write in memory before it is answered)".into()),
            ("per_node_budgets".into(), format!("workers {workers}, l0 {} MiB per region, cache {} MiB, growth {}, sync {sync}", cfg.l0_bytes >> 20, cfg.cache_bytes >> 20, cfg.growth_factor)),
            ("measures".into(), "primary: n1's /proc (io, stat); backup: the other nodes' /proc summed; network: bytes every node sent and received on client and replication sockets".into()),
        ];
        Ok(Cluster { nodes: procs, clients, mode, settings })
    }

    fn client(&self) -> &ClusterClient {
        &self.clients[bench_thread() % self.clients.len()]
    }

    fn sample(&self, i: usize) -> ServerSample {
        let n = &self.nodes[i];
        let mut s = Probe::Child { pid: n.child.id(), data: n.data.clone() }.sample();
        if let Ok(body) = super::server::http_get(&n.http) {
            s.stall_seconds = metric_of(&body, "halyard_engine_stall_seconds_total");
            let m = |name: &str| metric_of(&body, name).map(|v| v as u64);
            s.net_bytes = [
                "halyard_network_received_bytes_total",
                "halyard_network_sent_bytes_total",
                "halyard_replication_sent_bytes_total",
                "halyard_replication_socket_received_bytes_total",
            ]
            .iter()
            .map(|n| m(n))
            .sum();
            s.shipped_bytes = m("halyard_replication_shipped_bytes_total");
            s.image_bytes = m("halyard_replication_shipped_image_bytes_total");
            s.l0_bytes = metric_of(&body, "halyard_engine_l0_bytes").map(|v| v as u64);
        }
        s
    }
}

impl Engine for Cluster {
    fn put(&self, key: &[u8], value: &[u8]) -> Result<(), String> {
        self.client().put(key, value).map_err(|e| e.to_string())
    }

    fn get(&self, key: &[u8]) -> Result<Option<usize>, String> {
        self.client().get(key).map(|v| v.map(|v| v.len())).map_err(|e| e.to_string())
    }

    fn scan(&self, start: &[u8], len: usize) -> Result<(usize, u64), String> {
        // The cluster client crosses regions in key order.
        let pairs =
            self.client().scan(Bound::Included(start), Bound::Unbounded, len, false).map_err(|e| e.to_string())?;
        let bytes = pairs.iter().map(|(k, v)| (k.len() + v.len()) as u64).sum();
        Ok((pairs.len(), bytes))
    }

    fn stats(&self) -> EngineStats {
        let primary = self.sample(0);
        let backups: Vec<ServerSample> = (1..self.nodes.len()).map(|i| self.sample(i)).collect();
        let sum = |f: &dyn Fn(&ServerSample) -> Option<u64>| backups.iter().map(f).sum::<Option<u64>>();
        let backup = (!backups.is_empty()).then(|| ServerSample {
            source: "backup nodes' /proc, summed".into(),
            read_bytes: sum(&|s| s.read_bytes),
            write_bytes: sum(&|s| s.write_bytes),
            cpu_seconds: backups.iter().map(|s| s.cpu_seconds).sum::<Option<f64>>(),
            disk_bytes: sum(&|s| s.disk_bytes),
            peak_rss_bytes: sum(&|s| s.peak_rss_bytes),
            stall_seconds: None,
            net_bytes: sum(&|s| s.net_bytes),
            shipped_bytes: sum(&|s| s.shipped_bytes),
            image_bytes: sum(&|s| s.image_bytes),
            l0_bytes: sum(&|s| s.l0_bytes),
        });
        EngineStats {
            device_read_bytes: None,
            device_write_bytes: None,
            stall_seconds: primary.stall_seconds.unwrap_or(f64::NAN),
            server: Some(primary),
            backup,
            counters: Default::default(),
            gauges: Default::default(),
        }
    }

    fn settings(&self) -> Vec<(String, String)> {
        self.settings.clone()
    }

    fn halyard_server(&self) -> bool {
        // Send-Index is the numerator of the ratios; Build-Index and no replication the baselines.
        self.mode == Replication::SendIndex
    }

    fn begin_phase(&self) {
        for n in &self.nodes {
            let _ = std::fs::write(format!("/proc/{}/clear_refs", n.child.id()), "5");
        }
    }
}
