//! DEBUG and OBJECT: what of Redis' introspection makes sense over an LSM store.
//!
//! OBJECT ENCODING names the encoding Redis 7.0 would give the value by its thresholds (a
//! string "int", "embstr" or "raw"; a hash "listpack" up to 512 entries of up to 64 bytes, a
//! sorted set up to 128; a set "intset" up to 512 integers; a list "quicklist"). CONFIG GET
//! gives these thresholds; they cannot be changed. Halyard stores every type
//! the same way (records in its LSM tree), so the name is only a guide for clients and tests;
//! it also differs where Redis' encoding depends on history (a string grown by APPEND is "raw"
//! in Redis, a hash shrunk below the thresholds stays a "hashtable").

use super::args::{ks, lower, wrong_args};
use super::table::{Command, Keys, READONLY};
use crate::keyspace::{Keyspace, KsError, Value};
use crate::resp::Reply;
use crate::state::{Session, Shared};

#[rustfmt::skip]
pub(super) static COMMANDS: &[Command] = &[
    Command { name: "debug", arity: -2, flags: 0, keys: Keys::None, handler: cmd_debug },
    Command { name: "object", arity: -2, flags: READONLY, keys: Keys::Second, handler: cmd_object },
    Command { name: "memory", arity: -2, flags: READONLY, keys: Keys::Second, handler: cmd_memory },
];

/// MEMORY USAGE key [SAMPLES n]: the bytes the key's records take in the engine (keys and
/// values, before compression; nil for no key). MEMORY DOCTOR and STATS point to INFO.
fn cmd_memory(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    match (lower(a.get(1).copied().unwrap_or_default()).as_str(), a.get(2..).unwrap_or_default()) {
        ("usage", [key, ..]) => ks(sh.db(sess).footprint(key).map(|n| n.map_or(Reply::Nil, |n| Reply::Int(n as i64)))),
        ("doctor", []) => Reply::bulk("Halyard keeps its data on disk: see INFO memory and the store's metrics."),
        _ => super::args::bad_subcommand("memory", a.get(1).copied().unwrap_or_default(), &["usage", "doctor"]),
    }
}

/// Redis 7.0's `hash-max-listpack-entries`.
pub(super) const HASH_LISTPACK_ENTRIES: u64 = 512;
/// Redis 7.0's `zset-max-listpack-entries`.
pub(super) const ZSET_LISTPACK_ENTRIES: u64 = 128;
/// Redis 7.0's `hash-max-listpack-value` and `zset-max-listpack-value`.
pub(super) const LISTPACK_VALUE: usize = 64;
/// Redis 7.0's `set-max-intset-entries`.
pub(super) const INTSET_ENTRIES: u64 = 512;
/// The longest string Redis keeps embedded in its object header.
const EMBSTR_MAX: usize = 44;

const DEBUG_HELP: &[&str] = &[
    "DEBUG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "SLEEP <seconds>",
    "    Stop the server for <seconds>. Decimals allowed.",
    "SET-ACTIVE-EXPIRE <0|1>",
    "    Accepted and ignored: Halyard hides expired keys as it reads them and drops them in compaction.",
    "HELP",
    "    Prints this help.",
];

fn cmd_debug(_: &Shared, _: &mut Session, a: &[&[u8]]) -> Reply {
    let [_, sub, rest @ ..] = a else { return wrong_args("debug") };
    let sub = lower(sub);
    match (sub.as_str(), rest) {
        ("sleep", [secs]) => {
            // As Redis' strtod: what does not parse sleeps 0 s.
            let secs = std::str::from_utf8(secs).ok().and_then(|s| s.trim().parse::<f64>().ok()).unwrap_or(0.0);
            let d = std::time::Duration::try_from_secs_f64(secs).unwrap_or_default();
            (crate::native::off_worker_hook().0)(&mut || std::thread::sleep(d));
            Reply::ok()
        }
        ("set-active-expire", [_]) => Reply::ok(),
        ("help", []) => Reply::Array(DEBUG_HELP.iter().map(|l| Reply::Simple((*l).into())).collect()),
        ("reload" | "loadaof" | "digest" | "digest-value" | "populate" | "object" | "jmap" | "quicklist-packed-threshold" | "listpack" | "stringmatch-len" | "change-repl-id" | "protocol" | "htstats" | "htstats-key" | "segfault" | "panic" | "restart" | "crash-and-recover", _) => Reply::err(format!(
            "ERR DEBUG {} is not supported: Halyard keeps its data in an LSM store, with no RDB or AOF to reload and no in-memory objects to inspect (it has DEBUG SLEEP and SET-ACTIVE-EXPIRE)",
            sub.to_ascii_uppercase()
        )),
        _ => super::args::bad_subcommand("debug", a.get(1).copied().unwrap_or_default(), &["sleep", "set-active-expire", "help"]),
    }
}

const OBJECT_HELP: &[&str] = &[
    "OBJECT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "ENCODING <key>",
    "    Return the kind of internal representation used in order to store the value",
    "    associated with a <key>.",
    "FREQ <key>",
    "    Return the access frequency index of the <key>. The returned integer is",
    "    proportional to the logarithm of the recent access frequency of the key.",
    "IDLETIME <key>",
    "    Return the idle time of the <key>, that is the approximated number of",
    "    seconds elapsed since the last access to the key.",
    "REFCOUNT <key>",
    "    Return the number of references of the value associated with the specified",
    "    <key>.",
    "HELP",
    "    Prints this help.",
];

fn cmd_object(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    let [_, sub, rest @ ..] = a else { return wrong_args("object") };
    let sub = lower(sub);
    match (sub.as_str(), rest) {
        ("help", []) => Reply::Array(OBJECT_HELP.iter().map(|l| Reply::Simple((*l).into())).collect()),
        ("encoding" | "freq" | "idletime" | "refcount", [key]) => ks(object(sh.db(sess), &sub, key)),
        _ => super::args::bad_subcommand(
            "object",
            a.get(1).copied().unwrap_or_default(),
            &["help", "encoding", "freq", "idletime", "refcount"],
        ),
    }
}

/// OBJECT `sub` of `key`: nil when there is no such key.
fn object(k: &Keyspace, sub: &str, key: &[u8]) -> Result<Reply, KsError> {
    let Some(v) = k.get(key)? else { return Ok(Reply::Nil) };
    Ok(match sub {
        "encoding" => Reply::bulk(encoding(k, key, &v)?),
        "freq" => Reply::err("ERR An LFU maxmemory policy is not selected, access frequency not tracked. Please note that when switching between policies at runtime LRU and LFU data will take some time to adjust."),
        // Halyard tracks no access times (nor shares objects).
        "idletime" => Reply::Int(0),
        _ => Reply::Int(1),
    })
}

/// Whether `s` is what Redis stores as an integer: an i64 written canonically.
fn is_int(s: &[u8]) -> bool {
    s.len() <= 20
        && std::str::from_utf8(s)
            .ok()
            .and_then(|t| t.parse::<i64>().ok())
            .is_some_and(|n| n.to_string().as_bytes() == s)
}

/// The encoding Redis 7.0 gives `v` (see the module's documentation).
fn encoding(k: &Keyspace, key: &[u8], v: &Value) -> Result<&'static str, KsError> {
    let small = |b: &[u8]| b.len() <= LISTPACK_VALUE;
    Ok(match v {
        Value::Str(s) if is_int(s) => "int",
        Value::Str(s) if s.len() <= EMBSTR_MAX => "embstr",
        Value::Str(_) | Value::Chunked(_) => "raw",
        Value::List { .. } => "quicklist",
        Value::Hash(n) if *n <= HASH_LISTPACK_ENTRIES && k.hgetall(key)?.iter().all(|(f, v)| small(f) && small(v)) => {
            "listpack"
        }
        Value::Hash(_) => "hashtable",
        Value::Set(n) if *n <= INTSET_ENTRIES && k.smembers(key)?.iter().all(|m| is_int(m)) => "intset",
        Value::Set(_) => "hashtable",
        Value::ZSet(n) if *n <= ZSET_LISTPACK_ENTRIES && all_small(k.zall(key, false)?)? => "listpack",
        Value::ZSet(_) => "skiplist",
        Value::Stream { .. } => "stream",
    })
}

/// Whether every member of a sorted set fits a listpack entry.
fn all_small(members: crate::keyspace::zset::ZIter) -> Result<bool, KsError> {
    for m in members {
        if m?.0.len() > LISTPACK_VALUE {
            return Ok(false);
        }
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_as_redis_stores_them() {
        assert!(is_int(b"123"));
        assert!(is_int(b"-9223372036854775808"));
        assert!(!is_int(b"0123"));
        assert!(!is_int(b"+1"));
        assert!(!is_int(b"9223372036854775808"));
        assert!(!is_int(b""));
    }
}
