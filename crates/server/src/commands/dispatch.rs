//! Running a request: looked up in the command table, checked (arity, authentication), routed
//! in a cluster, queued inside MULTI, and run under the command gate.

use super::args::wrong_args;
use super::pubsub::WHILE_SUBSCRIBED;
use super::table::{lookup, Command, Keys, ATOMIC, NO_AUTH, NO_MULTI, READONLY, WRITE};
use crate::cluster::ClusterNode;
use crate::notify;
use crate::resp::Reply;
use crate::state::{Session, Shared};
use std::sync::atomic::Ordering::Relaxed;

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
/// cluster mode, decides where it runs; the reply to send instead when it may not run. Inside
/// MULTI a command is queued instead (its reply is then QUEUED or why it may not be).
pub fn plan(sh: &Shared, sess: &mut Session, args: &[&[u8]]) -> Result<Plan, Reply> {
    let checked = check(sh, sess, args);
    match checked {
        Ok(p) if sess.multi.is_some() && !IMMEDIATE.contains(&p.cmd.name) => {
            // A command refused while a script is busy fails the transaction, as in Redis.
            let region = if sh.scripts.busy() {
                Err(Reply::err(BUSY))
            } else if p.cmd.flags & NO_MULTI != 0 {
                Err(Reply::err("ERR Command not allowed inside a transaction"))
            } else if p.remote {
                Err(Reply::err("ERR a transaction runs on the node that leads its keys' region: connect there"))
            } else {
                Ok(p.region)
            };
            Err(queue(sess, args, region))
        }
        Err(e) if sess.multi.is_some() => Err(queue(sess, args, Err(e))),
        other => other,
    }
}

fn check(sh: &Shared, sess: &Session, args: &[&[u8]]) -> Result<Plan, Reply> {
    let Some((first, rest)) = args.split_first() else { return Err(Reply::err("ERR empty command")) };
    let Some(cmd) = lookup(first) else {
        sh.metrics.unknown_commands.fetch_add(1, Relaxed);
        sh.metrics.count_error("ERR");
        return Err(unknown(first, rest));
    };
    if !cmd.arity_ok(args.len()) {
        if let Some(st) = sh.metrics.commands.get(cmd.name) {
            st.reject();
        }
        sh.metrics.count_error("ERR");
        return Err(wrong_args(cmd.name));
    }
    if cmd.flags & NO_AUTH == 0 {
        if !sess.authed {
            return Err(Reply::err("NOAUTH Authentication required."));
        }
        super::acl::permitted(sh, sess, cmd, args)?;
        // Scripts (ATOMIC) are judged by their flags when they start, their writes one by one.
        let write = cmd.flags & WRITE != 0 && cmd.flags & ATOMIC == 0;
        if write && sh.settings.min_replicas.load(Relaxed) > 0 && sh.cluster.get().is_none() {
            return Err(Reply::err(NOREPLICAS));
        }
    }
    if Shared::subscribed(sess) && !WHILE_SUBSCRIBED.contains(&cmd.name) {
        return Err(Reply::err(format!(
            "ERR Can't execute '{}': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context",
            cmd.name
        )));
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

/// The reply to a write a single node refuses under `min-replicas-to-write` (it has none).
pub(super) const NOREPLICAS: &str = "NOREPLICAS Not enough good replicas to write.";

/// The reply to a command that may not run while a script runs past its time limit.
pub(super) const BUSY: &str = "BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.";

/// Runs a planned command here. In cluster mode it then remembers, for the reply to wait on,
/// the LSN up to which the region's backups must hold what it wrote or read: the newest
/// version of its keys (`Db::read_bound`), or for a whole-region command the region's LSN.
pub fn run(sh: &Shared, sess: &mut Session, args: &[&[u8]], p: &Plan) -> Reply {
    if p.cmd.flags & ATOMIC != 0 {
        return run_ungated(sh, sess, args, p);
    }
    let _shared = match sh.gate.try_read() {
        Some(g) => g,
        None => match wait_gate(sh) {
            Some(g) => g,
            None => return Reply::err(BUSY),
        },
    };
    run_ungated(sh, sess, args, p)
}

/// Waits, off the runtime's worker, while EXEC or a script runs; None once a script has run
/// past its time limit (the command then answers BUSY and frees its thread for the SCRIPT
/// KILL that may come).
fn wait_gate(sh: &Shared) -> Option<parking_lot::RwLockReadGuard<'_, ()>> {
    wait_for(sh, |g| g.try_read_for(std::time::Duration::from_millis(10)))
}

/// [`wait_gate`] for the exclusive hold EXEC takes.
pub(super) fn wait_gate_exclusive(sh: &Shared) -> Option<parking_lot::RwLockWriteGuard<'_, ()>> {
    wait_for(sh, |g| g.try_write_for(std::time::Duration::from_millis(10)))
}

fn wait_for<'a, G>(sh: &'a Shared, take: impl Fn(&'a parking_lot::RwLock<()>) -> Option<G>) -> Option<G> {
    let mut got = None;
    (crate::native::off_worker_hook().0)(&mut || {
        got = loop {
            if let Some(g) = take(&sh.gate) {
                break Some(g);
            }
            if sh.scripts.busy() {
                break None;
            }
        }
    });
    got
}

/// [`run`] without taking the command gate (EXEC holds it).
pub(super) fn run_ungated(sh: &Shared, sess: &mut Session, args: &[&[u8]], p: &Plan) -> Reply {
    // Latency is sampled (one command in 16 per connection): reading the clock twice per
    // command cost ~5% of a GET. Counts and errors are exact.
    sess.timed = sess.timed.wrapping_add(1);
    let t0 = sess.timed.is_multiple_of(16).then(std::time::Instant::now);
    let before = notify_before(sh, sess, p, args);
    // A write holds its keys' locks while it changes their records; a read holds them shared,
    // so that it sees a list, set or long string whole (linearizable).
    let reads = p.cmd.flags & READONLY != 0 && p.cmd.flags & ATOMIC == 0;
    let read_locks = reads.then(|| sh.db(sess).read_many(&p.cmd.keys.of(args)));
    let reply = (p.cmd.handler)(sh, sess, args);
    drop(read_locks);
    if let Some(before) = before {
        notify_after(sh, sess, p, args, before, &reply);
    }
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
    if let Reply::Error(e) = &reply {
        sh.metrics.count_error(e);
    }
    reply
}

/// A record as a notification compares it: value and expiry (None: no key).
type Record = Option<(Vec<u8>, u64)>;

/// With keyspace notifications on, a write command's keys' records before it runs.
fn notify_before(sh: &Shared, sess: &Session, p: &Plan, args: &[&[u8]]) -> Option<Vec<Record>> {
    if p.cmd.flags & WRITE == 0 || sh.settings.notify.flags() & (notify::KEYSPACE | notify::KEYEVENT) == 0 {
        return None;
    }
    let k = sh.db(sess);
    Some(p.cmd.keys.of(args).iter().map(|u| k.db.get_with_expiry(&k.key(u)).ok().flatten()).collect())
}

/// Publishes the events of a write command that ran (`crate::notify`): for each key it
/// changed, `new` if it created it, its event, and `expire` when SET gave it an expiry; and
/// watches the expiries it set for their `expired` events.
fn notify_after(sh: &Shared, sess: &mut Session, p: &Plan, args: &[&[u8]], before: Vec<Record>, reply: &Reply) {
    let n = &sh.settings.notify;
    let (flags, k, db) = (n.flags(), sh.db(sess), sess.db);
    let users = p.cmd.keys.of(args);
    let did = !matches!(reply, Reply::Error(_) | Reply::Nil | Reply::NilArray | Reply::Int(0))
        && !matches!(reply, Reply::Array(a) if a.is_empty());
    let publish = |class, event: &str, user: &[u8]| {
        for (channel, msg) in notify::messages(flags, db, class, event, user) {
            sh.pubsub.publish(&channel, &msg, super::glob::glob);
        }
    };
    let changes: Vec<(usize, &[u8], Record, Record)> = users
        .iter()
        .zip(before)
        .enumerate()
        .map(|(i, (user, was))| (i, *user, was, k.db.get_with_expiry(&k.key(user)).ok().flatten()))
        .filter(|(_, _, was, now)| now != was || (did && users.len() == 1))
        .collect();
    // As in Redis, a key's creation is announced before what the command did.
    for (_, user, was, now) in &changes {
        if was.is_none() && now.is_some() {
            publish(notify::NEW, "new", user);
        }
    }
    for (event, user) in std::mem::take(&mut sess.events) {
        publish(notify::STREAM, &event, &user);
    }
    for (i, user, was, now) in changes {
        if let Some((class, event)) = notify::event_of(p.cmd.name, i) {
            publish(class, event, user);
            let expires = now.as_ref().map_or(0, |r| r.1);
            if event == "set" && expires > 0 && was.as_ref().map_or(0, |r| r.1) != expires {
                publish(notify::GENERIC, "expire", user);
            }
        }
        match now.map_or(0, |r| r.1) {
            at if at > 0 && flags & notify::EXPIRED != 0 => n.watch_expiry(at, db, user),
            _ => n.forget_expiry(db, user),
        }
    }
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
        Keys::Nodes if !forwarded => return Ok(Plan::elsewhere(cmd, smallvec::SmallVec::new())),
        Keys::Nodes => return Ok(Plan::here(cmd, None)),
        Keys::Whole if !forwarded => return Ok(Plan::elsewhere(cmd, smallvec::SmallVec::new())),
        Keys::Whole | Keys::Region => return sess.region.map(|r| Plan::here(cmd, Some(r))).ok_or_else(changed),
        // OBJECT HELP names no key.
        Keys::Second if args.len() < 3 => return Ok(Plan::here(cmd, None)),
        Keys::First
        | Keys::Second
        | Keys::All
        | Keys::Pairs
        | Keys::Two
        | Keys::AllButLast
        | Keys::Streams
        | Keys::CountAt { .. } => {}
    }
    let users = cmd.keys.of(args);
    if users.is_empty() {
        // EVAL with no declared key runs here: its commands are routed one by one.
        return Ok(Plan::here(cmd, sess.region));
    }
    let (mut region, mut cross, mut missing, mut elsewhere) = (sess.region, false, false, None);
    let mut keys = smallvec::SmallVec::new();
    for user in users {
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

/// Commands that run at once inside MULTI instead of being queued.
const IMMEDIATE: &[&str] = &["multi", "exec", "discard", "watch", "unwatch", "quit", "reset"];

/// Inside MULTI: queues `args` (or answers why it may not run) and says what to reply.
fn queue(sess: &mut Session, args: &[&[u8]], checked: Result<Option<u32>, Reply>) -> Reply {
    let Some(q) = sess.multi.as_mut() else { return Reply::err("ERR no transaction") };
    let region = match checked {
        Ok(r) => r,
        Err(e) => {
            q.dirty = true;
            return e;
        }
    };
    if let (Some(a), Some(b)) = (q.region, region) {
        if a != b {
            q.dirty = true;
            return Reply::err("CROSSSLOT Keys in request don't belong to the same region");
        }
    }
    q.region = q.region.or(region);
    q.commands.push(args.iter().map(|a| a.to_vec()).collect());
    Reply::Simple("QUEUED".into())
}
