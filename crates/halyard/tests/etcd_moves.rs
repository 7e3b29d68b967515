//! Regions that change hands on purpose, in a cluster coordinated by a real etcd: planned
//! handoffs (`halyard admin transfer`) under writes, and a node that leaves on SIGTERM, handing
//! its primaries to backups before it gives its lease back. Writers use the region-aware
//! client; every acknowledged write must be readable afterwards and every copy equal.

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

use etcd_common::{cluster_client, halyard, new_cluster, start_node, status, wait_settled, Node};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn key(i: u64) -> Vec<u8> {
    format!("key{}{:07}", i % 10, i).into_bytes()
}

fn value(i: u64) -> Vec<u8> {
    format!("value-{i}-{}", "x".repeat((i % 50) as usize)).into_bytes()
}

/// Writers over every node: (id, when acknowledged) of each acknowledged write. Writer `w`
/// of `n` writes ids w, w + n, ...; with `only`, just the ids whose key starts "key<d>" for
/// a digit d in `only`.
struct Writers {
    stop: Arc<AtomicBool>,
    acked: Arc<Mutex<Vec<(u64, Instant)>>>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Writers {
    fn start(addrs: &[String], n: u64, only: &'static [u64]) -> Writers {
        let stop = Arc::new(AtomicBool::new(false));
        let acked = Arc::new(Mutex::new(Vec::new()));
        let threads = (0..n)
            .map(|w| {
                let (addrs, stop, acked) = (addrs.to_vec(), stop.clone(), acked.clone());
                std::thread::spawn(move || {
                    let c = cluster_client(&addrs, Duration::from_millis(500));
                    let mut i = w;
                    while !stop.load(Ordering::Relaxed) {
                        if !only.is_empty() && !only.contains(&(i % 10)) {
                            i += n;
                            continue;
                        }
                        match c.put(key(i), value(i)) {
                            Ok(()) => acked.lock().unwrap().push((i, Instant::now())),
                            Err(_) => std::thread::sleep(Duration::from_millis(5)),
                        }
                        i += n;
                    }
                })
            })
            .collect();
        Writers { stop, acked, threads }
    }

    fn stop(self) -> Vec<(u64, Instant)> {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads {
            t.join().unwrap();
        }
        let mut v = self.acked.lock().unwrap().clone();
        v.sort_by_key(|x| x.1);
        v
    }
}

/// The longest time without an acknowledged write between `from` and `to` (counted from the
/// last acknowledgement before `from`).
fn longest_gap(acked: &[(u64, Instant)], from: Instant, to: Instant) -> Duration {
    let mut last = acked.iter().rev().find(|a| a.1 <= from).map_or(from, |a| a.1);
    let mut gap = Duration::ZERO;
    for a in acked.iter().filter(|a| a.1 > from && a.1 <= to) {
        gap = gap.max(a.1 - last);
        last = a.1;
    }
    gap.max(to.saturating_duration_since(last))
}

/// Every acknowledged write reads back through `addrs`, and every region's copies are equal.
fn check_everything(url: &str, addrs: &[String], acked: &[(u64, Instant)]) {
    let r = cluster_client(addrs, Duration::from_secs(10));
    for &(i, _) in acked {
        let got = r.get(key(i)).unwrap_or_else(|e| panic!("reading {i}: {e}"));
        assert_eq!(got.as_deref(), Some(value(i).as_slice()), "acknowledged write {i} lost");
    }
    for reg in status(url)["regions"].as_array().unwrap() {
        let id = reg["id"].as_u64().unwrap().to_string();
        let (ok, out) = halyard(&["admin", "verify", "--region", &id, "--etcd", url]);
        assert!(ok, "verify region {id}: {out}");
    }
}

fn region(s: &serde_json::Value, id: u64) -> serde_json::Value {
    s["regions"].as_array().unwrap().iter().find(|r| r["id"].as_u64() == Some(id)).unwrap().clone()
}

/// The median and the largest of `v`.
fn median_max(v: &mut [Duration]) -> (Duration, Duration) {
    v.sort();
    (v[v.len() / 2], v[v.len() - 1])
}

#[test]
fn planned_handoffs_under_writes_lose_nothing() {
    let (dir, _etcd, url) = new_cluster(3, 3, true);
    let nodes: Vec<Node> = (1..=3).map(|i| start_node(dir.path(), &url, &format!("n{i}"))).collect();
    wait_settled(&url, 3, Duration::from_secs(60));
    let addrs: Vec<String> = nodes.iter().map(|n| n.native.clone()).collect();
    // Region 1 holds the keys "key0".."key2"; the writers write only there.
    let writers = Writers::start(&addrs, 4, &[0, 1, 2]);
    std::thread::sleep(Duration::from_millis(500));
    let rounds = std::env::var("HALYARD_HANDOFFS").ok().and_then(|v| v.parse().ok()).unwrap_or(8);
    let mut windows = Vec::new();
    let mut epoch = region(&status(&url), 1)["epoch"].as_u64().unwrap();
    for round in 0..rounds {
        let r = region(&status(&url), 1);
        let backups = r["backups"].as_array().unwrap();
        let to = backups[round % backups.len()].as_str().unwrap().to_string();
        let t0 = Instant::now();
        let (ok, out) = halyard(&["admin", "transfer", "--region", "1", "--to", &to, "--etcd", &url]);
        assert!(ok, "transfer {round} to {to}: {out}");
        let after = region(&status(&url), 1);
        assert_eq!(after["primary"].as_str(), Some(to.as_str()), "{out}");
        let now = after["epoch"].as_u64().unwrap();
        assert!(now > epoch, "the epoch did not rise with the handoff: {epoch} then {now}");
        epoch = now;
        // Writes resume on the new primary before the next handoff.
        std::thread::sleep(Duration::from_millis(400));
        windows.push((t0, Instant::now()));
        // The master refills the group (the old primary comes back as a backup).
        wait_settled(&url, 3, Duration::from_secs(60));
    }
    let acked = writers.stop();
    let mut gaps: Vec<Duration> = windows.iter().map(|&(a, b)| longest_gap(&acked, a, b)).collect();
    let (p50, max) = median_max(&mut gaps);
    eprintln!("{rounds} handoffs under writes: longest write gap median {p50:?}, max {max:?}; {} writes", acked.len());
    // Far below the lease TTL's failover path: each handoff is a fence and a promotion.
    assert!(max < Duration::from_secs(5), "a handoff stopped writes for {max:?}");
    check_everything(&url, &addrs, &acked);
}

#[test]
fn sigterm_hands_primaries_off_before_the_node_leaves() {
    let (dir, _etcd, url) = new_cluster(3, 2, true);
    let mut nodes: Vec<Node> = (1..=3).map(|i| start_node(dir.path(), &url, &format!("n{i}"))).collect();
    let s = wait_settled(&url, 2, Duration::from_secs(60));
    let leads = |s: &serde_json::Value, n: &str| {
        s["regions"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["primary"] == n)
            .map(|r| r["id"].as_u64().unwrap())
            .collect::<Vec<_>>()
    };
    let victim = nodes.iter().find(|n| !leads(&s, &n.name).is_empty()).unwrap().name.clone();
    let led = leads(&s, &victim);
    let addrs: Vec<String> = nodes.iter().map(|n| n.native.clone()).collect();
    let writers = Writers::start(&addrs, 4, &[]);
    std::thread::sleep(Duration::from_millis(500));
    let v = nodes.iter().position(|n| n.name == victim).unwrap();
    let pid = nodes[v].proc.0.as_ref().unwrap().id().to_string();
    let t0 = Instant::now();
    assert!(std::process::Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
    let exit = loop {
        if let Some(st) = nodes[v].proc.0.as_mut().unwrap().try_wait().unwrap() {
            break st;
        }
        assert!(t0.elapsed() < Duration::from_secs(40), "{victim} did not exit within 40 s of SIGTERM");
        std::thread::sleep(Duration::from_millis(20));
    };
    let left_in = t0.elapsed();
    assert!(exit.success(), "{victim} exited with {exit}");
    std::thread::sleep(Duration::from_millis(500));
    let end = Instant::now();
    let s = status(&url);
    for id in &led {
        let r = region(&s, *id);
        assert_ne!(r["primary"].as_str(), Some(victim.as_str()), "region {id} still led by the node that left");
        assert!(r["primary_alive"].as_bool().unwrap(), "region {id} has no live primary after the leave: {s}");
    }
    for r in s["regions"].as_array().unwrap() {
        let names = r["backups"].as_array().unwrap();
        assert!(!names.iter().any(|b| b == victim.as_str()), "{victim} is still a backup of {}: {s}", r["id"]);
    }
    // The node gave its lease back: it is gone from the live nodes at once, not after a TTL.
    let me = s["nodes"].as_array().unwrap().iter().find(|n| n["name"] == victim.as_str()).unwrap().clone();
    assert_eq!(me["alive"], false, "{victim} still alive in etcd after leaving: {s}");
    let acked_so_far = writers.acked.lock().unwrap().clone();
    let gap = longest_gap(&acked_so_far, t0, end);
    eprintln!("{victim} left in {left_in:?} (led {led:?}); longest write gap meanwhile {gap:?}");
    nodes[v].restart();
    wait_settled(&url, 2, Duration::from_secs(60));
    let acked = writers.stop();
    check_everything(&url, &addrs, &acked);
}

/// Every region's (epoch, primary, backups), to see whether anything changed.
fn shape(s: &serde_json::Value) -> Vec<(u64, String, Vec<String>)> {
    s["regions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let b = r["backups"].as_array().unwrap().iter().map(|x| x.as_str().unwrap().to_string()).collect();
            (r["epoch"].as_u64().unwrap(), r["primary"].as_str().unwrap().to_string(), b)
        })
        .collect()
}

fn copies(s: &serde_json::Value, node: &str) -> usize {
    let n = s["nodes"].as_array().unwrap().iter().find(|n| n["name"] == node).unwrap();
    (n["primaries"].as_u64().unwrap() + n["backups"].as_u64().unwrap()) as usize
}

#[test]
fn moves_drains_removals_and_the_balancer_under_writes() {
    let (dir, _etcd, url) = new_cluster(3, 2, true);
    let mut nodes: Vec<Node> = (1..=3).map(|i| start_node(dir.path(), &url, &format!("n{i}"))).collect();
    let s = wait_settled(&url, 2, Duration::from_secs(60));
    let addrs: Vec<String> = nodes.iter().map(|n| n.native.clone()).collect();
    let writers = Writers::start(&addrs, 3, &[]);
    std::thread::sleep(Duration::from_millis(500));

    // An operator's move of region 1's primary copy onto the node outside its group.
    let r1 = region(&s, 1);
    let from = r1["primary"].as_str().unwrap().to_string();
    let group: Vec<&str> = std::iter::once(from.as_str())
        .chain(r1["backups"].as_array().unwrap().iter().map(|b| b.as_str().unwrap()))
        .collect();
    let to = nodes.iter().map(|n| n.name.as_str()).find(|n| !group.contains(n)).unwrap().to_string();
    let (ok, out) = halyard(&["admin", "move", "--region", "1", "--from", &from, "--to", &to, "--etcd", &url]);
    assert!(ok, "move: {out}");
    let r1 = region(&status(&url), 1);
    let now: Vec<&str> = std::iter::once(r1["primary"].as_str().unwrap())
        .chain(r1["backups"].as_array().unwrap().iter().map(|b| b.as_str().unwrap()))
        .collect();
    assert!(now.contains(&to.as_str()) && !now.contains(&from.as_str()), "after the move: {r1}");
    let bad = halyard(&["admin", "move", "--region", "1", "--from", &from, "--to", &to, "--etcd", &url]);
    assert!(!bad.0 && bad.1.contains("holds no copy"), "a move off a node without a copy: {}", bad.1);

    // A fourth node joins with nothing: the balancer moves copies to it, then rests.
    nodes.push(start_node(dir.path(), &url, "n4"));
    let t0 = Instant::now();
    let s = loop {
        let s = status(&url);
        let quiet = s["log"].as_array().unwrap().is_empty() && s["requests"].as_array().unwrap().is_empty();
        let whole = s["regions"].as_array().unwrap().iter().all(|r| r["copying"].as_array().unwrap().is_empty());
        if copies(&s, "n4") >= 1 && quiet && whole {
            break s;
        }
        assert!(t0.elapsed() < Duration::from_secs(60), "the balancer gave n4 nothing: {s}");
        std::thread::sleep(Duration::from_millis(100));
    };
    eprintln!("balanced onto n4 in {:?}", t0.elapsed());
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(shape(&status(&url)), shape(&s), "a balanced, quiet cluster changed shape (oscillation)");

    // Drain n1, then remove it: it holds nothing and may not come back under its name.
    let (ok, out) = halyard(&["cluster", "drain", "n1", "--etcd", &url]);
    assert!(ok, "drain: {out}");
    let s = status(&url);
    assert_eq!(copies(&s, "n1"), 0, "n1 still holds copies after the drain: {s}");
    let n1 = s["nodes"].as_array().unwrap().iter().find(|n| n["name"] == "n1").unwrap().clone();
    assert_eq!(n1["state"], "draining");
    let (ok, out) = halyard(&["cluster", "remove", "n1", "--etcd", &url]);
    assert!(ok, "remove: {out}");
    let acked = writers.stop();
    let live: Vec<String> = nodes.iter().filter(|n| n.name != "n1").map(|n| n.native.clone()).collect();
    check_everything(&url, &live, &acked);
    let n1 = nodes.iter_mut().find(|n| n.name == "n1").unwrap();
    n1.proc.kill9();
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_halyard")).args(&n1.args).output().unwrap();
    let text = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && text.contains("was removed"), "a removed node registered again: {text}");
}
