//! Redis commands. As in Redis, one table holds every command's name, arity, flags and
//! handler; a request is looked up there (in any case), its argument count checked against
//! the arity, its flags against the session, and then its handler runs.

mod acl;
mod args;
mod bits;
mod blocking;
mod config;
mod connection;
mod databases;
mod dispatch;
pub mod dump;
mod expiry;
mod glob;
mod hashes;
mod introspection;
mod keys;
mod lcs;
mod lists;
mod multi;
mod numbers;
mod persistence;
mod pubsub;
mod scripting;
mod sets;
mod sort;
mod stream_groups;
mod streams;
mod strings;
mod table;
mod topology;
mod zsets;

pub use dispatch::Plan;
pub use glob::glob;
pub(crate) use keys::{range_options, scan_options, ScanOptions};
pub use table::{Command, Handler, Keys, ATOMIC, NO_AUTH, READONLY, WRITE};

use crate::resp::Reply;
use crate::state::{Session, Shared};
use args::lower;
use connection::*;
use expiry::*;
use hashes::*;
use keys::*;
use strings::*;
use topology::*;

/// The command tables: this module's and one per data type's module.
static TABLES: &[&[Command]] = &[
    COMMANDS,
    databases::COMMANDS,
    lists::COMMANDS,
    blocking::COMMANDS,
    multi::COMMANDS,
    scripting::COMMANDS,
    zsets::COMMANDS,
    sets::COMMANDS,
    hashes::COMMANDS,
    strings::COMMANDS,
    bits::COMMANDS,
    pubsub::COMMANDS,
    streams::COMMANDS,
    stream_groups::COMMANDS,
    dump::COMMANDS,
    sort::COMMANDS,
    lcs::COMMANDS,
    config::COMMANDS,
    introspection::COMMANDS,
    acl::COMMANDS,
    persistence::COMMANDS,
];

#[rustfmt::skip]
static COMMANDS: &[Command] = &[
    Command { name: "ping", arity: -1, flags: 0, keys: Keys::None, handler: cmd_ping },
    Command { name: "echo", arity: 2, flags: 0, keys: Keys::None, handler: cmd_echo },
    Command { name: "hello", arity: -1, flags: NO_AUTH, keys: Keys::None, handler: cmd_hello },
    Command { name: "auth", arity: -2, flags: NO_AUTH, keys: Keys::None, handler: cmd_auth },
    Command { name: "quit", arity: -1, flags: NO_AUTH, keys: Keys::None, handler: cmd_quit },
    Command { name: "command", arity: -1, flags: 0, keys: Keys::None, handler: cmd_command },
    Command { name: "client", arity: -2, flags: 0, keys: Keys::None, handler: cmd_client },
    Command { name: "info", arity: -1, flags: 0, keys: Keys::None, handler: cmd_info },
    Command { name: "dbsize", arity: 1, flags: READONLY, keys: Keys::Whole, handler: cmd_dbsize },
    Command { name: "time", arity: 1, flags: 0, keys: Keys::None, handler: cmd_time },
    Command { name: "get", arity: 2, flags: READONLY, keys: Keys::First, handler: cmd_get },
    Command { name: "set", arity: -3, flags: WRITE, keys: Keys::First, handler: cmd_set },
    Command { name: "setnx", arity: 3, flags: WRITE, keys: Keys::First, handler: cmd_setnx },
    Command { name: "getset", arity: 3, flags: WRITE, keys: Keys::First, handler: cmd_getset },
    Command { name: "getdel", arity: 2, flags: WRITE, keys: Keys::First, handler: cmd_getdel },
    Command { name: "mget", arity: -2, flags: READONLY, keys: Keys::All, handler: cmd_mget },
    Command { name: "mset", arity: -3, flags: WRITE, keys: Keys::Pairs, handler: cmd_mset },
    Command { name: "msetnx", arity: -3, flags: WRITE, keys: Keys::Pairs, handler: cmd_msetnx },
    Command { name: "del", arity: -2, flags: WRITE, keys: Keys::All, handler: cmd_del },
    Command { name: "unlink", arity: -2, flags: WRITE, keys: Keys::All, handler: cmd_unlink },
    Command { name: "exists", arity: -2, flags: READONLY, keys: Keys::All, handler: cmd_exists },
    Command { name: "type", arity: 2, flags: READONLY, keys: Keys::First, handler: cmd_type },
    Command { name: "strlen", arity: 2, flags: READONLY, keys: Keys::First, handler: cmd_strlen },
    Command { name: "append", arity: 3, flags: WRITE, keys: Keys::First, handler: cmd_append },
    Command { name: "getrange", arity: 4, flags: READONLY, keys: Keys::First, handler: cmd_getrange },
    Command { name: "incr", arity: 2, flags: WRITE, keys: Keys::First, handler: cmd_incr },
    Command { name: "decr", arity: 2, flags: WRITE, keys: Keys::First, handler: cmd_decr },
    Command { name: "incrby", arity: 3, flags: WRITE, keys: Keys::First, handler: cmd_incrby },
    Command { name: "decrby", arity: 3, flags: WRITE, keys: Keys::First, handler: cmd_decrby },
    Command { name: "setex", arity: 4, flags: WRITE, keys: Keys::First, handler: cmd_setex },
    Command { name: "psetex", arity: 4, flags: WRITE, keys: Keys::First, handler: cmd_psetex },
    Command { name: "getex", arity: -2, flags: WRITE, keys: Keys::First, handler: cmd_getex },
    Command { name: "expire", arity: -3, flags: WRITE, keys: Keys::First, handler: cmd_expire },
    Command { name: "pexpire", arity: -3, flags: WRITE, keys: Keys::First, handler: cmd_pexpire },
    Command { name: "expireat", arity: -3, flags: WRITE, keys: Keys::First, handler: cmd_expireat },
    Command { name: "pexpireat", arity: -3, flags: WRITE, keys: Keys::First, handler: cmd_pexpireat },
    Command { name: "ttl", arity: 2, flags: READONLY, keys: Keys::First, handler: cmd_ttl },
    Command { name: "pttl", arity: 2, flags: READONLY, keys: Keys::First, handler: cmd_pttl },
    Command { name: "expiretime", arity: 2, flags: READONLY, keys: Keys::First, handler: cmd_expiretime },
    Command { name: "pexpiretime", arity: 2, flags: READONLY, keys: Keys::First, handler: cmd_pexpiretime },
    Command { name: "persist", arity: 2, flags: WRITE, keys: Keys::First, handler: cmd_persist },
    Command { name: "scan", arity: -2, flags: READONLY, keys: Keys::Whole, handler: cmd_scan },
    Command { name: "keys", arity: 2, flags: READONLY, keys: Keys::Whole, handler: cmd_keys },
    Command { name: "hset", arity: -4, flags: WRITE, keys: Keys::First, handler: cmd_hset },
    Command { name: "hmset", arity: -4, flags: WRITE, keys: Keys::First, handler: cmd_hmset },
    Command { name: "hget", arity: 3, flags: READONLY, keys: Keys::First, handler: cmd_hget },
    Command { name: "hmget", arity: -3, flags: READONLY, keys: Keys::First, handler: cmd_hmget },
    Command { name: "hgetall", arity: 2, flags: READONLY, keys: Keys::First, handler: cmd_hgetall },
    Command { name: "hdel", arity: -3, flags: WRITE, keys: Keys::First, handler: cmd_hdel },
    Command { name: "hexists", arity: 3, flags: READONLY, keys: Keys::First, handler: cmd_hexists },
    Command { name: "hlen", arity: 2, flags: READONLY, keys: Keys::First, handler: cmd_hlen },
    Command { name: "halyard.range", arity: -3, flags: READONLY, keys: Keys::Whole, handler: cmd_halyard_range },
    Command { name: "halyard.delrange", arity: 3, flags: WRITE, keys: Keys::Whole, handler: cmd_halyard_delrange },
    Command { name: "halyard.keysafter", arity: -2, flags: READONLY, keys: Keys::Region, handler: cmd_halyard_keysafter },
    Command { name: "halyard.backup", arity: 1, flags: 0, keys: Keys::None, handler: cmd_halyard_backup },
    Command { name: "cluster", arity: -2, flags: 0, keys: Keys::None, handler: cmd_cluster },
    Command { name: "readonly", arity: 1, flags: 0, keys: Keys::None, handler: cmd_readonly },
    Command { name: "readwrite", arity: 1, flags: 0, keys: Keys::None, handler: cmd_readonly },
];

/// The table, assembled.
fn table() {
    table::install(TABLES);
}

/// Every command.
pub fn all() -> impl Iterator<Item = &'static Command> {
    table();
    table::all()
}

/// Every command's name, for the per-command metrics.
pub fn names() -> Vec<&'static str> {
    all().map(|c| c.name).collect()
}

/// The command called `name`, in any case.
pub fn lookup(name: &[u8]) -> Option<&'static Command> {
    table();
    table::lookup(name)
}

/// Looks `args` up, checks and routes it (`dispatch::plan`).
pub fn plan(sh: &Shared, sess: &mut Session, args: &[&[u8]]) -> Result<Plan, Reply> {
    table();
    dispatch::plan(sh, sess, args)
}

/// Runs a planned command here (`dispatch::run`).
pub fn run(sh: &Shared, sess: &mut Session, args: &[&[u8]], p: &Plan) -> Reply {
    dispatch::run(sh, sess, args, p)
}

/// Runs one command. `sess.quit` is set by QUIT.
pub fn execute(sh: &Shared, sess: &mut Session, args: &[&[u8]]) -> Reply {
    table();
    dispatch::execute(sh, sess, args)
}

/// COMMAND [COUNT | INFO name... | DOCS]: each command's name, arity, flags and key positions
/// in Redis' layout, which cluster-mode clients read to find a command's keys.
fn cmd_command(_: &Shared, _: &mut Session, a: &[&[u8]]) -> Reply {
    match a.get(1).map(|s| lower(s)).as_deref() {
        None => Reply::Array(all().map(command_info).collect()),
        Some("info") => Reply::Array(
            a.get(2..).unwrap_or_default().iter().map(|n| lookup(n).map_or(Reply::Nil, command_info)).collect(),
        ),
        Some("docs") => Reply::Array(Vec::new()),
        Some("count") => Reply::Int(all().count() as i64),
        Some(_) => Reply::err("ERR unknown subcommand for 'command'"),
    }
}

/// One command's entry in COMMAND's reply: name, arity, flags, first key, last key, step,
/// ACL categories, tips, key specs, subcommands.
fn command_info(c: &Command) -> Reply {
    let mut flags = Vec::new();
    if c.flags & WRITE != 0 {
        flags.push(Reply::Simple("write".into()));
    }
    if c.flags & READONLY != 0 {
        flags.push(Reply::Simple("readonly".into()));
    }
    let (first, last, step) = c.keys.spec();
    let empty = || Reply::Array(Vec::new());
    Reply::Array(vec![
        Reply::bulk(c.name),
        Reply::Int(i64::from(c.arity)),
        Reply::Array(flags),
        Reply::Int(first),
        Reply::Int(last),
        Reply::Int(step),
        empty(),
        empty(),
        empty(),
        empty(),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_is_consistent() {
        let mut seen = std::collections::HashSet::new();
        for c in all() {
            assert!(seen.insert(c.name), "{} twice", c.name);
            assert_eq!(c.name, c.name.to_ascii_lowercase(), "names are lower case");
            assert_ne!(c.arity, 0, "{}: arity 0 means nothing in Redis' convention", c.name);
            assert!(c.flags & (WRITE | READONLY) != WRITE | READONLY, "{}: write and read-only", c.name);
            assert!(lookup(c.name.to_ascii_uppercase().as_bytes()).is_some_and(|l| l.name == c.name));
            let keyspace = c.flags & (WRITE | READONLY) != 0;
            assert_eq!(
                keyspace,
                !matches!(c.keys, Keys::None | Keys::Nodes),
                "{}: a keyspace command has keys, no other does",
                c.name
            );
        }
        assert!(lookup(b"nosuch").is_none());
    }

    #[test]
    fn arity_follows_redis() {
        let exact = Command { name: "x", arity: 2, flags: 0, keys: Keys::None, handler: cmd_ping };
        let at_least = Command { arity: -2, ..exact };
        assert_eq!([1, 2, 3].map(|n| exact.arity_ok(n)), [false, true, false]);
        assert_eq!([1, 2, 3].map(|n| at_least.arity_ok(n)), [false, true, true]);
    }
}
