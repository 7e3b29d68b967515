//! Replication across real processes: three `halyard serve` nodes on loopback share a static
//! cluster file (4 regions, each with a primary and two backups). Writes go to each region's
//! primary and are acknowledged under last-write; a primary is killed with SIGKILL while
//! writers run; its backups are promoted with `halyard admin promote`; every acknowledged
//! write must be readable from the new primaries, `halyard admin verify` must find the
//! remaining backup equal, and a stream from the old epoch must be refused.

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
use halyard_client::blocking::Client;
use halyard_client::ClientOptions;
use halyard_cluster::ClusterFile;
use halyard_replication::wire::{Mode, Msg};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

struct Node {
    child: Option<Child>,
    /// The Redis port.
    resp: u16,
}

impl Node {
    fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.kill9();
    }
}

fn wait_port(addr: &str) {
    let t0 = Instant::now();
    while std::net::TcpStream::connect(addr).is_err() {
        assert!(t0.elapsed() < Duration::from_secs(30), "{addr} did not come up");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn start_node(root: &Path, file: &Path, c: &ClusterFile, name: &str, mode: &str) -> Node {
    let cfg = root.join("server.toml");
    // Small L0 tables: many flushes and compactions on a few MB of data.
    std::fs::write(&cfg, "[engine]\nl0_mb = 1\ncache_mb = 16\n").expect("config");
    let spec = c.node(name).expect("node");
    let resp = free_port();
    let child = Command::new(env!("CARGO_BIN_EXE_halyard"))
        .args(["serve", "--config"])
        .arg(&cfg)
        .arg("--dir")
        .arg(root.join(name))
        .args(["--resp", &format!("127.0.0.1:{resp}")])
        .args(["--http", &format!("127.0.0.1:{}", free_port())])
        .args(["--listen", &spec.native])
        .arg("--cluster-file")
        .arg(file)
        .args(["--node", name, "--replication", mode])
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start halyard serve");
    wait_port(&spec.native);
    wait_port(&spec.replication);
    wait_port(&format!("127.0.0.1:{resp}"));
    Node { child: Some(child), resp }
}

fn make_cluster(root: &Path) -> (PathBuf, ClusterFile) {
    let nodes: Vec<_> = (1..=3)
        .map(|i| (format!("n{i}"), format!("127.0.0.1:{}", free_port()), format!("127.0.0.1:{}", free_port())))
        .collect();
    let c = ClusterFile::local(&nodes, 4, 3, &|i| format!("key{}", i * 25));
    let path = root.join("cluster.toml");
    c.save(&path).expect("save");
    (path, c)
}

fn client(addr: &str) -> Client {
    Client::connect(addr, ClientOptions { timeout: Duration::from_secs(20), ..Default::default() }).expect("connect")
}

fn value(i: u64) -> Vec<u8> {
    // Small, medium and large pairs (engine thresholds 64 B and 1 KiB by default... and beyond).
    let len = [8usize, 200, 700, 3000][(i % 4) as usize];
    let mut v = format!("v{i}-").into_bytes();
    v.resize(len, b'a' + (i % 26) as u8);
    v
}

fn key(i: u64) -> Vec<u8> {
    // Spread over the four regions: key00.., key25.., key50.., key75...
    format!("key{:02}-{i:08}", (i * 37) % 100).into_bytes()
}

/// How long a test waits for its writers to reach a count. The count is what the test needs
/// (enough flushes and compactions); the deadline only ends a test that cannot get there. With
/// the six tests of this file running at once on two cores, debug builds of three or four
/// nodes each, 12,000 replicated writes took up to 160 s here (the tests ask for at most 9,000).
const WRITES_DEADLINE: Duration = Duration::from_secs(400);

fn admin(args: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_halyard")).arg("admin").args(args).output().expect("admin");
    let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}

/// Writers on every primary until `stop`; returns the acknowledged writes.
fn writers(
    c: &ClusterFile,
    stop: Arc<AtomicBool>,
    acked: Arc<Mutex<BTreeMap<Vec<u8>, Vec<u8>>>>,
) -> Vec<std::thread::JoinHandle<()>> {
    (0..3u64)
        .map(|t| {
            let c = c.clone();
            let (stop, acked) = (stop.clone(), acked.clone());
            std::thread::spawn(move || {
                let mut clients: BTreeMap<String, Client> = BTreeMap::new();
                let mut i = t;
                while !stop.load(Ordering::Relaxed) {
                    let k = key(i);
                    let r = c.region_for(&k).expect("region");
                    let addr = c.node(&r.primary).expect("node").native.clone();
                    if !clients.contains_key(&addr) {
                        let opts = ClientOptions { timeout: Duration::from_secs(5), ..Default::default() };
                        match Client::connect(addr.as_str(), opts) {
                            Ok(cl) => {
                                clients.insert(addr.clone(), cl);
                            }
                            Err(_) => {
                                i += 3;
                                continue;
                            }
                        }
                    }
                    let v = value(i);
                    if clients[&addr].put(&k, &v).is_ok() {
                        acked.lock().expect("lock").insert(k, v);
                    }
                    range_deletes(&c, &mut clients, t, i, &acked);
                    i += 3;
                }
            })
        })
        .collect()
}

/// Range deletes in the writers' workload: now and then thread `t` writes a pair into a key
/// range only it writes (one per region), and every fifth time deletes that whole range. An
/// acknowledged delete leaves the range's keys out of `acked` with no value (they must read as
/// absent); one whose outcome is unknown drops them from the check.
fn range_deletes(
    c: &ClusterFile,
    clients: &mut BTreeMap<String, Client>,
    t: u64,
    i: u64,
    acked: &Mutex<BTreeMap<Vec<u8>, Vec<u8>>>,
) {
    let step = i / 3;
    if !step.is_multiple_of(10) {
        return;
    }
    let ns = format!("key{:02}-T{t}-", (step / 10 % 4) * 25 + 1).into_bytes();
    let Some(addr) = c.region_for(&ns).and_then(|r| c.node(&r.primary)).map(|n| n.native.clone()) else { return };
    let Some(cl) = clients.get(&addr) else { return };
    if !step.is_multiple_of(50) {
        let mut k = ns.clone();
        k.extend_from_slice(format!("{i:08}").as_bytes());
        let v = value(i);
        if cl.put(&k, &v).is_ok() {
            acked.lock().expect("lock").insert(k, v);
        }
        return;
    }
    let mut end = ns.clone();
    end.push(b'~');
    let done = cl.delete_range(&ns, &end).is_ok();
    let mut a = acked.lock().expect("lock");
    let gone: Vec<Vec<u8>> = a.range(ns.clone()..end).map(|(k, _)| k.clone()).collect();
    for k in gone {
        // Empty: the key must read as absent; UNKNOWN: either may hold.
        a.insert(k, if done { Vec::new() } else { UNKNOWN.to_vec() });
    }
}

/// The value a key of `acked` is recorded with when a range delete over it has an unknown
/// outcome (values are never this short).
const UNKNOWN: &[u8] = b"?";

/// What a key of `acked` must read as: its value, or nothing for a key an acknowledged range
/// delete removed (recorded with an empty value); None when either may hold.
fn wanted(v: &Vec<u8>) -> Option<Option<&Vec<u8>>> {
    (v.as_slice() != UNKNOWN).then_some((!v.is_empty()).then_some(v))
}

fn run(mode: &str) {
    let root = tempfile::tempdir().expect("tempdir");
    let (file, c) = make_cluster(root.path());
    let mut nodes: Vec<Node> = ["n1", "n2", "n3"].iter().map(|n| start_node(root.path(), &file, &c, n, mode)).collect();
    // A request for a region this node does not lead is redirected.
    let k = b"key30-x";
    let leader = &c.region_for(k).expect("region").primary;
    let other = c.nodes.iter().find(|n| &n.name != leader).expect("node");
    let err = client(&other.native).put(k, b"v").expect_err("not the leader");
    assert!(err.to_string().contains(&format!("led by {leader}")), "{err}");

    let stop = Arc::new(AtomicBool::new(false));
    let acked = Arc::new(Mutex::new(BTreeMap::new()));
    let threads = writers(&c, stop.clone(), acked.clone());
    // Enough data for many L0 flushes and compactions on every region.
    let t0 = Instant::now();
    while acked.lock().expect("lock").len() < 9_000 && t0.elapsed() < WRITES_DEADLINE {
        std::thread::sleep(Duration::from_millis(50));
    }
    // n1 leads regions 1 and 4; it dies with writers running.
    nodes[0].kill9();
    std::thread::sleep(Duration::from_millis(300));
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().expect("writer");
    }
    let acked = std::mem::take(&mut *acked.lock().expect("lock"));
    assert!(acked.len() >= 9_000, "only {} writes acknowledged", acked.len());
    for region in ["1", "4"] {
        let (ok, out) =
            admin(&["promote", "--region", region, "--node", "n2", "--cluster-file", file.to_str().expect("utf8")]);
        assert!(ok, "promote region {region}: {out}");
    }
    let c = ClusterFile::load(&file).expect("reload");
    assert_eq!(c.region(1).expect("r1").primary, "n2");
    assert_eq!(c.region(1).expect("r1").epoch, 2);
    // Every acknowledged write is there, on whichever node now leads its region.
    let mut cls: BTreeMap<String, Client> = BTreeMap::new();
    let mut checked = 0;
    for (k, v) in &acked {
        let Some(want) = wanted(v) else { continue };
        let r = c.region_for(k).expect("region");
        let addr = c.node(&r.primary).expect("node").native.clone();
        let cl = cls.entry(addr.clone()).or_insert_with(|| client(&addr));
        assert_eq!(cl.get(k).expect("get").as_ref(), want, "acknowledged write {} lost", String::from_utf8_lossy(k));
        checked += 1;
    }
    // Only the keys of range deletes whose outcome is unknown (cut off by the kill) are not.
    assert!(checked * 10 >= acked.len() * 9, "{checked} of {} acknowledged keys checked", acked.len());
    let deleted = acked.values().filter(|v| v.is_empty()).count();
    assert!(deleted > 0, "no key was removed by an acknowledged range delete");
    // The promoted regions take writes, and their remaining backup follows.
    let n2 = c.node("n2").expect("n2").native.clone();
    let cl = client(&n2);
    for i in 0..600u64 {
        let k = format!("key{:02}-post-{i}", if i % 2 == 0 { 1 } else { 80 });
        cl.put(k.as_bytes(), value(i)).expect("write after promotion");
    }
    std::thread::sleep(Duration::from_millis(500));
    for region in ["1", "4"] {
        let (ok, out) = admin(&["verify", "--region", region, "--cluster-file", file.to_str().expect("utf8")]);
        assert!(ok && out.contains("n3 matches n2"), "verify region {region}: {out}");
    }
    // A stream from the old primary's epoch is refused by the remaining backup.
    let n3 = c.node("n3").expect("n3").replication.clone();
    let mut s = std::net::TcpStream::connect(&n3).expect("connect n3");
    let mode_v = Mode::parse(mode).expect("mode");
    s.write_all(
        &Msg::Hello {
            version: halyard_replication::wire::VERSION,
            epoch: 1,
            region: 1,
            mode: mode_v,
            inventory: false,
            absorb: None,
        }
        .encode(),
    )
    .expect("hello");
    // The connection stays open for other regions' streams: one frame answers.
    s.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
    let mut head = [0u8; halyard_replication::wire::HEADER];
    s.read_exact(&mut head).expect("reply header");
    let (len, _) = halyard_replication::wire::header(&head).expect("header");
    let mut reply = head.to_vec();
    reply.resize(head.len() + len, 0);
    s.read_exact(&mut reply[head.len()..]).expect("reply body");
    match halyard_replication::wire::decode_frame(&reply).expect("frame") {
        Some((Msg::Reject { reason, .. }, _)) => assert!(reason.contains("epoch"), "{reason}"),
        other => panic!("old-epoch stream accepted: {other:?}"),
    }
    // So is a stream in another protocol version, with a reason that says what to do.
    let mut s = std::net::TcpStream::connect(&n3).expect("connect n3");
    s.write_all(&Msg::Hello { version: 1, epoch: 9, region: 1, mode: mode_v, inventory: false, absorb: None }.encode())
        .expect("hello");
    let mut reply = Vec::new();
    s.read_to_end(&mut reply).expect("reply");
    match halyard_replication::wire::decode_frame(&reply).expect("frame") {
        Some((Msg::Reject { reason, .. }, _)) => assert!(reason.contains("version 1"), "{reason}"),
        other => panic!("stream in another protocol version accepted: {other:?}"),
    }
    drop(nodes);
}

#[test]
fn send_index_failover_keeps_acknowledged_writes() {
    run("send-index");
}

#[test]
fn build_index_failover_keeps_acknowledged_writes() {
    run("build-index");
}

/// A backup killed with SIGKILL mid-load and restarted catches up with a full copy of every
/// region it backs, while the primaries keep taking writes; it also leads its own region again
/// and its backups catch up from it.
/// A static cluster's Redis ports forward too: a key's commands reach its region's primary
/// from any node, and the copies stay equal.
#[test]
fn redis_ports_of_a_static_cluster_forward_to_the_primary() {
    let root = tempfile::tempdir().expect("tempdir");
    let (file, c) = make_cluster(root.path());
    let nodes: Vec<Node> =
        ["n1", "n2", "n3"].iter().map(|n| start_node(root.path(), &file, &c, n, "send-index")).collect();
    let mut conns: Vec<common::Resp> = nodes.iter().map(|n| common::Resp::connect(n.resp)).collect();
    for (i, conn) in conns.iter_mut().enumerate() {
        assert_eq!(conn.cmd(&["SET", &format!("rk{i}"), &format!("v{i}")]), common::ok(), "SET through n{}", i + 1);
        assert_eq!(conn.cmd(&["HSET", "h", &format!("f{i}"), "x"]), common::R::Int(1));
    }
    for conn in conns.iter_mut() {
        for i in 0..3 {
            assert_eq!(conn.cmd(&["GET", &format!("rk{i}")]), common::bulk(&format!("v{i}")));
        }
        assert_eq!(conn.cmd(&["HLEN", "h"]), common::R::Int(3));
        assert_eq!(conn.cmd(&["DBSIZE"]), common::R::Int(4));
        // SCAN's TYPE keeps the keys of that type, looked up in their region's primary (every
        // Redis key lies in the last region here: local on one node, forwarded from the others).
        let page = |keys: &[&str]| {
            let keys = keys.iter().map(|k| common::bulk(k)).collect();
            common::R::Array(Some(vec![common::bulk("0"), common::R::Array(Some(keys))]))
        };
        assert_eq!(conn.cmd(&["SCAN", "0", "COUNT", "100", "TYPE", "hash"]), page(&["h"]));
        assert_eq!(conn.cmd(&["SCAN", "0", "COUNT", "100", "TYPE", "String"]), page(&["rk0", "rk1", "rk2"]));
        assert_eq!(conn.cmd(&["SCAN", "0", "COUNT", "100", "MATCH", "*1", "TYPE", "string"]), page(&["rk1"]));
        assert_eq!(conn.cmd(&["SCAN", "0", "COUNT", "100", "TYPE", "list"]), page(&[]));
        assert_eq!(conn.cmd(&["SCAN", "0", "COUNT", "100"]), page(&["h", "rk0", "rk1", "rk2"]));
    }
    let f = file.to_str().expect("utf8");
    for region in ["1", "2", "3", "4"] {
        let (ok, out) = admin(&["verify", "--region", region, "--cluster-file", f]);
        assert!(ok, "region {region}: {out}");
    }
    drop(nodes);
}

fn restarted_backup_catches_up(mode: &str) {
    let root = tempfile::tempdir().expect("tempdir");
    let (file, c) = make_cluster(root.path());
    let mut nodes: Vec<Node> = ["n1", "n2", "n3"].iter().map(|n| start_node(root.path(), &file, &c, n, mode)).collect();
    let stop = Arc::new(AtomicBool::new(false));
    let acked = Arc::new(Mutex::new(BTreeMap::new()));
    let threads = writers(&c, stop.clone(), acked.clone());
    let wait_for = |n: usize| {
        let t0 = Instant::now();
        while acked.lock().expect("lock").len() < n && t0.elapsed() < WRITES_DEADLINE {
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    wait_for(3000);
    nodes[2].kill9();
    wait_for(5000);
    nodes[2] = start_node(root.path(), &file, &c, "n3", mode);
    let restarted_at = acked.lock().expect("lock").len();
    wait_for(restarted_at + 2000);
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().expect("writer");
    }
    let f = file.to_str().expect("utf8");
    for region in ["1", "2", "3", "4"] {
        let t0 = Instant::now();
        loop {
            let (ok, out) = admin(&["verify", "--region", region, "--cluster-file", f]);
            if ok {
                break;
            }
            assert!(t0.elapsed() < Duration::from_secs(30), "region {region} never converged: {out}");
            std::thread::sleep(Duration::from_millis(500));
        }
    }
    // Every acknowledged write reads back from its region's primary. n3 itself was killed while
    // leading region 3 and came back as its primary without a promotion: under group commit its
    // last few milliseconds of acknowledged writes may be gone (promotion is what keeps them).
    let mut cls: BTreeMap<String, Client> = BTreeMap::new();
    for (k, v) in acked.lock().expect("lock").iter() {
        let r = c.region_for(k).expect("region");
        if r.primary == "n3" {
            continue;
        }
        let Some(want) = wanted(v) else { continue };
        let addr = c.node(&r.primary).expect("node").native.clone();
        let cl = cls.entry(addr.clone()).or_insert_with(|| client(&addr));
        assert_eq!(cl.get(k).expect("get").as_ref(), want, "acknowledged write lost");
    }
    drop(nodes);
}

/// A node added as a backup of a region while writers run (`halyard admin add-backup`) gets a
/// full copy and the live stream, matches the primary, and can take over the region with every
/// acknowledged write when the primary is killed.
#[test]
fn send_index_restarted_backup_catches_up() {
    restarted_backup_catches_up("send-index");
}

/// A Build-Index backup catches up the same way: it empties its region, takes the copy as
/// segments, rebuilds its L0 from the copied logs, and replays and compacts on its own again.
#[test]
fn build_index_restarted_backup_catches_up() {
    restarted_backup_catches_up("build-index");
}

#[test]
fn send_index_added_backup_catches_up_and_takes_over() {
    added_backup_catches_up_and_takes_over("send-index");
}

#[test]
fn build_index_added_backup_catches_up_and_takes_over() {
    added_backup_catches_up_and_takes_over("build-index");
}

fn added_backup_catches_up_and_takes_over(mode: &str) {
    let root = tempfile::tempdir().expect("tempdir");
    let nodes: Vec<_> = (1..=4)
        .map(|i| (format!("n{i}"), format!("127.0.0.1:{}", free_port()), format!("127.0.0.1:{}", free_port())))
        .collect();
    // Regions over n1..n3 with one backup each; n4 is a node of the cluster that holds nothing.
    let mut c = ClusterFile::local(&nodes[..3], 4, 2, &|i| format!("key{}", i * 25));
    let n4 = ClusterFile::local(&nodes[3..], 1, 1, &|_| String::new()).nodes.remove(0);
    c.nodes.push(n4);
    let file = root.path().join("cluster.toml");
    c.save(&file).expect("save");
    let f = file.to_str().expect("utf8");
    let mut procs: Vec<Node> =
        ["n1", "n2", "n3", "n4"].iter().map(|n| start_node(root.path(), &file, &c, n, mode)).collect();
    let stop = Arc::new(AtomicBool::new(false));
    let acked = Arc::new(Mutex::new(BTreeMap::new()));
    let threads = writers(&c, stop.clone(), acked.clone());
    let wait_for = |n: usize| {
        let t0 = Instant::now();
        while acked.lock().expect("lock").len() < n && t0.elapsed() < WRITES_DEADLINE {
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    wait_for(4000);
    assert_eq!(c.region(1).expect("r1").primary, "n1");
    let (ok, out) = admin(&["add-backup", "--region", "1", "--node", "n4", "--cluster-file", f]);
    assert!(ok && out.contains("holds a full copy"), "add-backup: {out}");
    let (ok, out) = admin(&["add-backup", "--region", "1", "--node", "n4", "--cluster-file", f]);
    assert!(!ok && out.contains("already holds"), "second add-backup: {out}");
    let added_at = acked.lock().expect("lock").len();
    wait_for(added_at + 2000);
    // Contents are compared with the writers paused (a dump is not atomic across nodes).
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().expect("writer");
    }
    let c = ClusterFile::load(&file).expect("reload");
    assert!(c.region(1).expect("r1").backups.contains(&"n4".to_string()));
    let t0 = Instant::now();
    loop {
        let (ok, out) = admin(&["verify", "--region", "1", "--cluster-file", f]);
        if ok {
            assert!(out.contains("n4 matches n1"), "{out}");
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(30), "n4 never matched: {out}");
        std::thread::sleep(Duration::from_millis(300));
    }
    // Writers again; n1 dies while they run; n4 takes region 1 over, n2 region 4.
    let stop = Arc::new(AtomicBool::new(false));
    let threads = writers(&c, stop.clone(), acked.clone());
    let resumed_at = acked.lock().expect("lock").len();
    wait_for(resumed_at + 1500);
    procs[0].kill9();
    std::thread::sleep(Duration::from_millis(300));
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().expect("writer");
    }
    for (region, node) in [("1", "n4"), ("4", "n2")] {
        let (ok, out) = admin(&["promote", "--region", region, "--node", node, "--cluster-file", f]);
        assert!(ok, "promote region {region} on {node}: {out}");
    }
    let c = ClusterFile::load(&file).expect("reload");
    let mut cls: BTreeMap<String, Client> = BTreeMap::new();
    let acked = std::mem::take(&mut *acked.lock().expect("lock"));
    let mut on_n4 = 0;
    for (k, v) in &acked {
        let r = c.region_for(k).expect("region");
        on_n4 += usize::from(r.primary == "n4");
        let Some(want) = wanted(v) else { continue };
        let addr = c.node(&r.primary).expect("node").native.clone();
        let cl = cls.entry(addr.clone()).or_insert_with(|| client(&addr));
        assert_eq!(cl.get(k).expect("get").as_ref(), want, "acknowledged write {} lost", String::from_utf8_lossy(k));
    }
    assert!(on_n4 > 1000, "only {on_n4} acknowledged writes in region 1");
    drop(procs);
}
