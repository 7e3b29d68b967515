//! The keys of one cluster in etcd and the values stored under them (all JSON). The full
//! table, with examples, is in docs/cluster.md; this module is its only writer.
//!
//! | key (under `/halyard/<cluster>/`) | value | lifetime |
//! |---|---|---|
//! | `config` | [`ClusterConfig`] | written once by `halyard cluster init` |
//! | `members/<node>` | [`NodeRecord`] (addresses; `lease` 0) | persistent: the addresses of every node that ever joined |
//! | `storage/<node>` | [`NodeRecord`] of a storage node (`native`: its address; live `lease`) | bound to that lease; read by processing nodes under `--storage remote` |
//! | `nodes/<node>` | [`NodeRecord`] with the node's live `lease` | bound to that lease: deleted by etcd when the node stops renewing it |
//! | `regions/<id, 10 digits>` | [`RegionRecord`] | written by `init`, then only by the master, by compare-and-swap |
//! | `log/<revision, 20 digits>-<region, 10 digits>` | [`Intent`] | the master's region log: put before a multi-step change, deleted after |
//! | `master/<lease, hex>` | the candidate's node name | etcd's election API; the lowest create revision leads |
//! | `reports/<region, 10 digits>-<node>` | [`Report`] | put by a primary whose backup did not acknowledge in time, bound to the primary's lease; deleted by the master |
//! | `requests/<region, 10 digits>` | [`Request`] | put by `halyard admin transfer`; taken (deleted) by the master when it logs the change, or dropped when it no longer applies |
//! | `leaving/<node>` | empty | put by a node shutting down (SIGTERM), bound to its lease: the master hands its primaries to backups and takes it out of every group |
//! | `drain/<node>` | empty | put by `halyard cluster drain`: the master moves every copy off the node; deleted by `halyard cluster undrain` |
//! | `removed/<node>` | empty | put by `halyard cluster remove`: a tombstone; the node holds nothing and may not register under that name again |

use halyard_cluster::RegionSpec;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Version of the values this release writes (`ClusterConfig::format`).
pub const FORMAT: u32 = 1;

/// The key names of one cluster.
#[derive(Clone, Debug)]
pub struct Layout {
    prefix: String,
}

impl Layout {
    /// The layout of cluster `name` (`--cluster-name`).
    pub fn new(name: &str) -> Layout {
        Layout { prefix: format!("/halyard/{name}/") }
    }

    /// The prefix every key of the cluster starts with.
    pub fn root(&self) -> &str {
        &self.prefix
    }

    /// The cluster's settings.
    pub fn config(&self) -> String {
        format!("{}config", self.prefix)
    }

    /// A live node's key (bound to its lease).
    pub fn node(&self, name: &str) -> String {
        format!("{}nodes/{name}", self.prefix)
    }

    /// A live storage node's key (bound to its lease): `halyard serve --role storage`, which
    /// holds segment fragments and never regions.
    pub fn storage_node(&self, name: &str) -> String {
        format!("{}storage/{name}", self.prefix)
    }

    /// A node's persistent address record.
    pub fn member(&self, name: &str) -> String {
        format!("{}members/{name}", self.prefix)
    }

    /// A region's record.
    pub fn region(&self, id: u32) -> String {
        format!("{}regions/{id:010}", self.prefix)
    }

    /// An entry of the region log, named by the etcd revision the master acted on and the
    /// region (unique: one change per region at a time).
    pub fn log(&self, revision: i64, region: u32) -> String {
        format!("{}log/{revision:020}-{region:010}", self.prefix)
    }

    /// A primary's report that `node`, a backup of `region`, does not acknowledge.
    pub fn report(&self, region: u32, node: &str) -> String {
        format!("{}reports/{region:010}-{node}", self.prefix)
    }

    /// An operator's request about a region, for the master.
    pub fn request(&self, region: u32) -> String {
        format!("{}requests/{region:010}", self.prefix)
    }

    /// The mark of a node that is shutting down (bound to its lease).
    pub fn leaving(&self, node: &str) -> String {
        format!("{}leaving/{node}", self.prefix)
    }

    /// The mark of a node being drained.
    pub fn drain(&self, node: &str) -> String {
        format!("{}drain/{node}", self.prefix)
    }

    /// The tombstone of a removed node.
    pub fn removed(&self, node: &str) -> String {
        format!("{}removed/{node}", self.prefix)
    }

    /// A live node's replication progress (bound to its lease).
    pub fn progress(&self, node: &str) -> String {
        format!("{}progress/{node}", self.prefix)
    }

    /// The election's name (its candidates' keys are this plus `/` and their lease in hex).
    pub fn election(&self) -> String {
        format!("{}master", self.prefix)
    }

    /// Which kind of key `key` (a full key) is, and the rest of its name.
    pub fn classify<'k>(&self, key: &'k str) -> Option<(&'static str, &'k str)> {
        let rest = key.strip_prefix(self.prefix.as_str())?;
        for kind in [
            "nodes/",
            "storage/",
            "members/",
            "regions/",
            "log/",
            "master/",
            "reports/",
            "progress/",
            "requests/",
            "leaving/",
            "drain/",
            "removed/",
        ] {
            if let Some(name) = rest.strip_prefix(kind) {
                return Some((kind, name));
            }
        }
        (rest == "config").then_some(("config", ""))
    }
}

/// Seconds a group keeps the place of a member whose node went away (`replace_after_secs`).
pub const DEFAULT_REPLACE_AFTER_SECS: u64 = 60;

fn default_replace_after() -> u64 {
    DEFAULT_REPLACE_AFTER_SECS
}

/// `config`: what `halyard cluster init` decided.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterConfig {
    /// Copies of each region, primary included.
    pub replicas: usize,
    /// Version of the values under the prefix ([`FORMAT`]).
    pub format: u32,
    /// Seconds a group keeps the place of a member whose node went away before it makes the
    /// copy elsewhere: a node that flaps or restarts comes back to its places.
    #[serde(default = "default_replace_after")]
    pub replace_after_secs: u64,
    /// Whether the master's balancer evens copies and primaries over the nodes by itself.
    #[serde(default = "default_balance")]
    pub balance: bool,
    /// Whether the master merges adjacent regions that are small and idle by themselves.
    #[serde(default = "default_balance")]
    pub merge: bool,
}

fn default_balance() -> bool {
    true
}

/// `nodes/<name>` and `members/<name>`: where a node listens.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeRecord {
    /// The node's name (`--node`).
    pub name: String,
    /// Native protocol address.
    pub native: String,
    /// Redis protocol address.
    pub resp: String,
    /// HTTP address (metrics, health).
    pub http: String,
    /// Node-to-node address (replication streams, admin requests).
    pub replication: String,
    /// The node's release.
    pub version: String,
    /// The etcd lease the record is bound to (0 in `members/`).
    #[serde(default)]
    pub lease: i64,
}

/// `regions/<id>`: a key range, its group, and its epoch. The epoch has TiKV's two parts:
/// `epoch` (TiKV's `conf_ver`: raised by every change of the group — assignment, promotion, a
/// backup removed or added) and `version` (raised by a split or merge; regions do not split
/// yet, so it stays 1). A region whose `primary` is empty is not assigned yet.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegionRecord {
    /// Range, primary, backups, `epoch` (conf_ver) and the members' leases.
    #[serde(flatten)]
    pub spec: RegionSpec,
    /// Raised by splits and merges.
    #[serde(default = "one")]
    pub version: u64,
}

fn one() -> u64 {
    1
}

/// `reports/<region>-<node>`: a primary says a backup of its group did not acknowledge its
/// writes within the ack timeout. The master removes the backup from the group (a new epoch),
/// after which the primary answers writes without it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Report {
    /// Region id.
    pub region: u32,
    /// The silent backup.
    pub node: String,
    /// The region's epoch the primary leads at.
    pub epoch: u64,
    /// The reporting primary.
    pub by: String,
}

/// `progress/<node>` (bound to the node's lease, rewritten every second): how far each region
/// the node holds has come. The master promotes the backup that holds the most of the log;
/// `halyard cluster status` shows each region's replication lag.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Progress {
    /// By region id: the region's LSN here (a primary's last written, a backup's last received).
    pub lsn: BTreeMap<u32, u64>,
    /// A primary's regions, by id: the last LSN each backup acknowledged.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub acked: BTreeMap<u32, BTreeMap<String, u64>>,
    /// A primary's full copies under way, by region and backup: (bytes sent, bytes in all).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub copies: BTreeMap<u32, BTreeMap<String, (u64, u64)>>,
    /// A primary's regions, by id: the writes a second it took over the last publication's
    /// interval (LSNs handed out; regions that took none are left out).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub writes: BTreeMap<u32, u64>,
    /// A primary's regions, by id: the requests a second it served over the last
    /// publication's interval, reads and writes (regions that served none are left out).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub ops: BTreeMap<u32, u64>,
    /// A primary's regions, by id: the estimated logical size in bytes (from the SSTs'
    /// descriptors, as size splits estimate it), published every few seconds.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub sizes: BTreeMap<u32, u64>,
    /// A primary's regions past its `--region-max-mb`, or hot past its `--split-load-ops` for
    /// the window, by id: the key that halves each's size or requests (as region keys are
    /// written); the master splits them there.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub splits: BTreeMap<u32, String>,
    /// A primary's regions small and idle enough to merge with a neighbour by its own limits
    /// (under a quarter of `--region-max-mb`, a tenth of `--split-load-ops`): the master merges
    /// two adjacent ones.
    #[serde(default, skip_serializing_if = "std::collections::BTreeSet::is_empty")]
    pub cold: std::collections::BTreeSet<u32>,
    /// Backup copies here that a merge joined before the map did, by the right region's id:
    /// the left region whose copy now spans both (the master finishes a merge whose primary
    /// was lost by them).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub absorbed: BTreeMap<u32, u32>,
}

/// `log/<seq>`: a change the master started and has not finished. A new master finishes
/// each (or drops it when it no longer applies) before it changes anything else of the region.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Intent {
    /// `node` is being promoted to primary of `region` at epoch `epoch` (the promotion
    /// request may or may not have reached it).
    Promote {
        /// Region id.
        region: u32,
        /// The backup being promoted.
        node: String,
        /// The region's epoch once promoted.
        epoch: u64,
    },
    /// A planned handoff of `region` from its primary `from` to its backup `to`, which leads
    /// at `epoch`: `from` is fenced (it serves the region no more), then `to` is promoted. A
    /// new master finishes it, or rolls it back (a new epoch naming `from` again, which ends
    /// its fence) when `to` was lost.
    Transfer {
        /// Region id.
        region: u32,
        /// The primary handing the region off.
        from: String,
        /// The backup taking it.
        to: String,
        /// The region's epoch once `to` leads.
        epoch: u64,
    },
    /// `node` was added to `region`'s backups at epoch `epoch` and is taking its full copy:
    /// until the entry is gone it does not count as holding the region (never promoted).
    AddBackup {
        /// Region id.
        region: u32,
        /// The new backup.
        node: String,
        /// The region's epoch with the node added.
        epoch: u64,
    },
    /// `region`, at epoch `epoch`, is being split at key `at` (as region keys are written:
    /// UTF-8 or `hex:`): its primary fences it and splits its store, backups follow in its
    /// stream, then one transaction narrows it and creates region `child` for the keys from
    /// `at` on, both at `epoch` + 1 and `version` + 1. A new master asks the primary again (it
    /// only fences when already split) and commits, or drops the entry if the primary changed.
    Split {
        /// Region id.
        region: u32,
        /// The split key.
        at: String,
        /// The new region's id.
        child: u32,
        /// The region's epoch when the split began.
        epoch: u64,
    },
    /// `right` (at `right_epoch`), which starts where `region` (at `epoch`) ends and has the
    /// same primary and backups, is being merged into it: the primary fences both, compacts
    /// and merges its store and opens the merged region's streams at `epoch` + 1 (its backups
    /// join their copies); then one transaction widens `region` to `right`'s end at `epoch` + 1
    /// and `version` + 1 and deletes `right`'s record. A new master asks the primary again
    /// (it only fences once merged) and commits, or rolls both back if the group changed.
    Merge {
        /// The left region's id (it stays).
        region: u32,
        /// Its epoch when the merge began.
        epoch: u64,
        /// The right region's id (it goes).
        right: u32,
        /// Its epoch when the merge began.
        right_epoch: u64,
    },
}

impl Intent {
    /// The region the change is about.
    pub fn region(&self) -> u32 {
        match self {
            Intent::Promote { region, .. }
            | Intent::AddBackup { region, .. }
            | Intent::Transfer { region, .. }
            | Intent::Split { region, .. }
            | Intent::Merge { region, .. } => *region,
        }
    }
}

/// `requests/<region>`: what an operator asked of a region; the master acts on it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Request {
    /// Hand the region's primary role to `to`, one of its backups (a planned handoff).
    Transfer {
        /// Region id.
        region: u32,
        /// The backup that becomes primary.
        to: String,
    },
    /// Move the region's copy on `from` to `to`: `to` takes a full copy as a learner and
    /// becomes a backup, the primary role is handed to `to` if `from` led, `from` leaves the
    /// group and drops its copy.
    Move {
        /// Region id.
        region: u32,
        /// The node giving its copy up.
        from: String,
        /// The node taking a copy.
        to: String,
    },
    /// Split the region at key `at` (UTF-8 or `hex:`): the keys from `at` on become a new
    /// region with the same group.
    Split {
        /// Region id.
        region: u32,
        /// The first key of the new region.
        at: String,
    },
    /// Merge the region with the one after it (an operator's merge: neither needs to be small
    /// or idle). Their primaries and backups must be the same nodes.
    Merge {
        /// The left region's id.
        region: u32,
    },
}

impl Request {
    /// The region the request is about.
    pub fn region(&self) -> u32 {
        match self {
            Request::Transfer { region, .. }
            | Request::Move { region, .. }
            | Request::Split { region, .. }
            | Request::Merge { region } => *region,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_classify_and_values_round_trip() {
        let l = Layout::new("c1");
        assert_eq!(l.region(7), "/halyard/c1/regions/0000000007");
        assert_eq!(l.classify(&l.region(7)), Some(("regions/", "0000000007")));
        assert_eq!(l.classify(&l.node("n1")), Some(("nodes/", "n1")));
        assert_eq!(l.classify("/halyard/c1/config"), Some(("config", "")));
        assert_eq!(l.classify("/halyard/c2/config"), None);
        let i = Intent::AddBackup { region: 3, node: "n2".into(), epoch: 4 };
        let j = serde_json::to_string(&i).unwrap();
        assert_eq!(j, r#"{"op":"add_backup","region":3,"node":"n2","epoch":4}"#);
        assert_eq!(serde_json::from_str::<Intent>(&j).unwrap(), i);
        let r: RegionRecord =
            serde_json::from_str(r#"{"id":1,"start":"","primary":"n1","backups":["n2"],"epoch":3}"#).unwrap();
        assert_eq!((r.spec.epoch, r.version, r.spec.backups.len()), (3, 1, 1));
        let i = Intent::Split { region: 3, at: "key5".into(), child: 4, epoch: 7 };
        let j = serde_json::to_string(&i).unwrap();
        assert_eq!(j, r#"{"op":"split","region":3,"at":"key5","child":4,"epoch":7}"#);
        assert_eq!(serde_json::from_str::<Intent>(&j).unwrap(), i);
        let q = Request::Split { region: 3, at: "hex:6b00".into() };
        let j = serde_json::to_string(&q).unwrap();
        assert_eq!(j, r#"{"op":"split","region":3,"at":"hex:6b00"}"#);
        assert_eq!(serde_json::from_str::<Request>(&j).unwrap(), q);
    }
}
