//! A node's membership in the cluster: an etcd lease, kept alive, with its node key bound to it.
//!
//! **Fencing clock.** The node may act as a primary only while its lease is certainly alive at
//! etcd. Each keep-alive is timed from when it was *sent*: etcd restarts the lease's TTL when
//! it processes the request, later than that, so the lease lives at least until
//! `sent + TTL`. The node stops at `sent + TTL - margin` (a tenth of the TTL, at least
//! 100 ms, for clock-rate drift and scheduling), before etcd can expire the lease, and the
//! master acts only once etcd has deleted the node key: the old primary has stopped before a
//! new one starts.
//!
//! A lease that etcd expired is never revived: the node registers again under a new lease, and
//! the master treats the old lease's roles as lost (the region map records the lease of every
//! member of a region's group).

use crate::etcd::{Client, ConnectOptions, PutOptions, Txn, TxnOp};
use crate::layout::{Layout, NodeRecord};
use crate::Result;
use parking_lot::Mutex;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// A node's session with etcd.
pub struct Session {
    client: Client,
    layout: Layout,
    record: NodeRecord,
    ttl: Duration,
    /// The current lease and until when it certainly holds.
    state: Mutex<(i64, Instant)>,
    /// The current lease id, for tasks that must notice a new lease.
    changed: watch::Sender<i64>,
    /// The node gave its lease back: it does not register again.
    ended: std::sync::atomic::AtomicBool,
    /// A storage node: registered under `storage/`, with no member record.
    storage: bool,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session").field("node", &self.record.name).field("lease", &self.state.lock().0).finish()
    }
}

/// Connects to etcd at `endpoints` (no request is sent yet).
pub async fn connect(endpoints: &[String]) -> Result<Client> {
    // No per-request timeout: a campaign waits as long as another node leads. Callers bound
    // the requests that must not hang.
    let opts = ConnectOptions::new()
        .with_connect_timeout(Duration::from_secs(2))
        .with_keep_alive(Duration::from_secs(1), Duration::from_secs(2));
    Ok(Client::connect(endpoints, Some(opts)).await?)
}

impl Session {
    /// Registers the node (`record`, its `lease` ignored) under a new lease of `ttl` (whole
    /// seconds, at least one) and keeps the lease alive from a background task.
    pub async fn start(client: Client, layout: Layout, record: NodeRecord, ttl: Duration) -> Result<Arc<Session>> {
        Session::start_as(client, layout, record, ttl, false).await
    }

    /// [`Session::start`] for a storage node: its key is `storage/<name>`, where processing
    /// nodes under `--storage remote` find it, and the master never gives it a region.
    pub async fn start_storage(
        client: Client,
        layout: Layout,
        record: NodeRecord,
        ttl: Duration,
    ) -> Result<Arc<Session>> {
        Session::start_as(client, layout, record, ttl, true).await
    }

    async fn start_as(
        client: Client,
        layout: Layout,
        record: NodeRecord,
        ttl: Duration,
        storage: bool,
    ) -> Result<Arc<Session>> {
        let ttl = Duration::from_secs(ttl.as_secs().max(1));
        let (changed, _) = watch::channel(0);
        if crate::operate::is_removed(&mut client.clone(), &layout, &record.name).await? {
            return Err(crate::Error::Invalid(format!(
                "node {} was removed from the cluster (`halyard cluster remove`): it may not rejoin under that name; start a node with another --node and an empty --dir",
                record.name
            )));
        }
        let s = Arc::new(Session {
            client,
            layout,
            record,
            ttl,
            state: Mutex::new((0, Instant::now())),
            changed,
            ended: Default::default(),
            storage,
        });
        s.register().await?;
        tokio::spawn(s.clone().keep());
        Ok(s)
    }

    /// The node's name.
    pub fn name(&self) -> &str {
        &self.record.name
    }

    /// The node's addresses as registered.
    pub fn record(&self) -> &NodeRecord {
        &self.record
    }

    /// A client on the same connection.
    pub fn client(&self) -> Client {
        self.client.clone()
    }

    /// The cluster's layout.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// The lease TTL.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// The current lease if it certainly holds now.
    pub fn holds(&self) -> Option<i64> {
        let (lease, until) = *self.state.lock();
        (lease != 0 && Instant::now() < until).then_some(lease)
    }

    /// The lease the node registered last (it may have lapsed).
    pub fn lease(&self) -> i64 {
        self.state.lock().0
    }

    /// Resolves when the session changes lease (the old one lapsed).
    pub async fn lease_changed(&self, from: i64) {
        let mut rx = self.changed.subscribe();
        let _ = rx.wait_for(|l| *l != from).await;
    }

    /// Puts a primary's report of a silent backup, bound to this node's lease.
    pub async fn report(&self, rep: &crate::Report) -> Result<()> {
        let mut c = self.client.clone();
        let key = self.layout.report(rep.region, &rep.node);
        let value = serde_json::to_vec(rep).unwrap_or_default();
        let opts = PutOptions::new().with_lease(self.lease());
        tokio::time::timeout(self.ttl, c.put(key, value, Some(opts)))
            .await
            .map_err(|_| crate::Error::Invalid("etcd did not take the report in time".into()))??;
        Ok(())
    }

    /// Marks this node as shutting down (bound to its lease): the master hands its primaries
    /// to backups and takes it out of every group.
    pub async fn leave(&self) -> Result<()> {
        let mut c = self.client.clone();
        let opts = PutOptions::new().with_lease(self.lease());
        tokio::time::timeout(self.ttl, c.put(self.layout.leaving(&self.record.name), Vec::new(), Some(opts)))
            .await
            .map_err(|_| crate::Error::Invalid("etcd did not take the leaving mark in time".into()))??;
        Ok(())
    }

    /// Gives the lease back for good: the node's keys go at once (a node leaving on purpose)
    /// and it acts as a member no more.
    pub async fn revoke(&self) -> Result<()> {
        self.ended.store(true, std::sync::atomic::Ordering::Relaxed);
        self.state.lock().1 = Instant::now();
        let mut c = self.client.clone();
        tokio::time::timeout(self.ttl, c.lease_revoke(self.lease()))
            .await
            .map_err(|_| crate::Error::Invalid("etcd did not revoke the lease in time".into()))??;
        Ok(())
    }

    /// Writes this node's replication progress (bound to its lease).
    pub async fn publish_progress(&self, p: &crate::layout::Progress) -> Result<()> {
        let mut c = self.client.clone();
        let value = serde_json::to_vec(p).unwrap_or_default();
        let opts = PutOptions::new().with_lease(self.lease());
        tokio::time::timeout(self.ttl, c.put(self.layout.progress(&self.record.name), value, Some(opts)))
            .await
            .map_err(|_| crate::Error::Invalid("etcd did not take the progress record in time".into()))??;
        Ok(())
    }

    fn margin(&self) -> Duration {
        (self.ttl / 10).max(Duration::from_millis(100))
    }

    /// Takes a new lease and binds the node key to it (the member key is written too).
    async fn register(&self) -> Result<i64> {
        let mut c = self.client.clone();
        let sent = Instant::now();
        let grant = c.lease_grant(self.ttl.as_secs() as i64);
        let lease = tokio::time::timeout(self.ttl, grant)
            .await
            .map_err(|_| crate::Error::Invalid("etcd did not grant a lease in time".into()))??
            .id();
        let rec = NodeRecord { lease, ..self.record.clone() };
        let member = NodeRecord { lease: 0, ..self.record.clone() };
        let enc = |r: &NodeRecord| serde_json::to_vec(r).unwrap_or_default();
        let bound = Some(PutOptions::new().with_lease(lease));
        let txn = match self.storage {
            true => Txn::new().and_then([TxnOp::put(self.layout.storage_node(&rec.name), enc(&rec), bound)]),
            false => Txn::new().and_then([
                TxnOp::put(self.layout.member(&rec.name), enc(&member), None),
                TxnOp::put(self.layout.node(&rec.name), enc(&rec), bound),
            ]),
        };
        tokio::time::timeout(self.ttl, c.txn(txn))
            .await
            .map_err(|_| crate::Error::Invalid("etcd did not take the node key in time".into()))??;
        *self.state.lock() = (lease, sent + self.ttl - self.margin());
        self.changed.send_replace(lease);
        tracing::info!(node = %rec.name, lease, ttl = ?self.ttl, "registered in etcd");
        Ok(lease)
    }

    /// Keeps the lease alive every TTL/3; registers anew once etcd says the lease is gone.
    async fn keep(self: Arc<Self>) {
        let every = self.ttl / 3;
        loop {
            if self.ended.load(std::sync::atomic::Ordering::Relaxed) {
                return;
            }
            let lease = self.lease();
            let gone = match self.keep_lease(lease, every).await {
                Ok(()) => true,
                Err(e) => {
                    tracing::warn!(node = %self.record.name, "keep-alive failed: {e}; retrying");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    self.expired(lease).await
                }
            };
            if gone && !self.ended.load(std::sync::atomic::Ordering::Relaxed) {
                // etcd expired the lease: its roles are gone with it.
                tracing::warn!(node = %self.record.name, lease, "lease expired at etcd; registering again");
                while let Err(e) = self.register().await {
                    tracing::warn!("cannot register in etcd: {e}; retrying");
                    tokio::time::sleep(every).await;
                }
            }
        }
    }

    /// Whether etcd says `lease` no longer exists (false when etcd cannot be asked).
    async fn expired(&self, lease: i64) -> bool {
        let mut c = self.client.clone();
        match tokio::time::timeout(self.ttl / 3, c.lease_time_to_live(lease)).await {
            Ok(Ok(r)) => r.ttl() <= 0,
            Ok(Err(e)) => e.to_string().contains("not found"),
            Err(_) => false,
        }
    }

    /// Renews `lease` until etcd reports it expired (`Ok`) or the stream fails (`Err`).
    async fn keep_lease(&self, lease: i64, every: Duration) -> Result<()> {
        let mut c = self.client.clone();
        let (mut keeper, mut stream) = tokio::time::timeout(every, c.lease_keep_alive(lease))
            .await
            .map_err(|_| crate::Error::Invalid("no keep-alive stream".into()))??;
        loop {
            let sent = Instant::now();
            keeper.keep_alive().await?;
            let answer = tokio::time::timeout(every, stream.message()).await;
            match answer {
                Ok(Ok(Some(r))) if r.ttl() > 0 => {
                    let until = sent + Duration::from_secs(r.ttl() as u64) - self.margin();
                    let mut st = self.state.lock();
                    if st.0 == lease && until > st.1 {
                        st.1 = until;
                    }
                }
                Ok(Ok(Some(_))) => return Ok(()),
                Ok(Ok(None)) => return Err(crate::Error::Invalid("keep-alive stream closed".into())),
                Ok(Err(e)) => return Err(e.into()),
                Err(_) => return Err(crate::Error::Invalid(format!("no keep-alive answer within {every:?}"))),
            }
            tokio::time::sleep(every.saturating_sub(sent.elapsed())).await;
        }
    }
}

/// The storage nodes registered now (`halyard serve --role storage --etcd ...`).
pub async fn storage_nodes(client: &mut Client, layout: &Layout) -> Result<Vec<NodeRecord>> {
    let prefix = layout.storage_node("");
    let resp = client.get(prefix.as_str(), Some(crate::etcd::GetOptions::new().with_prefix())).await?;
    Ok(resp.kvs().iter().filter_map(|kv| serde_json::from_slice(kv.value()).ok()).collect())
}
