//! A Halyard server spoken to in its native protocol, through `halyard-client`.

#![expect(clippy::indexing_slicing, reason = "replies are indexed per request of the batch that produced them")]

use super::api::{bench_thread, Engine, EngineConfig, EngineStats};
use super::server::{remote_probe, Probe};
use crate::args::Target;
use halyard_client::{blocking::ClusterClient as Client, ClientOptions};
use std::ops::Bound;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

/// One region-aware client per bench thread (against a single node it sends everything there;
/// against a cluster node it reads the region map and sends each request to its region's
/// primary). A client multiplexes its clones onto one connection per node; separate clients
/// give each thread its own connections, like the RESP engine, so that the two protocols are
/// compared with the same number of connections.
pub(super) struct Native {
    clients: Vec<Client>,
    url: String,
    probe: Probe,
    /// Writes whose outcome is unknown: the cluster ran them without its backups confirming
    /// them (`OutcomeUnknown`), or their connection failed after they were sent (a node
    /// killed). Counted (`outcome_unknown_writes` in the phase's engine counters) and not
    /// retried, so that a moment of a region changing hands or a failover does not end the run.
    unknown: AtomicU64,
}

impl Native {
    pub(super) fn connect(t: &Target, cfg: &EngineConfig) -> Result<Native, String> {
        let opts =
            ClientOptions { timeout: Duration::from_secs(60), password: cfg.password.clone(), ..Default::default() };
        let clients = (0..cfg.threads.max(1))
            .map(|_| Client::connect(&[t.addr.as_str()], opts.clone()).map_err(|e| format!("connect {}: {e}", t.url)))
            .collect::<Result<Vec<_>, _>>()?;
        let probe = remote_probe(true, cfg.metrics.as_deref());
        Ok(Native { clients, url: t.url.clone(), probe, unknown: AtomicU64::new(0) })
    }

    fn client(&self) -> &Client {
        &self.clients[bench_thread() % self.clients.len()]
    }
}

impl Engine for Native {
    fn put(&self, key: &[u8], value: &[u8]) -> Result<(), String> {
        match self.client().put(key, value) {
            Err(e) if e.outcome_unknown() => {
                self.unknown.fetch_add(1, Relaxed);
                Ok(())
            }
            r => r.map_err(|e| e.to_string()),
        }
    }

    fn get(&self, key: &[u8]) -> Result<Option<usize>, String> {
        self.client().get(key).map(|v| v.map(|v| v.len())).map_err(|e| e.to_string())
    }

    fn scan(&self, start: &[u8], len: usize) -> Result<(usize, u64), String> {
        let pairs =
            self.client().scan(Bound::Included(start), Bound::Unbounded, len, false).map_err(|e| e.to_string())?;
        let bytes = pairs.iter().map(|(k, v)| (k.len() + v.len()) as u64).sum();
        Ok((pairs.len(), bytes))
    }

    fn stats(&self) -> EngineStats {
        let mut s = self.probe.stats();
        s.counters.insert("outcome_unknown_writes".into(), self.unknown.load(Relaxed));
        s
    }

    fn settings(&self) -> Vec<(String, String)> {
        vec![
            ("server".into(), format!("Halyard at {}", self.url)),
            (
                "protocol".into(),
                "native, one region-aware halyard-client blocking::ClusterClient (own connections) per bench thread"
                    .into(),
            ),
            ("connections".into(), self.clients.len().to_string()),
            ("scans".into(), "scan(start, unbounded, limit): pages across regions until limit pairs".into()),
            ("server_measures".into(), self.probe.describe()),
            ("budgets".into(), "the server's own settings (--cache-mb etc. do not apply)".into()),
        ]
    }

    fn halyard_server(&self) -> bool {
        true
    }
}
