//! The HTTP endpoint (`--http`): `GET /metrics` (the registry [`registry`] builds, as
//! OpenMetrics text), `GET /health`, and the web console (`GET /`, `/cluster.json`,
//! `/node.json`: `crate::console`), routed by axum and served by hyper, one request per
//! connection.

use crate::cluster::ClusterNode;
use crate::metrics;
use crate::metrics::replication::ReplicationCollector;
use crate::state::Shared;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use halyard_engine::Db;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::registry::Registry;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// How long one connection may take, from accept to the end of its response.
const CONNECTION_TIMEOUT: Duration = Duration::from_secs(10);

/// The one registry /metrics encodes: this node's counters and engine statistics and, in
/// cluster mode, its replication counters.
pub fn registry(sh: Arc<Shared>, cluster: Option<Arc<ClusterNode>>) -> Registry {
    let mut r = Registry::default();
    r.register_collector(Box::new(NodeCollector(sh)));
    if let Some(c) = cluster {
        let (shipper, replica, master) = (c.shipper.clone(), c.replica.clone(), c.master_stats.clone());
        r.register_collector(Box::new(ReplicationCollector::new(shipper, replica, master, move || c.led_regions())));
    }
    r
}

/// The node's metrics, read at each scrape: connections, commands, the native protocol, CPU
/// time and a snapshot of the engine's statistics.
struct NodeCollector(Arc<Shared>);

impl std::fmt::Debug for NodeCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("NodeCollector")
    }
}

impl Collector for NodeCollector {
    fn encode(&self, mut e: DescriptorEncoder<'_>) -> std::fmt::Result {
        let sh = &self.0;
        metrics::encode_connections(&mut e, &sh.metrics, sh.connected.load(Relaxed), &sh.native)?;
        metrics::encode_commands(&mut e, &sh.metrics)?;
        metrics::encode_native(&mut e, &sh.native)?;
        metrics::encode_cpu(&mut e, sh.metrics.total_calls() + sh.native.requests.load(Relaxed))?;
        let stats = sh.ks.db.stats();
        metrics::encode_engine_io(&mut e, &stats)?;
        metrics::encode_engine_work(&mut e, &stats)
    }
}

/// What the handlers read.
#[derive(Clone)]
struct Endpoint {
    registry: Arc<Registry>,
    db: Arc<Db>,
    sh: Arc<Shared>,
    cluster: Option<Arc<ClusterNode>>,
}

fn router(ep: Endpoint) -> Router {
    Router::new()
        .route("/metrics", get(scrape))
        .route("/health", get(health))
        .route("/", get(console_page))
        .route("/cluster.json", get(cluster_json))
        .route("/node.json", get(node_json))
        .fallback(not_found)
        .method_not_allowed_fallback(not_found)
        .with_state(ep)
}

fn json_response(v: &serde_json::Value) -> Response {
    ([(header::CONTENT_TYPE, "application/json"), (header::CACHE_CONTROL, "no-store")], v.to_string()).into_response()
}

/// The console's answer to a request without the password.
fn unauthorized() -> Response {
    let challenge = [(header::WWW_AUTHENTICATE, "Basic realm=\"halyard\", charset=\"UTF-8\"")];
    (StatusCode::UNAUTHORIZED, challenge, "this node has a password: log in with it (any user name)\n").into_response()
}

fn authorized(ep: &Endpoint, headers: &axum::http::HeaderMap) -> bool {
    let auth = headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok());
    crate::console::authorized(auth, ep.sh.requirepass.as_deref())
}

async fn console_page(State(ep): State<Endpoint>, headers: axum::http::HeaderMap) -> Response {
    if !authorized(&ep, &headers) {
        return unauthorized();
    }
    ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], crate::console::PAGE).into_response()
}

async fn cluster_json(State(ep): State<Endpoint>, headers: axum::http::HeaderMap) -> Response {
    if !authorized(&ep, &headers) {
        return unauthorized();
    }
    json_response(&crate::console::cluster_json(ep.sh.clone(), ep.cluster.clone()).await)
}

async fn node_json(State(ep): State<Endpoint>, headers: axum::http::HeaderMap) -> Response {
    if !authorized(&ep, &headers) {
        return unauthorized();
    }
    match tokio::task::spawn_blocking(move || crate::console::node_json(&ep.sh, ep.cluster.as_deref())).await {
        Ok(v) => json_response(&v),
        Err(_) => (StatusCode::INTERNAL_SERVER_ERROR, "cannot read the node's state\n").into_response(),
    }
}

async fn scrape(State(ep): State<Endpoint>) -> Response {
    // The collectors read the engine's statistics, which may wait on its locks.
    match tokio::task::spawn_blocking(move || metrics::encode(&ep.registry)).await {
        Ok(Ok(text)) => ([(header::CONTENT_TYPE, metrics::CONTENT_TYPE)], text).into_response(),
        _ => (StatusCode::INTERNAL_SERVER_ERROR, "cannot encode the metrics\n").into_response(),
    }
}

async fn health(State(ep): State<Endpoint>) -> Response {
    match tokio::task::spawn_blocking(move || ep.db.stats().poisoned).await {
        Ok(false) => "ok\n".into_response(),
        Ok(true) => (StatusCode::SERVICE_UNAVAILABLE, "poisoned: the store refuses writes\n").into_response(),
        Err(_) => (StatusCode::INTERNAL_SERVER_ERROR, "cannot read the store's state\n").into_response(),
    }
}

async fn not_found() -> Response {
    (StatusCode::NOT_FOUND, "try / (the console), /metrics or /health\n").into_response()
}

/// Serves `l` until `stop` changes. Each connection gets one request and at most
/// [`CONNECTION_TIMEOUT`]; those in flight at the stop finish their request, holding
/// `conns` meanwhile.
pub(crate) async fn serve(
    l: TcpListener,
    registry: Arc<Registry>,
    sh: Arc<Shared>,
    cluster: Option<Arc<ClusterNode>>,
    mut stop: watch::Receiver<bool>,
    conns: tokio_util::task::TaskTracker,
) {
    let db = sh.ks.db.clone();
    let app = router(Endpoint { registry, db, sh, cluster });
    loop {
        let accepted = tokio::select! {
            a = l.accept() => a,
            _ = stop.changed() => return,
        };
        let Ok((stream, addr)) = accepted else { continue };
        let (app, stop) = (app.clone(), stop.clone());
        conns.spawn(async move {
            match tokio::time::timeout(CONNECTION_TIMEOUT, connection(stream, app, stop)).await {
                Ok(Err(e)) => tracing::debug!("http connection {addr}: {e}"),
                Err(_) => tracing::debug!("http connection {addr}: timed out"),
                Ok(Ok(())) => {}
            }
        });
    }
}

/// One request on `stream`; a stop lets it finish and closes a connection still waiting for one.
async fn connection(stream: TcpStream, app: Router, mut stop: watch::Receiver<bool>) -> hyper::Result<()> {
    let conn = hyper::server::conn::http1::Builder::new()
        .keep_alive(false)
        .serve_connection(TokioIo::new(stream), TowerToHyperService::new(app));
    let mut conn = std::pin::pin!(conn);
    tokio::select! {
        r = conn.as_mut() => return r,
        _ = stop.changed() => conn.as_mut().graceful_shutdown(),
    }
    conn.await
}
