//! The etcd client (`halyard_control::etcd`) and the control plane against a real etcd (the
//! `etcd` binary on PATH, Debian's `etcd-server`; any 3.4 or later): reads by prefix, puts bound
//! to leases, transactions comparing create revision, mod revision and value, leases granted,
//! renewed over the keep-alive stream, asked about and revoked, an election handed over when
//! the leader's lease goes; then a node's session and an elected master assigning a region.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    missing_docs,
    reason = "test code: a failure stops where it happened"
)]

use halyard_control::etcd::{Client, Compare, CompareOp, DeleteOptions, GetOptions, PutOptions, Txn, TxnOp};
use halyard_control::{Layout, NodeRecord, Session, View};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A single-member etcd in a temporary directory, killed on drop.
struct Etcd {
    child: Child,
    url: String,
    _dir: tempfile::TempDir,
}

impl Drop for Etcd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// etcd on free ports, answering; tried again on other ports if it exits at start (a port it
/// was given was taken in the meantime).
async fn start_etcd() -> (Etcd, Client) {
    for _ in 0..3 {
        let dir = tempfile::tempdir().unwrap();
        let (client, peer) = (free_port(), free_port());
        let url = format!("http://127.0.0.1:{client}");
        let peer_url = format!("http://127.0.0.1:{peer}");
        let child = Command::new("etcd")
            .args(["--logger", "zap", "--log-level", "error", "--data-dir"])
            .arg(dir.path().join("etcd"))
            .args(["--listen-client-urls", &url, "--advertise-client-urls", &url])
            .args(["--listen-peer-urls", &peer_url, "--initial-advertise-peer-urls", &peer_url])
            .args(["--initial-cluster", &format!("default={peer_url}")])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("etcd (apt-get install etcd-server; scripts/test.sh installs it)");
        let mut etcd = Etcd { child, url, _dir: dir };
        let mut c = halyard_control::session::connect(std::slice::from_ref(&etcd.url)).await.unwrap();
        let t0 = Instant::now();
        loop {
            if c.get("ping", None).await.is_ok() {
                return (etcd, c);
            }
            if let Ok(Some(status)) = etcd.child.try_wait() {
                eprintln!("etcd exited at start ({status}); trying other ports");
                break;
            }
            assert!(t0.elapsed() < Duration::from_secs(30), "etcd did not come up");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    panic!("etcd did not start on three pairs of free ports");
}

fn keys(r: &halyard_control::etcd::RangeResponse) -> Vec<String> {
    r.kvs().iter().map(|kv| String::from_utf8_lossy(kv.key()).into_owned()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kv_prefix_reads_and_transactions() {
    let (_etcd, mut c) = start_etcd().await;
    for k in ["p/a", "p/b", "p0", "o"] {
        c.put(k, k.as_bytes(), None).await.unwrap();
    }
    let all = c.get("p/", Some(GetOptions::new().with_prefix())).await.unwrap();
    assert_eq!(keys(&all), ["p/a", "p/b"]);
    let rev = all.header().unwrap().revision();
    assert!(rev >= 5, "revision {rev}");
    let b = c.get("p/b", None).await.unwrap();
    let kv = &b.kvs()[0];
    assert_eq!((kv.value(), kv.create_revision(), kv.mod_revision()), (&b"p/b"[..], kv.mod_revision(), rev - 2));
    assert_eq!(c.get("p/", Some(GetOptions::new().with_prefix().with_limit(1))).await.unwrap().kvs().len(), 1);

    // Create only if absent: once.
    let create = |v: &str| {
        Txn::new()
            .when([Compare::create_revision("t/k", CompareOp::Equal, 0)])
            .and_then([TxnOp::put("t/k", v.to_string(), None)])
            .or_else([TxnOp::get("t/k", None)])
    };
    assert!(c.txn(create("1")).await.unwrap().succeeded());
    let second = c.txn(create("2")).await.unwrap();
    assert!(!second.succeeded());
    assert_eq!(second.responses.len(), 1, "the or_else read ran");
    let kv = c.get("t/k", None).await.unwrap().kvs()[0].clone();
    assert_eq!(kv.value(), b"1");

    // Compare-and-swap on the mod revision and on the value; a stale revision changes nothing.
    let cas = |rev: i64, v: &str| {
        Txn::new()
            .when(vec![
                Compare::mod_revision("t/k", CompareOp::Equal, rev),
                Compare::value("t/k", CompareOp::Equal, "1"),
            ])
            .and_then(vec![
                TxnOp::put("t/k", v.to_string(), None),
                TxnOp::delete("p/", Some(DeleteOptions::new().with_prefix())),
            ])
    };
    assert!(!c.txn(cas(kv.mod_revision() - 1, "x")).await.unwrap().succeeded());
    assert!(c.txn(cas(kv.mod_revision(), "3")).await.unwrap().succeeded());
    assert!(!c.txn(cas(kv.mod_revision(), "4")).await.unwrap().succeeded(), "the value and revision moved on");
    assert_eq!(c.get("t/k", None).await.unwrap().kvs()[0].value(), b"3");
    assert!(c.get("p/", Some(GetOptions::new().with_prefix())).await.unwrap().kvs().is_empty());
    assert_eq!(keys(&c.get("o", None).await.unwrap()), ["o"]);
    let gone = c.delete("p", Some(DeleteOptions::new().with_prefix())).await.unwrap();
    assert_eq!(gone.deleted, 1, "p0");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_keep_alive_and_revoke() {
    let (_etcd, mut c) = start_etcd().await;
    let lease = c.lease_grant(5).await.unwrap();
    let id = lease.id();
    assert!(id != 0 && lease.ttl() == 5);
    c.put("l/k", "v", Some(PutOptions::new().with_lease(id))).await.unwrap();
    assert_eq!(c.get("l/k", None).await.unwrap().kvs()[0].lease(), id);
    let ttl = c.lease_time_to_live(id).await.unwrap().ttl();
    assert!((1..=5).contains(&ttl), "ttl {ttl}");

    let (mut keeper, mut stream) = c.lease_keep_alive(id).await.unwrap();
    assert_eq!(keeper.id(), id);
    for _ in 0..3 {
        keeper.keep_alive().await.unwrap();
        let r = tokio::time::timeout(Duration::from_secs(5), stream.message()).await.unwrap().unwrap().unwrap();
        assert_eq!((r.id, r.ttl()), (id, 5));
    }

    c.lease_revoke(id).await.unwrap();
    assert!(c.get("l/k", None).await.unwrap().kvs().is_empty(), "the lease's key went with it");
    // The open stream now reports the lease gone (TTL 0 or less), a new one is refused, and
    // time-to-live says -1 (or fails with "not found", as Session::expired accepts).
    keeper.keep_alive().await.unwrap();
    let r = tokio::time::timeout(Duration::from_secs(5), stream.message()).await.unwrap().unwrap().unwrap();
    assert!(r.ttl() <= 0, "ttl {} after revoke", r.ttl());
    assert!(c.lease_keep_alive(id).await.is_err());
    match c.lease_time_to_live(id).await {
        Ok(r) => assert!(r.ttl() <= 0, "ttl {}", r.ttl()),
        Err(e) => assert!(e.to_string().contains("not found"), "{e}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn election_passes_to_the_next_candidate_when_the_leader_lease_goes() {
    let (_etcd, mut c) = start_etcd().await;
    let (l1, l2) = (c.lease_grant(10).await.unwrap().id(), c.lease_grant(10).await.unwrap().id());
    let first = c.campaign("e/master", "n1", l1).await.unwrap().take_leader().unwrap();
    // The leader key is the candidate's key: its create revision is the term.
    let k = c.get(first.key(), None).await.unwrap();
    assert_eq!((k.kvs()[0].create_revision(), k.kvs()[0].value()), (first.rev(), &b"n1"[..]));
    assert_eq!(c.leader("e/master").await.unwrap().kv.unwrap().value, b"n1");

    let mut c2 = c.clone();
    let second = tokio::spawn(async move { c2.campaign("e/master", "n2", l2).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!second.is_finished(), "n2 must wait while n1 leads");
    c.lease_revoke(l1).await.unwrap();
    let won = tokio::time::timeout(Duration::from_secs(10), second).await.unwrap().unwrap().unwrap();
    let leader = won.clone().take_leader().unwrap();
    assert!(leader.rev() > first.rev());
    // A transaction fenced on the old term does nothing; on the new one it runs.
    let fenced = |l: &halyard_control::etcd::LeaderKey| {
        Txn::new()
            .when([Compare::create_revision(l.key().to_vec(), CompareOp::Equal, l.rev())])
            .and_then([TxnOp::put("e/map", "x", None)])
    };
    assert!(!c.txn(fenced(&first)).await.unwrap().succeeded());
    assert!(c.txn(fenced(&leader)).await.unwrap().succeeded());
    assert_eq!(c.leader("e/master").await.unwrap().kv.unwrap().value, b"n2");
    c.resign(leader).await.unwrap();
    assert!(c.leader("e/master").await.is_err(), "no leader after the resignation");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_registers_and_the_elected_master_assigns_the_region() {
    let (_etcd, mut c) = start_etcd().await;
    let layout = Layout::new("t");
    let config = halyard_control::layout::ClusterConfig {
        replicas: 1,
        format: halyard_control::layout::FORMAT,
        replace_after_secs: 60,
        balance: true,
        merge: true,
    };
    halyard_control::admin::init(&mut c, &layout, &config, &[]).await.unwrap();
    assert!(halyard_control::admin::init(&mut c, &layout, &config, &[]).await.is_err(), "init runs once");
    let record = NodeRecord { name: "n1".into(), replication: "127.0.0.1:1".into(), ..Default::default() };
    let session = Session::start(c.clone(), layout.clone(), record, Duration::from_secs(3)).await.unwrap();
    let lease = session.holds().expect("a fresh lease holds");
    let v = View::load(&mut c, &layout).await.unwrap();
    assert_eq!(v.live.get("n1").map(|n| n.lease), Some(lease));
    assert!(v.members.contains_key("n1"));

    tokio::spawn(halyard_control::master::Master::run(session.clone(), Default::default()));
    let t0 = Instant::now();
    loop {
        let v = View::load(&mut c, &layout).await.unwrap();
        let r = &v.regions[&1].0.spec;
        if v.master() == Some("n1") && r.primary == "n1" {
            assert_eq!(r.leases.get("n1"), Some(&lease));
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(20), "no master assigned the region: {v:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Renewals keep the lease past its TTL.
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(session.holds(), Some(lease));
    let status = halyard_control::admin::status(&mut c, &layout).await.unwrap();
    assert_eq!((status.master.as_deref(), status.nodes.len(), status.regions[0].primary_alive), (Some("n1"), 1, true));
}
