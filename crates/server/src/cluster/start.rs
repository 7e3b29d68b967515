//! Start-up of a cluster node: from a static cluster file ([`ClusterNode::start`]: the file's
//! regions opened or created here, its primary regions shipped) or from etcd
//! ([`ClusterNode::start_etcd`]: registered under a lease, then following the map and
//! campaigning for master). Both build the node from the settings the same way.

use super::map::RegionMap;
use super::peers::replication_addrs;
use super::{ClusterNode, Peers};
use crate::config::{Ack, ServerConfig};
use crate::ServerError;
use halyard_cluster::{ClusterFile, RegionSpec};
use halyard_control::{Layout, NodeRecord, Session};
use halyard_engine::Db;
use halyard_replication::{Mode, Replica, Shipper};
use parking_lot::RwLock;
use std::sync::Arc;
use std::time::Duration;

/// A configuration error.
fn cerr(m: String) -> ServerError {
    ServerError::Config(m)
}

/// This node's name and the cluster file that must list it (`--cluster-file`, `--node`).
fn load_file(cfg: &ServerConfig) -> Result<(String, ClusterFile), ServerError> {
    let path = cfg.cluster_file.clone().ok_or_else(|| cerr("no --cluster-file".into()))?;
    let name = cfg.node.clone().ok_or_else(|| cerr("--cluster-file needs --node NAME".into()))?;
    let file = ClusterFile::load(&path).map_err(|e| cerr(e.to_string()))?;
    if file.node(&name).is_none() {
        return Err(cerr(format!("node {name} is not in {}", path.display())));
    }
    Ok((name, file))
}

/// Registers this node in the etcd cluster at `cfg.etcd` under a new lease.
async fn etcd_session(cfg: &ServerConfig, name: &str) -> Result<Arc<Session>, ServerError> {
    let layout = Layout::new(&cfg.cluster_name);
    let client = halyard_control::session::connect(&cfg.etcd).await.map_err(|e| cerr(e.to_string()))?;
    let record = NodeRecord {
        name: name.to_string(),
        native: cfg.advertised(&cfg.listen),
        resp: cfg.advertised(&cfg.resp),
        http: cfg.advertised(&cfg.http),
        replication: cfg.advertised(&cfg.replication_listen),
        version: env!("CARGO_PKG_VERSION").to_string(),
        lease: 0,
    };
    let ttl = Duration::from_secs(cfg.lease_ttl_secs.max(1));
    Session::start(client, layout, record, ttl).await.map_err(|e| cerr(e.to_string()))
}

impl ClusterNode {
    /// Reads the cluster file, opens or creates this node's regions, and starts shipping its
    /// primary regions (on the current tokio runtime).
    pub fn start(cfg: &ServerConfig, db: Arc<Db>) -> Result<Arc<ClusterNode>, ServerError> {
        let (name, file) = load_file(cfg)?;
        let node = ClusterNode::new(cfg, &db, name, file, None);
        node.open_regions()?;
        let node = Arc::new(node);
        node.attach();
        node.ship_led()?;
        Ok(node)
    }

    /// Joins the cluster at `cfg.etcd`: registers this node, takes up the roles the map gives
    /// it under its lease (none right after a start: the master hands them out), and starts
    /// following the map and campaigning for master (on the current runtime).
    pub async fn start_etcd(cfg: &ServerConfig, db: Arc<Db>) -> Result<Arc<ClusterNode>, ServerError> {
        let name = cfg.node.clone().ok_or_else(|| cerr("--etcd needs --node NAME".into()))?;
        let session = etcd_session(cfg, &name).await?;
        let quiet = db.regions().iter().filter(|r| r.quiet).count();
        if quiet > 0 {
            tracing::info!(quiet, "regions this node led are left as they are until the map names its role in each");
        }
        let node = Arc::new(ClusterNode::new(cfg, &db, name, ClusterFile::default(), Some(session.clone())));
        node.attach();
        tokio::spawn(node.clone().follow(session.clone()));
        tokio::spawn(node.clone().publish_progress(session.clone()));
        tokio::spawn(halyard_control::master::Master::run(session, node.master_stats.clone()));
        Ok(node)
    }

    /// The node as both start-ups build it from the settings (the shipper with its queue limit
    /// and ack timeout, the replica, the replication mode, `--ack`, the peers), with the map
    /// `file` and, in etcd mode, the node's session. It ships nothing yet ([`Self::attach`]).
    fn new(
        cfg: &ServerConfig,
        db: &Arc<Db>,
        name: String,
        file: ClusterFile,
        control: Option<Arc<Session>>,
    ) -> ClusterNode {
        let shipper = Shipper::with_queue_limit(
            Duration::from_millis(cfg.ack_timeout_ms.max(1)),
            cfg.replication_queue_mb.max(1) << 20,
        );
        shipper.set_copy_rate(cfg.move_rate_mb.saturating_mul(1 << 20));
        let loads = super::load::LoadTable::default();
        let map = arc_swap::ArcSwap::from_pointee(RegionMap::new(&file, &name, &Default::default(), &loads));
        ClusterNode {
            name,
            file: RwLock::new(file),
            map,
            db: db.clone(),
            control,
            roles: parking_lot::Mutex::new(()),
            reported: Default::default(),
            fences: Default::default(),
            stale_ranges: Default::default(),
            min_replicas: cfg.min_replicas,
            peers: Peers::new(cfg),
            shipper,
            replica: Replica::new(db.clone(), cfg.dir.join("replica-epochs")),
            mode: Mode::from(cfg.replication),
            last_write: cfg.ack == Ack::LastWrite,
            master_stats: Default::default(),
            region_max_bytes: cfg.cluster_region_max_bytes(),
            loads,
            load_split: super::load::LoadSplit {
                ops: cfg.split_load_ops,
                window: Duration::from_secs(cfg.split_load_secs),
            },
        }
    }

    /// Makes the shipper ship the engine's writes (of the regions it leads).
    fn attach(&self) {
        self.shipper.set_db(&self.db);
        self.db.replication().set_ship_listener(Some(self.shipper.clone()));
    }

    /// Cluster file: opens or creates each region the file gives this node, and takes the
    /// streams of those it is a backup of.
    fn open_regions(&self) -> Result<(), ServerError> {
        let (db, mode) = (&self.db, self.mode);
        let existing: std::collections::HashMap<u32, bool> =
            db.regions().into_iter().map(|r| (r.id, r.backup)).collect();
        for r in &self.file.read().regions {
            let (start, end) = (r.start_bytes(), r.end_bytes());
            let primary = r.primary == self.name;
            if !primary && !r.backups.contains(&self.name) {
                continue;
            }
            let want_backup_region = !primary && mode == Mode::SendIndex;
            match existing.get(&r.id) {
                None if want_backup_region => {
                    db.replication().create_backup_region(r.id, &start, end.as_deref())?;
                }
                None => {
                    db.create_region(r.id, &start, end.as_deref())?;
                }
                Some(&b) if b != want_backup_region && !(b && primary) => {
                    return Err(cerr(format!(
                        "region {} is stored here as a {} region but the cluster file makes this node its {} in {} mode",
                        r.id,
                        if b { "backup" } else { "primary" },
                        if primary { "primary" } else { "backup" },
                        mode.name()
                    )));
                }
                Some(_) => {}
            }
            if !primary {
                self.replica.add_region(r.id, mode, r.epoch).map_err(|e| cerr(e.to_string()))?;
            }
        }
        Ok(())
    }

    /// Cluster file: starts shipping each region the file makes this node the primary of.
    fn ship_led(&self) -> Result<(), ServerError> {
        let db = &self.db;
        let led: Vec<RegionSpec> =
            self.file.read().regions.iter().filter(|r| r.primary == self.name).cloned().collect();
        for r in led {
            if db.regions().iter().any(|i| i.id == r.id && i.backup) {
                return Err(cerr(format!(
                    "region {} is a backup copy here; promote it with `halyard admin promote` instead of editing the file",
                    r.id
                )));
            }
            // A region never written to starts aligned with its (equally empty) backups: the
            // stream queues from the first write. Otherwise each backup gets a full copy.
            let fresh = db.region(r.id)?.lsn() == 0 && db.replication().level_ssts(r.id)?.iter().all(Vec::is_empty);
            let s = self.shipper.add_region(r.id, r.epoch, self.mode, &self.addrs(&r.backups), fresh);
            self.shipper.start(&s, None);
        }
        Ok(())
    }

    fn addrs(&self, names: &[String]) -> Vec<(String, String)> {
        replication_addrs(&self.file.read(), names)
    }
}
