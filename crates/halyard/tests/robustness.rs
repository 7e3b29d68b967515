//! Linearizability under faults, in the manner of etcd's robustness tests: a real etcd and three
//! real `halyard serve --etcd` nodes; a few sequential clients (region-aware native clients, and
//! Redis clients each talking to one node's Redis port, which forwards to the primary; one of
//! the native clients keeps talking to the node that led at the start, a stale map) put and
//! get a small set of keys — the Redis clients also add to counters (INCRBY) and push, pop and
//! read lists (RPUSH, LPOP, LRANGE), where a push lost or applied twice, or a value popped
//! twice, is a violation — and record every operation with its call and return time;
//! one fault per run (SIGKILL of the keys' primary, SIGKILL of the master, SIGSTOP of the
//! primary for longer than its lease, the primary cut off from etcd and the other nodes by
//! `iptables` for longer than its lease, then healed); afterwards every key is read once more. The history goes
//! to the Porcupine checker (`tools/lincheck`, run through `scripts/lincheck.sh`): a write whose
//! answer never came may have taken effect or not; every other operation took effect once,
//! between its call and its return. A run that is not linearizable keeps its history and the
//! checker's HTML visualisation and names them.
//!
//! The cluster also changes shape on purpose in some runs: planned handoffs, a SIGTERM of the
//! primary's node (it hands off and leaves) and its restart, a move of the primary's copy onto
//! a fourth node (plain, with the target killed during its copy, with the source killed, with
//! the master killed, with the target cut off by iptables during a slowed copy), a handoff
//! asked while the primary is paused past its lease, a split of the region between the keys
//! followed at once by a handoff of the new region, a split and merge followed by a kill, and a
//! drain of the primary's node.
//!
//! Four runs keep the nodes' stores on four storage nodes (`--storage remote`): a storage node
//! SIGKILLed, one paused past the time a node has to answer, one SIGKILLed while the primary's
//! copy moves, one cut off by iptables.
//!
//! `HALYARD_ROBUSTNESS_RUNS` (default 19: one run per fault), `HALYARD_ROBUSTNESS_FIRST` (the
//! index of the first run's fault in that list) and `HALYARD_ROBUSTNESS_SEED`
//! choose how many runs and the first seed; `scripts/robustness.sh --runs N` prints the table.

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

use etcd_common::{cluster_client, new_cluster, port, start_node_with, status, wait_settled, Cut, Node, CUT_UID};

use std::fmt::Write as _;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const KEYS: u64 = 4;
/// Native clients; as many Redis clients again, on keys of their own (the Redis key space is
/// apart from the native one).
const CLIENTS: usize = 4;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fault {
    KillPrimary,
    KillMaster,
    PausePrimary,
    PartitionPrimary,
    /// Planned handoffs (`halyard admin transfer`) from backup to backup.
    Handoffs,
    /// SIGTERM of the primary's node (it hands off and leaves), then a restart.
    TermPrimary,
    /// `halyard admin move` of the primary's copy onto a fourth node.
    MovePrimary,
    /// `halyard cluster drain` of the primary's node (a fourth node takes its copy, a backup
    /// its primary role).
    DrainPrimary,
    /// A handoff asked while the primary is SIGSTOPped past its lease.
    PauseDuringHandoff,
    /// SIGKILL of the target of a move of the primary's copy, at a step of the move the seed
    /// picks (0–600 ms after the request).
    KillMoveTarget,
    /// SIGKILL of the primary while its copy moves to a fourth node (likewise).
    KillMoveSource,
    /// SIGKILL of the master node while the primary's copy moves to a fourth node (likewise).
    KillMasterDuringMove,
    /// The move's target cut off by iptables for 3 s during its copy (slowed to 1 MiB/s over a
    /// few MiB of preloaded data): it reaches nobody and nobody reaches it.
    PartitionMoveTarget,
    /// `halyard admin split` of the region between the native keys (the Redis keys go right),
    /// then at once a handoff of the new region to a backup.
    SplitThenHandoff,
    /// `halyard admin split` of the region, at once `halyard admin merge` of its halves (the
    /// primary compacts them clean first, the backups join their copies and catch up), then a
    /// SIGKILL of the primary 300–800 ms later (the seed picks).
    SplitMergeThenKill,
    /// The nodes keep their stores on four storage nodes (`--storage remote`, two data
    /// fragments and parity a segment); one storage node is SIGKILLed.
    KillStorageNode,
    /// Likewise, one storage node SIGSTOPped for 4 s (past the 2 s a node has to answer), then
    /// let go.
    PauseStorageNode,
    /// Likewise, the primary's copy moves onto a fourth node, and a storage node is SIGKILLed
    /// during its copy (0–600 ms after the request, the seed picks).
    KillStorageDuringMove,
    /// Likewise, every packet to one storage node dropped by iptables for 4 s, then healed.
    PartitionStorageNode,
}

const FAULTS: [Fault; 19] = [
    Fault::KillPrimary,
    Fault::KillMaster,
    Fault::PausePrimary,
    Fault::PartitionPrimary,
    Fault::Handoffs,
    Fault::TermPrimary,
    Fault::MovePrimary,
    Fault::PauseDuringHandoff,
    Fault::KillMoveTarget,
    Fault::KillMoveSource,
    Fault::KillMasterDuringMove,
    Fault::PartitionMoveTarget,
    Fault::SplitThenHandoff,
    Fault::SplitMergeThenKill,
    Fault::DrainPrimary,
    Fault::KillStorageNode,
    Fault::PauseStorageNode,
    Fault::KillStorageDuringMove,
    Fault::PartitionStorageNode,
];

/// What an operation did, as the checker names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Put,
    Get,
    /// INCRBY.
    Incr,
    /// RPUSH of one value.
    Push,
    /// LPOP of one value.
    Pop,
    /// LRANGE 0 -1.
    Range,
}

/// One recorded operation (a line of the checker's input).
#[derive(Clone, Debug)]
struct Op {
    client: usize,
    kind: Kind,
    key: String,
    /// put, push: the value written; incr: the amount added.
    value: Option<String>,
    /// get, pop: the value read (None: absent); incr: the new value; push: the new length;
    /// range: the values, head first.
    out: Vec<String>,
    call: u128,
    /// None: no answer came (a write that may or may not have taken effect).
    ret: Option<u128>,
}

impl Kind {
    fn writes(self) -> bool {
        matches!(self, Kind::Put | Kind::Incr | Kind::Push | Kind::Pop)
    }
}

impl Op {
    fn new(client: usize, kind: Kind, key: String, value: Option<String>, call: u128) -> Op {
        Op { client, kind, key, value, out: Vec::new(), call, ret: None }
    }

    /// The operation answered at `ret` with `out`.
    fn answered(self, out: Vec<String>, ret: u128) -> Op {
        Op { out, ret: Some(ret), ..self }
    }

    /// A get's or pop's value.
    fn read(&self) -> Option<&String> {
        self.out.first()
    }

    fn json(&self) -> String {
        let q = |v: &String| format!("\"{v}\"");
        let kind = match self.kind {
            Kind::Put => "put",
            Kind::Get => "get",
            Kind::Incr => "incr",
            Kind::Push => "rpush",
            Kind::Pop => "lpop",
            Kind::Range => "lrange",
        };
        let mut j = format!(r#"{{"client":{},"kind":"{kind}","key":"{}""#, self.client, self.key);
        if let Some(v) = &self.value {
            write!(j, r#","value":{}"#, q(v)).unwrap();
        }
        if self.ret.is_some() && self.kind != Kind::Put {
            let out = match self.kind {
                Kind::Range => format!("[{}]", self.out.iter().map(q).collect::<Vec<_>>().join(",")),
                _ => self.read().map_or("null".to_string(), q),
            };
            write!(j, r#","output":{out}"#).unwrap();
        }
        let ret = self.ret.map_or("null".to_string(), |r| r.to_string());
        write!(j, r#","call":{},"return":{ret}}}"#, self.call).unwrap();
        j
    }
}

/// A small seeded generator (xorshift64*): the run's operations follow from its seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

fn key(k: u64) -> String {
    format!("rk{k}")
}

/// What a native client does: a region-aware one follows the map; a stale one keeps talking to
/// the node that led when it started, whatever the map says since (the node must refuse what it
/// no longer leads).
trait Kv {
    fn put(&self, k: &str, v: &str) -> halyard_client::Result<()>;
    fn get(&self, k: &str) -> halyard_client::Result<Option<Vec<u8>>>;
}

impl Kv for halyard_client::blocking::ClusterClient {
    fn put(&self, k: &str, v: &str) -> halyard_client::Result<()> {
        halyard_client::blocking::ClusterClient::put(self, k, v)
    }
    fn get(&self, k: &str) -> halyard_client::Result<Option<Vec<u8>>> {
        halyard_client::blocking::ClusterClient::get(self, k)
    }
}

impl Kv for halyard_client::blocking::Client {
    fn put(&self, k: &str, v: &str) -> halyard_client::Result<()> {
        halyard_client::blocking::Client::put(self, k, v)
    }
    fn get(&self, k: &str) -> halyard_client::Result<Option<Vec<u8>>> {
        halyard_client::blocking::Client::get(self, k)
    }
}

/// A sequential client: puts and gets until `stop`, recording each. With `stale`, it talks to
/// `addrs[0]` only, never following the map.
fn client(id: usize, seed: u64, addrs: Vec<String>, t0: Instant, stop: Arc<AtomicBool>, out: Arc<Mutex<Vec<Op>>>) {
    let stale = id == 0;
    let c: Box<dyn Kv> = match stale {
        false => Box::new(cluster_client(&addrs, Duration::from_secs(1))),
        true => {
            let opts = halyard_client::ClientOptions { timeout: Duration::from_secs(1), ..Default::default() };
            match halyard_client::blocking::Client::connect(addrs[0].as_str(), opts) {
                Ok(c) => Box::new(c),
                Err(_) => return,
            }
        }
    };
    let mut rng = Rng(seed.wrapping_mul(31).wrapping_add(id as u64 + 1) | 1);
    let mut n = 0;
    while !stop.load(Ordering::Relaxed) {
        let k = key(rng.next() % KEYS);
        let put = rng.next() & 1 == 0;
        let call = t0.elapsed().as_nanos();
        let op = if put {
            n += 1;
            let v = format!("c{id}-{n}");
            let op = Op::new(id, Kind::Put, k.clone(), Some(v.clone()), call);
            match c.put(&k, &v) {
                Ok(()) => Some(op.answered(Vec::new(), t0.elapsed().as_nanos())),
                // Refused before it ran: not part of the history.
                Err(e) if e.code().is_some() && !e.outcome_unknown() => None,
                Err(_) => Some(op),
            }
        } else {
            match c.get(&k) {
                Ok(v) => {
                    let out = v.map(|v| String::from_utf8_lossy(&v).into_owned()).into_iter().collect();
                    Some(Op::new(id, Kind::Get, k, None, call).answered(out, t0.elapsed().as_nanos()))
                }
                Err(_) => None,
            }
        };
        match op {
            // The stale client's node is gone (killed, cut off): it has nothing more to show.
            Some(op) if stale && op.ret.is_none() => {
                out.lock().unwrap().push(op);
                break;
            }
            Some(op) => out.lock().unwrap().push(op),
            None => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

fn resp_key(k: u64) -> String {
    format!("redis:rk{k}")
}

fn counter_key(k: u64) -> String {
    format!("redis:n{k}")
}

fn list_key(k: u64) -> String {
    format!("redis:l{k}")
}

/// A Redis reply as the robustness clients read it.
enum Resp {
    /// A status or an error line, `+` or `-` kept.
    Line(String),
    Int(i64),
    /// A bulk string (None: the nil bulk).
    Bulk(Option<String>),
    Array(Vec<String>),
}

/// One blocking Redis connection; None once it failed (the caller reconnects elsewhere).
struct RespConn(std::io::BufReader<std::net::TcpStream>);

impl RespConn {
    fn open(addr: &str) -> Option<RespConn> {
        let a: std::net::SocketAddr = addr.parse().ok()?;
        let s = std::net::TcpStream::connect_timeout(&a, Duration::from_millis(500)).ok()?;
        // Past the forwarding node's retries (10 s) an answer is not coming.
        s.set_read_timeout(Some(Duration::from_secs(12))).ok()?;
        Some(RespConn(std::io::BufReader::new(s)))
    }

    /// Sends a command and reads its reply (None: the connection failed).
    fn call(&mut self, args: &[&str]) -> Option<Resp> {
        use std::io::Write;
        let mut req = format!("*{}\r\n", args.len());
        for a in args {
            write!(req, "${}\r\n{a}\r\n", a.len()).ok()?;
        }
        self.0.get_mut().write_all(req.as_bytes()).ok()?;
        let line = self.line()?;
        if let Some(n) = line.strip_prefix('*') {
            let n: i64 = n.parse().ok()?;
            let items = (0..n.max(0)).map(|_| self.line().and_then(|l| self.bulk(&l)?)).collect::<Option<_>>()?;
            return Some(Resp::Array(items));
        }
        if let Some(n) = line.strip_prefix(':') {
            return Some(Resp::Int(n.parse().ok()?));
        }
        if line.starts_with('$') {
            return Some(Resp::Bulk(self.bulk(&line)?));
        }
        Some(Resp::Line(line))
    }

    fn line(&mut self) -> Option<String> {
        use std::io::BufRead;
        let mut line = String::new();
        match self.0.read_line(&mut line).ok()? {
            0 => None,
            _ => Some(line.trim_end().to_string()),
        }
    }

    /// The body of the bulk string whose header is `line` (None inside: the nil bulk).
    fn bulk(&mut self, line: &str) -> Option<Option<String>> {
        use std::io::Read;
        let n: i64 = line.strip_prefix('$')?.parse().ok()?;
        let Ok(n) = usize::try_from(n) else { return Some(None) };
        let mut b = vec![0u8; n + 2];
        self.0.read_exact(&mut b).ok()?;
        Some(Some(String::from_utf8_lossy(&b[..n]).into_owned()))
    }
}

/// One seeded Redis operation on a register (SET, GET), a counter (INCRBY, GET) or a list
/// (RPUSH, LPOP, LRANGE); `n` numbers the values a client writes.
fn resp_op(id: usize, rng: &mut Rng, n: &mut u64, call: u128) -> (Op, Vec<String>) {
    let (k, pick) = (rng.next() % KEYS, rng.next() % 6);
    let value = |n: &mut u64| {
        *n += 1;
        format!("c{id}-{n}")
    };
    let (op, args) = match rng.next() % 3 {
        0 if pick < 3 => {
            let v = value(n);
            (Op::new(id, Kind::Put, resp_key(k), Some(v.clone()), call), vec!["SET".into(), resp_key(k), v])
        }
        0 => (Op::new(id, Kind::Get, resp_key(k), None, call), vec!["GET".into(), resp_key(k)]),
        1 if pick < 4 => {
            let by = (1 + rng.next() % 5).to_string();
            (Op::new(id, Kind::Incr, counter_key(k), Some(by.clone()), call), vec!["INCRBY".into(), counter_key(k), by])
        }
        1 => (Op::new(id, Kind::Get, counter_key(k), None, call), vec!["GET".into(), counter_key(k)]),
        _ if pick < 3 => {
            let v = value(n);
            (Op::new(id, Kind::Push, list_key(k), Some(v.clone()), call), vec!["RPUSH".into(), list_key(k), v])
        }
        _ if pick < 5 => (Op::new(id, Kind::Pop, list_key(k), None, call), vec!["LPOP".into(), list_key(k)]),
        _ => (
            Op::new(id, Kind::Range, list_key(k), None, call),
            vec!["LRANGE".into(), list_key(k), "0".into(), "-1".into()],
        ),
    };
    (op, args)
}

/// The operation `op` once `reply` came at `ret`: None when it was refused before it ran (an
/// error reply: TRYAGAIN, NOREPLICAS) or is a read without an answer; unanswered when no reply
/// came (the node closed the connection or went away: outcome unknown).
fn resp_outcome(op: Op, reply: Option<Resp>, ret: u128) -> Option<Op> {
    let reads = matches!(op.kind, Kind::Get | Kind::Range);
    let out = match (op.kind, reply) {
        (_, None) if reads => return None,
        (_, None) => return Some(op),
        (Kind::Put, Some(Resp::Line(l))) if l == "+OK" => Vec::new(),
        (Kind::Get | Kind::Pop, Some(Resp::Bulk(v))) => v.into_iter().collect(),
        (Kind::Incr | Kind::Push, Some(Resp::Int(n))) => vec![n.to_string()],
        (Kind::Range, Some(Resp::Array(items))) => items,
        (_, Some(Resp::Line(l))) if l.starts_with('-') => return None,
        (kind, Some(_)) => panic!("{kind:?} on {}: a reply of the wrong type", op.key),
    };
    Some(op.answered(out, ret))
}

/// A sequential Redis client: registers, counters and lists until `stop`, through one node's
/// Redis port (the next node's after a failed connection), recording each.
fn resp_client(id: usize, seed: u64, addrs: Vec<String>, t0: Instant, stop: Arc<AtomicBool>, out: Arc<Mutex<Vec<Op>>>) {
    let mut rng = Rng(seed.wrapping_mul(37).wrapping_add(id as u64 + 1) | 1);
    let (mut n, mut at) = (0, id);
    let mut conn: Option<RespConn> = None;
    while !stop.load(Ordering::Relaxed) {
        let Some(c) = conn.as_mut() else {
            at += 1;
            conn = RespConn::open(&addrs[at % addrs.len()]);
            std::thread::sleep(Duration::from_millis(20));
            continue;
        };
        let (op, args) = resp_op(id, &mut rng, &mut n, t0.elapsed().as_nanos());
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let reply = c.call(&args);
        let reply = resp_outcome(op, reply, t0.elapsed().as_nanos());
        if reply.as_ref().is_none_or(|o| o.ret.is_none()) {
            conn = None;
        }
        match reply {
            Some(op) => out.lock().unwrap().push(op),
            None => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

impl Fault {
    /// Faults whose processing nodes keep their stores on storage nodes.
    fn remote(self) -> bool {
        matches!(
            self,
            Fault::KillStorageNode
                | Fault::PauseStorageNode
                | Fault::KillStorageDuringMove
                | Fault::PartitionStorageNode
        )
    }
}

/// Four storage nodes registered in etcd (`s1`..`s4`); a processing node under
/// `--storage remote` finds them there.
fn storage_nodes(root: &Path, url: &str) -> Vec<Node> {
    let nodes: Vec<Node> =
        (1..=4).map(|i| start_node_with(root, url, &format!("s{i}"), None, &["--role", "storage"])).collect();
    etcd_common::wait_storage_nodes(url, nodes.len());
    nodes
}

/// `halyard admin move` of region 1's copy on `from` to n4, on a thread of its own.
fn move_to_n4(from: &str, url: &str) -> std::thread::JoinHandle<(bool, String)> {
    let (from, url) = (from.to_string(), url.to_string());
    std::thread::spawn(move || {
        etcd_common::halyard(&["admin", "move", "--region", "1", "--from", &from, "--to", "n4", "--etcd", &url])
    })
}

/// Injects `fault` (on node `v` where it has one victim; on storage node `s1` for the storage
/// faults) while the clients run.
fn inject(fault: Fault, seed: u64, nodes: &mut [Node], stores: &mut [Node], v: usize, url: &str) {
    let transfer = |to: &str| etcd_common::halyard(&["admin", "transfer", "--region", "1", "--to", to, "--etcd", url]);
    match fault {
        Fault::KillPrimary | Fault::KillMaster => {
            nodes[v].proc.kill9();
            std::thread::sleep(Duration::from_millis(5000));
        }
        Fault::PausePrimary => {
            nodes[v].signal("STOP"); // longer than the 2 s lease
            std::thread::sleep(Duration::from_millis(4000));
            nodes[v].signal("CONT"); // it must find its lease gone and serve nothing
            std::thread::sleep(Duration::from_millis(2000));
        }
        Fault::PartitionPrimary => {
            let mut ports = vec![port(url)];
            for n in nodes.iter().filter(|n| n.name != nodes[v].name) {
                ports.extend([port(&n.native), port(&n.replication)]);
            }
            let cut = Cut::new(ports);
            std::thread::sleep(Duration::from_millis(5000)); // past its 2 s lease: another leads
            drop(cut);
            std::thread::sleep(Duration::from_millis(2000));
        }
        Fault::SplitThenHandoff => {
            let (ok, out) = etcd_common::halyard(&["admin", "split", "--region", "1", "--at", "rk2", "--etcd", url]);
            assert!(ok, "split: {out}");
            let s = status(url);
            let right = s["regions"].as_array().unwrap().iter().find(|r| r["start"] == "rk2").unwrap().clone();
            let (id, to) = (right["id"].to_string(), right["backups"][0].as_str().unwrap().to_string());
            let (ok, out) = etcd_common::halyard(&["admin", "transfer", "--region", &id, "--to", &to, "--etcd", url]);
            assert!(ok, "handoff of the new region {id} to {to}: {out}");
            std::thread::sleep(Duration::from_millis(2000));
        }
        Fault::SplitMergeThenKill => {
            let (ok, out) = etcd_common::halyard(&["admin", "split", "--region", "1", "--at", "rk2", "--etcd", url]);
            assert!(ok, "split: {out}");
            let (ok, out) = etcd_common::halyard(&["admin", "merge", "--region", "1", "--etcd", url]);
            assert!(ok, "merge: {out}");
            std::thread::sleep(Duration::from_millis(300 + seed % 500));
            nodes[v].proc.kill9();
            std::thread::sleep(Duration::from_millis(5000));
        }
        Fault::Handoffs => {
            for i in 0..4 {
                let s = status(url);
                let b = s["regions"][0]["backups"][i % 2].as_str().unwrap().to_string();
                let (ok, out) = transfer(&b);
                assert!(ok, "handoff {i} to {b}: {out}");
                std::thread::sleep(Duration::from_millis(700));
            }
        }
        Fault::TermPrimary => {
            nodes[v].leave(Duration::from_secs(40));
            std::thread::sleep(Duration::from_millis(1000));
            nodes[v].restart();
            std::thread::sleep(Duration::from_millis(3000));
        }
        Fault::MovePrimary => {
            let from = nodes[v].name.clone();
            let (ok, out) =
                etcd_common::halyard(&["admin", "move", "--region", "1", "--from", &from, "--to", "n4", "--etcd", url]);
            assert!(ok, "move {from} -> n4: {out}");
            std::thread::sleep(Duration::from_millis(2000));
        }
        Fault::DrainPrimary => {
            let node = nodes[v].name.clone();
            let (ok, out) = etcd_common::halyard(&["cluster", "drain", &node, "--etcd", url]);
            assert!(ok, "drain {node}: {out}");
            let s = status(url);
            assert_eq!(etcd_common::copies(&s, &node), 0, "{node} still holds copies after its drain: {s}");
            std::thread::sleep(Duration::from_millis(2000));
        }
        Fault::KillMoveTarget | Fault::KillMoveSource | Fault::KillMasterDuringMove => {
            let from = status(url)["regions"][0]["primary"].as_str().unwrap().to_string();
            let t = move_to_n4(&from, url);
            // A step of the move chosen by the seed: before, during or after the copy.
            std::thread::sleep(Duration::from_millis(seed.wrapping_mul(7919) % 600));
            // The source is the victim `v` of KillMoveSource, the master that of KillMasterDuringMove.
            let victim = match fault {
                Fault::KillMoveTarget => nodes.iter().position(|n| n.name == "n4").unwrap(),
                _ => v,
            };
            nodes[victim].proc.kill9();
            // The move ends one way or the other (the master drops it once a party is gone).
            let _ = t.join();
            std::thread::sleep(Duration::from_millis(3000));
        }
        Fault::PartitionMoveTarget => {
            let from = nodes[v].name.clone();
            let t = move_to_n4(&from, url);
            std::thread::sleep(Duration::from_millis(800 + seed.wrapping_mul(7919) % 800));
            let n4 = nodes.iter().find(|n| n.name == "n4").unwrap();
            let mut out = vec![port(url)];
            for n in nodes.iter().filter(|n| n.name != "n4") {
                out.extend([port(&n.native), port(&n.replication)]);
            }
            let cuts = (Cut::new(out), Cut::to(vec![port(&n4.native), port(&n4.replication)]));
            std::thread::sleep(Duration::from_millis(3000));
            drop(cuts);
            // The move finishes (the copy resumes) or is given up: either way the history holds.
            let _ = t.join();
            std::thread::sleep(Duration::from_millis(2000));
        }
        Fault::KillStorageNode => {
            stores[0].proc.kill9();
            std::thread::sleep(Duration::from_millis(5000));
        }
        Fault::PauseStorageNode => {
            stores[0].signal("STOP");
            std::thread::sleep(Duration::from_millis(4000));
            stores[0].signal("CONT");
            std::thread::sleep(Duration::from_millis(2000));
        }
        Fault::PartitionStorageNode => {
            let cut = Cut::to(vec![port(&stores[0].native)]);
            std::thread::sleep(Duration::from_millis(4000));
            drop(cut);
            std::thread::sleep(Duration::from_millis(2000));
        }
        Fault::KillStorageDuringMove => {
            let from = nodes[v].name.clone();
            let t = move_to_n4(&from, url);
            std::thread::sleep(Duration::from_millis(seed.wrapping_mul(7919) % 600));
            stores[0].proc.kill9();
            let (ok, out) = t.join().unwrap();
            assert!(ok, "move {} -> n4 with a storage node lost: {out}", nodes[v].name);
            std::thread::sleep(Duration::from_millis(2000));
        }
        Fault::PauseDuringHandoff => {
            let b = status(url)["regions"][0]["backups"][0].as_str().unwrap().to_string();
            let url2 = url.to_string();
            let t = std::thread::spawn(move || {
                etcd_common::halyard(&["admin", "transfer", "--region", "1", "--to", &b, "--etcd", &url2])
            });
            std::thread::sleep(Duration::from_millis(30));
            nodes[v].signal("STOP");
            std::thread::sleep(Duration::from_millis(4000));
            nodes[v].signal("CONT");
            // Handed off, rolled back or failed over: any is fine, as long as the history is.
            let _ = t.join();
            std::thread::sleep(Duration::from_millis(2000));
        }
    }
}

/// Writes about `bytes` of 4 KiB pairs under keys the clients never use, so that a copy of the
/// region takes a while.
fn preload(nodes: &[Node], bytes: usize) {
    let addrs: Vec<String> = nodes.iter().map(|n| n.native.clone()).collect();
    let c = cluster_client(&addrs, Duration::from_secs(10));
    for b in 0..bytes / (64 * 4096) {
        let mut batch = halyard_client::Batch::new();
        for j in 0..64 {
            batch.put(format!("preload{:07}", b * 64 + j).into_bytes(), vec![b'p'; 4096]);
        }
        c.write_batch(&batch).unwrap();
    }
}

/// What one run found.
struct Outcome {
    ops: usize,
    acked_puts: usize,
    unknown_puts: usize,
    lost: usize,
    verdict: String,
}

/// Acknowledged puts whose value the final read of their key cannot explain: the final value
/// was written by a put that had returned before the lost one was even called (or the key is
/// absent), so the acknowledged put was undone.
fn lost_writes(ops: &[Op], finals: &[Op]) -> usize {
    let mut lost = 0;
    for f in finals {
        // When the put of the final value had certainly ended (0 for an absent key): every
        // acknowledged put called after that must have overwritten it.
        let written = match f.read() {
            None => 0,
            Some(v) => {
                match ops.iter().find(|o| o.kind == Kind::Put && o.key == f.key && o.value.as_ref() == Some(v)) {
                    Some(w) => w.ret.unwrap_or(u128::MAX),
                    None => continue, // a value nobody wrote: the checker reports it
                }
            }
        };
        lost += ops
            .iter()
            .filter(|o| o.kind == Kind::Put && o.key == f.key && o.value.as_ref() != f.read())
            .filter(|o| o.ret.is_some_and(|r| r < f.call) && o.call > written)
            .count();
    }
    lost
}

fn run(fault: Fault, seed: u64, keep: &Path) -> Outcome {
    // The split's halves stay with one group for their merge (the balancer would move one
    // half's primary role away at once).
    let (dir, _etcd, url) = match fault {
        Fault::SplitMergeThenKill => etcd_common::new_cluster_with(1, 3, &["--no-balance"]),
        _ => new_cluster(1, 3, false),
    };
    // n1 runs as its own user, so that iptables can cut it off (n4 instead when the move's
    // target is cut off); with every node equally loaded the master gives the region to the
    // first node by name.
    let cut_target = matches!(fault, Fault::PartitionMoveTarget);
    let mut stores = if fault.remote() { storage_nodes(dir.path(), &url) } else { Vec::new() };
    let slow: &[&str] = match (cut_target, fault.remote()) {
        (true, _) => &["--move-rate-mb", "1"],
        (_, true) => &["--storage", "remote"],
        _ => &[],
    };
    let n1_uid = if cut_target { None } else { Some(CUT_UID) };
    let mut nodes = vec![start_node_with(dir.path(), &url, "n1", n1_uid, slow)];
    nodes.extend((2..=3).map(|i| start_node_with(dir.path(), &url, &format!("n{i}"), None, slow)));
    let s = wait_settled(&url, 3, Duration::from_secs(60));
    let primary = s["regions"][0]["primary"].as_str().unwrap().to_string();
    if matches!(fault, Fault::PartitionPrimary) {
        assert_eq!(primary, "n1", "the node that can be cut off leads: {s}");
    }
    let master = s["master"].as_str().unwrap().to_string();
    let victim = match fault {
        Fault::KillMaster | Fault::KillMasterDuringMove => master,
        _ => primary,
    };
    let moves = [
        Fault::MovePrimary,
        Fault::DrainPrimary,
        Fault::KillMoveTarget,
        Fault::KillMoveSource,
        Fault::KillMasterDuringMove,
        Fault::KillStorageDuringMove,
    ];
    if moves.contains(&fault) || cut_target {
        nodes.push(start_node_with(dir.path(), &url, "n4", cut_target.then_some(CUT_UID), slow));
    }
    if cut_target {
        preload(&nodes, 4 << 20);
    }
    let v = nodes.iter().position(|n| n.name == victim).unwrap();
    let addrs: Vec<String> = nodes.iter().map(|n| n.native.clone()).collect();
    let (t0, stop, history) = (Instant::now(), Arc::new(AtomicBool::new(false)), Arc::new(Mutex::new(Vec::new())));
    let resp_addrs: Vec<String> = nodes.iter().map(|n| n.resp.clone()).collect();
    let clients: Vec<_> = (0..2 * CLIENTS)
        .map(|id| {
            let (stop, history) = (stop.clone(), history.clone());
            let (addrs, resp_addrs) = (addrs.clone(), resp_addrs.clone());
            match id < CLIENTS {
                true => std::thread::spawn(move || client(id, seed, addrs, t0, stop, history)),
                false => std::thread::spawn(move || resp_client(id, seed, resp_addrs, t0, stop, history)),
            }
        })
        .collect();
    std::thread::sleep(Duration::from_millis(1000));
    inject(fault, seed, &mut nodes, &mut stores, v, &url);
    stop.store(true, Ordering::Relaxed);
    for c in clients {
        c.join().unwrap();
    }
    // The paused node comes back without its places; the region settles with two copies or,
    // once the master added the returned node back, three.
    let t = Instant::now();
    while status(&url)["regions"][0]["primary_alive"] != true {
        assert!(t.elapsed() < Duration::from_secs(30), "the region has no live primary 30 s after the fault");
        std::thread::sleep(Duration::from_millis(100));
    }
    // The final reads: each key once more, through a client that retries while the region settles.
    // Nodes still running, the fault's victim aside.
    let up = |n: &&Node| n.name != victim && n.proc.0.is_some();
    let live: Vec<String> = nodes.iter().filter(up).map(|n| n.native.clone()).collect();
    let c = cluster_client(&live, Duration::from_secs(20));
    let mut finals: Vec<Op> = (0..KEYS)
        .map(|k| {
            let call = t0.elapsed().as_nanos();
            let value = c.get(key(k)).expect("final read").map(|v| String::from_utf8_lossy(&v).into_owned());
            Op::new(2 * CLIENTS, Kind::Get, key(k), None, call)
                .answered(value.into_iter().collect(), t0.elapsed().as_nanos())
        })
        .collect();
    let live_resp: Vec<&Node> = nodes.iter().filter(up).collect();
    for k in 0..KEYS {
        let mut r = RespConn::open(&live_resp[k as usize % live_resp.len()].resp).expect("a live Redis port");
        for (kind, key) in [(Kind::Get, resp_key(k)), (Kind::Get, counter_key(k)), (Kind::Range, list_key(k))] {
            let call = t0.elapsed().as_nanos();
            let cmd: &[&str] = if kind == Kind::Get { &["GET", &key] } else { &["LRANGE", &key, "0", "-1"] };
            let reply = r.call(cmd).expect("final Redis read");
            let op = Op::new(2 * CLIENTS + 1, kind, key.clone(), None, call);
            let op = resp_outcome(op, Some(reply), t0.elapsed().as_nanos());
            finals.push(op.unwrap_or_else(|| panic!("final Redis read of {key} refused")));
        }
    }
    let ops = history.lock().unwrap().clone();
    let mut text = String::new();
    for o in ops.iter().chain(&finals) {
        writeln!(text, "{}", o.json()).unwrap();
    }
    let hist = dir.path().join("history.jsonl");
    std::fs::write(&hist, &text).unwrap();
    let html = dir.path().join("history.html");
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/lincheck.sh");
    let o = std::process::Command::new("bash")
        .arg(script)
        .args(["--history", hist.to_str().unwrap(), "--html", html.to_str().unwrap(), "--timeout", "120s"])
        .output()
        .expect("run scripts/lincheck.sh");
    let verdict = String::from_utf8_lossy(&o.stdout).trim().rsplit('=').next().unwrap_or("?").to_string();
    if verdict != "ok" {
        let to = keep.join(format!("{fault:?}-{seed}"));
        std::fs::create_dir_all(&to).unwrap();
        std::fs::copy(&hist, to.join("history.jsonl")).unwrap();
        let _ = std::fs::copy(&html, to.join("history.html"));
        eprintln!(
            "run {fault:?} seed {seed}: {verdict}; kept in {} ({})",
            to.display(),
            String::from_utf8_lossy(&o.stderr)
        );
    }
    drop(nodes);
    drop(stores);
    Outcome {
        ops: ops.len() + finals.len(),
        acked_puts: ops.iter().filter(|o| o.kind.writes() && o.ret.is_some()).count(),
        unknown_puts: ops.iter().filter(|o| o.kind.writes() && o.ret.is_none()).count(),
        lost: lost_writes(&ops, &finals),
        verdict,
    }
}

#[test]
fn histories_under_faults_are_linearizable() {
    let runs: usize =
        std::env::var("HALYARD_ROBUSTNESS_RUNS").ok().and_then(|v| v.parse().ok()).unwrap_or(FAULTS.len());
    let seed0: u64 = std::env::var("HALYARD_ROBUSTNESS_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or(1);
    let first: usize = std::env::var("HALYARD_ROBUSTNESS_FIRST").ok().and_then(|v| v.parse().ok()).unwrap_or(0);
    let keep = std::env::temp_dir().join("halyard-robustness");
    let mut table = String::from("run  fault                  seed  ops    acked  unknown  lost  result\n");
    let mut bad = 0;
    for i in 0..runs {
        let (fault, seed) = (FAULTS[(first + i) % FAULTS.len()], seed0 + i as u64);
        let o = run(fault, seed, &keep);
        if o.verdict != "ok" || o.lost > 0 {
            bad += 1;
        }
        let line = format!(
            "{i:<4} {:<22} {seed:<5} {:<6} {:<6} {:<8} {:<5} {}\n",
            format!("{fault:?}"),
            o.ops,
            o.acked_puts,
            o.unknown_puts,
            o.lost,
            o.verdict
        );
        eprint!("{line}");
        table.push_str(&line);
    }
    eprintln!("\n{table}{runs} runs, {bad} with a violation or a lost acknowledged write");
    assert_eq!(bad, 0, "histories that are not linearizable are kept under {}", keep.display());
}
