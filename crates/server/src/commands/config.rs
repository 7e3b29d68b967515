//! CONFIG GET, SET, RESETSTAT and REWRITE over a table of the Redis parameters Halyard can
//! answer for. Parameters Halyard acts on at run time (`timeout`, `busy-reply-threshold`) are
//! changed by CONFIG SET; those that describe what Halyard does not do (RDB, AOF, eviction)
//! accept only the value that is true of it and explain why otherwise; the rest are immutable.
//! `notify-keyspace-events` turns keyspace notifications on (`crate::notify`).

use super::args::{lower, wrong_args};
use super::glob::glob;
use super::introspection;
use super::table::{Command, Keys};
use crate::resp::Reply;
use crate::state::{Session, Shared};
use std::sync::atomic::Ordering::Relaxed;

#[rustfmt::skip]
pub(super) static COMMANDS: &[Command] = &[
    Command { name: "config", arity: -2, flags: 0, keys: Keys::None, handler: cmd_config },
];

/// Checks a new value and, when `apply`, sets it; Err is why it may not be set.
type Setter = fn(&Shared, &str, bool) -> Result<(), String>;

/// One parameter: its name, its value now, and how CONFIG SET changes it (None: immutable).
struct Param {
    name: &'static str,
    get: fn(&Shared) -> String,
    set: Option<Setter>,
}

const NO_EVICTION: &str = "Halyard keeps its data on disk and evicts nothing";

#[rustfmt::skip]
static PARAMS: &[Param] = &[
    Param { name: "databases", get: |sh| (sh.numbered.len() + 1).to_string(), set: None },
    Param { name: "appendonly", get: |_| "no".into(), set: Some(|_, v, _| only(v, "no", "Halyard has no AOF: every write goes to its store's log (INFO persistence shows when it is synced)")) },
    Param { name: "appendfsync", get: appendfsync, set: None },
    Param { name: "save", get: |_| String::new(), set: Some(|_, v, _| only(v, "", "Halyard takes no RDB snapshots: its store is always on disk (HALYARD.BACKUP copies it)")) },
    Param { name: "dir", get: |sh| sh.settings.dir.get().cloned().unwrap_or_default(), set: None },
    Param { name: "port", get: |sh| sh.settings.port.load(Relaxed).to_string(), set: None },
    Param { name: "maxclients", get: |sh| sh.settings.max_clients.load(Relaxed).to_string(), set: None },
    Param { name: "requirepass", get: |sh| sh.requirepass.clone().unwrap_or_default(), set: None },
    Param { name: "protected-mode", get: |sh| yes_no(sh.protect_resp.load(Relaxed)), set: None },
    Param { name: "maxmemory", get: |_| "0".into(), set: Some(set_maxmemory) },
    Param { name: "maxmemory-policy", get: |_| "noeviction".into(), set: Some(|_, v, _| only(&v.to_ascii_lowercase(), "noeviction", NO_EVICTION)) },
    Param { name: "maxmemory-samples", get: |_| "5".into(), set: Some(|_, v, _| only(v, "5", NO_EVICTION)) },
    Param { name: "maxmemory-eviction-tenacity", get: |_| "10".into(), set: Some(|_, v, _| only(v, "10", NO_EVICTION)) },
    Param { name: "maxmemory-clients", get: |_| "0".into(), set: Some(|_, v, _| only(v, "0", NO_EVICTION)) },
    Param { name: "timeout", get: |sh| sh.settings.timeout.load(Relaxed).to_string(), set: Some(set_timeout) },
    Param { name: "min-replicas-to-write", get: |sh| sh.settings.min_replicas.load(Relaxed).to_string(), set: Some(set_min_replicas) },
    Param { name: "busy-reply-threshold", get: |sh| sh.scripts.limit_ms.load(Relaxed).to_string(), set: Some(set_busy) },
    Param { name: "lua-time-limit", get: |sh| sh.scripts.limit_ms.load(Relaxed).to_string(), set: Some(set_busy) },
    Param { name: "hash-max-listpack-entries", get: |sh| tuned(sh, "hash-max-listpack-entries", introspection::HASH_LISTPACK_ENTRIES as i64), set: Some(|sh, v, apply| set_tuned(sh, "hash-max-listpack-entries", v, apply)) },
    Param { name: "hash-max-listpack-value", get: |sh| tuned(sh, "hash-max-listpack-value", introspection::LISTPACK_VALUE as i64), set: Some(|sh, v, apply| set_tuned(sh, "hash-max-listpack-value", v, apply)) },
    Param { name: "zset-max-listpack-entries", get: |sh| tuned(sh, "zset-max-listpack-entries", introspection::ZSET_LISTPACK_ENTRIES as i64), set: Some(|sh, v, apply| set_tuned(sh, "zset-max-listpack-entries", v, apply)) },
    Param { name: "zset-max-listpack-value", get: |sh| tuned(sh, "zset-max-listpack-value", introspection::LISTPACK_VALUE as i64), set: Some(|sh, v, apply| set_tuned(sh, "zset-max-listpack-value", v, apply)) },
    Param { name: "hash-max-ziplist-entries", get: |sh| tuned(sh, "hash-max-ziplist-entries", introspection::HASH_LISTPACK_ENTRIES as i64), set: Some(|sh, v, apply| set_tuned(sh, "hash-max-ziplist-entries", v, apply)) },
    Param { name: "hash-max-ziplist-value", get: |sh| tuned(sh, "hash-max-ziplist-value", introspection::LISTPACK_VALUE as i64), set: Some(|sh, v, apply| set_tuned(sh, "hash-max-ziplist-value", v, apply)) },
    Param { name: "zset-max-ziplist-entries", get: |sh| tuned(sh, "zset-max-ziplist-entries", introspection::ZSET_LISTPACK_ENTRIES as i64), set: Some(|sh, v, apply| set_tuned(sh, "zset-max-ziplist-entries", v, apply)) },
    Param { name: "zset-max-ziplist-value", get: |sh| tuned(sh, "zset-max-ziplist-value", introspection::LISTPACK_VALUE as i64), set: Some(|sh, v, apply| set_tuned(sh, "zset-max-ziplist-value", v, apply)) },
    Param { name: "set-max-intset-entries", get: |sh| tuned(sh, "set-max-intset-entries", introspection::INTSET_ENTRIES as i64), set: Some(|sh, v, apply| set_tuned(sh, "set-max-intset-entries", v, apply)) },
    Param { name: "list-compress-depth", get: |sh| tuned(sh, "list-compress-depth", 0), set: Some(|sh, v, apply| set_tuned(sh, "list-compress-depth", v, apply)) },
    Param { name: "list-max-listpack-size", get: |sh| tuned(sh, "list-max-listpack-size", -2), set: Some(|sh, v, apply| set_tuned(sh, "list-max-listpack-size", v, apply)) },
    Param { name: "list-max-ziplist-size", get: |sh| tuned(sh, "list-max-ziplist-size", -2), set: Some(|sh, v, apply| set_tuned(sh, "list-max-ziplist-size", v, apply)) },
    Param { name: "notify-keyspace-events", get: |sh| crate::notify::canonical(sh.settings.notify.flags()), set: Some(set_notify) },
];

fn yes_no(b: bool) -> String {
    if b { "yes" } else { "no" }.into()
}

/// Redis' `appendfsync` for the store's sync mode.
fn appendfsync(sh: &Shared) -> String {
    match sh.ks.db.options().sync {
        halyard_engine::SyncMode::Always => "always",
        halyard_engine::SyncMode::Group => "everysec",
        halyard_engine::SyncMode::None => "no",
    }
    .into()
}

/// A parameter whose only value in Halyard is `want`.
fn only(v: &str, want: &str, why: &str) -> Result<(), String> {
    if v == want {
        Ok(())
    } else {
        Err(why.into())
    }
}

/// A non-negative integer as CONFIG SET reads it.
fn uint(v: &str) -> Result<u64, String> {
    let n: i64 = v.parse().map_err(|_| "argument couldn't be parsed into an integer".to_string())?;
    u64::try_from(n)
        .ok()
        .filter(|&n| n <= i32::MAX as u64)
        .ok_or_else(|| "argument must be between 0 and 2147483647 inclusive".into())
}

/// A memory size (`100`, `1kb`, `2mb`, `1gb`, as Redis reads them).
fn memory(v: &str) -> Option<u64> {
    let l = v.to_ascii_lowercase();
    let units = [
        ("gb", 1u64 << 30),
        ("mb", 1 << 20),
        ("kb", 1 << 10),
        ("g", 1_000_000_000),
        ("m", 1_000_000),
        ("k", 1000),
        ("b", 1),
    ];
    let (digits, mul) = units.iter().find_map(|(u, m)| l.strip_suffix(u).map(|d| (d, *m))).unwrap_or((&l, 1));
    digits.parse::<u64>().ok()?.checked_mul(mul)
}

fn set_maxmemory(_: &Shared, v: &str, _: bool) -> Result<(), String> {
    match memory(v) {
        None => Err("argument must be a memory value".into()),
        Some(0) => Ok(()),
        Some(_) => Err(format!("{NO_EVICTION}: maxmemory can only be 0")),
    }
}

/// A Redis encoding threshold: Halyard's layout does not change with it (OBJECT ENCODING
/// answers by Redis's defaults), but tools and test suites set and read it back.
fn tuned(sh: &Shared, name: &str, default: i64) -> String {
    sh.settings.tuning.lock().get(name).copied().unwrap_or(default).to_string()
}

fn set_tuned(sh: &Shared, name: &'static str, v: &str, apply: bool) -> Result<(), String> {
    let n: i64 = v.parse().map_err(|_| "argument couldn't be parsed into an integer".to_string())?;
    if apply {
        sh.settings.tuning.lock().insert(name, n);
    }
    Ok(())
}

fn set_timeout(sh: &Shared, v: &str, apply: bool) -> Result<(), String> {
    let n = uint(v)?;
    if apply {
        sh.settings.timeout.store(n, Relaxed);
    }
    Ok(())
}

fn set_min_replicas(sh: &Shared, v: &str, apply: bool) -> Result<(), String> {
    let n = uint(v)?;
    if sh.cluster.get().is_some() && n > 0 {
        return Err("a cluster node's copies are set by `halyard cluster init --replicas` and `--min-replicas`".into());
    }
    if apply {
        sh.settings.min_replicas.store(n, Relaxed);
    }
    Ok(())
}

fn set_busy(sh: &Shared, v: &str, apply: bool) -> Result<(), String> {
    let n = uint(v)?;
    if apply {
        sh.scripts.limit_ms.store(n, Relaxed);
    }
    Ok(())
}

fn set_notify(sh: &Shared, v: &str, apply: bool) -> Result<(), String> {
    let Some(flags) = crate::notify::parse(v) else {
        return Err("Invalid event class character. Use 'Ag$lshzxeKEtmdn'.".into());
    };
    if apply {
        sh.settings.notify.set_flags(flags);
    }
    Ok(())
}

fn cmd_config(sh: &Shared, _: &mut Session, a: &[&[u8]]) -> Reply {
    let [_, sub, rest @ ..] = a else { return wrong_args("config") };
    match (lower(sub).as_str(), rest) {
        ("get", [_, ..]) => config_get(sh, rest),
        ("set", [_, _, ..]) if rest.len().is_multiple_of(2) => config_set(sh, rest),
        ("resetstat", []) => {
            sh.metrics.reset();
            Reply::ok()
        }
        ("rewrite", []) => Reply::err(
            "ERR CONFIG REWRITE is not supported: Halyard's settings come from its command line and config file; change them there",
        ),
        ("help", []) => Reply::Array(HELP.iter().map(|l| Reply::Simple((*l).into())).collect()),
        _ => super::args::bad_subcommand("config", a.get(1).copied().unwrap_or_default(), &["get", "set", "resetstat", "rewrite", "help"]),
    }
}

const HELP: &[&str] = &[
    "CONFIG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "GET <pattern>",
    "    Return parameters matching the glob-like <pattern> and their values.",
    "SET <directive> <value>",
    "    Set the configuration <directive> to <value>.",
    "RESETSTAT",
    "    Reset statistics reported by the INFO command.",
    "REWRITE",
    "    Not supported by Halyard (its settings come from its command line and config file).",
    "HELP",
    "    Prints this help.",
];

/// CONFIG GET pattern...: the parameters any pattern matches (in any case), as a map.
fn config_get(sh: &Shared, patterns: &[&[u8]]) -> Reply {
    let patterns: Vec<String> = patterns.iter().map(|p| lower(p)).collect();
    Reply::Map(
        PARAMS
            .iter()
            .filter(|p| patterns.iter().any(|pat| glob(pat.as_bytes(), p.name.as_bytes())))
            .map(|p| (Reply::bulk(p.name), Reply::bulk((p.get)(sh))))
            .collect(),
    )
}

/// CONFIG SET name value...: every pair checked before any is set, as Redis does.
fn config_set(sh: &Shared, pairs: &[&[u8]]) -> Reply {
    let failed = |arg: &str, why: &str| {
        Reply::err(format!("ERR CONFIG SET failed (possibly related to argument '{arg}') - {why}"))
    };
    let mut planned: Vec<(&Param, String)> = Vec::new();
    for pair in pairs.chunks_exact(2) {
        let [name, value] = pair else { continue };
        let shown = String::from_utf8_lossy(name);
        let Some(p) = PARAMS.iter().find(|p| p.name.as_bytes().eq_ignore_ascii_case(name)) else {
            return Reply::err(format!("ERR Unknown option or number of arguments for CONFIG SET - '{shown}'"));
        };
        if planned.iter().any(|(q, _)| std::ptr::eq(*q, p)) {
            return failed(&shown, "duplicate parameter");
        }
        let Some(set) = p.set else { return failed(&shown, "can't set immutable config") };
        let value = String::from_utf8_lossy(value).into_owned();
        if let Err(why) = set(sh, &value, false) {
            return failed(&shown, &why);
        }
        planned.push((p, value));
    }
    for (p, value) in planned {
        if let Some(set) = p.set {
            let _ = set(sh, &value, true);
        }
    }
    Reply::ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_values() {
        assert_eq!(memory("0"), Some(0));
        assert_eq!(memory("1kb"), Some(1024));
        assert_eq!(memory("2MB"), Some(2 << 20));
        assert_eq!(memory("3m"), Some(3_000_000));
        assert_eq!(memory("x"), None);
    }
}
