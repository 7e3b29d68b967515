//! The role changes asked of this node over the replication port (by `halyard admin`, or by
//! etcd's master): promotion of a backup copy to primary, hosting a new backup copy, and
//! adding a backup to a region this node leads ([`halyard_replication::NodeHooks`], which also
//! answers whether this node leads a region).

use super::peers::replication_addrs;
use super::ClusterNode;
use halyard_replication::{Mode, Msg};
use std::time::Duration;

impl ClusterNode {
    /// Called (on a blocking thread) when an admin promotes this node for `region`: rebuild
    /// the region as a primary, lead it in this node's view of the file, and start shipping
    /// to the remaining backups, which first remap to this node's segments.
    pub fn promote(&self, region: u32, epoch: u64) -> halyard_replication::Result<(u64, u64)> {
        let t0 = std::time::Instant::now();
        let _roles = self.roles.lock();
        let locked_ms = ms(t0.elapsed());
        if self.control.is_some() {
            // The master decided on a map at least as new as this; the remaining backups are
            // the ones in it.
            let map = self.fetch_map().map_err(halyard_replication::Error::Rejected)?;
            self.edit_file(|f| *f = map);
        }
        let mapped_ms = ms(t0.elapsed());
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
        let (last, dropped, rebuilt_ms) = (p.last_lsn, p.dropped, ms(t0.elapsed()));
        let (maps, levels) = match self.mode {
            Mode::SendIndex => {
                let r = self.db.replication();
                (r.replica_maps(region)?, r.levels_digest(region)?.unwrap_or_default())
            }
            Mode::BuildIndex => Default::default(),
        };
        let first = Some(Msg::Remap {
            epoch,
            region,
            last_lsn: last,
            tails: p.tails,
            log: maps.log.iter().map(|&((p, s), l)| (p, s, l)).collect(),
            index: maps.index,
            levels,
        });
        self.edit_file(|f| *f = promoted);
        self.shipper.start(&stream, first);
        let took_ms = ms(t0.elapsed());
        tracing::info!(
            region,
            epoch,
            last_lsn = last,
            dropped,
            locked_ms,
            mapped_ms,
            rebuilt_ms,
            took_ms,
            "promoted to primary"
        );
        Ok((last, dropped))
    }

    /// Under etcd, when the master asks for a handoff at an epoch of `region` this node's map
    /// has not reached (the master committed the map a moment ago and this node polls it later,
    /// or a split just added the region), takes the current map now. On a blocking thread.
    fn take_map_at(&self, region: u32, epoch: u64) -> Result<(), String> {
        let behind = self.file.read().region(region).is_none_or(|r| r.epoch < epoch);
        if behind && self.control.is_some() {
            self.apply(self.fetch_map()?)?;
        }
        Ok(())
    }

    /// Called (on a blocking thread) when the master hands `region` off: fences it (this node
    /// serves it no more until a map with a higher epoch names it again) and its store's
    /// region (no write appends past the LSN taken then), waits until every backup
    /// acknowledged that LSN, and returns it.
    pub fn handoff(&self, region: u32, epoch: u64) -> halyard_replication::Result<u64> {
        let rejected = |m: String| halyard_replication::Error::Rejected(m);
        self.take_map_at(region, epoch).map_err(rejected)?;
        {
            let f = self.file.read();
            match f.region(region) {
                Some(r) if r.primary == self.name && r.epoch == epoch && self.shipper.leads(region) => {}
                Some(r) if r.primary == self.name => {
                    return Err(rejected(format!("region {region} is at epoch {} here, not {epoch}", r.epoch)))
                }
                _ => return Err(rejected(format!("{} does not lead region {region}", self.name))),
            }
        }
        let h = self.db.region(region)?;
        let t0 = std::time::Instant::now();
        // L0 into L1 first, while the region still serves: the new primary rebuilds only the
        // L0 written since, which is most of the time the handoff keeps the region unavailable.
        if !self.fences.lock().contains_key(&region) {
            h.flush()?;
        }
        let t1 = std::time::Instant::now();
        self.fences.lock().insert(region, epoch);
        self.edit_file(|_| ());
        // Routing refuses the region from here on, but a write that passed routing before may
        // reach the store at any time (it may wait for L0 room): the store's own fence makes
        // the LSN final. (A write appended after the LSN was reported reached backups the new
        // primary's Remap does not reach, and they parted from it.)
        let lsn = h.fence();
        if self.fences.lock().get(&region) != Some(&epoch) {
            // A map past this epoch came meanwhile (`edit_file` lifts fences it ends).
            h.unfence();
            return Err(rejected(format!("region {region}'s map moved past epoch {epoch} during the handoff")));
        }
        let rt = tokio::runtime::Handle::current();
        if let Err(silent) = rt.block_on(self.shipper.wait_all_acked(region, lsn)) {
            return Err(rejected(format!("backups {silent:?} did not acknowledge LSN {lsn} of region {region}")));
        }
        let (flush_ms, fenced_ms) = (ms(t1 - t0), ms(t1.elapsed()));
        tracing::info!(region, epoch, last_lsn = lsn, flush_ms, fenced_ms, "fenced for a handoff");
        Ok(lsn)
    }
}

impl ClusterNode {
    /// Called (on a blocking thread) when the master splits `region`: fences it as for a
    /// handoff, then splits the store at `at` into `child` (its backups follow in the stream;
    /// the child's stream starts to the same backups). Neither half serves until a map names
    /// them at a higher epoch (the child is in no map yet, so its keys still locate the fenced
    /// region). Asked again once split, it only fences. Returns the fenced LSN.
    pub fn split(&self, region: u32, epoch: u64, at: &[u8], child: u32) -> halyard_replication::Result<u64> {
        let lsn = self.handoff(region, epoch)?;
        let split_here = self.db.regions().into_iter().any(|r| r.id == child && r.start == at);
        if !split_here {
            self.db.split_region(region, at, child)?;
            tracing::info!(region, child, epoch, "split the store; waiting for the map");
        }
        Ok(lsn)
    }

    /// Called (on a blocking thread) when the master merges `right` into `region`: fences both
    /// as for a handoff, compacts each until it holds no key beyond its range and no range
    /// delete, merges the store (no data moves), and opens the region's streams again at
    /// `merged_epoch`: each backup joins its copies of the two (Hello's absorb) and takes an
    /// incremental copy. Neither serves until a map names the merged region at `merged_epoch`.
    /// Asked again once merged, it only fences. Returns the merged region's last LSN.
    pub fn merge(
        &self,
        region: u32,
        epoch: u64,
        right: (u32, u64),
        merged_epoch: u64,
    ) -> halyard_replication::Result<u64> {
        let rejected = |m: String| halyard_replication::Error::Rejected(m);
        let (right, right_epoch) = right;
        if !self.db.regions().iter().any(|r| r.id == right) {
            return self.handoff(region, epoch);
        }
        self.handoff(right, right_epoch)?;
        self.handoff(region, epoch)?;
        let t0 = std::time::Instant::now();
        // Everything that can fail before the store merges: after it, the merge must complete.
        let f = self.file.read().clone();
        let (Some(l), Some(r)) = (f.region(region), f.region(right)) else {
            return Err(rejected(format!("regions {region} and {right} are not both in this node's map")));
        };
        let backups = replication_addrs(&f, l.backups.iter().chain(&l.learners));
        for id in [region, right] {
            self.db.compact_region(id)?;
        }
        self.db.merge_regions(region, right).map_err(|e| rejected(e.to_string()))?;
        self.shipper.remove_region(right);
        self.shipper.remove_region(region);
        let stream = self.shipper.add_region(region, merged_epoch, self.mode, &backups, false);
        for link in self.shipper.links(region) {
            link.set_counted(l.backups.contains(&link.node));
        }
        self.shipper.set_absorb(region, halyard_replication::Absorb { right, end: r.end_bytes() });
        self.shipper.start(&stream, None);
        let lsn = self.db.region(region)?.lsn();
        tracing::info!(region, right, merged_epoch, last_lsn = lsn, took = ?t0.elapsed(), "merged the store; waiting for the map");
        Ok(lsn)
    }
}

impl halyard_replication::NodeHooks for ClusterNode {
    fn merge(&self, region: u32, epoch: u64, right: (u32, u64), merged_epoch: u64) -> halyard_replication::Result<u64> {
        ClusterNode::merge(self, region, epoch, right, merged_epoch)
    }

    fn split(&self, region: u32, epoch: u64, at: &[u8], child: u32) -> halyard_replication::Result<u64> {
        ClusterNode::split(self, region, epoch, at, child)
    }

    fn promote(&self, region: u32, epoch: u64) -> halyard_replication::Result<(u64, u64)> {
        ClusterNode::promote(self, region, epoch)
    }

    fn handoff(&self, region: u32, epoch: u64) -> halyard_replication::Result<u64> {
        ClusterNode::handoff(self, region, epoch)
    }

    fn leads(&self, region: u32, epoch: u64) -> Option<u64> {
        // After any promotion under way (it holds the roles lock throughout): a new master
        // retrying the handoff of a master whose term ended must find this node leading, not
        // roll the handoff back over the writes it acknowledges meanwhile. And what this node
        // ships at, not its map: the old master may never have committed the map naming it.
        let _roles = self.roles.lock();
        if self.shipper.epoch(region)? < epoch {
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
        self.edit_file(|f| {
            if let Some(r) = f.regions.iter_mut().find(|r| r.id == region) {
                if !r.backups.contains(&self.name) {
                    r.backups.push(self.name.clone());
                }
            }
        });
        tracing::info!(region, epoch, "hosting a new backup copy; waiting for the primary's copy");
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
            self.edit_file(|f| {
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
            });
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
        // A link that fails meanwhile copies again from the start: keep waiting for it.
        let lsn = self.db.region(region)?.lsn();
        while !(link.is_live() && link.copy_progress().is_none() && link.acked() >= lsn) {
            if link.is_stopped() {
                return Err(rejected(format!("{node} stopped taking region {region}'s copy (see this node's log)")));
            }
            if std::time::Instant::now() > deadline {
                return Err(rejected(format!("{node} did not acknowledge its full copy within 10 minutes")));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }
}

/// A duration in milliseconds with a tenth's precision, for logs.
fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 10_000.0).round() / 10.0
}
