//! Redis commands. As in Redis, one table holds every command's name, arity, flags and
//! handler; a request is looked up there (in any case), its argument count checked against
//! the arity, its flags against the session, and then its handler runs.

mod args;
mod connection;
mod expiry;
mod glob;
mod hashes;
mod keys;
mod strings;
mod topology;

pub use glob::glob;
pub(crate) use keys::{range_options, scan_options, ScanOptions};

use crate::resp::Reply;
use crate::state::{Session, Shared};
use args::{lower, wrong_args};
use connection::*;
use expiry::*;
use hashes::*;
use keys::*;
use std::sync::atomic::Ordering::Relaxed;
use strings::*;
use topology::*;

/// Runs a command whose arity and flags were checked; `args` starts with the name.
pub type Handler = fn(&Shared, &mut Session, &[&[u8]]) -> Reply;

/// One entry of the command table.
pub struct Command {
    /// Lower case: the name metrics and error messages use.
    pub name: &'static str,
    /// Redis' convention: positive = exactly this many arguments including the name,
    /// negative = at least that many.
    pub arity: i32,
    /// [`WRITE`], [`READONLY`], [`NO_AUTH`].
    pub flags: u8,
    /// The command itself.
    pub handler: Handler,
}

/// Changes the keyspace (Redis' `write`). With [`READONLY`] this classifies every keyspace
/// command as Redis does; no check reads the two yet (a read-only replica or per-key routing
/// of RESP requests would).
pub const WRITE: u8 = 1;
/// Reads the keyspace and changes nothing (Redis' `readonly`).
pub const READONLY: u8 = 2;
/// Runs before AUTH on a server with a password (Redis' `no-auth`).
pub const NO_AUTH: u8 = 4;

impl Command {
    /// Whether `n` arguments (the name included) fit the arity.
    pub fn arity_ok(&self, n: usize) -> bool {
        let want = self.arity.unsigned_abs() as usize;
        if self.arity < 0 {
            n >= want
        } else {
            n == want
        }
    }
}

#[rustfmt::skip]
pub static COMMANDS: &[Command] = &[
    Command { name: "ping", arity: -1, flags: 0, handler: cmd_ping },
    Command { name: "echo", arity: 2, flags: 0, handler: cmd_echo },
    Command { name: "hello", arity: -1, flags: NO_AUTH, handler: cmd_hello },
    Command { name: "auth", arity: -2, flags: NO_AUTH, handler: cmd_auth },
    Command { name: "select", arity: 2, flags: 0, handler: cmd_select },
    Command { name: "quit", arity: -1, flags: NO_AUTH, handler: cmd_quit },
    Command { name: "command", arity: -1, flags: 0, handler: cmd_command },
    Command { name: "client", arity: -2, flags: 0, handler: cmd_client },
    Command { name: "info", arity: -1, flags: 0, handler: cmd_info },
    Command { name: "config", arity: -2, flags: 0, handler: cmd_config },
    Command { name: "dbsize", arity: 1, flags: READONLY, handler: cmd_dbsize },
    Command { name: "time", arity: 1, flags: 0, handler: cmd_time },
    Command { name: "get", arity: 2, flags: READONLY, handler: cmd_get },
    Command { name: "set", arity: -3, flags: WRITE, handler: cmd_set },
    Command { name: "setnx", arity: 3, flags: WRITE, handler: cmd_setnx },
    Command { name: "getset", arity: 3, flags: WRITE, handler: cmd_getset },
    Command { name: "getdel", arity: 2, flags: WRITE, handler: cmd_getdel },
    Command { name: "mget", arity: -2, flags: READONLY, handler: cmd_mget },
    Command { name: "mset", arity: -3, flags: WRITE, handler: cmd_mset },
    Command { name: "msetnx", arity: -3, flags: WRITE, handler: cmd_msetnx },
    Command { name: "del", arity: -2, flags: WRITE, handler: cmd_del },
    Command { name: "unlink", arity: -2, flags: WRITE, handler: cmd_unlink },
    Command { name: "exists", arity: -2, flags: READONLY, handler: cmd_exists },
    Command { name: "type", arity: 2, flags: READONLY, handler: cmd_type },
    Command { name: "strlen", arity: 2, flags: READONLY, handler: cmd_strlen },
    Command { name: "append", arity: 3, flags: WRITE, handler: cmd_append },
    Command { name: "getrange", arity: 4, flags: READONLY, handler: cmd_getrange },
    Command { name: "incr", arity: 2, flags: WRITE, handler: cmd_incr },
    Command { name: "decr", arity: 2, flags: WRITE, handler: cmd_decr },
    Command { name: "incrby", arity: 3, flags: WRITE, handler: cmd_incrby },
    Command { name: "decrby", arity: 3, flags: WRITE, handler: cmd_decrby },
    Command { name: "setex", arity: 4, flags: WRITE, handler: cmd_setex },
    Command { name: "psetex", arity: 4, flags: WRITE, handler: cmd_psetex },
    Command { name: "getex", arity: -2, flags: WRITE, handler: cmd_getex },
    Command { name: "expire", arity: -3, flags: WRITE, handler: cmd_expire },
    Command { name: "pexpire", arity: -3, flags: WRITE, handler: cmd_pexpire },
    Command { name: "expireat", arity: -3, flags: WRITE, handler: cmd_expireat },
    Command { name: "pexpireat", arity: -3, flags: WRITE, handler: cmd_pexpireat },
    Command { name: "ttl", arity: 2, flags: READONLY, handler: cmd_ttl },
    Command { name: "pttl", arity: 2, flags: READONLY, handler: cmd_pttl },
    Command { name: "expiretime", arity: 2, flags: READONLY, handler: cmd_expiretime },
    Command { name: "pexpiretime", arity: 2, flags: READONLY, handler: cmd_pexpiretime },
    Command { name: "persist", arity: 2, flags: WRITE, handler: cmd_persist },
    Command { name: "scan", arity: -2, flags: READONLY, handler: cmd_scan },
    Command { name: "keys", arity: 2, flags: READONLY, handler: cmd_keys },
    Command { name: "hset", arity: -4, flags: WRITE, handler: cmd_hset },
    Command { name: "hmset", arity: -4, flags: WRITE, handler: cmd_hmset },
    Command { name: "hget", arity: 3, flags: READONLY, handler: cmd_hget },
    Command { name: "hmget", arity: -3, flags: READONLY, handler: cmd_hmget },
    Command { name: "hgetall", arity: 2, flags: READONLY, handler: cmd_hgetall },
    Command { name: "hdel", arity: -3, flags: WRITE, handler: cmd_hdel },
    Command { name: "hexists", arity: 3, flags: READONLY, handler: cmd_hexists },
    Command { name: "hlen", arity: 2, flags: READONLY, handler: cmd_hlen },
    Command { name: "halyard.range", arity: -3, flags: READONLY, handler: cmd_halyard_range },
    Command { name: "halyard.delrange", arity: 3, flags: WRITE, handler: cmd_halyard_delrange },
    Command { name: "halyard.keysafter", arity: -2, flags: READONLY, handler: cmd_halyard_keysafter },
    Command { name: "halyard.backup", arity: 1, flags: 0, handler: cmd_halyard_backup },
    Command { name: "cluster", arity: -2, flags: 0, handler: cmd_cluster },
    Command { name: "readonly", arity: 1, flags: 0, handler: cmd_readonly },
    Command { name: "readwrite", arity: 1, flags: 0, handler: cmd_readonly },
];

/// Every command's name, for the per-command metrics.
pub fn names() -> Vec<&'static str> {
    COMMANDS.iter().map(|c| c.name).collect()
}

/// The command called `name`, in any case.
pub fn lookup(name: &[u8]) -> Option<&'static Command> {
    COMMANDS.iter().find(|c| c.name.as_bytes().eq_ignore_ascii_case(name))
}

/// Runs one command. `sess.quit` is set by QUIT.
pub fn execute(sh: &Shared, sess: &mut Session, args: &[&[u8]]) -> Reply {
    let Some((first, rest)) = args.split_first() else { return Reply::err("ERR empty command") };
    let Some(cmd) = lookup(first) else {
        sh.metrics.unknown_commands.fetch_add(1, Relaxed);
        return unknown(first, rest);
    };
    if !cmd.arity_ok(args.len()) {
        return wrong_args(cmd.name);
    }
    if sh.requirepass.is_some() && !sess.authed && cmd.flags & NO_AUTH == 0 {
        return Reply::err("NOAUTH Authentication required.");
    }
    // Latency is sampled (one command in 16 per connection): reading the clock twice per
    // command cost ~5% of a GET. Counts and errors are exact.
    sess.timed = sess.timed.wrapping_add(1);
    let t0 = sess.timed.is_multiple_of(16).then(std::time::Instant::now);
    let region = match sh.cluster.get().map(|c| cluster_route(c, sess, cmd, args)) {
        Some(Err(reply)) => return reply,
        Some(Ok(r)) => r,
        None => None,
    };
    let reply = (cmd.handler)(sh, sess, args);
    if let Some(r) = region {
        // Everything up to the region's LSN now, this command's writes included. A read waits
        // too: it may have seen writes not acknowledged yet (see `native::Session::routed`).
        if let Ok(h) = sh.ks.db.region(r) {
            sess.writes.push((r, h.lsn()));
        }
    }
    if let Some(st) = sh.metrics.commands.get(cmd.name) {
        st.record(t0.map(|t| t.elapsed().as_micros() as u64), matches!(reply, Reply::Error(_)));
    }
    reply
}

/// The keys a keyspace command reads or writes (Redis' key specs: first, last, step).
pub(crate) fn command_keys<'a>(name: &str, args: &[&'a [u8]]) -> Vec<&'a [u8]> {
    let rest = args.get(1..).unwrap_or_default();
    match name {
        "del" | "unlink" | "exists" | "mget" => rest.to_vec(),
        "mset" | "msetnx" => rest.iter().step_by(2).copied().collect(),
        "scan" | "keys" | "dbsize" | "halyard.range" | "halyard.keysafter" | "halyard.delrange" => Vec::new(),
        _ => rest.first().copied().into_iter().collect(),
    }
}

/// Cluster mode: the region a keyspace command runs on, which this node must serve; a reply
/// saying why not otherwise. A command forwarded here for one region (`sess.region`) must keep
/// to it; the whole-key-space commands run only so confined (`forward` splits them by region).
fn cluster_route(
    c: &crate::cluster::ClusterNode,
    sess: &Session,
    cmd: &Command,
    args: &[&[u8]],
) -> Result<Option<u32>, Reply> {
    if cmd.flags & (WRITE | READONLY) == 0 {
        return Ok(None);
    }
    let keys = command_keys(cmd.name, args);
    if keys.is_empty() {
        return match sess.region {
            Some(r) => Ok(Some(r)),
            None => Err(Reply::err("TRYAGAIN the region map changed while the command was routed; retry")),
        };
    }
    // One lookup per key: its region, and the first key this node does not serve.
    let (mut region, mut unserved) = (sess.region, None);
    for user in &keys {
        let found = c.region_of(&crate::keyspace::key(user));
        if let Some((id, _)) = found {
            if region.is_some_and(|x| x != id) {
                return Err(Reply::err("CROSSSLOT Keys in request don't belong to the same region"));
            }
            region = Some(id);
        }
        if !found.is_some_and(|(_, local)| local) {
            unserved = unserved.or(Some(*user));
        }
    }
    if let Some(user) = unserved {
        // Only the refusal needs the message naming the leader.
        return match c.route(&crate::keyspace::key(user)) {
            crate::cluster::Route::Elsewhere(m) => Err(Reply::err(format!("TRYAGAIN {m}"))),
            crate::cluster::Route::Here(_) => {
                Err(Reply::err("TRYAGAIN the region map changed while the command was routed; retry"))
            }
        };
    }
    if let (true, Some(first)) = (cmd.flags & WRITE != 0, keys.first()) {
        // Every key lies in the one region: its group's size is checked once.
        c.check_write(&crate::keyspace::key(first)).map_err(|m| Reply::err(format!("NOREPLICAS {m}")))?;
    }
    Ok(region)
}

fn unknown(name: &[u8], args: &[&[u8]]) -> Reply {
    let shown: Vec<String> = args.iter().take(8).map(|a| format!("'{}'", String::from_utf8_lossy(a))).collect();
    Reply::err(format!(
        "ERR unknown command '{}', with args beginning with: {}",
        String::from_utf8_lossy(name),
        shown.join(" ")
    ))
}

/// COMMAND [COUNT | INFO name... | DOCS]: each command's name, arity, flags and key positions
/// in Redis' layout, which cluster-mode clients read to find a command's keys.
fn cmd_command(_: &Shared, _: &mut Session, a: &[&[u8]]) -> Reply {
    match a.get(1).map(|s| lower(s)).as_deref() {
        None => Reply::Array(COMMANDS.iter().map(command_info).collect()),
        Some("info") => Reply::Array(
            a.get(2..).unwrap_or_default().iter().map(|n| lookup(n).map_or(Reply::Nil, command_info)).collect(),
        ),
        Some("docs") => Reply::Array(Vec::new()),
        Some("count") => Reply::Int(COMMANDS.len() as i64),
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
    let (first, last, step) = match c.name {
        "del" | "unlink" | "exists" | "mget" => (1, -1, 1),
        "mset" | "msetnx" => (1, -1, 2),
        "scan" | "keys" | "dbsize" | "halyard.range" | "halyard.keysafter" | "halyard.delrange" => (0, 0, 0),
        _ if c.flags & (WRITE | READONLY) != 0 => (1, 1, 1),
        _ => (0, 0, 0),
    };
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
        for c in COMMANDS {
            assert!(seen.insert(c.name), "{} twice", c.name);
            assert_eq!(c.name, c.name.to_ascii_lowercase(), "names are lower case");
            assert_ne!(c.arity, 0, "{}: arity 0 means nothing in Redis' convention", c.name);
            assert!(c.flags & (WRITE | READONLY) != WRITE | READONLY, "{}: write and read-only", c.name);
            assert!(lookup(c.name.to_ascii_uppercase().as_bytes()).is_some_and(|l| l.name == c.name));
        }
        assert!(lookup(b"nosuch").is_none());
    }

    #[test]
    fn arity_follows_redis() {
        let exact = Command { name: "x", arity: 2, flags: 0, handler: cmd_ping };
        let at_least = Command { arity: -2, ..exact };
        assert_eq!([1, 2, 3].map(|n| exact.arity_ok(n)), [false, true, false]);
        assert_eq!([1, 2, 3].map(|n| at_least.arity_ok(n)), [false, true, true]);
    }
}
