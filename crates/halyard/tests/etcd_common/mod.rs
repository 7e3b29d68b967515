//! Shared by the tests of clusters coordinated by etcd: a real etcd, real `halyard serve --etcd`
//! nodes on free loopback ports, and the cluster's status as `halyard cluster status --json`
//! prints it.

#![allow(dead_code)]

use crate::common::free_port;
use halyard_client::blocking::ClusterClient;
use halyard_client::ClientOptions;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The cluster secret every test node is given (and `halyard admin` through
/// HALYARD_CLUSTER_SECRET).
pub const SECRET: &str = "test-cluster-secret";

/// The test key of id `i`: "key", its last digit (so that `cluster init --numeric-keys` puts
/// ids ending 0..2 in the first of three regions), the id.
pub fn key(i: u64) -> Vec<u8> {
    format!("key{}{:07}", i % 10, i).into_bytes()
}

/// The value written under `key(i)`.
pub fn value(i: u64) -> Vec<u8> {
    format!("value-{i}-{}", "x".repeat((i % 50) as usize)).into_bytes()
}

pub struct Proc(pub Option<Child>);

impl Proc {
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill9();
    }
}

pub fn wait_port(port: u16) {
    let t0 = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(t0.elapsed() < Duration::from_secs(30), "port {port} did not come up");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A single-member etcd with lease checkpointing, on free ports.
pub fn start_etcd(dir: &Path) -> (Proc, String) {
    start_etcd_on(dir, free_port(), free_port())
}

/// A temporary directory, a fresh etcd in it, and a cluster created there with `regions`
/// regions of `replicas` copies each (split over `key0`..`key9` with `numeric`, else over the
/// first byte).
pub fn new_cluster(regions: usize, replicas: usize, numeric: bool) -> (tempfile::TempDir, Proc, String) {
    new_cluster_with(regions, replicas, if numeric { &["--numeric-keys"] } else { &[] })
}

/// [`new_cluster`] with more `halyard cluster init` arguments. The master merges no region by
/// itself (`--no-merge`: the tests name the regions `init` made) unless `extra` holds the
/// marker `--merges`.
pub fn new_cluster_with(regions: usize, replicas: usize, extra: &[&str]) -> (tempfile::TempDir, Proc, String) {
    let dir = tempfile::tempdir().unwrap();
    let (etcd, url) = start_etcd(dir.path());
    let (r, c) = (regions.to_string(), replicas.to_string());
    let mut args = vec!["cluster", "init", "--etcd", &url, "--regions", &r, "--replicas", &c];
    args.extend(extra.iter().filter(|a| **a != "--merges"));
    if !extra.contains(&"--merges") {
        args.push("--no-merge");
    }
    if !extra.contains(&"--replace-after-secs") {
        // Groups refill at once after a loss (the default keeps a place for 60 s).
        args.extend_from_slice(&["--replace-after-secs", "0"]);
    }
    let (ok, out) = halyard(&args);
    assert!(ok, "{out}");
    (dir, etcd, url)
}

/// etcd on the given client and peer ports (again after a kill: same data, same ports).
pub fn start_etcd_on(dir: &Path, client: u16, peer: u16) -> (Proc, String) {
    let url = format!("http://127.0.0.1:{client}");
    let peer_url = format!("http://127.0.0.1:{peer}");
    let child = Command::new("etcd")
        .args(["--logger", "zap", "--log-level", "error", "--data-dir"])
        .arg(dir.join("etcd"))
        .args(["--listen-client-urls", &url, "--advertise-client-urls", &url])
        .args(["--listen-peer-urls", &peer_url, "--initial-advertise-peer-urls", &peer_url])
        .args(["--initial-cluster", &format!("default={peer_url}")])
        .arg("--experimental-enable-lease-checkpoint")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("etcd (apt-get install etcd-server; scripts/test.sh installs it)");
    let mut child = child;
    wait_healthy(&mut child, client);
    (Proc(Some(child)), url)
}

/// Waits until etcd answers `/health` with true (an open port alone is not enough: etcd binds
/// its listeners before it is ready, and gives them up again if it cannot start).
fn wait_healthy(child: &mut Child, client: u16) {
    use std::io::{Read, Write};
    let t0 = Instant::now();
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            panic!("etcd on port {client} exited at start ({status}); is the port taken?");
        }
        let healthy = std::net::TcpStream::connect(("127.0.0.1", client)).is_ok_and(|mut s| {
            let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
            let mut body = String::new();
            s.write_all(b"GET /health HTTP/1.0\r\n\r\n").is_ok()
                && s.read_to_string(&mut body).is_ok()
                && body.contains("\"true\"")
        });
        if healthy {
            return;
        }
        assert!(t0.elapsed() < Duration::from_secs(30), "etcd on port {client} not healthy within 30 s");
        std::thread::sleep(Duration::from_millis(50));
    }
}

pub struct Node {
    pub name: String,
    pub native: String,
    /// The Redis port's address.
    pub resp: String,
    pub replication: String,
    pub args: Vec<String>,
    pub proc: Proc,
    /// Run as this user (and group) id instead of the test's.
    pub uid: Option<u32>,
}

pub fn start_node(root: &Path, etcd: &str, name: &str) -> Node {
    start_node_as(root, etcd, name, None)
}

/// A node run as user and group `uid` (its data directory is made theirs).
pub fn start_node_as(root: &Path, etcd: &str, name: &str, uid: Option<u32>) -> Node {
    start_node_with(root, etcd, name, uid, &[])
}

/// A node with `extra` flags for `halyard serve`.
pub fn start_node_with(root: &Path, etcd: &str, name: &str, uid: Option<u32>, extra: &[&str]) -> Node {
    let (native, resp, http, repl) = (free_port(), free_port(), free_port(), free_port());
    let args: Vec<String> = [
        "serve",
        "--dir",
        root.join(name).to_str().unwrap(),
        "--etcd",
        etcd,
        "--node",
        name,
        "--listen",
        &format!("127.0.0.1:{native}"),
        "--resp",
        &format!("127.0.0.1:{resp}"),
        "--http",
        &format!("127.0.0.1:{http}"),
        "--replication-listen",
        &format!("127.0.0.1:{repl}"),
        "--cache-mb",
        "16",
        "--cluster-secret",
        SECRET,
    ]
    .iter()
    .chain(extra)
    .map(|s| s.to_string())
    .collect();
    if let Some(u) = uid {
        let dir = root.join(name);
        std::fs::create_dir_all(&dir).unwrap();
        std::os::unix::fs::chown(&dir, Some(u), Some(u)).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(root, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let mut n = Node {
        name: name.into(),
        native: format!("127.0.0.1:{native}"),
        resp: format!("127.0.0.1:{resp}"),
        replication: format!("127.0.0.1:{repl}"),
        args,
        proc: Proc(None),
        uid,
    };
    n.restart();
    n
}

impl Node {
    pub fn restart(&mut self) {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_halyard"));
        if let Some(u) = self.uid {
            use std::os::unix::process::CommandExt;
            cmd.uid(u).gid(u);
        }
        let child = cmd
            .args(&self.args)
            .env("RUST_LOG", std::env::var("HALYARD_TEST_LOG").unwrap_or_else(|_| "warn".into()))
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start halyard serve");
        self.proc = Proc(Some(child));
        wait_port(self.native.rsplit_once(':').unwrap().1.parse().unwrap());
    }

    /// Sends `sig` ("STOP", "CONT", "TERM", ...) to the running node.
    pub fn signal(&self, sig: &str) {
        let pid = self.proc.0.as_ref().expect("running").id().to_string();
        let sent = Command::new("kill").args([&format!("-{sig}"), &pid]).status().expect("kill");
        assert!(sent.success(), "kill -{sig} {pid}");
    }

    /// A graceful leave: SIGTERM, then the exit (within `within`), whose status it returns.
    pub fn leave(&mut self, within: Duration) -> std::process::ExitStatus {
        self.signal("TERM");
        let t0 = Instant::now();
        loop {
            if let Some(st) = self.proc.0.as_mut().expect("running").try_wait().expect("wait") {
                return st;
            }
            assert!(t0.elapsed() < within, "{} did not exit within {within:?} of SIGTERM", self.name);
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

pub fn halyard(args: &[&str]) -> (bool, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_halyard"))
        .args(args)
        .env("HALYARD_CLUSTER_SECRET", SECRET)
        .output()
        .expect("run halyard");
    let text = String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr);
    (o.status.success(), text)
}

pub fn status(etcd: &str) -> serde_json::Value {
    let (ok, out) = halyard(&["cluster", "status", "--etcd", etcd, "--json"]);
    assert!(ok, "cluster status: {out}");
    serde_json::from_str(&out).expect("status JSON")
}

/// Waits until every region has a live primary, `copies` copies and no unfinished change.
/// Waits until etcd lists `n` storage nodes (a storage node's port opens before it registers).
pub fn wait_storage_nodes(etcd: &str, n: usize) {
    let t0 = Instant::now();
    while status(etcd)["storage_nodes"].as_array().map_or(0, Vec::len) < n {
        assert!(t0.elapsed() < Duration::from_secs(20), "storage nodes not in etcd: {}", status(etcd));
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Waits until node `name` is registered and alive.
pub fn wait_alive(etcd: &str, name: &str) {
    let t0 = Instant::now();
    while !status(etcd)["nodes"].as_array().unwrap().iter().any(|n| n["name"] == name && n["alive"] == true) {
        assert!(t0.elapsed() < Duration::from_secs(30), "{name} did not come up: {}", status(etcd));
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Copies `node` holds (0 while it has not registered yet).
pub fn copies(s: &serde_json::Value, node: &str) -> usize {
    let Some(n) = s["nodes"].as_array().unwrap().iter().find(|n| n["name"] == node) else { return 0 };
    (n["primaries"].as_u64().unwrap() + n["backups"].as_u64().unwrap()) as usize
}

pub fn wait_settled(etcd: &str, copies: usize, within: Duration) -> serde_json::Value {
    let t0 = Instant::now();
    loop {
        let s = status(etcd);
        let regions = s["regions"].as_array().unwrap();
        let whole = regions.iter().all(|r| {
            r["primary_alive"].as_bool() == Some(true) && r["backups"].as_array().unwrap().len() + 1 == copies
        });
        if whole && s["log"].as_array().unwrap().is_empty() {
            return s;
        }
        assert!(t0.elapsed() < within, "cluster did not settle within {within:?}: {s}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A region-aware client over `nodes` that gives up on a request after `retry_for`.
pub fn cluster_client(nodes: &[String], retry_for: Duration) -> ClusterClient {
    let opts = ClientOptions { timeout: Duration::from_secs(3), retry_for, ..Default::default() };
    ClusterClient::connect(nodes, opts).expect("region map")
}

/// The user a node to be cut off runs as: iptables matches its packets by owner.
pub const CUT_UID: u32 = 65534;

/// iptables rules dropping `CUT_UID`'s packets to these ports on loopback; removed on drop.
/// Packets to the node still arrive, and its answers to them leave (their destination ports
/// are the peers' own): it is cut off from what it would reach, not from its clients.
/// [`Cut::to`] drops every packet to the ports instead (nobody reaches them).
pub struct Cut(Vec<u16>, bool);

impl Cut {
    fn rule(op: &str, port: u16, owner: bool) -> bool {
        let port = port.to_string();
        let mut args = vec!["-o", "lo", "-p", "tcp", "--dport", &port];
        if owner {
            args.extend(["-m", "owner", "--uid-owner", "65534"]);
        }
        args.extend(["-j", "DROP"]);
        std::process::Command::new("iptables").arg(op).arg("OUTPUT").args(args).status().is_ok_and(|s| s.success())
    }

    fn add(ports: Vec<u16>, owner: bool) -> Cut {
        for &p in &ports {
            assert!(
                Cut::rule("-A", p, owner),
                "iptables -A failed: this test needs root and iptables (apt-get install iptables)"
            );
        }
        Cut(ports, owner)
    }

    pub fn new(ports: Vec<u16>) -> Cut {
        Cut::add(ports, true)
    }

    /// Drops every packet to `ports`, whoever sends it.
    pub fn to(ports: Vec<u16>) -> Cut {
        Cut::add(ports, false)
    }
}

impl Drop for Cut {
    fn drop(&mut self) {
        for &p in &self.0 {
            Cut::rule("-D", p, self.1);
        }
    }
}

/// The port of `host:port`.
pub fn port(addr: &str) -> u16 {
    addr.rsplit_once(':').unwrap().1.parse().unwrap()
}

/// Each metric of `names` (a sample without labels) summed over `nodes`' `/metrics`.
pub fn metric_sums(nodes: &[&Node], names: &[&str]) -> Vec<f64> {
    let mut sums = vec![0.0; names.len()];
    for n in nodes {
        let http = n.args.iter().skip_while(|a| *a != "--http").nth(1).unwrap();
        let mut c = std::net::TcpStream::connect(http.as_str()).unwrap();
        std::io::Write::write_all(&mut c, b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").unwrap();
        let mut text = String::new();
        std::io::Read::read_to_string(&mut c, &mut text).unwrap();
        for (sum, name) in sums.iter_mut().zip(names) {
            let line = text.lines().find(|l| l.split(' ').next() == Some(*name));
            *sum += line.and_then(|l| l.split(' ').nth(1)).map_or(0.0, |v| v.parse().unwrap());
        }
    }
    sums
}
