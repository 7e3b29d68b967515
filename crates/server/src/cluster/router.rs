//! The native front end's view of the node ([`Router`]): routing and epoch checks (from
//! `routing.rs`), waiting for backups (`acks.rs`) and for room in their queues, the region map
//! for clients, and Redis commands other nodes forward here.

use super::{ClusterNode, Route};
use crate::native::Router;
use std::future::Future;
use std::pin::Pin;

/// The region a route leads to here, or the message for the client.
fn here(route: Route) -> Result<u32, String> {
    match route {
        Route::Here(r) => Ok(r),
        Route::Elsewhere(m) => Err(m),
    }
}

impl Router for ClusterNode {
    fn route(&self, key: &[u8]) -> Result<u32, String> {
        here(ClusterNode::route(self, key))
    }

    fn wait_acked<'a>(&'a self, writes: &'a [(u32, u64)]) -> Pin<Box<dyn Future<Output = bool> + Send + 'a>> {
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

    fn wait_room<'a>(&'a self, region: u32) -> Pin<Box<dyn Future<Output = ()> + Send + 'a>> {
        Box::pin(self.shipper.wait_room(Some(region)))
    }

    fn check_write(&self, key: &[u8]) -> Result<(), String> {
        ClusterNode::check_write(self, key)
    }

    fn route_last(&self) -> Result<u32, String> {
        here(ClusterNode::route_last(self))
    }

    fn region_map(&self) -> Vec<u8> {
        serde_json::to_vec(&*self.file.read()).unwrap_or_default()
    }

    fn check_epoch(&self, region: u32, epoch: u64) -> Result<(), (halyard_proto::ErrorCode, String)> {
        ClusterNode::check_epoch(self, region, epoch)
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
