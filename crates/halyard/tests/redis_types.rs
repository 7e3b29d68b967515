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
        &["SET", "sc2", "v", "GET"],
        &["SMEMBERS", "sc2"],
        &["SET", "sc2", "v"],
        &["GET", "sc2"],
    ]);
}

#[test]
fn hash_and_string_commands() {
    same_as_redis(&[
        // HSETNX, HSTRLEN, HKEYS, HVALS.
        &["HSETNX", "h", "a", "1"],
        &["HSETNX", "h", "a", "2"],
        &["HSETNX", "h", "b"],
        &["HGET", "h", "a"],
        &["HSET", "h", "s", "hello", "e", ""],
        &["HSTRLEN", "h", "s"],
        &["HSTRLEN", "h", "e"],
        &["HSTRLEN", "h", "nope"],
        &["HSTRLEN", "nokey", "f"],
        &["HKEYS", "h"],
        &["HVALS", "h"],
        &["HKEYS", "nokey"],
        &["HVALS", "nokey"],
        // HINCRBY.
        &["HINCRBY", "h", "a", "10"],
        &["HINCRBY", "h", "a", "-100"],
        &["HINCRBY", "h", "new", "5"],
        &["HINCRBY", "h", "a", "x"],
        &["HINCRBY", "h", "a", "1.5"],
        &["HINCRBY", "h", "a", "+1"],
        &["HINCRBY", "h", "s", "1"],
        &["HINCRBY", "h", "e", "1"],
        &["HSET", "h", "big", "9223372036854775807", "lead", "01", "sp", " 1"],
        &["HINCRBY", "h", "big", "1"],
        &["HINCRBY", "h", "big", "-1"],
        &["HINCRBY", "h", "lead", "1"],
        &["HINCRBY", "h", "sp", "1"],
        &["HINCRBY", "h", "a"],
        &["HINCRBY", "nokey2", "f", "-3"],
        // HINCRBYFLOAT.
        &["HINCRBYFLOAT", "f", "x", "10.5"],
        &["HINCRBYFLOAT", "f", "x", "0.1"],
        &["HINCRBYFLOAT", "f", "y", "0.1"],
        &["HINCRBYFLOAT", "f", "y", "0.2"],
        &["HINCRBYFLOAT", "f", "z", "3.0e3"],
        &["HINCRBYFLOAT", "f", "z", "-3000"],
        &["HINCRBYFLOAT", "f", "w", "-0.001"],
        &["HINCRBYFLOAT", "f", "w", "1e-5"],
        &["HINCRBYFLOAT", "f", "v", "0x10"],
        &["HINCRBYFLOAT", "f", "v", ".5"],
        &["HINCRBYFLOAT", "f", "v", "5."],
        &["HINCRBYFLOAT", "f", "v", "+1"],
        &["HINCRBYFLOAT", "f", "u", "-0.0"],
        &["HINCRBYFLOAT", "f", "t", "17179869184"],
        &["HINCRBYFLOAT", "f", "t", "1e10"],
        &["HINCRBYFLOAT", "f", "big", "1e20"],
        &["HINCRBYFLOAT", "f", "x", "x"],
        &["HINCRBYFLOAT", "f", "x", "1e"],
        &["HINCRBYFLOAT", "f", "x", " 1"],
        &["HINCRBYFLOAT", "f", "x", "nan"],
        &["HINCRBYFLOAT", "f", "x", "inf"],
        &["HINCRBYFLOAT", "f", "x", "-infinity"],
        &["HINCRBYFLOAT", "h", "s", "1"],
        &["HINCRBYFLOAT", "h", "a", "1"],
        &["HGETALL", "f"],
        // HRANDFIELD on a hash of one field, and its arguments.
        &["HSET", "one", "f", "v"],
        &["HRANDFIELD", "one"],
        &["HRANDFIELD", "one", "1"],
        &["HRANDFIELD", "one", "5"],
        &["HRANDFIELD", "one", "-3"],
        &["HRANDFIELD", "one", "0"],
        &["HRANDFIELD", "one", "2", "WITHVALUES"],
        &["HRANDFIELD", "one", "-2", "withvalues"],
        &["HRANDFIELD", "one", "x"],
        &["HRANDFIELD", "one", "1", "bogus"],
        &["HRANDFIELD", "one", "1", "WITHVALUES", "x"],
        &["HRANDFIELD", "one", "-9223372036854775808"],
        &["HRANDFIELD", "one", "-9223372036854775807", "WITHVALUES"],
        &["HRANDFIELD", "nokey"],
        &["HRANDFIELD", "nokey", "3"],
        &["HRANDFIELD", "nokey", "-3", "WITHVALUES"],
        // HSCAN (a small hash comes in one page from Redis).
        &["HSCAN", "h", "0"],
        &["HSCAN", "h", "0", "MATCH", "b*", "COUNT", "100"],
        &["HSCAN", "h", "0", "NOVALUES"],
        &["HSCAN", "h", "0", "COUNT", "0"],
        &["HSCAN", "h", "x"],
        &["HSCAN", "nokey", "0"],
        // Wrong types.
        &["SET", "str", "x"],
        &["HSETNX", "str", "a", "1"],
        &["HINCRBY", "str", "a", "1"],
        &["HINCRBYFLOAT", "str", "a", "1"],
        &["HKEYS", "str"],
        &["HVALS", "str"],
        &["HSTRLEN", "str", "a"],
        &["HRANDFIELD", "str"],
        &["HRANDFIELD", "str", "1"],
        &["HSCAN", "str", "0"],
        // Hash changes keep the hash's expiry.
        &["EXPIRE", "h", "100"],
        &["HINCRBY", "h", "a", "1"],
        &["HINCRBYFLOAT", "h", "a", "1.5"],
        &["HSETNX", "h", "fresh", "1"],
        &["TTL", "h"],
        // INCRBYFLOAT.
        &["INCRBYFLOAT", "n", "10.5"],
        &["INCRBYFLOAT", "n", "0.1"],
        &["SET", "k", "1"],
        &["INCRBYFLOAT", "k", "0.1"],
        &["INCRBYFLOAT", "k", "-1.1"],
        &["INCRBYFLOAT", "k", "5.0e3"],
        &["INCRBYFLOAT", "k", "inf"],
        &["INCRBYFLOAT", "k", "nan"],
        &["INCRBYFLOAT", "k", "x"],
        &["INCRBYFLOAT", "k"],
        &["SET", "s", "abc"],
        &["INCRBYFLOAT", "s", "1"],
        &["EXPIRE", "k", "100"],
        &["INCRBYFLOAT", "k", "1"],
        &["TTL", "k"],
        &["INCRBYFLOAT", "h", "1"],
        // SETRANGE.
        &["SETRANGE", "s", "1", "XY"],
        &["GET", "s"],
        &["SETRANGE", "s", "5", "z"],
        &["GET", "s"],
        &["SETRANGE", "s", "0", ""],
        &["SETRANGE", "new", "2", "ab"],
        &["GET", "new"],
        &["SETRANGE", "none", "3", ""],
        &["EXISTS", "none"],
        &["SETRANGE", "none", "536870912", ""],
        &["SETRANGE", "s", "-1", "x"],
        &["SETRANGE", "s", "x", "x"],
        &["SETRANGE", "s", "536870912", "x"],
        &["SETRANGE", "s", "536870911", "xy"],
        &["SETRANGE", "s", "9223372036854775807", "x"],
        &["SETRANGE", "h", "0", "x"],
        &["SETRANGE", "k", "0", "9"],
        &["TTL", "k"],
        // GETRANGE.
        &["SET", "f", "foobar"],
        &["GETRANGE", "f", "0", "-10"],
        &["GETRANGE", "f", "-1", "-2"],
        &["GETRANGE", "f", "-100", "-50"],
        &["GETRANGE", "f", "-3", "-1"],
        &["GETRANGE", "f", "3", "100"],
        &["GETRANGE", "f", "10", "20"],
        &["GETRANGE", "f", "0", "0"],
        &["GETRANGE", "f", "-9223372036854775808", "9223372036854775807"],
        &["GETRANGE", "f", "x", "1"],
        &["GETRANGE", "nokey", "x", "1"],
        &["GETRANGE", "nokey", "0", "-1"],
        &["GETRANGE", "h", "0", "1"],
        // SETBIT and GETBIT.
        &["SETBIT", "b", "7", "1"],
        &["SETBIT", "b", "7", "1"],
        &["SETBIT", "b", "0", "1"],
        &["SETBIT", "b", "7", "0"],
        &["GET", "b"],
        &["SETBIT", "b", "100", "1"],
        &["STRLEN", "b"],
        &["GETBIT", "b", "0"],
        &["GETBIT", "b", "100"],
        &["GETBIT", "b", "101"],
        &["GETBIT", "b", "4294967295"],
        &["GETBIT", "nokey", "3"],
        &["SETBIT", "b", "-1", "1"],
        &["SETBIT", "b", "4294967296", "1"],
        &["SETBIT", "b", "x", "1"],
        &["SETBIT", "b", "4294967295", "x"],
        &["SETBIT", "b", "1", "2"],
        &["SETBIT", "b", "1", "-1"],
        &["GETBIT", "b", "-1"],
        &["GETBIT", "b", "4294967296"],
        &["SETBIT", "zero", "0", "0"],
        &["GET", "zero"],
        &["SETBIT", "h", "0", "1"],
        &["GETBIT", "h", "0"],
        &["SETBIT", "k", "0", "1"],
        &["TTL", "k"],
        // BITCOUNT.
        &["BITCOUNT", "f"],
        &["BITCOUNT", "f", "1", "1"],
        &["BITCOUNT", "f", "0", "-1"],
        &["BITCOUNT", "f", "-2", "-1"],
        &["BITCOUNT", "f", "5", "30", "BIT"],
        &["BITCOUNT", "f", "-5", "-1", "bit"],
        &["BITCOUNT", "f", "1", "1", "BYTE"],
        &["BITCOUNT", "f", "3", "1"],
        &["BITCOUNT", "f", "-1", "-2", "bogus"],
        &["BITCOUNT", "f", "0", "-1", "bogus"],
        &["BITCOUNT", "f", "0"],
        &["BITCOUNT", "f", "x", "1"],
        &["BITCOUNT", "f", "0", "1", "BIT", "x"],
        &["BITCOUNT", "nokey"],
        &["BITCOUNT", "nokey", "a", "b"],
        &["BITCOUNT", "h"],
        &["SET", "empty", ""],
        &["BITCOUNT", "empty"],
        &["BITCOUNT", "empty", "0", "-1", "BIT"],
        // BITPOS.
        &["BITPOS", "f", "1"],
        &["BITPOS", "f", "0"],
        &["BITPOS", "f", "1", "2"],
        &["BITPOS", "f", "1", "2", "-1", "BYTE"],
        &["BITPOS", "f", "0", "8", "-1", "BIT"],
        &["BITPOS", "f", "1", "7", "15", "bit"],
        &["BITPOS", "f", "0", "1", "3", "BIT"],
        &["BITPOS", "f", "1", "-1"],
        &["BITPOS", "f", "1", "5", "2"],
        &["BITPOS", "f", "2"],
        &["BITPOS", "f", "x"],
        &["BITPOS", "f", "1", "x"],
        &["BITPOS", "f", "1", "1", "x"],
        &["BITPOS", "f", "1", "1", "x", "bogus"],
        &["BITPOS", "f", "1", "1", "2", "bogus"],
        &["BITPOS", "f", "1", "1", "2", "BIT", "extra"],
        &["SET", "ff", "\u{7f}\u{7f}"],
        &["SETRANGE", "ff", "0", "\u{7f}"],
        &["SETBIT", "ff", "0", "1"],
        &["SETBIT", "ff", "8", "1"],
        &["BITPOS", "ff", "0"],
        &["BITPOS", "ff", "0", "0"],
        &["BITPOS", "ff", "0", "0", "-1"],
        &["BITPOS", "ff", "0", "0", "-1", "BIT"],
        &["BITPOS", "ff", "0", "3", "9", "BIT"],
        &["BITPOS", "ff", "1", "1", "0"],
        &["BITPOS", "empty", "0"],
        &["BITPOS", "empty", "1"],
        &["BITPOS", "nokey", "0"],
        &["BITPOS", "nokey", "1"],
        &["BITPOS", "nokey", "2"],
        &["BITPOS", "nokey", "x"],
        &["BITPOS", "h", "1"],
    ]);
}

/// SPOP, SRANDMEMBER and HRANDFIELD on keys of several members: what they give varies, so
/// only its size and membership are checked (Halyard alone).
#[test]
fn random_picks_are_members() {
    let dir = tempfile::tempdir().expect("tempdir");
    let srv = Server::start(dir.path(), &[]);
    let mut c = srv.conn();
    let members: Vec<String> = (0..20).map(|i| format!("m{i}")).collect();
    let mut sadd = vec!["SADD", "s"];
    sadd.extend(members.iter().map(String::as_str));
    assert_eq!(c.cmd(&sadd), R::Int(20));
    let items = |r: R| match r {
        R::Array(Some(items)) => items
            .into_iter()
            .map(|i| match i {
                R::Bulk(Some(b)) => String::from_utf8(b).expect("utf-8"),
                other => panic!("{other:?}"),
            })
            .collect::<Vec<_>>(),
        other => panic!("{other:?}"),
    };
    let distinct = |v: &[String]| v.iter().collect::<std::collections::BTreeSet<_>>().len();
    let picks = items(c.cmd(&["SRANDMEMBER", "s", "5"]));
    assert_eq!((picks.len(), distinct(&picks)), (5, 5));
    assert!(picks.iter().all(|p| members.contains(p)));
    let picks = items(c.cmd(&["SRANDMEMBER", "s", "-50"]));
    assert_eq!(picks.len(), 50);
    assert!(picks.iter().all(|p| members.contains(p)));
    assert_eq!(items(c.cmd(&["SRANDMEMBER", "s", "30"])).len(), 20);
    let R::Bulk(Some(one)) = c.cmd(&["SRANDMEMBER", "s"]) else { panic!("SRANDMEMBER") };
    assert!(members.contains(&String::from_utf8(one).expect("utf-8")));
    let popped = items(c.cmd(&["SPOP", "s", "7"]));
    assert_eq!((popped.len(), distinct(&popped)), (7, 7));
    assert_eq!(c.cmd(&["SCARD", "s"]), R::Int(13));
    for p in &popped {
        assert_eq!(c.cmd(&["SISMEMBER", "s", p]), R::Int(0), "{p} was popped");
    }
    let R::Bulk(Some(_)) = c.cmd(&["SPOP", "s"]) else { panic!("SPOP") };
    assert_eq!(c.cmd(&["SCARD", "s"]), R::Int(12));
    assert_eq!(items(c.cmd(&["SPOP", "s", "100"])).len(), 12);
    assert_eq!(c.cmd(&["EXISTS", "s"]), R::Int(0));

    assert_eq!(c.cmd(&["HSET", "h", "a", "1", "b", "2", "c", "3"]), R::Int(3));
    let fields = items(c.cmd(&["HRANDFIELD", "h", "2"]));
    assert_eq!((fields.len(), distinct(&fields)), (2, 2));
    let pairs = items(c.cmd(&["HRANDFIELD", "h", "-6", "WITHVALUES"]));
    assert_eq!(pairs.len(), 12);
    for p in pairs.chunks(2) {
        let want = match p[0].as_str() {
            "a" => "1",
            "b" => "2",
            "c" => "3",
            other => panic!("field {other}"),
        };
        assert_eq!(p[1], want);
    }
    assert_eq!(items(c.cmd(&["HRANDFIELD", "h", "10"])).len(), 3);
}
