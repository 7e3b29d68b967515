//! End to end: the client against the server's native handler over a real engine.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    missing_docs,
    reason = "test code: a failure stops where it happened"
)]

mod common;

use std::ops::Bound::{self, Excluded, Included, Unbounded};
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use common::{limits, raw_connect, read_until_eof, start};
use halyard_client::{Batch, Client, ClientOptions, Error, ErrorCode};
use halyard_proto::{Request, Response};
use tokio::io::AsyncWriteExt;

const MB: usize = 1 << 20;
const LONG: Duration = Duration::from_secs(60);

async fn client(addr: std::net::SocketAddr) -> Client {
    Client::connect(addr, ClientOptions::default()).await.unwrap()
}

fn keys(pairs: &[(Vec<u8>, Vec<u8>)]) -> Vec<&[u8]> {
    pairs.iter().map(|(k, _)| k.as_slice()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_op_round_trips() {
    let srv = start(limits(MB, LONG)).await;
    let c = client(srv.addr).await;
    c.ping().await.unwrap();
    assert_eq!(c.get(b"missing").await.unwrap(), None);
    c.put(b"a", b"1").await.unwrap();
    c.put(b"empty", b"").await.unwrap();
    assert_eq!(c.get(b"a").await.unwrap(), Some(b"1".to_vec()));
    assert_eq!(c.get(b"empty").await.unwrap(), Some(vec![]));
    c.delete(b"a").await.unwrap();
    assert_eq!(c.get(b"a").await.unwrap(), None);
    c.write_batch(Batch::new().put("b", "2").put("c", "3").put("d", "4").delete("empty")).await.unwrap();
    assert_eq!(srv.db.get(b"c").unwrap(), Some(b"3".to_vec()), "the batch reached the engine");

    let page = c.scan(Unbounded, Unbounded, 0, false).await.unwrap();
    assert_eq!(keys(&page.pairs), [b"b", b"c", b"d"]);
    assert_eq!(page.resume, None);
    let page = c.scan(Included(b"b"), Excluded(b"d"), 1, false).await.unwrap();
    assert_eq!(page.pairs, [(b"b".to_vec(), b"2".to_vec())]);
    assert_eq!(page.resume.as_deref(), Some(&b"b"[..]));
    let page = c.scan(Unbounded, Included(b"c"), 5, true).await.unwrap();
    assert_eq!(keys(&page.pairs), [b"c", b"b"]);
    assert_eq!(page.resume, None, "exactly exhausted at the limit is not 'more'");
    assert!(srv.counters.requests.load(Relaxed) >= 13);
    assert_eq!(srv.counters.errors.load(Relaxed), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn engine_errors_have_distinct_codes() {
    let srv = start(limits(MB, LONG)).await;
    let c = client(srv.addr).await;
    let err = c.put(vec![b'k'; 300], b"v").await.unwrap_err(); // tiny(): max_key_bytes = 256
    assert_eq!(err.code(), Some(ErrorCode::KeyTooLarge), "{err}");
    assert!(err.to_string().contains("300 bytes"), "{err}");
    let err = c.put(b"k", vec![0u8; 100 << 10]).await.unwrap_err(); // tiny(): 64 KiB segments
    assert_eq!(err.code(), Some(ErrorCode::ValueTooLarge), "{err}");
    let err = c.write_batch(Batch::new().put("ok", "1").put(vec![b'k'; 300], "v")).await.unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::KeyTooLarge));
    assert_eq!(c.get(b"ok").await.unwrap(), None, "a failed batch applies nothing");
    assert_eq!(srv.counters.errors.load(Relaxed), 3);
    c.ping().await.unwrap(); // errors do not close the connection
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelines_1000_concurrent_requests_from_clones() {
    let srv = start(limits(MB, LONG)).await;
    let c = client(srv.addr).await;
    let tasks: Vec<_> = (0..1000u32)
        .map(|i| {
            let c = c.clone();
            tokio::spawn(async move {
                let k = format!("key{i:04}");
                c.put(&k, i.to_le_bytes()).await.unwrap();
                assert_eq!(c.get(&k).await.unwrap(), Some(i.to_le_bytes().to_vec()));
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    let all = c.scan_all(Unbounded, Unbounded, false).await.unwrap();
    assert_eq!(all.len(), 1000);
    // Far fewer reads than requests: the pipelined frames arrived (and were answered) in batches.
    assert!(srv.counters.requests.load(Relaxed) >= 2001);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scan_all_pages_by_count_and_by_frame_size() {
    let srv = start(limits(MB, LONG)).await;
    let opts = ClientOptions { scan_page_pairs: 70, max_frame_bytes: 4096, ..Default::default() };
    let c = Client::connect(srv.addr, opts).await.unwrap();
    let mut b = Batch::new();
    for i in 0..500u32 {
        b.put(format!("k{i:03}"), vec![i as u8; 100]);
    }
    c.write_batch(&b).await.unwrap();

    let fwd = c.scan_all(Unbounded, Unbounded, false).await.unwrap();
    let expect: Vec<Vec<u8>> = (0..500).map(|i| format!("k{i:03}").into_bytes()).collect();
    assert_eq!(fwd.iter().map(|(k, _)| k.clone()).collect::<Vec<_>>(), expect);
    let rev = c.scan_all(Included(b"k100"), Excluded(b"k200"), true).await.unwrap();
    assert_eq!(rev.len(), 100);
    assert_eq!(rev[0].0, b"k199");
    assert_eq!(rev[99].0, b"k100");

    // No count limit: the 4 KiB frame limit alone cuts pages, each within it.
    let page = c.scan(Unbounded, Unbounded, 0, false).await.unwrap();
    assert!(page.pairs.len() > 10 && page.pairs.len() < 40, "{} pairs", page.pairs.len());
    assert_eq!(page.resume.as_ref(), page.pairs.last().map(|(k, _)| k));

    // A value that cannot fit in the client's frame limit is refused, not truncated.
    c.put(b"big", vec![7u8; 8192]).await.unwrap();
    let err = c.get(b"big").await.unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::ResponseTooLarge), "{err}");
    let err = c.scan(Included(b"big"), Unbounded, 0, false).await.unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::ResponseTooLarge), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_bytes_get_an_error_and_a_close_and_others_are_unaffected() {
    let srv = start(limits(MB, LONG)).await;
    let c = client(srv.addr).await;
    c.put(b"x", b"1").await.unwrap();

    let mut raw = tokio::net::TcpStream::connect(srv.addr).await.unwrap();
    raw.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").await.unwrap();
    let replies = read_until_eof(&mut raw).await;
    assert!(
        matches!(&replies[..], [(0, Response::Error { code: ErrorCode::Malformed, message })] if message.contains("magic")),
        "{replies:?}"
    );

    // A corrupted checksum after a good handshake.
    let mut raw = raw_connect(srv.addr).await;
    let mut f = common::frame(5, &Request::Put { key: b"x", value: b"evil" });
    let last = f.len() - 1;
    f[last] ^= 0xff;
    raw.write_all(&f).await.unwrap();
    let replies = read_until_eof(&mut raw).await;
    assert!(matches!(&replies[..], [(0, Response::Error { code: ErrorCode::Checksum, .. })]), "{replies:?}");

    assert_eq!(srv.counters.bad_frames.load(Relaxed), 2);
    assert_eq!(c.get(b"x").await.unwrap(), Some(b"1".to_vec()), "data and other clients unaffected");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_frames_are_refused_before_reading_them() {
    let srv = start(limits(64 << 10, LONG)).await;
    let mut raw = raw_connect(srv.addr).await;
    // Only a header, claiming a 1 GiB payload: the server must answer without waiting for it.
    let mut hdr = halyard_proto::MAGIC.to_le_bytes().to_vec();
    hdr.extend_from_slice(&(1u32 << 30).to_le_bytes());
    raw.write_all(&hdr).await.unwrap();
    let replies = read_until_eof(&mut raw).await;
    assert!(matches!(&replies[..], [(0, Response::Error { code: ErrorCode::FrameTooLarge, .. })]), "{replies:?}");
    assert_eq!(srv.counters.bad_frames.load(Relaxed), 1);

    // The client knows the limit from the handshake and refuses locally; its connection survives.
    let c = client(srv.addr).await;
    let err = c.put(b"k", vec![0u8; 70 << 10]).await.unwrap_err();
    assert!(matches!(err, Error::RequestTooLarge { max: 65536, .. }), "{err}");
    c.put(b"k", b"small").await.unwrap();
    assert_eq!(srv.counters.bad_frames.load(Relaxed), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_before_the_handshake_are_refused() {
    let srv = start(limits(MB, LONG)).await;
    let mut raw = tokio::net::TcpStream::connect(srv.addr).await.unwrap();
    raw.write_all(&common::frame(1, &Request::Get { key: b"k" })).await.unwrap();
    let replies = read_until_eof(&mut raw).await;
    assert!(matches!(&replies[..], [(1, Response::Error { code: ErrorCode::HandshakeRequired, .. })]), "{replies:?}");

    let mut raw = tokio::net::TcpStream::connect(srv.addr).await.unwrap();
    let hello = Request::Hello { min_version: 2, max_version: 9, max_frame_bytes: 1 << 20 };
    raw.write_all(&common::frame(0, &hello)).await.unwrap();
    let replies = read_until_eof(&mut raw).await;
    assert!(matches!(&replies[..], [(0, Response::Error { code: ErrorCode::UnsupportedVersion, .. })]), "{replies:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_opcode_fails_only_that_request() {
    let srv = start(limits(MB, LONG)).await;
    let mut raw = raw_connect(srv.addr).await;
    let mut bytes = Vec::new();
    let start = halyard_proto::begin_frame(&mut bytes, 7, 0x55);
    halyard_proto::finish_frame(&mut bytes, start, usize::MAX).unwrap();
    bytes.extend(common::frame(8, &Request::Ping { payload: b"hi" }));
    raw.write_all(&bytes).await.unwrap();
    raw.shutdown().await.unwrap();
    let replies = read_until_eof(&mut raw).await;
    assert!(matches!(&replies[0], (7, Response::Error { code: ErrorCode::UnknownOp, .. })), "{replies:?}");
    assert_eq!(replies[1], (8, Response::Pong { payload: b"hi".to_vec() }));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_are_closed_and_the_client_reconnects() {
    let srv = start(limits(MB, Duration::from_millis(300))).await;
    let mut raw = raw_connect(srv.addr).await;
    let t = std::time::Instant::now();
    let replies = read_until_eof(&mut raw).await;
    assert!(t.elapsed() >= Duration::from_millis(250), "closed after {:?}", t.elapsed());
    assert!(matches!(&replies[..], [(0, Response::Error { code: ErrorCode::IdleTimeout, .. })]), "{replies:?}");

    let c = client(srv.addr).await;
    c.put(b"k", b"v").await.unwrap();
    tokio::time::sleep(Duration::from_millis(700)).await; // the server drops this connection too
    assert_eq!(c.get(b"k").await.unwrap(), Some(b"v".to_vec()), "the next call reconnects");
    assert!(srv.counters.errors.load(Relaxed) >= 2, "idle closes are counted");
}

/// A fake server that answers in reverse order, then goes silent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn out_of_order_replies_are_matched_and_silence_times_out() {
    use tokio::io::AsyncReadExt;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let (mut s, _) = listener.accept().await.unwrap();
        let mut buf = Vec::new();
        let mut frames = Vec::new();
        while frames.len() < 3 {
            s.read_buf(&mut buf).await.unwrap();
            while let Some((f, n)) = halyard_proto::decode_frame(&buf, usize::MAX).unwrap() {
                let key = match Request::decode(f.kind, f.payload).unwrap() {
                    Request::Get { key } => Some(key.to_vec()),
                    _ => None,
                };
                frames.push((f.id, key));
                buf.drain(..n);
            }
            if frames.len() == 1 {
                let mut out = Vec::new();
                let ok = Response::HelloOk { version: 1, max_frame_bytes: 1 << 20 };
                halyard_proto::encode_response(frames[0].0, &ok, &mut out, usize::MAX).unwrap();
                s.write_all(&out).await.unwrap();
            }
        }
        let mut out = Vec::new();
        for (id, key) in frames[1..].iter().rev() {
            halyard_proto::encode_response(*id, &Response::Value(key.clone()), &mut out, usize::MAX).unwrap();
        }
        s.write_all(&out).await.unwrap();
        tokio::time::sleep(Duration::from_secs(30)).await; // keep the socket open, say nothing
    });
    let opts = ClientOptions { timeout: Duration::from_millis(500), ..Default::default() };
    let c = Client::connect(addr, opts).await.unwrap();
    let (a, b) = tokio::join!(c.get(b"first"), c.get(b"second"));
    assert_eq!(a.unwrap(), Some(b"first".to_vec()));
    assert_eq!(b.unwrap(), Some(b"second".to_vec()));
    assert!(matches!(c.ping().await, Err(Error::Timeout)));
}

#[test]
fn blocking_client_does_every_op() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let srv = rt.block_on(start(limits(MB, LONG)));
    let c = halyard_client::blocking::Client::connect(srv.addr, ClientOptions::default()).unwrap();
    c.ping().unwrap();
    c.put(b"a", b"1").unwrap();
    c.write_batch(Batch::new().put("b", "2").put("c", "3")).unwrap();
    c.delete(b"c").unwrap();
    assert_eq!(c.get(b"a").unwrap(), Some(b"1".to_vec()));
    assert_eq!(c.get(b"c").unwrap(), None);
    let page = c.scan(Included(b"a"), Unbounded, 1, false).unwrap();
    assert_eq!(page.resume.as_deref(), Some(&b"a"[..]));
    let all = c.scan_all(Bound::Unbounded, Unbounded, true).unwrap();
    assert_eq!(keys(&all), [b"b", b"a"]);
    // Clones used from several threads share the connection.
    std::thread::scope(|s| {
        for t in 0..4 {
            let c = c.clone();
            s.spawn(move || {
                for i in 0..50 {
                    c.put(format!("t{t}-{i}"), b"v").unwrap();
                }
            });
        }
    });
    assert_eq!(c.scan_all(Included(b"t"), Unbounded, false).unwrap().len(), 200);
}
