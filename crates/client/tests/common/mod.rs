//! Test servers: the real native handler over a real engine, and raw-socket helpers.

#![allow(dead_code)]

#[path = "../../../server/src/native.rs"]
pub mod native;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use halyard_engine::{Db, Options};
use halyard_proto::{decode_frame, encode_request, Request, Response};
use native::{NativeCounters, NativeLimits};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

pub struct TestServer {
    pub addr: SocketAddr,
    pub counters: Arc<NativeCounters>,
    pub db: Arc<Db>,
    _dir: tempfile::TempDir,
}

pub fn limits(max_frame_bytes: usize, idle: Duration) -> NativeLimits {
    NativeLimits { max_frame_bytes, idle_timeout: idle }
}

/// Opens a store in a temp dir and serves it on 127.0.0.1 from the current runtime.
pub async fn start(limits: NativeLimits) -> TestServer {
    let dir = tempfile::tempdir().unwrap();
    let db = Arc::new(Db::open(dir.path(), Options::tiny()).unwrap());
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let counters = Arc::new(NativeCounters::default());
    let (db2, c2) = (db.clone(), counters.clone());
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            let (db, c) = (db2.clone(), c2.clone());
            tokio::spawn(async move { native::serve_connection(&mut s, db, limits, c, None, None, false).await });
        }
    });
    TestServer { addr, counters, db, _dir: dir }
}

pub fn frame(id: u64, req: &Request<'_>) -> Vec<u8> {
    let mut out = Vec::new();
    encode_request(id, req, &mut out, usize::MAX).unwrap();
    out
}

pub fn hello() -> Vec<u8> {
    frame(0, &Request::Hello { min_version: 1, max_version: 1, max_frame_bytes: 1 << 20 })
}

/// Reads replies until the server closes the connection (or 5 s pass).
pub async fn read_until_eof(s: &mut TcpStream) -> Vec<(u64, Response)> {
    let mut buf = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut buf))
        .await
        .expect("server did not close the connection")
        .ok(); // a reset after the error frame is also a close
    decode_all(&buf)
}

pub fn decode_all(mut buf: &[u8]) -> Vec<(u64, Response)> {
    let mut out = Vec::new();
    while let Some((f, n)) = decode_frame(buf, usize::MAX).unwrap() {
        out.push((f.id, Response::decode(f.kind, f.payload).unwrap()));
        buf = &buf[n..];
    }
    assert!(buf.is_empty(), "trailing partial frame");
    out
}

/// Connects and completes the handshake on a raw socket.
pub async fn raw_connect(addr: SocketAddr) -> TcpStream {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(&hello()).await.unwrap();
    let mut buf = vec![0u8; 27];
    s.read_exact(&mut buf).await.unwrap();
    assert!(matches!(decode_all(&buf)[0].1, Response::HelloOk { version: 1, .. }));
    s
}
