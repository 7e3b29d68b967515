//! Redis's data types and the commands around them, side by side with a real `redis-server`:
//! each script runs on both, and every reply must be the same (errors by their code word, as
//! Redis 7 words some messages differently).

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

/// Commands whose replies list a collection in no defined order: compared sorted.
const UNORDERED: &[&str] = &["keys", "smembers", "sunion", "sinter", "sdiff", "hkeys", "hvals"];
/// Commands whose replies are field-value pairs in no defined order: compared as sorted pairs.
const UNORDERED_PAIRS: &[&str] = &["hgetall"];

/// A reply as compared: errors by their code word, unordered collections sorted.
fn normalize(cmd: &str, r: R) -> R {
    let cmd = cmd.to_ascii_lowercase();
    match r {
        R::Err(e) => R::Err(e.split_whitespace().next().unwrap_or("").to_string()),
        R::Array(Some(mut items)) if UNORDERED.contains(&cmd.as_str()) => {
            items.sort_by_key(|i| format!("{i:?}"));
            R::Array(Some(items))
        }
        R::Array(Some(items)) if UNORDERED_PAIRS.contains(&cmd.as_str()) => {
            let mut pairs: Vec<Vec<R>> = items.chunks(2).map(<[R]>::to_vec).collect();
            pairs.sort_by_key(|p| format!("{p:?}"));
            R::Array(Some(pairs.concat()))
        }
        other => other,
    }
}

/// Runs `script` on a fresh redis-server and a fresh Halyard server and compares the replies.
fn same_as_redis(script: &[&[&str]]) {
    assert!(have("redis-server"), "install redis-server (scripts/test.sh does)");
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let srv = Server::start(dir.path(), &[]);
    let (mut a, mut b) = (Resp::connect(redis.port), srv.conn());
    for cmd in script {
        let (x, y) = (a.cmd(cmd), b.cmd(cmd));
        let name = cmd.first().copied().unwrap_or("");
        assert_eq!(normalize(name, y.clone()), normalize(name, x.clone()), "{cmd:?}: redis {x:?}, halyard {y:?}");
    }
}

#[test]
fn databases_and_whole_key_copies() {
    same_as_redis(&[
        &["SET", "k", "0"],
        &["HSET", "hk", "f", "0", "g", "1"],
        &["SELECT", "15"],
        &["GET", "k"],
        &["SET", "k", "15"],
        &["SELECT", "16"],
        &["SELECT", "-1"],
        &["SELECT", "x"],
        &["DBSIZE"],
        &["SELECT", "0"],
        &["GET", "k"],
        &["MOVE", "k", "15"],
        &["MOVE", "hk", "3"],
        &["MOVE", "hk", "0"],
        &["MOVE", "nokey", "3"],
        &["SELECT", "3"],
        &["HGETALL", "hk"],
        &["TYPE", "hk"],
        &["COPY", "hk", "hk2"],
        &["COPY", "hk", "hk2"],
        &["COPY", "hk", "hk2", "REPLACE"],
        &["COPY", "hk", "hk", "REPLACE"],
        &["COPY", "hk", "hk", "DB", "0"],
        &["COPY", "hk", "hk", "BOGUS"],
        &["HGETALL", "hk2"],
        &["EXPIRE", "hk2", "100"],
        &["RENAME", "hk2", "hk3"],
        &["TTL", "hk3"],
        &["RENAME", "hk2", "hk3"],
        &["RENAME", "hk3", "hk3"],
        &["RENAMENX", "hk3", "hk"],
        &["RENAMENX", "hk3", "hk3"],
        &["RENAMENX", "hk3", "hk4"],
        &["KEYS", "*"],
        &["SET", "s", "v"],
        &["RENAME", "s", "hk"],
        &["TYPE", "hk"],
        &["GET", "hk"],
        &["FLUSHDB", "BOGUS"],
        &["FLUSHDB"],
        &["RANDOMKEY"],
        &["DBSIZE"],
        &["SELECT", "0"],
        &["HGETALL", "hk"],
        &["FLUSHALL", "SYNC"],
        &["SELECT", "15"],
        &["DBSIZE"],
    ]);
}
