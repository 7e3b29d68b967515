//! Split brain, tested directly: the primary of a region is cut off from etcd and from the
//! other nodes by `iptables` (its process runs as its own user; its packets to etcd's and the
//! other nodes' ports are dropped) while a client keeps talking to it. The master must promote
//! another node only after the old primary's lease expired, and the old primary must refuse
//! (or not answer) every read and write from the moment its lease can have run out. Healed, it
//! comes back as a backup and every copy is equal. Needs root (iptables).

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
    cluster_client, halyard, new_cluster, port, start_node, start_node_as, status, wait_settled, Cut, CUT_UID,
};
use halyard_client::blocking::Client;
use halyard_client::ClientOptions;
use std::time::{Duration, Instant};

/// The nodes' lease TTL (`halyard serve` default).
const TTL: Duration = Duration::from_secs(2);

#[test]
fn a_primary_cut_off_serves_nothing_once_its_lease_is_over() {
    let (dir, _etcd, url) = new_cluster(1, 3, false);
    // With every node equally loaded the master gives the region to the first node by name.
    let mut nodes = vec![start_node_as(dir.path(), &url, "n1", Some(CUT_UID))];
    nodes.push(start_node(dir.path(), &url, "n2"));
    nodes.push(start_node(dir.path(), &url, "n3"));
    let s = wait_settled(&url, 3, Duration::from_secs(60));
    assert_eq!(s["regions"][0]["primary"], "n1", "{s}");
    let old = Client::connect(
        nodes[0].native.as_str(),
        ClientOptions { timeout: Duration::from_millis(500), ..Default::default() },
    )
    .unwrap();
    // The node follows the map within its poll interval.
    let t = Instant::now();
    while let Err(e) = old.put("k", "before") {
        assert!(t.elapsed() < Duration::from_secs(10), "n1 does not take writes: {e}");
        std::thread::sleep(Duration::from_millis(50));
    }

    let mut ports = vec![port(&url)];
    for n in &nodes[1..] {
        ports.push(port(&n.native));
        ports.push(port(&n.replication));
    }
    let cut = Cut::new(ports);
    let t_cut = Instant::now();
    // From here the lease can last at most TTL (its last renewal was sent before the cut).
    let mut answered_late = Vec::new();
    let (mut promoted_at, mut last_answer) = (None, Duration::ZERO);
    let mut i = 0;
    while t_cut.elapsed() < TTL + Duration::from_secs(6) {
        i += 1;
        let call = t_cut.elapsed();
        let r = if i % 2 == 0 { old.put("k", format!("during-{i}")).map(|_| ()) } else { old.get("k").map(|_| ()) };
        if r.is_ok() {
            last_answer = t_cut.elapsed();
            if call >= TTL {
                answered_late.push((call, i % 2 == 0));
            }
        }
        if promoted_at.is_none() && status(&url)["regions"][0]["primary"] != "n1" {
            promoted_at = Some(t_cut.elapsed());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let promoted_at = promoted_at.expect("no other node was promoted while n1 was cut off");
    assert!(answered_late.is_empty(), "n1 answered after its lease was over (time, write?): {answered_late:?}");
    assert!(
        last_answer < promoted_at,
        "n1 answered {last_answer:?} after the cut, when another node already led (seen {promoted_at:?} after the cut)"
    );
    // The new primary takes writes; the old value is there.
    let live = vec![nodes[1].native.clone(), nodes[2].native.clone()];
    let c = cluster_client(&live, Duration::from_secs(10));
    assert!(c.get("k").unwrap().is_some());
    c.put("k", "after").unwrap();

    drop(cut);
    // Healed: n1 registers again under a new lease and is given the region back as a backup.
    let t = Instant::now();
    loop {
        let s = status(&url);
        let r = &s["regions"][0];
        assert_ne!(r["primary"], "n1", "n1 leads again: {s}");
        if r["backups"].as_array().unwrap().iter().any(|b| b == "n1") && s["log"].as_array().unwrap().is_empty() {
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(60), "n1 did not come back as a backup: {s}");
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(c.get("k").unwrap().as_deref(), Some(&b"after"[..]));
    let (ok, out) = halyard(&["admin", "verify", "--region", "1", "--etcd", &url]);
    assert!(ok, "{out}");
}

/// A backup that is alive (its lease holds) but cannot be reached by its primary: writes wait
/// for it for the ack timeout and fail unanswered, the primary reports it, the master removes
/// it from the group, and writes are answered again without it.
#[test]
fn a_silent_backup_is_reported_and_removed() {
    let (dir, _etcd, url) = new_cluster(1, 2, false);
    let extra = ["--ack-timeout-ms", "1000"];
    let nodes = [
        etcd_common::start_node_with(dir.path(), &url, "n1", Some(CUT_UID), &extra),
        etcd_common::start_node_with(dir.path(), &url, "n2", None, &extra),
    ];
    let s = wait_settled(&url, 2, Duration::from_secs(60));
    assert_eq!(s["regions"][0]["primary"], "n1", "{s}");
    let c = cluster_client(&[nodes[0].native.clone()], Duration::from_secs(10));
    c.put("k", "before").unwrap();
    // Only n1's stream to n2 is cut: n2 keeps its lease.
    let _cut = Cut::new(vec![port(&nodes[1].replication)]);
    let t = Instant::now();
    let mut failed = 0;
    let answered = loop {
        match c.put("k", "during") {
            Ok(()) => break t.elapsed(),
            Err(_) => failed += 1,
        }
        assert!(t.elapsed() < Duration::from_secs(30), "writes were not answered again without the silent backup");
    };
    assert!(failed > 0, "a write was answered although its backup could not have it");
    let s = status(&url);
    assert!(s["nodes"].as_array().unwrap().iter().all(|n| n["alive"] == true), "n2 kept its lease: {s}");
    eprintln!("writes answered again {answered:?} after the cut ({failed} failed unanswered)");
}
