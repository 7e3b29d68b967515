//! What cluster-mode Redis clients ask before they send commands: CLUSTER (SLOTS, SHARDS,
//! NODES, INFO, MYID, KEYSLOT), READONLY and READWRITE.
//!
//! A Halyard cluster cuts its key space by key range, not by hash slot, and every node's
//! Redis port serves every key (forwarding what it does not lead). So this node answers as
//! the master of all 16384 slots, with the cluster's other nodes as its replicas: a
//! cluster-mode client (redis-py `RedisCluster`, `redis-cli -c`) then sends everything here,
//! never sees MOVED, and knows the other nodes to fall back on if this one goes away.

use super::args::{lower, wrong_args};
use crate::resp::Reply;
use crate::state::{Session, Shared};

/// Redis Cluster's slot count.
const SLOTS: i64 = 16384;

pub(super) fn cmd_readonly(_: &Shared, _: &mut Session, _: &[&[u8]]) -> Reply {
    // Reads are always served (and forwarded to the primary when need be).
    Reply::ok()
}

pub(super) fn cmd_cluster(sh: &Shared, _: &mut Session, a: &[&[u8]]) -> Reply {
    let [_, sub, rest @ ..] = a else { return wrong_args("cluster") };
    let sub = lower(sub);
    if sub == "keyslot" {
        let [k] = rest else { return wrong_args("cluster|keyslot") };
        return Reply::Int(i64::from(key_slot(k)));
    }
    let Some(c) = sh.cluster.get() else {
        return Reply::err("ERR This instance has cluster support disabled");
    };
    let nodes = c.resp_nodes();
    let epoch: u64 = c.targets().iter().map(|t| t.epoch).sum();
    match (sub.as_str(), rest) {
        ("myid", []) => Reply::bulk(node_id(&c.name)),
        ("info", []) => Reply::bulk(info(nodes.len(), epoch)),
        ("slots", []) => {
            let mut entry = vec![Reply::Int(0), Reply::Int(SLOTS - 1)];
            entry.extend(nodes.iter().map(|(name, addr)| {
                let (host, port) = host_port(addr);
                Reply::Array(vec![Reply::bulk(host), Reply::Int(port), Reply::bulk(node_id(name))])
            }));
            Reply::Array(vec![Reply::Array(entry)])
        }
        ("shards", []) => shards(&nodes),
        ("nodes", []) => Reply::bulk(nodes_text(&nodes, epoch)),
        ("countkeysinslot" | "getkeysinslot", _) => Reply::err(
            "ERR Halyard cuts its key space by key range, not by hash slot: use SCAN (it covers the whole cluster)",
        ),
        _ => Reply::err(format!(
            "ERR unknown subcommand or wrong number of arguments for 'cluster|{sub}'; \
             Halyard answers CLUSTER SLOTS, SHARDS, NODES, INFO, MYID and KEYSLOT"
        )),
    }
}

fn info(known: usize, epoch: u64) -> String {
    format!(
        "cluster_enabled:1\r\ncluster_state:ok\r\ncluster_slots_assigned:{SLOTS}\r\ncluster_slots_ok:{SLOTS}\r\n\
         cluster_slots_pfail:0\r\ncluster_slots_fail:0\r\ncluster_known_nodes:{known}\r\ncluster_size:1\r\n\
         cluster_current_epoch:{epoch}\r\ncluster_my_epoch:{epoch}\r\n"
    )
}

fn shards(nodes: &[(String, String)]) -> Reply {
    let node = |(i, (name, addr)): (usize, &(String, String))| {
        let (host, port) = host_port(addr);
        Reply::Map(vec![
            (Reply::bulk("id"), Reply::bulk(node_id(name))),
            (Reply::bulk("port"), Reply::Int(port)),
            (Reply::bulk("ip"), Reply::bulk(host.clone())),
            (Reply::bulk("endpoint"), Reply::bulk(host)),
            (Reply::bulk("role"), Reply::bulk(if i == 0 { "master" } else { "replica" })),
            (Reply::bulk("replication-offset"), Reply::Int(0)),
            (Reply::bulk("health"), Reply::bulk("online")),
        ])
    };
    Reply::Array(vec![Reply::Map(vec![
        (Reply::bulk("slots"), Reply::Array(vec![Reply::Int(0), Reply::Int(SLOTS - 1)])),
        (Reply::bulk("nodes"), Reply::Array(nodes.iter().enumerate().map(node).collect())),
    ])])
}

/// CLUSTER NODES' text: this node the master of every slot, the others its replicas.
fn nodes_text(nodes: &[(String, String)], epoch: u64) -> String {
    let mut out = String::new();
    let me = nodes.first().map(|(n, _)| node_id(n)).unwrap_or_default();
    for (i, (name, addr)) in nodes.iter().enumerate() {
        let (host, port) = host_port(addr);
        let bus = port.saturating_add(10000);
        if i == 0 {
            out.push_str(&format!("{me} {host}:{port}@{bus} myself,master - 0 0 {epoch} connected 0-{}\n", SLOTS - 1));
        } else {
            out.push_str(&format!("{} {host}:{port}@{bus} slave {me} 0 0 {epoch} connected\n", node_id(name)));
        }
    }
    out
}

fn host_port(addr: &str) -> (String, i64) {
    match addr.rsplit_once(':') {
        Some((h, p)) => (h.trim_start_matches('[').trim_end_matches(']').to_string(), p.parse().unwrap_or(0)),
        None => (addr.to_string(), 0),
    }
}

/// A Redis Cluster node id (40 hex digits), stable for a node name.
fn node_id(name: &str) -> String {
    let h = |seed: u64| {
        name.bytes().fold(0xcbf2_9ce4_8422_2325 ^ seed, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3))
    };
    format!("{:016x}{:016x}{:08x}", h(1), h(2), h(3) as u32)
}

/// Redis Cluster's hash slot of a key: CRC16 (XMODEM) of the key, or of its `{hash tag}`.
pub(crate) fn key_slot(key: &[u8]) -> u16 {
    let tagged = key.iter().position(|&b| b == b'{').and_then(|open| {
        let rest = key.get(open + 1..)?;
        let close = rest.iter().position(|&b| b == b'}')?;
        (close > 0).then(|| rest.get(..close)).flatten()
    });
    crc16(tagged.unwrap_or(key)) % SLOTS as u16
}

fn crc16(data: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &b in data {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 { (crc << 1) ^ 0x1021 } else { crc << 1 };
        }
    }
    crc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_match_redis() {
        // Values redis-server answers to CLUSTER KEYSLOT.
        assert_eq!(crc16(b"123456789"), 0x31c3);
        assert_eq!(key_slot(b"foo"), 12182);
        assert_eq!(key_slot(b"{user1000}.following"), key_slot(b"user1000"));
        assert_eq!(key_slot(b"foo{}{bar}"), key_slot(b"foo{}{bar}"));
        assert_ne!(key_slot(b"foo{}{bar}"), key_slot(b"bar"), "an empty tag hashes the whole key");
        assert_eq!(node_id("n1").len(), 40);
        assert_ne!(node_id("n1"), node_id("n2"));
        assert_eq!(host_port("[::1]:7000"), ("::1".to_string(), 7000));
    }
}
