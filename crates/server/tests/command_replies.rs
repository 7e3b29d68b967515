//! Every Redis command's reply, byte for byte, against a recorded transcript
//! (`command_replies.golden`): a script of commands (argument errors, options, RESP2 and
//! RESP3, a password-protected server) run through `commands::execute` and encoded the way a
//! connection encodes them, followed by the per-command counters it left in the metrics.
//! Replies that change from run to run (TIME, INFO, CLIENT INFO) are left out.
//!
//! After an intended change of replies, rewrite the transcript with
//! `HALYARD_BLESS=1 cargo test -p halyard-server --test command_replies` and review its diff.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    missing_docs,
    reason = "test code: a failure stops where it happened"
)]

use halyard_engine::{Db, Options};
use halyard_server::commands;
use halyard_server::http;
use halyard_server::keyspace::Keyspace;
use halyard_server::metrics::{self, Metrics};
use halyard_server::state::{Session, Shared};
use std::fmt::Write;
use std::sync::Arc;

const GOLDEN: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/command_replies.golden");

fn shared(dir: &std::path::Path, requirepass: Option<&str>) -> Arc<Shared> {
    let opts = Options { direct_io: false, cache_bytes: 8 << 20, ..Options::default() };
    let db = Arc::new(Db::open(dir, opts).expect("open store"));
    let ks = Keyspace::new(db.clone()).expect("keyspace");
    Arc::new(Shared::new(ks, requirepass.map(str::to_string), Metrics::new(&commands::names())))
}

/// Printable form of bytes: CR and LF as `\r` `\n`, other non-printing bytes as `\xNN`.
fn esc(b: &[u8]) -> String {
    let mut s = String::new();
    for &c in b {
        match c {
            b'\r' => s.push_str("\\r"),
            b'\n' => s.push_str("\\n"),
            b'\\' => s.push_str("\\\\"),
            0x20..=0x7e => s.push(c as char),
            _ => {
                let _ = write!(s, "\\x{c:02x}");
            }
        }
    }
    s
}

/// Runs `script` on one session as a connection does (a protocol switch applies to the reply
/// that asked for it) and appends `command -> reply` lines to `out`.
fn run(sh: &Shared, sess: &mut Session, script: &[&[&str]], out: &mut String) {
    for cmd in script {
        let args: Vec<&[u8]> = cmd.iter().map(|a| a.as_bytes()).collect();
        let reply = commands::execute(sh, sess, &args);
        if let Some(p) = sess.proto_next.take() {
            sess.proto = p;
        }
        let mut wire = Vec::new();
        reply.encode(sess.proto, &mut wire);
        let shown: Vec<String> = cmd.iter().map(|a| format!("{a:?}")).collect();
        let _ = writeln!(out, "{} -> {}{}", shown.join(" "), esc(&wire), if sess.quit { "  [quit]" } else { "" });
        sess.quit = false;
    }
}

/// The per-command counters and the unknown-command and AUTH failure counts.
fn counters(sh: &Arc<Shared>, out: &mut String) {
    let text = metrics::encode(&http::registry(sh.clone(), None)).expect("encode the metrics");
    for l in text.lines() {
        let wanted = ["halyard_commands_total{", "halyard_command_errors_total{", "halyard_unknown_", "halyard_auth_"];
        if wanted.iter().any(|w| l.starts_with(w)) {
            let _ = writeln!(out, "{l}");
        }
    }
}

const STRINGS: &[&[&str]] = &[
    &[],
    &["PING"],
    &["ping", "hello"],
    &["PiNg", "a", "b"],
    &["ECHO", "x y"],
    &["ECHO"],
    &["ECHO", "a", "b"],
    &["SELECT", "0"],
    &["SELECT", "1"],
    &["SELECT", "0"],
    &["SELECT", "x"],
    &["SELECT"],
    &["DBSIZE"],
    &["DBSIZE", "x"],
    &["SET", "s", "1"],
    &["set", "s", "2", "nx"],
    &["SET", "s", "3", "XX", "GET"],
    &["SET", "s2", "3", "XX"],
    &["SET", "s2", "3", "XX", "GET"],
    &["SET", "s2", "3", "NX", "GET"],
    &["SET", "s", "4", "NX", "XX"],
    &["SET", "s", "v", "BOGUS"],
    &["SET", "s", "v", "EX", "10"],
    &["SET", "s", "v", "keepttl"],
    &["SET", "s"],
    &["GET", "s"],
    &["GET"],
    &["GET", "a", "b"],
    &["SETNX", "s", "x"],
    &["SETNX", "t", "x"],
    &["SETNX", "t"],
    &["GETSET", "t", "y"],
    &["GETSET", "new", "y"],
    &["GETDEL", "t"],
    &["GETDEL", "t"],
    &["MSET", "a", "1", "b", "2", "c"],
    &["MSET", "a", "1", "b", "2"],
    &["MSET", "a"],
    &["MSETNX", "b", "3", "d", "4"],
    &["MSETNX", "d", "4", "e"],
    &["MSETNX", "d", "4", "e", "5"],
    &["MGET", "a", "b", "d", "s", "zz"],
    &["MGET"],
    &["EXISTS", "a", "a", "zz"],
    &["EXISTS"],
    &["STRLEN", "a"],
    &["STRLEN", "zz"],
    &["APPEND", "a", "234"],
    &["APPEND", "fresh", "xy"],
    &["GETRANGE", "a", "0", "1"],
    &["GETRANGE", "a", "-2", "-1"],
    &["GETRANGE", "a", "5", "9"],
    &["GETRANGE", "a", "2", "1"],
    &["GETRANGE", "a", "-100", "100"],
    &["GETRANGE", "zz", "0", "-1"],
    &["GETRANGE", "a", "x", "1"],
    &["GETRANGE", "a", "0"],
    &["INCR", "n"],
    &["INCRBY", "n", "10"],
    &["DECR", "n"],
    &["DECRBY", "n", "-5"],
    &["DECRBY", "n", "-9223372036854775808"],
    &["INCRBY", "n", "x"],
    &["DECRBY", "n", "x"],
    &["INCRBY", "n", "1", "2"],
    &["INCR", "s"],
    &["SET", "big", "9223372036854775807"],
    &["INCR", "big"],
    &["SET", "small", "-9223372036854775808"],
    &["DECR", "small"],
    &["TYPE", "a"],
    &["TYPE", "none"],
    &["DEL", "a", "zz"],
    &["UNLINK", "b", "b"],
    &["DEL"],
    &["DBSIZE"],
];

const HASHES_AND_KEYS: &[&[&str]] = &[
    &["HSET", "h", "a", "1", "b", "2"],
    &["HSET", "h", "a", "3"],
    &["HSET", "h", "a"],
    &["HSET", "h", "a", "1", "b"],
    &["HMSET", "h", "c", "4"],
    &["HMSET", "h", "c", "4", "d"],
    &["HGET", "h", "a"],
    &["HGET", "h", "zz"],
    &["HGET", "h"],
    &["HMGET", "h", "a", "zz", "b"],
    &["HMGET", "h"],
    &["HLEN", "h"],
    &["HLEN", "zz"],
    &["HEXISTS", "h", "b"],
    &["HEXISTS", "h", "zz"],
    &["HDEL", "h", "a", "zz"],
    &["HDEL", "h"],
    &["HGETALL", "h"],
    &["HGETALL", "zz"],
    &["GET", "h"],
    &["HGET", "s", "x"],
    &["HSET", "s", "x", "y"],
    &["INCR", "h"],
    &["APPEND", "h", "x"],
    &["SET", "h", "v", "GET"],
    &["TYPE", "h"],
    &["TYPE", "s"],
    &["KEYS", "*"],
    &["KEYS", "[bs]*"],
    &["KEYS", "a", "b"],
    &["SCAN", "0"],
    &["SCAN", "0", "COUNT", "3"],
    &["SCAN", "1", "COUNT", "3"],
    &["SCAN", "2", "MATCH", "*m*", "COUNT", "100"],
    &["SCAN", "0", "match", "s*", "type", "string"],
    // TYPE keeps the keys of that type (any case); an unknown type name keeps none.
    &["SCAN", "0", "TYPE", "string"],
    &["SCAN", "0", "TYPE", "HASH"],
    &["SCAN", "0", "TYPE", "list"],
    &["SCAN", "0", "TYPE", "bogus"],
    &["SCAN", "0", "TYPE", "none"],
    &["SCAN", "0", "TYPE", "string", "TYPE", "hash"],
    &["SCAN", "0", "COUNT", "3", "TYPE", "hash"],
    &["SCAN", "0", "TYPE"],
    &["SCAN", "0", "COUNT", "0"],
    &["SCAN", "0", "COUNT", "x"],
    &["SCAN", "0", "MATCH"],
    &["SCAN", "0", "BOGUS", "1"],
    &["SCAN", "x"],
    &["SCAN", "-1"],
    &["SCAN", "999"],
    &["SCAN"],
    &["HALYARD.RANGE", "a", "t"],
    &["halyard.range", "", "", "LIMIT", "2", "REV"],
    &["HALYARD.RANGE", "", "", "limit", "0"],
    &["HALYARD.RANGE", "", "", "LIMIT", "-1"],
    &["HALYARD.RANGE", "", "", "LIMIT", "x"],
    &["HALYARD.RANGE", "", "", "LIMIT"],
    &["HALYARD.RANGE", "", "", "BOGUS"],
    &["HALYARD.RANGE", "a"],
    &["DEL", "h", "s", "zz"],
    &["EXISTS", "h", "s"],
    // Range deletes: strings and hashes whole, the end excluded, an empty end for no bound.
    &["MSET", "d1", "1", "d2", "2", "d3", "3", "e1", "4"],
    &["HSET", "d2h", "f", "v", "g", "w"],
    &["HALYARD.DELRANGE", "d2", "d3"],
    &["KEYS", "d*"],
    &["HGETALL", "d2h"],
    &["HALYARD.DELRANGE", "d3", ""],
    &["KEYS", "*"],
    &["HALYARD.DELRANGE", "b", "a"],
    &["HALYARD.DELRANGE", "a", "a"],
    &["HALYARD.DELRANGE", "a"],
    &["HSET", "d2h", "f", "again"],
    &["HGETALL", "d2h"],
];

/// Numbered databases and whole-key copies (after the other sections, in database 0).
const DATABASES: &[&[&str]] = &[
    &["SET", "k", "0"],
    &["HSET", "hk", "f", "0", "g", "1"],
    &["SELECT", "15"],
    &["GET", "k"],
    &["SET", "k", "15"],
    &["SELECT", "16"],
    &["SELECT", "-1"],
    &["DBSIZE"],
    &["SELECT", "0"],
    &["GET", "k"],
    &["MOVE", "k", "15"],
    &["MOVE", "hk", "3"],
    &["MOVE", "hk", "0"],
    &["MOVE", "hk", "16"],
    &["MOVE", "nokey", "3"],
    &["SELECT", "3"],
    &["HGETALL", "hk"],
    &["COPY", "hk", "hk2"],
    &["COPY", "hk", "hk2"],
    &["COPY", "hk", "hk2", "REPLACE"],
    &["COPY", "hk", "hk", "REPLACE"],
    &["COPY", "hk", "hk", "DB", "0"],
    &["COPY", "hk", "hk", "DB", "x"],
    &["COPY", "hk", "hk", "BOGUS"],
    &["HGETALL", "hk2"],
    &["RENAME", "hk2", "hk3"],
    &["RENAME", "hk2", "hk3"],
    &["RENAME", "hk3", "hk3"],
    &["RENAMENX", "hk3", "hk"],
    &["RENAMENX", "hk3", "hk3"],
    &["RENAMENX", "hk3", "hk4"],
    &["KEYS", "*"],
    &["FLUSHDB", "BOGUS"],
    &["FLUSHDB"],
    &["RANDOMKEY"],
    &["DBSIZE"],
    &["SELECT", "0"],
    &["HGETALL", "hk"],
    &["SWAPDB", "0", "1"],
    &["FLUSHALL", "ASYNC"],
    &["SELECT", "15"],
    &["DBSIZE"],
    &["SELECT", "0"],
];

const LISTS: &[&[&str]] = &[
    &["RPUSH", "l", "a", "b", "c"],
    &["LPUSH", "l", "z"],
    &["LRANGE", "l", "0", "-1"],
    &["LPOP", "l", "2"],
    &["RPOP", "l"],
    &["LPOP", "nol", "2"],
    &["LINDEX", "l", "0"],
    &["LSET", "l", "5", "x"],
    &["LPOS", "l", "b", "RANK", "0"],
    &["LMOVE", "l", "l2", "LEFT", "SIDEWAYS"],
    &["BLPOP", "nol", "-1"],
    &["BLPOP", "nol", "x"],
    &["TYPE", "l"],
    &["HSET", "l", "f", "v"],
    &["DEL", "l"],
];

const TRANSACTIONS: &[&[&str]] = &[
    &["EXEC"],
    &["DISCARD"],
    &["MULTI"],
    &["MULTI"],
    &["SET", "t", "1"],
    &["INCR", "t"],
    &["LPUSH", "t", "x"],
    &["WATCH", "t"],
    &["EXEC"],
    &["MULTI"],
    &["GET"],
    &["SET", "t", "2"],
    &["EXEC"],
    &["WATCH", "t"],
    &["SET", "t", "3"],
    &["MULTI"],
    &["GET", "t"],
    &["EXEC"],
    &["DEL", "t"],
];

const SCRIPTS: &[&[&str]] = &[
    &["EVAL", "return {1, 'two', {ok='OK'}, false}", "0"],
    &["EVAL", "return redis.call('SET', KEYS[1], ARGV[1])", "1", "sk", "v"],
    &["EVAL", "return redis.call('LPUSH', KEYS[1], 'x')", "1", "sk"],
    &["EVAL", "return redis.pcall('LPUSH', KEYS[1], 'x')", "1", "sk"],
    &["EVAL", "return 1", "2", "a"],
    &["EVAL", "return 1", "-2"],
    &["EVALSHA", "ffffffffffffffffffffffffffffffffffffffff", "0"],
    &["SCRIPT", "LOAD", "return KEYS[1]"],
    &["SCRIPT", "EXISTS", "4a7a4d0e58b06a52b5ae2e0ad10d9f05b8c0c846"],
    &["SCRIPT", "KILL"],
    &["DEL", "sk"],
];

/// Sorted sets (after the other sections, in database 0), RESP2 then a few RESP3 replies; the
/// session is left in RESP3, as the connection section left it.
const SORTED_SETS: &[&[&str]] = &[
    &["HELLO", "2"],
    &["ZADD", "z", "1", "a", "2", "b", "2", "c", "0.1", "d"],
    &["ZADD", "z", "NX", "XX", "1", "a"],
    &["ZADD", "z", "GT", "LT", "1", "a"],
    &["ZADD", "z", "INCR", "1", "a", "2", "b"],
    &["ZADD", "z", "x", "a"],
    &["ZADD", "z", "1", "a", "2"],
    &["ZADD", "z", "INCR", "inf", "a"],
    &["ZADD", "z", "INCR", "-inf", "a"],
    &["ZADD", "z", "INCR", "NX", "1", "a"],
    &["ZADD", "z", "CH", "GT", "5", "a", "0", "b", "3", "e"],
    &["ZADD", "z"],
    &["ZINCRBY", "z", "-inf", "a"],
    &["ZINCRBY", "z", "1.5", "b"],
    &["ZINCRBY", "z", "x", "b"],
    &["ZSCORE", "z", "d"],
    &["ZSCORE", "z", "nosuch"],
    &["ZMSCORE", "z", "a", "nosuch"],
    &["ZCARD", "z"],
    &["ZRANGE", "z", "0", "-1", "WITHSCORES"],
    &["ZRANGE", "z", "-2", "-1", "REV"],
    &["ZRANGE", "z", "0", "-1", "LIMIT", "0", "1"],
    &["ZRANGE", "z", "-", "+", "BYLEX", "WITHSCORES"],
    &["ZRANGE", "z", "(2", "+inf", "BYSCORE", "LIMIT", "0", "2"],
    &["ZRANGE", "z", "x", "1"],
    &["ZREVRANGE", "z", "0", "1", "WITHSCORES"],
    &["ZRANGEBYSCORE", "z", "(0.1", "3.5", "WITHSCORES"],
    &["ZRANGEBYSCORE", "z", "x", "1"],
    &["ZREVRANGEBYSCORE", "z", "+inf", "-inf", "LIMIT", "1", "2"],
    &["ZRANGEBYLEX", "z", "[b", "(e"],
    &["ZRANGEBYLEX", "z", "b", "e"],
    &["ZREVRANGEBYLEX", "z", "+", "-"],
    &["ZCOUNT", "z", "(0.1", "+inf"],
    &["ZLEXCOUNT", "z", "-", "+"],
    &["ZRANK", "z", "c"],
    &["ZREVRANK", "z", "c"],
    &["ZRANK", "z", "nosuch"],
    &["ZSCAN", "z", "0"],
    &["ZSCAN", "z", "0", "MATCH", "[ab]"],
    &["ZSCAN", "z", "x"],
    &["ZRANDMEMBER", "z", "10", "WITHSCORES"],
    &["ZRANDMEMBER", "z", "x"],
    &["ZADD", "z2", "10", "c", "20", "f"],
    &["ZUNIONSTORE", "u", "2", "z", "z2", "WEIGHTS", "1", "2"],
    &["ZRANGE", "u", "0", "-1", "WITHSCORES"],
    &["ZINTERSTORE", "u", "2", "z", "z2", "AGGREGATE", "MAX"],
    &["ZUNION", "2", "z", "z2", "WITHSCORES"],
    &["ZINTER", "2", "z", "z2"],
    &["ZDIFF", "2", "z", "z2", "WITHSCORES"],
    &["ZDIFFSTORE", "u", "2", "z2", "z"],
    &["ZUNIONSTORE", "u", "0", "z"],
    &["ZUNIONSTORE", "u", "1", "z", "WEIGHTS", "x"],
    &["ZRANGESTORE", "u", "z", "0", "1"],
    &["ZRANGESTORE", "u", "z", "0", "1", "WITHSCORES"],
    &["ZPOPMIN", "z"],
    &["ZPOPMAX", "z", "2"],
    &["ZPOPMIN", "z", "-1"],
    &["ZREMRANGEBYSCORE", "z", "-inf", "(2"],
    &["ZREMRANGEBYRANK", "u", "0", "0"],
    &["ZREMRANGEBYLEX", "z2", "-", "+"],
    &["ZREM", "z", "c", "nosuch"],
    &["EXISTS", "z", "z2"],
    &["SET", "str", "v"],
    &["ZADD", "str", "1", "a"],
    &["ZRANGE", "str", "0", "-1"],
    &["ZADD", "z", "1", "a", "2", "b"],
    &["TYPE", "z"],
    &["HELLO", "3"],
    &["ZRANGE", "z", "0", "-1", "WITHSCORES"],
    &["ZSCORE", "z", "a"],
    &["ZMSCORE", "z", "a", "nosuch"],
    &["ZPOPMIN", "z"],
    &["ZADD", "z", "1", "a", "3", "c"],
    &["ZPOPMAX", "z", "1"],
    &["ZUNION", "1", "z", "WITHSCORES"],
    &["ZADD", "z", "INCR", "XX", "1", "nosuch"],
    &["ZRANK", "z", "nosuch"],
    &["ZSCAN", "z", "0"],
    &["DEL", "z", "u", "str"],
];

/// Sets (database 0, after the other sections, in RESP3); SPOP and SRANDMEMBER only where the pick
/// cannot vary.
const SETS: &[&[&str]] = &[
    &["SADD", "s", "b", "a", "c", "a"],
    &["SADD", "s"],
    &["SADD", "s", "", "c"],
    &["SCARD", "s"],
    &["SCARD", "nokey"],
    &["SMEMBERS", "s"],
    &["SMEMBERS", "nokey"],
    &["SISMEMBER", "s", ""],
    &["SISMEMBER", "s", "zz"],
    &["SMISMEMBER", "s", "a", "zz"],
    &["SMISMEMBER", "s"],
    &["SREM", "s", "", "zz", ""],
    &["SREM", "nokey", "a"],
    &["SADD", "t", "c", "d"],
    &["SINTER", "s", "t"],
    &["SINTER", "s", "nokey"],
    &["SUNION", "s", "t", "nokey"],
    &["SDIFF", "s", "t"],
    &["SDIFF"],
    &["SINTERCARD", "2", "s", "t"],
    &["SINTERCARD", "1", "s", "LIMIT", "2"],
    &["SINTERCARD", "0", "s"],
    &["SINTERCARD", "3", "s", "t"],
    &["SINTERCARD", "1", "s", "LIMIT", "-1"],
    &["SINTERCARD", "1", "s", "LIMIT"],
    &["SINTERCARD", "1", "s", "BOGUS", "1"],
    &["SET", "str", "x"],
    &["SUNIONSTORE", "str", "s", "t"],
    &["TYPE", "str"],
    &["SMEMBERS", "str"],
    &["SDIFFSTORE", "str", "s", "s"],
    &["EXISTS", "str"],
    &["SINTERSTORE", "d"],
    &["HSET", "h", "f", "v"],
    &["SADD", "h", "x"],
    &["SINTER", "nokey", "h"],
    &["SMOVE", "nokey", "h", "a"],
    &["SMOVE", "s", "h", "a"],
    &["SMOVE", "s", "s", "a"],
    &["SMOVE", "s", "t", "a"],
    &["SMOVE", "s", "t", "a"],
    &["SMOVE", "s", "moved", "b"],
    &["SMEMBERS", "t"],
    &["SMEMBERS", "moved"],
    &["SADD", "one", "m"],
    &["SRANDMEMBER", "one"],
    &["SRANDMEMBER", "one", "2"],
    &["SRANDMEMBER", "one", "-2"],
    &["SRANDMEMBER", "one", "x"],
    &["SRANDMEMBER", "one", "-9223372036854775808"],
    &["SRANDMEMBER", "one", "-100000000"],
    &["SRANDMEMBER", "one", "1", "2"],
    &["SPOP", "one", "-1"],
    &["SPOP", "one", "1", "2"],
    &["SPOP", "one", "0"],
    &["SPOP", "nokey"],
    &["SPOP", "nokey", "1"],
    &["SPOP", "one"],
    &["EXISTS", "one"],
    &["SADD", "sc", "a1", "a2", "b1", "b2", "c"],
    &["SSCAN", "sc", "0", "COUNT", "2"],
    &["SSCAN", "sc", "0", "COUNT", "2", "MATCH", "*1"],
    &["SSCAN", "sc", "0", "COUNT", "0"],
    &["SSCAN", "sc", "0", "TYPE", "set"],
    &["SSCAN", "sc", "x"],
    &["SSCAN", "sc", "999999"],
    &["SSCAN", "nokey", "0"],
    // RESP2 (the session speaks RESP3 since the connection section): sets as arrays.
    &["HELLO", "2"],
    &["SMEMBERS", "sc"],
    &["SPOP", "nokey", "1"],
    &["SINTER", "sc", "nokey"],
    &["SRANDMEMBER", "sc", "0"],
    &["SSCAN", "sc", "0", "COUNT", "3"],
    &["HELLO", "3"],
    &["DEL", "s", "t", "sc", "moved", "h"],
];

/// The hash and string commands beyond the first ones (database 0, in RESP3 as `SETS`).
const HASH_AND_STRING_EXTRAS: &[&[&str]] = &[
    &["HSETNX", "hx", "a", "1"],
    &["HSETNX", "hx", "a", "2"],
    &["HINCRBY", "hx", "a", "41"],
    &["HINCRBY", "hx", "a", "x"],
    &["HINCRBY", "hx", "a", "9223372036854775807"],
    &["HSET", "hx", "s", "str"],
    &["HINCRBY", "hx", "s", "1"],
    &["HINCRBYFLOAT", "hx", "f", "10.5"],
    &["HINCRBYFLOAT", "hx", "f", "0.1"],
    &["HINCRBYFLOAT", "hx", "s", "1"],
    &["HINCRBYFLOAT", "hx", "f", "x"],
    &["HINCRBYFLOAT", "hx", "f", "inf"],
    &["HKEYS", "hx"],
    &["HVALS", "hx"],
    &["HSTRLEN", "hx", "s"],
    &["HSTRLEN", "hx", "zz"],
    &["HRANDFIELD", "nokey"],
    &["HRANDFIELD", "nokey", "2"],
    &["HRANDFIELD", "hx", "0"],
    &["HRANDFIELD", "hx", "1", "bogus"],
    &["HRANDFIELD", "hx", "-9223372036854775807", "WITHVALUES"],
    &["HSET", "h1", "f", "v"],
    &["HRANDFIELD", "h1", "-2", "WITHVALUES"],
    &["HSCAN", "hx", "0", "COUNT", "2"],
    &["HSCAN", "hx", "0", "MATCH", "s*"],
    &["HSCAN", "hx", "0", "NOVALUES"],
    &["HSCAN", "nokey", "0"],
    &["HELLO", "2"],
    &["HRANDFIELD", "h1", "-2", "WITHVALUES"],
    &["HELLO", "3"],
    &["SET", "n", "1"],
    &["INCRBYFLOAT", "n", "0.1"],
    &["INCRBYFLOAT", "n", "0.2"],
    &["INCRBYFLOAT", "n", "x"],
    &["INCRBYFLOAT", "n", "inf"],
    &["INCRBYFLOAT", "hx", "1"],
    &["SETRANGE", "r", "2", "ab"],
    &["GET", "r"],
    &["SETRANGE", "r", "-1", "x"],
    &["SETRANGE", "r", "536870912", "x"],
    &["SETRANGE", "nokey", "536870912", ""],
    &["GETRANGE", "r", "0", "-10"],
    &["GETRANGE", "r", "-1", "-2"],
    &["SETBIT", "b", "1", "1"],
    &["SETBIT", "b", "1", "0"],
    &["SETBIT", "b", "4294967296", "1"],
    &["SETBIT", "b", "0", "2"],
    &["GETBIT", "b", "1"],
    &["GETBIT", "b", "x"],
    &["SET", "f", "foobar"],
    &["BITCOUNT", "f"],
    &["BITCOUNT", "f", "1", "1"],
    &["BITCOUNT", "f", "5", "30", "BIT"],
    &["BITCOUNT", "f", "0"],
    &["BITCOUNT", "f", "0", "1", "bogus"],
    &["BITPOS", "f", "1", "2"],
    &["BITPOS", "f", "0", "8", "-1", "BIT"],
    &["BITPOS", "f", "2"],
    &["BITPOS", "nokey", "0"],
    &["BITPOS", "hx", "1"],
    &["DEL", "hx", "h1", "n", "r", "b", "f"],
];

const CONNECTION: &[&[&str]] = &[
    &["COMMAND"],
    &["COMMAND", "COUNT"],
    &["command", "count"],
    &["COMMAND", "DOCS"],
    &["COMMAND", "INFO", "get"],
    &["COMMAND", "BOGUS"],
    &["COMMAND", "INFO", "mset", "nosuch"],
    &["CLUSTER", "KEYSLOT", "foo"],
    &["CLUSTER", "KEYSLOT", "{user1000}.following"],
    &["CLUSTER", "SLOTS"],
    &["CLUSTER"],
    &["READONLY"],
    &["CONFIG", "GET", "appendonly"],
    &["CONFIG", "GET", "SAVE"],
    &["CONFIG", "get", "databases"],
    &["CONFIG", "GET", "maxmemory"],
    &["CONFIG", "GET"],
    &["CONFIG", "SET", "save", ""],
    &["CONFIG"],
    &["CLIENT"],
    &["CLIENT", "SETNAME", "bad name"],
    &["CLIENT", "SETNAME", "bad\nname"],
    &["CLIENT", "SETNAME", "good"],
    &["CLIENT", "SETNAME"],
    &["CLIENT", "GETNAME"],
    &["CLIENT", "ID"],
    &["CLIENT", "SETINFO", "lib-name", "x"],
    &["CLIENT", "KILL", "x"],
    &["AUTH", "x"],
    &["AUTH", "u", "p"],
    &["AUTH", "a", "b", "c"],
    &["AUTH"],
    &["NOSUCHCMD", "a"],
    &["NOSUCHCMD", "1", "2", "3", "4", "5", "6", "7", "8", "9", "10"],
    &["nosuch"],
    &["TIME", "x"],
    &["QUIT"],
    &["QUIT", "now"],
    &["HELLO", "4"],
    &["HELLO", "x"],
    &["HELLO", "3", "BOGUS"],
    &["HELLO", "3", "AUTH", "default"],
    &["HELLO", "3", "AUTH", "default", "x"],
    &["HELLO", "2", "SETNAME", "n2"],
    &["CLIENT", "GETNAME"],
    &["HELLO"],
    &["HELLO", "3"],
];

/// CONFIG, OBJECT and DEBUG (INFO, which varies, is checked by `varying_replies_keep_their_form`).
const INTROSPECTION: &[&[&str]] = &[
    &["CONFIG", "GET", "maxmemory*"],
    &["CONFIG", "GET", "TIMEOUT", "busy-reply-threshold", "nosuch"],
    &["CONFIG", "SET", "timeout", "30", "lua-time-limit", "100"],
    &["CONFIG", "GET", "timeout", "lua-time-limit", "busy-reply-threshold"],
    &["CONFIG", "SET", "timeout", "0", "busy-reply-threshold", "5000"],
    &["CONFIG", "SET", "timeout", "x"],
    &["CONFIG", "SET", "timeout", "-1"],
    &["CONFIG", "SET", "timeout", "1", "timeout", "2"],
    &["CONFIG", "SET", "databases", "3"],
    &["CONFIG", "SET", "nosuch", "1"],
    &["CONFIG", "SET", "maxmemory", "0"],
    &["CONFIG", "SET", "maxmemory", "100mb"],
    &["CONFIG", "SET", "maxmemory-policy", "allkeys-lru"],
    &["CONFIG", "SET", "appendonly", "yes"],
    &["CONFIG", "SET", "save", "3600 1"],
    &["CONFIG", "SET", "notify-keyspace-events", "KEA"],
    &["CONFIG", "GET", "notify-keyspace-events"],
    &["CONFIG", "SET", "notify-keyspace-events", "Q"],
    &["CONFIG", "SET", "notify-keyspace-events", ""],
    &["CONFIG", "SET", "timeout"],
    &["CONFIG", "SET", "timeout", "1", "x"],
    &["CONFIG", "GET", "appendfsync"],
    &["CONFIG", "REWRITE"],
    &["CONFIG", "RESETSTAT"],
    &["CONFIG", "RESETSTAT", "x"],
    &["CONFIG", "BOGUS"],
    &["SET", "oi", "123"],
    &["OBJECT", "ENCODING", "oi"],
    &["SET", "oi", "0123"],
    &["OBJECT", "ENCODING", "oi"],
    &["SET", "oi", "12345678901234567890123456789012345678901234"],
    &["OBJECT", "encoding", "oi"],
    &["APPEND", "oi", "5"],
    &["OBJECT", "ENCODING", "oi"],
    &["RPUSH", "ol", "a"],
    &["OBJECT", "ENCODING", "ol"],
    &["SADD", "os", "1", "-2"],
    &["OBJECT", "ENCODING", "os"],
    &["SADD", "os", "x"],
    &["OBJECT", "ENCODING", "os"],
    &["HSET", "oh", "f", "v"],
    &["OBJECT", "ENCODING", "oh"],
    &["HSET", "oh", "g", "12345678901234567890123456789012345678901234567890123456789012345"],
    &["OBJECT", "ENCODING", "oh"],
    &["ZADD", "oz", "1", "a"],
    &["OBJECT", "ENCODING", "oz"],
    &["OBJECT", "ENCODING", "nokey"],
    &["OBJECT", "FREQ", "oz"],
    &["OBJECT", "FREQ", "nokey"],
    &["OBJECT", "IDLETIME", "oz"],
    &["OBJECT", "REFCOUNT", "oz"],
    &["OBJECT"],
    &["OBJECT", "ENCODING"],
    &["OBJECT", "ENCODING", "a", "b"],
    &["OBJECT", "BOGUS", "x"],
    &["OBJECT", "HELP"],
    &["DEBUG"],
    &["DEBUG", "SLEEP", "0"],
    &["DEBUG", "SET-ACTIVE-EXPIRE", "0"],
    &["DEBUG", "RELOAD"],
    &["DEBUG", "JMAP"],
    &["DEBUG", "NOSUCH"],
    &["DEBUG", "HELP"],
    &["DEL", "oi", "ol", "os", "oh", "oz"],
];

/// Replies whose RESP3 form differs (null, maps), after HELLO 3.
const RESP3: &[&[&str]] = &[
    &["GET", "zz"],
    &["SET", "s", "1", "XX"],
    &["MGET", "s", "zz"],
    &["HSET", "h", "f", "v", "g", "w"],
    &["HGETALL", "h"],
    &["HGET", "h", "zz"],
    &["HMGET", "h", "f", "zz"],
    &["CLIENT", "GETNAME"],
    &["CONFIG", "GET", "databases"],
    &["CONFIG", "GET", "maxmemory", "timeout"],
    &["OBJECT", "ENCODING", "nokey"],
    &["HELLO", "2"],
    &["HGETALL", "h"],
    &["GET", "zz"],
];

const PASSWORD: &[&[&str]] = &[
    &["GET", "k"],
    &["PING"],
    &["GET"],
    &["NOSUCH"],
    &["HELLO", "3"],
    &["HELLO", "3", "AUTH", "default", "wrong"],
    &["AUTH", "wrong"],
    &["AUTH", "bob", "pw"],
    &["QUIT"],
    &["AUTH", "pw"],
    &["GET", "k"],
];

const PASSWORD_HELLO: &[&[&str]] = &[
    &["HELLO", "3", "AUTH", "default", "pw", "SETNAME", "x"],
    &["PING"],
    &["CLIENT", "GETNAME"],
    &["AUTH", "default", "pw"],
];

#[test]
fn replies_match_the_transcript() {
    let mut out = String::new();
    let dir = tempfile::tempdir().expect("tempdir");
    let sh = shared(dir.path(), None);
    let mut sess = sh.session("127.0.0.1:1".into());
    for (title, script) in [("strings", STRINGS), ("hashes and keys", HASHES_AND_KEYS), ("connection", CONNECTION)] {
        let _ = writeln!(out, "## {title}");
        run(&sh, &mut sess, script, &mut out);
    }
    let _ = writeln!(out, "## scripts");
    run(&sh, &mut sess, SCRIPTS, &mut out);
    let _ = writeln!(out, "## transactions");
    run(&sh, &mut sess, TRANSACTIONS, &mut out);
    let _ = writeln!(out, "## lists");
    run(&sh, &mut sess, LISTS, &mut out);
    let _ = writeln!(out, "## databases");
    run(&sh, &mut sess, DATABASES, &mut out);
    let _ = writeln!(out, "## sorted sets");
    run(&sh, &mut sess, SORTED_SETS, &mut out);
    let _ = writeln!(out, "## sets");
    run(&sh, &mut sess, SETS, &mut out);
    let _ = writeln!(out, "## hash and string extras");
    run(&sh, &mut sess, HASH_AND_STRING_EXTRAS, &mut out);
    let _ = writeln!(out, "## introspection");
    run(&sh, &mut sess, INTROSPECTION, &mut out);
    let _ = writeln!(out, "## RESP3");
    run(&sh, &mut sess, RESP3, &mut out);
    let _ = writeln!(out, "## counters");
    counters(&sh, &mut out);
    drop(sh);

    let dir = tempfile::tempdir().expect("tempdir");
    let sh = shared(dir.path(), Some("pw"));
    let _ = writeln!(out, "## requirepass");
    run(&sh, &mut sh.session("127.0.0.1:2".into()), PASSWORD, &mut out);
    let _ = writeln!(out, "## requirepass, HELLO AUTH");
    run(&sh, &mut sh.session("127.0.0.1:3".into()), PASSWORD_HELLO, &mut out);
    let _ = writeln!(out, "## requirepass counters");
    counters(&sh, &mut out);

    if std::env::var_os("HALYARD_BLESS").is_some() {
        std::fs::write(GOLDEN, &out).expect("write the transcript");
        return;
    }
    let want = std::fs::read_to_string(GOLDEN).expect("read the transcript");
    for (i, (w, g)) in want.lines().zip(out.lines()).enumerate() {
        assert_eq!(g, w, "line {} of command_replies.golden", i + 1);
    }
    assert_eq!(out.lines().count(), want.lines().count(), "transcript length");
}

/// TIME, INFO and CLIENT INFO, which the transcript leaves out: their form.
#[test]
fn varying_replies_keep_their_form() {
    use halyard_server::resp::Reply;
    let dir = tempfile::tempdir().expect("tempdir");
    let sh = shared(dir.path(), None);
    let mut sess = sh.session("127.0.0.1:1".into());
    let Reply::Array(t) = commands::execute(&sh, &mut sess, &[b"TIME"]) else { panic!("TIME: not an array") };
    assert!(matches!(t.as_slice(), [Reply::Bulk(_), Reply::Bulk(_)]), "TIME: {t:?}");
    for (args, starts) in [
        (&[&b"INFO"[..]][..], "# Server\r\nredis_version:7.0.0\r\n"),
        (&[b"info", b"keyspace"], "# Keyspace\r\n\r\n"),
        (&[b"INFO", b"nosuch"], ""),
        (&[b"CLIENT", b"INFO"], "id=1 addr=127.0.0.1:1 name= age="),
    ] {
        let r = commands::execute(&sh, &mut sess, args);
        let Reply::Bulk(b) = r else { panic!("{args:?}: {r:?}") };
        let text = String::from_utf8_lossy(&b);
        assert!(text.starts_with(starts), "{args:?}: {text:?}");
        assert!(!starts.is_empty() || text.is_empty(), "{args:?}: {text:?}");
    }
}

/// The text of INFO with `sections`.
fn info_text(sh: &Shared, sess: &mut Session, sections: &[&str]) -> String {
    use halyard_server::resp::Reply;
    let mut args: Vec<&[u8]> = vec![b"INFO"];
    args.extend(sections.iter().map(|s| s.as_bytes()));
    let Reply::Bulk(b) = commands::execute(sh, sess, &args) else { panic!("INFO {sections:?}: not a bulk string") };
    String::from_utf8(b).expect("INFO is text")
}

/// INFO has Redis' sections and fields, in Redis' format; several sections in one call.
#[test]
fn info_has_redis_sections() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sh = shared(dir.path(), None);
    let mut sess = sh.session("127.0.0.1:1".into());
    let text = info_text(&sh, &mut sess, &[]);
    for header in [
        "# Server",
        "# Clients",
        "# Memory",
        "# Persistence",
        "# Stats",
        "# Replication",
        "# CPU",
        "# Errorstats",
        "# Keyspace",
    ] {
        assert!(text.contains(&format!("{header}\r\n")), "INFO lacks {header}: {text}");
    }
    assert!(!text.contains("# Commandstats"), "commandstats is not a default section");
    for field in [
        "redis_git_sha1:0",
        "tcp_port:",
        "connected_clients:",
        "blocked_clients:0",
        "used_memory:",
        "used_memory_human:",
        "used_memory_rss:",
        "used_memory_peak:",
        "maxmemory:0",
        "maxmemory_policy:noeviction",
        "mem_fragmentation_ratio:",
        "loading:0",
        "rdb_changes_since_last_save:",
        "aof_enabled:0",
        "halyard_sync:",
        "expired_keys:",
        "evicted_keys:0",
        "instantaneous_ops_per_sec:",
        "role:master",
        "connected_slaves:0",
        "master_repl_offset:",
        "used_cpu_sys:",
        "used_cpu_user:",
    ] {
        assert!(text.contains(&format!("\r\n{field}")), "INFO lacks {field}: {text}");
    }
    let run_id = text.lines().find_map(|l| l.strip_prefix("run_id:")).expect("run_id");
    assert!(run_id.len() == 40 && run_id.bytes().all(|b| b.is_ascii_hexdigit()), "run_id {run_id}");
    for line in text.lines().filter(|l| !l.is_empty() && !l.starts_with('#')) {
        assert!(line.contains(':'), "not a field: {line:?}");
    }
    let two = info_text(&sh, &mut sess, &["clients", "SERVER"]);
    assert!(two.starts_with("# Server\r\n") && two.contains("# Clients\r\n") && !two.contains("# Memory"), "{two}");
    assert!(info_text(&sh, &mut sess, &["all"]).contains("# Commandstats\r\n"));
    assert!(info_text(&sh, &mut sess, &["everything"]).contains("# Commandstats\r\n"));
    assert_eq!(info_text(&sh, &mut sess, &["nosuch"]), "");
}

/// INFO commandstats counts calls, failures and rejections; CONFIG RESETSTAT clears them (and
/// INFO stats' totals) but not the Prometheus counters.
#[test]
fn commandstats_count_and_resetstat_clears() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sh = shared(dir.path(), None);
    let mut sess = sh.session("127.0.0.1:1".into());
    let mut out = String::new();
    run(
        &sh,
        &mut sess,
        &[&["SET", "k", "v"], &["GET", "k"], &["GET", "k"], &["INCR", "k"], &["GET"], &["NOSUCH"]],
        &mut out,
    );
    let stats = info_text(&sh, &mut sess, &["commandstats"]);
    let line = |name: &str| stats.lines().find(|l| l.starts_with(&format!("cmdstat_{name}:"))).map(str::to_string);
    let get = line("get").expect("cmdstat_get");
    assert!(get.starts_with("cmdstat_get:calls=2,usec=") && get.contains(",usec_per_call="), "{get}");
    assert!(get.ends_with(",rejected_calls=1,failed_calls=0"), "{get}");
    assert!(line("incr").expect("cmdstat_incr").ends_with(",rejected_calls=0,failed_calls=1"), "{stats}");
    assert!(line("set").is_some() && line("del").is_none(), "{stats}");
    let errors = info_text(&sh, &mut sess, &["errorstats"]);
    assert!(errors.contains("errorstat_ERR:count=3\r\n"), "{errors}");
    let total = |sh: &Shared, sess: &mut Session| {
        let t = info_text(sh, sess, &["stats"]);
        t.lines().find_map(|l| l.strip_prefix("total_commands_processed:")?.parse::<u64>().ok()).expect("total")
    };
    assert!(total(&sh, &mut sess) >= 4);

    run(&sh, &mut sess, &[&["CONFIG", "RESETSTAT"]], &mut out);
    let stats = info_text(&sh, &mut sess, &["commandstats"]);
    assert!(!stats.contains("cmdstat_get:") && !stats.contains("cmdstat_incr:"), "after RESETSTAT: {stats}");
    assert_eq!(info_text(&sh, &mut sess, &["errorstats"]), "# Errorstats\r\n\r\n");
    // The INFO calls since (and the RESETSTAT itself) count.
    assert!(total(&sh, &mut sess) <= 4);
    run(&sh, &mut sess, &[&["GET", "k"]], &mut out);
    let stats = info_text(&sh, &mut sess, &["commandstats"]);
    assert!(stats.contains("cmdstat_get:calls=1,"), "{stats}");
    assert_eq!(sh.metrics.commands.get("get").map(metrics::CmdStats::calls), Some(3), "Prometheus counts go on");
}
