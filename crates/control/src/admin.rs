//! `halyard cluster init` and `halyard cluster status`.

use crate::etcd::{Client, Compare, CompareOp, Txn, TxnOp};
use crate::layout::{ClusterConfig, Layout, RegionRecord, FORMAT};
use crate::view::View;
use crate::{Error, Result};
use halyard_cluster::RegionSpec;
use serde::Serialize;

/// Writes a new cluster's settings and its unassigned regions, cut at `splits` (sorted,
/// distinct: region i covers `splits[i-1]..splits[i]`). Refused if the cluster exists.
pub async fn init(client: &mut Client, layout: &Layout, config: &ClusterConfig, splits: &[String]) -> Result<()> {
    if config.replicas == 0 {
        return Err(Error::Invalid("--replicas must be at least 1".into()));
    }
    if splits.windows(2).any(|w| matches!(w, [a, b] if halyard_cluster::key_bytes(a) >= halyard_cluster::key_bytes(b)))
        || splits.first().is_some_and(|s| s.is_empty())
    {
        return Err(Error::Invalid("split keys must be non-empty, distinct and in increasing order".into()));
    }
    let config = ClusterConfig { format: FORMAT, ..config.clone() };
    let mut ops = vec![TxnOp::put(layout.config(), serde_json::to_vec(&config).unwrap_or_default(), None)];
    let n = splits.len() + 1;
    for i in 0..n {
        let spec = RegionSpec {
            id: i as u32 + 1,
            start: if i == 0 { String::new() } else { splits.get(i - 1).cloned().unwrap_or_default() },
            end: splits.get(i).cloned(),
            primary: String::new(),
            backups: Vec::new(),
            epoch: 1,
            leases: Default::default(),
            learners: Vec::new(),
            away: Default::default(),
        };
        let rec = RegionRecord { spec, version: 1 };
        ops.push(TxnOp::put(layout.region(rec.spec.id), serde_json::to_vec(&rec).unwrap_or_default(), None));
    }
    let txn = Txn::new().when([Compare::create_revision(layout.config(), CompareOp::Equal, 0)]).and_then(ops);
    if !client.txn(txn).await?.succeeded() {
        return Err(Error::Invalid(format!(
            "a cluster already exists under {} (pick another --cluster-name, or delete that prefix with etcdctl)",
            layout.root()
        )));
    }
    Ok(())
}

/// How `halyard cluster init --regions N` cuts the key space.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Keys {
    /// Evenly over the first byte (`hex:XX` split points).
    Bytes,
    /// Over `key0`..`key9` (at most 10 regions): keys that start with "key" and a digit.
    Digits,
    /// Over `halyard bench`'s keys: "user" and 20 digits of a 63-bit hash.
    Bench,
}

/// The split points of `n` regions.
pub fn even_splits(n: usize, keys: Keys) -> Result<Vec<String>> {
    let n = n.max(1);
    if keys == Keys::Digits && n > 10 {
        return Err(Error::Invalid("--numeric-keys cuts over key0..key9: at most 10 regions".into()));
    }
    Ok((1..n)
        .map(|i| match keys {
            Keys::Digits => format!("key{}", i * 10 / n),
            Keys::Bytes => format!("hex:{:02x}", i * 256 / n),
            Keys::Bench => format!("user{:020}", (i64::MAX as u64 / n as u64) * i as u64),
        })
        .collect())
}

/// The Redis port stores a key `k` under `'r' | k` (with every 00 byte escaped; see the
/// server's keyspace module): these split points, read as Redis keys, as engine keys. A split
/// point may not hold a 00 byte: it could then fall between a hash's key and its fields.
pub fn redis_splits(splits: &[String]) -> Result<Vec<String>> {
    splits
        .iter()
        .map(|s| {
            let bytes = halyard_cluster::key_bytes(s);
            if bytes.contains(&0) {
                return Err(Error::Invalid(format!("split point {s:?}: a Redis split point may not hold a 00 byte")));
            }
            Ok(match s.strip_prefix("hex:") {
                Some(h) => format!("hex:72{h}"),
                None => format!("r{s}"),
            })
        })
        .collect()
}

/// One row of `halyard cluster status`.
#[derive(Debug, Serialize)]
pub struct NodeStatus {
    /// Node name.
    pub name: String,
    /// up, down, draining (`cluster drain`), leaving (shutting down) or removed.
    pub state: String,
    /// Whether its lease-bound key exists.
    pub alive: bool,
    /// Its lease (0 if not alive).
    pub lease: i64,
    /// Native address.
    pub native: String,
    /// Redis address.
    pub resp: String,
    /// HTTP address.
    pub http: String,
    /// Node-to-node address.
    pub replication: String,
    /// Regions it leads.
    pub primaries: usize,
    /// Regions it backs up.
    pub backups: usize,
}

/// One region of `halyard cluster status`.
#[derive(Debug, Serialize)]
pub struct RegionStatus {
    /// Region id.
    pub id: u32,
    /// First key.
    pub start: String,
    /// First key past the region.
    pub end: Option<String>,
    /// Leading node ("" if unassigned).
    pub primary: String,
    /// Backups.
    pub backups: Vec<String>,
    /// Backups still taking their full copy.
    pub copying: Vec<String>,
    /// Full copies under way to this region's new backups: (node, bytes sent, bytes in all),
    /// as the primary last published them.
    pub copies: Vec<(String, u64, u64)>,
    /// Members whose node went away, with the seconds since: their places are kept for the
    /// cluster's `replace_after_secs`.
    pub away: Vec<(String, u64)>,
    /// conf_ver.
    pub epoch: u64,
    /// Split/merge version.
    pub version: u64,
    /// Whether the primary holds the region under a live lease.
    pub primary_alive: bool,
    /// The primary's LSN (from its progress record, published every second).
    pub lsn: Option<u64>,
    /// How many LSNs the slowest backup's acknowledgements trail the primary's (None: unknown).
    pub lag: Option<u64>,
    /// Requests a second the primary served (its progress record; None: none published).
    pub ops: Option<u64>,
    /// The region's estimated logical size in bytes, as its primary published it.
    pub bytes: Option<u64>,
    /// The key the primary asks the region be split at (past its size limit, or hot).
    pub split_at: Option<String>,
}

/// The whole status.
#[derive(Debug, Serialize)]
pub struct Status {
    /// Cluster name prefix.
    pub prefix: String,
    /// etcd revision read.
    pub revision: i64,
    /// Copies per region.
    pub replicas: usize,
    /// Seconds a group keeps the place of a member whose node went away.
    pub replace_after_secs: u64,
    /// The master node.
    pub master: Option<String>,
    /// Nodes.
    pub nodes: Vec<NodeStatus>,
    /// Storage nodes up now (`--role storage`): name, address, and state (up, or draining
    /// once `cluster drain` or `remove` marked it).
    pub storage_nodes: Vec<(String, String, String)>,
    /// Regions.
    pub regions: Vec<RegionStatus>,
    /// Unfinished changes in the region log.
    pub log: Vec<crate::Intent>,
    /// Operators' and the balancer's requests not carried out yet.
    pub requests: Vec<crate::Request>,
}

/// Reads the cluster's status.
pub async fn status(client: &mut Client, layout: &Layout) -> Result<Status> {
    let v = View::load(client, layout).await?;
    let Some(config) = &v.config else {
        return Err(Error::Invalid(format!("no cluster under {}: run `halyard cluster init` first", layout.root())));
    };
    let nodes = v
        .members
        .values()
        .map(|m| {
            let live = v.live.get(&m.name);
            let count = |p: bool| {
                v.regions
                    .values()
                    .filter(|(r, _)| if p { r.spec.primary == m.name } else { r.spec.backups.contains(&m.name) })
                    .count()
            };
            let state = if v.removed.contains(&m.name) {
                "removed"
            } else if v.leaving.contains(&m.name) {
                "leaving"
            } else if v.draining.contains(&m.name) {
                "draining"
            } else if live.is_some() {
                "up"
            } else {
                "down"
            };
            NodeStatus {
                name: m.name.clone(),
                state: state.to_string(),
                alive: live.is_some(),
                lease: live.map_or(0, |n| n.lease),
                native: m.native.clone(),
                resp: m.resp.clone(),
                http: m.http.clone(),
                replication: m.replication.clone(),
                primaries: count(true),
                backups: count(false),
            }
        })
        .collect();
    let regions = v
        .regions
        .values()
        .map(|(r, _)| RegionStatus {
            id: r.spec.id,
            start: r.spec.start.clone(),
            end: r.spec.end.clone(),
            primary: r.spec.primary.clone(),
            backups: r.spec.backups.clone(),
            copying: v.learners(r.spec.id),
            copies: v
                .progress
                .get(&r.spec.primary)
                .and_then(|p| p.copies.get(&r.spec.id))
                .map(|c| c.iter().map(|(n, (done, total))| (n.clone(), *done, *total)).collect())
                .unwrap_or_default(),
            away: r
                .spec
                .away
                .iter()
                .map(|(n, at)| (n.clone(), crate::master::now_ms().saturating_sub(*at) / 1000))
                .collect(),
            epoch: r.spec.epoch,
            version: r.version,
            primary_alive: !r.spec.primary.is_empty() && v.holds(r, &r.spec.primary),
            lsn: v.progress.get(&r.spec.primary).and_then(|p| p.lsn.get(&r.spec.id)).copied(),
            lag: v.lag(r.spec.id),
            ops: v.progress.get(&r.spec.primary).and_then(|p| p.ops.get(&r.spec.id)).copied(),
            bytes: v.progress.get(&r.spec.primary).and_then(|p| p.sizes.get(&r.spec.id)).copied(),
            split_at: v.progress.get(&r.spec.primary).and_then(|p| p.splits.get(&r.spec.id)).cloned(),
        })
        .collect();
    Ok(Status {
        prefix: layout.root().to_string(),
        revision: v.revision,
        replicas: config.replicas,
        replace_after_secs: config.replace_after_secs,
        master: v.master().map(str::to_string),
        nodes,
        storage_nodes: storage_rows(&v),
        regions,
        log: v.intents.iter().map(|(_, i)| i.clone()).collect(),
        requests: v.requests.iter().map(|(_, q)| q.clone()).collect(),
    })
}

/// Storage nodes' rows: name, address, state.
fn storage_rows(v: &View) -> Vec<(String, String, String)> {
    let row = |n: &crate::NodeRecord| {
        (n.name.clone(), n.native.clone(), if v.emptying(&n.name) { "draining" } else { "up" }.to_string())
    };
    v.storage.values().map(row).collect()
}

impl Status {
    /// The status as aligned text tables.
    pub fn table(&self) -> String {
        let mut out = format!(
            "cluster {} (etcd revision {}), {} copies per region, master: {}\n\nNODE      STATE     LEASE             PRIMARIES  BACKUPS  NATIVE                 RESP                   REPLICATION\n",
            self.prefix,
            self.revision,
            self.replicas,
            self.master.as_deref().unwrap_or("(none)")
        );
        for n in &self.nodes {
            out.push_str(&format!(
                "{:<9} {:<9} {:<17x} {:<10} {:<8} {:<22} {:<22} {}\n",
                n.name, n.state, n.lease, n.primaries, n.backups, n.native, n.resp, n.replication
            ));
        }
        if !self.storage_nodes.is_empty() {
            out.push_str("\nSTORAGE NODE  STATE     ADDRESS\n");
            for (name, addr, state) in &self.storage_nodes {
                out.push_str(&format!("{name:<13} {state:<9} {addr}\n"));
            }
        }
        out.push_str(
            "\nREGION  START         END           EPOCH  VER  PRIMARY   UP   LSN         LAG     OPS/S   BACKUPS\n",
        );
        for r in &self.regions {
            let copying = match r.copying.is_empty() {
                true => String::new(),
                false => {
                    let show = |n: &String| match r.copies.iter().find(|c| c.0 == *n) {
                        Some((_, done, total)) => format!("{n} {} of {} MiB", done >> 20, (total >> 20).max(1)),
                        None => n.clone(),
                    };
                    format!(" (copying: {})", r.copying.iter().map(show).collect::<Vec<_>>().join(", "))
                }
            };
            let known = |x: Option<u64>| x.map_or("-".to_string(), |x| x.to_string());
            let away = match r.away.is_empty() {
                true => String::new(),
                false => format!(
                    " (away: {})",
                    r.away.iter().map(|(n, s)| format!("{n} {s} s")).collect::<Vec<_>>().join(", ")
                ),
            };
            let split = r.split_at.as_ref().map_or(String::new(), |k| format!(" (splitting at {k:?})"));
            let copying = copying + &away + &split;
            out.push_str(&format!(
                "{:<7} {:<13} {:<13} {:<6} {:<4} {:<9} {:<4} {:<11} {:<7} {:<7} {:<7} {}{}\n",
                r.id,
                format!("{:?}", r.start),
                r.end.as_deref().map_or("(end)".to_string(), |e| format!("{e:?}")),
                r.epoch,
                r.version,
                if r.primary.is_empty() { "-" } else { &r.primary },
                if r.primary_alive { "yes" } else { "no" },
                known(r.lsn),
                known(r.lag),
                known(r.ops),
                known(r.bytes.map(|b| b >> 20)),
                r.backups.join(","),
                copying
            ));
        }
        for q in &self.requests {
            out.push_str(&format!("\nrequested: {q:?}"));
        }
        for i in &self.log {
            out.push_str(&format!("\nin progress: {i:?}"));
        }
        out
    }
}
