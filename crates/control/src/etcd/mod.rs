//! The etcd v3 client the control plane uses: a thin layer over gRPC stubs generated once from
//! etcd's protos ([`gen`], by `tools/etcd-proto`), so that building needs no `protoc`.
//!
//! It offers what Halyard needs, under the names the `etcd-client` crate uses: [`Client`] with
//! `get` (a key or a prefix), `put` (optionally bound to a lease), `delete`, `txn` ([`Txn`] of
//! [`Compare`]s and [`TxnOp`]s), `lease_grant`, `lease_revoke`, `lease_time_to_live`,
//! `lease_keep_alive` (a [`LeaseKeeper`] and a [`LeaseKeepAliveStream`]), and the election
//! service's `campaign`, `leader` and `resign`. Responses are the generated messages, with
//! getters for the fields the control plane reads.
//!
//! No authentication and no TLS: Halyard talks to etcd over plain `http://` endpoints.

pub mod gen;

use gen::etcdserverpb::compare::{CompareResult, CompareTarget, TargetUnion};
use gen::etcdserverpb::kv_client::KvClient;
use gen::etcdserverpb::lease_client::LeaseClient;
use gen::etcdserverpb::request_op::Request;
use gen::etcdserverpb::{
    DeleteRangeRequest, LeaseGrantRequest, LeaseKeepAliveRequest, LeaseRevokeRequest, LeaseTimeToLiveRequest,
    PutRequest, RangeRequest, RequestOp, TxnRequest,
};
use gen::v3electionpb::election_client::ElectionClient;
use gen::v3electionpb::{CampaignRequest, LeaderRequest, ResignRequest};
use std::time::Duration;
use tokio::sync::mpsc;
use tonic::transport::channel::Change;
use tonic::transport::{Channel, Endpoint};

pub use gen::etcdserverpb::{
    DeleteRangeResponse, LeaseGrantResponse, LeaseKeepAliveResponse, LeaseRevokeResponse, LeaseTimeToLiveResponse,
    PutResponse, RangeResponse, ResponseHeader, TxnResponse,
};
pub use gen::mvccpb::KeyValue;
pub use gen::v3electionpb::{CampaignResponse, LeaderKey, LeaderResponse, ResignResponse};

/// Why an etcd request failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The request or the endpoints are malformed.
    #[error("invalid arguments: {0}")]
    InvalidArgs(String),
    /// The connection failed.
    #[error("transport error: {0}")]
    Transport(#[from] tonic::transport::Error),
    /// etcd answered with an error (or the request failed on the way).
    #[error("grpc request error: {0}")]
    Status(#[from] tonic::Status),
    /// A lease keep-alive stream broke.
    #[error("lease keep alive error: {0}")]
    LeaseKeepAlive(String),
}

/// Result of an etcd request.
pub type Result<T> = std::result::Result<T, Error>;

/// How [`Client::connect`] reaches etcd.
#[derive(Clone, Debug, Default)]
pub struct ConnectOptions {
    connect_timeout: Option<Duration>,
    keep_alive: Option<(Duration, Duration)>,
    timeout: Option<Duration>,
}

impl ConnectOptions {
    /// No timeouts, no HTTP/2 keep-alive.
    pub fn new() -> Self {
        Self::default()
    }

    /// Gives up connecting to an endpoint after `timeout`.
    pub fn with_connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = Some(timeout);
        self
    }

    /// Sends an HTTP/2 ping every `interval` while requests are open and drops the connection
    /// when one goes unanswered for `timeout`.
    pub fn with_keep_alive(mut self, interval: Duration, timeout: Duration) -> Self {
        self.keep_alive = Some((interval, timeout));
        self
    }

    /// Fails every request not answered within `timeout` (none by default: a campaign waits
    /// as long as another candidate leads).
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    fn endpoint(&self, url: &str) -> Result<Endpoint> {
        if url.starts_with("https://") {
            return Err(Error::InvalidArgs(format!("{url}: TLS is not supported")));
        }
        let url = if url.starts_with("http://") { url.to_string() } else { format!("http://{url}") };
        let mut e = Endpoint::from_shared(url)?;
        if let Some((interval, timeout)) = self.keep_alive {
            e = e.http2_keep_alive_interval(interval).keep_alive_timeout(timeout);
        }
        if let Some(t) = self.connect_timeout {
            e = e.connect_timeout(t);
        }
        if let Some(t) = self.timeout {
            e = e.timeout(t);
        }
        Ok(e)
    }
}

/// The first key past every key that starts with `key` (all keys for an empty one).
fn prefix_end(key: &[u8]) -> Vec<u8> {
    let mut end = key.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

/// Options of [`Client::get`] and [`TxnOp::get`].
#[derive(Clone, Debug, Default)]
pub struct GetOptions {
    prefix: bool,
    limit: i64,
}

impl GetOptions {
    /// The key alone.
    pub fn new() -> Self {
        Self::default()
    }

    /// Every key that starts with the key.
    pub fn with_prefix(mut self) -> Self {
        self.prefix = true;
        self
    }

    /// At most `limit` keys (0: no limit).
    pub fn with_limit(mut self, limit: i64) -> Self {
        self.limit = limit;
        self
    }

    fn request(self, key: Vec<u8>) -> RangeRequest {
        let range_end = if self.prefix { prefix_end(&key) } else { Vec::new() };
        RangeRequest { key, range_end, limit: self.limit, ..Default::default() }
    }
}

/// Options of [`Client::put`] and [`TxnOp::put`].
#[derive(Clone, Debug, Default)]
pub struct PutOptions {
    lease: i64,
}

impl PutOptions {
    /// No lease.
    pub fn new() -> Self {
        Self::default()
    }

    /// Binds the key to `lease`: etcd deletes it when the lease expires.
    pub fn with_lease(mut self, lease: i64) -> Self {
        self.lease = lease;
        self
    }

    fn request(self, key: Vec<u8>, value: Vec<u8>) -> PutRequest {
        PutRequest { key, value, lease: self.lease, ..Default::default() }
    }
}

/// Options of [`Client::delete`] and [`TxnOp::delete`].
#[derive(Clone, Debug, Default)]
pub struct DeleteOptions {
    prefix: bool,
}

impl DeleteOptions {
    /// The key alone.
    pub fn new() -> Self {
        Self::default()
    }

    /// Every key that starts with the key.
    pub fn with_prefix(mut self) -> Self {
        self.prefix = true;
        self
    }

    fn request(self, key: Vec<u8>) -> DeleteRangeRequest {
        let range_end = if self.prefix { prefix_end(&key) } else { Vec::new() };
        DeleteRangeRequest { key, range_end, ..Default::default() }
    }
}

/// How a [`Compare`] compares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CompareOp {
    /// The key's attribute equals the value.
    Equal,
    /// The key's attribute is greater.
    Greater,
    /// The key's attribute is less.
    Less,
    /// The key's attribute differs.
    NotEqual,
}

/// One condition of a [`Txn`]. A missing key has create, mod revision and version 0.
#[derive(Clone, Debug)]
pub struct Compare(gen::etcdserverpb::Compare);

impl Compare {
    fn new(key: Vec<u8>, op: CompareOp, target: CompareTarget, union: TargetUnion) -> Compare {
        let result = match op {
            CompareOp::Equal => CompareResult::Equal,
            CompareOp::Greater => CompareResult::Greater,
            CompareOp::Less => CompareResult::Less,
            CompareOp::NotEqual => CompareResult::NotEqual,
        };
        Compare(gen::etcdserverpb::Compare {
            result: result.into(),
            target: target.into(),
            key,
            range_end: Vec::new(),
            target_union: Some(union),
        })
    }

    /// Compares the revision that created `key`.
    pub fn create_revision(key: impl Into<Vec<u8>>, op: CompareOp, revision: i64) -> Compare {
        Self::new(key.into(), op, CompareTarget::Create, TargetUnion::CreateRevision(revision))
    }

    /// Compares the revision that last changed `key`.
    pub fn mod_revision(key: impl Into<Vec<u8>>, op: CompareOp, revision: i64) -> Compare {
        Self::new(key.into(), op, CompareTarget::Mod, TargetUnion::ModRevision(revision))
    }

    /// Compares how often `key` changed since it was created.
    pub fn version(key: impl Into<Vec<u8>>, op: CompareOp, version: i64) -> Compare {
        Self::new(key.into(), op, CompareTarget::Version, TargetUnion::Version(version))
    }

    /// Compares `key`'s value.
    pub fn value(key: impl Into<Vec<u8>>, op: CompareOp, value: impl Into<Vec<u8>>) -> Compare {
        Self::new(key.into(), op, CompareTarget::Value, TargetUnion::Value(value.into()))
    }
}

/// One operation of a [`Txn`].
#[derive(Clone, Debug)]
pub struct TxnOp(RequestOp);

impl TxnOp {
    /// Reads `key` (or a prefix).
    pub fn get(key: impl Into<Vec<u8>>, options: Option<GetOptions>) -> TxnOp {
        TxnOp(RequestOp { request: Some(Request::RequestRange(options.unwrap_or_default().request(key.into()))) })
    }

    /// Writes `key`.
    pub fn put(key: impl Into<Vec<u8>>, value: impl Into<Vec<u8>>, options: Option<PutOptions>) -> TxnOp {
        let put = options.unwrap_or_default().request(key.into(), value.into());
        TxnOp(RequestOp { request: Some(Request::RequestPut(put)) })
    }

    /// Deletes `key` (or a prefix).
    pub fn delete(key: impl Into<Vec<u8>>, options: Option<DeleteOptions>) -> TxnOp {
        let delete = options.unwrap_or_default().request(key.into());
        TxnOp(RequestOp { request: Some(Request::RequestDeleteRange(delete)) })
    }
}

/// A transaction: if every [`Compare`] holds, the `and_then` operations run, else the
/// `or_else` ones, all at one revision.
#[derive(Clone, Debug, Default)]
pub struct Txn(TxnRequest);

impl Txn {
    /// No conditions, no operations.
    pub fn new() -> Txn {
        Txn::default()
    }

    /// Adds conditions.
    pub fn when(mut self, compares: impl Into<Vec<Compare>>) -> Txn {
        self.0.compare.extend(compares.into().into_iter().map(|c| c.0));
        self
    }

    /// Adds operations run when the conditions hold.
    pub fn and_then(mut self, ops: impl Into<Vec<TxnOp>>) -> Txn {
        self.0.success.extend(ops.into().into_iter().map(|o| o.0));
        self
    }

    /// Adds operations run when a condition fails.
    pub fn or_else(mut self, ops: impl Into<Vec<TxnOp>>) -> Txn {
        self.0.failure.extend(ops.into().into_iter().map(|o| o.0));
        self
    }
}

/// A connection to etcd (cheap to clone: clones share it).
#[derive(Clone, Debug)]
pub struct Client {
    kv: KvClient<Channel>,
    lease: LeaseClient<Channel>,
    election: ElectionClient<Channel>,
}

impl Client {
    /// A client of the etcd members at `endpoints` (`http://host:port` or `host:port`),
    /// spreading requests over them. Connects lazily: no request is sent yet.
    pub async fn connect<E: AsRef<str>, S: AsRef<[E]>>(
        endpoints: S,
        options: Option<ConnectOptions>,
    ) -> Result<Client> {
        let options = options.unwrap_or_default();
        let endpoints =
            endpoints.as_ref().iter().map(|e| options.endpoint(e.as_ref())).collect::<Result<Vec<Endpoint>>>()?;
        if endpoints.is_empty() {
            return Err(Error::InvalidArgs("no etcd endpoint".into()));
        }
        // Once the sender is dropped the channel keeps the endpoints it was given.
        let (channel, tx) = Channel::balance_channel(endpoints.len());
        for e in endpoints {
            tx.try_send(Change::Insert(e.uri().clone(), e))
                .map_err(|e| Error::InvalidArgs(format!("cannot add endpoint: {e}")))?;
        }
        Ok(Client {
            kv: KvClient::new(channel.clone()),
            lease: LeaseClient::new(channel.clone()),
            election: ElectionClient::new(channel),
        })
    }

    /// Reads `key`, or with [`GetOptions::with_prefix`] every key under it.
    pub async fn get(&mut self, key: impl Into<Vec<u8>>, options: Option<GetOptions>) -> Result<RangeResponse> {
        let req = options.unwrap_or_default().request(key.into());
        Ok(self.kv.range(req).await?.into_inner())
    }

    /// Writes `key`.
    pub async fn put(
        &mut self,
        key: impl Into<Vec<u8>>,
        value: impl Into<Vec<u8>>,
        options: Option<PutOptions>,
    ) -> Result<PutResponse> {
        let req = options.unwrap_or_default().request(key.into(), value.into());
        Ok(self.kv.put(req).await?.into_inner())
    }

    /// Deletes `key`, or with [`DeleteOptions::with_prefix`] every key under it.
    pub async fn delete(
        &mut self,
        key: impl Into<Vec<u8>>,
        options: Option<DeleteOptions>,
    ) -> Result<DeleteRangeResponse> {
        let req = options.unwrap_or_default().request(key.into());
        Ok(self.kv.delete_range(req).await?.into_inner())
    }

    /// Runs a transaction.
    pub async fn txn(&mut self, txn: Txn) -> Result<TxnResponse> {
        Ok(self.kv.txn(txn.0).await?.into_inner())
    }

    /// A new lease of `ttl` seconds, its id chosen by etcd.
    pub async fn lease_grant(&mut self, ttl: i64) -> Result<LeaseGrantResponse> {
        Ok(self.lease.lease_grant(LeaseGrantRequest { ttl, id: 0 }).await?.into_inner())
    }

    /// Ends lease `id` now (its keys are deleted).
    pub async fn lease_revoke(&mut self, id: i64) -> Result<LeaseRevokeResponse> {
        Ok(self.lease.lease_revoke(LeaseRevokeRequest { id }).await?.into_inner())
    }

    /// How long lease `id` has left (a TTL of -1: it does not exist).
    pub async fn lease_time_to_live(&mut self, id: i64) -> Result<LeaseTimeToLiveResponse> {
        Ok(self.lease.lease_time_to_live(LeaseTimeToLiveRequest { id, keys: false }).await?.into_inner())
    }

    /// Opens a keep-alive stream for lease `id` and renews it once (that answer is consumed
    /// here: an error if the lease is gone). [`LeaseKeeper::keep_alive`] renews it again, and
    /// [`LeaseKeepAliveStream::message`] reads each answer.
    pub async fn lease_keep_alive(&mut self, id: i64) -> Result<(LeaseKeeper, LeaseKeepAliveStream)> {
        let (sender, rx) = mpsc::channel(16);
        sender.send(LeaseKeepAliveRequest { id }).await.map_err(|e| Error::LeaseKeepAlive(e.to_string()))?;
        let mut stream =
            self.lease.lease_keep_alive(tokio_stream::wrappers::ReceiverStream::new(rx)).await?.into_inner();
        match stream.message().await? {
            Some(r) if r.ttl > 0 => Ok((LeaseKeeper { id, sender }, LeaseKeepAliveStream { stream })),
            Some(_) => Err(Error::LeaseKeepAlive(format!("lease {id:x} not found"))),
            None => Err(Error::LeaseKeepAlive("the keep-alive stream closed at once".into())),
        }
    }

    /// Waits until this candidate leads election `name` (its key bound to `lease`, holding
    /// `value`), then returns its leader key.
    pub async fn campaign(
        &mut self,
        name: impl Into<Vec<u8>>,
        value: impl Into<Vec<u8>>,
        lease: i64,
    ) -> Result<CampaignResponse> {
        let req = CampaignRequest { name: name.into(), lease, value: value.into() };
        Ok(self.election.campaign(req).await?.into_inner())
    }

    /// The current leader of election `name` (an error if there is none).
    pub async fn leader(&mut self, name: impl Into<Vec<u8>>) -> Result<LeaderResponse> {
        Ok(self.election.leader(LeaderRequest { name: name.into() }).await?.into_inner())
    }

    /// Gives up the leadership `leader` holds.
    pub async fn resign(&mut self, leader: LeaderKey) -> Result<ResignResponse> {
        Ok(self.election.resign(ResignRequest { leader: Some(leader) }).await?.into_inner())
    }
}

/// Renews one lease over its keep-alive stream.
#[derive(Debug)]
pub struct LeaseKeeper {
    id: i64,
    sender: mpsc::Sender<LeaseKeepAliveRequest>,
}

impl LeaseKeeper {
    /// The lease.
    pub fn id(&self) -> i64 {
        self.id
    }

    /// Asks etcd to renew the lease (the answer comes on the [`LeaseKeepAliveStream`]).
    pub async fn keep_alive(&mut self) -> Result<()> {
        let req = LeaseKeepAliveRequest { id: self.id };
        self.sender.send(req).await.map_err(|e| Error::LeaseKeepAlive(e.to_string()))
    }
}

/// etcd's answers to a [`LeaseKeeper`]'s renewals.
#[derive(Debug)]
pub struct LeaseKeepAliveStream {
    stream: tonic::Streaming<LeaseKeepAliveResponse>,
}

impl LeaseKeepAliveStream {
    /// The next answer (None once etcd closed the stream). A TTL of 0 or less: the lease is gone.
    pub async fn message(&mut self) -> Result<Option<LeaseKeepAliveResponse>> {
        Ok(self.stream.message().await?)
    }
}

// Getters for the fields the control plane reads, named as in the `etcd-client` crate.

impl ResponseHeader {
    /// The store's revision when the request was applied.
    pub fn revision(&self) -> i64 {
        self.revision
    }
}

impl RangeResponse {
    /// The response header.
    pub fn header(&self) -> Option<&ResponseHeader> {
        self.header.as_ref()
    }

    /// The keys read, in key order.
    pub fn kvs(&self) -> &[KeyValue] {
        &self.kvs
    }
}

impl KeyValue {
    /// The key.
    pub fn key(&self) -> &[u8] {
        &self.key
    }

    /// The value.
    pub fn value(&self) -> &[u8] {
        &self.value
    }

    /// The revision that created the key.
    pub fn create_revision(&self) -> i64 {
        self.create_revision
    }

    /// The revision that last changed the key.
    pub fn mod_revision(&self) -> i64 {
        self.mod_revision
    }

    /// The lease the key is bound to (0: none).
    pub fn lease(&self) -> i64 {
        self.lease
    }
}

impl TxnResponse {
    /// Whether every condition held (and the `and_then` operations ran).
    pub fn succeeded(&self) -> bool {
        self.succeeded
    }
}

impl LeaseGrantResponse {
    /// The new lease.
    pub fn id(&self) -> i64 {
        self.id
    }

    /// Its TTL in seconds, as etcd chose it.
    pub fn ttl(&self) -> i64 {
        self.ttl
    }
}

impl LeaseTimeToLiveResponse {
    /// The seconds the lease has left (-1: it does not exist).
    pub fn ttl(&self) -> i64 {
        self.ttl
    }
}

impl LeaseKeepAliveResponse {
    /// The lease's TTL from now, in seconds (0 or less: the lease is gone).
    pub fn ttl(&self) -> i64 {
        self.ttl
    }
}

impl CampaignResponse {
    /// Takes the leader key the campaign won.
    pub fn take_leader(&mut self) -> Option<LeaderKey> {
        self.leader.take()
    }
}

impl LeaderKey {
    /// The election key this leader holds.
    pub fn key(&self) -> &[u8] {
        &self.key
    }

    /// The key's create revision: compare it in a transaction to act only while leading.
    pub fn rev(&self) -> i64 {
        self.rev
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_ends() {
        assert_eq!(prefix_end(b"ab"), b"ac");
        assert_eq!(prefix_end(b"a\xff"), b"b");
        assert_eq!(prefix_end(b"\xff\xff"), vec![0]);
        assert_eq!(prefix_end(b""), vec![0]);
    }

    #[test]
    fn requests_are_built_as_etcd_expects() {
        let r = GetOptions::new().with_prefix().request(b"halyard/".to_vec());
        assert_eq!((r.key.as_slice(), r.range_end.as_slice()), (&b"halyard/"[..], &b"halyard0"[..]));
        let c = Compare::create_revision("k", CompareOp::Equal, 7).0;
        assert_eq!(
            (c.result(), c.target(), c.target_union.clone()),
            (CompareResult::Equal, CompareTarget::Create, Some(TargetUnion::CreateRevision(7)))
        );
        let t = Txn::new().when([c.clone()].map(Compare)).and_then([TxnOp::put(
            "a",
            "1",
            Some(PutOptions::new().with_lease(5)),
        )]);
        match &t.0.success[..] {
            [RequestOp { request: Some(Request::RequestPut(p)) }] => {
                assert_eq!((p.key.as_slice(), p.lease), (&b"a"[..], 5))
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(t.0.compare, vec![c]);
    }
}
