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
mod etcd_common;

use etcd_common::{cluster_client, halyard, start_etcd, start_node, status, wait_settled, Node};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

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
