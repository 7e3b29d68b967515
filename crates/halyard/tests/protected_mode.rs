//! Protected mode, as Redis has it: a server whose listeners are bound beyond loopback with no
//! password serves loopback clients only and tells the others how to configure one. The remote
//! client runs in a network namespace of the test's own, joined to the host by a veth pair.
//! Needs root (`ip netns`).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    missing_docs,
    reason = "test code: a failure stops where it happened"
)]

mod common;

use common::Server;
use std::process::Command;

/// A network namespace with a veth pair to the host: the host side is `host_ip`.
struct Netns {
    name: String,
    host_ip: String,
}

fn ip(args: &[&str]) {
    let ok = Command::new("ip").args(args).status().is_ok_and(|s| s.success());
    assert!(ok, "ip {args:?} failed: this test needs root and iproute2");
}

impl Netns {
    fn new() -> Netns {
        let n = std::process::id() % 200 + 20;
        let name = format!("hly-pm-{}", std::process::id());
        let (host, peer) = (format!("hlypm{n}a"), format!("hlypm{n}b"));
        let (host_ip, peer_ip) = (format!("10.213.{n}.1"), format!("10.213.{n}.2"));
        let _ = Command::new("ip").args(["netns", "del", &name]).status();
        let _ = Command::new("ip").args(["link", "del", &host]).status();
        ip(&["netns", "add", &name]);
        ip(&["link", "add", &host, "type", "veth", "peer", "name", &peer]);
        ip(&["link", "set", &peer, "netns", &name]);
        ip(&["addr", "add", &format!("{host_ip}/30"), "dev", &host]);
        ip(&["link", "set", &host, "up"]);
        ip(&["netns", "exec", &name, "ip", "addr", "add", &format!("{peer_ip}/30"), "dev", &peer]);
        ip(&["netns", "exec", &name, "ip", "link", "set", &peer, "up"]);
        ip(&["netns", "exec", &name, "ip", "link", "set", "lo", "up"]);
        Netns { name, host_ip }
    }

    /// `redis-cli` run inside the namespace against the host side.
    fn redis_cli(&self, port: u16, args: &[&str]) -> String {
        let o = Command::new("ip")
            .args(["netns", "exec", &self.name, "redis-cli", "-h", &self.host_ip, "-p", &port.to_string()])
            .args(args)
            .output()
            .expect("redis-cli (apt-get install redis-tools)");
        String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr)
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        // The veth pair goes with the namespace.
        let _ = Command::new("ip").args(["netns", "del", &self.name]).status();
    }
}

fn local(port: u16, args: &[&str]) -> String {
    let o = Command::new("redis-cli").args(["-p", &port.to_string()]).args(args).output().expect("redis-cli");
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn beyond_loopback_without_a_password_only_loopback_clients_are_served() {
    let ns = Netns::new();
    let dir = tempfile::tempdir().unwrap();
    {
        let srv = Server::start_on(dir.path(), "0.0.0.0", &[]);
        let resp = srv.resp;
        let remote = ns.redis_cli(resp, &["ping"]);
        assert!(
            remote.contains("DENIED") && remote.contains("requirepass"),
            "remote client without a password: {remote}"
        );
        assert_eq!(local(resp, &["ping"]).trim(), "PONG", "a loopback client is served");
        let metrics = srv.http_get("/metrics");
        assert!(metrics.contains("halyard_protected_mode_refusals_total 1"), "the refusal is counted");
    }
    let srv = Server::start_on(dir.path(), "0.0.0.0", &["--requirepass", "sesame"]);
    let resp = srv.resp;
    let remote = ns.redis_cli(resp, &["ping"]);
    assert!(remote.contains("NOAUTH"), "a password is asked for: {remote}");
    let remote = ns.redis_cli(resp, &["-a", "sesame", "--no-auth-warning", "set", "k", "v"]);
    assert_eq!(remote.trim(), "OK", "with the password the remote client is served");
}
