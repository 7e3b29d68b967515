//! etcd mode: this node's replication progress (each primary region's LSN and its backups'
//! acknowledgements, each backup region's last received LSN, the regions it leads that are past
//! `--region-max-mb` or hot past `--split-load-ops` with the key that halves each, the
//! requests a second each led region serves), published to etcd every second:
//! the master promotes the backup that holds the most of the log, and `halyard cluster
//! status` shows each region's replication lag.

use super::ClusterNode;
use halyard_control::layout::Progress;
use halyard_control::Session;
use std::sync::Arc;
use std::time::Duration;

/// A region under `--region-max-mb` divided by this may merge (two merged stay under half).
const MERGE_SIZE_DIVISOR: u64 = 4;
/// A region serving at most `--split-load-ops` divided by this may merge.
const MERGE_OPS_DIVISOR: u64 = 10;

impl ClusterNode {
    /// Publishes this node's replication progress every second, when it changed (or the lease
    /// did: the record goes with the lease it was written under).
    pub(super) async fn publish_progress(self: Arc<Self>, session: Arc<Session>) {
        let mut last: Option<(Progress, i64)> = None;
        let mut before: (std::collections::BTreeMap<u32, u64>, std::time::Instant) =
            (Default::default(), std::time::Instant::now());
        loop {
            tokio::time::sleep(Duration::from_secs(1)).await;
            let mut p = self.progress();
            // Writes a second of the regions led here (the master's hot-region balancing).
            let secs = before.1.elapsed().as_secs_f64().max(1e-3);
            for (id, lsn) in &p.lsn {
                let prev = before.0.get(id).copied().unwrap_or(*lsn);
                let rate = (lsn.saturating_sub(prev) as f64 / secs).round() as u64;
                if rate > 0 && self.shipper.leads(*id) {
                    p.writes.insert(*id, rate);
                }
            }
            before = (p.lsn.clone(), std::time::Instant::now());
            self.add_load(&mut p);
            self.add_cold(&mut p);
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

    /// Adds the requests a second of the regions led here and, for those hot for the window,
    /// the key that halves their load (a size split, already there, goes first).
    fn add_load(&self, p: &mut Progress) {
        let cut = crate::keyspace::split_key();
        for (id, rate, key) in self.loads.tick(self.load_split, |k| (cut.0)(k)) {
            if rate > 0 && self.shipper.leads(id) {
                p.ops.insert(id, rate);
            }
            let Some(key) = key.filter(|_| self.shipper.leads(id)) else { continue };
            let at = halyard_cluster::key_text(&key);
            if let std::collections::btree_map::Entry::Vacant(e) = p.splits.entry(id) {
                tracing::info!(region = id, ops_per_sec = rate, at = %at, "region hot: asking for a split by load");
                e.insert(at);
            }
        }
    }

    /// Marks the regions led here that may merge with a neighbour: small and idle enough that
    /// the merged region stays far from splitting again (hysteresis against split/merge
    /// flapping), and not about to split.
    fn add_cold(&self, p: &mut Progress) {
        let max = self.region_max_bytes;
        if max == 0 {
            return;
        }
        for (&id, &size) in &p.sizes {
            let ops = p.ops.get(&id).copied().unwrap_or(0);
            if size < max / MERGE_SIZE_DIVISOR
                && ops <= self.load_split.ops / MERGE_OPS_DIVISOR
                && !p.splits.contains_key(&id)
            {
                p.cold.insert(id);
            }
        }
    }

    /// Backup copies here that span the map's region and the one after it (a merge this node
    /// joined its copies for before the map changed).
    fn add_absorbed(&self, p: &mut Progress) {
        let f = self.file.read();
        for info in self.db.regions().into_iter().filter(|i| i.backup) {
            let Some(mine) = f.region(info.id).filter(|m| m.end_bytes() != info.end) else { continue };
            let Some(end) = mine.end_bytes() else { continue };
            let right = f.regions.iter().find(|x| x.start_bytes() == end && x.end_bytes() == info.end);
            if let Some(x) = right {
                p.absorbed.insert(x.id, info.id);
            }
        }
    }

    /// How far each region held here has come: a primary's LSN and its backups'
    /// acknowledgements, a backup's last received LSN.
    fn progress(&self) -> Progress {
        let mut p = Progress::default();
        let ids: Vec<u32> = self.file.read().regions.iter().map(|r| r.id).collect();
        for id in ids {
            if self.shipper.leads(id) {
                if let Ok(h) = self.db.region(id) {
                    p.lsn.insert(id, h.lsn());
                }
                let links = self.shipper.links(id);
                p.acked.insert(id, links.iter().map(|l| (l.node.clone(), l.acked())).collect());
                let copies: std::collections::BTreeMap<String, (u64, u64)> =
                    links.iter().filter_map(|l| Some((l.node.clone(), l.copy_progress()?))).collect();
                if !copies.is_empty() {
                    p.copies.insert(id, copies);
                }
            } else if let Some(rr) = self.replica.region(id) {
                p.lsn.insert(id, rr.received.load(std::sync::atomic::Ordering::Relaxed));
            }
        }
        self.add_absorbed(&mut p);
        let led: Vec<u32> = p.acked.keys().copied().collect();
        for (id, size, at) in self.db.split_points(&led, self.region_max_bytes).unwrap_or_default() {
            p.sizes.insert(id, size);
            if let Some(at) = at {
                p.splits.insert(id, halyard_cluster::key_text(&at));
            }
        }
        p
    }
}
