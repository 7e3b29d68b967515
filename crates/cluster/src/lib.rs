//! The static cluster file (`--cluster-file`): which nodes exist, how the key space is cut into
//! regions, and which node is each region's primary and which are its backups. Servers, the
//! client and `halyard bench` read the same file; `halyard admin promote` rewrites it.
//!
//! ```toml
//! [[nodes]]
//! name = "n1"
//! native = "127.0.0.1:7401"        # client requests (native protocol)
//! replication = "127.0.0.1:7501"   # primary -> backup streams and admin requests
//!
//! [[regions]]
//! id = 1
//! start = ""                        # first key (UTF-8; "hex:6162" for raw bytes)
//! end = "m"                         # first key past the region; omit for "no limit"
//! primary = "n1"
//! backups = ["n2", "n3"]
//! epoch = 1                         # raised by every promotion
//! ```

use serde::{Deserialize, Serialize};
use std::path::Path;

/// Why a cluster file cannot be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClusterError {
    /// Reading or writing the file failed.
    #[error("cluster file {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// The file is not valid TOML of the expected shape.
    #[error("cluster file {path}: {message}")]
    Parse {
        /// The file.
        path: String,
        /// What the parser said.
        message: String,
    },
    /// The file parses but does not describe a usable cluster.
    #[error("cluster file: {0}")]
    Invalid(String),
}

/// A node of the cluster.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeSpec {
    /// Unique name (`--node`).
    pub name: String,
    /// Native protocol address clients use.
    pub native: String,
    /// Replication address (backup streams and admin requests).
    pub replication: String,
    /// Redis protocol address (CLUSTER SLOTS names it); absent from files written by hand.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resp: Option<String>,
}

/// A region: a key range with a primary and backups.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegionSpec {
    /// Region id (also the engine's region id on every node that hosts it).
    pub id: u32,
    /// First key.
    #[serde(default)]
    pub start: String,
    /// First key past the region (None: no upper limit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end: Option<String>,
    /// The node that takes reads and writes.
    pub primary: String,
    /// Nodes holding copies.
    #[serde(default)]
    pub backups: Vec<String>,
    /// Raised at each promotion (and, under etcd, at every change of the group: its
    /// `conf_ver`); backups reject messages of a lower epoch.
    #[serde(default = "one")]
    pub epoch: u64,
    /// Under etcd: the lease each member (primary and backups) held when the master put it in
    /// the group. A member whose lease is no longer its node's live lease has lost its place
    /// (it died, or restarted and caught nothing of what happened meanwhile). Empty in files.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub leases: std::collections::BTreeMap<String, i64>,
    /// Under etcd: nodes taking their first full copy of the region. The primary ships to them
    /// but writes do not wait for them, and they are never promoted; the master makes each a
    /// backup once it holds its copy. Empty in files.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub learners: Vec<String>,
    /// Under etcd: members taken out of the group because their node went away (its lease
    /// ended, or it left on SIGTERM), with when (milliseconds since the Unix epoch). They are
    /// not waited for and never promoted, but their place is kept for the cluster's
    /// `replace_after`: a node back within it rejoins the group first; past it, the copy is made
    /// elsewhere. Empty in files.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub away: std::collections::BTreeMap<String, u64>,
}

fn one() -> u64 {
    1
}

impl RegionSpec {
    /// Whether `node` is in the region's group: its primary, a backup or a learner.
    pub fn has_member(&self, node: &str) -> bool {
        self.primary == node || self.backups.iter().chain(&self.learners).any(|b| b == node)
    }

    /// The first key as bytes.
    pub fn start_bytes(&self) -> Vec<u8> {
        key_bytes(&self.start)
    }
    /// The end key as bytes.
    pub fn end_bytes(&self) -> Option<Vec<u8>> {
        self.end.as_deref().map(key_bytes)
    }
    /// Whether `key` lies in the region.
    pub fn contains(&self, key: &[u8]) -> bool {
        key >= self.start_bytes().as_slice() && self.end_bytes().is_none_or(|e| key < e.as_slice())
    }
}

/// How a key is written in the file: UTF-8 when it is (and does not itself start `hex:`),
/// else `hex:` and its bytes in hex ([`key_bytes`] reads both).
pub fn key_text(k: &[u8]) -> String {
    match std::str::from_utf8(k) {
        Ok(s) if !s.starts_with("hex:") => s.to_string(),
        _ => format!("hex:{}", k.iter().map(|b| format!("{b:02x}")).collect::<String>()),
    }
}

/// Keys in the file are UTF-8, or `hex:` followed by hex digits for arbitrary bytes.
pub fn key_bytes(s: &str) -> Vec<u8> {
    match s.strip_prefix("hex:") {
        Some(h) => (0..h.len() / 2).filter_map(|i| u8::from_str_radix(h.get(2 * i..2 * i + 2)?, 16).ok()).collect(),
        None => s.as_bytes().to_vec(),
    }
}

/// The whole file.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterFile {
    /// Nodes.
    #[serde(default)]
    pub nodes: Vec<NodeSpec>,
    /// Regions, in any order.
    #[serde(default)]
    pub regions: Vec<RegionSpec>,
}

impl ClusterFile {
    /// Reads and checks a cluster file.
    pub fn load(path: &Path) -> Result<ClusterFile, ClusterError> {
        let p = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| ClusterError::Io { path: p.clone(), source })?;
        let c: ClusterFile =
            toml::from_str(&text).map_err(|e| ClusterError::Parse { path: p, message: e.to_string() })?;
        c.validate()?;
        Ok(c)
    }

    /// Writes the file atomically (temporary file, then rename).
    pub fn save(&self, path: &Path) -> Result<(), ClusterError> {
        self.validate()?;
        let p = path.display().to_string();
        let text = toml::to_string_pretty(self)
            .map_err(|e| ClusterError::Parse { path: p.clone(), message: e.to_string() })?;
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, text).map_err(|source| ClusterError::Io { path: p.clone(), source })?;
        std::fs::rename(&tmp, path).map_err(|source| ClusterError::Io { path: p, source })
    }

    /// Checks names, ids and key ranges.
    pub fn validate(&self) -> Result<(), ClusterError> {
        let bad = |m: String| Err(ClusterError::Invalid(m));
        for (i, n) in self.nodes.iter().enumerate() {
            if self.nodes.iter().take(i).any(|m| m.name == n.name) {
                return bad(format!("node {} is listed twice", n.name));
            }
        }
        let mut ranges: Vec<(Vec<u8>, Option<Vec<u8>>, u32)> = Vec::new();
        for (i, r) in self.regions.iter().enumerate() {
            if self.regions.iter().take(i).any(|o| o.id == r.id) {
                return bad(format!("region {} is listed twice", r.id));
            }
            for n in std::iter::once(&r.primary).chain(&r.backups) {
                if self.node(n).is_none() {
                    return bad(format!("region {} names node {n}, which is not in [[nodes]]", r.id));
                }
            }
            let twice = r.backups.iter().enumerate().any(|(j, b)| r.backups.iter().take(j).any(|o| o == b));
            if r.backups.contains(&r.primary) || twice {
                return bad(format!("region {}: a node appears twice among its primary and backups", r.id));
            }
            let (s, e) = (r.start_bytes(), r.end_bytes());
            if e.as_ref().is_some_and(|e| e <= &s) {
                return bad(format!("region {}: end must be greater than start", r.id));
            }
            ranges.push((s, e, r.id));
        }
        ranges.sort();
        for w in ranges.windows(2) {
            if let [a, b] = w {
                if a.1.as_ref().is_none_or(|e| e > &b.0) {
                    return bad(format!("regions {} and {} overlap", a.2, b.2));
                }
            }
        }
        Ok(())
    }

    /// A node by name.
    pub fn node(&self, name: &str) -> Option<&NodeSpec> {
        self.nodes.iter().find(|n| n.name == name)
    }

    /// A region by id.
    pub fn region(&self, id: u32) -> Option<&RegionSpec> {
        self.regions.iter().find(|r| r.id == id)
    }

    /// The region holding `key`.
    pub fn region_for(&self, key: &[u8]) -> Option<&RegionSpec> {
        self.regions.iter().find(|r| r.contains(key))
    }

    /// Makes `node` the primary of region `id`: the old primary leaves the region, the epoch
    /// rises. Returns the new epoch.
    pub fn promote(&mut self, id: u32, node: &str) -> Result<u64, ClusterError> {
        let r = self
            .regions
            .iter_mut()
            .find(|r| r.id == id)
            .ok_or_else(|| ClusterError::Invalid(format!("no region {id}")))?;
        if !r.backups.iter().any(|b| b == node) {
            return Err(ClusterError::Invalid(format!("node {node} is not a backup of region {id}")));
        }
        r.backups.retain(|b| b != node);
        r.primary = node.to_string();
        r.epoch += 1;
        Ok(r.epoch)
    }

    /// Adds `node` to the backups of region `id`; returns the region as it is now.
    pub fn add_backup(&mut self, id: u32, node: &str) -> Result<RegionSpec, ClusterError> {
        if self.node(node).is_none() {
            return Err(ClusterError::Invalid(format!("no node {node} in [[nodes]]: add it there first")));
        }
        let r = self
            .regions
            .iter_mut()
            .find(|r| r.id == id)
            .ok_or_else(|| ClusterError::Invalid(format!("no region {id}")))?;
        if r.primary == node || r.backups.iter().any(|b| b == node) {
            return Err(ClusterError::Invalid(format!("node {node} already holds region {id}")));
        }
        r.backups.push(node.to_string());
        Ok(r.clone())
    }

    /// A cluster of `nodes` local nodes and `regions` regions over keys `key0000000..`, each
    /// with `replicas` copies (primary included), primaries spread round-robin; used by tests
    /// and `halyard bench --cluster`.
    pub fn local(
        nodes: &[(String, String, String)],
        regions: u32,
        replicas: usize,
        split: &dyn Fn(u32) -> String,
    ) -> ClusterFile {
        let nodes: Vec<NodeSpec> = nodes
            .iter()
            .map(|(name, native, replication)| NodeSpec {
                name: name.clone(),
                native: native.clone(),
                replication: replication.clone(),
                resp: None,
            })
            .collect();
        let n = nodes.len();
        let name = |k: usize| nodes.get(k % n.max(1)).map(|x| x.name.clone()).unwrap_or_default();
        let regions = (0..regions)
            .map(|i| RegionSpec {
                id: i + 1,
                start: if i == 0 { String::new() } else { split(i) },
                end: if i + 1 == regions { None } else { Some(split(i + 1)) },
                primary: name(i as usize),
                backups: (1..replicas.min(n)).map(|j| name(i as usize + j)).collect(),
                epoch: 1,
                leases: Default::default(),
                learners: Vec::new(),
                away: Default::default(),
            })
            .collect();
        ClusterFile { nodes, regions }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn three() -> ClusterFile {
        let nodes: Vec<_> = (1..=3)
            .map(|i| (format!("n{i}"), format!("127.0.0.1:{}", 7400 + i), format!("127.0.0.1:{}", 7500 + i)))
            .collect();
        ClusterFile::local(&nodes, 6, 3, &|i| format!("k{i}"))
    }

    #[test]
    fn add_backup_checks_the_node() {
        let mut c = three();
        let n = c.regions[0].backups.len();
        assert!(c.add_backup(1, "n9").is_err(), "unknown node");
        assert!(c.add_backup(1, "n1").is_err(), "the primary");
        c.nodes.push(NodeSpec { name: "n4".into(), native: "x:1".into(), replication: "x:2".into(), resp: None });
        assert_eq!(c.add_backup(1, "n4").unwrap().backups.len(), n + 1);
        assert!(c.add_backup(1, "n4").is_err(), "twice");
        c.validate().unwrap();
    }

    #[test]
    fn roundtrip_route_and_promote() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cluster.toml");
        let mut c = three();
        c.save(&path).unwrap();
        assert_eq!(ClusterFile::load(&path).unwrap(), c);
        assert_eq!(c.region_for(b"a").unwrap().id, 1);
        assert_eq!(c.region_for(b"k3x").unwrap().id, 4);
        assert_eq!(c.region_for(b"zzz").unwrap().id, 6);
        assert_eq!(c.region(2).unwrap().primary, "n2");
        assert_eq!(c.region(2).unwrap().backups, vec!["n3", "n1"]);
        assert_eq!(c.promote(2, "n3").unwrap(), 2);
        assert_eq!(c.region(2).unwrap().primary, "n3");
        assert_eq!(c.region(2).unwrap().backups, vec!["n1"]);
        assert!(c.promote(2, "n2").is_err(), "the old primary is no backup");
    }

    #[test]
    fn rejects_bad_files() {
        let mut c = three();
        c.regions[1].start = "a".into();
        assert!(matches!(c.validate(), Err(ClusterError::Invalid(m)) if m.contains("overlap")));
        let mut c = three();
        c.regions[0].backups.push("n9".into());
        assert!(c.validate().is_err());
        let mut c = three();
        c.regions[0].backups = vec!["n1".into()];
        assert!(c.validate().is_err());
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bad.toml");
        std::fs::write(&path, "[[regions]]\nid = \"x\"\n").unwrap();
        assert!(matches!(ClusterFile::load(&path), Err(ClusterError::Parse { .. })));
        assert_eq!(key_bytes("hex:6162ff"), vec![0x61, 0x62, 0xff]);
        for k in [&b"key5"[..], b"r\x00\x01", b"hex:ab", b"", b"\xff"] {
            assert_eq!(key_bytes(&key_text(k)), k.to_vec(), "{k:?}");
        }
    }
}
