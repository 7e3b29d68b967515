//! Transactions: MULTI, EXEC, DISCARD, WATCH, UNWATCH, with Redis' semantics.
//!
//! After MULTI a connection's commands are checked (name, arity, authentication and, in a
//! cluster, that every key lies in one region this node leads) and queued; a command that
//! fails those checks is answered with its error and makes EXEC answer EXECABORT. EXEC runs
//! the queue holding the server's command gate exclusively (`Shared::gate`: every other RESP
//! command holds it shared while it runs), so no other client's command runs between the
//! transaction's commands or sees part of their effects. The effects are not one engine batch:
//! a crash during EXEC can keep a prefix of them, as a crash during Redis' EXEC can leave a
//! prefix in its append-only file.
//!
//! WATCH remembers, per key, an upper bound of the LSN of the key's newest version
//! (`Db::read_bound`) and when the key would expire; EXEC aborts (a null array) when a bound
//! moved, which every write to the key does (the record of a key of any type is rewritten by
//! every change), as does a range delete over it (FLUSHDB), or when the key expired meanwhile.
//! A bound can also move without a write to the key (its memtable was flushed): EXEC then
//! aborts though nothing changed, which a WATCH client handles as any conflict, by retrying.

use super::args::wrong_args;
use super::dispatch::{plan, run_ungated, wait_gate_exclusive, BUSY};
use super::table::{Command, Keys, ATOMIC};
use crate::resp::Reply;
use crate::state::{Queue, Session, Shared, Watched};

#[rustfmt::skip]
pub(super) static COMMANDS: &[Command] = &[
    // MULTI and DISCARD touch only the connection: they run while a script is busy.
    Command { name: "multi", arity: 1, flags: ATOMIC, keys: Keys::None, handler: cmd_multi },
    Command { name: "exec", arity: 1, flags: ATOMIC, keys: Keys::None, handler: cmd_exec },
    Command { name: "discard", arity: 1, flags: ATOMIC, keys: Keys::None, handler: cmd_discard },
    Command { name: "watch", arity: -2, flags: 0, keys: Keys::None, handler: cmd_watch },
    Command { name: "unwatch", arity: 1, flags: 0, keys: Keys::None, handler: cmd_unwatch },
];

fn cmd_multi(_: &Shared, sess: &mut Session, _: &[&[u8]]) -> Reply {
    if sess.multi.is_some() {
        return Reply::err("ERR MULTI calls can not be nested");
    }
    sess.multi = Some(Queue::default());
    Reply::ok()
}

fn cmd_discard(_: &Shared, sess: &mut Session, _: &[&[u8]]) -> Reply {
    if sess.multi.take().is_none() {
        return Reply::err("ERR DISCARD without MULTI");
    }
    sess.watched.clear();
    Reply::ok()
}

fn cmd_watch(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    let [_, keys @ ..] = a else { return wrong_args("watch") };
    if sess.multi.is_some() {
        return Reply::err("ERR WATCH inside MULTI is not allowed");
    }
    let k = sh.db(sess);
    for key in keys {
        let ek = k.key(key);
        let bound = k.db.read_bound(&ek).unwrap_or(u64::MAX);
        let expiry = k.expiry(key).ok().flatten();
        let (expires, existed) = (expiry.unwrap_or(0), expiry.is_some());
        sess.watched.push(Watched { db: sess.db, key: key.to_vec(), bound, expires, existed });
    }
    Reply::ok()
}

fn cmd_unwatch(_: &Shared, sess: &mut Session, _: &[&[u8]]) -> Reply {
    sess.watched.clear();
    Reply::ok()
}

/// Whether a watched key changed (or expired) since WATCH. A key absent then and now counts
/// as untouched, as in Redis when FLUSHDB empties a database without it (so does, unlike in
/// Redis, a key created and deleted again meanwhile).
fn touched(sh: &Shared, w: &Watched) -> bool {
    let Some(k) = sh.database(w.db) else { return true };
    let bound = k.db.read_bound(&k.key(&w.key)).unwrap_or(u64::MAX);
    let exists = !matches!(k.expiry(&w.key), Ok(None));
    (bound != w.bound && (w.existed || exists)) || (w.expires != 0 && w.expires <= k.now_ms())
}

fn cmd_exec(sh: &Shared, sess: &mut Session, _: &[&[u8]]) -> Reply {
    let Some(q) = sess.multi.take() else { return Reply::err("ERR EXEC without MULTI") };
    let watched = std::mem::take(&mut sess.watched);
    // Refused while a script is busy (before anything else, as in Redis): the transaction is
    // discarded.
    let busy = || Reply::err(format!("EXECABORT Transaction discarded because of: {BUSY}"));
    if sh.scripts.busy() {
        return busy();
    }
    if q.dirty {
        return Reply::err("EXECABORT Transaction discarded because of previous errors.");
    }
    // EXEC refused while a script is busy discards the transaction, as in Redis.
    let Some(_exclusive) = wait_gate_exclusive(sh) else { return busy() };
    if watched.iter().any(|w| touched(sh, w)) {
        return Reply::NilArray;
    }
    sess.atomic = true;
    let mut replies = Vec::with_capacity(q.commands.len());
    for args in &q.commands {
        let refs: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
        replies.push(match plan(sh, sess, &refs) {
            Ok(p) if p.remote => Reply::err("TRYAGAIN the transaction's region moved to another node; retry it"),
            Ok(p) => run_ungated(sh, sess, &refs, &p),
            Err(e) => e,
        });
    }
    sess.atomic = false;
    Reply::Array(replies)
}
