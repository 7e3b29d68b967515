//! One read of a cluster's keys at one etcd revision, and what nodes and clients derive from it.

use crate::etcd::{Client, GetOptions};
use crate::layout::{ClusterConfig, Intent, Layout, NodeRecord, Progress, RegionRecord, Report, Request};
use crate::{Error, Result};
use halyard_cluster::{ClusterFile, NodeSpec};
use std::collections::{BTreeMap, BTreeSet};

/// Everything under a cluster's prefix, as of `revision`.
#[derive(Clone, Debug, Default)]
pub struct View {
    /// etcd's revision of the read.
    pub revision: i64,
    /// The cluster's settings (None before `halyard cluster init`).
    pub config: Option<ClusterConfig>,
    /// Live nodes (their lease-bound keys), by name.
    pub live: BTreeMap<String, NodeRecord>,
    /// Every node that ever joined, by name.
    pub members: BTreeMap<String, NodeRecord>,
    /// Live storage nodes (`--role storage`), by name: they hold fragments, never regions.
    pub storage: BTreeMap<String, NodeRecord>,
    /// Regions by id, with the mod revision of each record (for compare-and-swap).
    pub regions: BTreeMap<u32, (RegionRecord, i64)>,
    /// The region log: (key, intent), oldest first.
    pub intents: Vec<(String, Intent)>,
    /// Election candidates: (create revision, key, node name); the lowest revision leads.
    pub candidates: Vec<(i64, String, String)>,
    /// Primaries' reports of silent backups: (key, report).
    pub reports: Vec<(String, Report)>,
    /// Live nodes' replication progress, by node name.
    pub progress: BTreeMap<String, Progress>,
    /// Operators' requests: (key, request).
    pub requests: Vec<(String, Request)>,
    /// Nodes shutting down (their `leaving/` keys).
    pub leaving: BTreeSet<String>,
    /// Nodes being drained (`drain/`).
    pub draining: BTreeSet<String>,
    /// Removed nodes (`removed/` tombstones).
    pub removed: BTreeSet<String>,
}

fn parse<T: serde::de::DeserializeOwned>(key: &str, value: &[u8]) -> Result<T> {
    serde_json::from_slice(value).map_err(|e| Error::Corrupt { key: key.to_string(), message: e.to_string() })
}

impl View {
    /// Whether `node` is marked to be emptied: drained (`drain/`) or removed (`removed/`).
    pub fn emptying(&self, node: &str) -> bool {
        self.draining.contains(node) || self.removed.contains(node)
    }

    /// Reads every key of the cluster in one request.
    pub async fn load(client: &mut Client, layout: &Layout) -> Result<View> {
        let resp = client.get(layout.root(), Some(GetOptions::new().with_prefix())).await?;
        let mut v = View { revision: resp.header().map_or(0, |h| h.revision()), ..View::default() };
        for kv in resp.kvs() {
            let key = String::from_utf8_lossy(kv.key()).into_owned();
            let Some((kind, name)) = layout.classify(&key) else { continue };
            match kind {
                "config" => v.config = Some(parse(&key, kv.value())?),
                "nodes/" => {
                    v.live.insert(name.to_string(), parse(&key, kv.value())?);
                }
                "members/" => {
                    v.members.insert(name.to_string(), parse(&key, kv.value())?);
                }
                "storage/" => {
                    v.storage.insert(name.to_string(), parse(&key, kv.value())?);
                }
                "regions/" => {
                    let r: RegionRecord = parse(&key, kv.value())?;
                    v.regions.insert(r.spec.id, (r, kv.mod_revision()));
                }
                "log/" => v.intents.push((key.clone(), parse(&key, kv.value())?)),
                "reports/" => v.reports.push((key.clone(), parse(&key, kv.value())?)),
                "requests/" => {
                    // A request this version cannot read is left for the master to drop.
                    match serde_json::from_slice(kv.value()) {
                        Ok(r) => v.requests.push((key.clone(), r)),
                        Err(e) => tracing::warn!(key, "ignoring a request that does not parse: {e}"),
                    }
                }
                "leaving/" => {
                    v.leaving.insert(name.to_string());
                }
                "drain/" => {
                    v.draining.insert(name.to_string());
                }
                "removed/" => {
                    v.removed.insert(name.to_string());
                }
                "progress/" => {
                    // Advisory: a record this version cannot read is skipped, not fatal.
                    if let Ok(p) = serde_json::from_slice(kv.value()) {
                        v.progress.insert(name.to_string(), p);
                    }
                }
                _ => {
                    let who = String::from_utf8_lossy(kv.value()).into_owned();
                    v.candidates.push((kv.create_revision(), key.clone(), who));
                }
            }
        }
        v.candidates.sort();
        Ok(v)
    }

    /// The LSN `node` last reported for `region` (0 when unknown).
    pub fn lsn(&self, node: &str, region: u32) -> u64 {
        self.progress.get(node).and_then(|p| p.lsn.get(&region)).copied().unwrap_or(0)
    }

    /// How far `region`'s slowest backup is behind its primary, in LSNs (None when unknown).
    pub fn lag(&self, region: u32) -> Option<u64> {
        let r = &self.regions.get(&region)?.0.spec;
        let p = self.progress.get(&r.primary)?;
        let lsn = *p.lsn.get(&region)?;
        let acked = p.acked.get(&region);
        let slowest = r.backups.iter().map(|b| acked.and_then(|a| a.get(b)).copied().unwrap_or(0)).min();
        Some(slowest.map_or(0, |s| lsn.saturating_sub(s)))
    }

    /// The node leading the cluster as master, if any.
    pub fn master(&self) -> Option<&str> {
        self.candidates.first().map(|c| c.2.as_str())
    }

    /// Whether `node` is alive under `lease` (the lease the map recorded for it).
    pub fn alive(&self, node: &str, lease: Option<&i64>) -> bool {
        self.live.get(node).is_some_and(|n| Some(&n.lease) == lease)
    }

    /// Whether `node` may hold a region: alive under the lease the region recorded for it.
    pub fn holds(&self, r: &RegionRecord, node: &str) -> bool {
        self.alive(node, r.spec.leases.get(node))
    }

    /// Nodes still taking their first full copy of `region`: its learners, and any node the
    /// region log has being added (a master that died between its two steps).
    pub fn learners(&self, region: u32) -> Vec<String> {
        let mut out: Vec<String> = self.regions.get(&region).map(|(r, _)| r.spec.learners.clone()).unwrap_or_default();
        for (_, i) in &self.intents {
            if let Intent::AddBackup { region: r, node, .. } = i {
                if *r == region && !out.contains(node) {
                    out.push(node.clone());
                }
            }
        }
        out
    }

    /// The map a node routes with: every member's addresses and every assigned region.
    pub fn cluster_file(&self) -> ClusterFile {
        let nodes = self
            .members
            .values()
            .map(|n| NodeSpec {
                name: n.name.clone(),
                native: n.native.clone(),
                replication: n.replication.clone(),
                resp: Some(n.resp.clone()),
            })
            .collect();
        let regions =
            self.regions.values().filter(|(r, _)| !r.spec.primary.is_empty()).map(|(r, _)| r.spec.clone()).collect();
        ClusterFile { nodes, regions }
    }

    /// How many regions `node` is in (primary, backup, learner, or a place kept while it is
    /// away), to spread new assignments and balance.
    pub fn load_of(&self, node: &str) -> usize {
        // Places kept while the node is away, and copies it is taking, are its load too: a node
        // that returns is about to hold them again (counted out, the balancer moved a region
        // onto it, and away again once it had taken its places back).
        self.regions.values().filter(|(r, _)| r.spec.has_member(node) || r.spec.away.contains_key(node)).count()
    }
}
