//! Halyard's server: the Redis protocol (RESP2 and RESP3) and the native protocol over the
//! engine, with metrics (prometheus-client, OpenMetrics text) and a health check over HTTP.
//!
//! Each connection runs as a task that reads what the client sent, executes every complete
//! request in it in order, and answers them all with one write: pipelined requests cost one
//! wake-up and one syscall per batch, not per request. The engine is synchronous (a write may
//! wait for an fdatasync or a full L0, a read for the device), so the engine runs its long waits
//! off the runtime's worker ([`native::off_worker_hook`]), and a connection whose batches were
//! slow runs them off it for a while ([`native::Offload`]): a stalled connection holds up no
//! other.

// The API is `run` and `config`; the rest is public for the command transcript test only.
mod acl;
#[doc(hidden)]
pub mod cluster;
#[doc(hidden)]
pub mod commands;
pub mod config;
mod console;
pub mod forward;
#[doc(hidden)]
pub mod http;
mod info;
#[doc(hidden)]
pub mod keyspace;
mod lua;
/// Unpacks MessagePack as a script's `cmsgpack.unpack` does (for the fuzz target).
pub use lua::cmsgpack::unpack_all as msgpack_unpack;
#[doc(hidden)]
pub mod metrics;
#[doc(hidden)]
pub mod native;
mod notify;
mod pubsub;
#[doc(hidden)]
pub mod resp;
#[doc(hidden)]
pub mod state;

use crate::resp::{Limits, Reply};
use crate::state::Shared;
use config::ServerConfig;
use halyard_engine::Db;
use std::future::Future;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio_util::task::TaskTracker;

/// Why the server could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServerError {
    /// A listen address is taken or invalid.
    #[error(
        "cannot listen on {addr} ({flag}): {source}; is another server running there? Pick another address with {flag}"
    )]
    Bind {
        /// The flag that sets the address.
        flag: &'static str,
        /// The address.
        addr: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// The configuration is inconsistent.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// The storage engine failed.
    #[error("storage engine: {0}")]
    Engine(#[from] halyard_engine::Error),
}

/// Protected mode, as Redis has it: a listener bound beyond loopback with nothing to
/// authenticate its clients (no password, no cluster secret) serves loopback clients only, and
/// tells the others how to configure one.
fn protected(l: &TcpListener, has_auth: bool) -> bool {
    !has_auth && l.local_addr().is_ok_and(|a| !a.ip().is_loopback())
}

/// What a client refused in protected mode is told.
fn protected_message(what: &str, flag: &str) -> String {
    format!(
        "DENIED Halyard is in protected mode: its {what} listener is bound beyond loopback and has no {flag}, so it \
         serves loopback clients only. Set {flag} (flag or config file), or bind it to 127.0.0.1"
    )
}

async fn bind(flag: &'static str, addr: &str) -> Result<TcpListener, ServerError> {
    TcpListener::bind(addr).await.map_err(|source| ServerError::Bind { flag, addr: addr.to_string(), source })
}

/// Runs a server until `shutdown` completes, then stops accepting, lets connections finish
/// the requests they are executing, flushes the engine and closes it.
pub async fn run(cfg: ServerConfig, shutdown: impl Future<Output = ()>) -> Result<(), ServerError> {
    let dir = cfg.dir.clone();
    run_with(cfg, move |opts| Db::open(&dir, opts), shutdown).await
}

/// [`run`] on the store `open` opens with the configuration's engine options (tests give it
/// stores on a [`halyard_engine::Storage`] of their own).
pub async fn run_with(
    cfg: ServerConfig,
    open: impl FnOnce(halyard_engine::Options) -> halyard_engine::Result<Db>,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ServerError> {
    let opts = cfg.engine_options();
    let resp_l = bind("--resp", &cfg.resp).await?;
    let native_l = bind("--listen", &cfg.listen).await?;
    let http_l = bind("--http", &cfg.http).await?;
    let clustered = cfg.cluster_file.is_some() || !cfg.etcd.is_empty();
    if cfg.cluster_file.is_some() && !cfg.etcd.is_empty() {
        return Err(ServerError::Config("give either --cluster-file or --etcd, not both".into()));
    }
    // A replicated node's logs start new segments after a restart: a backup may hold a longer
    // copy of the primary's last segment than the primary recovered (records it lost), and the
    // same segment incarnation continued would put new records beside them there.
    // The engine's long waits (a stalled writer, an fdatasync) leave the runtime's worker.
    // Under etcd the regions this node led open quiet: until the map names its role in each
    // (a crash may have cost it the lead), compaction and GC would drop segments the new
    // primary never heard of, and the incremental copy on return would send them again.
    let opts = halyard_engine::Options {
        default_region: opts.default_region && !clustered,
        resume_logs: !clustered,
        open_quiet: !cfg.etcd.is_empty(),
        wait_hook: Some(native::off_worker_hook()),
        ..opts
    };
    let db = Arc::new(open(opts)?);
    let cluster = match (&cfg.cluster_file, cfg.etcd.is_empty()) {
        (Some(_), _) => Some(cluster::ClusterNode::start(&cfg, db.clone())?),
        (None, false) => Some(cluster::ClusterNode::start_etcd(&cfg, db.clone()).await?),
        (None, true) => None,
    };
    let repl_task = match &cluster {
        Some(c) => {
            let (flag, addr) = match cfg.etcd.is_empty() {
                true => ("the cluster file's replication address", c.replication_addr()),
                false => ("--replication-listen", cfg.replication_listen.clone()),
            };
            let l = bind(flag, &addr).await?;
            halyard_replication::set_cluster_secret(cfg.cluster_secret.as_deref());
            let guard = protected(&l, cfg.cluster_secret.is_some());
            Some(tokio::spawn(accept_replication(l, c.clone(), guard)))
        }
        None => None,
    };
    let sh = shared_state(&cfg, &db, cluster.as_ref(), &resp_l, &native_l)?;
    let registry = Arc::new(http::registry(sh.clone(), cluster.clone()));
    let (stop_tx, stop_rx) = watch::channel(false);
    tracing::info!(resp = %cfg.resp, native = %cfg.listen, http = %cfg.http, dir = %cfg.dir.display(), "halyard serving");
    let limits = Limits { max_request_bytes: cfg.max_request_bytes, max_args: 1 << 20 };
    let idle = (cfg.idle_timeout_secs > 0).then(|| Duration::from_secs(cfg.idle_timeout_secs));
    // Connection tasks, so that shutdown can wait for the requests in flight.
    let conns = TaskTracker::new();
    let resp_task =
        tokio::spawn(accept_resp(resp_l, sh.clone(), limits, cfg.max_clients, stop_rx.clone(), conns.clone()));
    let native_limits = native::NativeLimits {
        max_frame_bytes: cfg.max_request_bytes.max(64 << 10),
        // The native protocol always has an idle limit: its clients reconnect transparently.
        idle_timeout: idle.unwrap_or(Duration::from_secs(3600)),
    };
    let router = cluster.clone().map(|c| c as Arc<dyn native::Router>);
    let native_task = tokio::spawn(accept_native(
        native_l,
        sh.clone(),
        native_limits,
        cfg.max_clients,
        stop_rx.clone(),
        conns.clone(),
        router,
    ));
    let http_task =
        tokio::spawn(http::serve(http_l, registry, sh.clone(), cluster.clone(), stop_rx.clone(), conns.clone()));
    let expired_task = tokio::spawn(expired_events(sh.clone()));
    // The caller's signal, or a client's SHUTDOWN.
    tokio::select! {
        () = shutdown => {}
        () = sh.shutdown.notified() => tracing::info!("SHUTDOWN asked by a client"),
    }
    expired_task.abort();
    if let Some(c) = &cluster {
        // Still serving: the master hands this node's primaries off meanwhile.
        tracing::info!("shutting down: leaving the cluster's groups first");
        c.leave().await;
    }
    tracing::info!("shutting down: no new connections, finishing requests in flight");
    let _ = stop_tx.send(true);
    for (name, t) in [("redis", resp_task), ("native", native_task), ("http", http_task)] {
        if tokio::time::timeout(Duration::from_secs(5), t).await.is_err() {
            tracing::warn!("the {name} listener did not stop within 5 s; going on without it");
        }
    }
    if let Some(t) = repl_task {
        t.abort();
    }
    conns.close();
    let _ = tokio::time::timeout(Duration::from_secs(10), conns.wait()).await;
    drop(sh);
    flush_on_exit(db).await
}

/// Publishes the `expired` events of the keys `notify` watches, as their expiry comes (Redis'
/// background expiry announces them without a client touching the key).
async fn expired_events(sh: Arc<Shared>) {
    let mut tick = tokio::time::interval(Duration::from_millis(50));
    loop {
        tick.tick().await;
        let n = &sh.settings.notify;
        for (db, key) in n.due(sh.ks.now_ms()) {
            let Some(k) = sh.database(db) else { continue };
            match k.expiry(&key) {
                // Not yet gone by the store's clock: looked at again on the next tick.
                Ok(Some(at)) if at > 0 => n.watch_expiry(at, db, &key),
                Ok(Some(_)) => {}
                Ok(None) => {
                    for (channel, msg) in notify::messages(n.flags(), db, notify::EXPIRED, "expired", &key) {
                        sh.pubsub.publish(&channel, &msg, commands::glob);
                    }
                }
                Err(e) => tracing::warn!("announcing an expiry: {e}"),
            }
        }
    }
}

/// What the server's connections share, with the settings of `cfg`.
fn shared_state(
    cfg: &ServerConfig,
    db: &Arc<Db>,
    cluster: Option<&Arc<cluster::ClusterNode>>,
    resp_l: &TcpListener,
    native_l: &TcpListener,
) -> Result<Arc<Shared>, ServerError> {
    let ks = keyspace::Keyspace::new(db.clone()).map_err(|e| ServerError::Config(e.to_string()))?;
    let sh = Arc::new(Shared::new(ks, cfg.requirepass.clone(), metrics::Metrics::new(&commands::names())));
    if let Some(d) = &cfg.backup_dir {
        let _ = sh.backup_dir.set(d.clone());
    }
    if let Some(c) = cluster {
        let _ = sh.cluster.set(c.clone());
        forward::install(&sh, c);
    }
    sh.protect_resp.store(protected(resp_l, cfg.requirepass.is_some()), Relaxed);
    sh.protect_native.store(protected(native_l, cfg.requirepass.is_some()), Relaxed);
    sh.settings.timeout.store(cfg.idle_timeout_secs, Relaxed);
    sh.settings.max_clients.store(cfg.max_clients as u64, Relaxed);
    sh.settings.port.store(resp_l.local_addr().map_or(0, |a| u64::from(a.port())), Relaxed);
    let _ = sh.settings.dir.set(cfg.dir.display().to_string());
    Ok(sh)
}

/// Writes the engine's memory out before the process ends.
/// Writes the engine's memory out before the process ends, for at most a minute: what is not
/// written out by then is in the synced logs, which the next open replays.
async fn flush_on_exit(db: Arc<Db>) -> Result<(), ServerError> {
    let flush = tokio::task::spawn_blocking(move || db.flush());
    match tokio::time::timeout(Duration::from_secs(60), flush).await {
        Ok(Ok(Ok(()))) => tracing::info!("engine flushed; bye"),
        Ok(Ok(Err(e))) => return Err(e.into()),
        Ok(Err(e)) => tracing::error!("flush task failed: {e}"),
        Err(_) => tracing::warn!("the engine did not flush within 60 s; exiting (the logs hold the writes)"),
    }
    Ok(())
}

/// The next client admitted on `l`: `Ok` counted as connected (the caller's task must
/// decrement), `Err` refused over `max_clients`. None once the server stops.
async fn next_client(
    l: &TcpListener,
    sh: &Shared,
    max_clients: usize,
    stop: &mut watch::Receiver<bool>,
) -> Option<Result<(TcpStream, std::net::SocketAddr), TcpStream>> {
    loop {
        let accepted = tokio::select! {
            a = l.accept() => a,
            _ = stop.changed() => return None,
        };
        let (stream, addr) = match accepted {
            Ok(x) => x,
            Err(e) => {
                tracing::warn!("accept: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        sh.metrics.connections_total.fetch_add(1, Relaxed);
        if sh.connected.load(Relaxed) >= max_clients {
            sh.metrics.connections_rejected.fetch_add(1, Relaxed);
            return Some(Err(stream));
        }
        let _ = stream.set_nodelay(true);
        // Counted before the connection's task runs, so that a burst cannot overshoot.
        sh.connected.fetch_add(1, Relaxed);
        return Some(Ok((stream, addr)));
    }
}

async fn accept_resp(
    l: TcpListener,
    sh: Arc<Shared>,
    limits: Limits,
    max_clients: usize,
    mut stop: watch::Receiver<bool>,
    conns: TaskTracker,
) {
    while let Some(next) = next_client(&l, &sh, max_clients, &mut stop).await {
        let (mut stream, addr) = match next {
            Ok(x) => x,
            Err(mut refused) => {
                let _ = refused.write_all(b"-ERR max number of clients reached\r\n").await;
                continue;
            }
        };
        if sh.protect_resp.load(Relaxed) && !addr.ip().is_loopback() {
            sh.metrics.protected_refusals.fetch_add(1, Relaxed);
            sh.connected.fetch_sub(1, Relaxed);
            let m = format!("-{}\r\n", protected_message("Redis", "requirepass"));
            let _ = stream.write_all(m.as_bytes()).await;
            continue;
        }
        let (sh, stop) = (sh.clone(), stop.clone());
        conns.spawn(async move {
            if let Err(e) = resp_connection(&sh, &mut stream, addr.to_string(), limits, stop).await {
                tracing::debug!("connection {addr}: {e}");
            }
            // The slot is free before the client can see its connection close, so that a
            // client reconnecting at once is not refused over --max-clients.
            sh.connected.fetch_sub(1, Relaxed);
            drop(stream);
        });
    }
}

/// What a connection does after executing what its buffer held.
enum Flow {
    /// Read more.
    Read,
    /// Write the replies and close.
    Close,
    /// A write waits for room in backups' queues (cluster mode): write the replies, wait, and
    /// execute the rest of the buffer.
    WaitRoom,
    /// A command for other nodes (cluster mode, [`forward`]): run it, then the rest of the buffer.
    Remote(&'static commands::Command, Vec<Vec<u8>>),
    /// A blocking command found nothing (`Session::block`): write the replies so far, wait for
    /// a write to its keys or its timeout, and execute the buffer again from that command.
    Block,
}

/// Executes the complete requests at the start of `buf`, appending replies to `out`; returns
/// the bytes consumed.
fn execute_resp(
    sh: &Shared,
    sess: &mut state::Session,
    buf: &[u8],
    out: &mut Vec<u8>,
    limits: Limits,
) -> (usize, Flow) {
    let mut pos = 0;
    loop {
        match resp::parse(buf.get(pos..).unwrap_or_default(), limits) {
            Ok(Some((args, used))) => {
                if args.is_empty() {
                    pos += used;
                    continue;
                }
                let refs: smallvec::SmallVec<[&[u8]; 6]> = args.iter().map(|a| a.as_ref()).collect();
                let reply = match commands::plan(sh, sess, &refs) {
                    Ok(p) if p.writes() && sh.cluster.get().is_some_and(|c| c.shipper.is_full(None)) => {
                        // Writes wait while some backup's queue is full (parsed again then).
                        return (pos, Flow::WaitRoom);
                    }
                    Ok(p) if p.remote => {
                        return (pos + used, Flow::Remote(p.cmd, refs.iter().map(|a| a.to_vec()).collect()));
                    }
                    Ok(p) => commands::run(sh, sess, &refs, &p),
                    Err(reply) => reply,
                };
                if std::mem::take(&mut sess.waiting) {
                    return (pos, Flow::Block);
                }
                pos += used;
                if let Some(p) = sess.proto_next.take() {
                    sess.proto = p;
                }
                // Pushes (subscription confirmations) go out whatever CLIENT REPLY says.
                if replies_now(sess) || reply.is_push() {
                    reply.encode(sess.proto, out);
                }
                if sess.quit {
                    return (pos, Flow::Close);
                }
            }
            Ok(None) => return (pos, Flow::Read),
            Err(e) => {
                sh.metrics.protocol_errors.fetch_add(1, Relaxed);
                Reply::err(format!("ERR Protocol error: {}", e.0)).encode(sess.proto, out);
                return (pos, Flow::Close);
            }
        }
    }
}

async fn resp_connection(
    sh: &Shared,
    stream: &mut TcpStream,
    addr: String,
    limits: Limits,
    stop: watch::Receiver<bool>,
) -> std::io::Result<()> {
    let mut sess = sh.session(addr);
    let r = resp_session(sh, stream, &mut sess, limits, stop).await;
    sh.close(&mut sess);
    r
}

/// Whether the reply to the command just run goes out (CLIENT REPLY), moving SKIP on.
fn replies_now(sess: &mut state::Session) -> bool {
    use state::Replies;
    match sess.replies {
        Replies::On => true,
        Replies::Off => false,
        Replies::SkipNext => {
            sess.replies = Replies::Skip;
            false
        }
        Replies::Skip => {
            sess.replies = Replies::On;
            false
        }
    }
}

/// Encodes a published message for a subscriber, and whatever else its queue holds.
fn deliver(sess: &mut state::Session, first: Option<std::sync::Arc<pubsub::Message>>, out: &mut Vec<u8>) {
    let Some(subs) = sess.subs.as_mut() else { return };
    let mut next = first;
    while let Some(m) = next {
        let mut items = match &m.pattern {
            Some(p) => vec![resp::Reply::bulk("pmessage"), resp::Reply::bulk(p.as_slice())],
            None => vec![resp::Reply::bulk("message")],
        };
        items.push(resp::Reply::bulk(m.channel.as_slice()));
        items.push(resp::Reply::bulk(m.payload.as_slice()));
        resp::Reply::Push(items).encode(sess.proto, out);
        next = subs.inbox.try_recv().ok();
    }
}

/// Waits while `sess` is blocked: until a write wakes it, its timeout, the server stops
/// (false) or the client closes (false). What the client sends meanwhile is kept in `buf`.
async fn wait_unblocked(
    sess: &state::Session,
    stream: &mut TcpStream,
    buf: &mut Vec<u8>,
    stop: &mut watch::Receiver<bool>,
) -> std::io::Result<bool> {
    let deadline = sess.block.as_ref().and_then(|b| b.deadline);
    let notify = sess.notify.clone();
    let timeout = async {
        match deadline {
            Some(d) => tokio::time::sleep_until(d.into()).await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = notify.notified() => Ok(true),
        _ = timeout => Ok(true),
        _ = stop.changed() => Ok(false),
        r = stream.read_buf(buf) => Ok(r? > 0),
    }
}

async fn resp_session(
    sh: &Shared,
    stream: &mut TcpStream,
    sess: &mut state::Session,
    limits: Limits,
    mut stop: watch::Receiver<bool>,
) -> std::io::Result<()> {
    let mut buf: Vec<u8> = Vec::with_capacity(16 << 10);
    let mut out: Vec<u8> = Vec::with_capacity(16 << 10);
    let mut offload = native::Offload::new();
    loop {
        // CONFIG SET timeout changes it while connections wait.
        let idle = sh.settings.idle();
        let read = async {
            match idle {
                Some(t) => tokio::time::timeout(t, stream.read_buf(&mut buf)).await.ok(),
                None => Some(stream.read_buf(&mut buf).await),
            }
        };
        let inbox = async {
            match sess.subs.as_mut() {
                Some(s) => s.inbox.recv().await,
                None => std::future::pending().await,
            }
        };
        let n = tokio::select! {
            r = read => r,
            m = inbox => {
                if m.is_none() || sess.subs.as_ref().is_some_and(|s| s.cut_off()) {
                    // Its queue overflowed: cut off, as Redis cuts a client past its buffer.
                    return Ok(());
                }
                deliver(sess, m, &mut out);
                stream.write_all(&out).await?;
                out.clear();
                continue;
            }
            _ = stop.changed() => return Ok(()),
        };
        let n = match n {
            None => {
                sh.metrics.idle_timeouts.fetch_add(1, Relaxed);
                return Ok(());
            }
            Some(r) => r?,
        };
        if n == 0 {
            return Ok(());
        }
        sh.metrics.bytes_in.fetch_add(n as u64, Relaxed);
        loop {
            let (pos, flow) = offload.run(|| execute_resp(sh, sess, &buf, &mut out, limits));
            buf.drain(..pos);
            if let Flow::Remote(cmd, args) = &flow {
                let reply = forward::run(sh, sess, cmd, args).await?;
                out.extend_from_slice(&reply);
            }
            if !sess.writes.is_empty() {
                let writes = std::mem::take(&mut sess.writes);
                if let Some(c) = sh.cluster.get() {
                    if !c.wait_acked(&writes).await {
                        // A backup did not take the writes in time: their outcome is unknown,
                        // so the client is not told they succeeded.
                        return Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "a backup did not acknowledge"));
                    }
                }
            }
            if !out.is_empty() {
                stream.write_all(&out).await?;
                sh.metrics.bytes_out.fetch_add(out.len() as u64, Relaxed);
                out.clear();
            }
            match flow {
                Flow::Read => break,
                Flow::Close => return Ok(()),
                Flow::Remote(..) => {}
                Flow::Block => {
                    if !wait_unblocked(sess, stream, &mut buf, &mut stop).await? {
                        return Ok(());
                    }
                }
                Flow::WaitRoom => {
                    if let Some(c) = sh.cluster.get() {
                        c.shipper.wait_room(None).await;
                    }
                }
            }
        }
        if buf.capacity() > 1 << 20 && buf.len() < 16 << 10 {
            buf.shrink_to(16 << 10);
        }
    }
}

/// Replication streams from primaries and admin requests (cluster mode).
async fn accept_replication(l: TcpListener, node: Arc<cluster::ClusterNode>, protect: bool) {
    let hook: halyard_replication::Hooks = node.clone();
    loop {
        let (mut s, addr) = match l.accept().await {
            Ok(x) => x,
            Err(e) => {
                tracing::warn!("replication accept: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        if protect && !addr.ip().is_loopback() {
            node.replica.stats.unauthenticated.fetch_add(1, Relaxed);
            let reason = protected_message("replication", "cluster_secret (--cluster-secret)");
            let _ = s.write_all(&halyard_replication::Msg::Reject { region: 0, reason }.encode()).await;
            continue;
        }
        let (replica, hook) = (node.replica.clone(), hook.clone());
        tokio::spawn(async move {
            match replica.serve_connection(s, hook).await {
                Ok(()) => {}
                // A peer that connects and leaves without a word (a port probe) is no news.
                Err(halyard_replication::Error::Io(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                    tracing::debug!("replication connection from {addr} closed: {e}")
                }
                Err(e) => tracing::warn!("replication connection from {addr}: {e}"),
            }
        });
    }
}

async fn accept_native(
    l: TcpListener,
    sh: Arc<Shared>,
    limits: native::NativeLimits,
    max_clients: usize,
    mut stop: watch::Receiver<bool>,
    conns: TaskTracker,
    router: Option<Arc<dyn native::Router>>,
) {
    while let Some(next) = next_client(&l, &sh, max_clients, &mut stop).await {
        // A refused native client sees its connection closed.
        let Ok((mut stream, addr)) = next else { continue };
        let beyond = sh.protect_native.load(Relaxed) && !addr.ip().is_loopback();
        // With a cluster secret, a peer beyond loopback (another node forwarding Redis
        // commands, or a client given the secret) must authenticate with it; without one, it
        // is refused.
        let must_auth = beyond && halyard_replication::cluster_secret().is_some();
        if beyond && !must_auth {
            sh.metrics.protected_refusals.fetch_add(1, Relaxed);
            sh.connected.fetch_sub(1, Relaxed);
            let mut out = Vec::new();
            let e = halyard_proto::Response::Error {
                code: halyard_proto::ErrorCode::AuthRequired,
                message: protected_message("native", "requirepass"),
            };
            if halyard_proto::encode_response(0, &e, &mut out, usize::MAX).is_ok() {
                let _ = stream.write_all(&out).await;
            }
            continue;
        }
        let (sh, mut stop, router) = (sh.clone(), stop.clone(), router.clone());
        let password: Option<Arc<str>> = sh.requirepass.as_deref().map(Arc::from);
        conns.spawn(async move {
            let db = sh.ks.db.clone();
            tokio::select! {
                r = native::serve_connection(&mut stream, db, limits, sh.native.clone(), router, password, must_auth) => {
                    if let Err(e) = r {
                        tracing::debug!("native connection {addr}: {e}");
                    }
                }
                _ = stop.changed() => {}
            }
            // Free before the close, as for RESP clients.
            sh.connected.fetch_sub(1, Relaxed);
            drop(stream);
        });
    }
}
