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
const UNORDERED: &[&str] = &[
    "keys",
    "smembers",
    "sunion",
    "sinter",
    "sdiff",
    "hkeys",
    "hvals",
    "spop",
    "srandmember",
    "hrandfield",
    "zrandmember",
];
/// Scans of one key whose page lists members (SSCAN) or field-value pairs (HSCAN) in no
/// defined order: the page compared sorted (the scripts scan small keys, which Redis answers in
/// one page).
const UNORDERED_SCANS: &[&str] = &["sscan", "hscan"];
/// Commands whose replies are field-value pairs in no defined order: compared as sorted pairs.
const UNORDERED_PAIRS: &[&str] = &["hgetall", "config"];

/// A reply as compared: errors word for word, unordered collections sorted.
fn normalize(cmd: &str, r: R) -> R {
    let cmd = cmd.to_ascii_lowercase();
    match r {
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
fn swapped_databases_stay_swapped_after_a_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    {
        let srv = Server::start(dir.path(), &[]);
        let mut c = srv.conn();
        assert_eq!(c.cmd(&["SET", "k", "in0"]), R::Simple("OK".into()));
        assert_eq!(c.cmd(&["SELECT", "9"]), R::Simple("OK".into()));
        assert_eq!(c.cmd(&["RPUSH", "l", "a"]), R::Int(1));
        // A client blocked in database 1 is woken by the swap that brings it a list.
        let mut blocked = srv.conn();
        assert_eq!(blocked.cmd(&["SELECT", "1"]), R::Simple("OK".into()));
        blocked.send(&[b"BLPOP", b"l", b"5"]);
        std::thread::sleep(std::time::Duration::from_millis(100));
        assert_eq!(c.cmd(&["SWAPDB", "1", "9"]), R::Simple("OK".into()));
        assert_eq!(blocked.read(), Some(R::Array(Some(vec![bulk("l"), bulk("a")]))));
        assert_eq!(c.cmd(&["SWAPDB", "0", "9"]), R::Simple("OK".into()));
        assert_eq!(c.cmd(&["GET", "k"]), bulk("in0"));
    }
    let srv = Server::start(dir.path(), &[]);
    let mut c = srv.conn();
    assert_eq!(c.cmd(&["GET", "k"]), R::Bulk(None));
    assert_eq!(c.cmd(&["SELECT", "9"]), R::Simple("OK".into()));
    assert_eq!(c.cmd(&["GET", "k"]), bulk("in0"));
}

/// Consumer groups and XREAD, side by side with Redis (idle times left out: they are clocks).
#[test]
fn stream_consumer_groups() {
    same_as_redis(&[
        &["xgroup", "create", "s", "g", "$"],
        &["xgroup", "create", "s", "g", "$", "MKSTREAM"],
        &["xgroup", "create", "s", "g", "$", "MKSTREAM"],
        &["xadd", "s", "1-1", "a", "1"],
        &["xadd", "s", "2-1", "b", "2"],
        &["xadd", "s", "3-1", "c", "3"],
        &["xreadgroup", "group", "g", "alice", "count", "2", "streams", "s", ">"],
        &["xreadgroup", "group", "g", "bob", "streams", "s", ">"],
        &["xreadgroup", "group", "g", "bob", "streams", "s", ">"],
        &["xreadgroup", "group", "g", "alice", "streams", "s", "0"],
        &["xpending", "s", "g"],
        &["xpending", "s", "g", "IDLE", "99999999", "-", "+", "10"],
        &["xack", "s", "g", "1-1", "9-9"],
        &["xpending", "s", "g"],
        &["xclaim", "s", "g", "carol", "0", "2-1", "JUSTID"],
        &["xclaim", "s", "g", "carol", "0", "3-1"],
        &["xautoclaim", "s", "g", "dave", "0", "0", "COUNT", "1", "JUSTID"],
        &["xdel", "s", "2-1"],
        &["xreadgroup", "group", "g", "carol", "streams", "s", "0"],
        &["xautoclaim", "s", "g", "dave", "0", "0"],
        &["xgroup", "createconsumer", "s", "g", "erin"],
        &["xgroup", "createconsumer", "s", "g", "erin"],
        &["xgroup", "delconsumer", "s", "g", "dave"],
        &["xgroup", "delconsumer", "s", "g", "zed"],
        &["xgroup", "setid", "s", "g", "0"],
        &["xreadgroup", "group", "g", "erin", "noack", "streams", "s", ">"],
        &["xpending", "s", "g"],
        &["xgroup", "setid", "s", "nog", "0"],
        &["xreadgroup", "group", "nog", "a", "streams", "s", ">"],
        &["xread", "count", "1", "streams", "s", "0"],
        &["xread", "streams", "s", "$"],
        &["xread", "streams", "s"],
        &["xgroup", "destroy", "s", "g"],
        &["xgroup", "destroy", "s", "g"],
        &["xgroup", "bogus"],
        &["xgroup", "create", "nokey", "g", "0"],
        &["xgroup", "create", "s", "g2", "0"],
        &["xreadgroup", "group", "g2", "c", "count", "1", "streams", "s", ">"],
        &["xinfo", "bogus"],
        &["del", "s"],
        &["xgroup", "create", "s", "g", "$", "MKSTREAM"],
        &["xadd", "s", "1-1", "a", "1"],
        &["xreadgroup", "group", "g", "c", "streams", "s", ">"],
        &["xinfo", "groups", "s"],
        &["xinfo", "stream", "s"],
        &["xgroup", "help"],
        &["xinfo", "help"],
        &["xreadgroup", "group", "g2", "c", "streams", "s"],
        &["xread", "streams"],
        &["xreadgroup", "group", "g2", "c", "block", "-1", "streams", "s", ">"],
        &["set", "str", "v"],
        &["xread", "streams", "str", "0"],
        &["xgroup", "create", "str", "g", "0"],
    ]);
}

/// DUMPs `key` on `from` and RESTOREs it on `to` (`how` names the direction in failures).
fn move_key(from: &mut Resp, to: &mut Resp, key: &str, how: &str) {
    from.send(&[b"DUMP", key.as_bytes()]);
    let Some(R::Bulk(Some(payload))) = from.read() else { panic!("DUMP {key} {how}") };
    to.send(&[b"RESTORE", key.as_bytes(), b"0", &payload]);
    assert_eq!(to.read(), Some(R::Simple("OK".into())), "RESTORE {key} {how}");
}

/// DUMP payloads move between Halyard and redis-server both ways: every type Halyard dumps
/// restores there as the same value, and strings Redis dumps (plain, integer, compressed)
/// restore here.
#[test]
fn dump_payloads_move_between_halyard_and_redis() {
    assert!(have("redis-server"), "install redis-server (scripts/test.sh does)");
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let srv = Server::start(dir.path(), &[]);
    let (mut r, mut h) = (Resp::connect(redis.port), srv.conn());
    let setup: &[&[&str]] = &[
        &["SET", "s", "hello"],
        &["RPUSH", "l", "a", "b", "c"],
        &["SADD", "st", "x", "y"],
        &["HSET", "h", "f", "v", "g", "w"],
        &["ZADD", "z", "1.5", "a", "-2", "b"],
    ];
    for c in setup {
        h.cmd(c);
    }
    let reads: &[&[&str]] = &[
        &["GET", "s"],
        &["LRANGE", "l", "0", "-1"],
        &["SMEMBERS", "st"],
        &["HGETALL", "h"],
        &["ZRANGE", "z", "0", "-1", "WITHSCORES"],
    ];
    for (c, read) in setup.iter().zip(reads) {
        let key = c[1];
        move_key(&mut h, &mut r, key, "into redis");
        let name = read[0];
        assert_eq!(normalize(name, r.cmd(read)), normalize(name, h.cmd(read)), "{key} after the move");
    }
    // Redis' compact encodings of small collections restore here too.
    let compact: &[(&[&str], &[&str])] = &[
        (&["RPUSH", "cl", "a", "12", "-3", "70000", "-5000000000", &"x".repeat(100)], &["LRANGE", "cl", "0", "-1"]),
        (&["HSET", "ch", "f", "v", "n", "-200", "big", "4000000000"], &["HGETALL", "ch"]),
        (&["SADD", "ci", "1", "-2", "300000", "-9000000000"], &["SMEMBERS", "ci"]),
        (&["ZADD", "cz", "1.5", "a", "-2", "b", "3", "c"], &["ZRANGE", "cz", "0", "-1", "WITHSCORES"]),
    ];
    for (make, read) in compact {
        let key = make[1];
        r.cmd(make);
        move_key(&mut r, &mut h, key, "from redis");
        let name = read[0];
        assert_eq!(normalize(name, h.cmd(read)), normalize(name, r.cmd(read)), "{key} from redis");
    }
    for v in ["plain", "12345", "-7", &"abc".repeat(200)] {
        r.cmd(&["SET", "rs", v]);
        r.send(&[b"DUMP", b"rs"]);
        let Some(R::Bulk(Some(payload))) = r.read() else { panic!("DUMP in redis") };
        h.send(&[b"RESTORE", b"rs", b"0", &payload, b"REPLACE"]);
        assert_eq!(h.read(), Some(R::Simple("OK".into())), "RESTORE of redis' {v:.10}");
        assert_eq!(h.cmd(&["GET", "rs"]), bulk(v));
    }
    same_as_redis(&[
        &["SET", "k", "v"],
        &["RESTORE", "k", "0", "garbage"],
        &["RESTORE", "k", "0", "garbage", "REPLACE"],
        &["RESTORE", "k", "-1", "x"],
        &["RESTORE", "k", "x", "x"],
        &["RESTORE", "k", "0", "x", "BOGUS"],
        &["RESTORE", "nk", "-1", "x"],
        &["RESTORE", "nk", "x", "x"],
        &["RESTORE", "nk", "0", "x", "IDLETIME", "-1"],
        &["DUMP", "nokey"],
    ]);
}

/// ACL users, rules, checks and AUTH, side by side with Redis.
#[test]
fn acl_matches_redis() {
    same_as_redis(&[
        &["acl", "setuser", "bob", "on", ">123", "+@scripting", "+set", "~x*"],
        &["acl", "getuser", "bob"],
        &["acl", "list"],
        &["acl", "users"],
        &["acl", "whoami"],
        &["acl", "setuser", "alice", "on", "nopass", "+get", "-@all", "+hget", "allkeys"],
        &["acl", "getuser", "alice"],
        &["acl", "setuser", "carol", "bogus"],
        &["acl", "setuser", "carol", "+nosuch"],
        &["acl", "setuser", "carol", "+@nosuch"],
        &["acl", "dryrun", "bob", "set", "xx", "1"],
        &["acl", "dryrun", "bob", "set", "yy", "1"],
        &["acl", "dryrun", "bob", "get", "xx"],
        &["acl", "cat", "nosuch"],
        &["acl", "deluser", "alice", "nobody", "default"],
        &["acl", "bogus"],
        &["acl", "cat"],
        &["acl", "setuser", "dave", "on", ">pw", "+@read", "-@all", "+@string", "~*"],
        &["acl", "getuser", "dave"],
        &["auth", "bob", "124"],
        &["auth", "nobody", "x"],
        &["auth", "bob", "123"],
        &["acl", "whoami"],
        &["set", "xx", "1"],
        &["set", "yy", "1"],
        &["get", "xx"],
        &["eval", "return redis.acl_check_cmd('set','xx',1)", "1", "xx"],
        &["eval", "return redis.acl_check_cmd('hset','xx','f',1)", "1", "xx"],
        &["eval", "return redis.acl_check_cmd('nosuch')", "0"],
        &["eval", "return redis.call('get','xx')", "1", "xx"],
    ]);
}

/// One script cannot change what later scripts (another client's) see: globals and the
/// libraries are read-only, as in Redis 7.
#[test]
fn scripts_cannot_change_the_shared_lua_state() {
    same_as_redis(&[
        &["EVAL", "redis = function() return 1 end", "0"],
        &["EVAL", "_G = {}", "0"],
        &["EVAL", "redis.call = function() return 1 end", "0"],
        &["EVAL", "cjson.encode = function() return 1 end", "0"],
        &["EVAL", "bit.band = nil", "0"],
        &["EVAL", "local g = getmetatable(_G) g.__index = {}", "0"],
        &["EVAL", "string.rep = nil", "0"],
        &["EVAL", "return loadstring(string.dump(function() return 1 end))()", "0"],
        &["EVAL", "return print", "0"],
        &["EVAL", "return redis.call('set', KEYS[1], ('ab'):rep(2))", "1", "k"],
        &["EVAL", "return {redis.call('get', KEYS[1]), cjson.encode({1}), bit.band(6, 3)}", "1", "k"],
        // Shebang flags, and a single node under min-replicas-to-write.
        &["EVAL", "#!lua flags=no-writes\nreturn redis.call('set', 'x', 1)", "0"],
        &["EVAL", "#!lua flags=no-writes,allow-oom\nreturn redis.call('get', KEYS[1])", "1", "k"],
        &["EVAL", "#!python\nreturn 1", "0"],
        &["EVAL", "#!lua foo=bar\nreturn 1", "0"],
        &["EVAL", "#!lua flags=bogus\nreturn 1", "0"],
        &["CONFIG", "SET", "min-replicas-to-write", "1"],
        &["SET", "k", "v"],
        &["EVAL", "return redis.call('get', KEYS[1])", "1", "k"],
        &["EVAL", "#!lua\nreturn 1", "0"],
        &["EVAL", "return redis.call('set', KEYS[1], 'w')", "1", "k"],
        &["CONFIG", "SET", "min-replicas-to-write", "0"],
    ]);
}

/// SHUTDOWN stops the server as SIGTERM does: no reply, the process exits cleanly, the data
/// is there after a restart.
#[test]
fn shutdown_stops_the_server_and_keeps_the_data() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut srv = Server::start(dir.path(), &[]);
    let mut c = srv.conn();
    assert_eq!(c.cmd(&["SET", "k", "v"]), R::Simple("OK".into()));
    assert_eq!(c.cmd(&["SHUTDOWN", "BOGUS"]), R::Err("ERR syntax error".into()));
    c.send(&[b"SHUTDOWN", b"NOSAVE"]);
    assert_eq!(c.read(), None, "SHUTDOWN answers by closing the connection");
    let mut child = srv.child.take().expect("running");
    let t0 = std::time::Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s;
        }
        assert!(t0.elapsed() < std::time::Duration::from_secs(20), "the server did not stop");
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    assert!(status.success(), "{status}");
    let srv = Server::start(dir.path(), &[]);
    assert_eq!(srv.conn().cmd(&["GET", "k"]), bulk("v"));
}

/// SAVE and BGSAVE make the store durable; neither may be queued in MULTI.
#[test]
fn save_and_bgsave() {
    same_as_redis(&[
        &["SET", "k", "v"],
        &["SAVE"],
        &["MULTI"],
        &["SAVE"],
        &["SHUTDOWN"],
        &["BGSAVE"],
        &["EXEC"],
        &["BGSAVE", "BOGUS"],
    ]);
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
        &["SWAPDB", "0", "15"],
        &["GET", "k"],
        &["DBSIZE"],
        &["SELECT", "15"],
        &["GET", "k"],
        &["HGETALL", "hk"],
        &["SWAPDB", "15", "15"],
        &["SWAPDB", "0", "16"],
        &["SWAPDB", "x", "1"],
        &["SWAPDB", "1", "x"],
        &["SWAPDB", "-1", "1"],
        &["SELECT", "0"],
        &["FLUSHALL", "SYNC"],
        &["SELECT", "15"],
        &["DBSIZE"],
    ]);
}

#[test]
fn lists() {
    same_as_redis(&[
        &["LPUSH", "l", "a", "b", "c"],
        &["RPUSH", "l", "x", "y"],
        &["LRANGE", "l", "0", "-1"],
        &["LRANGE", "l", "-2", "-1"],
        &["LRANGE", "l", "-100", "100"],
        &["LRANGE", "l", "3", "1"],
        &["LRANGE", "l", "x", "1"],
        &["LRANGE", "nol", "0", "-1"],
        &["LLEN", "l"],
        &["LLEN", "nol"],
        &["LINDEX", "l", "0"],
        &["LINDEX", "l", "-1"],
        &["LINDEX", "l", "5"],
        &["LINDEX", "l", "x"],
        &["LSET", "l", "1", "B"],
        &["LSET", "l", "-1", "Y"],
        &["LSET", "l", "10", "z"],
        &["LSET", "nol", "0", "z"],
        &["LRANGE", "l", "0", "-1"],
        &["LPUSHX", "nol", "a"],
        &["RPUSHX", "l", "z"],
        &["LPOP", "l"],
        &["RPOP", "l"],
        &["LPOP", "l", "2"],
        &["RPOP", "l", "0"],
        &["LPOP", "l", "-1"],
        &["LPOP", "nol"],
        &["LPOP", "nol", "2"],
        &["LRANGE", "l", "0", "-1"],
        &["RPUSH", "r", "a", "b", "a", "c", "a", "b"],
        &["LREM", "r", "1", "a"],
        &["LREM", "r", "-1", "a"],
        &["LREM", "r", "0", "b"],
        &["LREM", "r", "0", "zz"],
        &["LRANGE", "r", "0", "-1"],
        &["RPUSH", "t", "1", "2", "3", "4", "5"],
        &["LTRIM", "t", "1", "-2"],
        &["LRANGE", "t", "0", "-1"],
        &["LTRIM", "t", "5", "10"],
        &["EXISTS", "t"],
        &["RPUSH", "i", "a", "c"],
        &["LINSERT", "i", "BEFORE", "c", "b"],
        &["LINSERT", "i", "AFTER", "c", "d"],
        &["LINSERT", "i", "AFTER", "zz", "d"],
        &["LINSERT", "i", "MIDDLE", "c", "d"],
        &["LINSERT", "noi", "BEFORE", "c", "d"],
        &["LRANGE", "i", "0", "-1"],
        &["RPUSH", "p", "a", "b", "c", "1", "2", "3", "c", "c"],
        &["LPOS", "p", "c"],
        &["LPOS", "p", "c", "RANK", "2"],
        &["LPOS", "p", "c", "RANK", "-1"],
        &["LPOS", "p", "c", "COUNT", "0"],
        &["LPOS", "p", "c", "COUNT", "2", "RANK", "-1"],
        &["LPOS", "p", "c", "COUNT", "0", "MAXLEN", "7"],
        &["LPOS", "p", "zz"],
        &["LPOS", "p", "zz", "COUNT", "0"],
        &["LPOS", "p", "c", "RANK", "0"],
        &["LPOS", "p", "c", "COUNT", "-1"],
        &["LPOS", "p", "c", "MAXLEN", "-1"],
        &["LPOS", "p", "c", "BOGUS", "1"],
        &["LPOS", "nop", "c"],
        &["RPUSH", "m", "1", "2", "3"],
        &["LMOVE", "m", "m2", "LEFT", "RIGHT"],
        &["LMOVE", "m", "m", "RIGHT", "LEFT"],
        &["LMOVE", "m", "m2", "UP", "LEFT"],
        &["LMOVE", "nom", "m2", "LEFT", "LEFT"],
        &["RPOPLPUSH", "m", "m2"],
        &["LRANGE", "m", "0", "-1"],
        &["LRANGE", "m2", "0", "-1"],
        &["SET", "s", "v"],
        &["LPUSH", "s", "a"],
        &["LRANGE", "s", "0", "-1"],
        &["LMOVE", "m", "s", "LEFT", "LEFT"],
        &["LRANGE", "m", "0", "-1"],
        &["GET", "m2"],
        &["TYPE", "m2"],
        &["EXPIRE", "m2", "100"],
        &["RPUSH", "m2", "z"],
        &["TTL", "m2"],
        &["SET", "m2", "str"],
        &["TYPE", "m2"],
        &["BLPOP", "m", "nol", "0.01"],
        &["BLPOP", "nol", "0.01"],
        &["BRPOP", "nol", "x"],
        &["BRPOP", "nol", "-1"],
        &["BLMOVE", "nol", "m", "LEFT", "LEFT", "0.01"],
        &["ZADD", "bz", "1", "a", "2", "b"],
        &["BZPOPMIN", "nobz", "bz", "0"],
        &["BZPOPMAX", "bz", "0.01"],
        &["BZPOPMAX", "bz", "0.01"],
        &["BZPOPMIN", "m", "0.01"],
        &["BZPOPMIN", "bz", "x"],
        &["BRPOPLPUSH", "m", "m3", "0.01"],
        &["RPUSH", "m", "q"],
        &["BRPOPLPUSH", "m", "m3", "0"],
        &["LRANGE", "m3", "0", "-1"],
        &["DEL", "m", "m3", "l"],
        &["EXISTS", "m", "m3", "l"],
    ]);
}

/// A blocked BLPOP is answered by a push from another connection, in the order clients
/// blocked; one that times out answers the null array; a command pipelined behind a blocked
/// one waits for it.
#[test]
fn blocking_pops_wake_on_pushes_from_other_connections() {
    let dir = tempfile::tempdir().expect("tempdir");
    let srv = Server::start(dir.path(), &[]);
    let (mut first, mut second, mut pusher) = (srv.conn(), srv.conn(), srv.conn());
    first.send(&[b"BLPOP", b"q1", b"q2", b"0"]);
    first.send(&[b"PING"]);
    std::thread::sleep(std::time::Duration::from_millis(100));
    second.send(&[b"BRPOPLPUSH", b"q2", b"dst", b"0"]);
    std::thread::sleep(std::time::Duration::from_millis(100));
    assert_eq!(pusher.cmd(&["RPUSH", "q2", "a", "b"]), R::Int(2));
    let want = R::Array(Some(vec![bulk("q2"), bulk("a")]));
    assert_eq!(first.read(), Some(want));
    assert_eq!(first.read(), Some(R::Simple("PONG".into())));
    assert_eq!(second.read(), Some(bulk("b")));
    assert_eq!(pusher.cmd(&["LRANGE", "dst", "0", "-1"]), R::Array(Some(vec![bulk("b")])));
    first.send(&[b"BZPOPMAX", b"z1", b"0"]);
    std::thread::sleep(std::time::Duration::from_millis(100));
    assert_eq!(pusher.cmd(&["ZADD", "z1", "1.5", "m"]), R::Int(1));
    assert_eq!(first.read(), Some(R::Array(Some(vec![bulk("z1"), bulk("m"), bulk("1.5")]))));
    let t = std::time::Instant::now();
    assert_eq!(first.cmd(&["BRPOP", "q1", "0.2"]), R::Array(None));
    assert!(t.elapsed() >= std::time::Duration::from_millis(190), "waited {:?}", t.elapsed());
    // A client that goes away while blocked leaves nothing behind: the next push stays.
    let mut gone = srv.conn();
    gone.send(&[b"BLPOP", b"q3", b"0"]);
    std::thread::sleep(std::time::Duration::from_millis(100));
    drop(gone);
    std::thread::sleep(std::time::Duration::from_millis(100));
    assert_eq!(pusher.cmd(&["RPUSH", "q3", "x"]), R::Int(1));
    assert_eq!(pusher.cmd(&["LLEN", "q3"]), R::Int(1));
    // A move woken into a destination of another type answers WRONGTYPE; nothing moves.
    assert_eq!(pusher.cmd(&["SET", "notlist", "v"]), R::Simple("OK".into()));
    second.send(&[b"BRPOPLPUSH", b"q4", b"notlist", b"0"]);
    std::thread::sleep(std::time::Duration::from_millis(100));
    assert_eq!(pusher.cmd(&["RPUSH", "q4", "a", "b"]), R::Int(2));
    assert!(matches!(second.read(), Some(R::Err(e)) if e.starts_with("WRONGTYPE")));
    // CLIENT UNBLOCK answers a blocked client as a timeout would, or with an error.
    let R::Int(id) = second.cmd(&["CLIENT", "ID"]) else { panic!("CLIENT ID") };
    for (how, want) in
        [("TIMEOUT", R::Array(None)), ("ERROR", R::Err("UNBLOCKED client unblocked via CLIENT UNBLOCK".into()))]
    {
        second.send(&[b"BLPOP", b"q5", b"0"]);
        std::thread::sleep(std::time::Duration::from_millis(100));
        assert_eq!(pusher.cmd(&["CLIENT", "UNBLOCK", &id.to_string(), how]), R::Int(1));
        assert_eq!(second.read(), Some(want));
    }
    assert_eq!(pusher.cmd(&["CLIENT", "UNBLOCK", &id.to_string()]), R::Int(0));
    assert_eq!(pusher.cmd(&["LRANGE", "q4", "0", "-1"]), R::Array(Some(vec![bulk("a"), bulk("b")])));
}

#[test]
fn transactions() {
    same_as_redis(&[
        &["MULTI"],
        &["SET", "a", "1"],
        &["INCR", "a"],
        &["LPUSH", "a", "x"],
        &["GET", "a"],
        &["EXEC"],
        &["EXEC"],
        &["DISCARD"],
        &["MULTI"],
        &["MULTI"],
        &["SET", "b", "1"],
        &["DISCARD"],
        &["GET", "b"],
        &["MULTI"],
        &["SET", "b", "1"],
        &["NOSUCHCMD"],
        &["GET"],
        &["EXEC"],
        &["GET", "b"],
        &["MULTI"],
        &["WATCH", "a"],
        &["EXEC"],
        &["WATCH", "a"],
        &["SET", "a", "changed"],
        &["MULTI"],
        &["SET", "a", "tx"],
        &["EXEC"],
        &["GET", "a"],
        &["WATCH", "a", "zz"],
        &["MULTI"],
        &["SET", "a", "tx"],
        &["EXEC"],
        &["GET", "a"],
        &["WATCH", "a"],
        &["UNWATCH"],
        &["SET", "a", "other"],
        &["MULTI"],
        &["GET", "a"],
        &["EXEC"],
        &["WATCH", "h"],
        &["HSET", "h", "f", "v"],
        &["MULTI"],
        &["PING"],
        &["EXEC"],
        &["WATCH", "l"],
        &["FLUSHDB"],
        &["MULTI"],
        &["PING"],
        &["EXEC"],
        &["MULTI"],
        &["BLPOP", "nolist", "0"],
        &["EXEC"],
        // Scripts inside a transaction (what kombu's pipelines send), and the gate free after.
        &["SCRIPT", "LOAD", "return redis.call('INCR', KEYS[1])"],
        &["MULTI"],
        &["EVAL", "return redis.call('SET', KEYS[1], ARGV[1])", "1", "sx", "1"],
        &["EVALSHA", "61636018f4e6b5817b89791bbed242f93fa089e3", "1", "sx"],
        &["SCRIPT", "LOAD", "return 2"],
        &["INCR", "sx"],
        &["EXEC"],
        &["GET", "sx"],
        &["EVAL", "return redis.call('GET', KEYS[1])", "1", "sx"],
        &["MULTI"],
        &["EXEC"],
    ]);
}

/// WATCH sees another connection's write; EXEC's commands run with no other command between
/// them: readers never see one counter of a transaction incremented without the other.
#[test]
fn transactions_are_isolated_from_other_connections() {
    let dir = tempfile::tempdir().expect("tempdir");
    let srv = Server::start(dir.path(), &[]);
    let (mut a, mut b) = (srv.conn(), srv.conn());
    assert_eq!(a.cmd(&["WATCH", "k"]), ok());
    assert_eq!(b.cmd(&["SET", "k", "b"]), ok());
    assert_eq!(a.cmd(&["MULTI"]), ok());
    assert_eq!(a.cmd(&["SET", "k", "a"]), R::Simple("QUEUED".into()));
    assert_eq!(a.cmd(&["EXEC"]), R::Array(None));
    assert_eq!(a.cmd(&["GET", "k"]), bulk("b"));

    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writers: Vec<_> = (0..2)
        .map(|_| {
            let mut c = srv.conn();
            std::thread::spawn(move || {
                for _ in 0..300 {
                    c.cmd(&["MULTI"]);
                    c.cmd(&["INCR", "x"]);
                    c.cmd(&["INCR", "y"]);
                    assert!(matches!(c.cmd(&["EXEC"]), R::Array(Some(_))));
                }
            })
        })
        .collect();
    let reader = {
        let (mut c, stop) = (srv.conn(), stop.clone());
        std::thread::spawn(move || {
            let mut reads = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let R::Array(Some(v)) = c.cmd(&["MGET", "x", "y"]) else { panic!("MGET") };
                assert_eq!(v[0], v[1], "a transaction seen half done");
                reads += 1;
            }
            reads
        })
    };
    for w in writers {
        w.join().unwrap();
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    assert!(reader.join().unwrap() > 0);
    assert_eq!(a.cmd(&["GET", "x"]), bulk("600"));
}

#[test]
fn scripting() {
    same_as_redis(&[
        &["EVAL", "return 1", "0"],
        &["EVAL", "return {1, 2, {3, 'x'}, nil, 5}", "0"],
        &["EVAL", "return 'hello'", "0"],
        &["EVAL", "return true", "0"],
        &["EVAL", "return false", "0"],
        &["EVAL", "return nil", "0"],
        &["EVAL", "return 3.99", "0"],
        &["EVAL", "return {ok='fine'}", "0"],
        &["EVAL", "return {err='BAD thing'}", "0"],
        &["EVAL", "return redis.error_reply('MY error')", "0"],
        &["EVAL", "return redis.status_reply('DONE')", "0"],
        &["EVAL", "return {KEYS[1], KEYS[2], ARGV[1], ARGV[2]}", "2", "k1", "k2", "a1", "a2"],
        &["EVAL", "return redis.call('SET', KEYS[1], ARGV[1])", "1", "k", "v"],
        &["EVAL", "return redis.call('GET', KEYS[1])", "1", "k"],
        &["EVAL", "return redis.call('GET', 'nokey')", "0"],
        &["EVAL", "return redis.call('INCRBY', KEYS[1], 5)", "1", "n"],
        &["EVAL", "redis.call('RPUSH', 'l', 'a', 'b'); return redis.call('LRANGE', 'l', 0, -1)", "0"],
        &["EVAL", "return redis.call('HGETALL', 'nohash')", "0"],
        &["EVAL", "return redis.pcall('INCR', 'l')", "0"],
        &["EVAL", "return redis.call('INCR', 'l')", "0"],
        &["EVAL", "return redis.call('NOSUCH')", "0"],
        &["EVAL", "return redis.call()", "0"],
        &["EVAL", "local t = redis.pcall('INCR', 'l'); return t['err'] ~= nil", "0"],
        &["EVAL", "x = 1", "0"],
        &["EVAL", "return undefined_thing", "0"],
        &["EVAL", "return (", "0"],
        &["EVAL", "return 1", "-1"],
        &["EVAL", "return 1", "3", "a"],
        &["EVAL", "return 1", "x"],
        &["EVAL", "return os.time()", "0"],
        &["EVAL", "return redis.sha1hex('')", "0"],
        &["EVAL", "return redis.call('EXEC')", "0"],
        &["SCRIPT", "LOAD", "return 'loaded'"],
        &["EVALSHA", "8d3c1f9a0a6f7d4d0a1a9c1f8b1b0e5a6b8f2c1d", "0"],
        &["SCRIPT", "EXISTS", "8d3c1f9a0a6f7d4d0a1a9c1f8b1b0e5a6b8f2c1d", "e0e1f9fabfc9d4800c877a703b823ac0578ff8db"],
        &["EVAL", "return 1", "0"],
        &["EVALSHA", "E0E1F9FABFC9D4800C877A703B823AC0578FF8DB", "0"],
        &["SCRIPT", "LOAD", "return ("],
        &["SCRIPT", "KILL"],
        &["SCRIPT", "FLUSH"],
        &["SCRIPT", "EXISTS", "e0e1f9fabfc9d4800c877a703b823ac0578ff8db"],
        &["SCRIPT", "BOGUS"],
        &["EVAL", "return redis.call('LPOP', KEYS[1], 5)", "1", "l"],
        &["EVAL", "return tonumber(ARGV[1]) + 1", "0", "41"],
        &["EVAL", "return string.format('%d-%s', 7, 'x')", "0"],
        &["EVAL", "return table.concat({'a','b'}, ',')", "0"],
        &["EVAL", "return math.floor(3.7)", "0"],
        // Functions.
        &["FUNCTION", "FLUSH"],
        &["FUNCTION", "LOAD", "#!lua name=lib1\nredis.register_function('f1', function(keys, args) return redis.call('SET', keys[1], args[1]) end)\nredis.register_function{function_name='f2', callback=function(keys, args) return #keys + #args end, flags={'no-writes'}}"],
        &["FUNCTION", "LOAD", "#!lua name=lib1\nredis.register_function('f1', function() return 1 end)"],
        &["FUNCTION", "LOAD", "no header"],
        &["FUNCTION", "LOAD", "#!lua name=lib2\nredis.register_function('f1', function() return 1 end)"],
        &["FCALL", "f1", "1", "fk", "fv"],
        &["GET", "fk"],
        &["FCALL", "f2", "2", "a", "b", "c"],
        &["FCALL", "nosuch", "0"],
        &["FCALL_RO", "f2", "0"],
        &["FCALL_RO", "f1", "1", "fk", "x"],
        &["FUNCTION", "LOAD", "REPLACE", "#!lua name=lib1\nredis.register_function('f3', function() return 'three' end)"],
        &["FCALL", "f1", "0"],
        &["FCALL", "f3", "0"],
        &["FUNCTION", "DELETE", "lib1"],
        &["FUNCTION", "DELETE", "lib1"],
        &["FCALL", "f3", "0"],
    ]);
}

/// A script that runs past the time limit makes other clients' commands answer BUSY until
/// SCRIPT KILL stops it; one that wrote cannot be killed.
#[test]
fn a_runaway_script_is_busy_until_killed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let srv = Server::start(dir.path(), &[]);
    let (mut runner, mut other) = (srv.conn(), srv.conn());
    assert_eq!(other.cmd(&["SCRIPT", "KILL"]), R::Err("NOTBUSY No scripts in execution right now.".into()));
    runner.send(&[b"EVAL", b"while true do end", b"0"]);
    std::thread::sleep(std::time::Duration::from_millis(5300));
    let R::Err(e) = other.cmd(&["GET", "k"]) else { panic!("GET during a runaway script answered") };
    assert!(e.starts_with("BUSY"), "{e}");
    assert_eq!(other.cmd(&["SCRIPT", "KILL"]), ok());
    let Some(R::Err(e)) = runner.read() else { panic!("the killed script answered no error") };
    assert!(e.contains("SCRIPT KILL"), "{e}");
    assert_eq!(other.cmd(&["PING"]), R::Simple("PONG".into()));
    assert_eq!(runner.cmd(&["EVAL", "return 2", "0"]), R::Int(2));
}

#[test]
fn sorted_sets() {
    same_as_redis(&[
        // ZADD and its options.
        &["ZADD", "z", "1", "a", "2", "b", "3", "c"],
        &["ZADD", "z", "2", "b", "2", "d", "0.5", "e"],
        &["ZADD", "z", "1", "a", "1", "a", "5", "a"],
        &["ZSCORE", "z", "a"],
        &["ZADD", "z", "CH", "1", "a", "2", "b", "9", "f"],
        &["ZADD", "z", "NX", "100", "a", "7", "g"],
        &["ZADD", "z", "XX", "100", "a", "7", "h"],
        &["ZADD", "z", "XX", "CH", "1", "a", "7", "h"],
        &["ZADD", "z", "GT", "CH", "0", "a", "50", "b", "3", "i"],
        &["ZADD", "z", "LT", "CH", "10", "a", "0", "b"],
        &["ZADD", "z", "INCR", "2.5", "a"],
        &["ZADD", "z", "INCR", "NX", "1", "a"],
        &["ZADD", "z", "INCR", "XX", "1", "nosuch"],
        &["ZADD", "z", "INCR", "GT", "-1", "a"],
        &["ZADD", "z", "INCR", "LT", "-1", "a"],
        &["ZADD", "z", "NX", "XX", "1", "a"],
        &["ZADD", "z", "GT", "LT", "1", "a"],
        &["ZADD", "z", "NX", "GT", "1", "a"],
        &["ZADD", "z", "INCR", "1", "a", "2", "b"],
        &["ZADD", "z", "x", "a"],
        &["ZADD", "z", "nan", "a"],
        &["ZADD", "z", "1e400", "a"],
        &["ZADD", "z", "1", "a", "2"],
        &["ZADD", "z", "BOGUS", "1", "a"],
        &["ZADD", "z", "1"],
        &["ZADD", "z", "-0", "zero"],
        &["ZSCORE", "z", "zero"],
        &["ZADD", "z", "0.1", "tenth", "-2.5", "neg", "1e20", "huge"],
        &["ZRANGE", "z", "0", "-1", "WITHSCORES"],
        &["ZCARD", "z"],
        &["ZCARD", "nokey"],
        // Scores: inf, NaN results, ZINCRBY.
        &["ZADD", "inf", "inf", "p", "-inf", "m", "+inf", "p2"],
        &["ZADD", "inf", "INCR", "-inf", "p"],
        &["ZINCRBY", "inf", "inf", "m"],
        &["ZINCRBY", "inf", "1", "p"],
        &["ZRANGE", "inf", "0", "-1", "WITHSCORES"],
        &["ZINCRBY", "z", "1.5", "a"],
        &["ZINCRBY", "z", "-1.5", "newm"],
        &["ZINCRBY", "z", "x", "a"],
        &["ZINCRBY", "nokey2", "3", "m"],
        &["ZSCORE", "z", "nosuch"],
        &["ZSCORE", "nokey", "a"],
        &["ZMSCORE", "z", "a", "nosuch", "b"],
        &["ZMSCORE", "nokey", "a", "b"],
        // Ranges by rank.
        &["DEL", "r"],
        &["ZADD", "r", "1", "a", "1", "b", "1", "c", "2", "d", "3", "e", "3", "f"],
        &["ZRANGE", "r", "0", "-1"],
        &["ZRANGE", "r", "1", "3", "WITHSCORES"],
        &["ZRANGE", "r", "-2", "-1"],
        &["ZRANGE", "r", "-100", "100"],
        &["ZRANGE", "r", "4", "2"],
        &["ZRANGE", "r", "10", "20"],
        &["ZRANGE", "r", "0", "-1", "REV"],
        &["ZRANGE", "r", "0", "1", "REV", "WITHSCORES"],
        &["ZREVRANGE", "r", "0", "2", "WITHSCORES"],
        &["ZREVRANGE", "r", "-1", "-1"],
        &["ZRANGE", "r", "x", "1"],
        &["ZRANGE", "r", "0", "-1", "LIMIT", "0", "1"],
        &["ZRANGE", "r", "0", "-1", "BOGUS"],
        &["ZRANGE", "nokey", "0", "-1"],
        // Ranges by score.
        &["ZRANGEBYSCORE", "r", "1", "2"],
        &["ZRANGEBYSCORE", "r", "(1", "3", "WITHSCORES"],
        &["ZRANGEBYSCORE", "r", "-inf", "+inf"],
        &["ZRANGEBYSCORE", "r", "(1", "(3"],
        &["ZRANGEBYSCORE", "r", "3", "1"],
        &["ZRANGEBYSCORE", "r", "-inf", "inf", "LIMIT", "1", "3"],
        &["ZRANGEBYSCORE", "r", "-inf", "inf", "LIMIT", "2", "-1", "WITHSCORES"],
        &["ZRANGEBYSCORE", "r", "-inf", "inf", "LIMIT", "-1", "2"],
        &["ZRANGEBYSCORE", "r", "-inf", "inf", "LIMIT", "0", "0"],
        &["ZRANGEBYSCORE", "r", "x", "1"],
        &["ZRANGEBYSCORE", "r", "1", "(x"],
        &["ZRANGEBYSCORE", "r", "1", "2", "LIMIT", "0"],
        &["ZRANGEBYSCORE", "r", "1", "2", "LIMIT", "x", "1"],
        &["ZRANGEBYSCORE", "r", "1", "2", "REV"],
        &["ZREVRANGEBYSCORE", "r", "3", "1"],
        &["ZREVRANGEBYSCORE", "r", "+inf", "(1", "WITHSCORES", "LIMIT", "1", "2"],
        &["ZREVRANGEBYSCORE", "r", "1", "3"],
        &["ZRANGE", "r", "1", "3", "BYSCORE"],
        &["ZRANGE", "r", "3", "(1", "BYSCORE", "REV", "WITHSCORES"],
        &["ZRANGE", "r", "-inf", "inf", "BYSCORE", "LIMIT", "1", "2"],
        &["ZRANGE", "r", "0", "1", "BYSCORE", "BYLEX"],
        &["ZCOUNT", "r", "1", "2"],
        &["ZCOUNT", "r", "(1", "+inf"],
        &["ZCOUNT", "r", "-inf", "(-5"],
        &["ZCOUNT", "r", "x", "1"],
        &["ZCOUNT", "nokey", "0", "1"],
        // Ranges by member.
        &["ZADD", "lex", "0", "a", "0", "b", "0", "c", "0", "d", "0", "e", "0", "ab"],
        &["ZRANGEBYLEX", "lex", "-", "+"],
        &["ZRANGEBYLEX", "lex", "[b", "(e"],
        &["ZRANGEBYLEX", "lex", "(a", "[c"],
        &["ZRANGEBYLEX", "lex", "[aa", "[b"],
        &["ZRANGEBYLEX", "lex", "+", "-"],
        &["ZRANGEBYLEX", "lex", "-", "+", "LIMIT", "1", "2"],
        &["ZRANGEBYLEX", "lex", "a", "+"],
        &["ZRANGEBYLEX", "lex", "-", "+", "WITHSCORES"],
        &["ZREVRANGEBYLEX", "lex", "+", "-"],
        &["ZREVRANGEBYLEX", "lex", "[c", "(a", "LIMIT", "0", "2"],
        &["ZRANGE", "lex", "[b", "[d", "BYLEX"],
        &["ZRANGE", "lex", "+", "[c", "BYLEX", "REV"],
        &["ZRANGE", "lex", "-", "+", "BYLEX", "WITHSCORES"],
        &["ZLEXCOUNT", "lex", "-", "+"],
        &["ZLEXCOUNT", "lex", "[b", "(d"],
        &["ZLEXCOUNT", "lex", "b", "d"],
        // Ranges by member over differing scores: walked in score order, as Redis does.
        &["ZADD", "mixed", "1", "c", "2", "a", "3", "e", "4", "b", "5", "d"],
        &["ZRANGEBYLEX", "mixed", "-", "+"],
        &["ZRANGEBYLEX", "mixed", "[a", "[c"],
        &["ZRANGEBYLEX", "mixed", "[b", "[d", "LIMIT", "1", "1"],
        &["ZREVRANGEBYLEX", "mixed", "[d", "[b"],
        &["ZRANGE", "mixed", "[d", "[b", "BYLEX", "REV"],
        &["ZLEXCOUNT", "mixed", "[b", "[d"],
        &["ZREMRANGEBYLEX", "mixed", "[c", "[e"],
        &["EXISTS", "mixed"],
        // Ranks.
        &["ZRANK", "r", "a"],
        &["ZRANK", "r", "f"],
        &["ZRANK", "r", "nosuch"],
        &["ZREVRANK", "r", "a"],
        &["ZREVRANK", "r", "f"],
        &["ZRANK", "nokey", "a"],
        // Removal.
        &["ZREM", "r", "a", "nosuch", "a"],
        &["ZREM", "nokey", "a"],
        &["ZREMRANGEBYRANK", "r", "0", "0"],
        &["ZREMRANGEBYRANK", "r", "-1", "-1"],
        &["ZREMRANGEBYRANK", "r", "5", "10"],
        &["ZREMRANGEBYRANK", "r", "x", "1"],
        &["ZRANGE", "r", "0", "-1", "WITHSCORES"],
        &["ZREMRANGEBYSCORE", "r", "(1", "2"],
        &["ZREMRANGEBYSCORE", "r", "x", "2"],
        &["ZRANGE", "r", "0", "-1", "WITHSCORES"],
        &["ZREMRANGEBYLEX", "lex", "[b", "(d"],
        &["ZREMRANGEBYLEX", "lex", "x", "+"],
        &["ZRANGE", "lex", "0", "-1"],
        &["ZREMRANGEBYLEX", "lex", "-", "+"],
        &["EXISTS", "lex"],
        &["ZREM", "r", "e"],
        &["EXISTS", "r"],
        // Pops.
        &["ZADD", "p", "1", "a", "2", "b", "3", "c", "4", "d"],
        &["ZPOPMIN", "p"],
        &["ZPOPMAX", "p"],
        &["ZPOPMIN", "p", "0"],
        &["ZPOPMIN", "p", "-1"],
        &["ZPOPMIN", "p", "x"],
        &["ZPOPMIN", "p", "1", "2"],
        &["ZPOPMAX", "p", "10"],
        &["ZPOPMIN", "p"],
        &["ZPOPMIN", "p", "3"],
        &["EXISTS", "p"],
        // Types, expiry, deletion.
        &["SET", "s", "v"],
        &["ZADD", "s", "1", "a"],
        &["ZSCORE", "s", "a"],
        &["ZRANGE", "s", "0", "-1"],
        &["ZRANGEBYSCORE", "s", "0", "1"],
        &["ZCARD", "s"],
        &["ZPOPMIN", "s"],
        &["ZRANK", "s", "a"],
        &["ZREM", "s", "a"],
        &["ZINCRBY", "s", "1", "a"],
        &["ZUNIONSTORE", "d", "1", "s"],
        &["HSET", "h", "f", "v"],
        &["ZADD", "h", "1", "a"],
        &["GET", "z"],
        &["HGET", "z", "a"],
        &["TYPE", "z"],
        &["EXPIRE", "z", "100"],
        &["TTL", "z"],
        &["ZADD", "z", "1", "newer"],
        &["TTL", "z"],
        &["ZRANGEBYSCORE", "z", "1", "1"],
        &["COPY", "z", "zc"],
        &["ZRANGE", "zc", "0", "-1", "WITHSCORES"],
        &["RENAME", "zc", "zr"],
        &["ZCARD", "zr"],
        &["TTL", "zr"],
        &["PERSIST", "zr"],
        &["TTL", "zr"],
        &["DEL", "zr"],
        &["ZCARD", "zr"],
        &["SET", "z2", "x"],
        &["ZADD", "z3", "1", "a"],
        &["SET", "z3", "x"],
        &["GET", "z3"],
        &["ZADD", "z3", "1", "a"],
        // Union, intersection, difference.
        &["ZADD", "u1", "1", "a", "2", "b", "3", "c"],
        &["ZADD", "u2", "10", "b", "20", "c", "30", "d"],
        &["ZUNIONSTORE", "out", "2", "u1", "u2"],
        &["ZRANGE", "out", "0", "-1", "WITHSCORES"],
        &["ZUNIONSTORE", "out", "2", "u1", "u2", "WEIGHTS", "2", "0.5"],
        &["ZRANGE", "out", "0", "-1", "WITHSCORES"],
        &["ZUNIONSTORE", "out", "2", "u1", "u2", "AGGREGATE", "MAX"],
        &["ZRANGE", "out", "0", "-1", "WITHSCORES"],
        &["ZUNIONSTORE", "out", "3", "u1", "u2", "nokey", "WEIGHTS", "1", "-1", "5", "AGGREGATE", "min"],
        &["ZRANGE", "out", "0", "-1", "WITHSCORES"],
        &["ZINTERSTORE", "out", "2", "u1", "u2"],
        &["ZRANGE", "out", "0", "-1", "WITHSCORES"],
        &["ZINTERSTORE", "out", "2", "u1", "u2", "WEIGHTS", "1", "2", "AGGREGATE", "MIN"],
        &["ZRANGE", "out", "0", "-1", "WITHSCORES"],
        &["ZINTERSTORE", "out", "2", "u1", "nokey"],
        &["EXISTS", "out"],
        &["ZUNIONSTORE", "u1", "2", "u1", "u2"],
        &["ZRANGE", "u1", "0", "-1", "WITHSCORES"],
        &["ZDIFFSTORE", "out", "2", "u2", "u1"],
        &["ZDIFFSTORE", "out", "2", "u1", "u2"],
        &["ZRANGE", "out", "0", "-1", "WITHSCORES"],
        &["ZUNION", "2", "u1", "u2", "WITHSCORES"],
        &["ZUNION", "2", "u1", "u2", "WEIGHTS", "1", "2", "AGGREGATE", "SUM"],
        &["ZINTER", "2", "u1", "u2", "WITHSCORES"],
        &["ZDIFF", "2", "u2", "out", "WITHSCORES"],
        &["ZDIFF", "1", "nokey"],
        &["ZUNIONSTORE", "out", "0", "u1"],
        &["ZUNIONSTORE", "out", "3", "u1"],
        &["ZUNIONSTORE", "out", "x", "u1"],
        &["ZUNIONSTORE", "out", "1", "u1", "WEIGHTS", "x"],
        &["ZUNIONSTORE", "out", "1", "u1", "WEIGHTS", "1", "2"],
        &["ZUNIONSTORE", "out", "1", "u1", "AGGREGATE", "AVG"],
        &["ZUNIONSTORE", "out", "1", "u1", "WITHSCORES"],
        &["ZDIFF", "1", "u1", "WEIGHTS", "2"],
        &["ZINTER", "0", "u1"],
        &["ZUNION", "1", "s"],
        &["ZRANGESTORE", "rs", "u2", "1", "-1"],
        &["ZRANGE", "rs", "0", "-1", "WITHSCORES"],
        &["ZRANGESTORE", "rs", "u2", "(10", "+inf", "BYSCORE", "LIMIT", "0", "1"],
        &["ZRANGE", "rs", "0", "-1", "WITHSCORES"],
        &["ZRANGESTORE", "rs", "u2", "0", "-1", "WITHSCORES"],
        &["ZRANGESTORE", "rs", "u2", "5", "9"],
        &["EXISTS", "rs"],
        // Scan and random members.
        &["ZSCAN", "u2", "0"],
        &["ZSCAN", "u2", "0", "MATCH", "c*"],
        &["ZSCAN", "u2", "0", "COUNT", "1"],
        &["ZSCAN", "u2", "x"],
        &["ZSCAN", "u2", "0", "COUNT", "0"],
        &["ZSCAN", "nokey", "0"],
        &["ZADD", "big", "1e17", "a", "0.25", "b", "-3", "c"],
        &["ZSCAN", "big", "0"],
        &["ZRANDMEMBER", "u2", "5"],
        &["ZRANDMEMBER", "u2", "3", "WITHSCORES"],
        &["ZRANDMEMBER", "u2", "0"],
        &["ZRANDMEMBER", "u2", "x"],
        &["ZRANDMEMBER", "u2", "1", "BOGUS"],
        &["ZRANDMEMBER", "nokey"],
        &["ZRANDMEMBER", "nokey", "3"],
        &["ZADD", "one", "1", "only"],
        &["ZRANDMEMBER", "one"],
        &["ZRANDMEMBER", "one", "-3"],
        // Counts whose reply could not be built are refused, not attempted.
        &["ZRANDMEMBER", "one", "-9223372036854770000", "WITHSCORES"],
        &["ZRANDMEMBER", "one", "-9223372036854775808"],
        // Arity.
        &["ZADD", "z"],
        &["ZRANGE", "z", "0"],
        &["ZRANK", "z"],
        &["ZCARD"],
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

/// ZSCAN of a sorted set past the size Redis answers in one page, with scores that differ:
/// every member comes back once, with its score.
#[test]
fn zscan_pages_through_a_large_sorted_set() {
    let dir = tempfile::tempdir().expect("tempdir");
    let srv = Server::start(dir.path(), &[]);
    let mut c = srv.conn();
    let fill = "for i = 1, 1000 do redis.call('ZADD', KEYS[1], i, 'm' .. i) end return 1";
    assert_eq!(c.cmd(&["EVAL", fill, "1", "z"]), R::Int(1));
    let (mut cursor, mut seen) = ("0".to_string(), std::collections::BTreeMap::new());
    loop {
        let R::Array(Some(reply)) = c.cmd(&["ZSCAN", "z", &cursor, "COUNT", "37"]) else { panic!("ZSCAN") };
        let (R::Bulk(Some(next)), R::Array(Some(items))) = (&reply[0], &reply[1]) else { panic!("{reply:?}") };
        for pair in items.chunks(2) {
            let (R::Bulk(Some(m)), R::Bulk(Some(s))) = (&pair[0], &pair[1]) else { panic!("{pair:?}") };
            assert!(seen.insert(m.clone(), s.clone()).is_none(), "{m:?} twice");
        }
        cursor = String::from_utf8(next.clone()).unwrap();
        if cursor == "0" {
            break;
        }
    }
    assert_eq!(seen.len(), 1000);
    assert_eq!(seen.get(b"m7".as_slice()), Some(&b"7".to_vec()));
}

/// What a subscriber and a publisher see, in RESP2 and RESP3, on one server.
fn pubsub_transcript(port: u16) -> Vec<R> {
    let (mut sub, mut publ, mut sub3) = (Resp::connect(port), Resp::connect(port), Resp::connect(port));
    let mut seen = Vec::new();
    let read = |c: &mut Resp, n: usize, seen: &mut Vec<R>| {
        for _ in 0..n {
            seen.push(c.read().expect("a reply"));
        }
    };
    sub.send(&[b"SUBSCRIBE", b"news", b"sport"]);
    read(&mut sub, 2, &mut seen);
    sub.send(&[b"PSUBSCRIBE", b"n*"]);
    read(&mut sub, 1, &mut seen);
    let hello = sub3.cmd(&["HELLO", "3"]);
    seen.push(if matches!(hello, R::Map(_)) { R::Null } else { hello });
    sub3.send(&[b"SUBSCRIBE", b"news"]);
    read(&mut sub3, 1, &mut seen);
    seen.push(publ.cmd(&["PUBLISH", "news", "hello"]));
    read(&mut sub, 2, &mut seen);
    read(&mut sub3, 1, &mut seen);
    seen.push(publ.cmd(&["PUBLISH", "sport", "goal"]));
    read(&mut sub, 1, &mut seen);
    seen.push(publ.cmd(&["PUBLISH", "nothing-here", "x"]));
    seen.push(publ.cmd(&["PUBLISH", "other", "x"]));
    // Channels come in no defined order.
    seen.push(normalize("keys", publ.cmd(&["PUBSUB", "CHANNELS"])));
    seen.push(publ.cmd(&["PUBSUB", "CHANNELS", "s*"]));
    seen.push(publ.cmd(&["PUBSUB", "NUMSUB", "news", "sport", "none"]));
    seen.push(publ.cmd(&["PUBSUB", "NUMPAT"]));
    seen.push(publ.cmd(&["PUBSUB", "BOGUS"]));
    seen.push(sub.cmd(&["GET", "k"]));
    seen.push(sub.cmd(&["PING"]));
    seen.push(sub3.cmd(&["SET", "k", "v"]));
    seen.push(sub3.cmd(&["PING"]));
    sub.send(&[b"UNSUBSCRIBE", b"sport"]);
    read(&mut sub, 1, &mut seen);
    sub.send(&[b"PUNSUBSCRIBE"]);
    read(&mut sub, 1, &mut seen);
    sub.send(&[b"UNSUBSCRIBE"]);
    read(&mut sub, 1, &mut seen);
    sub.send(&[b"UNSUBSCRIBE"]);
    read(&mut sub, 1, &mut seen);
    seen.push(sub.cmd(&["GET", "k"]));
    seen.push(publ.cmd(&["PUBSUB", "NUMSUB", "news"]));
    seen
}

#[test]
fn pubsub_matches_redis() {
    assert!(have("redis-server"), "install redis-server (scripts/test.sh does)");
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let srv = Server::start(dir.path(), &[]);
    let (want, got) = (pubsub_transcript(redis.port), pubsub_transcript(srv.resp));
    for (i, (w, g)) in want.iter().zip(&got).enumerate() {
        let name = if matches!(w, R::Err(_)) { "err" } else { "" };
        assert_eq!(normalize(name, g.clone()), normalize(name, w.clone()), "reply {i}: redis {w:?}, halyard {g:?}");
    }
    assert_eq!(got.len(), want.len());
}

/// The keyspace notifications a pattern subscriber receives for a run of writes, up to a
/// message published after them.
fn notification_transcript(port: u16) -> Vec<R> {
    let (mut sub, mut c) = (Resp::connect(port), Resp::connect(port));
    let mut seen = vec![c.cmd(&["CONFIG", "SET", "notify-keyspace-events", "KEAn"])];
    sub.send(&[b"PSUBSCRIBE", b"__key*"]);
    seen.push(sub.read().expect("psubscribe"));
    c.cmd(&["PSETEX", "gone", "50", "v"]);
    std::thread::sleep(std::time::Duration::from_millis(400));
    let writes: &[&[&str]] = &[
        &["SET", "foo", "bar"],
        &["SET", "foo", "baz", "EX", "100"],
        &["SET", "foo", "baz", "NX"],
        &["LPUSH", "l", "a", "b"],
        &["RPOP", "l"],
        &["LPOP", "nolist"],
        &["SADD", "s", "a"],
        &["SREM", "s", "x"],
        &["HSET", "h", "n", "1"],
        &["HINCRBY", "h", "n", "2"],
        &["ZADD", "z", "1", "a"],
        &["ZREM", "z", "b"],
        &["INCRBY", "n", "5"],
        &["EXPIRE", "h", "100"],
        &["PERSIST", "h"],
        &["RENAME", "h", "h2"],
        &["DEL", "foo", "nokey"],
        &["XADD", "st", "1-1", "f", "v"],
        &["XGROUP", "CREATE", "ms", "g", "$", "MKSTREAM"],
        &["XGROUP", "CREATECONSUMER", "ms", "g", "Bob"],
        &["XADD", "ms", "1-1", "f", "A"],
        &["XREADGROUP", "GROUP", "g", "Alice", "STREAMS", "ms", ">"],
        &["XCLAIM", "ms", "g", "Mike", "0", "1-1", "FORCE"],
        &["XGROUP", "DELCONSUMER", "ms", "g", "Lee"],
        &["XAUTOCLAIM", "ms", "g", "Bob", "0", "1-1"],
        &["XGROUP", "DELCONSUMER", "ms", "g", "Bob"],
        &["XGROUP", "DESTROY", "ms", "g"],
    ];
    for w in writes {
        c.cmd(w);
    }
    c.cmd(&["PUBLISH", "__key_end", "end"]);
    loop {
        let m = sub.read().expect("a notification");
        let end = matches!(&m, R::Array(Some(items)) if items.get(2) == Some(&bulk("__key_end")));
        seen.push(m);
        if end {
            break seen;
        }
    }
}

#[test]
fn keyspace_notifications_match_redis() {
    assert!(have("redis-server"), "install redis-server (scripts/test.sh does)");
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let srv = Server::start(dir.path(), &[]);
    let text = |rs: Vec<R>| -> Vec<String> {
        rs.into_iter()
            .map(|r| match r {
                R::Array(Some(items)) => items
                    .iter()
                    .map(|i| match i {
                        R::Bulk(Some(b)) => String::from_utf8_lossy(b).into_owned(),
                        other => format!("{other:?}"),
                    })
                    .collect::<Vec<_>>()
                    .join(" "),
                other => format!("{other:?}"),
            })
            .collect()
    };
    let (want, got) = (text(notification_transcript(redis.port)), text(notification_transcript(srv.resp)));
    assert_eq!(got, want);
}

/// CONFIG GET and SET of the parameters Halyard has, OBJECT ENCODING on both sides of Redis
/// 7.0's thresholds, OBJECT's other subcommands and DEBUG SLEEP.
#[test]
fn introspection() {
    let fill = "for i = 1, tonumber(ARGV[1]) do redis.call(ARGV[2], KEYS[1], ARGV[3] .. i, ARGV[4]) end return 1";
    let fill_set = "for i = 1, tonumber(ARGV[1]) do redis.call('SADD', KEYS[1], ARGV[2] .. i) end return 1";
    let long64 = "x".repeat(64);
    let long65 = "x".repeat(65);
    let s44 = "s".repeat(44);
    let s45 = "s".repeat(45);
    same_as_redis(&[
        &["CONFIG", "GET", "databases"],
        &["CONFIG", "GET", "maxmemory*"],
        &["CONFIG", "GET", "timeout", "appendonly", "save"],
        &["CONFIG", "GET", "lua-time-limit", "busy-reply-threshold"],
        &["CONFIG", "GET", "notify-keyspace-events"],
        &["CONFIG", "SET", "timeout", "30", "busy-reply-threshold", "200"],
        &["CONFIG", "GET", "timeout", "lua-time-limit"],
        &["CONFIG", "SET", "timeout", "0", "lua-time-limit", "5000"],
        &["CONFIG", "SET", "timeout", "x"],
        &["CONFIG", "SET", "timeout", "1", "timeout", "2"],
        &["CONFIG", "SET", "databases", "3"],
        &["CONFIG", "SET", "nosuch", "1"],
        &["CONFIG", "SET", "maxmemory", "0"],
        &["CONFIG", "SET", "maxmemory-policy", "noeviction"],
        &["CONFIG", "SET", "save", ""],
        &["CONFIG", "SET", "notify-keyspace-events", "KEA"],
        &["CONFIG", "GET", "notify-keyspace-events"],
        &["CONFIG", "SET", "notify-keyspace-events", "Elg"],
        &["CONFIG", "GET", "notify-keyspace-events"],
        &["CONFIG", "SET", "notify-keyspace-events", "Q"],
        &["CONFIG", "SET", "notify-keyspace-events", ""],
        &["CONFIG", "SET", "timeout"],
        &["CONFIG", "GET"],
        &["CONFIG", "RESETSTAT"],
        &["SET", "s", "123"],
        &["OBJECT", "ENCODING", "s"],
        &["SET", "s", "-9223372036854775808"],
        &["OBJECT", "ENCODING", "s"],
        &["SET", "s", "9223372036854775808"],
        &["OBJECT", "ENCODING", "s"],
        &["SET", "s", "0123"],
        &["OBJECT", "ENCODING", "s"],
        &["SET", "s", &s44],
        &["OBJECT", "ENCODING", "s"],
        &["SET", "s", &s45],
        &["OBJECT", "ENCODING", "s"],
        &["OBJECT", "ENCODING", "nokey"],
        &["OBJECT", "FREQ", "s"],
        &["OBJECT", "FREQ", "nokey"],
        &["OBJECT", "IDLETIME", "nokey"],
        &["OBJECT", "REFCOUNT", "s"],
        &["OBJECT", "HELP"],
        &["OBJECT", "BOGUS", "s"],
        &["OBJECT", "ENCODING"],
        &["RPUSH", "l", "a"],
        &["OBJECT", "ENCODING", "l"],
        &["CONFIG", "GET", "*-max-*-entries", "*-max-listpack-value"],
        &["EVAL", fill, "1", "h512", "512", "HSET", "f", "v"],
        &["OBJECT", "ENCODING", "h512"],
        &["EVAL", fill, "1", "h513", "513", "HSET", "f", "v"],
        &["OBJECT", "ENCODING", "h513"],
        &["HSET", "hv", "f", &long64],
        &["OBJECT", "ENCODING", "hv"],
        &["HSET", "hw", "f", &long65],
        &["OBJECT", "ENCODING", "hw"],
        &["HSET", "hf", &long65, "v"],
        &["OBJECT", "ENCODING", "hf"],
        &["EVAL", fill_set, "1", "s512", "512", ""],
        &["OBJECT", "ENCODING", "s512"],
        &["EVAL", fill_set, "1", "s513", "513", ""],
        &["OBJECT", "ENCODING", "s513"],
        &["SADD", "sx", "1", "x"],
        &["OBJECT", "ENCODING", "sx"],
        &[
            "EVAL",
            "for i = 1, tonumber(ARGV[1]) do redis.call('ZADD', KEYS[1], i, 'm' .. i) end return 1",
            "1",
            "z128",
            "128",
        ],
        &["OBJECT", "ENCODING", "z128"],
        &[
            "EVAL",
            "for i = 1, tonumber(ARGV[1]) do redis.call('ZADD', KEYS[1], i, 'm' .. i) end return 1",
            "1",
            "z129",
            "129",
        ],
        &["OBJECT", "ENCODING", "z129"],
        &["ZADD", "zm", "1", &long64],
        &["OBJECT", "ENCODING", "zm"],
        &["ZADD", "zn", "1", &long65],
        &["OBJECT", "ENCODING", "zn"],
        &["DEBUG", "SLEEP", "0"],
        &["DEBUG", "SET-ACTIVE-EXPIRE", "1"],
        &["DEBUG"],
    ]);
}

/// Strings past what one engine record holds (Redis allows 512 MB): set, read, appended to,
/// ranged, expired, renamed and replaced like any other, side by side with redis-server.
#[test]
fn long_strings() {
    let big = "abcd".repeat(1_000_000);
    let bigger = "x".repeat(3 << 20);
    same_as_redis(&[
        &["SET", "big", &big],
        &["STRLEN", "big"],
        &["GETRANGE", "big", "3999990", "-1"],
        &["APPEND", "big", &bigger],
        &["STRLEN", "big"],
        &["GETRANGE", "big", "3999998", "4000001"],
        &["SETRANGE", "big", "1", "ZZ"],
        &["GETRANGE", "big", "0", "4"],
        &["EXPIRE", "big", "100"],
        &["TTL", "big"],
        &["RENAME", "big", "big2"],
        &["STRLEN", "big2"],
        &["TTL", "big2"],
        &["TYPE", "big2"],
        &["SET", "big2", "small"],
        &["GET", "big2"],
        &["SET", "big3", &bigger],
        &["HSET", "big3", "f", "v"],
        &["DEL", "big3"],
        &["HSET", "big3", "f", "v"],
        &["HGETALL", "big3"],
        &["EXISTS", "big", "big2", "big3"],
        &["DBSIZE"],
    ]);
    let dir = tempfile::tempdir().expect("tempdir");
    let srv = Server::start(dir.path(), &[]);
    let mut c = srv.conn();
    assert_eq!(c.cmd(&["SET", "b", &big]), ok());
    assert_eq!(c.cmd(&["GET", "b"]), bulk(&big));
}

#[test]
fn streams() {
    same_as_redis(&[
        &["XADD", "s", "1-1", "f", "v"],
        &["XADD", "s", "1-1", "f", "v"],
        &["XADD", "s", "0-0", "f", "v"],
        &["XADD", "s", "1-*", "a", "b", "c", "d"],
        &["XADD", "s", "5", "x", "y"],
        &["XADD", "s", "bad", "x", "y"],
        &["XADD", "s", "6-0", "x"],
        &["XLEN", "s"],
        &["XLEN", "nos"],
        &["XRANGE", "s", "-", "+"],
        &["XRANGE", "s", "1", "1"],
        &["XRANGE", "s", "(1-1", "+"],
        &["XRANGE", "s", "-", "+", "COUNT", "2"],
        &["XRANGE", "s", "-", "+", "COUNT", "0"],
        &["XRANGE", "s", "x", "+"],
        &["XREVRANGE", "s", "+", "-"],
        &["XREVRANGE", "s", "+", "-", "COUNT", "1"],
        &["XREVRANGE", "s", "5", "1-2"],
        &["XRANGE", "nos", "-", "+"],
        &["XDEL", "s", "1-2", "9-9"],
        &["XLEN", "s"],
        &["XADD", "s", "MAXLEN", "2", "7-0", "k", "v"],
        &["XRANGE", "s", "-", "+"],
        &["XADD", "s", "MAXLEN", "=", "5", "8-0", "k", "v"],
        &["XTRIM", "s", "MINID", "8"],
        &["XRANGE", "s", "-", "+"],
        &["XTRIM", "s", "MAXLEN", "0"],
        &["XLEN", "s"],
        &["EXISTS", "s"],
        &["TYPE", "s"],
        &["XADD", "s", "8-0", "k", "v"],
        &["XADD", "nos", "NOMKSTREAM", "*", "k", "v"],
        &["EXISTS", "nos"],
        &["SET", "str", "v"],
        &["XADD", "str", "*", "k", "v"],
        &["XLEN", "str"],
        &["DEL", "s"],
        &["TYPE", "s"],
    ]);
}

/// SPOP and SRANDMEMBER of a few members of a large set pick distinct members without reading
/// the whole set; the set keeps count.
#[test]
fn random_picks_from_a_large_set() {
    let dir = tempfile::tempdir().expect("tempdir");
    let srv = Server::start(dir.path(), &[]);
    let mut c = srv.conn();
    let fill = "for i = 1, 1000 do redis.call('SADD', KEYS[1], 'm' .. i) end return 1";
    assert_eq!(c.cmd(&["EVAL", fill, "1", "s"]), R::Int(1));
    let mut popped = std::collections::BTreeSet::new();
    for _ in 0..20 {
        let R::Array(Some(v)) = c.cmd(&["SPOP", "s", "5"]) else { panic!("SPOP") };
        assert_eq!(v.len(), 5);
        for m in v {
            assert!(popped.insert(format!("{m:?}")), "{m:?} popped twice");
        }
    }
    assert_eq!(c.cmd(&["SCARD", "s"]), R::Int(900));
    let R::Bulk(Some(one)) = c.cmd(&["SPOP", "s"]) else { panic!("SPOP one") };
    assert_eq!(c.cmd(&["SISMEMBER", "s", std::str::from_utf8(&one).unwrap()]), R::Int(0));
    let R::Array(Some(v)) = c.cmd(&["SRANDMEMBER", "s", "3"]) else { panic!("SRANDMEMBER") };
    assert_eq!(v.len(), 3);
    for m in v {
        let R::Bulk(Some(m)) = m else { panic!("{m:?}") };
        assert_eq!(c.cmd(&["SISMEMBER", "s", std::str::from_utf8(&m).unwrap()]), R::Int(1));
    }
    assert_eq!(c.cmd(&["SCARD", "s"]), R::Int(899));
}

#[test]
fn multi_key_pops_intercard_memory_and_client_reply() {
    same_as_redis(&[
        &["RPUSH", "l2", "a", "b", "c"],
        &["LMPOP", "2", "l1", "l2", "LEFT"],
        &["LMPOP", "2", "l1", "l2", "RIGHT", "COUNT", "5"],
        &["LMPOP", "1", "l2", "LEFT"],
        &["LMPOP", "0", "l2", "LEFT"],
        &["LMPOP", "1", "l2", "UP"],
        &["LMPOP", "1", "l2", "LEFT", "COUNT", "0"],
        &["RPUSH", "l3", "x"],
        &["BLMPOP", "0.01", "2", "l1", "l3", "LEFT", "COUNT", "2"],
        &["BLMPOP", "0.01", "1", "l1", "LEFT"],
        &["BLMPOP", "-1", "1", "l1", "LEFT"],
        &["ZADD", "za", "1", "a", "2", "b", "3", "c"],
        &["ZADD", "zb", "1", "b", "2", "c", "3", "d"],
        &["SADD", "sc", "c", "b"],
        &["ZINTERCARD", "2", "za", "zb"],
        &["ZINTERCARD", "3", "za", "zb", "sc"],
        &["ZINTERCARD", "2", "za", "zb", "LIMIT", "1"],
        &["ZINTERCARD", "3", "za", "zb"],
        &["ZINTERCARD", "1", "za", "LIMIT", "a"],
        &["ZINTERCARD", "2", "za", "nokey"],
        &["ZINTERCARD", "0", "za"],
        &["ZINTERCARD", "3", "za"],
        &["ZINTERCARD", "1", "za", "LIMIT", "-1"],
        &["ZMPOP", "2", "nokey", "za", "MIN"],
        &["ZMPOP", "1", "zb", "MAX", "COUNT", "5"],
        &["ZMPOP", "1", "zb", "MAX"],
        &["ZMPOP", "1", "za", "SIDEWAYS"],
        &["ZMPOP", "0", "za", "MIN"],
        &["BZMPOP", "0.01", "1", "zb", "MIN"],
        &["BZMPOP", "0", "2", "zb", "za", "MAX", "COUNT", "1"],
        &["MEMORY", "USAGE", "nokey"],
        &["CLIENT", "REPLY", "ON"],
        &["CLIENT", "REPLY", "BOGUS"],
    ]);
    let dir = tempfile::tempdir().expect("tempdir");
    let srv = Server::start(dir.path(), &[]);
    let mut c = srv.conn();
    assert!(matches!(c.cmd(&["SET", "k", "v"]), R::Simple(_)));
    assert!(matches!(c.cmd(&["MEMORY", "USAGE", "k"]), R::Int(n) if n > 0));
    c.send(&[b"CLIENT", b"REPLY", b"OFF"]);
    c.send(&[b"SET", b"k", b"off"]);
    c.send(&[b"CLIENT", b"REPLY", b"SKIP"]);
    c.send(&[b"SET", b"k", b"skipped"]);
    c.send(&[b"CLIENT", b"REPLY", b"ON"]);
    assert_eq!(c.read(), Some(ok()), "the only reply is CLIENT REPLY ON's");
    assert_eq!(c.cmd(&["GET", "k"]), bulk("skipped"));
    // Subscription confirmations and messages are pushes: CLIENT REPLY OFF holds none back.
    let mut sub = srv.conn();
    sub.send(&[b"CLIENT", b"REPLY", b"OFF"]);
    sub.send(&[b"SUBSCRIBE", b"ch"]);
    assert!(matches!(sub.read(), Some(R::Array(Some(v))) if v.len() == 3), "the confirmation");
    assert_eq!(c.cmd(&["PUBLISH", "ch", "m"]), R::Int(1));
    assert_eq!(sub.read(), Some(R::Array(Some(vec![bulk("message"), bulk("ch"), bulk("m")]))));
}

#[test]
fn sort() {
    same_as_redis(&[
        &["RPUSH", "l", "3", "1", "2", "10"],
        &["SORT", "l"],
        &["SORT", "l", "DESC"],
        &["SORT", "l", "ALPHA"],
        &["SORT", "l", "LIMIT", "1", "2"],
        &["SORT", "l", "LIMIT", "1", "-1"],
        &["SORT", "l", "BY", "nosort"],
        &["MSET", "w_3", "30", "w_1", "10", "w_2", "5", "w_10", "1"],
        &["SORT", "l", "BY", "w_*"],
        &["SORT", "l", "BY", "w_*", "GET", "#", "GET", "w_*"],
        &["HSET", "h_1", "f", "z"],
        &["SORT", "l", "GET", "h_*->f", "ALPHA"],
        &["SORT", "l", "STORE", "dst"],
        &["LRANGE", "dst", "0", "-1"],
        &["SORT", "nolist", "STORE", "dst"],
        &["EXISTS", "dst"],
        &["SADD", "s", "b", "a", "c"],
        &["SORT", "s", "ALPHA"],
        &["SORT", "s"],
        &["ZADD", "z", "1", "9", "2", "8"],
        &["SORT", "z"],
        &["SET", "str", "x"],
        &["SORT", "str"],
        &["SORT", "l", "BOGUS"],
        &["SORT_RO", "l", "DESC"],
        &["SORT_RO", "l", "STORE", "x"],
    ]);
}

#[test]
fn lcs() {
    let rna1 = "CACCTTCCCAGGTAACAAACCAACCAACTTTCGATCTCTTGTAGATCTGTTCTCTAAACGAACTTTAAAATCTGTGTGGCTGTCACTCGGCTGCATGCTTAGTGCACTCACGCAGTATAATTAATAACTAATTACTGTCGTTGACAGGACACGAGTAACTCGTCTATCTTCTGCAGGCTGCTTACGGTTTCGTCCGTGTTGCAGCCGATCATCAGCACATCTAGGTTTCGTCCGGGTGTGACCGAAAGGTAAGATGGAGAGCCTTGTCCCTGGTTTCAACGAGAAAACACACGTCCAACTCAGTTTGCCTGTTTTACAGGTTCGCGACGTGCTCGTACGTGGCTTTGGAGACTCCGTGGAGGAGGTCTTATCAGAGGCACGTCAACATCTTAAAGATGGCACTTGTGGCTTAGTAGAAGTTGAAAAAGGCGTTTTGCCTCAACTTGAACAGCCCTATGTGTTCATCAAACGTTCGGATGCTCGAACTGCACCTCATGGTCATGTTATGGTTGAGCTGGTAGCAGAACTCGAAGGCATTCAGTACGGTCGTAGTGGTGAGACACTTGGTGTCCTTGTCCCTCATGTGGGCGAAATACCAGTGGCTTACCGCAAGGTTCTTCTTCGTAAGAACGGTAATAAAGGAGCTGGTGGCCATAGTTACGGCGCCGATCTAAAGTCATTTGACTTAGGCGACGAGCTTGGCACTGATCCTTATGAAGATTTTCAAGAAAACTGGAACACTAAACATAGCAGTGGTGTTACCCGTGAACTCATGCGTGAGCTTAACGGAGGGGCATACACTCGCTATGTCGATAACAACTTCTGTGGCCCTGATGGCTACCCTCTTGAGTGCATTAAAGACCTTCTAGCACGTGCTGGTAAAGCTTCATGCACTTTGTCCGAACAACTGGACTTTATTGACACTAAGAGGGGTGTATACTGCTGCCGTGAACATGAGCATGAAATTGCTTGGTACACGGAACGTTCTGAAAAGAGCTATGAATTGCAGACACCTTTTGAAATTAAATTGGCAAAGAAATTTGACACCTTCAATGGGGAATGTCCAAATTTTGTATTTCCCTTAAATTCCATAATCAAGACTATTCAACCAAGGGTTGAAAAGAAAAAGCTTGATGGCTTTATGGGTAGAATTCGATCTGTCTATCCAGTTGCGTCACCAAATGAATGCAACCAAATGTGCCTTTCAACTCTCATGAAGTGTGATCATTGTGGTGAAACTTCATGGCAGACGGGCGATTTTGTTAAAGCCACTTGCGAATTTTGTGGCACTGAGAATTTGACTAAAGAAGGTGCCACTACTTGTGGTTACTTACCCCAAAATGCTGTTGTTAAAATTTATTGTCCAGCATGTCACAATTCAGAAGTAGGACCTGAGCATAGTCTTGCCGAATACCATAATGAATCTGGCTTGAAAACCATTCTTCGTAAGGGTGGTCGCACTATTGCCTTTGGAGGCTGTGTGTTCTCTTATGTTGGTTGCCATAACAAGTGTGCCTATTGGGTTCCACGTGCTAGCGCTAACATAGGTTGTAACCATACAGGTGTTGTTGGAGAAGGTTCCGAAGGTCTTAATGACAACCTTCTTGAAATACTCCAAAAAGAGAAAGTCAACATCAATATTGTTGGTGACTTTAAACTTAATGAAGAGATCGCCATTATTTTGGCATCTTTTTCTGCTTCCACAAGTGCTTTTGTGGAAACTGTGAAAGGTTTGGATTATAAAGCATTCAAACAAATTGTTGAATCCTGCGGTAATTTTAAAGTTACAAAAGGAAAAGCTAAAAAAGGTGCCTGGAATATTGGTGAACAGAAATCAATACTGAGTCCTCTTTATGCATTTGCATCAGAGGCTGCTCGTGTTGTACGATCAATTTTCTCCCGCACTCTTGAAACTGCTCAAAATTCTGTGCGTGTTTTACAGAAGGCCGCTATAACAATACTAGATGGAATTTCACAGTATTCACTGAGACTCATTGATGCTATGATGTTCACATCTGATTTGGCTACTAACAATCTAGTTGTAATGGCCTACATTACAGGTGGTGTTGTTCAGTTGACTTCGCAGTGGCTAACTAACATCTTTGGCACTGTTTATGAAAAACTCAAACCCGTCCTTGATTGGCTTGAAGAGAAGTTTAAGGAAGGTGTAGAGTTTCTTAGAGACGGTTGGGAAATTGTTAAATTTATCTCAACCTGTGCTTGTGAAATTGTCGGTGGACAAATTGTCACCTGTGCAAAGGAAATTAAGGAGAGTGTTCAGACATTCTTTAAGCTTGTAAATAAATTTTTGGCTTTGTGTGCTGACTCTATCATTATTGGTGGAGCTAAACTTAAAGCCTTGAATTTAGGTGAAACATTTGTCACGCACTCAAAGGGATTGTACAGAAAGTGTGTTAAATCCAGAGAAGAAACTGGCCTACTCATGCCTCTAAAAGCCCCAAAAGAAATTATCTTCTTAGAGGGAGAAACACTTCCCACAGAAGTGTTAACAGAGGAAGTTGTCTTGAAAACTGGTGATTTACAACCATTAGAACAACCTACTAGTGAAGCTGTTGAAGCTCCATTGGTTGGTACACCAGTTTGTATTAACGGGCTTATGTTGCTCGAAATCAAAGACACAGAAAAGTACTGTGCCCTTGCACCTAATATGATGGTAACAAACAATACCTTCACACTCAAAGGCGG";
    let rna2 = "ATTAAAGGTTTATACCTTCCCAGGTAACAAACCAACCAACTTTCGATCTCTTGTAGATCTGTTCTCTAAACGAACTTTAAAATCTGTGTGGCTGTCACTCGGCTGCATGCTTAGTGCACTCACGCAGTATAATTAATAACTAATTACTGTCGTTGACAGGACACGAGTAACTCGTCTATCTTCTGCAGGCTGCTTACGGTTTCGTCCGTGTTGCAGCCGATCATCAGCACATCTAGGTTT";
    same_as_redis(&[
        &["MSET", "a", "ohmytext", "b", "mynewtext"],
        &["LCS", "a", "b"],
        &["LCS", "a", "b", "LEN"],
        &["LCS", "a", "b", "IDX"],
        &["LCS", "a", "b", "IDX", "WITHMATCHLEN"],
        &["LCS", "a", "b", "IDX", "MINMATCHLEN", "4", "WITHMATCHLEN"],
        &["LCS", "a", "b", "LEN", "IDX"],
        &["LCS", "a", "nokey"],
        &["LCS", "nokey", "nokey2", "IDX"],
        &["MSET", "r1", rna1, "r2", rna2],
        &["LCS", "r1", "r2", "LEN"],
        &["LCS", "r1", "r2", "IDX", "MINMATCHLEN", "5", "WITHMATCHLEN"],
        &["RPUSH", "l", "x"],
        &["LCS", "a", "l"],
        &["LCS", "a", "b", "BOGUS"],
    ]);
}

/// A blocked pop is not answered by a transaction that pushes to its key and then makes it a
/// string; it is answered by the next push once the key is a list again.
#[test]
fn a_key_that_changes_type_does_not_wake_a_blocked_pop() {
    let dir = tempfile::tempdir().expect("tempdir");
    let srv = Server::start(dir.path(), &[]);
    let (mut blocked, mut c) = (srv.conn(), srv.conn());
    blocked.send(&[b"BLPOP", b"list", b"0"]);
    std::thread::sleep(std::time::Duration::from_millis(100));
    for cmd in [&["MULTI"][..], &["LPUSH", "list", "a"], &["DEL", "list"], &["SET", "list", "foo"]] {
        c.cmd(cmd);
    }
    assert!(matches!(c.cmd(&["EXEC"]), R::Array(Some(_))));
    std::thread::sleep(std::time::Duration::from_millis(100));
    assert_eq!(c.cmd(&["DEL", "list"]), R::Int(1));
    assert_eq!(c.cmd(&["LPUSH", "list", "b"]), R::Int(1));
    assert_eq!(blocked.read(), Some(R::Array(Some(vec![bulk("list"), bulk("b")]))));
}
