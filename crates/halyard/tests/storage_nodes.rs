//! Stores on storage nodes (`halyard serve --role storage`), each node a real process on a
//! real port with real files: a model test of a whole store over remote storage while a node
//! is SIGKILLed, paused, or has bits of its fragments flipped, then reopened from the
//! placements the nodes hold.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    missing_docs,
    reason = "test code: a failure stops where it happened"
)]

mod common;
mod etcd_common;

use halyard_engine::{Db, Options};
use halyard_segstore::{RemoteOptions, RemoteStorage};
use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

const SECRET: &str = "segstore-test-secret";

struct StorageNode {
    child: Option<Child>,
    addr: String,
    dir: PathBuf,
    args: Vec<String>,
}

impl StorageNode {
    fn start(dir: &Path) -> StorageNode {
        StorageNode::start_with(dir, SECRET, &[])
    }

    fn start_with(dir: &Path, secret: &str, extra: &[&str]) -> StorageNode {
        let port = common::free_port();
        let addr = format!("127.0.0.1:{port}");
        let mut args: Vec<String> = ["serve", "--role", "storage", "--cluster-secret", secret, "--listen", &addr]
            .iter()
            .chain(extra)
            .map(|s| s.to_string())
            .collect();
        args.extend(["--dir".to_string(), dir.to_str().unwrap().to_string()]);
        let mut n = StorageNode { child: None, addr, dir: dir.to_path_buf(), args };
        n.restart();
        n
    }

    fn restart(&mut self) {
        let child = Command::new(env!("CARGO_BIN_EXE_halyard"))
            .args(&self.args)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .spawn()
            .expect("start a storage node");
        let t0 = std::time::Instant::now();
        while std::net::TcpStream::connect(&self.addr).is_err() {
            assert!(t0.elapsed() < Duration::from_secs(20), "storage node {} did not come up", self.addr);
            std::thread::sleep(Duration::from_millis(20));
        }
        self.child = Some(child);
    }

    fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            c.kill().unwrap();
            c.wait().unwrap();
        }
    }

    fn signal(&self, sig: &str) {
        let pid = self.child.as_ref().unwrap().id().to_string();
        assert!(Command::new("kill").args([sig, &pid]).status().unwrap().success());
    }
}

impl Drop for StorageNode {
    fn drop(&mut self) {
        if let Some(c) = &self.child {
            let _ = Command::new("kill").args(["-CONT", &c.id().to_string()]).status();
        }
        self.kill();
    }
}

/// The node holding the most fragments.
fn busiest(rs: &RemoteStorage, nodes: &[StorageNode]) -> usize {
    let p = rs.placements();
    (0..nodes.len()).max_by_key(|&i| p.iter().filter(|(_, n)| n.contains(&nodes[i].addr)).count()).unwrap()
}

fn nodes(n: usize, root: &Path) -> Vec<StorageNode> {
    (0..n).map(|i| StorageNode::start(&root.join(format!("stoc{i}")))).collect()
}

fn remote(nodes: &[StorageNode], timeout: Duration) -> Arc<RemoteStorage> {
    RemoteStorage::open(remote_options(nodes, timeout)).expect("open remote storage")
}

fn remote_options(nodes: &[StorageNode], timeout: Duration) -> RemoteOptions {
    RemoteOptions {
        secret: Some(SECRET.into()),
        nodes: nodes.iter().map(|n| n.addr.clone()).collect(),
        store: "p1".into(),
        rho: 2,
        seg_bits: 16,
        timeout,
        repair_after: Duration::from_secs(1),
        ..Default::default()
    }
}

fn options() -> Options {
    Options { direct_io: false, l0_bytes: 256 << 10, ..Options::tiny() }
}

/// Random puts and deletes, values small to a few KiB (some in the large log), checked
/// against a model as they go; `during` runs once, half-way.
fn churn(db: &Db, model: &mut BTreeMap<Vec<u8>, Vec<u8>>, seed: u64, ops: usize, mut during: impl FnMut()) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    for i in 0..ops {
        if i == ops / 2 {
            during();
        }
        let k = format!("key{:05}", rng.gen_range(0..2_000)).into_bytes();
        if rng.gen_bool(0.1) {
            db.delete(&k).unwrap();
            model.remove(&k);
        } else {
            let len = if rng.gen_bool(0.05) { rng.gen_range(2_000..9_000) } else { rng.gen_range(1..200) };
            let v: Vec<u8> = (0..len).map(|j| (j as u8) ^ (i as u8)).collect();
            db.put(&k, &v).unwrap();
            model.insert(k, v);
        }
    }
}

fn check(db: &Db, model: &BTreeMap<Vec<u8>, Vec<u8>>) {
    for (k, v) in model {
        assert_eq!(db.get(k).unwrap().as_deref(), Some(v.as_slice()), "key {}", String::from_utf8_lossy(k));
    }
    let all: Vec<(Vec<u8>, Vec<u8>)> = db.scan(..).map(|r| r.expect("scan")).collect();
    assert_eq!(all.len(), model.len(), "a full scan's length");
    for ((k, v), (mk, mv)) in all.iter().zip(model) {
        assert_eq!((k, v), (mk, mv));
    }
}

#[test]
fn a_store_over_storage_nodes_survives_a_killed_node_and_reopens_from_their_placements() {
    let root = tempfile::tempdir().unwrap();
    let mut stocs = nodes(5, root.path());
    let mut model = BTreeMap::new();
    let rs = remote(&stocs, Duration::from_secs(2));
    let db = Db::open_on(rs.clone(), options()).unwrap();
    churn(&db, &mut model, 1, 4_000, || {});
    db.flush().unwrap();
    let named =
        |rs: &RemoteStorage, addr: &str| rs.placements().iter().filter(|(_, n)| n.iter().any(|a| a == addr)).count();
    let v = busiest(&rs, &stocs);
    assert!(named(&rs, &stocs[v].addr) > 0, "the victim holds fragments before it dies");
    // Killed at rest: reads rebuild its fragments from parity until the repair thread has
    // moved them (after `repair_after`, 1 s here).
    stocs[v].kill();
    check(&db, &model);
    let t0 = std::time::Instant::now();
    while named(&rs, &stocs[v].addr) > 0 {
        assert!(t0.elapsed() < Duration::from_secs(30), "placements still name the dead node: {:?}", rs.placements());
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(rs.stats().fragments_moved > 0, "the killed node's fragments moved: {:?}", rs.stats());
    check(&db, &model);
    // Killed mid-writes: the writes that reach it move its fragments at once.
    let w = (0..stocs.len()).find(|&i| i != v).unwrap();
    churn(&db, &mut model, 2, 4_000, || stocs[w].kill());
    db.flush().unwrap();
    check(&db, &model);
    drop((db, rs));
    // The killed nodes come back holding stale fragments: the newer placements win.
    stocs[v].restart();
    stocs[w].restart();
    let rs = remote(&stocs, Duration::from_secs(2));
    let db = Db::open_on(rs.clone(), options()).unwrap();
    check(&db, &model);
    churn(&db, &mut model, 3, 2_000, || {});
    check(&db, &model);
}

#[test]
fn a_paused_node_is_worked_around_and_reads_rebuild_from_parity() {
    let root = tempfile::tempdir().unwrap();
    let stocs = nodes(4, root.path());
    let mut model = BTreeMap::new();
    // Long enough that only the paused node misses it while other tests load both cores.
    let rs = remote(&stocs, Duration::from_millis(1000));
    let db = Db::open_on(rs.clone(), options()).unwrap();
    churn(&db, &mut model, 3, 3_000, || {});
    db.flush().unwrap();
    let v = busiest(&rs, &stocs);
    stocs[v].signal("-STOP");
    check(&db, &model);
    churn(&db, &mut model, 4, 1_500, || {});
    check(&db, &model);
    stocs[v].signal("-CONT");
    assert!(rs.stats().degraded_reads + rs.stats().fragments_moved > 0, "{:?}", rs.stats());
    check(&db, &model);
}

#[test]
fn flipped_bits_in_fragments_are_detected_and_rebuilt() {
    let root = tempfile::tempdir().unwrap();
    let stocs = nodes(3, root.path());
    let mut model = BTreeMap::new();
    {
        let rs = remote(&stocs, Duration::from_secs(2));
        let db = Db::open_on(rs.clone(), options()).unwrap();
        churn(&db, &mut model, 5, 3_000, || {});
        drop(db);
    }
    // Flip a bit in every 4 KiB block of every data file of one node.
    let mut flipped = 0;
    for e in std::fs::read_dir(stocs[2].dir.join("p1")).unwrap().flatten() {
        if e.path().extension().is_some_and(|x| x == "meta") {
            continue;
        }
        let mut b = std::fs::read(e.path()).unwrap();
        for at in (100..b.len()).step_by(4096) {
            b[at] ^= 0x10;
            flipped += 1;
        }
        std::fs::write(e.path(), b).unwrap();
    }
    assert!(flipped > 0);
    let rs = remote(&stocs, Duration::from_secs(2));
    let db = Db::open_on(rs.clone(), options()).unwrap();
    check(&db, &model);
    let s = rs.stats();
    assert!(s.degraded_reads > 0 && s.blocks_repaired > 0, "{s:?}");
}

#[test]
fn a_wrong_cluster_secret_is_refused() {
    let root = tempfile::tempdir().unwrap();
    let stocs = nodes(3, root.path());
    let r = RemoteStorage::open(RemoteOptions {
        secret: Some("not the secret".into()),
        nodes: stocs.iter().map(|n| n.addr.clone()).collect(),
        store: "p1".into(),
        rho: 2,
        seg_bits: 16,
        ..Default::default()
    });
    assert!(r.is_err(), "a store opened with the wrong secret");
}

#[test]
fn a_processing_node_killed_mid_writes_keeps_every_acknowledged_write_on_its_storage_nodes() {
    killed_mid_writes(&["--sync", "always"], false);
}

/// Without a sync, the log records of every acknowledged write are on the storage nodes
/// (`--remote-log pushed`, the default): the processing node's death loses none.
#[test]
fn a_processing_node_killed_mid_writes_without_syncs_keeps_every_acknowledged_write() {
    killed_mid_writes(&["--sync", "none"], false);
}

/// A storage node killed together with the processing node loses the log blocks it held in
/// memory (staged, not yet on its device); the acknowledged writes in them are rebuilt from
/// the other fragments when the processing node starts again.
#[test]
fn a_storage_node_killed_with_the_processing_node_loses_no_acknowledged_write() {
    killed_mid_writes(&["--sync", "none"], true);
}

fn killed_mid_writes(sync: &[&str], kill_storage: bool) {
    let root = tempfile::tempdir().unwrap();
    let mut stocs = nodes(3, root.path());
    let list = stocs.iter().map(|n| n.addr.clone()).collect::<Vec<_>>().join(",");
    let args = ["--storage", "remote", "--storage-nodes", &list, "--cluster-secret", SECRET, "--node", "p1"];
    let args = [&args[..], sync].concat();
    let mut server = common::Server::start(&root.path().join("p1"), &args);
    let mut c = server.conn();
    let mut acked = Vec::new();
    let t0 = std::time::Instant::now();
    let killer = {
        let server_pid = server.child.as_ref().unwrap().id().to_string();
        let stoc_pids: Vec<String> = stocs.iter().map(|n| n.child.as_ref().unwrap().id().to_string()).collect();
        let dirs: Vec<PathBuf> = stocs.iter().map(|n| n.dir.join("p1")).collect();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(1500));
            let mut pids = vec![server_pid];
            // The node holding the data fragment written last: the log tail's blocks it holds
            // in memory are lost with it.
            let victim = kill_storage.then(|| newest_data_fragment(&dirs));
            pids.extend(victim.map(|i| stoc_pids[i].clone()));
            Command::new("kill").arg("-9").args(&pids).status().unwrap();
            victim
        })
    };
    for i in 0.. {
        let (k, v) = (format!("k{i}"), format!("value {i} {}", "x".repeat(i % 300)));
        c.send(&[b"SET", k.as_bytes(), v.as_bytes()]);
        match c.read() {
            Some(r) if r == common::ok() => acked.push((k, v)),
            _ => break,
        }
        assert!(t0.elapsed() < Duration::from_secs(60), "the kill never landed");
    }
    let victim = killer.join().unwrap();
    let _ = server.child.take().unwrap().wait();
    assert!(acked.len() > 50, "only {} writes before the kill", acked.len());
    if let Some(v) = victim {
        stocs[v].kill();
        stocs[v].restart();
    }
    let server = common::Server::start(&root.path().join("p1"), &args);
    let mut c = server.conn();
    for (k, v) in &acked {
        assert_eq!(c.cmd(&["GET", k]), common::bulk(v), "acknowledged {k} lost");
    }
}

/// Which of the storage nodes' store directories holds the data fragment (not parity: ρ = 2
/// here) whose checksums changed last.
fn newest_data_fragment(dirs: &[PathBuf]) -> usize {
    let mut best = (std::time::UNIX_EPOCH, 0);
    for (i, d) in dirs.iter().enumerate() {
        for e in std::fs::read_dir(d).into_iter().flatten().flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let data = name.ends_with(".0.meta") || name.ends_with(".1.meta");
            let t = e.metadata().and_then(|m| m.modified()).unwrap_or(std::time::UNIX_EPOCH);
            if data && t > best.0 {
                best = (t, i);
            }
        }
    }
    best.1
}

/// Storage node `stoc<i>`, registered in the etcd at `url`.
fn registered(root: &Path, url: &str, i: usize) -> StorageNode {
    let name = format!("stoc{i}");
    let extra = ["--etcd", url, "--node", name.as_str()];
    StorageNode::start_with(&root.join(&name), etcd_common::SECRET, &extra)
}

#[test]
fn storage_nodes_registered_in_etcd_serve_a_cluster_node_started_without_their_addresses() {
    let (root, _etcd, url) = etcd_common::new_cluster(1, 1, false);
    let stocs: Vec<StorageNode> = (0..3).map(|i| registered(root.path(), &url, i)).collect();
    etcd_common::wait_storage_nodes(&url, 3);
    let n1 = etcd_common::start_node_with(root.path(), &url, "n1", None, &["--storage", "remote"]);
    etcd_common::wait_settled(&url, 1, Duration::from_secs(60));
    let c = etcd_common::cluster_client(std::slice::from_ref(&n1.native), Duration::from_secs(20));
    for i in 0..300 {
        c.put(etcd_common::key(i), etcd_common::value(i)).unwrap();
    }
    for i in 0..300 {
        assert_eq!(c.get(etcd_common::key(i)).unwrap(), Some(etcd_common::value(i)));
    }
    for s in &stocs {
        assert!(s.dir.join("n1").is_dir(), "{} holds none of n1's fragments", s.addr);
    }
}

#[test]
fn a_storage_node_that_joins_takes_fragments_and_a_drained_one_can_be_stopped() {
    let (root, _etcd, url) = etcd_common::new_cluster(1, 1, false);
    let mut stocs: Vec<StorageNode> = (0..3).map(|i| registered(root.path(), &url, i)).collect();
    etcd_common::wait_storage_nodes(&url, 3);
    let n1 = etcd_common::start_node_with(root.path(), &url, "n1", None, &["--storage", "remote"]);
    etcd_common::wait_settled(&url, 1, Duration::from_secs(60));
    let c = etcd_common::cluster_client(std::slice::from_ref(&n1.native), Duration::from_secs(20));
    let big = |i: u64| etcd_common::value(i).repeat(200);
    for i in 0..300 {
        c.put(etcd_common::key(i), big(i)).unwrap();
    }
    // A fourth node joins while n1 runs; the drain of stoc0 needs it (a segment takes three).
    stocs.push(registered(root.path(), &url, 3));
    etcd_common::wait_storage_nodes(&url, 4);
    let (ok, out) = etcd_common::halyard(&["cluster", "drain", "stoc0", "--etcd", &url]);
    assert!(ok && out.contains("fragments moved off") && !out.contains(": 0 fragments"), "{out}");
    let status = etcd_common::status(&url);
    let row = status["storage_nodes"].as_array().unwrap().iter().find(|r| r[0] == "stoc0").unwrap().clone();
    assert_eq!(row[2], "draining", "{status}");
    let (left, _) =
        halyard_segstore::remote::node_usage(&stocs[0].addr, Some(etcd_common::SECRET), Duration::from_secs(5))
            .expect("ask stoc0");
    assert_eq!(left, 0, "stoc0 still holds fragments after its drain");
    // Nothing needs it now: stopped, every key still reads and writes go on.
    stocs[0].kill();
    for i in 300..400 {
        c.put(etcd_common::key(i), big(i)).unwrap();
    }
    for i in 0..400 {
        assert_eq!(c.get(etcd_common::key(i)).unwrap(), Some(big(i)), "key {i} after stoc0's drain");
    }
    assert!(stocs[3].dir.join("n1").is_dir(), "the node that joined holds none of n1's fragments");
}

#[test]
fn a_processing_node_that_opens_a_store_fences_the_one_that_held_it() {
    let root = tempfile::tempdir().unwrap();
    let stocs = nodes(4, root.path());
    let mut model = BTreeMap::new();
    let old = remote(&stocs, Duration::from_secs(2));
    let db_old = Db::open_on(old.clone(), options()).unwrap();
    churn(&db_old, &mut model, 11, 3_000, || {});
    db_old.flush().unwrap();
    // A second processing node opens the store while the first still runs (a failover that
    // thought it dead): it sees everything the first made durable.
    let new = remote(&stocs, Duration::from_secs(2));
    let db_new = Db::open_on(new.clone(), options()).unwrap();
    check(&db_new, &model);
    // The first one can no longer write nor read the store: every storage node refuses it
    // (its own background work may have found out first).
    let late = db_old.put(b"late", b"write").and_then(|()| db_old.flush());
    assert!(late.is_err(), "a replaced processing node flushed to the store");
    assert!(old.is_fenced());
    assert!(old.fenced_by().unwrap().contains("was replaced"), "{:?}", old.fenced_by());
    let mut buf = vec![0u8; 4096];
    assert!(halyard_engine::Storage::read(&*old, 0, 0, &mut buf).is_err(), "a replaced processing node read");
    // Nothing it tried reached the store; the new owner goes on, and so does a later one.
    churn(&db_new, &mut model, 12, 3_000, || {});
    db_new.flush().unwrap();
    check(&db_new, &model);
    drop((db_old, old));
    drop((db_new, new));
    let again = remote(&stocs, Duration::from_secs(2));
    let db = Db::open_on(again.clone(), options()).unwrap();
    check(&db, &model);
    assert_eq!(db.get(b"late").unwrap(), None, "the fenced node's write reached the store");
}

#[test]
fn a_replaced_processing_node_refuses_writes_and_stops() {
    let root = tempfile::tempdir().unwrap();
    let stocs = nodes(3, root.path());
    let list = stocs.iter().map(|n| n.addr.clone()).collect::<Vec<_>>().join(",");
    let args = ["--storage", "remote", "--storage-nodes", &list, "--cluster-secret", SECRET, "--node", "p1"];
    let args = [&args[..], &["--sync", "always"]].concat();
    let mut first = common::Server::start(&root.path().join("p1a"), &args);
    let mut c = first.conn();
    for i in 0..200 {
        assert_eq!(c.cmd(&["SET", &format!("k{i}"), &format!("v{i}")]), common::ok());
    }
    let second = common::Server::start(&root.path().join("p1b"), &args);
    // The first node's next write reaches a storage node that names the second as owner.
    assert_ne!(c.cmd(&["SET", "late", "x"]), common::ok(), "a replaced node acknowledged a write");
    let mut child = first.child.take().unwrap();
    let t0 = std::time::Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(t0.elapsed() < Duration::from_secs(20), "the replaced node kept running");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(!status.success(), "a replaced node exits with a failure: {status}");
    let mut c = second.conn();
    for i in 0..200 {
        assert_eq!(c.cmd(&["GET", &format!("k{i}")]), common::bulk(&format!("v{i}")), "k{i}");
    }
    assert_ne!(c.cmd(&["GET", "late"]), common::bulk("x"), "the refused write reached the store");
}

/// A processing node killed while it moves fragments off a draining storage node opens again
/// with every value whole: a moved fragment's new node is named only once all its blocks are
/// there (named first, a fragment cut off half-way would read as zeros where blocks are
/// missing).
#[test]
fn a_processing_node_killed_mid_drain_reads_every_value_after_its_restart() {
    let (root, _etcd, url) = etcd_common::new_cluster(1, 1, false);
    let stocs: Vec<StorageNode> = (0..4).map(|i| registered(root.path(), &url, i)).collect();
    etcd_common::wait_storage_nodes(&url, 4);
    let mut n1 = etcd_common::start_node_with(root.path(), &url, "n1", None, &["--storage", "remote"]);
    etcd_common::wait_settled(&url, 1, Duration::from_secs(60));
    let c = etcd_common::cluster_client(std::slice::from_ref(&n1.native), Duration::from_secs(20));
    let big = |i: u64| etcd_common::value(i).repeat(1500);
    for i in 0..300 {
        c.put(etcd_common::key(i), big(i)).unwrap();
    }
    let usage = |i: usize| {
        halyard_segstore::remote::node_usage(&stocs[i].addr, Some(etcd_common::SECRET), Duration::from_secs(5))
            .expect("ask a storage node")
            .0
    };
    // The node holding the most fragments is drained.
    let d = (0..stocs.len()).max_by_key(|&i| usage(i)).unwrap();
    let held = usage(d);
    let mut drain = Command::new(env!("CARGO_BIN_EXE_halyard"))
        .args(["cluster", "drain", &format!("stoc{d}"), "--etcd", &url])
        .env("HALYARD_CLUSTER_SECRET", etcd_common::SECRET)
        .stdout(Stdio::null())
        .spawn()
        .expect("start the drain");
    // Killed as soon as the first fragment has moved: the next one is being written.
    let t0 = std::time::Instant::now();
    while usage(d) == held {
        assert!(t0.elapsed() < Duration::from_secs(60), "no fragment moved off stoc{d}");
        std::thread::sleep(Duration::from_millis(2));
    }
    n1.proc.kill9();
    let left = usage(d);
    let _ = drain.kill();
    let _ = drain.wait();
    assert!(left > 0, "the drain ended before the kill ({held} fragments moved)");
    n1.restart();
    etcd_common::wait_settled(&url, 1, Duration::from_secs(60));
    let c = etcd_common::cluster_client(std::slice::from_ref(&n1.native), Duration::from_secs(20));
    for i in 0..300 {
        assert_eq!(c.get(etcd_common::key(i)).unwrap(), Some(big(i)), "key {i} after the restart");
    }
}

/// With seven storage nodes (a segment on three), a store opens only when all but ρ = 2 of them
/// take its claim: with three out of reach, a segment could lie wholly among them, where the
/// processing node that held the store could still write and this one would not see it.
#[test]
fn a_store_is_claimed_on_all_but_rho_of_its_storage_nodes() {
    let root = tempfile::tempdir().unwrap();
    let mut stocs = nodes(7, root.path());
    let mut model = BTreeMap::new();
    let db = Db::open_on(remote(&stocs, Duration::from_secs(2)), options()).unwrap();
    churn(&db, &mut model, 7, 2_000, || {});
    db.flush().unwrap();
    drop(db);
    for s in &mut stocs[..3] {
        s.kill();
    }
    let err = RemoteStorage::open(remote_options(&stocs, Duration::from_secs(2)))
        .err()
        .expect("opened with three of seven storage nodes out of reach")
        .to_string();
    assert!(err.contains("4 of 7 storage nodes") && err.contains("claimed on 5"), "{err}");
    stocs[0].restart();
    let db = Db::open_on(remote(&stocs, Duration::from_secs(2)), options()).unwrap();
    check(&db, &model);
}

#[test]
fn a_region_moves_between_processing_nodes_as_names_the_storage_nodes_copy() {
    let (root, _etcd, url) = etcd_common::new_cluster(1, 1, false);
    let _stocs: Vec<StorageNode> = (0..3).map(|i| registered(root.path(), &url, i)).collect();
    etcd_common::wait_storage_nodes(&url, 3);
    let remote = ["--storage", "remote"];
    let n1 = etcd_common::start_node_with(root.path(), &url, "n1", None, &remote);
    etcd_common::wait_settled(&url, 1, Duration::from_secs(60));
    let c = etcd_common::cluster_client(std::slice::from_ref(&n1.native), Duration::from_secs(20));
    // Values of every size: large ones in the large log, small ones in SSTs without pointers.
    let v = |i: u64| etcd_common::value(i).repeat(if i.is_multiple_of(3) { 100 } else { 1 });
    let n = 6_000;
    for i in 0..n {
        c.put(etcd_common::key(i), v(i)).unwrap();
    }
    let n2 = etcd_common::start_node_with(root.path(), &url, "n2", None, &remote);
    // The move needs n2 registered and up.
    etcd_common::wait_alive(&url, "n2");
    let (ok, out) =
        etcd_common::halyard(&["admin", "move", "--region", "1", "--from", "n1", "--to", "n2", "--etcd", &url]);
    assert!(ok, "move: {out}");
    let names = ["halyard_replication_copy_bytes_total", "halyard_replication_copy_named_bytes_total"];
    let [sent, named] = etcd_common::metric_sums(&[&n1], &names)[..] else { unreachable!() };
    eprintln!("the move sent {sent} bytes of segments and named {named}");
    assert!(named > 4.0 * sent && named > 1e6, "named {named} bytes, sent {sent}");
    for s in &_stocs {
        assert!(s.dir.join("n2").is_dir(), "{} holds none of n2's fragments", s.addr);
    }
    let c2 = etcd_common::cluster_client(std::slice::from_ref(&n2.native), Duration::from_secs(20));
    for i in 0..n {
        assert_eq!(c2.get(etcd_common::key(i)).unwrap(), Some(v(i)), "key {i} after the move");
    }
    // The moved region goes on taking writes on n2, and n1's copy is gone: what n2 read was its own.
    for i in n..n + 500 {
        c2.put(etcd_common::key(i), v(i)).unwrap();
    }
    for i in (0..n + 500).step_by(7) {
        assert_eq!(c2.get(etcd_common::key(i)).unwrap(), Some(v(i)), "key {i} after writes on n2");
    }
}
