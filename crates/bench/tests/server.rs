//! The server path: a real `halyard serve` benchmarked over RESP and the native protocol, and
//! a `redis-server` child as the reference, all through the `halyard-bench` binary.
//!
//! Needs the `halyard` binary (HALYARD_BIN, else next to `halyard-bench`, else built with
//! `cargo build -p halyard`) and `redis-server` on PATH.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    missing_docs,
    reason = "test code: a failure stops where it happened"
)]

use serde_json::Value;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const BENCH: &str = env!("CARGO_BIN_EXE_halyard-bench");

/// The `halyard` binary. Built when missing rather than required up front, since `cargo
/// test -p halyard-bench` alone does not build other packages' binaries.
fn halyard_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("HALYARD_BIN") {
        return p.into();
    }
    let sibling = Path::new(BENCH).with_file_name("halyard");
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/debug/halyard");
    if let Some(p) = [&sibling, &workspace].into_iter().find(|p| p.exists()) {
        return p.clone();
    }
    let st = Command::new(option_env!("CARGO").unwrap_or("cargo"))
        .args(["build", "-p", "halyard"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .status()
        .expect("run cargo build -p halyard");
    assert!(st.success(), "cargo build -p halyard failed");
    [sibling, workspace].into_iter().find(|p| p.exists()).expect("halyard binary after cargo build")
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A `halyard serve` on free loopback ports, killed when dropped (also when a check fails).
struct Server {
    child: Child,
    resp: u16,
    native: u16,
    http: u16,
}

impl Server {
    fn start(dir: &Path) -> Server {
        let (resp, native, http) = (free_port(), free_port(), free_port());
        let child = Command::new(halyard_bin())
            .arg("serve")
            .args(["--dir", dir.to_str().unwrap(), "--cache-mb", "16", "--workers", "2"])
            .args(["--resp", &format!("127.0.0.1:{resp}"), "--listen", &format!("127.0.0.1:{native}")])
            .args(["--http", &format!("127.0.0.1:{http}")])
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .spawn()
            .expect("start halyard serve");
        let mut s = Server { child, resp, native, http };
        let t0 = Instant::now();
        // Every listener must be up, not just the first.
        while ![resp, native, http].iter().all(|p| TcpStream::connect(("127.0.0.1", *p)).is_ok()) {
            assert!(s.child.try_wait().unwrap().is_none(), "halyard serve exited early");
            assert!(t0.elapsed() < Duration::from_secs(30), "halyard serve did not listen within 30 s");
            std::thread::sleep(Duration::from_millis(50));
        }
        assert!(http_get(s.http, "/health").contains("ok"));
        s
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn http_get(port: u16, path: &str) -> String {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

fn bench(dir: &Path, extra: &[&str]) -> (std::process::Output, Value) {
    let json = dir.join("out.json");
    let out = Command::new(BENCH)
        .args(["--dir", dir.join("data").to_str().unwrap(), "--json", json.to_str().unwrap(), "--quiet"])
        .args(["--records", "2000", "--ops", "2000", "--threads", "2"])
        .args(extra)
        .output()
        .expect("run halyard-bench");
    let text = std::fs::read_to_string(&json).unwrap_or_default();
    let doc = serde_json::from_str(&text).unwrap_or(Value::Null);
    (out, doc)
}

fn phases<'a>(doc: &'a Value, engine: &str) -> Vec<&'a Value> {
    doc["results"].as_array().unwrap().iter().filter(|r| r["engine"] == engine).collect()
}

#[test]
fn halyard_server_over_resp_and_native_and_redis_reference() {
    let tmp = tempfile::tempdir().unwrap();
    let server = Server::start(&tmp.path().join("server"));
    let resp = format!("resp://127.0.0.1:{}", server.resp);
    let native = format!("halyard://127.0.0.1:{}", server.native);
    let metrics = format!("http://127.0.0.1:{}/metrics", server.http);
    let (out, doc) = bench(
        tmp.path(),
        &[
            "--engines",
            "redis",
            "--target",
            &resp,
            "--target",
            &native,
            "--metrics",
            &metrics,
            "--workloads",
            "load-a,run-a,run-c,run-e",
        ],
    );
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{stderr}\n{stdout}");
    assert!(stdout.contains("UNSUPPORTED") && stdout.contains(&resp), "{stdout}");
    assert!(doc["failures"].as_array().unwrap().is_empty(), "{}", doc["failures"]);

    for engine in [resp.as_str(), native.as_str()] {
        let rs = phases(&doc, engine);
        let names: Vec<&str> = rs.iter().map(|r| r["workload"].as_str().unwrap()).collect();
        assert_eq!(names, ["load-a", "run-a", "run-c", "run-e"], "{engine}");
        for r in &rs {
            assert_eq!(r["ops"], 2000, "{r}");
            assert!(r["ops_per_sec"].as_f64().unwrap() > 0.0);
            // --metrics: the server's own CPU and device counters.
            assert_eq!(r["cpu_source"], "server", "{r}");
            assert!(r["device_write_bytes"].is_u64() && r["disk_bytes"].is_u64(), "{r}");
            assert!(r["server_measures"].as_str().unwrap().contains("/metrics"));
        }
        // Scans return pairs: 2000 loaded records, so most scans find some.
        let e = rs[3];
        assert!(e["misses"].as_u64().unwrap() < 1000, "{e}");
        assert!(e["user_bytes"].as_u64().unwrap() > 2000 * 24 * 2, "{e}");
    }

    // Redis: the three phases it can run, run-e reported as unsupported, server-side figures.
    let rs = phases(&doc, "redis");
    let names: Vec<&str> = rs.iter().map(|r| r["workload"].as_str().unwrap()).collect();
    assert_eq!(names, ["load-a", "run-a", "run-c"]);
    let load = rs[0];
    assert_eq!(load["cpu_source"], "server");
    assert!(load["disk_bytes"].as_u64().unwrap() > 0, "the AOF is under --dir: {load}");
    assert!(load["space_amplification"].as_f64().unwrap() > 0.5);
    assert!(load["peak_rss_bytes"].as_u64().unwrap() > 1 << 20);
    let unsupported = doc["unsupported"].as_array().unwrap();
    assert_eq!(unsupported.len(), 1, "{unsupported:?}");
    assert_eq!(unsupported[0]["engine"], "redis");
    assert_eq!(unsupported[0]["workload"], "run-e");
    assert!(unsupported[0]["reason"].as_str().unwrap().contains("ordered"));
    let settings = &doc["config"]["engine_settings"];
    assert!(settings["redis"]["command"].as_str().unwrap().contains("--appendfsync everysec"));
    assert!(settings[&resp]["server"].as_str().unwrap().starts_with("Halyard"));

    // The Halyard server over each protocol is compared with Redis.
    let ratios = doc["ratios"].as_array().unwrap();
    for engine in [&resp, &native] {
        assert!(
            ratios.iter().any(|r| r["engine"] == **engine && r["baseline"] == "redis" && r["workload"] == "run-c"),
            "no ratio of {engine} over redis: {ratios:?}"
        );
    }

    // The redis-server child was stopped: its pid is in the settings.
    let m = settings["redis"]["server_measures"].as_str().unwrap();
    let pid: u32 = m.trim_start_matches("/proc/").split(' ').next().unwrap().parse().unwrap();
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    assert!(!stat.contains("redis-server"), "redis-server {pid} still running: {stat}");
    drop(server);
}

#[test]
fn without_metrics_server_figures_are_unknown_not_guessed() {
    let tmp = tempfile::tempdir().unwrap();
    let server = Server::start(&tmp.path().join("server"));
    let native = format!("halyard://127.0.0.1:{}", server.native);
    let (out, doc) = bench(tmp.path(), &["--target", &native, "--workloads", "load-a,run-c"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let rs = phases(&doc, &native);
    assert_eq!(rs.len(), 2);
    for r in rs {
        assert!(r["device_read_bytes"].is_null() && r["io_amplification"].is_null(), "{r}");
        assert!(r["space_amplification"].is_null() && r["peak_rss_bytes"].is_null(), "{r}");
        assert_eq!(r["cpu_source"], "client");
        assert!(r["cpu_us_per_op"].as_f64().unwrap() > 0.0);
    }
    // Only the target ran: no in-process engine by default when --target is given.
    assert_eq!(doc["results"].as_array().unwrap().len(), 2);
    assert!(String::from_utf8_lossy(&out.stdout).contains("not measured (no --metrics)"));
}
