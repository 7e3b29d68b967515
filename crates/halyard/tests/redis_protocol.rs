//! `halyard serve` driven through the Redis protocol: by a raw RESP client, by Debian's
//! `redis-cli` and `redis-benchmark`, by the `redis` Python package, and side by side with a
//! real `redis-server` on the same command script.

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
use std::process::Command;

#[test]
fn every_command_answers_like_redis() {
    let dir = tempfile::tempdir().expect("tempdir");
    let srv = Server::start(dir.path(), &[]);
    let mut c = srv.conn();
    assert_eq!(c.cmd(&["PING"]), R::Simple("PONG".into()));
    assert_eq!(c.cmd(&["ECHO", "hi"]), bulk("hi"));
    assert_eq!(c.cmd(&["SELECT", "0"]), ok());
    assert_eq!(c.cmd(&["SELECT", "16"]), R::Err("ERR DB index is out of range".into()));
    assert_eq!(c.cmd(&["SET", "k", "v"]), ok());
    assert_eq!(c.cmd(&["GET", "k"]), bulk("v"));
    assert_eq!(c.cmd(&["SET", "k", "w", "NX"]), R::Bulk(None));
    assert_eq!(c.cmd(&["SET", "k", "w", "XX", "GET"]), bulk("v"));
    assert_eq!(c.cmd(&["SET", "k2", "w", "XX"]), R::Bulk(None));
    assert_eq!(c.cmd(&["SET", "kx", "v", "EX", "10"]), ok());
    assert_eq!(c.cmd(&["TTL", "kx"]), R::Int(10));
    assert_eq!(c.cmd(&["DEL", "kx"]), R::Int(1));
    assert_eq!(c.cmd(&["SETNX", "k", "z"]), R::Int(0));
    assert_eq!(c.cmd(&["GETSET", "k", "x"]), bulk("w"));
    assert_eq!(c.cmd(&["APPEND", "k", "yz"]), R::Int(3));
    assert_eq!(c.cmd(&["STRLEN", "k"]), R::Int(3));
    assert_eq!(c.cmd(&["GETRANGE", "k", "1", "-1"]), bulk("yz"));
    assert_eq!(c.cmd(&["MSET", "a", "1", "b", "2"]), ok());
    assert_eq!(c.cmd(&["MGET", "a", "nope", "b"]), R::Array(Some(vec![bulk("1"), R::Bulk(None), bulk("2")])));
    assert_eq!(c.cmd(&["MSETNX", "a", "9", "c", "3"]), R::Int(0));
    assert_eq!(c.cmd(&["EXISTS", "a", "b", "c"]), R::Int(2));
    assert_eq!(c.cmd(&["INCR", "n"]), R::Int(1));
    assert_eq!(c.cmd(&["INCRBY", "n", "41"]), R::Int(42));
    assert_eq!(c.cmd(&["DECRBY", "n", "2"]), R::Int(40));
    assert_eq!(c.cmd(&["DECR", "n"]), R::Int(39));
    assert_eq!(c.cmd(&["INCR", "k"]), R::Err("ERR value is not an integer or out of range".into()));
    assert_eq!(c.cmd(&["GETDEL", "a"]), bulk("1"));
    assert_eq!(c.cmd(&["DEL", "a", "b", "zz"]), R::Int(1));
    assert_eq!(c.cmd(&["UNLINK", "n"]), R::Int(1));
    assert_eq!(c.cmd(&["HSET", "h", "f1", "v1", "f2", "v2"]), R::Int(2));
    assert_eq!(c.cmd(&["HSET", "h", "f1", "v9"]), R::Int(0));
    assert_eq!(c.cmd(&["HGET", "h", "f1"]), bulk("v9"));
    assert_eq!(c.cmd(&["HMGET", "h", "f2", "f3"]), R::Array(Some(vec![bulk("v2"), R::Bulk(None)])));
    assert_eq!(c.cmd(&["HLEN", "h"]), R::Int(2));
    assert_eq!(c.cmd(&["HEXISTS", "h", "f2"]), R::Int(1));
    assert_eq!(c.cmd(&["HGETALL", "h"]), R::Array(Some(vec![bulk("f1"), bulk("v9"), bulk("f2"), bulk("v2")])));
    assert_eq!(
        c.cmd(&["GET", "h"]),
        R::Err("WRONGTYPE Operation against a key holding the wrong kind of value".into())
    );
    assert_eq!(c.cmd(&["HDEL", "h", "f1", "f1", "nope"]), R::Int(1));
    assert_eq!(c.cmd(&["TYPE", "h"]), R::Simple("hash".into()));
    assert_eq!(c.cmd(&["DEL", "h"]), R::Int(1));
    assert_eq!(c.cmd(&["HLEN", "h"]), R::Int(0));
    assert_eq!(c.cmd(&["GET", "nope", "x"]), R::Err("ERR wrong number of arguments for 'get' command".into()));
    assert_eq!(
        c.cmd(&["FROB", "a", "b"]),
        R::Err("ERR unknown command 'FROB', with args beginning with: 'a' 'b'".into())
    );
    // Ordered range reads and SCAN in key order.
    for i in 0..30 {
        assert_eq!(c.cmd(&["SET", &format!("r{i:02}"), &i.to_string()]), ok());
    }
    let R::Array(Some(pairs)) = c.cmd(&["HALYARD.RANGE", "r05", "r08"]) else { panic!("range") };
    assert_eq!(pairs, vec![bulk("r05"), bulk("5"), bulk("r06"), bulk("6"), bulk("r07"), bulk("7")]);
    let R::Array(Some(pairs)) = c.cmd(&["HALYARD.RANGE", "r", "", "LIMIT", "2", "REV"]) else { panic!("range") };
    assert_eq!(pairs, vec![bulk("r29"), bulk("29"), bulk("r28"), bulk("28")]);
    let mut cursor = "0".to_string();
    let mut seen = Vec::new();
    loop {
        let R::Array(Some(v)) = c.cmd(&["SCAN", &cursor, "MATCH", "r*", "COUNT", "7"]) else { panic!("scan") };
        let R::Bulk(Some(next)) = &v[0] else { panic!("cursor") };
        let R::Array(Some(keys)) = &v[1] else { panic!("keys") };
        seen.extend(keys.iter().cloned());
        cursor = String::from_utf8(next.clone()).expect("utf8");
        if cursor == "0" {
            break;
        }
    }
    assert_eq!(seen, (0..30).map(|i| bulk(&format!("r{i:02}"))).collect::<Vec<_>>());
    let R::Array(Some(keys)) = c.cmd(&["KEYS", "r1?"]) else { panic!("keys") };
    assert_eq!(keys.len(), 10);
    // k and r00..r29 (a, b, n, h were deleted; k2 and c never written).
    assert_eq!(c.cmd(&["DBSIZE"]), R::Int(31));
    // RESP3 through HELLO.
    let R::Map(hello) = c.cmd(&["HELLO", "3"]) else { panic!("hello map") };
    assert!(hello.contains(&(bulk("proto"), R::Int(3))));
    assert_eq!(c.cmd(&["GET", "missing"]), R::Null);
    assert_eq!(c.cmd(&["CLIENT", "SETNAME", "t1"]), ok());
    assert_eq!(c.cmd(&["CLIENT", "GETNAME"]), bulk("t1"));
    assert!(matches!(c.cmd(&["INFO"]), R::Bulk(Some(b)) if String::from_utf8_lossy(&b).contains("# Halyard")));
    assert_eq!(c.cmd(&["QUIT"]), ok());
    assert!(c.read().is_none(), "QUIT closes the connection");
}

#[test]
fn pipelining_auth_restart_and_sigterm() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut srv = Server::start(dir.path(), &["--requirepass", "s3cret", "--sync", "always"]);
    let mut c = srv.conn();
    assert_eq!(c.cmd(&["GET", "x"]), R::Err("NOAUTH Authentication required.".into()));
    assert!(matches!(c.cmd(&["AUTH", "nope"]), R::Err(e) if e.starts_with("WRONGPASS")));
    assert_eq!(c.cmd(&["AUTH", "s3cret"]), ok());
    // 5000 pipelined commands in one write; every reply comes back in order.
    let mut batch = Vec::new();
    for i in 0..5000 {
        let (k, v) = (format!("p{i}"), format!("value-{i}"));
        batch
            .extend_from_slice(format!("*3\r\n$3\r\nSET\r\n${}\r\n{k}\r\n${}\r\n{v}\r\n", k.len(), v.len()).as_bytes());
    }
    c.raw(&batch);
    for _ in 0..5000 {
        assert_eq!(c.read(), Some(ok()));
    }
    let status = srv.stop();
    assert!(status.success(), "SIGTERM must exit 0, got {status:?}");
    let srv = Server::start(dir.path(), &["--requirepass", "s3cret"]);
    let mut c = srv.conn();
    assert_eq!(c.cmd(&["AUTH", "default", "s3cret"]), ok());
    for i in (0..5000).step_by(97) {
        assert_eq!(c.cmd(&["GET", &format!("p{i}")]), bulk(&format!("value-{i}")));
    }
    let metrics = srv.http_get("/metrics");
    assert!(metrics.contains("halyard_commands_total{cmd=\"get\"}"), "{metrics}");
    assert!(metrics.contains("halyard_engine_device_write_bytes_total"));
    assert!(metrics.contains("halyard_engine_open_read_bytes "), "the last open's reads are reported");
    assert!(metrics.contains("halyard_engine_partly_filled_log_segments 0"));
    assert!(srv.http_get("/health").contains("200 OK"));
}

#[test]
fn concurrent_incr_is_atomic() {
    let dir = tempfile::tempdir().expect("tempdir");
    let srv = Server::start(dir.path(), &[]);
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                let mut c = srv.conn();
                for _ in 0..500 {
                    assert!(matches!(c.cmd(&["INCR", "counter"]), R::Int(_)));
                }
            });
        }
    });
    assert_eq!(srv.conn().cmd(&["GET", "counter"]), bulk("2000"));
}

/// Keys expire by the clock, survive a restart with their times, and INFO counts them.
#[test]
fn keys_expire_in_real_time_and_keep_their_times_over_a_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut srv = Server::start(dir.path(), &[]);
    let mut c = srv.conn();
    assert_eq!(c.cmd(&["SET", "short", "v", "PX", "300"]), R::Simple("OK".into()));
    assert_eq!(c.cmd(&["SET", "long", "v", "EX", "1000"]), R::Simple("OK".into()));
    assert_eq!(c.cmd(&["HSET", "h", "f", "v"]), R::Int(1));
    assert_eq!(c.cmd(&["PEXPIRE", "h", "300"]), R::Int(1));
    assert_eq!(c.cmd(&["SET", "plain", "v"]), R::Simple("OK".into()));
    let info = |c: &mut Resp| match c.cmd(&["INFO", "keyspace"]) {
        R::Bulk(Some(b)) => String::from_utf8(b).expect("utf8"),
        other => panic!("INFO: {other:?}"),
    };
    assert!(info(&mut c).contains("db0:keys=4,expires=3,"), "{}", info(&mut c));
    std::thread::sleep(std::time::Duration::from_millis(600));
    assert_eq!(c.cmd(&["GET", "short"]), R::Bulk(None));
    assert_eq!(c.cmd(&["TTL", "short"]), R::Int(-2));
    assert_eq!(c.cmd(&["HGETALL", "h"]), R::Array(Some(vec![])));
    assert_eq!(c.cmd(&["HGET", "h", "f"]), R::Bulk(None));
    assert_eq!(c.cmd(&["EXISTS", "short", "h", "long", "plain"]), R::Int(2));
    assert!(info(&mut c).contains("db0:keys=2,expires=1,"), "{}", info(&mut c));
    let at = match c.cmd(&["PEXPIRETIME", "long"]) {
        R::Int(t) => t,
        other => panic!("PEXPIRETIME: {other:?}"),
    };
    drop(c);
    assert!(srv.stop().success());
    let srv = Server::start(dir.path(), &[]);
    let mut c = srv.conn();
    assert_eq!(c.cmd(&["PEXPIRETIME", "long"]), R::Int(at), "the time survives a restart");
    assert_eq!(c.cmd(&["GET", "short"]), R::Bulk(None));
    assert_eq!(c.cmd(&["TTL", "plain"]), R::Int(-1));
}

/// HALYARD.BACKUP on a live server, `halyard restore` into a new store that a server then
/// serves with exactly the keys written before the backup; `halyard backup` of a stopped store
/// copies nothing new; a damaged segment file makes `halyard restore` fail naming it.
#[test]
fn a_live_server_backs_up_and_the_backup_restores() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (store, bk) = (dir.path().join("store"), dir.path().join("backups"));
    let srv = Server::start(&store, &["--backup-dir", bk.to_str().expect("utf8")]);
    let mut c = srv.conn();
    for i in 0..2000 {
        let v = "x".repeat([5, 300, 3000][i % 3]);
        assert_eq!(c.cmd(&["SET", &format!("k{i:05}"), &v]), R::Simple("OK".into()));
    }
    let R::Array(Some(reply)) = c.cmd(&["HALYARD.BACKUP"]) else { panic!("HALYARD.BACKUP") };
    assert_eq!(reply[0], bulk("backup"));
    assert_eq!(reply[1], R::Int(1));
    assert_eq!(c.cmd(&["SET", "after", "1"]), R::Simple("OK".into()));
    let halyard = |args: &[&str]| Command::new(env!("CARGO_BIN_EXE_halyard")).args(args).output().expect("run halyard");
    let restored = dir.path().join("restored");
    let out = halyard(&["restore", "--from", bk.to_str().unwrap(), "--to", restored.to_str().unwrap()]);
    assert!(out.status.success(), "restore: {}", String::from_utf8_lossy(&out.stderr));
    let other = Server::start(&restored, &[]);
    let mut r = other.conn();
    assert_eq!(r.cmd(&["DBSIZE"]), R::Int(2000));
    assert_eq!(r.cmd(&["STRLEN", "k01999"]), R::Int(300));
    assert_eq!(r.cmd(&["GET", "after"]), R::Bulk(None));
    drop((r, other, c, srv));

    // Offline: a second backup of the stopped store finds its segments there already but the
    // tails' (the server's close wrote L0 out, so most of it is new).
    let out = halyard(&["backup", "--dir", store.to_str().unwrap(), "--to", bk.to_str().unwrap()]);
    assert!(out.status.success(), "backup: {}", String::from_utf8_lossy(&out.stderr));
    assert!(
        String::from_utf8_lossy(&out.stdout).starts_with("backup 2 in "),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    for e in std::fs::read_dir(bk.join("segments")).expect("ls") {
        let p = e.expect("entry").path();
        let mut b = std::fs::read(&p).expect("read");
        b[0] ^= 1;
        std::fs::write(&p, b).expect("write");
    }
    let out = halyard(&["restore", "--from", bk.to_str().unwrap(), "--to", dir.path().join("r2").to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("segment") && err.contains("damaged"), "{err}");
    let srv = Server::start(&dir.path().join("empty"), &[]);
    assert!(matches!(srv.conn().cmd(&["HALYARD.BACKUP"]), R::Err(e) if e.contains("--backup-dir")));
}

#[test]
fn bad_input_is_refused_without_harm() {
    let dir = tempfile::tempdir().expect("tempdir");
    let srv =
        Server::start(dir.path(), &["--max-request-bytes", "100000", "--max-clients", "3", "--idle-timeout", "1"]);
    let mut good = srv.conn();
    assert_eq!(good.cmd(&["SET", "safe", "1"]), ok());
    let mut bad = srv.conn();
    bad.raw(b"*1\r\n$3\r\nGETX\r\n");
    assert!(matches!(bad.read(), Some(R::Err(e)) if e.starts_with("ERR Protocol error")));
    assert!(bad.read().is_none(), "closed after a protocol error");
    let mut big = srv.conn();
    big.raw(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$200000\r\n");
    assert!(matches!(big.read(), Some(R::Err(e)) if e.contains("--max-request-bytes")));
    // Once a refused request's connection is seen closed, its slot is free: two more clients
    // fit under --max-clients 3 beside `good`.
    assert!(big.read().is_none(), "closed after an oversized request");
    // Over --max-clients: refused with an error.
    let _c2 = srv.conn();
    let _c3 = srv.conn();
    let mut c4 = srv.conn();
    assert!(matches!(c4.read(), Some(R::Err(e)) if e.contains("max number of clients")));
    drop((_c2, _c3));
    // Idle clients are disconnected.
    std::thread::sleep(std::time::Duration::from_millis(2500));
    assert!(good.read().is_none(), "idle client disconnected");
    let mut again = srv.conn();
    assert_eq!(again.cmd(&["GET", "safe"]), bulk("1"));
    let m = srv.http_get("/metrics");
    for name in ["halyard_protocol_errors_total 2", "halyard_connections_rejected_total 1"] {
        assert!(m.contains(name), "{name} in {m}");
    }
    assert!(!m.contains("halyard_idle_timeouts_total 0"));
}

/// Malformed requests (inline commands' quoting, multibulk and bulk lengths) get the bytes
/// redis-server answers, and the connection is closed as it closes it; nothing refused runs.
#[test]
fn malformed_requests_answer_like_redis_server() {
    use std::io::{Read, Write};
    assert!(have("redis-server"), "install redis-server (scripts/test.sh does)");
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let srv = Server::start(dir.path(), &[]);
    // Each is followed by QUIT in the same write: a request taken is answered and then QUIT is;
    // one refused closes the connection at once.
    let exchange = |port: u16, req: &[u8]| {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
        s.set_read_timeout(Some(std::time::Duration::from_secs(10))).expect("timeout");
        s.write_all(&[req, b"QUIT\r\n"].concat()).expect("write");
        let mut out = Vec::new();
        s.read_to_end(&mut out).expect("read until the server closes");
        String::from_utf8_lossy(&out).into_owned()
    };
    let cases: &[&[u8]] = &[
        b"set \"\"\"k\"\"\" v\r\n",
        b"set \"k v\r\n",
        b"set 'k'v x\r\n",
        b"set \"k\"\x0bv\r\n",
        b"echo a\"b c\"d\r\n",
        b"echo 'a\\'b'\r\n",
        b"echo \"\\x41\\x4a\\b\\a\\q\\x4\"\r\n",
        b"echo a\"b c\"\r\n",
        b"echo a\x0bb\r\n",
        b"echo a\rb\r\n",
        b"*1\r\n$-10\r\n",
        b"*1\r\n$-1\r\n",
        b"*1\r\n$2000000000\r\n",
        b"*1\r\n$536870913\r\n",
        b"*1\r\n$+3\r\nfoo\r\n",
        b"*1\r\n$03\r\nfoo\r\n",
        b"*2147483648\r\n",
        b"*+1\r\n",
        b"*-5\r\n",
        b"*1\r\n$4\r\nPING\r\n",
    ];
    for req in cases {
        let (want, got) = (exchange(redis.port, req), exchange(srv.resp, req));
        assert_eq!(got, want, "{:?}", String::from_utf8_lossy(req));
    }
    // A bulk Redis would take (up to its 512 MB) but over --max-request-bytes: the server's own
    // error.
    let dir2 = tempfile::tempdir().expect("tempdir");
    let small = Server::start(dir2.path(), &["--max-request-bytes", "1048576"]);
    assert!(exchange(small.resp, b"*1\r\n$2000000\r\n").contains("--max-request-bytes"));
    let (mut a, mut b) = (Resp::connect(redis.port), srv.conn());
    assert_eq!(a.cmd(&["DBSIZE"]), R::Int(1));
    assert_eq!(b.cmd(&["DBSIZE"]), R::Int(1));
}

#[test]
fn redis_cli_and_redis_benchmark_work_unchanged() {
    assert!(have("redis-cli") && have("redis-benchmark"), "install redis-tools (scripts/test.sh does)");
    let dir = tempfile::tempdir().expect("tempdir");
    let srv = Server::start(dir.path(), &[]);
    let cli = |args: &[&str]| {
        let o = Command::new("redis-cli").args(["-p", &srv.resp.to_string()]).args(args).output().expect("redis-cli");
        assert!(o.status.success());
        String::from_utf8_lossy(&o.stdout).trim().to_string()
    };
    assert_eq!(cli(&["set", "a", "b"]), "OK");
    assert_eq!(cli(&["get", "a"]), "b");
    assert_eq!(cli(&["-3", "hset", "h", "f", "v"]), "(integer) 1".replace("(integer) ", ""));
    let o = Command::new("redis-benchmark")
        .args(["-p", &srv.resp.to_string(), "-t", "set,get", "-n", "20000", "-P", "16", "-c", "8", "-r", "1000", "-q"])
        .output()
        .expect("redis-benchmark");
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{out}");
    for t in ["SET", "GET"] {
        // -q prints progress with carriage returns, then "SET: 50377.83 requests per second, ...".
        let line = out
            .split(['\r', '\n'])
            .find(|l| l.trim_start().starts_with(t) && l.contains("requests per second"))
            .unwrap_or_else(|| panic!("no {t} result in {out}"));
        let rps: f64 = line.split_whitespace().nth(1).and_then(|x| x.parse().ok()).unwrap_or(0.0);
        assert!(rps > 0.0, "{line}");
    }
    // redis-benchmark's SET writes key:__rand_int__ keys; they are all there.
    let n: u64 = cli(&["dbsize"]).parse().expect("dbsize");
    assert!((900..=1002).contains(&n), "dbsize {n}");
}

#[test]
fn python_redis_client_works() {
    let dir = tempfile::tempdir().expect("tempdir");
    let srv = Server::start(dir.path(), &[]);
    let script = r#"
import sys, redis, threading
r = redis.Redis(host="127.0.0.1", port=int(sys.argv[1]), protocol=int(sys.argv[2]))
assert r.ping()
r.set("a", "1"); assert r.get("a") == b"1"
p = r.pipeline(transaction=False)
for i in range(1000): p.set(f"k{i}", i)
p.execute()
assert r.mget("k1", "k999", "nope") == [b"1", b"999", None]
r.hset("user:1", mapping={"name": "ann", "age": "7"})
assert r.hgetall("user:1") == {b"name": b"ann", b"age": b"7"}
assert sorted(r.scan_iter(match="k99*", count=50)) == sorted([b"k99"] + [f"k99{i}".encode() for i in range(10)])
def work():
    c = redis.Redis(host="127.0.0.1", port=int(sys.argv[1]))
    for _ in range(200): c.incr("ctr")
ts = [threading.Thread(target=work) for _ in range(4)]
[t.start() for t in ts]; [t.join() for t in ts]
assert r.get("ctr") == b"800", r.get("ctr")
try:
    r.execute_command("NOSUCH")
    raise SystemExit("no error")
except redis.ResponseError as e:
    assert "unknown command" in str(e)
print("python ok")
"#;
    for proto in ["2", "3"] {
        let o = Command::new("python3")
            .args(["-c", script, &srv.resp.to_string(), proto])
            .output()
            .expect("python3 (apt-get install python3-redis)");
        assert!(
            o.status.success(),
            "RESP{proto}: {}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        srv.conn().cmd(&["DEL", "ctr"]);
    }
}

/// The same script against redis-server and Halyard: identical replies.
#[test]
fn conformance_with_redis_server() {
    assert!(have("redis-server"), "install redis-server (scripts/test.sh does)");
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let srv = Server::start(dir.path(), &[]);
    let script: &[&[&str]] = &[
        &["PING"],
        &["PING", "hello"],
        &["ECHO", "x y"],
        &["SET", "s", "1"],
        &["SET", "s", "2", "NX"],
        &["SET", "s", "3", "XX", "GET"],
        &["SET", "s", "4", "NX", "XX"],
        &["SET", "s", "v", "BOGUS"],
        &["GET", "s"],
        &["GET"],
        &["SETNX", "s", "x"],
        &["SETNX", "t", "x"],
        &["GETSET", "t", "y"],
        &["GETDEL", "t"],
        &["GETDEL", "t"],
        &["MSET", "a", "1", "b", "2", "c"],
        &["MSET", "a", "1", "b", "2"],
        &["MSETNX", "b", "3", "d", "4"],
        &["MGET", "a", "b", "d", "s"],
        &["EXISTS", "a", "a", "zz"],
        &["STRLEN", "a"],
        &["STRLEN", "zz"],
        &["APPEND", "a", "234"],
        &["GETRANGE", "a", "0", "1"],
        &["GETRANGE", "a", "-2", "-1"],
        &["GETRANGE", "a", "5", "9"],
        &["INCR", "n"],
        &["INCRBY", "n", "10"],
        &["DECR", "n"],
        &["DECRBY", "n", "-5"],
        &["INCRBY", "n", "x"],
        &["INCR", "s"],
        &["SET", "big", "9223372036854775807"],
        &["INCR", "big"],
        &["HSET", "h", "a", "1", "b", "2"],
        &["HSET", "h", "a", "3"],
        &["HSET", "h", "a"],
        &["HGET", "h", "a"],
        &["HGET", "h", "zz"],
        &["HMGET", "h", "a", "zz", "b"],
        &["HLEN", "h"],
        &["HEXISTS", "h", "b"],
        &["HDEL", "h", "a", "zz"],
        &["HGETALL", "h"],
        &["GET", "h"],
        &["HGET", "s", "x"],
        &["INCR", "h"],
        &["TYPE", "h"],
        &["TYPE", "s"],
        &["TYPE", "none"],
        &["SCAN", "0", "MATCH", "[hs]", "COUNT", "1000", "TYPE", "hash"],
        &["SCAN", "0", "MATCH", "[hs]", "COUNT", "1000", "TYPE", "STRING"],
        &["SCAN", "0", "MATCH", "[hs]", "COUNT", "1000", "TYPE", "list"],
        &["SCAN", "0", "MATCH", "[hs]", "COUNT", "1000", "TYPE", "bogus"],
        &["DEL", "h", "s", "zz"],
        &["UNLINK", "a"],
        &["EXISTS", "h", "s", "a"],
        // Expiry: relative times checked through TTL (whole seconds), absolute ones exactly.
        &["SET", "e1", "v", "EX", "100"],
        &["TTL", "e1"],
        &["SET", "e1", "v", "EX", "0"],
        &["SET", "e1", "v", "EX", "x"],
        &["SET", "e1", "v", "EX"],
        &["SET", "e1", "v", "EX", "10", "PX", "100"],
        &["SET", "e1", "v", "EX", "10", "KEEPTTL"],
        &["SET", "e1", "w", "KEEPTTL"],
        &["TTL", "e1"],
        &["GET", "e1"],
        &["SET", "e1", "v"],
        &["TTL", "e1"],
        &["SET", "e1", "v", "EX", "9223372036854775807"],
        &["SET", "e2", "v", "EXAT", "4102444800"],
        &["EXPIRETIME", "e2"],
        &["PEXPIRETIME", "e2"],
        &["SET", "e3", "v", "PXAT", "4102444800123", "GET"],
        &["PEXPIRETIME", "e3"],
        &["EXPIRETIME", "e3"],
        &["SET", "e3", "w", "NX", "PX", "5000"],
        &["SET", "e3", "w", "XX", "PX", "100000", "GET"],
        &["TTL", "e3"],
        &["SETEX", "e4", "100", "v"],
        &["TTL", "e4"],
        &["SETEX", "e4", "0", "v"],
        &["SETEX", "e4", "x", "v"],
        &["PSETEX", "e5", "100000", "v"],
        &["TTL", "e5"],
        &["GETEX", "e5", "PERSIST"],
        &["TTL", "e5"],
        &["GETEX", "e5", "EX", "50"],
        &["TTL", "e5"],
        &["GETEX", "e5", "EX", "0"],
        &["GETEX", "e5", "BOGUS"],
        &["GETEX", "e5"],
        &["GETEX", "nokey", "EX", "5"],
        &["EXPIRE", "e5", "100", "NX"],
        &["EXPIRE", "e5", "100", "XX"],
        &["EXPIRE", "e5", "50", "GT"],
        &["EXPIRE", "e5", "200", "GT"],
        &["EXPIRE", "e5", "300", "LT"],
        &["EXPIRE", "e5", "10", "LT"],
        &["TTL", "e5"],
        &["EXPIRE", "e5", "10", "NX", "XX"],
        &["EXPIRE", "e5", "10", "GT", "LT"],
        &["EXPIRE", "e5", "10", "FOO"],
        &["EXPIRE", "e5", "x"],
        &["EXPIRE", "e5", "9223372036854775807"],
        &["PERSIST", "e5"],
        &["PERSIST", "e5"],
        &["PERSIST", "nokey"],
        &["TTL", "nokey"],
        &["PTTL", "nokey"],
        &["PTTL", "e5"],
        &["EXPIRETIME", "e5"],
        &["EXPIRETIME", "nokey"],
        &["EXPIRE", "e5", "100", "GT"],
        &["EXPIRE", "e5", "100", "LT"],
        &["PEXPIREAT", "e5", "4102444800000"],
        &["EXPIRETIME", "e5"],
        &["PEXPIRE", "e5", "100000"],
        &["TTL", "e5"],
        &["EXPIREAT", "e5", "1"],
        &["EXISTS", "e5"],
        &["EXPIRE", "e4", "-5"],
        &["GET", "e4"],
        &["EXPIRE", "nokey", "10"],
        &["HSET", "eh", "f", "v"],
        &["EXPIRE", "eh", "100"],
        &["HSET", "eh", "g", "w"],
        &["TTL", "eh"],
        &["HDEL", "eh", "g"],
        &["TTL", "eh"],
        &["HGETALL", "eh"],
        &["GETEX", "eh"],
        &["INCR", "ei"],
        &["EXPIRE", "ei", "100"],
        &["INCR", "ei"],
        &["APPEND", "ei", "0"],
        &["TTL", "ei"],
        &["GETSET", "ei", "1"],
        &["TTL", "ei"],
        &["SELECT", "0"],
        &["AUTH", "x"],
        &["CLIENT", "SETNAME", "bad name"],
        &["CLIENT", "SETNAME", "good"],
        &["CLIENT", "GETNAME"],
        &["NOSUCHCMD", "a"],
    ];
    let (mut a, mut b) = (Resp::connect(redis.port), srv.conn());
    for cmd in script {
        let (x, y) = (a.cmd(cmd), b.cmd(cmd));
        let norm = |r: R| match r {
            // Redis 7 words some messages slightly differently; the error code must match.
            R::Err(e) => R::Err(e.split_whitespace().next().unwrap_or("").to_string()),
            other => other,
        };
        assert_eq!(norm(y.clone()), norm(x.clone()), "{cmd:?}: redis {x:?}, halyard {y:?}");
    }
}
