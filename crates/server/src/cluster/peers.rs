//! The other nodes of the cluster: their addresses in the map, the connections to their
//! native ports ([`Peers`]), and a Redis command forwarded over one to a region's primary.

use super::{ClusterNode, Peers, Target};
use crate::config::ServerConfig;
use halyard_cluster::ClusterFile;
use std::time::Duration;

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

impl ClusterNode {
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

    /// This node's replication address.
    pub fn replication_addr(&self) -> String {
        self.file.read().node(&self.name).map(|n| n.replication.clone()).unwrap_or_default()
    }
}

/// (name, replication address) of each of `names` that `file` lists.
pub(super) fn replication_addrs<'a>(
    file: &ClusterFile,
    names: impl IntoIterator<Item = &'a String>,
) -> Vec<(String, String)> {
    names.into_iter().filter_map(|n| Some((n.clone(), file.node(n)?.replication.clone()))).collect()
}
