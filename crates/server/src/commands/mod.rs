//! Redis commands. As in Redis, one table holds every command's name, arity, flags and
//! handler; a request is looked up there (in any case), its argument count checked against
//! the arity, its flags against the session, and then its handler runs.

mod args;
mod bits;
mod connection;
mod databases;
mod expiry;
mod glob;
mod hashes;
mod keys;
mod numbers;
mod sets;
mod strings;
mod topology;

pub use glob::glob;
pub(crate) use keys::{range_options, scan_options, ScanOptions};

use crate::cluster::ClusterNode;
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
    /// Where its keys are: what cluster mode routes it by, and what COMMAND reports.
    pub keys: Keys,
    /// The command itself.
    pub handler: Handler,
}

/// The key positions of a command (Redis' key specs: first, last, step), in the one place that
/// routing, forwarding and COMMAND INFO read them from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Keys {
    /// No key (connection and server commands).
    None,
    /// The first argument.
    First,
    /// Every argument.
    All,
    /// Every other argument from the first (MSET's key-value pairs).
    Pairs,
    /// The first two arguments (RENAME, COPY, SMOVE, LMOVE).
    Two,
    /// Every argument but the last (BLPOP's keys before its timeout).
    AllButLast,
    /// A count at argument `at` and that many keys after it, and the first argument too when
    /// `dest` (ZUNIONSTORE dest numkeys key..., ZUNION numkeys key..., EVAL script numkeys key...).
    CountAt {
        /// The count's argument.
        at: u8,
        /// The first argument is a key (a destination).
        dest: bool,
    },
    /// The whole key space: a cluster answers it region by region.
    Whole,
    /// The key space of the region a forwarded command names (cluster-internal).
    Region,
}

impl Keys {
    /// Redis' (first, last, step) for COMMAND.
    fn spec(self) -> (i64, i64, i64) {
        match self {
            Keys::First => (1, 1, 1),
            Keys::All => (1, -1, 1),
            Keys::Pairs => (1, -1, 2),
            Keys::Two => (1, 2, 1),
            Keys::AllButLast => (1, -2, 1),
            Keys::CountAt { dest: true, .. } => (1, 1, 1),
            Keys::None | Keys::Whole | Keys::Region | Keys::CountAt { dest: false, .. } => (0, 0, 0),
        }
    }

    /// The keys of `args` (the command's name first).
    pub fn of<'a>(self, args: &[&'a [u8]]) -> smallvec::SmallVec<[&'a [u8]; 4]> {
        let rest = args.get(1..).unwrap_or_default();
        match self {
            Keys::First => rest.first().copied().into_iter().collect(),
            Keys::All => rest.iter().copied().collect(),
            Keys::Pairs => rest.iter().step_by(2).copied().collect(),
            Keys::Two => rest.iter().take(2).copied().collect(),
            Keys::AllButLast => rest.iter().take(rest.len().saturating_sub(1)).copied().collect(),
            Keys::CountAt { at, dest } => {
                let at = usize::from(at);
                let n = args.get(at).and_then(|n| std::str::from_utf8(n).ok()?.parse::<usize>().ok()).unwrap_or(0);
                let keys = args.get(at + 1..).unwrap_or_default().iter().take(n).copied();
                rest.first().copied().filter(|_| dest).into_iter().chain(keys).collect()
            }
            Keys::None | Keys::Whole | Keys::Region => smallvec::SmallVec::new(),
        }
    }
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

/// The command tables: this module's and one per data type's module.
static TABLES: &[&[Command]] =
    &[COMMANDS, databases::COMMANDS, sets::COMMANDS, hashes::COMMANDS, strings::COMMANDS, bits::COMMANDS];

/// Every command.
pub fn all() -> impl Iterator<Item = &'static Command> {
    TABLES.iter().flat_map(|t| t.iter())
}

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
    Command { name: "config", arity: -2, flags: 0, keys: Keys::None, handler: cmd_config },
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

/// Every command's name, for the per-command metrics.
pub fn names() -> Vec<&'static str> {
    all().map(|c| c.name).collect()
}

/// The command called `name`, in any case.
pub fn lookup(name: &[u8]) -> Option<&'static Command> {
    all().find(|c| c.name.as_bytes().eq_ignore_ascii_case(name))
}

/// One request, looked up, checked and routed: decided once, before it runs.
pub struct Plan {
    /// The command.
    pub cmd: &'static Command,
    /// Cluster mode: answered through other nodes (`forward::run`), not here.
    pub remote: bool,
    /// Cluster mode: the region it runs on here.
    region: Option<u32>,
    /// The engine keys of its keys, encoded once.
    keys: smallvec::SmallVec<[crate::keyspace::EngineKey; 4]>,
}

impl Plan {
    fn here(cmd: &'static Command, region: Option<u32>) -> Plan {
        Plan { cmd, remote: false, region, keys: smallvec::SmallVec::new() }
    }

    fn elsewhere(cmd: &'static Command, keys: smallvec::SmallVec<[crate::keyspace::EngineKey; 4]>) -> Plan {
        Plan { cmd, remote: true, region: None, keys }
    }

    /// Whether it writes.
    pub fn writes(&self) -> bool {
        self.cmd.flags & WRITE != 0
    }
}

/// Looks `args` up in the table, checks its arity and the session's authentication and, in
/// cluster mode, decides where it runs; the reply to send instead when it may not run.
pub fn plan(sh: &Shared, sess: &Session, args: &[&[u8]]) -> Result<Plan, Reply> {
    let Some((first, rest)) = args.split_first() else { return Err(Reply::err("ERR empty command")) };
    let Some(cmd) = lookup(first) else {
        sh.metrics.unknown_commands.fetch_add(1, Relaxed);
        return Err(unknown(first, rest));
    };
    if !cmd.arity_ok(args.len()) {
        return Err(wrong_args(cmd.name));
    }
    if sh.requirepass.is_some() && !sess.authed && cmd.flags & NO_AUTH == 0 {
        return Err(Reply::err("NOAUTH Authentication required."));
    }
    match sh.cluster.get() {
        Some(c) => cluster_plan(c, sess, cmd, args),
        None => Ok(Plan::here(cmd, None)),
    }
}

/// Runs one command. `sess.quit` is set by QUIT.
pub fn execute(sh: &Shared, sess: &mut Session, args: &[&[u8]]) -> Reply {
    match plan(sh, sess, args) {
        Ok(p) if p.remote => Reply::err("TRYAGAIN the command's keys are led by other nodes; retry"),
        Ok(p) => run(sh, sess, args, &p),
        Err(reply) => reply,
    }
}

/// Runs a planned command here. In cluster mode it then remembers, for the reply to wait on,
/// the LSN up to which the region's backups must hold what it wrote or read: the newest
/// version of its keys (`Db::read_bound`), or for a whole-region command the region's LSN.
pub fn run(sh: &Shared, sess: &mut Session, args: &[&[u8]], p: &Plan) -> Reply {
    // Latency is sampled (one command in 16 per connection): reading the clock twice per
    // command cost ~5% of a GET. Counts and errors are exact.
    sess.timed = sess.timed.wrapping_add(1);
    let t0 = sess.timed.is_multiple_of(16).then(std::time::Instant::now);
    let reply = (p.cmd.handler)(sh, sess, args);
    if let Some(r) = p.region {
        let db = &sh.db(sess).db;
        let lsn = if p.keys.is_empty() {
            db.region(r).map(|h| h.lsn()).ok()
        } else {
            p.keys.iter().map(|k| db.read_bound(k)).try_fold(0, |m, b| b.map(|b| m.max(b))).ok()
        };
        if let Some(lsn) = lsn.filter(|&l| l > 0) {
            sess.writes.push((r, lsn));
        }
    }
    if let Some(st) = sh.metrics.commands.get(p.cmd.name) {
        st.record(t0.map(|t| t.elapsed().as_micros() as u64), matches!(reply, Reply::Error(_)));
    }
    reply
}

/// Cluster mode: where a command runs. A keyspace command runs here on the one region its keys
/// lie in, if this node serves it; a command forwarded here for one region (`sess.region`) must
/// keep to it. Otherwise a client's command is answered through other nodes (`remote`): one
/// whose keys another node leads, a read over several regions (split by key), a whole-key-space
/// command (walked region by region). A write over several regions is refused (CROSSSLOT).
fn cluster_plan(c: &ClusterNode, sess: &Session, cmd: &'static Command, args: &[&[u8]]) -> Result<Plan, Reply> {
    let changed = || Reply::err("TRYAGAIN the region map changed while the command was routed; retry");
    let forwarded = sess.span.is_some();
    match cmd.keys {
        Keys::None => return Ok(Plan::here(cmd, None)),
        Keys::Whole if !forwarded => return Ok(Plan::elsewhere(cmd, smallvec::SmallVec::new())),
        Keys::Whole | Keys::Region => return sess.region.map(|r| Plan::here(cmd, Some(r))).ok_or_else(changed),
        Keys::First | Keys::All | Keys::Pairs | Keys::Two | Keys::AllButLast | Keys::CountAt { .. } => {}
    }
    let (mut region, mut cross, mut missing, mut elsewhere) = (sess.region, false, false, None);
    let mut keys = smallvec::SmallVec::new();
    for user in cmd.keys.of(args) {
        let ek = crate::keyspace::key(user);
        match c.locate(&ek) {
            None => missing = true,
            Some(at) => {
                cross |= region.is_some_and(|r| r != at.id);
                region = region.or(Some(at.id));
                if !at.local && elsewhere.is_none() {
                    elsewhere = Some(at);
                }
            }
        }
        keys.push(ek);
    }
    if cross {
        if cmd.flags & WRITE != 0 || forwarded {
            return Err(Reply::err("CROSSSLOT Keys in request don't belong to the same region"));
        }
        return Ok(Plan::elsewhere(cmd, keys));
    }
    if !forwarded && !missing && elsewhere.is_some() {
        return Ok(Plan::elsewhere(cmd, keys));
    }
    if missing {
        return Err(Reply::err("TRYAGAIN no region of the cluster covers this key"));
    }
    if let Some(at) = elsewhere {
        return Err(Reply::err(format!("TRYAGAIN {}", c.refusal(&at))));
    }
    let id = region.ok_or_else(changed)?;
    if cmd.flags & WRITE != 0 {
        c.check_copies(id).map_err(|m| Reply::err(format!("NOREPLICAS {m}")))?;
    }
    Ok(Plan { cmd, remote: false, region: Some(id), keys })
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
            assert_eq!(keyspace, c.keys != Keys::None, "{}: a keyspace command has keys, no other does", c.name);
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
