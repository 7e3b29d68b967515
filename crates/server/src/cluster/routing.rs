//! Region lookups in this node's map: where a key's requests go ([`ClusterNode::locate`],
//! [`ClusterNode::route`]), the map's regions as requests see them ([`Target`]), whether this
//! node may serve a region it leads now, and whether a write may run (`--min-replicas`).
//!
//! Requests search the map as `map.rs` lays it out, rebuilt whenever the map changes
//! ([`ClusterNode::edit_file`]). The map as the cluster file or etcd gives it
//! (`ClusterNode::file`) stays for the role changes.

use super::map::{refusal, Entry, Located, RegionMap};
use super::{ClusterNode, Route, Target};
use halyard_cluster::ClusterFile;
use halyard_proto::ErrorCode;

impl ClusterNode {
    /// Changes the map (`file`) and the lookups requests make in it, together.
    pub(crate) fn edit_file<T>(&self, edit: impl FnOnce(&mut ClusterFile) -> T) -> T {
        let mut lifted = Vec::new();
        let out = {
            let mut f = self.file.write();
            let out = edit(&mut f);
            let mut fences = self.fences.lock();
            // A fence ends with a map at a higher epoch (the handoff happened, or was rolled back).
            fences.retain(|id, at| {
                let keep = f.region(*id).is_some_and(|r| r.epoch <= *at);
                if !keep {
                    lifted.push(*id);
                }
                keep
            });
            let map = RegionMap::new(&f, &self.name, &fences, &self.loads);
            self.loads.retain(|id| map.by_id(id).is_some_and(|e| e.load.is_some()));
            self.map.store(std::sync::Arc::new(map));
            out
        };
        // The store's fence too (`handoff`), outside the map's locks: it waits for the
        // region's write lock. (A region handed off is a backup or gone here by now.)
        for id in lifted {
            if let Ok(h) = self.db.region(id) {
                h.unfence();
            }
        }
        out
    }

    /// The region of the engine key `key` and whether this node serves it now: one binary
    /// search, no allocation (every Redis command in cluster mode asks, once per key).
    pub fn locate(&self, key: &[u8]) -> Option<Located> {
        self.map.load().find(key).map(|e| Located { id: e.id, local: self.serve(e, key) })
    }

    /// Why this node does not serve the region of `at`: the message of a refusal.
    pub fn refusal(&self, at: &Located) -> String {
        match self.map.load().by_id(at.id) {
            Some(e) => refusal(e),
            None => "the region map changed while the command was routed; retry".into(),
        }
    }

    /// Where requests for `key` go.
    pub fn route(&self, key: &[u8]) -> Route {
        match self.map.load().find(key) {
            Some(e) if self.serve(e, key) => Route::Here(e.id),
            Some(e) => Route::Elsewhere(refusal(e)),
            None => Route::Elsewhere("no region of the cluster covers this key".into()),
        }
    }

    /// Where requests for the last key go: the region reaching the end of the key space.
    pub(crate) fn route_last(&self) -> Route {
        let last = self.map.load().entries.last().filter(|e| e.end.is_none()).map(|e| e.start.clone());
        match last {
            Some(start) => self.route(&start),
            None => Route::Elsewhere("no region of the cluster covers the end of the key space".into()),
        }
    }

    fn target_of(&self, e: &Entry) -> Target {
        Target {
            id: e.id,
            epoch: e.epoch,
            local: self.serving(e),
            primary: e.primary.clone(),
            native: e.native.clone(),
            span: crate::keyspace::Span { start: e.start.clone(), end: e.end.clone() },
        }
    }

    /// Every region of the map, in key order.
    pub fn targets(&self) -> Vec<Target> {
        self.map.load().entries.iter().map(|e| self.target_of(e)).collect()
    }

    /// Region `id` of the map.
    pub fn target(&self, id: u32) -> Option<Target> {
        self.map.load().by_id(id).map(|e| self.target_of(e))
    }

    /// The region of the engine key `key`.
    pub fn target_for(&self, key: &[u8]) -> Option<Target> {
        self.map.load().find(key).map(|e| self.target_of(e))
    }

    /// The regions this node is the primary of in its map.
    pub(crate) fn led_regions(&self) -> Vec<u32> {
        self.map.load().entries.iter().filter(|e| e.mine).map(|e| e.id).collect()
    }

    /// Whether a request at `epoch` for `region` matches this node's map.
    pub(crate) fn check_epoch(&self, region: u32, epoch: u64) -> Result<(), (ErrorCode, String)> {
        match self.map.load().by_id(region) {
            None => Err((ErrorCode::NoRegion, format!("region {region} is not in this node's map"))),
            Some(e) if e.epoch != epoch => Err((
                ErrorCode::StaleEpoch,
                format!("region {region} is at epoch {}, led by {}: refresh the region map", e.epoch, e.primary),
            )),
            Some(_) => Ok(()),
        }
    }

    /// Whether this node may serve `e`: it is the primary in its map and did not fence it for
    /// a handoff, and with etcd only while
    /// its lease certainly holds, is the one the map gave it the region under, and it ships
    /// the region (a promotion has completed here).
    /// Whether this node serves region `e` now, counting a request for `key` when it does.
    fn serve(&self, e: &Entry, key: &[u8]) -> bool {
        let here = self.serving(e);
        if let Some(load) = e.load.as_ref().filter(|_| here) {
            load.record(key);
        }
        here
    }

    fn serving(&self, e: &Entry) -> bool {
        e.mine
            && !e.fenced
            && match &self.control {
                None => true,
                Some(s) => s.holds().is_some_and(|l| e.lease == Some(l)) && self.shipper.leads(e.id),
            }
    }

    /// Whether a write to `key`'s region may run (see [`ClusterNode::check_copies`]).
    pub(crate) fn check_write(&self, key: &[u8]) -> Result<(), String> {
        if self.min_replicas <= 1 {
            return Ok(()); // every group holds its primary: no lookup on the write path
        }
        match self.map.load().find(key) {
            Some(e) => self.copies_ok(e),
            None => Ok(()),
        }
    }

    /// Whether a write to region `id` may run: its group holds at least `min_replicas` copies
    /// (etcd mode; the primary counted).
    pub(crate) fn check_copies(&self, id: u32) -> Result<(), String> {
        if self.min_replicas <= 1 {
            return Ok(());
        }
        match self.map.load().by_id(id) {
            Some(e) => self.copies_ok(e),
            None => Ok(()),
        }
    }

    fn copies_ok(&self, e: &Entry) -> Result<(), String> {
        if e.copies >= self.min_replicas {
            return Ok(());
        }
        Err(format!(
            "region {} holds {} of the {} copies --min-replicas asks for: writes resume once the master adds backups",
            e.id, e.copies, self.min_replicas
        ))
    }
}
