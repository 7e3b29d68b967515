//! `halyard serve` through the native protocol: the Rust client and the `halyard` CLI tools.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    missing_docs,
    reason = "test code: a failure stops where it happened"
)]

mod common;
use common::*;
use halyard_client::blocking::Client;
use halyard_client::{Batch, ClientOptions};
use std::ops::Bound;
use std::process::Command;

fn cli(srv: &Server, args: &[&str]) -> (bool, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_halyard"))
        .args(args)
        .args(["--addr", &format!("127.0.0.1:{}", srv.native)])
        .output()
        .expect("halyard");
    (o.status.success(), format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr)))
}

#[test]
fn rust_client_and_cli_against_a_real_server() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut srv = Server::start(dir.path(), &["--sync", "always"]);
    let c = Client::connect(("127.0.0.1", srv.native), ClientOptions::default()).expect("connect");
    c.ping().expect("ping");
    for i in 0..500u32 {
        c.put(format!("n{i:04}"), vec![b'v'; (i % 7 * 300) as usize + 1]).expect("put");
    }
    assert_eq!(c.get("n0007").expect("get"), Some(vec![b'v'; 1]));
    c.delete("n0007").expect("delete");
    assert_eq!(c.get("n0007").expect("get"), None);
    let mut b = Batch::new();
    b.put("batch-a", "1").put("batch-b", "2").delete("n0008");
    c.write_batch(&b).expect("batch");
    let all = c.scan_all(Bound::Unbounded, Bound::Unbounded, false).expect("scan");
    assert_eq!(all.len(), 500 - 2 + 2);
    assert!(all.windows(2).all(|w| w[0].0 < w[1].0));
    // Pipelining from threads sharing one connection.
    std::thread::scope(|s| {
        for t in 0..4 {
            let c = c.clone();
            s.spawn(move || {
                for i in 0..250 {
                    c.put(format!("t{t}-{i}"), "x").expect("put");
                }
            });
        }
    });
    assert_eq!(c.scan_all(Bound::Included(&b"t"[..]), Bound::Excluded(&b"u"[..]), false).expect("scan").len(), 1000);
    // A range delete: one request, the end excluded; an inverted range is refused.
    c.delete_range("t1-", "t2-").expect("delete range");
    assert_eq!(c.scan_all(Bound::Included(&b"t"[..]), Bound::Excluded(&b"u"[..]), false).expect("scan").len(), 750);
    let err = c.delete_range("t3", "t2").expect_err("an inverted range");
    assert_eq!(err.code(), Some(halyard_client::ErrorCode::InvalidArgument), "{err}");
    assert_eq!(cli(&srv, &["delrange", "t2-", "t3-"]), (true, String::new()));
    assert_eq!(c.get("t2-5").expect("get"), None);
    assert_eq!(c.get("t3-5").expect("get"), Some(b"x".to_vec()));

    assert_eq!(cli(&srv, &["put", "cli-key", "hello world"]), (true, String::new()));
    assert_eq!(cli(&srv, &["get", "cli-key"]), (true, "hello world\n".into()));
    let (ok, out) = cli(&srv, &["scan", "batch", "batch-z"]);
    assert!(ok && out == "batch-a\t1\nbatch-b\t2\n", "{out}");
    assert!(cli(&srv, &["del", "cli-key"]).0);
    let (ok, out) = cli(&srv, &["get", "cli-key"]);
    assert!(!ok && out.contains("not found"), "{out}");

    // The same data through the Redis protocol is a separate key space prefix-wise, but
    // survives a restart like everything else.
    drop(c);
    assert!(srv.stop().success());
    let srv = Server::start(dir.path(), &[]);
    let c = Client::connect(("127.0.0.1", srv.native), ClientOptions::default()).expect("connect");
    assert_eq!(c.get("batch-b").expect("get"), Some(b"2".to_vec()));
    let (ok, out) = cli(&srv, &["get", "t3-249"]);
    assert!(ok && out == "x\n", "{out}");
    assert_eq!(c.get("t1-100").expect("get"), None, "a range delete survives the restart");
}

#[test]
fn cli_says_what_to_do_when_no_server_runs() {
    let port = free_port();
    let o = Command::new(env!("CARGO_BIN_EXE_halyard"))
        .args(["get", "k", "--addr", &format!("127.0.0.1:{port}"), "--timeout", "2"])
        .output()
        .expect("halyard");
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("cannot reach a server") && err.contains("--addr"), "{err}");
}

#[test]
fn port_in_use_is_a_clear_error() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = taken.local_addr().expect("addr").port();
    let dir = tempfile::tempdir().expect("tempdir");
    let o = Command::new(env!("CARGO_BIN_EXE_halyard"))
        .args(["serve", "--dir"])
        .arg(dir.path())
        .args(["--resp", &format!("127.0.0.1:{port}")])
        .output()
        .expect("halyard");
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("--resp") && err.contains("cannot listen"), "{err}");
}

/// A server with a password (requirepass) protects the native port as it protects RESP: every
/// request waits for AUTH, a wrong password is refused and counted, the right one opens it.
#[test]
fn requirepass_protects_the_native_port() {
    let dir = tempfile::tempdir().expect("tempdir");
    let srv = Server::start(dir.path(), &["--requirepass", "sesame"]);
    let no = Client::connect(("127.0.0.1", srv.native), ClientOptions::default()).expect("connect");
    let e = no.put("k", "v").expect_err("a write without AUTH");
    assert_eq!(e.code(), Some(halyard_client::ErrorCode::AuthRequired), "{e}");
    assert!(no.get("k").is_err(), "a read without AUTH");
    let wrong = ClientOptions { password: Some("open".into()), ..Default::default() };
    let e = Client::connect(("127.0.0.1", srv.native), wrong).err().expect("a wrong password is refused");
    assert_eq!(e.code(), Some(halyard_client::ErrorCode::AuthFailed), "{e}");
    let right = ClientOptions { password: Some("sesame".into()), ..Default::default() };
    let c = Client::connect(("127.0.0.1", srv.native), right).expect("the right password");
    c.put("k", "v").expect("put after AUTH");
    assert_eq!(c.get("k").expect("get").as_deref(), Some(&b"v"[..]));
    let (ok, out) = cli(&srv, &["get", "k"]);
    assert!(!ok && out.contains("AuthRequired"), "{out}");
    let (ok, out) = cli(&srv, &["get", "k", "--password", "sesame"]);
    assert!(ok && out.trim() == "v", "{out}");
    let metrics = srv.http_get("/metrics");
    assert!(metrics.contains("halyard_auth_failures_total 1"), "the wrong password is counted");
}
