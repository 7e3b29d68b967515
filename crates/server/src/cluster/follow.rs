//! etcd mode: following the region map. The node reads the map every [`POLL`] and applies
//! each new one ([`ClusterNode::apply`]): it leads what the map names it primary of under its
//! current lease, keeps copies of what it names it a backup (or learner) of, and lets go of
//! everything else. The changes that need this node's data (a promotion, a new backup's full
//! copy) the master asks for over the replication port instead (`roles.rs`).

use super::peers::replication_addrs;
use super::ClusterNode;
use halyard_cluster::{ClusterFile, RegionSpec};
use halyard_control::{Session, View};
use halyard_replication::Mode;
use std::sync::Arc;
use std::time::Duration;

/// How often a node reads the region map.
const POLL: Duration = Duration::from_millis(100);

/// Longest a node shutting down waits for the master to take it out of every group.
const LEAVE_TIMEOUT: Duration = Duration::from_secs(30);

/// One read of the cluster, given up after the lease TTL.
async fn read_view(s: &Session) -> Result<View, String> {
    let mut c = s.client();
    match tokio::time::timeout(s.ttl(), View::load(&mut c, s.layout())).await {
        Ok(r) => r.map_err(|e| e.to_string()),
        Err(_) => Err("etcd did not answer in time".to_string()),
    }
}

impl ClusterNode {
    /// The region map as etcd holds it now (called on a blocking thread).
    pub(super) fn fetch_map(&self) -> Result<ClusterFile, String> {
        let s = self.control.as_ref().ok_or("not in etcd mode")?;
        tokio::runtime::Handle::current().block_on(read_view(s)).map(|v| v.cluster_file())
    }

    /// etcd mode, on shutdown: marks this node as leaving, so that the master hands its
    /// primaries to backups and takes it out of every group, waits (up to [`LEAVE_TIMEOUT`])
    /// until no group counts on it, then gives its lease back. A region this node holds the
    /// only copy of stays with it (nothing to hand it to).
    pub async fn leave(self: &Arc<Self>) {
        let Some(s) = self.control.clone() else { return };
        let t0 = std::time::Instant::now();
        if let Err(e) = s.leave().await {
            tracing::warn!("cannot mark this node as leaving in etcd: {e}; its regions fail over");
        }
        let me = self.name.as_str();
        // A region whose only copy this node holds stays with it.
        let counted_on = |r: &halyard_control::RegionRecord| {
            r.spec.has_member(me) && !(r.spec.primary == me && r.spec.backups.is_empty())
        };
        loop {
            match read_view(&s).await {
                Ok(v) if !v.regions.values().any(|(r, _)| counted_on(r)) => {
                    let (me, map) = (self.clone(), v.cluster_file());
                    let _ = tokio::task::spawn_blocking(move || me.keep_handed_off(&map)).await;
                    break;
                }
                Ok(_) => {}
                Err(e) => tracing::warn!("leaving: reading the region map: {e}"),
            }
            if t0.elapsed() > LEAVE_TIMEOUT {
                tracing::warn!("leaving: groups still count on this node after {LEAVE_TIMEOUT:?}; stopping anyway (they fail over)");
                break;
            }
            tokio::time::sleep(POLL).await;
        }
        match s.revoke().await {
            Ok(()) => tracing::info!(took = ?t0.elapsed(), "left the cluster: primaries handed off, lease given back"),
            Err(e) => tracing::warn!("cannot give the lease back: {e}; it expires by itself"),
        }
    }

    /// Reads the map every [`POLL`] and applies each new one (or the same one under a new
    /// lease).
    pub(super) async fn follow(self: Arc<Self>, session: Arc<Session>) {
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

    /// Brings this node's roles in line with `map`: lead what it names this node primary of
    /// under its current lease, keep copies of what it names it a backup of, and let go of
    /// everything else. A promotion is left to the master's request (it rebuilds the region
    /// from the replicated logs first).
    pub fn apply(&self, map: ClusterFile) -> Result<(), String> {
        let _roles = self.roles.lock();
        let lease = self.control.as_ref().map_or(0, |s| s.lease());
        self.edit_file(|f| *f = map.clone());
        for r in &map.regions {
            let member = r.leases.get(&self.name) == Some(&lease);
            // A map older than the epoch this node leads at (read before the promotion it was
            // just asked for) changes nothing of the region here.
            let led_at = self.shipper.epoch(r.id);
            if led_at.is_some_and(|e| e > r.epoch) {
                continue;
            }
            // A region this node merged into its neighbour (fenced, gone from the store) waits
            // for the map that no longer names it.
            if self.fences.lock().get(&r.id).is_some_and(|&at| at >= r.epoch) && self.db.region(r.id).is_err() {
                continue;
            }
            let (leads, backs) = (led_at.is_some(), self.replica.region(r.id).is_some());
            if member && r.primary == self.name {
                if leads {
                    self.sync_links(&map, r);
                } else if !backs {
                    self.lead(&map, r)?;
                }
                self.wake(r.id);
            } else if member && (r.backups.contains(&self.name) || r.learners.contains(&self.name)) {
                if leads {
                    tracing::warn!(region = r.id, epoch = r.epoch, "no longer primary here; becoming a backup");
                    self.shipper.remove_region(r.id);
                }
                if leads || !backs {
                    self.host_copy(&map, r)?;
                }
                self.wake(r.id);
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
                // Moved away (the map names this node nowhere in the group, under any lease):
                // the copy's space goes back. A node the map still names under an old lease
                // keeps its copy (it may be the only one, which leads again), and so does one
                // whose place is kept while it is away (it catches up incrementally on return).
                if !r.has_member(&self.name) && !r.away.contains_key(&self.name) {
                    self.drop_copy(r.id)?;
                }
            }
        }
        Ok(())
    }

    /// Lets the store's background work at a region this node opened quiet (it led the region
    /// before it started) once the map gave it its role there: as primary, or as a backup
    /// whose copy was demoted or is being brought up to date.
    fn wake(&self, region: u32) {
        // A region the store does not hold (a copy still to come) has nothing to wake.
        let _ = self.db.wake_region(region);
    }

    /// A leaving node's regions it handed off, whose places the map keeps while it is away:
    /// made backup copies keeping what they hold once every handoff is done (not during them:
    /// it waits for a running compaction, holding the roles a handoff takes). Left primary
    /// regions, they would compact and collect garbage when the node starts again, before the
    /// map is applied, dropping segments their new primaries never hear of, which the
    /// incremental copies on return would send again.
    fn keep_handed_off(&self, map: &ClusterFile) {
        let _roles = self.roles.lock();
        if self.mode != Mode::SendIndex {
            return;
        }
        for r in map.regions.iter().filter(|r| r.away.contains_key(&self.name) && !self.shipper.leads(r.id)) {
            if !self.db.regions().iter().any(|i| i.id == r.id && !i.backup) {
                continue;
            }
            match self.db.replication().demote_keeping(r.id) {
                Ok(()) => tracing::info!(region = r.id, "handed off while leaving: kept as a backup copy"),
                Err(e) => tracing::warn!(region = r.id, "keeping a handed-off region as a backup copy: {e}"),
            }
        }
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
                self.clear_way(map, r)?;
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
        let backups = replication_addrs(map, r.backups.iter().chain(&r.learners));
        let s = self.shipper.add_region(r.id, r.epoch, self.mode, &backups, fresh);
        for l in self.shipper.links(r.id) {
            l.set_counted(r.backups.contains(&l.node));
        }
        self.shipper.start(&s, None);
        tracing::info!(region = r.id, epoch = r.epoch, fresh, "leading region");
        Ok(())
    }

    /// Frees the space of this node's copy of a region it no longer holds (Send-Index: the
    /// region stays as an empty backup entry; Build-Index copies are left as they are).
    fn drop_copy(&self, id: u32) -> Result<(), String> {
        if self.mode != Mode::SendIndex {
            return Ok(());
        }
        let rep = self.db.replication();
        // A region this node never held has nothing to drop; one it led, even empty, goes
        // (left as a primary region, it would stay in the way of any region later placed over
        // its range: `clear_way` clears backup copies only).
        let held = match rep.region_bytes(id) {
            Ok(b) => b > 0 || self.db.regions().iter().any(|i| i.id == id && !i.backup),
            Err(_) => false,
        };
        if held {
            rep.demote_to_backup(id).map_err(|e| e.to_string())?;
            tracing::info!(region = id, "no longer in the region's group: dropped this node's copy");
        }
        Ok(())
    }

    /// Drops the backup copies this node keeps of regions `map` does not name it for whose
    /// ranges overlap `r`'s: the other side of a merge or split that happened while this node
    /// held no place in them (left as empty backup entries by `drop_copy`), which would
    /// otherwise keep `r` from being created here ("region N overlaps region M").
    fn clear_way(&self, map: &ClusterFile, r: &RegionSpec) -> Result<(), String> {
        let (start, end) = (r.start_bytes(), r.end_bytes());
        let overlaps = |o: &halyard_engine::RegionInfo| {
            end.as_ref().is_none_or(|e| o.start < *e) && o.end.as_ref().is_none_or(|oe| start < *oe)
        };
        // Its place kept while it was away counts: the copy catches up on its return.
        let mine =
            |id: u32| map.region(id).is_some_and(|x| x.has_member(&self.name) || x.away.contains_key(&self.name));
        for o in self.db.regions().into_iter().filter(|o| o.id != r.id && o.backup && overlaps(o)) {
            if mine(o.id) {
                self.narrow_missed_split(map, &o, r)?;
                continue;
            }
            self.replica.remove_region(o.id);
            self.db.replication().drop_backup_region(o.id).map_err(|e| e.to_string())?;
            tracing::info!(region = o.id, "dropped a copy no longer held here, in the way of region {}", r.id);
        }
        Ok(())
    }

    /// Narrows this node's backup copy `o` to the range the map gives its region when the map's
    /// range no longer overlaps `r`: its primary split it while this node's stream was down, and
    /// the split's frame never came (the catch-up that follows aligns the copy's contents). A
    /// frame merely late splits the copy by itself, so the copy is narrowed only after it stayed
    /// in the way for `MISSED_SPLIT_AFTER` (a frame arriving later still breaks its stream, whose
    /// next session catches the copy up).
    fn narrow_missed_split(
        &self,
        map: &ClusterFile,
        o: &halyard_engine::RegionInfo,
        r: &RegionSpec,
    ) -> Result<(), String> {
        const MISSED_SPLIT_AFTER: std::time::Duration = std::time::Duration::from_secs(3);
        let Some(spec) = map.region(o.id) else { return Ok(()) };
        let (start, end) = (spec.start_bytes(), spec.end_bytes());
        let clear_of_r =
            end.as_ref().is_some_and(|e| *e <= r.start_bytes()) || r.end_bytes().is_some_and(|re| start >= re);
        let within = start >= o.start
            && match (&end, &o.end) {
                (Some(e), Some(oe)) => e <= oe,
                (_, None) => true,
                (None, Some(_)) => false,
            };
        if !clear_of_r || !within {
            return Ok(());
        }
        let since = *self.stale_ranges.lock().entry(o.id).or_insert_with(std::time::Instant::now);
        if since.elapsed() < MISSED_SPLIT_AFTER {
            return Ok(());
        }
        if self.split_missed(o, (&start, end.as_deref()), r)? {
            return Ok(());
        }
        self.db.replication().set_backup_range(o.id, &start, end.as_deref()).map_err(|e| e.to_string())?;
        self.stale_ranges.lock().remove(&o.id);
        tracing::warn!(
            region = o.id,
            "narrowed this copy to its region's range: its primary split it while it was away"
        );
        Ok(())
    }

    /// When `r` is exactly the part its primary split off copy `o` (whose region the map now
    /// gives `range`): splits the copy there as a backup splits with its primary, so that `r`
    /// starts with the segments both halves share and its incremental copy sends only what
    /// differs (narrowed instead, `r` would take a full copy). The split's LSN is this copy's
    /// own: the incremental copies of both halves replace the range deletes it adds.
    fn split_missed(
        &self,
        o: &halyard_engine::RegionInfo,
        range: (&[u8], Option<&[u8]>),
        r: &RegionSpec,
    ) -> Result<bool, String> {
        let at = r.start_bytes();
        let rest = o.start.as_slice() == range.0 && range.1 == Some(at.as_slice()) && r.end_bytes() == o.end;
        if !rest || self.mode != Mode::SendIndex || self.replica.region(o.id).is_some_and(|x| x.is_copying()) {
            return Ok(false);
        }
        let lsn = self.db.region(o.id).map_err(|e| e.to_string())?.lsn();
        self.db.replication().backup_split(o.id, &at, lsn, r.id).map_err(|e| e.to_string())?;
        self.stale_ranges.lock().remove(&o.id);
        tracing::warn!(region = o.id, child = r.id, "split this copy where its primary split it while it was away");
        Ok(true)
    }

    /// Becomes a backup of the region: an empty, stale or earlier copy the primary's copy
    /// (full, or incremental when this node holds some of it) brings up to date.
    fn host_copy(&self, map: &ClusterFile, r: &RegionSpec) -> Result<(), String> {
        let (start, end) = (r.start_bytes(), r.end_bytes());
        let e = |e: halyard_engine::Error| e.to_string();
        if self.db.regions().iter().all(|i| i.id != r.id) {
            self.clear_way(map, r)?;
        }
        match self.db.regions().into_iter().find(|i| i.id == r.id) {
            None => match self.mode {
                Mode::SendIndex => self.db.replication().create_backup_region(r.id, &start, end.as_deref()).map(drop),
                Mode::BuildIndex => self.db.create_region(r.id, &start, end.as_deref()).map(drop),
            }
            .map_err(e)?,
            // It led the region (a handoff, or a failover while it was down): what it holds
            // stays, and the new primary's copy sends only what differs.
            Some(i) if !i.backup && self.mode == Mode::SendIndex => {
                self.db.replication().demote_keeping(r.id).map_err(e)?;
            }
            Some(_) => {}
        }
        self.replica.add_region(r.id, self.mode, r.epoch).map_err(|e| e.to_string())?;
        tracing::info!(region = r.id, epoch = r.epoch, "backup of region; waiting for the primary's copy");
        Ok(())
    }
}
