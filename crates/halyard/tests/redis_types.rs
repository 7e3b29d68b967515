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
/// (SPOP and SRANDMEMBER are only run where the members they give cannot vary.)
const UNORDERED: &[&str] =
    &["keys", "smembers", "sunion", "sinter", "sdiff", "hkeys", "hvals", "spop", "srandmember", "hrandfield"];
/// Scans of one key whose page lists members (SSCAN) or field-value pairs (HSCAN) in no
/// defined order: the page compared sorted (the scripts scan small keys, which Redis answers in
/// one page).
const UNORDERED_SCANS: &[&str] = &["sscan", "hscan"];
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
        R::Array(Some(items)) if UNORDERED_PAIRS.contains(&cmd.as_str()) => R::Array(Some(sorted_pairs(items))),
        R::Array(Some(mut page)) if UNORDERED_SCANS.contains(&cmd.as_str()) => {
            if let Some(R::Array(Some(items))) = page.get_mut(1) {
                if cmd == "hscan" {
                    *items = sorted_pairs(std::mem::take(items));
                } else {
                    items.sort_by_key(|i| format!("{i:?}"));
                }
            }
            R::Array(Some(page))
        }
        other => other,
    }
}

/// `f1 v1 f2 v2 ...` with its pairs sorted.
fn sorted_pairs(items: Vec<R>) -> Vec<R> {
    let mut pairs: Vec<Vec<R>> = items.chunks(2).map(<[R]>::to_vec).collect();
    pairs.sort_by_key(|p| format!("{p:?}"));
    pairs.concat()
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

#[test]
fn sets() {
    same_as_redis(&[
        &["SADD", "s", "a", "b", "c", "a"],
        &["SADD", "s", "c", "d"],
        &["SADD", "s"],
        &["SCARD", "s"],
        &["SCARD", "nokey"],
        &["SMEMBERS", "s"],
        &["SMEMBERS", "nokey"],
        &["SISMEMBER", "s", "a"],
        &["SISMEMBER", "s", "zz"],
        &["SISMEMBER", "nokey", "a"],
        &["SMISMEMBER", "s", "a", "zz", "d"],
        &["SMISMEMBER", "nokey", "a"],
        &["SMISMEMBER", "s"],
        &["SADD", "e", "", "\x00", "x y"],
        &["SMEMBERS", "e"],
        &["SISMEMBER", "e", ""],
        &["SREM", "e", "", "zz", ""],
        &["SCARD", "e"],
        &["SREM", "nokey", "a"],
        &["SREM", "s"],
        &["SADD", "t", "c", "d", "e", "f"],
        &["SADD", "u", "a", "f", "g"],
        &["SINTER", "s", "t"],
        &["SINTER", "s", "t", "u"],
        &["SINTER", "s"],
        &["SINTER", "s", "nokey"],
        &["SUNION", "s", "t", "u", "nokey"],
        &["SDIFF", "s", "t"],
        &["SDIFF", "s", "t", "u"],
        &["SDIFF", "nokey", "s"],
        &["SDIFF", "s", "nokey"],
        &["SINTERCARD", "2", "s", "t"],
        &["SINTERCARD", "2", "s", "t", "LIMIT", "1"],
        &["SINTERCARD", "2", "s", "t", "limit", "0"],
        &["SINTERCARD", "1", "s"],
        &["SINTERCARD", "2", "s", "nokey"],
        &["SINTERCARD", "0", "s"],
        &["SINTERCARD", "x", "s"],
        &["SINTERCARD", "-1", "s"],
        &["SINTERCARD", "3", "s", "t"],
        &["SINTERCARD", "1", "s", "LIMIT", "-1"],
        &["SINTERCARD", "1", "s", "LIMIT", "x"],
        &["SINTERCARD", "1", "s", "LIMIT"],
        &["SINTERCARD", "1", "s", "BOGUS", "1"],
        &["SINTERCARD", "1"],
        // STORE forms: the destination replaced whatever type it held, expiry dropped.
        &["SET", "str", "x"],
        &["EXPIRE", "str", "100"],
        &["SINTERSTORE", "str", "s", "t"],
        &["TYPE", "str"],
        &["TTL", "str"],
        &["SMEMBERS", "str"],
        &["SUNIONSTORE", "un", "s", "t", "u"],
        &["SMEMBERS", "un"],
        &["SDIFFSTORE", "df", "s", "t"],
        &["SMEMBERS", "df"],
        &["SDIFFSTORE", "s2", "s", "s"],
        &["EXISTS", "s2"],
        &["SINTERSTORE", "un", "s", "nokey"],
        &["EXISTS", "un"],
        &["SUNIONSTORE", "s", "s", "u"],
        &["SMEMBERS", "s"],
        &["SINTERSTORE", "d"],
        &["HSET", "h", "f", "v"],
        &["SDIFFSTORE", "h", "s"],
        &["TYPE", "h"],
        // Wrong types, every key checked.
        &["SET", "str", "x"],
        &["SADD", "str", "a"],
        &["SREM", "str", "a"],
        &["SMEMBERS", "str"],
        &["SISMEMBER", "str", "a"],
        &["SMISMEMBER", "str", "a"],
        &["SCARD", "str"],
        &["SPOP", "str"],
        &["SPOP", "str", "2"],
        &["SRANDMEMBER", "str"],
        &["SRANDMEMBER", "str", "2"],
        &["SINTER", "s", "str"],
        &["SINTER", "nokey", "str"],
        &["SUNION", "nokey", "str"],
        &["SDIFF", "nokey", "str"],
        &["SINTERSTORE", "d", "nokey", "str"],
        &["SINTERCARD", "2", "s", "str"],
        &["SSCAN", "str", "0"],
        &["SMOVE", "nokey", "str", "a"],
        &["SMOVE", "str", "s", "a"],
        &["SMOVE", "s", "str", "a"],
        &["GET", "s"],
        // SMOVE.
        &["SMOVE", "s", "s", "a"],
        &["SMOVE", "s", "s", "zz"],
        &["SMOVE", "s", "t", "a"],
        &["SMOVE", "s", "t", "a"],
        &["SMOVE", "s", "new", "b"],
        &["SMOVE", "t", "new", "c"],
        &["SMEMBERS", "s"],
        &["SMEMBERS", "t"],
        &["SMEMBERS", "new"],
        &["SMOVE", "new", "t", "b"],
        &["SMOVE", "new", "t", "c"],
        &["EXISTS", "new"],
        &["SMOVE", "s", "t"],
        // SPOP and SRANDMEMBER on sets of at most one member, and their arguments.
        &["SADD", "one", "m"],
        &["SRANDMEMBER", "one"],
        &["SRANDMEMBER", "one", "3"],
        &["SRANDMEMBER", "one", "-3"],
        &["SRANDMEMBER", "one", "0"],
        &["SRANDMEMBER", "nokey"],
        &["SRANDMEMBER", "nokey", "5"],
        &["SRANDMEMBER", "nokey", "-5"],
        &["SRANDMEMBER", "one", "x"],
        &["SRANDMEMBER", "one", "-9223372036854775808"],
        &["SRANDMEMBER", "one", "1", "2"],
        &["SPOP", "one", "0"],
        &["SPOP", "one", "-1"],
        &["SPOP", "one", "x"],
        &["SPOP", "one", "1", "2"],
        &["SPOP", "nokey"],
        &["SPOP", "nokey", "3"],
        &["SPOP", "one"],
        &["EXISTS", "one"],
        &["SADD", "one", "m", "n"],
        &["SPOP", "one", "5"],
        &["EXISTS", "one"],
        &["SADD", "one", "m"],
        &["SPOP", "one", "1"],
        // SSCAN (small sets come in one page from Redis).
        &["SADD", "sc", "a1", "a2", "b1", "b2", "c"],
        &["SSCAN", "sc", "0"],
        &["SSCAN", "sc", "0", "MATCH", "a*"],
        &["SSCAN", "sc", "0", "match", "*1", "COUNT", "100"],
        &["SSCAN", "sc", "0", "COUNT", "0"],
        &["SSCAN", "sc", "0", "COUNT", "x"],
        &["SSCAN", "sc", "0", "TYPE", "set"],
        &["SSCAN", "sc", "0", "MATCH"],
        &["SSCAN", "sc", "x"],
        &["SSCAN", "nokey", "0"],
        &["SSCAN", "nokey", "0", "BOGUS"],
        &["SSCAN", "sc"],
        // Expiry: the whole set expires together; changes keep the time.
        &["SADD", "ex", "a", "b"],
        &["EXPIRE", "ex", "100"],
        &["SADD", "ex", "c"],
        &["SREM", "ex", "a"],
        &["TTL", "ex"],
        &["SMOVE", "ex", "exdst", "b"],
        &["TTL", "exdst"],
        &["TTL", "ex"],
        &["SADD", "ex2", "a"],
        &["PEXPIRE", "ex2", "-1"],
        &["EXISTS", "ex2"],
        &["SMEMBERS", "ex2"],
        &["SADD", "ex2", "b"],
        &["SMEMBERS", "ex2"],
        &["TTL", "ex2"],
        // Whole-key commands on sets.
        &["RENAME", "sc", "sc2"],
        &["SMEMBERS", "sc2"],
        &["COPY", "sc2", "sc3"],
        &["SREM", "sc2", "a1"],
        &["SCARD", "sc3"],
        &["TYPE", "sc3"],
        &["DEL", "sc3"],
        &["SCARD", "sc3"],
        &["SET", "sc2", "v"],
        &["GET", "sc2"],
    ]);
}
