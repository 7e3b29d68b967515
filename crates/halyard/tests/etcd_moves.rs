//! Regions that change hands or shape on purpose, in a cluster coordinated by a real etcd:
//! planned handoffs (`halyard admin transfer`) and splits (`halyard admin split`) under writes,
//! and a node that leaves on SIGTERM, handing its primaries to backups before it gives its lease
//! back. Writers use the region-aware
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

use etcd_common::{
    cluster_client, copies, halyard, key, metric_sums, new_cluster, start_node, status, value, wait_settled, Node,
};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

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

/// The median, the 99th percentile (nearest rank) and the largest of `v`.
fn percentiles(v: &mut [Duration]) -> (Duration, Duration, Duration) {
    v.sort();
    let at = |q: f64| v[((q * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1];
    (at(0.5), at(0.99), v[v.len() - 1])
}

#[test]
fn planned_handoffs_under_writes_lose_nothing() {
    // Without the balancer, which would hand region 1 back after each handoff here.
    let (dir, _etcd, url) = etcd_common::new_cluster_with(3, 3, &["--numeric-keys", "--no-balance"]);
    // HALYARD_HANDOFF_STORAGE=remote: the nodes keep their stores on four storage nodes.
    let remote = std::env::var("HALYARD_HANDOFF_STORAGE").is_ok_and(|v| v == "remote");
    let stores: Vec<Node> = match remote {
        true => (1..=4)
            .map(|i| etcd_common::start_node_with(dir.path(), &url, &format!("s{i}"), None, &["--role", "storage"]))
            .collect(),
        false => Vec::new(),
    };
    if remote {
        etcd_common::wait_storage_nodes(&url, stores.len());
    }
    let extra: &[&str] = if remote { &["--storage", "remote"] } else { &[] };
    let nodes: Vec<Node> =
        (1..=3).map(|i| etcd_common::start_node_with(dir.path(), &url, &format!("n{i}"), None, extra)).collect();
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
    let (p50, p99, max) = percentiles(&mut gaps);
    eprintln!(
        "{rounds} handoffs under writes: longest write gap p50 {p50:?}, p99 {p99:?}, max {max:?}; {} writes",
        acked.len()
    );
    // Far below the lease TTL's failover path: each handoff is a fence and a promotion.
    assert!(max < Duration::from_secs(5), "a handoff stopped writes for {max:?}");
    // The masters' histograms saw every handoff.
    let all: Vec<&Node> = nodes.iter().collect();
    let names = ["halyard_master_handoff_duration_seconds_count", "halyard_master_handoff_fence_seconds_count"];
    let counts = metric_sums(&all, &names);
    assert!(counts.iter().all(|c| *c >= rounds as f64), "handoffs in the masters' histograms: {counts:?}");
    check_everything(&url, &addrs, &acked);
}

/// A region split under writes: the map holds two regions that partition the key space, each
/// at a higher epoch and version; the new region's primary role is handed off at once; every
/// acknowledged write reads back and every copy of each region is equal.
#[test]
fn a_split_under_writes_loses_nothing_and_its_half_moves_on() {
    let (dir, _etcd, url) = etcd_common::new_cluster_with(1, 3, &["--no-balance"]);
    let nodes: Vec<Node> = (1..=3).map(|i| start_node(dir.path(), &url, &format!("n{i}"))).collect();
    wait_settled(&url, 3, Duration::from_secs(60));
    let addrs: Vec<String> = nodes.iter().map(|n| n.native.clone()).collect();
    let writers = Writers::start(&addrs, 4, &[]);
    std::thread::sleep(Duration::from_millis(800));
    let before = region(&status(&url), 1);
    let t0 = Instant::now();
    let (ok, out) = halyard(&["admin", "split", "--region", "1", "--at", "key5", "--etcd", &url]);
    assert!(ok, "split: {out}");
    let split_at = Instant::now();
    let s = status(&url);
    let regions = s["regions"].as_array().unwrap();
    assert_eq!(regions.len(), 2, "{s}");
    let (left, right) = (region(&s, 1), region(&s, 2));
    assert_eq!((left["start"].as_str(), left["end"].as_str()), (before["start"].as_str(), Some("key5")), "{s}");
    assert_eq!((right["start"].as_str(), right["end"].as_str()), (Some("key5"), before["end"].as_str()), "{s}");
    for r in [&left, &right] {
        assert!(r["epoch"].as_u64() > before["epoch"].as_u64(), "the epoch did not rise: {s}");
        assert_eq!(r["version"].as_u64(), Some(before["version"].as_u64().unwrap() + 1), "{s}");
        assert_eq!(r["primary"], before["primary"], "{s}");
        assert_eq!(r["backups"], before["backups"], "{s}");
    }
    // The new region's primary role moves at once.
    let to = right["backups"][0].as_str().unwrap().to_string();
    let (ok, out) = halyard(&["admin", "transfer", "--region", "2", "--to", &to, "--etcd", &url]);
    assert!(ok, "transfer of the new region: {out}");
    std::thread::sleep(Duration::from_millis(800));
    wait_settled(&url, 3, Duration::from_secs(60));
    let acked = writers.stop();
    let gap = longest_gap(&acked, t0, split_at);
    let both =
        |right: bool| acked.iter().any(|a| a.1 > split_at && (key(a.0).as_slice() >= b"key5".as_slice()) == right);
    assert!(both(false) && both(true), "writes went on in both halves after the split");
    eprintln!("split under writes: longest write gap {gap:?} ({} writes)", acked.len());
    let all: Vec<&Node> = nodes.iter().collect();
    assert!(metric_sums(&all, &["halyard_master_splits_total"])[0] >= 1.0, "the masters' split counter");
    check_everything(&url, &addrs, &acked);
}

/// `halyard admin merge` under writes: region 2 (after its primary role joined region 1's) is
/// merged into region 1 without an acknowledged write lost; the map ends with one region at a
/// higher epoch and version, writes go on across the whole range, and every backup's copy
/// (joined from its two copies and caught up incrementally) equals the primary's.
#[test]
fn an_operator_merge_under_writes_loses_nothing_and_the_copies_join() {
    let (dir, _etcd, url) = etcd_common::new_cluster_with(2, 3, &["--no-balance", "--numeric-keys"]);
    let nodes: Vec<Node> = (1..=3).map(|i| start_node(dir.path(), &url, &format!("n{i}"))).collect();
    wait_settled(&url, 3, Duration::from_secs(60));
    let s = status(&url);
    let (p1, p2) = (region(&s, 1)["primary"].as_str().unwrap().to_string(), region(&s, 2)["primary"].clone());
    // (A backup named in the map a moment ago may not have taken its stream yet: asked again.)
    let t0 = Instant::now();
    while p2.as_str() != Some(p1.as_str()) {
        let (ok, out) = halyard(&["admin", "transfer", "--region", "2", "--to", &p1, "--etcd", &url]);
        if ok {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(20), "aligning the primaries: {out}");
        std::thread::sleep(Duration::from_millis(300));
    }
    let (ok, out) = halyard(&["admin", "merge", "--region", "2", "--etcd", &url]);
    assert!(!ok && out.contains("end of the key space"), "region 2 has nothing after it: {out}");
    let addrs: Vec<String> = nodes.iter().map(|n| n.native.clone()).collect();
    let writers = Writers::start(&addrs, 4, &[]);
    std::thread::sleep(Duration::from_millis(800));
    let before = [region(&status(&url), 1), region(&status(&url), 2)];
    let all: Vec<&Node> = nodes.iter().collect();
    let copies = ["halyard_replication_catch_ups_total", "halyard_replication_incremental_catch_ups_total"];
    let copies_before = metric_sums(&all, &copies);
    let t0 = Instant::now();
    let (ok, out) = halyard(&["admin", "merge", "--region", "1", "--etcd", &url]);
    assert!(ok, "merge: {out}");
    let merged_at = Instant::now();
    let s = status(&url);
    let merged = partition(&s);
    assert_eq!(merged.len(), 1, "{s}");
    let m = merged[0];
    assert_eq!(m["id"].as_u64(), Some(1), "{s}");
    for b in &before {
        assert!(m["epoch"].as_u64() > b["epoch"].as_u64(), "the epoch did not rise: {s}");
        assert!(m["version"].as_u64() > b["version"].as_u64(), "the version did not rise: {s}");
    }
    std::thread::sleep(Duration::from_millis(800));
    wait_settled(&url, 3, Duration::from_secs(60));
    let acked = writers.stop();
    let gap = longest_gap(&acked, t0, merged_at);
    let both =
        |high: bool| acked.iter().any(|a| a.1 > merged_at && (key(a.0).as_slice() >= b"key5".as_slice()) == high);
    assert!(both(false) && both(true), "writes went on over the whole merged range");
    eprintln!("merge under writes: longest write gap {gap:?} ({} writes)", acked.len());
    assert!(metric_sums(&all, &["halyard_master_merges_total"])[0] >= 1.0, "the masters' merge counter");
    let copies_after = metric_sums(&all, &copies);
    assert_eq!(copies_after[0], copies_before[0], "no full copy: the backups joined the copies they held");
    assert!(copies_after[1] >= copies_before[1] + 2.0, "each backup caught up incrementally: {copies_after:?}");
    check_everything(&url, &addrs, &acked);
}

/// Small idle regions merge by themselves: six regions on two nodes (primaries spread over
/// both) end as one, the master first moving a region's primary role next to its left
/// neighbour's; every value written before reads back and the copies are equal.
#[test]
fn small_idle_neighbours_merge_by_themselves() {
    let (dir, _etcd, url) = etcd_common::new_cluster_with(6, 2, &["--numeric-keys", "--merges", "--no-balance"]);
    let nodes: Vec<Node> = (1..=2).map(|i| start_node(dir.path(), &url, &format!("n{i}"))).collect();
    let s = wait_settled(&url, 2, Duration::from_secs(60));
    let leaders: std::collections::BTreeSet<String> =
        s["regions"].as_array().unwrap().iter().map(|r| r["primary"].as_str().unwrap().to_string()).collect();
    let addrs: Vec<String> = nodes.iter().map(|n| n.native.clone()).collect();
    let c = cluster_client(&addrs, Duration::from_secs(10));
    let mut acked = Vec::new();
    for i in 0..600 {
        // Regions merge while this writes: a write refused meanwhile is retried.
        let t0 = Instant::now();
        while let Err(e) = c.put(key(i), value(i)) {
            assert!(t0.elapsed() < Duration::from_secs(30), "write {i}: {e}");
            std::thread::sleep(Duration::from_millis(20));
        }
        acked.push((i, Instant::now()));
    }
    let t0 = Instant::now();
    let s = loop {
        let s = status(&url);
        if partition(&s).len() == 1 && s["log"].as_array().unwrap().is_empty() {
            break s;
        }
        assert!(t0.elapsed() < Duration::from_secs(120), "the regions did not merge into one: {s}");
        std::thread::sleep(Duration::from_millis(300));
    };
    eprintln!("6 regions merged into one in {:?} (primaries were on {leaders:?})", t0.elapsed());
    assert!(s["regions"][0]["version"].as_u64() > Some(1), "{s}");
    wait_settled(&url, 2, Duration::from_secs(60));
    check_everything(&url, &addrs, &acked);
}

/// A region past its primary's `--region-max-mb` is split by the master at the key its primary
/// names, without an operator: the map ends with regions that partition the key space, and every
/// write reads back with every copy equal.
/// A settled cluster of one region with 3 copies on 3 nodes (`init` flags `init`), each node
/// started with the settings file `toml` and the flags `extra`: the directory, etcd, its URL,
/// the nodes and their native addresses.
fn one_region_cluster(
    init: &[&str],
    toml: &str,
    extra: &[&str],
) -> (tempfile::TempDir, etcd_common::Proc, String, Vec<Node>, Vec<String>) {
    let (dir, etcd, url) = etcd_common::new_cluster_with(1, 3, init);
    let conf = dir.path().join("node.toml");
    std::fs::write(&conf, toml).unwrap();
    let mut args = vec!["--config", conf.to_str().unwrap()];
    args.extend_from_slice(extra);
    let nodes: Vec<Node> =
        (1..=3).map(|i| etcd_common::start_node_with(dir.path(), &url, &format!("n{i}"), None, &args)).collect();
    wait_settled(&url, 3, Duration::from_secs(60));
    let addrs = nodes.iter().map(|n| n.native.clone()).collect();
    (dir, etcd, url, nodes, addrs)
}

/// Waits until the map holds at least two regions and no change is under way.
fn wait_split(url: &str, within: Duration, what: &str) -> serde_json::Value {
    let t0 = Instant::now();
    loop {
        let s = status(url);
        if s["regions"].as_array().unwrap().len() >= 2 && s["log"].as_array().unwrap().is_empty() {
            return s;
        }
        assert!(t0.elapsed() < within, "no split {what} within {within:?}: {s}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The regions of status `s` in key order, checked to partition the key space (from "" to the
/// end, with no gap and no overlap).
fn partition(s: &serde_json::Value) -> Vec<&serde_json::Value> {
    let mut rs: Vec<&serde_json::Value> = s["regions"].as_array().unwrap().iter().collect();
    rs.sort_by_key(|r| r["start"].as_str().unwrap().to_string());
    assert_eq!(rs[0]["start"].as_str(), Some(""), "{s}");
    for w in rs.windows(2) {
        assert_eq!(w[0]["end"], w[1]["start"], "the regions leave a gap or overlap: {s}");
    }
    assert!(rs.last().unwrap()["end"].is_null(), "{s}");
    rs
}

/// Splits asked of three regions at once are carried out in the same master tick: each new
/// region gets an id of its own (two once got the same, and the second overwrote the first's
/// record, leaving a gap in the map), and the map stays a partition.
#[test]
fn splits_of_several_regions_at_once_get_distinct_ids() {
    let (dir, _etcd, url) = new_cluster(3, 2, true);
    let nodes: Vec<Node> = (1..=3).map(|i| start_node(dir.path(), &url, &format!("n{i}"))).collect();
    wait_settled(&url, 2, Duration::from_secs(60));
    let asks: Vec<_> = [("1", "key1"), ("2", "key4"), ("3", "key8")]
        .into_iter()
        .map(|(r, at)| {
            let url = url.clone();
            std::thread::spawn(move || halyard(&["admin", "split", "--region", r, "--at", at, "--etcd", &url]))
        })
        .collect();
    for a in asks {
        let (ok, out) = a.join().unwrap();
        assert!(ok, "split: {out}");
    }
    let s = wait_settled(&url, 2, Duration::from_secs(60));
    let rs = s["regions"].as_array().unwrap();
    assert_eq!(rs.len(), 6, "{s}");
    let mut ids: Vec<u64> = rs.iter().map(|r| r["id"].as_u64().unwrap()).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 6, "two regions share an id: {s}");
    let starts: Vec<&str> = partition(&s).iter().map(|r| r["start"].as_str().unwrap()).collect();
    assert_eq!(starts, ["", "key1", "key3", "key4", "key6", "key8"], "{s}");
    let addrs: Vec<String> = nodes.iter().map(|n| n.native.clone()).collect();
    let c = cluster_client(&addrs, Duration::from_secs(10));
    for i in 0..200 {
        // A backup whose stream missed a split's frame takes the new region by a copy once its
        // parent caught up: a write may wait for it past the client's timeout meanwhile (the
        // same value again is harmless).
        let t0 = Instant::now();
        while let Err(e) = c.put(key(i), value(i)) {
            assert!(t0.elapsed() < Duration::from_secs(60), "put {i}: {e}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    for i in 0..200 {
        assert_eq!(c.get(key(i)).unwrap(), Some(value(i)), "key {i}");
    }
}

#[test]
fn a_region_past_its_size_limit_splits_by_itself() {
    // A 1 MiB L0, so that the data reaches the SSTs the size is estimated from.
    let (_dir, _etcd, url, _nodes, addrs) =
        one_region_cluster(&["--no-balance"], "[engine]\nl0_mb = 1\n", &["--region-max-mb", "2"]);
    let c = cluster_client(&addrs, Duration::from_secs(10));
    let ids: Vec<u64> = (0..6000).collect();
    for chunk in ids.chunks(200) {
        let mut batch = halyard_client::Batch::new();
        for &i in chunk {
            batch.put(key(i), [value(i), vec![b'v'; 1000]].concat());
        }
        // A batch lies in one region: split by the region it goes to when the map changed.
        if c.write_batch(&batch).is_err() {
            for &i in chunk {
                c.put(key(i), [value(i), vec![b'v'; 1000]].concat()).unwrap();
            }
        }
    }
    let t0 = Instant::now();
    let s = wait_split(&url, Duration::from_secs(60), "by size");
    eprintln!("split by size {:?} after the load", t0.elapsed());
    for r in partition(&s) {
        assert!(r["version"].as_u64() >= Some(2), "{s}");
    }
    wait_settled(&url, 3, Duration::from_secs(60));
    let r = cluster_client(&addrs, Duration::from_secs(10));
    for &i in &ids {
        assert_eq!(r.get(key(i)).unwrap(), Some([value(i), vec![b'v'; 1000]].concat()), "key {i}");
    }
    check_everything(&url, &addrs, &[]);
}

/// Readers over every node asking for `pick(n)` of an ever-growing n, until stopped: the
/// requests they got answers to, and the longest one took.
type Reader = std::thread::JoinHandle<(u64, Duration)>;

fn readers(addrs: &[String], threads: usize, stop: &Arc<AtomicBool>, pick: fn(u64) -> u64) -> Vec<Reader> {
    (0..threads)
        .map(|t| {
            let (addrs, stop) = (addrs.to_vec(), stop.clone());
            std::thread::spawn(move || {
                let c = cluster_client(&addrs, Duration::from_secs(5));
                let (mut n, mut done, mut longest) = (t as u64 * 7_919, 0, Duration::ZERO);
                while !stop.load(Ordering::Relaxed) {
                    let i = pick(n);
                    let t0 = Instant::now();
                    assert_eq!(c.get(key(i)).unwrap(), Some(value(i)), "key {i}");
                    longest = longest.max(t0.elapsed());
                    n += 1;
                    done += 1;
                }
                (done, longest)
            })
        })
        .collect()
}

/// Reads for `secs` seconds with `pick`, returning the requests answered.
fn read_for(addrs: &[String], secs: u64, pick: fn(u64) -> u64) -> u64 {
    let stop = Arc::new(AtomicBool::new(false));
    let hs = readers(addrs, 3, &stop, pick);
    std::thread::sleep(Duration::from_secs(secs));
    stop.store(true, Ordering::Relaxed);
    hs.into_iter().map(|h| h.join().unwrap().0).sum()
}

#[test]
fn a_hot_region_splits_by_load_and_its_halves_lead_on_two_nodes() {
    let (_dir, _etcd, url, _nodes, addrs) =
        one_region_cluster(&[], "split_load_secs = 2\n", &["--split-load-ops", "100"]);
    let c = cluster_client(&addrs, Duration::from_secs(10));
    for i in 0..1000 {
        c.put(key(i), value(i)).unwrap();
    }
    // One hot key: hot for three windows, yet no key parts its load, so it does not split.
    let one = read_for(&addrs, 6, |_| 500);
    let s = status(&url);
    assert_eq!(s["regions"].as_array().unwrap().len(), 1, "a single hot key split its region: {s}");
    assert!(one > 6 * 100, "the readers were too slow to make the region hot: {one} requests in 6 s");
    // Uniform reads: the region splits near the middle of the keys asked for.
    let stop = Arc::new(AtomicBool::new(false));
    let hs = readers(&addrs, 3, &stop, |n| n.wrapping_mul(7_919) % 1000);
    let t0 = Instant::now();
    let s = wait_split(&url, Duration::from_secs(60), "by load");
    eprintln!("split by load {:?} after uniform reads began", t0.elapsed());
    let cut = partition(&s)[1]["start"].as_str().unwrap().to_string();
    assert!(cut.as_str() > "key" && cut.as_str() < "key9", "the cut {cut:?} is not inside the keys read");
    // The master hands one half's primary role to another node.
    let s = loop {
        let s = status(&url);
        let mut leaders: Vec<&str> =
            s["regions"].as_array().unwrap().iter().map(|r| r["primary"].as_str().unwrap()).collect();
        leaders.sort();
        leaders.dedup();
        if leaders.len() >= 2 && s["log"].as_array().unwrap().is_empty() {
            break s;
        }
        assert!(t0.elapsed() < Duration::from_secs(120), "the halves still lead on one node: {s}");
        std::thread::sleep(Duration::from_millis(200));
    };
    eprintln!("halves lead on two nodes {:?} after uniform reads began", t0.elapsed());
    stop.store(true, Ordering::Relaxed);
    let (served, longest) =
        hs.into_iter().map(|h| h.join().unwrap()).fold((0, Duration::ZERO), |(n, l), (m, x)| (n + m, l.max(x)));
    eprintln!("{served} reads, the longest {longest:?}");
    // A read waits for its key's newest version to be acknowledged: the split's own LSN must be
    // (it once was not, and reads waited out the 5 s acknowledgement timeout).
    assert!(longest < Duration::from_secs(3), "a read took {longest:?} across the split and handoff");
    let ops: u64 = s["regions"].as_array().unwrap().iter().filter_map(|r| r["ops"].as_u64()).sum();
    eprintln!("requests a second the primaries published at the end: {ops}");
    wait_settled(&url, 3, Duration::from_secs(60));
    check_everything(&url, &addrs, &[]);
}

#[test]
fn sigterm_hands_primaries_off_before_the_node_leaves() {
    // The default replace_after: the places of the node that left are kept for it.
    let (dir, _etcd, url) = etcd_common::new_cluster_with(3, 2, &["--numeric-keys", "--replace-after-secs", "60"]);
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
    let held = copies(&s, &victim);
    let addrs: Vec<String> = nodes.iter().map(|n| n.native.clone()).collect();
    preload(&addrs, 20 << 20);
    let writers = Writers::start(&addrs, 4, &[]);
    std::thread::sleep(Duration::from_millis(500));
    let v = nodes.iter().position(|n| n.name == victim).unwrap();
    let t0 = Instant::now();
    let exit = nodes[v].leave(Duration::from_secs(40));
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
    let mut kept = 0;
    for r in s["regions"].as_array().unwrap() {
        let names = r["backups"].as_array().unwrap();
        assert!(!names.iter().any(|b| b == victim.as_str()), "{victim} is still a backup of {}: {s}", r["id"]);
        let away: Vec<&str> = r["away"].as_array().unwrap().iter().map(|a| a[0].as_str().unwrap()).collect();
        if away.contains(&victim.as_str()) {
            kept += 1;
            assert!(names.is_empty(), "a copy was made elsewhere while {victim}'s place is kept: {r}");
        }
    }
    assert!(kept > 0, "no place kept for {victim}: {s}");
    // The node gave its lease back: it is gone from the live nodes at once, not after a TTL.
    let me = s["nodes"].as_array().unwrap().iter().find(|n| n["name"] == victim.as_str()).unwrap().clone();
    assert_eq!(me["alive"], false, "{victim} still alive in etcd after leaving: {s}");
    let acked_so_far = writers.acked.lock().unwrap().clone();
    let gap = longest_gap(&acked_so_far, t0, end);
    eprintln!("{victim} left in {left_in:?} (led {led:?}); longest write gap meanwhile {gap:?}");
    let others: Vec<&Node> = nodes.iter().filter(|n| n.name != victim).collect();
    let before = copy_counters(&others);
    nodes[v].restart();
    let s = wait_settled(&url, 2, Duration::from_secs(60));
    assert_eq!(copies(&s, &victim), held, "{victim} is not back in its places: {s}");
    // It rejoined with what it held, the regions it led included (their old primary keeps its
    // store): only what it lacked travelled.
    let others: Vec<&Node> = nodes.iter().filter(|n| n.name != victim).collect();
    let after = copy_counters(&others);
    let d: Vec<f64> = after.iter().zip(&before).map(|(a, b)| a - b).collect();
    eprintln!("rejoin: {} full and {} incremental copies, {} bytes sent, {} kept", d[0], d[1], d[2], d[3]);
    assert_eq!(d[0], 0.0, "a full copy was sent to {victim} on its return: {d:?}");
    assert!(d[1] >= held as f64 && d[3] > d[2], "incremental copies to {victim}: {d:?}");
    let acked = writers.stop();
    check_everything(&url, &addrs, &acked);
}

/// A backup away (SIGTERM, its place kept) while its primary splits the region: back, it splits
/// its copy where the primary did rather than narrowing it, so both halves return by
/// incremental copies (the new half with the segments the two share), none by a full one.
#[test]
fn a_copy_whose_region_split_while_it_was_away_returns_by_incremental_copies() {
    let (dir, _etcd, url) = etcd_common::new_cluster_with(1, 3, &["--no-balance", "--replace-after-secs", "60"]);
    let mut nodes: Vec<Node> = (1..=3).map(|i| start_node(dir.path(), &url, &format!("n{i}"))).collect();
    let s = wait_settled(&url, 3, Duration::from_secs(60));
    let addrs: Vec<String> = nodes.iter().map(|n| n.native.clone()).collect();
    preload(&addrs, 8 << 20);
    let writers = Writers::start(&addrs, 2, &[]);
    let r1 = region(&s, 1);
    let away = r1["backups"][0].as_str().unwrap().to_string();
    let v = nodes.iter().position(|n| n.name == away).unwrap();
    assert!(nodes[v].leave(Duration::from_secs(40)).success(), "{away} did not leave cleanly");
    let at = "key5";
    let (ok, out) = halyard(&["admin", "split", "--region", "1", "--at", at, "--etcd", &url]);
    assert!(ok, "split: {out}");
    std::thread::sleep(Duration::from_millis(500));
    let others: Vec<&Node> = nodes.iter().filter(|n| n.name != away).collect();
    let before = copy_counters(&others);
    nodes[v].restart();
    let s = wait_settled(&url, 3, Duration::from_secs(90));
    for id in [1, 2] {
        let names = region(&s, id)["backups"].as_array().unwrap().clone();
        assert!(names.iter().any(|b| b == away.as_str()), "{away} is not back in region {id}: {s}");
    }
    let others: Vec<&Node> = nodes.iter().filter(|n| n.name != away).collect();
    let d: Vec<f64> = copy_counters(&others).iter().zip(&before).map(|(a, b)| a - b).collect();
    eprintln!(
        "return after a split: {} full and {} incremental copies, {} bytes sent, {} kept",
        d[0], d[1], d[2], d[3]
    );
    assert_eq!(d[0], 0.0, "a full copy was sent to {away} on its return: {d:?}");
    assert!(d[1] >= 2.0 && d[3] > d[2], "incremental copies of both halves to {away}: {d:?}");
    let acked = writers.stop();
    check_everything(&url, &addrs, &acked);
}

/// Writes about `bytes` of 2 KB pairs spread over the regions (keys apart from the writers'),
/// so that every region's logs hold sealed segments.
fn preload(addrs: &[String], bytes: usize) {
    let c = cluster_client(addrs, Duration::from_secs(10));
    let per_batch = 64;
    for b in 0..bytes / (10 * per_batch * 2048) {
        for digit in 0..10 {
            let mut batch = halyard_client::Batch::new();
            for j in 0..per_batch {
                batch.put(format!("key{digit}pre{:07}", b * per_batch + j).into_bytes(), vec![b'p'; 2048]);
            }
            c.write_batch(&batch).unwrap();
        }
    }
}

/// Summed over `nodes`: full copies, incremental copies, bytes copies sent, bytes they kept.
fn copy_counters(nodes: &[&Node]) -> Vec<f64> {
    let names = [
        "halyard_replication_catch_ups_total",
        "halyard_replication_incremental_catch_ups_total",
        "halyard_replication_copy_bytes_total",
        "halyard_replication_copy_kept_bytes_total",
    ];
    metric_sums(nodes, &names)
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

/// Waits until each of `holders` holds a copy and nothing is asked, logged or copying.
fn wait_balanced(url: &str, holders: &[&str], within: Duration) -> serde_json::Value {
    let t0 = Instant::now();
    loop {
        let s = status(url);
        let quiet = s["log"].as_array().unwrap().is_empty() && s["requests"].as_array().unwrap().is_empty();
        let whole = s["regions"].as_array().unwrap().iter().all(|r| r["copying"].as_array().unwrap().is_empty());
        if holders.iter().all(|n| copies(&s, n) >= 1) && quiet && whole {
            return s;
        }
        assert!(t0.elapsed() < within, "the balancer gave {holders:?} nothing: {s}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn moves_drains_removals_and_the_balancer_under_writes() {
    let (dir, _etcd, url) = new_cluster(3, 2, true);
    let mut nodes: Vec<Node> = (1..=3).map(|i| start_node(dir.path(), &url, &format!("n{i}"))).collect();
    wait_settled(&url, 2, Duration::from_secs(60));
    let addrs: Vec<String> = nodes.iter().map(|n| n.native.clone()).collect();
    let writers = Writers::start(&addrs, 3, &[]);
    std::thread::sleep(Duration::from_millis(500));
    // The node that registered last starts empty and the balancer gives it a copy: the
    // operator's move below is planned on the shape the cluster rests in.
    let s = wait_balanced(&url, &["n1", "n2", "n3"], Duration::from_secs(60));

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
    let s = wait_balanced(&url, &["n4"], Duration::from_secs(60));
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

/// Loads `url` in headless Chromium and returns the DOM once its scripts ran; with `shot`,
/// also keeps a screenshot there.
fn chromium(url: &str, shot: Option<&std::path::Path>) -> String {
    let profile = tempfile::tempdir().unwrap();
    let mut cmd = std::process::Command::new("chromium");
    cmd.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--window-size=1500,1000",
        "--virtual-time-budget=4000",
    ])
    .arg(format!("--user-data-dir={}", profile.path().display()));
    match shot {
        Some(p) => cmd.arg(format!("--screenshot={}", p.display())),
        None => cmd.arg("--dump-dom"),
    };
    let o = cmd.arg(url).output().expect("chromium (apt-get install chromium; scripts/test.sh installs it)");
    assert!(o.status.success(), "chromium: {}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The `<tr data-id="id">` row of the table `table` in `dom`.
fn dom_row<'d>(dom: &'d str, table: &str, id: &str) -> Option<&'d str> {
    let t = &dom[dom.find(&format!("id=\"{table}\""))?..];
    let t = &t[..t.find("</table>")?];
    let at = t.find(&format!("data-id=\"{id}\""))?;
    Some(&t[at..at + t[at..].find("</tr>")?])
}

#[test]
fn the_console_shows_the_cluster_while_a_region_moves() {
    let (dir, _etcd, url) = new_cluster(2, 2, true);
    let slow = ["--move-rate-mb", "1"];
    let nodes: Vec<Node> =
        (1..=3).map(|i| etcd_common::start_node_with(dir.path(), &url, &format!("n{i}"), None, &slow)).collect();
    let s = wait_settled(&url, 2, Duration::from_secs(60));
    let addrs: Vec<String> = nodes.iter().map(|n| n.native.clone()).collect();
    let c = cluster_client(&addrs, Duration::from_secs(5));
    let big = vec![b'v'; 3000];
    for b in 0..80u64 {
        let mut batch = halyard_client::Batch::new();
        for i in b * 100..(b + 1) * 100 {
            batch.put(key(i * 10), big.clone()); // region 1: keys "key0".."key4"
        }
        c.write_batch(&batch).unwrap();
    }
    // A move that takes about 24 s at 1 MiB/s: the console is rendered while it runs, also on
    // a loaded machine where Chromium takes seconds to start.
    let r1 = region(&s, 1);
    let from = r1["primary"].as_str().unwrap().to_string();
    let in_group: Vec<String> = std::iter::once(r1["primary"].clone())
        .chain(r1["backups"].as_array().unwrap().iter().cloned())
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    let to = nodes.iter().find(|n| !in_group.contains(&n.name)).unwrap().name.clone();
    let mv = {
        let (url, from, to) = (url.clone(), from.clone(), to.clone());
        std::thread::spawn(move || {
            halyard(&["admin", "move", "--region", "1", "--from", &from, "--to", &to, "--etcd", &url])
        })
    };
    let t0 = Instant::now();
    while region(&status(&url), 1)["copies"].as_array().unwrap().is_empty() {
        assert!(t0.elapsed() < Duration::from_secs(20), "the move's copy never showed in the status");
        std::thread::sleep(Duration::from_millis(50));
    }
    // Any node shows the whole cluster: ask one outside region 1's group.
    let http = |n: &Node| n.args.iter().skip_while(|a| *a != "--http").nth(1).unwrap().clone();
    let page = format!("http://{}/", http(nodes.iter().find(|n| n.name == to).unwrap()));
    let dom = chromium(&page, None);
    let st = status(&url);
    for n in st["nodes"].as_array().unwrap() {
        let name = n["name"].as_str().unwrap();
        let row =
            dom_row(&dom, "nodes", name).unwrap_or_else(|| panic!("no row for node {name} in the console: {dom}"));
        assert!(row.contains(n["state"].as_str().unwrap()), "node {name}'s state: {row}");
    }
    for r in st["regions"].as_array().unwrap() {
        let id = r["id"].as_u64().unwrap().to_string();
        let row = dom_row(&dom, "regions", &id).unwrap_or_else(|| panic!("no row for region {id}: {dom}"));
        assert!(row.contains(r["primary"].as_str().unwrap()), "region {id}'s primary: {row}");
    }
    let moving = dom_row(&dom, "moves", &format!("1-{to}")).unwrap_or_else(|| panic!("no move in flight shown: {dom}"));
    assert!(moving.contains(&to) && moving.contains("MiB"), "{moving}");
    let shot = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("console.png");
    chromium(&page, Some(&shot));
    assert!(std::fs::metadata(&shot).is_ok_and(|m| m.len() > 10_000), "no screenshot at {}", shot.display());
    eprintln!("console screenshot: {}", shot.display());
    let (ok, out) = mv.join().unwrap();
    assert!(ok, "move: {out}");
}

#[test]
fn the_console_asks_for_the_password() {
    let dir = tempfile::tempdir().unwrap();
    let s = common::Server::start(dir.path(), &["--requirepass", "sesame"]);
    assert!(s.http_get("/").starts_with("HTTP/1.1 401"), "the console without the password");
    let get = |auth: &str| {
        use std::io::{Read, Write};
        let mut c = std::net::TcpStream::connect(("127.0.0.1", s.http)).unwrap();
        write!(c, "GET /cluster.json HTTP/1.1\r\nHost: x\r\nAuthorization: Basic {auth}\r\n\r\n").unwrap();
        let mut out = String::new();
        c.read_to_string(&mut out).unwrap();
        out
    };
    assert!(get("eDp3cm9uZw==").starts_with("HTTP/1.1 401"), "x:wrong let in");
    let ok = get("eDpzZXNhbWU="); // x:sesame
    assert!(ok.starts_with("HTTP/1.1 200") && ok.contains("\"node\""), "{ok}");
    assert!(s.http_get("/metrics").starts_with("HTTP/1.1 200"), "metrics stay open to scrapers");
}

#[test]
fn hot_primaries_move_to_the_cooler_node() {
    let (dir, _etcd, url) = etcd_common::new_cluster_with(4, 2, &["--numeric-keys"]);
    let nodes: Vec<Node> = (1..=2).map(|i| start_node(dir.path(), &url, &format!("n{i}"))).collect();
    let s = wait_settled(&url, 2, Duration::from_secs(60));
    // Each node leads two regions; writes go to the two that n1 leads.
    let hot: Vec<serde_json::Value> =
        s["regions"].as_array().unwrap().iter().filter(|r| r["primary"] == "n1").cloned().collect();
    assert_eq!(hot.len(), 2, "two regions led by n1: {s}");
    let inside = |k: &[u8], r: &serde_json::Value| {
        let start = r["start"].as_str().unwrap().as_bytes();
        k >= start && r["end"].as_str().is_none_or(|e| k < e.as_bytes())
    };
    let ids: Vec<u64> = (0..20_000).filter(|i| hot.iter().any(|r| inside(&key(*i), r))).collect();
    let addrs: Vec<String> = nodes.iter().map(|n| n.native.clone()).collect();
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (stop, addrs, ids) = (stop.clone(), addrs.clone(), ids.clone());
        std::thread::spawn(move || {
            let c = cluster_client(&addrs, Duration::from_secs(10));
            for i in ids.iter().cycle() {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                c.put(key(*i), value(*i)).unwrap();
            }
        })
    };
    let t0 = Instant::now();
    let split = loop {
        let s = status(&url);
        let leaders: Vec<String> =
            hot.iter().map(|h| region(&s, h["id"].as_u64().unwrap())["primary"].to_string()).collect();
        if leaders[0] != leaders[1] {
            break t0.elapsed();
        }
        assert!(t0.elapsed() < Duration::from_secs(60), "the hot regions still share a primary: {s}");
        std::thread::sleep(Duration::from_millis(200));
    };
    eprintln!("the two hot regions have different primaries {split:?} after the writes began");
    // The count balancer then evens the primaries with the cold regions, not the hot ones.
    let t0 = Instant::now();
    let s = loop {
        let s = status(&url);
        let leads = |n: &str| s["regions"].as_array().unwrap().iter().filter(|r| r["primary"] == n).count();
        let quiet = s["log"].as_array().unwrap().is_empty() && s["requests"].as_array().unwrap().is_empty();
        if quiet && leads("n1") == leads("n2") {
            break s;
        }
        assert!(t0.elapsed() < Duration::from_secs(60), "primaries uneven by count: {s}");
        std::thread::sleep(Duration::from_millis(200));
    };
    stop.store(true, Ordering::Relaxed);
    writer.join().unwrap();
    // Not asserted: that the count balancer leaves the hot regions apart. A region's writes a
    // second are unknown for the first second after a handoff (its new primary has no earlier
    // LSN to take a difference from), so the count balancer can take it for a cold one and move
    // it back (seen once in CI); the rate should be carried over the handoff first.
    eprintln!("primaries even by count: {s}");
}

/// A node leaves on SIGTERM and comes back; its copies move off it as soon as the map allows,
/// under writes: every copy that became a backup holds what its primary holds.
#[test]
fn copies_move_off_a_node_just_back_from_a_leave() {
    let (dir, _etcd, url) = etcd_common::new_cluster_with(3, 2, &["--numeric-keys", "--replace-after-secs", "60"]);
    let mut nodes: Vec<Node> = (1..=3).map(|i| start_node(dir.path(), &url, &format!("n{i}"))).collect();
    wait_settled(&url, 2, Duration::from_secs(60));
    let addrs: Vec<String> = nodes.iter().map(|n| n.native.clone()).collect();
    preload(&addrs, 8 << 20);
    let writers = Writers::start(&addrs, 3, &[]);
    std::thread::sleep(Duration::from_millis(500));
    let victim = nodes[0].name.clone();
    nodes[0].leave(Duration::from_secs(40));
    std::thread::sleep(Duration::from_millis(500));
    nodes[0].restart();
    // As soon as the map lets it, each copy the returning node holds moves to the node outside
    // the region's group (a copy move right after a return once made an empty copy a backup).
    let t0 = Instant::now();
    let mut moved = Vec::new();
    loop {
        let s = status(&url);
        let mut left = 0;
        for r in s["regions"].as_array().unwrap() {
            let id = r["id"].as_u64().unwrap();
            let p = r["primary"].as_str().unwrap();
            let backups: Vec<&str> = r["backups"].as_array().unwrap().iter().map(|b| b.as_str().unwrap()).collect();
            if moved.contains(&id) || (p != victim && !backups.contains(&victim.as_str())) {
                continue;
            }
            let to = nodes.iter().map(|n| n.name.as_str()).find(|n| *n != p && !backups.contains(n));
            let (ok, out) = match to {
                Some(to) => {
                    let id_s = id.to_string();
                    halyard(&["admin", "move", "--region", &id_s, "--from", &victim, "--to", to, "--etcd", &url])
                }
                None => (false, "a new copy is being taken".into()),
            };
            eprintln!("move of region {id} from {victim} to {to:?} at {:?}: {out}", t0.elapsed());
            match ok {
                true => moved.push(id),
                false => left += 1,
            }
        }
        if left == 0 && !moved.is_empty() {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(60), "copies still on {victim} after 60 s (moved {moved:?}): {s}");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(!moved.is_empty(), "no copy moved");
    wait_settled(&url, 2, Duration::from_secs(60));
    let acked = writers.stop();
    check_everything(&url, &addrs, &acked);
}

/// A primary copy moved away before anything was written to it leaves an empty region in its
/// old node's store; after a split, a copy of one half moved back onto that node must take
/// that range (the empty copy's space goes back, as a written one's does), not wedge the
/// node's map on "region 2 overlaps region 1" so that the move never ends.
#[test]
fn an_empty_copy_moved_away_is_not_in_the_way_of_a_half_moved_back() {
    let (dir, _etcd, url) = etcd_common::new_cluster_with(1, 2, &["--no-balance"]);
    let nodes: Vec<Node> = (1..=3).map(|i| start_node(dir.path(), &url, &format!("n{i}"))).collect();
    wait_settled(&url, 2, Duration::from_secs(60));
    let r1 = region(&status(&url), 1);
    let old = r1["primary"].as_str().unwrap().to_string();
    let outside = nodes.iter().map(|n| n.name.clone()).find(|n| *n != old && r1["backups"][0] != n.as_str()).unwrap();
    let (ok, out) = halyard(&["admin", "move", "--region", "1", "--from", &old, "--to", &outside, "--etcd", &url]);
    assert!(ok, "move of the unwritten primary copy: {out}");
    wait_settled(&url, 2, Duration::from_secs(60));
    let addrs: Vec<String> = nodes.iter().map(|n| n.native.clone()).collect();
    let writers = Writers::start(&addrs, 2, &[]);
    std::thread::sleep(Duration::from_millis(500));
    let (ok, out) = halyard(&["admin", "split", "--region", "1", "--at", "key5", "--etcd", &url]);
    assert!(ok, "split: {out}");
    let right = region(&status(&url), 2);
    let from = right["backups"][0].as_str().unwrap().to_string();
    // The move waits until it is done: bounded here, so that a wedged node fails the test.
    let (tx, rx) = std::sync::mpsc::channel();
    let args = ["admin", "move", "--region", "2", "--from", &from, "--to", &old, "--etcd", &url].map(String::from);
    std::thread::spawn(move || tx.send(halyard(&args.each_ref().map(String::as_str))));
    let (ok, out) = rx.recv_timeout(Duration::from_secs(90)).expect("the move of the right half did not end in 90 s");
    assert!(ok, "move of the right half onto {old}: {out}");
    wait_settled(&url, 2, Duration::from_secs(60));
    let right = region(&status(&url), 2);
    let holds =
        std::iter::once(&right["primary"]).chain(right["backups"].as_array().unwrap()).any(|n| *n == old.as_str());
    assert!(holds, "{old} does not hold the right half: {right}");
    let acked = writers.stop();
    check_everything(&url, &addrs, &acked);
}
