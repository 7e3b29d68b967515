//! Cluster mode (`--cluster-file`, `--node`): this node's share of a static cluster. It hosts
//! every region the file gives it, as primary (takes client requests, ships to its backups)
//! or backup (takes its primary's stream), answers requests for regions it does not lead
//! with `NotLeader` naming the leader, and waits for backups' acknowledgements before
//! answering writes under `last-write`. Promotion (`halyard admin promote`) turns a backup
//! region into a primary region here.

use crate::config::ServerConfig;
use crate::metrics::{counter, gauge, labeled_values};
use crate::ServerError;
use halyard_cluster::{ClusterFile, RegionSpec};
use halyard_engine::Db;
use halyard_replication::{Mode, Msg, Replica, Shipper};
use parking_lot::RwLock;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::metrics::MetricType;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

/// Where a key's requests go.
pub enum Route {
    /// This node leads the region.
    Here(u32),
    /// Another node does: the error message to send.
    Elsewhere(String),
}

/// A region as a request sees it: where to send it.
#[derive(Clone, Debug)]
pub struct Target {
    /// Region id.
    pub id: u32,
    /// The region's epoch in this node's map.
    pub epoch: u64,
    /// This node leads the region and may serve it now.
    pub local: bool,
    /// The primary's name and native address.
    pub primary: String,
    pub native: String,
    /// The region's engine keys.
    pub span: crate::keyspace::Span,
}

/// Connections to the other nodes' native ports, for forwarded Redis commands.
#[derive(Default)]
pub(crate) struct Peers {
    /// What a node sends with AUTH: the cluster secret, else the password (`requirepass`).
    pub(crate) password: Option<String>,
    /// This node's Redis address as clients reach it.
    pub(crate) resp: String,
    clients: parking_lot::Mutex<std::collections::HashMap<String, halyard_client::Client>>,
    /// Runs a command forwarded to this node (set once the Redis side exists).
    pub(crate) exec: std::sync::OnceLock<RespExec>,
}

/// Runs a Redis command forwarded to this node: (region, epoch, RESP version, arguments) to
/// the encoded reply and the writes it made, or the error code and message for the sender.
pub type RespExec = Box<dyn Fn(u32, u64, u8, &[&[u8]]) -> crate::native::RespOutcome + Send + Sync>;

impl Peers {
    pub(crate) fn new(cfg: &ServerConfig) -> Peers {
        let password = cfg.cluster_secret.clone().or_else(|| cfg.requirepass.clone());
        Peers { password, resp: cfg.advertised(&cfg.resp), clients: Default::default(), exec: Default::default() }
    }

    /// The connection to `addr`, opened on first use (the client reconnects by itself).
    async fn client(&self, addr: &str) -> Result<halyard_client::Client, halyard_client::Error> {
        if let Some(c) = self.clients.lock().get(addr) {
            return Ok(c.clone());
        }
        let opts = halyard_client::ClientOptions {
            timeout: Duration::from_secs(5),
            password: self.password.clone(),
            ..Default::default()
        };
        let c = halyard_client::Client::connect(addr, opts).await?;
        self.clients.lock().insert(addr.to_string(), c.clone());
        Ok(c)
    }
}

/// This node's view of the cluster.
pub struct ClusterNode {
    /// This node's name.
    pub name: String,
    pub(crate) file: RwLock<ClusterFile>,
    pub(crate) db: Arc<Db>,
    /// etcd mode: the node's session (its lease is the fencing clock); None with a file.
    pub(crate) control: Option<Arc<halyard_control::Session>>,
    /// Held while the node's roles change (a promotion, applying a new map), so that one never
    /// acts on the state the other is half-way through.
    pub(crate) roles: parking_lot::Mutex<()>,
    /// Silent backups already reported: (region, node, epoch).
    pub(crate) reported: parking_lot::Mutex<std::collections::HashSet<(u32, String, u64)>>,
    /// Copies (the primary counted) a region's group must hold for writes (`--min-replicas`).
    pub(crate) min_replicas: usize,
    /// Connections for forwarded Redis commands.
    pub(crate) peers: Peers,
    /// Ships primary regions to their backups.
    pub shipper: Arc<Shipper>,
    /// Takes streams for backup regions.
    pub replica: Arc<Replica>,
    /// How backups keep their copies.
    pub mode: Mode,
    /// Wait for backups before answering writes.
    pub last_write: bool,
}

impl ClusterNode {
    /// Reads the cluster file, opens or creates this node's regions, and starts shipping its
    /// primary regions (on the current tokio runtime).
    pub fn start(cfg: &ServerConfig, db: Arc<Db>) -> Result<Arc<ClusterNode>, ServerError> {
        let cerr = |m: String| ServerError::Config(m);
        let path = cfg.cluster_file.clone().ok_or_else(|| cerr("no --cluster-file".into()))?;
        let name = cfg.node.clone().ok_or_else(|| cerr("--cluster-file needs --node NAME".into()))?;
        let file = ClusterFile::load(&path).map_err(|e| cerr(e.to_string()))?;
        if file.node(&name).is_none() {
            return Err(cerr(format!("node {name} is not in {}", path.display())));
        }
        let mode = Mode::from(cfg.replication);
        let last_write = cfg.ack == crate::config::Ack::LastWrite;
        let shipper = Shipper::with_queue_limit(
            Duration::from_millis(cfg.ack_timeout_ms.max(1)),
            cfg.replication_queue_mb.max(1) << 20,
        );
        let replica = Replica::new(db.clone(), cfg.dir.join("replica-epochs"));
        let existing: std::collections::HashMap<u32, bool> =
            db.regions().into_iter().map(|r| (r.id, r.backup)).collect();
        for r in &file.regions {
            let (start, end) = (r.start_bytes(), r.end_bytes());
            let primary = r.primary == name;
            if !primary && !r.backups.contains(&name) {
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
                replica.add_region(r.id, mode, r.epoch).map_err(|e| cerr(e.to_string()))?;
            }
        }
        let node = Arc::new(ClusterNode {
            name,
            file: RwLock::new(file),
            db: db.clone(),
            control: None,
            roles: parking_lot::Mutex::new(()),
            reported: Default::default(),
            min_replicas: cfg.min_replicas,
            peers: Peers::new(cfg),
            shipper,
            replica,
            mode,
            last_write,
        });
        node.shipper.set_db(&db);
        db.replication().set_ship_listener(Some(node.shipper.clone()));
        let led: Vec<RegionSpec> =
            node.file.read().regions.iter().filter(|r| r.primary == node.name).cloned().collect();
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
            let s = node.shipper.add_region(r.id, r.epoch, mode, &node.addrs(&r.backups), fresh);
            node.shipper.start(&s, None);
        }
        Ok(node)
    }

    fn addrs(&self, names: &[String]) -> Vec<(String, String)> {
        replication_addrs(&self.file.read(), names)
    }

    /// This node's replication address.
    pub fn replication_addr(&self) -> String {
        self.file.read().node(&self.name).map(|n| n.replication.clone()).unwrap_or_default()
    }

    /// Where requests for `key` go.
    pub fn route(&self, key: &[u8]) -> Route {
        let f = self.file.read();
        match f.region_for(key) {
            Some(r) if r.primary == self.name && self.serving(r) => Route::Here(r.id),
            Some(r) if r.primary == self.name => Route::Elsewhere(format!(
                "region {} (epoch {}): this node's lease lapsed or the region is changing hands; refresh the region map and retry",
                r.id, r.epoch
            )),
            Some(r) => {
                let addr = f.node(&r.primary).map(|n| n.native.as_str()).unwrap_or("?");
                Route::Elsewhere(format!("region {} is led by {} at {addr}", r.id, r.primary))
            }
            None => Route::Elsewhere("no region of the cluster covers this key".into()),
        }
    }

    fn target_of(&self, f: &ClusterFile, r: &RegionSpec) -> Target {
        Target {
            id: r.id,
            epoch: r.epoch,
            local: r.primary == self.name && self.serving(r),
            primary: r.primary.clone(),
            native: f.node(&r.primary).map(|n| n.native.clone()).unwrap_or_default(),
            span: crate::keyspace::Span { start: r.start_bytes(), end: r.end_bytes() },
        }
    }

    /// Every region of the map, in key order.
    pub fn targets(&self) -> Vec<Target> {
        let f = self.file.read();
        let mut t: Vec<Target> = f.regions.iter().map(|r| self.target_of(&f, r)).collect();
        t.sort_by(|a, b| a.span.start.cmp(&b.span.start));
        t
    }

    /// Region `id` of the map.
    pub fn target(&self, id: u32) -> Option<Target> {
        let f = self.file.read();
        f.region(id).map(|r| self.target_of(&f, r))
    }

    /// The region of the engine key `key` and whether this node serves it now, without the
    /// allocations of a [`Target`] (every Redis command in cluster mode asks).
    pub fn region_of(&self, key: &[u8]) -> Option<(u32, bool)> {
        let f = self.file.read();
        f.region_for(key).map(|r| (r.id, r.primary == self.name && self.serving(r)))
    }

    /// The region of the engine key `key`.
    pub fn target_for(&self, key: &[u8]) -> Option<Target> {
        let f = self.file.read();
        f.region_for(key).map(|r| self.target_of(&f, r))
    }

    /// Sends a Redis command to the primary of `t` (another node): the reply as encoded there.
    pub async fn forward(&self, t: &Target, proto: u8, args: &[&[u8]]) -> Result<Vec<u8>, halyard_client::Error> {
        if t.native.is_empty() {
            let message = format!("region {} has no primary with an address yet", t.id);
            return Err(halyard_client::Error::Server { code: halyard_proto::ErrorCode::NotLeader, message });
        }
        let client = self.peers.client(&t.native).await?;
        client.resp(t.id, t.epoch, proto, args).await
    }

    /// The nodes of the map: (name, Redis address), this node's first.
    pub fn resp_nodes(&self) -> Vec<(String, String)> {
        let f = self.file.read();
        let mut out = vec![(self.name.clone(), self.peers.resp.clone())];
        for n in f.nodes.iter().filter(|n| n.name != self.name) {
            if let Some(r) = &n.resp {
                out.push((n.name.clone(), r.clone()));
            }
        }
        out
    }

    /// Whether this node may serve `r`, whose primary it is in its map: always with a file;
    /// under etcd only while its lease certainly holds, is the one the map gave it the region
    /// under, and it ships the region (a promotion has completed here).
    fn serving(&self, r: &RegionSpec) -> bool {
        match &self.control {
            None => true,
            Some(s) => s.holds().is_some_and(|l| r.leases.get(&self.name) == Some(&l)) && self.shipper.leads(r.id),
        }
    }

    /// Waits for the backups of each region to hold the writes up to its LSN; false if a
    /// backup of the group did not acknowledge in time (etcd mode: the writes must not be
    /// acknowledged; with a file, such a backup is given up and the writes go on).
    pub async fn wait_acked(&self, writes: &[(u32, u64)]) -> bool {
        if !self.last_write {
            return true;
        }
        // One wait per region, for its highest LSN (a pipeline lists a region many times).
        let mut latest: Vec<(u32, u64)> = Vec::new();
        for &(r, lsn) in writes {
            match latest.iter_mut().find(|(x, _)| *x == r) {
                Some(e) => e.1 = e.1.max(lsn),
                None => latest.push((r, lsn)),
            }
        }
        for (r, lsn) in latest {
            if self.control.is_some() {
                if let Err(silent) = self.shipper.wait_all_acked(r, lsn).await {
                    self.report_silent(r, silent);
                    return false;
                }
                // A link that stopped ends the wait: a backup removed from the group (the
                // write goes on without it), or every link, because this node no longer leads
                // the region (a primary paused past its lease). Then nobody may hold the write.
                if !self.shipper.leads(r) {
                    return false;
                }
            } else {
                self.shipper.wait_acked(r, lsn).await;
            }
        }
        true
    }

    /// etcd mode: tells the master that these backups of `region` did not acknowledge in time
    /// (once per backup and epoch); the master removes them from the group.
    fn report_silent(&self, region: u32, silent: Vec<String>) {
        let Some(s) = self.control.clone() else { return };
        let Some(epoch) = self.shipper.epoch(region) else { return };
        for node in silent {
            if !self.reported.lock().insert((region, node.clone(), epoch)) {
                continue;
            }
            tracing::warn!(region, backup = %node, epoch, "backup did not acknowledge in time; reporting it to the master");
            let rep = halyard_control::Report { region, node, epoch, by: self.name.clone() };
            let s = s.clone();
            tokio::spawn(async move {
                if let Err(e) = s.report(&rep).await {
                    tracing::warn!("cannot report a silent backup to etcd: {e}");
                }
            });
        }
    }

    /// Whether a write to `key`'s region may run: its group holds at least `min_replicas`
    /// copies (etcd mode; the primary counted).
    pub(crate) fn check_write(&self, key: &[u8]) -> Result<(), String> {
        if self.min_replicas <= 1 {
            return Ok(()); // every group holds its primary: no lookup on the write path
        }
        let f = self.file.read();
        match f.region_for(key) {
            Some(r) if r.backups.len() + 1 < self.min_replicas => Err(format!(
                "region {} holds {} of the {} copies --min-replicas asks for: writes resume once the master adds backups",
                r.id,
                r.backups.len() + 1,
                self.min_replicas
            )),
            _ => Ok(()),
        }
    }

    /// Called (on a blocking thread) when an admin promotes this node for `region`: rebuild
    /// the region as a primary, lead it in this node's view of the file, and start shipping
    /// to the remaining backups, which first remap to this node's segments.
    pub fn promote(&self, region: u32, epoch: u64) -> halyard_replication::Result<(u64, u64)> {
        let _roles = self.roles.lock();
        if self.control.is_some() {
            // The master decided on a map at least as new as this; the remaining backups are
            // the ones in it.
            *self.file.write() = self.fetch_map().map_err(halyard_replication::Error::Rejected)?;
        }
        // The node serves the region only once it is rebuilt: until then its map (what routing
        // reads) still names the old primary, and requests get NotLeader.
        let mut promoted = self.file.read().clone();
        promoted.promote(region, &self.name).map_err(|e| halyard_replication::Error::Rejected(e.to_string()))?;
        let lease = self.control.as_ref().map(|s| s.lease());
        if let Some(r) = promoted.regions.iter_mut().find(|r| r.id == region) {
            r.epoch = epoch;
            if let Some(l) = lease {
                r.leases.insert(self.name.clone(), l);
            }
        }
        let backups = replication_addrs(&promoted, promoted.region(region).map_or(&[][..], |r| &r.backups));
        // Frames queue from here; they go out after the Remap.
        let stream = self.shipper.add_region(region, epoch, self.mode, &backups, true);
        let p = match self.replica.promote_region(region) {
            Ok(p) => p,
            Err(e) => {
                self.shipper.remove_region(region);
                return Err(e);
            }
        };
        let (last, dropped) = (p.last_lsn, p.dropped);
        let maps = match self.mode {
            Mode::SendIndex => self.db.replication().replica_maps(region)?,
            Mode::BuildIndex => Default::default(),
        };
        let first = Some(Msg::Remap {
            epoch,
            region,
            last_lsn: last,
            tails: p.tails,
            log: maps.log.iter().map(|&((p, s), l)| (p, s, l)).collect(),
            index: maps.index,
        });
        *self.file.write() = promoted;
        self.shipper.start(&stream, first);
        tracing::info!(region, epoch, last_lsn = last, dropped, "promoted to primary");
        Ok((last, dropped))
    }
}

impl halyard_replication::NodeHooks for ClusterNode {
    fn promote(&self, region: u32, epoch: u64) -> halyard_replication::Result<(u64, u64)> {
        ClusterNode::promote(self, region, epoch)
    }

    fn leads(&self, region: u32, epoch: u64) -> Option<u64> {
        let f = self.file.read();
        let r = f.region(region)?;
        if r.primary != self.name || r.epoch < epoch || !self.shipper.leads(region) {
            return None;
        }
        self.db.region(region).ok().map(|h| h.lsn())
    }

    /// Hosts a new backup copy of `region` (the primary's full copy follows).
    fn host(&self, region: u32, epoch: u64, start: &[u8], end: Option<&[u8]>) -> halyard_replication::Result<()> {
        let rejected = |m: String| halyard_replication::Error::Rejected(m);
        {
            let f = self.file.read();
            let r = f.region(region).ok_or_else(|| {
                rejected(format!(
                    "region {region} is not in this node's cluster file: restart it with the current file"
                ))
            })?;
            if r.primary == self.name {
                return Err(rejected(format!("{} is the primary of region {region}", self.name)));
            }
            if (r.start_bytes().as_slice(), r.end_bytes().as_deref()) != (start, end) {
                return Err(rejected(format!("region {region}'s key range differs from this node's cluster file")));
            }
        }
        if self.replica.region(region).is_none() {
            let exists = self.db.regions().iter().any(|i| i.id == region);
            if !exists {
                match self.mode {
                    Mode::SendIndex => self.db.replication().create_backup_region(region, start, end)?,
                    Mode::BuildIndex => self.db.create_region(region, start, end)?,
                };
            }
            self.replica.add_region(region, self.mode, epoch)?;
        }
        let mut f = self.file.write();
        if let Some(r) = f.regions.iter_mut().find(|r| r.id == region) {
            if !r.backups.contains(&self.name) {
                r.backups.push(self.name.clone());
            }
        }
        tracing::info!(region, epoch, "hosting a new backup copy; waiting for the primary's full copy");
        Ok(())
    }

    /// Ships `region` to one more backup; returns once the backup was sent its full copy.
    fn add_backup(
        &self,
        region: u32,
        epoch: u64,
        node: &str,
        native: &str,
        replication: &str,
    ) -> halyard_replication::Result<()> {
        let rejected = |m: String| halyard_replication::Error::Rejected(m);
        {
            let f = self.file.read();
            match f.region(region) {
                Some(r) if r.primary == self.name && r.epoch == epoch => {}
                Some(r) if r.primary == self.name => {
                    return Err(rejected(format!("region {region} is at epoch {} here, not {epoch}", r.epoch)))
                }
                _ => return Err(rejected(format!("{} does not lead region {region}", self.name))),
            }
        }
        let link = match self.shipper.link(region, node) {
            Some(l) => l,
            None => {
                self.shipper.set_epoch(region, epoch);
                self.shipper.add_link(region, node, replication)?
            }
        };
        if self.control.is_some() {
            // Under etcd the node is a learner until the master makes it a backup.
            let backup = self.file.read().region(region).is_some_and(|r| r.backups.iter().any(|b| b == node));
            link.set_counted(backup);
        }
        if self.control.is_none() {
            let mut f = self.file.write();
            if f.node(node).is_none() {
                f.nodes.push(halyard_cluster::NodeSpec {
                    name: node.to_string(),
                    native: native.to_string(),
                    replication: replication.to_string(),
                    resp: None,
                });
            }
            if let Some(r) = f.regions.iter_mut().find(|r| r.id == region) {
                r.backups.push(node.to_string());
            }
        }
        tracing::info!(region, backup = node, "added a backup; sending it a full copy");
        let deadline = std::time::Instant::now() + Duration::from_secs(600);
        while !link.is_live() {
            if link.is_stopped() {
                return Err(rejected(format!("{node} cannot be brought up to date (see this node's log)")));
            }
            if std::time::Instant::now() > deadline {
                return Err(rejected(format!("{node} did not take its full copy within 10 minutes; still trying")));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        // The copy is queued; answer once the backup has taken it (it acknowledges the copy's
        // last LSN, or a later one).
        let lsn = self.db.region(region)?.lsn();
        while link.acked() < lsn && link.is_live() {
            if std::time::Instant::now() > deadline {
                return Err(rejected(format!("{node} did not acknowledge its full copy within 10 minutes")));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }
}

/// (name, replication address) of each of `names` that `file` lists.
pub(crate) fn replication_addrs<'a>(
    file: &ClusterFile,
    names: impl IntoIterator<Item = &'a String>,
) -> Vec<(String, String)> {
    names.into_iter().filter_map(|n| Some((n.clone(), file.node(n)?.replication.clone()))).collect()
}

/// Replication's metrics for the registry: what this node shipped as a primary and received
/// as a backup, and each backup's acknowledged LSN.
pub struct ReplicationCollector(pub Arc<ClusterNode>);

impl std::fmt::Debug for ReplicationCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ReplicationCollector")
    }
}

impl Collector for ReplicationCollector {
    fn encode(&self, mut e: DescriptorEncoder<'_>) -> std::fmt::Result {
        self.0.encode_shipped(&mut e)?;
        self.0.encode_backpressure(&mut e)?;
        self.0.encode_received(&mut e)?;
        self.0.encode_acked(&mut e)
    }
}

impl ClusterNode {
    /// What this node queued and wrote to backups, and the bytes both directions moved.
    fn encode_shipped(&self, e: &mut DescriptorEncoder<'_>) -> std::fmt::Result {
        let (st, rs) = (&self.shipper.stats, &self.replica.stats);
        counter(
            e,
            "halyard_replication_shipped_bytes_total",
            "Bytes of frames queued to backups (per backup).",
            st.bytes.load(Relaxed),
        )?;
        counter(e, "halyard_replication_shipped_frames_total", "Frames queued to backups.", st.frames.load(Relaxed))?;
        counter(
            e,
            "halyard_replication_shipped_image_bytes_total",
            "Segment image bytes (SSTs, medium runs) queued to backups before LZ4 packing (per backup).",
            st.image_bytes.load(Relaxed),
        )?;
        counter(
            e,
            "halyard_replication_sent_bytes_total",
            "Replication bytes this node wrote to sockets: frames to backups and acknowledgements to primaries.",
            st.sent.load(Relaxed) + rs.sent.load(Relaxed),
        )?;
        counter(
            e,
            "halyard_replication_socket_received_bytes_total",
            "Replication bytes this node read from sockets: frames from primaries and acknowledgements from backups.",
            rs.bytes.load(Relaxed) + st.received.load(Relaxed),
        )?;
        counter(
            e,
            "halyard_replication_link_failures_total",
            "Backup links that failed.",
            st.broken_links.load(Relaxed),
        )?;
        counter(
            e,
            "halyard_replication_connections_total",
            "Connections opened to backup nodes (one per backup node, carrying all its regions' streams).",
            st.connections.load(Relaxed),
        )?;
        counter(
            e,
            "halyard_replication_socket_writes_total",
            "Writes to backup sockets; shipped frames over this is how many frames one write carries.",
            st.writes.load(Relaxed),
        )?;
        counter(
            e,
            "halyard_replication_catch_ups_total",
            "Full copies sent to returning backups.",
            st.catch_ups.load(Relaxed),
        )
    }

    /// Writers held back by backups' full replication queues.
    fn encode_backpressure(&self, e: &mut DescriptorEncoder<'_>) -> std::fmt::Result {
        let st = &self.shipper.stats;
        counter(
            e,
            "halyard_replication_throttled_waits_total",
            "Times a writer waited for room in a backup's replication queue.",
            st.throttled_waits.load(Relaxed),
        )?;
        counter(
            e,
            "halyard_replication_throttled_seconds_total",
            "Seconds writers spent waiting for room in backups' replication queues.",
            st.throttled_micros.load(Relaxed) as f64 / 1e6,
        )?;
        counter(
            e,
            "halyard_replication_stuck_links_total",
            "Backup links failed because their queue stayed full without draining for the ack timeout.",
            st.stuck_links.load(Relaxed),
        )?;
        gauge(
            e,
            "halyard_replication_full_links",
            "Backup links whose queue is at its bound now.",
            st.full_links.load(Relaxed) as i64,
        )?;
        let f = self.file.read();
        let mut samples = Vec::new();
        for r in f.regions.iter().filter(|r| r.primary == self.name) {
            for l in self.shipper.links(r.id) {
                samples.push(([("region", r.id.to_string()), ("backup", l.node.clone())], l.queued_bytes() as i64));
            }
        }
        labeled_values(
            e,
            "halyard_replication_queued_bytes",
            "Frame bytes queued for a backup and not yet sent.",
            MetricType::Gauge,
            samples,
        )
    }

    /// What this node took from primaries as a backup.
    fn encode_received(&self, e: &mut DescriptorEncoder<'_>) -> std::fmt::Result {
        let rs = &self.replica.stats;
        counter(
            e,
            "halyard_replication_received_bytes_total",
            "Bytes received from primaries.",
            rs.bytes.load(Relaxed),
        )?;
        counter(
            e,
            "halyard_replication_rejected_total",
            "Streams or messages refused (stale epoch, unknown region).",
            rs.rejected.load(Relaxed),
        )?;
        counter(
            e,
            "halyard_replication_unauthenticated_total",
            "Connections to the replication port refused for a missing or wrong cluster secret.",
            rs.unauthenticated.load(Relaxed),
        )
    }

    /// The last LSN each backup of each region this node leads acknowledged.
    fn encode_acked(&self, e: &mut DescriptorEncoder<'_>) -> std::fmt::Result {
        let f = self.file.read();
        let mut samples = Vec::new();
        for r in f.regions.iter().filter(|r| r.primary == self.name) {
            for l in self.shipper.links(r.id) {
                let labels =
                    [("region", r.id.to_string()), ("backup", l.node.clone()), ("live", l.is_live().to_string())];
                samples.push((labels, l.acked()));
            }
        }
        labeled_values(
            e,
            "halyard_replication_acked_lsn",
            "Last LSN each backup acknowledged.",
            MetricType::Gauge,
            samples,
        )
    }
}

use crate::native::Router;

impl Router for ClusterNode {
    fn route(&self, key: &[u8]) -> Result<u32, String> {
        match ClusterNode::route(self, key) {
            Route::Here(r) => Ok(r),
            Route::Elsewhere(m) => Err(m),
        }
    }

    fn wait_acked<'a>(
        &'a self,
        writes: &'a [(u32, u64)],
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = bool> + Send + 'a>> {
        Box::pin(ClusterNode::wait_acked(self, writes))
    }

    fn must_wait(&self, key: &[u8]) -> Option<u32> {
        if !self.shipper.is_full(None) {
            return None;
        }
        match ClusterNode::route(self, key) {
            Route::Here(r) => self.shipper.is_full(Some(r)).then_some(r),
            Route::Elsewhere(_) => None,
        }
    }

    fn wait_room<'a>(&'a self, region: u32) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + 'a>> {
        Box::pin(self.shipper.wait_room(Some(region)))
    }

    fn check_write(&self, key: &[u8]) -> Result<(), String> {
        ClusterNode::check_write(self, key)
    }

    fn route_last(&self) -> Result<u32, String> {
        let last = self.file.read().regions.iter().find(|r| r.end.is_none()).map(|r| r.start_bytes());
        match last {
            Some(start) => Router::route(self, &start),
            None => Err("no region of the cluster covers the end of the key space".into()),
        }
    }

    fn region_map(&self) -> Vec<u8> {
        serde_json::to_vec(&*self.file.read()).unwrap_or_default()
    }

    fn check_epoch(&self, region: u32, epoch: u64) -> Result<(), (halyard_proto::ErrorCode, String)> {
        let f = self.file.read();
        match f.region(region) {
            None => Err((halyard_proto::ErrorCode::NoRegion, format!("region {region} is not in this node's map"))),
            Some(r) if r.epoch != epoch => Err((
                halyard_proto::ErrorCode::StaleEpoch,
                format!("region {region} is at epoch {}, led by {}: refresh the region map", r.epoch, r.primary),
            )),
            Some(_) => Ok(()),
        }
    }

    fn is_cluster_secret(&self, given: &[u8]) -> bool {
        halyard_replication::cluster_secret().is_some() && halyard_replication::is_cluster_secret(given)
    }

    fn resp(&self, region: u32, epoch: u64, proto: u8, args: &[&[u8]]) -> crate::native::RespOutcome {
        match self.peers.exec.get() {
            Some(run) => run(region, epoch, proto, args),
            None => Err((halyard_proto::ErrorCode::ShuttingDown, "this node is starting; retry".into())),
        }
    }
}
