//! etcd mode (`--etcd`): the node's share of a cluster that etcd coordinates. The node
//! registers under a lease ([`halyard_control::Session`]), campaigns for master
//! ([`halyard_control::master::Master`]), and follows the region map: every change of it is
//! applied here ([`ClusterNode::apply`]) by taking up, handing over or dropping roles. The
//! master asks for the two changes that need this node's data (a promotion, a new backup's full
//! copy) over the replication port, as `halyard admin` does with a static file.

use crate::cluster::ClusterNode;
use crate::config::ServerConfig;
use crate::ServerError;
use halyard_cluster::{ClusterFile, RegionSpec};
use halyard_control::{Layout, NodeRecord, Session, View};
use halyard_engine::Db;
use halyard_replication::{Mode, Replica, Shipper};
use parking_lot::RwLock;
use std::sync::Arc;
use std::time::Duration;

/// How often a node reads the region map.
const POLL: Duration = Duration::from_millis(100);

/// One read of the cluster, given up after the lease TTL.
async fn read_view(s: &Session) -> Result<View, String> {
    let mut c = s.client();
    match tokio::time::timeout(s.ttl(), View::load(&mut c, s.layout())).await {
        Ok(r) => r.map_err(|e| e.to_string()),
        Err(_) => Err("etcd did not answer in time".to_string()),
    }
}

impl ClusterNode {
    /// Joins the cluster at `cfg.etcd`: registers this node, takes up the roles the map gives
    /// it under its lease (none right after a start: the master hands them out), and starts
    /// following the map and campaigning for master (on the current runtime).
    pub async fn start_etcd(cfg: &ServerConfig, db: Arc<Db>) -> Result<Arc<ClusterNode>, ServerError> {
        let cerr = |m: String| ServerError::Config(m);
        let name = cfg.node.clone().ok_or_else(|| cerr("--etcd needs --node NAME".into()))?;
        let mode = Mode::from(cfg.replication);
        let last_write = cfg.ack == crate::config::Ack::LastWrite;
        let layout = Layout::new(&cfg.cluster_name);
        let client = halyard_control::session::connect(&cfg.etcd).await.map_err(|e| cerr(e.to_string()))?;
        let record = NodeRecord {
            name: name.clone(),
            native: cfg.advertised(&cfg.listen),
            resp: cfg.advertised(&cfg.resp),
            http: cfg.advertised(&cfg.http),
            replication: cfg.advertised(&cfg.replication_listen),
            version: env!("CARGO_PKG_VERSION").to_string(),
            lease: 0,
        };
        let ttl = Duration::from_secs(cfg.lease_ttl_secs.max(1));
        let session = Session::start(client, layout, record, ttl).await.map_err(|e| cerr(e.to_string()))?;
        let shipper = Shipper::with_queue_limit(
            Duration::from_millis(cfg.ack_timeout_ms.max(1)),
            cfg.replication_queue_mb.max(1) << 20,
        );
        let node = Arc::new(ClusterNode {
            name,
            file: RwLock::new(ClusterFile::default()),
            db: db.clone(),
            control: Some(session.clone()),
            roles: parking_lot::Mutex::new(()),
            reported: Default::default(),
            min_replicas: cfg.min_replicas,
            peers: crate::cluster::Peers::new(cfg),
            shipper,
            replica: Replica::new(db.clone(), cfg.dir.join("replica-epochs")),
            mode,
            last_write,
        });
        node.shipper.set_db(&db);
        db.replication().set_ship_listener(Some(node.shipper.clone()));
        tokio::spawn(node.clone().follow(session.clone()));
        tokio::spawn(node.clone().publish_progress(session.clone()));
        tokio::spawn(halyard_control::master::Master::run(session));
        Ok(node)
    }

    /// The region map as etcd holds it now (called on a blocking thread).
    pub(crate) fn fetch_map(&self) -> Result<ClusterFile, String> {
        let s = self.control.as_ref().ok_or("not in etcd mode")?;
        tokio::runtime::Handle::current().block_on(read_view(s)).map(|v| v.cluster_file())
    }

    /// Reads the map every [`POLL`] and applies each new one (or the same one under a new
    /// lease).
    async fn follow(self: Arc<Self>, session: Arc<Session>) {
        // What was applied last: the map and the lease it was applied under (other keys, such
        // as the nodes' progress records, change the revision every second).
        let mut seen: Option<(ClusterFile, i64)> = None;
        loop {
            match read_view(&session).await {
                Ok(v) => {
                    let now = (v.cluster_file(), session.lease());
                    if seen.as_ref() != Some(&now) {
                        let file = now.0.clone();
                        seen = Some(now);
                        let me = self.clone();
                        match tokio::task::spawn_blocking(move || me.apply(file)).await {
                            Ok(Ok(())) => {}
                            Ok(Err(e)) => {
                                tracing::warn!("applying the region map: {e}; retrying");
                                seen = None;
                            }
                            Err(e) => tracing::error!("applying the region map failed: {e}"),
                        }
                    }
                }
                Err(e) => tracing::warn!("reading the region map: {e}"),
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Publishes this node's replication progress every second, when it changed (or the lease
    /// did: the record goes with the lease it was written under).
    async fn publish_progress(self: Arc<Self>, session: Arc<Session>) {
        let mut last: Option<(halyard_control::layout::Progress, i64)> = None;
        loop {
            tokio::time::sleep(Duration::from_secs(1)).await;
            let p = self.progress();
            let now = Some((p.clone(), session.lease()));
            if now == last {
                continue;
            }
            match session.publish_progress(&p).await {
                Ok(()) => last = now,
                Err(e) => tracing::debug!("publishing replication progress: {e}"),
            }
        }
    }

    /// How far each region held here has come: a primary's LSN and its backups'
    /// acknowledgements, a backup's last received LSN.
    fn progress(&self) -> halyard_control::layout::Progress {
        let mut p = halyard_control::layout::Progress::default();
        let ids: Vec<u32> = self.file.read().regions.iter().map(|r| r.id).collect();
        for id in ids {
            if self.shipper.leads(id) {
                if let Ok(h) = self.db.region(id) {
                    p.lsn.insert(id, h.lsn());
                }
                let acked = self.shipper.links(id).iter().map(|l| (l.node.clone(), l.acked())).collect();
                p.acked.insert(id, acked);
            } else if let Some(rr) = self.replica.region(id) {
                p.lsn.insert(id, rr.received.load(std::sync::atomic::Ordering::Relaxed));
            }
        }
        p
    }

    /// Brings this node's roles in line with `map`: lead what it names this node primary of
    /// under its current lease, keep copies of what it names it a backup of, and let go of
    /// everything else. A promotion is left to the master's request (it rebuilds the region
    /// from the replicated logs first).
    pub fn apply(&self, map: ClusterFile) -> Result<(), String> {
        let _roles = self.roles.lock();
        let lease = self.control.as_ref().map_or(0, |s| s.lease());
        *self.file.write() = map.clone();
        for r in &map.regions {
            let member = r.leases.get(&self.name) == Some(&lease);
            // A map older than the epoch this node leads at (read before the promotion it was
            // just asked for) changes nothing of the region here.
            let led_at = self.shipper.epoch(r.id);
            if led_at.is_some_and(|e| e > r.epoch) {
                continue;
            }
            let (leads, backs) = (led_at.is_some(), self.replica.region(r.id).is_some());
            if member && r.primary == self.name {
                if leads {
                    self.sync_links(&map, r);
                } else if !backs {
                    self.lead(&map, r)?;
                }
            } else if member && (r.backups.contains(&self.name) || r.learners.contains(&self.name)) {
                if leads {
                    tracing::warn!(region = r.id, epoch = r.epoch, "no longer primary here; becoming a backup");
                    self.shipper.remove_region(r.id);
                }
                if leads || !backs {
                    self.host_copy(r)?;
                }
            } else {
                if leads {
                    tracing::warn!(
                        region = r.id,
                        epoch = r.epoch,
                        "no longer in the region's group; stopped leading it"
                    );
                    self.shipper.remove_region(r.id);
                }
                if backs {
                    self.replica.remove_region(r.id);
                }
            }
        }
        Ok(())
    }

    /// Ships the region to exactly the backups and learners the map names, at the map's
    /// epoch; writes wait for the backups only.
    fn sync_links(&self, map: &ClusterFile, r: &RegionSpec) {
        self.shipper.set_epoch(r.id, r.epoch);
        let members = || r.backups.iter().chain(&r.learners);
        for l in self.shipper.links(r.id) {
            if !members().any(|m| *m == l.node) {
                self.shipper.remove_link(r.id, &l.node);
            }
        }
        for b in members() {
            let link = match self.shipper.link(r.id, b) {
                Some(l) => Some(l),
                None => map.node(b).and_then(|n| match self.shipper.add_link(r.id, b, &n.replication) {
                    Ok(l) => Some(l),
                    Err(e) => {
                        tracing::warn!(region = r.id, backup = %b, "cannot ship to the new backup: {e}");
                        None
                    }
                }),
            };
            if let Some(l) = link {
                l.set_counted(r.backups.contains(b));
            }
        }
    }

    /// Starts leading a region the master assigned (new, or the only copy come back): its
    /// backups get a full copy unless nothing was ever written.
    fn lead(&self, map: &ClusterFile, r: &RegionSpec) -> Result<(), String> {
        let (start, end) = (r.start_bytes(), r.end_bytes());
        match self.db.regions().into_iter().find(|i| i.id == r.id) {
            None => {
                self.db.create_region(r.id, &start, end.as_deref()).map_err(|e| e.to_string())?;
            }
            Some(i) if i.backup => {
                return Err(format!(
                    "region {} is a backup copy here but the map makes this node its primary without a promotion",
                    r.id
                ))
            }
            Some(_) => {}
        }
        let fresh = self.db.region(r.id).map_err(|e| e.to_string())?.lsn() == 0
            && self.db.replication().level_ssts(r.id).map_err(|e| e.to_string())?.iter().all(Vec::is_empty);
        let backups = crate::cluster::replication_addrs(map, r.backups.iter().chain(&r.learners));
        let s = self.shipper.add_region(r.id, r.epoch, self.mode, &backups, fresh);
        for l in self.shipper.links(r.id) {
            l.set_counted(r.backups.contains(&l.node));
        }
        self.shipper.start(&s, None);
        tracing::info!(region = r.id, epoch = r.epoch, fresh, "leading region");
        Ok(())
    }

    /// Becomes a backup of the region: an empty (or stale) copy the primary's full copy fills.
    fn host_copy(&self, r: &RegionSpec) -> Result<(), String> {
        let (start, end) = (r.start_bytes(), r.end_bytes());
        let e = |e: halyard_engine::Error| e.to_string();
        match self.db.regions().into_iter().find(|i| i.id == r.id) {
            None => match self.mode {
                Mode::SendIndex => self.db.replication().create_backup_region(r.id, &start, end.as_deref()).map(drop),
                Mode::BuildIndex => self.db.create_region(r.id, &start, end.as_deref()).map(drop),
            }
            .map_err(e)?,
            Some(i) if !i.backup && self.mode == Mode::SendIndex => {
                self.db.replication().demote_to_backup(r.id).map_err(e)?;
            }
            Some(_) => {}
        }
        self.replica.add_region(r.id, self.mode, r.epoch).map_err(|e| e.to_string())?;
        tracing::info!(region = r.id, epoch = r.epoch, "backup of region; waiting for the primary's full copy");
        Ok(())
    }
}
