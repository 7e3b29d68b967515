//! `halyard serve`'s logs when they go to a pipe (a log shipper, systemd, `2>file`): no
//! terminal colour codes, and with `--log-format json` one JSON object a line.

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
use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Runs `halyard serve` with `extra` flags, its stderr (where logs go) and stdout on pipes,
/// until it serves; stops it with SIGTERM and returns what it wrote to both.
fn serve_logs(extra: &[&str]) -> String {
    let dir = tempfile::tempdir().expect("tempdir");
    let (resp, native, http) = (free_port(), free_port(), free_port());
    let mut child = Command::new(env!("CARGO_BIN_EXE_halyard"))
        .args(["serve", "--dir"])
        .arg(dir.path())
        .args(["--resp", &format!("127.0.0.1:{resp}")])
        .args(["--listen", &format!("127.0.0.1:{native}")])
        .args(["--http", &format!("127.0.0.1:{http}")])
        .args(extra)
        .env("RUST_LOG", "info")
        .env_remove("NO_COLOR")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start halyard serve");
    let (mut out, mut err) = (child.stdout.take().expect("stdout"), child.stderr.take().expect("stderr"));
    let out = std::thread::spawn(move || {
        let mut b = Vec::new();
        out.read_to_end(&mut b).expect("read stdout");
        b
    });
    let err = std::thread::spawn(move || {
        let mut b = Vec::new();
        err.read_to_end(&mut b).expect("read stderr");
        b
    });
    let t0 = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", resp)).is_err() {
        assert!(t0.elapsed() < Duration::from_secs(30), "the server did not come up");
        assert!(child.try_wait().expect("try_wait").is_none(), "the server exited");
        std::thread::sleep(Duration::from_millis(20));
    }
    // The port is bound before the store opens, and SIGTERM is handled only once the server
    // serves: wait for a reply, and a moment more.
    assert_eq!(Resp::connect(resp).cmd(&["PING"]), R::Simple("PONG".into()));
    std::thread::sleep(Duration::from_millis(200));
    let mut srv = Server { child: Some(child), resp, native, http, dir: dir.path().to_path_buf() };
    assert!(srv.stop().success());
    let mut all = out.join().expect("stdout reader");
    all.extend(err.join().expect("stderr reader"));
    String::from_utf8(all).expect("UTF-8 logs")
}

#[test]
fn logs_to_a_pipe_have_no_colour_codes() {
    for extra in [&[][..], &["--log-format", "text"]] {
        let logs = serve_logs(extra);
        assert!(logs.contains("halyard serving") && logs.contains("bye"), "{logs}");
        assert!(!logs.contains('\x1b'), "ANSI escape codes in logs written to a pipe: {logs:?}");
    }
}

#[test]
fn json_logs_are_one_object_a_line() {
    let logs = serve_logs(&["--log-format", "json"]);
    assert!(!logs.contains('\x1b'), "{logs:?}");
    let lines: Vec<serde_json::Value> = logs
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not a JSON line ({e}): {l:?}")))
        .collect();
    let serving = lines
        .iter()
        .find(|v| v["fields"]["message"] == "halyard serving")
        .unwrap_or_else(|| panic!("no startup line in {logs}"));
    assert_eq!(serving["level"], "INFO");
    assert!(serving["fields"]["resp"].as_str().is_some_and(|a| a.starts_with("127.0.0.1:")), "{serving}");
    assert!(serving["timestamp"].is_string(), "{serving}");
    assert!(lines.iter().any(|v| v["fields"]["message"] == "engine flushed; bye"), "{logs}");
}

#[test]
fn an_unknown_log_format_is_refused() {
    let o = Command::new(env!("CARGO_BIN_EXE_halyard"))
        .args(["serve", "--log-format", "xml"])
        .output()
        .expect("run halyard");
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("--log-format"), "{o:?}");
}
