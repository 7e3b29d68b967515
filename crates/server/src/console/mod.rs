//! The web console on the HTTP port (`--http`): `GET /` is one page served from the binary
//! (`index.html`: plain HTML and JavaScript, no build step) that reads `GET /cluster.json`
//! every second and shows the nodes (state, copies, ops/s, levels, amplification), the regions
//! (epoch, primary, backups, LSN, writes/s, lag, size) and the moves in flight (bytes copied,
//! rate, requests and changes under way). `GET /node.json` is this node's part; any node
//! serves the whole cluster's page, reading the status from etcd and every live node's
//! `node.json` itself. With a password (`requirepass`) all three ask for HTTP basic
//! authentication with that password (any user name).

use crate::cluster::ClusterNode;
use crate::state::Shared;
use serde_json::{json, Value};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The page.
pub(crate) const PAGE: &str = include_str!("index.html");

/// How long the page's data waits for another node's `node.json`.
const PEER_TIMEOUT: Duration = Duration::from_millis(800);

/// Whether a request with the `Authorization` header `auth` may read the console.
pub(crate) fn authorized(auth: Option<&str>, password: Option<&str>) -> bool {
    use base64::Engine;
    let Some(want) = password else { return true };
    let Some(b64) = auth.and_then(|a| a.strip_prefix("Basic ")) else { return false };
    let Ok(raw) = base64::engine::general_purpose::STANDARD.decode(b64.trim()) else { return false };
    let given = raw.splitn(2, |b| *b == b':').nth(1).unwrap_or_default();
    subtle::ConstantTimeEq::ct_eq(given, want.as_bytes()).into()
}

/// This node's part of the console (called on a blocking thread: it reads engine statistics).
pub(crate) fn node_json(sh: &Shared, cluster: Option<&ClusterNode>) -> Value {
    let db = &sh.ks.db;
    let st = db.stats();
    let levels: Vec<Value> = st
        .levels
        .iter()
        .enumerate()
        .filter(|(_, l)| l.ssts > 0)
        .map(|(i, l)| json!({ "level": i + 1, "ssts": l.ssts, "bytes": l.stored_bytes }))
        .collect();
    let regions: Vec<Value> = db
        .regions()
        .iter()
        .map(|r| {
            let role = match (r.backup, cluster.is_some_and(|c| c.shipper.leads(r.id))) {
                (true, _) => "backup",
                (false, true) => "primary",
                (false, false) => {
                    if cluster.is_some() {
                        "idle"
                    } else {
                        "primary"
                    }
                }
            };
            json!({ "id": r.id, "role": role, "lsn": r.lsn, "bytes": db.replication().region_bytes(r.id).unwrap_or(0) })
        })
        .collect();
    let ratio = |a: u64, b: u64| if b == 0 { 0.0 } else { a as f64 / b as f64 };
    json!({
        "name": cluster.map_or("local", |c| c.name.as_str()),
        "commands": sh.metrics.total_calls() + sh.native.requests.load(std::sync::atomic::Ordering::Relaxed),
        "live_bytes": st.live_bytes,
        "allocated_bytes": st.space_allocated_bytes,
        "write_amp": ratio(st.device_write_bytes, st.user_bytes_written),
        "space_amp": ratio(st.space_allocated_bytes, st.live_bytes),
        "l0_bytes": st.l0_bytes,
        "levels": levels,
        "regions": regions,
    })
}

/// `GET http://addr/node.json` with the password, as JSON.
async fn fetch_node(addr: &str, password: Option<&str>) -> Result<Value, String> {
    use base64::Engine;
    let mut s = tokio::net::TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
    let auth = password.map_or(String::new(), |p| {
        format!("Authorization: Basic {}\r\n", base64::engine::general_purpose::STANDARD.encode(format!("console:{p}")))
    });
    let req = format!("GET /node.json HTTP/1.0\r\nHost: {addr}\r\n{auth}\r\n");
    s.write_all(req.as_bytes()).await.map_err(|e| e.to_string())?;
    let mut body = Vec::new();
    s.take(16 << 20).read_to_end(&mut body).await.map_err(|e| e.to_string())?;
    let text = String::from_utf8_lossy(&body);
    let (head, json) = text.split_once("\r\n\r\n").ok_or("no HTTP header")?;
    if !head.starts_with("HTTP/1.1 200") && !head.starts_with("HTTP/1.0 200") {
        return Err(head.lines().next().unwrap_or_default().to_string());
    }
    serde_json::from_str(json).map_err(|e| e.to_string())
}

/// The cluster's status (etcd mode) and every live node's `node.json`.
pub(crate) async fn cluster_json(sh: std::sync::Arc<Shared>, cluster: Option<std::sync::Arc<ClusterNode>>) -> Value {
    let (sh2, c2) = (sh.clone(), cluster.clone());
    let me = tokio::task::spawn_blocking(move || node_json(&sh2, c2.as_deref())).await.unwrap_or(Value::Null);
    let name = me.get("name").and_then(Value::as_str).unwrap_or("local").to_string();
    let mut nodes = serde_json::Map::new();
    let session = cluster.as_ref().and_then(|c| c.control.clone());
    let status = match &session {
        Some(s) => {
            let mut c = s.client();
            match tokio::time::timeout(s.ttl(), halyard_control::admin::status(&mut c, s.layout())).await {
                Ok(Ok(st)) => serde_json::to_value(&st).unwrap_or(Value::Null),
                Ok(Err(e)) => json!({ "error": e.to_string() }),
                Err(_) => json!({ "error": "etcd did not answer in time" }),
            }
        }
        None => Value::Null,
    };
    let text = |n: &Value, k: &str| n.get(k).and_then(Value::as_str).map(str::to_string);
    let peers: Vec<(String, String)> = status
        .get("nodes")
        .and_then(Value::as_array)
        .map(|ns| {
            ns.iter()
                .filter(|n| n.get("alive") == Some(&Value::Bool(true)) && text(n, "name").as_deref() != Some(&name))
                .filter_map(|n| Some((text(n, "name")?, text(n, "http")?)))
                .collect()
        })
        .unwrap_or_default();
    let mut asks = tokio::task::JoinSet::new();
    for (n, addr) in peers {
        let p = sh.requirepass.clone();
        asks.spawn(async move {
            let got = tokio::time::timeout(PEER_TIMEOUT, fetch_node(&addr, p.as_deref())).await;
            (n, got.unwrap_or_else(|_| Err("no answer in time".into())))
        });
    }
    while let Some(Ok((n, got))) = asks.join_next().await {
        nodes.insert(n, got.unwrap_or_else(|e| json!({ "error": e })));
    }
    nodes.insert(name.clone(), me);
    json!({ "node": name, "status": status, "nodes": nodes })
}
