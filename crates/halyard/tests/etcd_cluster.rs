//! A cluster coordinated by a real etcd: three `halyard serve --etcd` nodes on loopback,
//! regions assigned by the elected master, writers routing by trial (a NotLeader or a lost
//! connection sends them to the next node). The node that is both master and a primary is
//! killed with SIGKILL under load: another node must become master, promote a backup, and
//! bring the groups back to two copies with no person involved; every acknowledged write must
//! be readable afterwards, `halyard admin verify --etcd` must find every copy equal, and the
//! killed node, restarted, must come back as a backup only.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    missing_docs,
    reason = "test code: a failure stops where it happened"
)]

mod common;

use common::free_port;
use halyard_client::blocking::ClusterClient;
use halyard_client::ClientOptions;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

struct Proc(Option<Child>);

impl Proc {
    fn kill9(&mut self) {
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

fn wait_port(port: u16) {
    let t0 = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(t0.elapsed() < Duration::from_secs(30), "port {port} did not come up");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A single-member etcd with lease checkpointing, on free ports.
fn start_etcd(dir: &Path) -> (Proc, String) {
    let (client, peer) = (free_port(), free_port());
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
    wait_port(client);
    (Proc(Some(child)), url)
}

struct Node {
    name: String,
    native: String,
    args: Vec<String>,
    proc: Proc,
}

fn start_node(root: &Path, etcd: &str, name: &str) -> Node {
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
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let mut n = Node { name: name.into(), native: format!("127.0.0.1:{native}"), args, proc: Proc(None) };
    n.restart();
    n
}

impl Node {
    fn restart(&mut self) {
        let child = Command::new(env!("CARGO_BIN_EXE_halyard"))
            .args(&self.args)
            .env("RUST_LOG", std::env::var("HALYARD_TEST_LOG").unwrap_or_else(|_| "warn".into()))
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start halyard serve");
        self.proc = Proc(Some(child));
        wait_port(self.native.rsplit_once(':').unwrap().1.parse().unwrap());
    }
}

fn halyard(args: &[&str]) -> (bool, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_halyard")).args(args).output().expect("run halyard");
    let text = String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr);
    (o.status.success(), text)
}

fn status(etcd: &str) -> serde_json::Value {
    let (ok, out) = halyard(&["cluster", "status", "--etcd", etcd, "--json"]);
    assert!(ok, "cluster status: {out}");
    serde_json::from_str(&out).expect("status JSON")
}

/// Waits until every region has a live primary, `copies` copies and no unfinished change.
fn wait_settled(etcd: &str, copies: usize, within: Duration) -> serde_json::Value {
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
fn cluster_client(nodes: &[String], retry_for: Duration) -> ClusterClient {
    let opts = ClientOptions { timeout: Duration::from_secs(3), retry_for, ..Default::default() };
    ClusterClient::connect(nodes, opts).expect("region map")
}

fn key(i: u64) -> Vec<u8> {
    format!("key{}{:07}", i % 10, i).into_bytes()
}

fn value(i: u64) -> Vec<u8> {
    format!("value-{i}-{}", "x".repeat((i % 50) as usize)).into_bytes()
}

#[test]
fn master_and_primary_killed_failover_without_a_person() {
    let dir = tempfile::tempdir().unwrap();
    let (_etcd, url) = start_etcd(dir.path());
    let (ok, out) =
        halyard(&["cluster", "init", "--etcd", &url, "--regions", "3", "--replicas", "2", "--numeric-keys"]);
    assert!(ok, "{out}");
    let mut nodes: Vec<Node> = (1..=3).map(|i| start_node(dir.path(), &url, &format!("n{i}"))).collect();
    let s = wait_settled(&url, 2, Duration::from_secs(60));
    // The victim: the master, which also leads a region (the master's node leads at least one
    // of three regions spread over three nodes, or else any primary is).
    let master = s["master"].as_str().unwrap().to_string();
    let leads = |n: &str| s["regions"].as_array().unwrap().iter().find(|r| r["primary"] == n).map(|r| r["id"].as_u64());
    let victim =
        if leads(&master).is_some() { master.clone() } else { s["regions"][0]["primary"].as_str().unwrap().into() };
    let victim_region = leads(&victim).flatten().unwrap();

    let addrs: Vec<String> = nodes.iter().map(|n| n.native.clone()).collect();
    let stop = Arc::new(AtomicBool::new(false));
    let acked = Arc::new(Mutex::new(Vec::<u64>::new()));
    let writers: Vec<_> = (0..4u64)
        .map(|w| {
            let (addrs, stop, acked) = (addrs.clone(), stop.clone(), acked.clone());
            std::thread::spawn(move || {
                let c = cluster_client(&addrs, Duration::from_millis(500));
                let mut i = w;
                while !stop.load(Ordering::Relaxed) {
                    match c.put(key(i), value(i)) {
                        Ok(()) => acked.lock().unwrap().push(i),
                        Err(_) => std::thread::sleep(Duration::from_millis(20)),
                    }
                    i += 4;
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(1500));
    let before = acked.lock().unwrap().len();
    let killed_at = Instant::now();
    let v = nodes.iter().position(|n| n.name == victim).unwrap();
    nodes[v].proc.kill9();
    // The victim's region is writable again once a write to a key of it succeeds.
    let survivors: Vec<String> = nodes.iter().filter(|n| n.name != victim).map(|n| n.native.clone()).collect();
    let probe_keys: Vec<u64> = (0..10).collect();
    let r = cluster_client(&survivors, Duration::from_millis(100));
    let regions = s["regions"].as_array().unwrap().clone();
    let in_victim_region = |k: &[u8]| {
        regions.iter().any(|reg| {
            reg["id"].as_u64() == Some(victim_region)
                && k >= reg["start"].as_str().unwrap().as_bytes()
                && reg["end"].as_str().is_none_or(|e| k < e.as_bytes())
        })
    };
    let probe = probe_keys.into_iter().map(|i| 1_000_000_000 + i).find(|i| in_victim_region(&key(*i))).unwrap();
    let writable = loop {
        if r.put(key(probe), value(probe)).is_ok() {
            break killed_at.elapsed();
        }
        assert!(
            killed_at.elapsed() < Duration::from_secs(30),
            "region {victim_region} not writable 30 s after its primary died"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    eprintln!("region {victim_region} (primary {victim}, master {master}) writable again {writable:?} after SIGKILL");
    std::thread::sleep(Duration::from_millis(1000));
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        w.join().unwrap();
    }
    let acked = acked.lock().unwrap().clone();
    assert!(acked.len() > before, "no write was acknowledged after the kill");
    let s = wait_settled(&url, 2, Duration::from_secs(60));
    assert_ne!(s["master"].as_str(), Some(victim.as_str()), "the dead node is still master");

    // Every acknowledged write is there.
    let live: Vec<String> = nodes.iter().filter(|n| n.name != victim).map(|n| n.native.clone()).collect();
    let r = cluster_client(&live, Duration::from_secs(10));
    for &i in acked.iter().chain([probe].iter()) {
        let got = r.get(key(i)).unwrap_or_else(|e| panic!("reading {i}: {e}"));
        assert_eq!(got.as_deref(), Some(value(i).as_slice()), "acknowledged write {i} lost");
    }
    // A scan crosses the regions in key order and sees every acknowledged key.
    let all = r.scan_all(std::ops::Bound::Unbounded, std::ops::Bound::Unbounded, false).expect("scan");
    assert!(all.windows(2).all(|w| w[0].0 < w[1].0), "scan out of order");
    let mut want: Vec<Vec<u8>> = acked.iter().chain([probe].iter()).map(|&i| key(i)).collect();
    want.sort();
    want.dedup();
    let got: Vec<Vec<u8>> = all.into_iter().map(|(k, _)| k).collect();
    assert!(want.iter().all(|k| got.binary_search(k).is_ok()), "a scan missed acknowledged keys");
    for reg in s["regions"].as_array().unwrap() {
        let id = reg["id"].as_u64().unwrap().to_string();
        let (ok, out) = halyard(&["admin", "verify", "--region", &id, "--etcd", &url]);
        assert!(ok, "verify region {id}: {out}");
    }

    // The killed node comes back under a new lease: it is given backups, never its old region.
    nodes[v].restart();
    let t0 = Instant::now();
    loop {
        let s = status(&url);
        let me = s["nodes"].as_array().unwrap().iter().find(|n| n["name"] == victim.as_str()).unwrap().clone();
        assert_eq!(me["primaries"], 0, "{victim} leads a region again right after its restart: {s}");
        if me["alive"] == true {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(30), "{victim} did not rejoin: {s}");
        std::thread::sleep(Duration::from_millis(100));
    }
    eprintln!("{} writes acknowledged, all read back; every region's copies equal", acked.len());
}
