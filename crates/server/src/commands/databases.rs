//! Numbered databases and whole-key copies: SELECT, FLUSHDB, FLUSHALL, SWAPDB, MOVE, COPY,
//! RENAME, RENAMENX, RANDOMKEY.
//!
//! A single node has databases 0–15 (`state::DATABASES`), each its own range of engine keys
//! (`keyspace::encoding`); a cluster has database 0 only, as Redis Cluster does.

use super::args::{int_arg, ks, lower, not_int, syntax, wrong_args};
use super::table::{Command, Keys, ATOMIC, READONLY, WRITE};
use crate::keyspace::{Keyspace, KsError};
use crate::resp::Reply;
use crate::state::{Session, Shared};
use parking_lot::RwLockWriteGuard;

#[rustfmt::skip]
pub(super) static COMMANDS: &[Command] = &[
    Command { name: "select", arity: 2, flags: 0, keys: Keys::None, handler: cmd_select },
    Command { name: "swapdb", arity: 3, flags: ATOMIC, keys: Keys::None, handler: cmd_swapdb },
    Command { name: "flushdb", arity: -1, flags: WRITE, keys: Keys::Whole, handler: cmd_flushdb },
    Command { name: "flushall", arity: -1, flags: WRITE, keys: Keys::Whole, handler: cmd_flushall },
    Command { name: "move", arity: 3, flags: WRITE, keys: Keys::First, handler: cmd_move },
    Command { name: "copy", arity: -3, flags: WRITE, keys: Keys::Two, handler: cmd_copy },
    Command { name: "rename", arity: 3, flags: WRITE, keys: Keys::Two, handler: cmd_rename },
    Command { name: "renamenx", arity: 3, flags: WRITE, keys: Keys::Two, handler: cmd_renamenx },
    Command { name: "randomkey", arity: 1, flags: READONLY, keys: Keys::Whole, handler: cmd_randomkey },
];

/// A database number argument: the database, or the reply Redis gives for it.
fn database<'a>(sh: &'a Shared, arg: &[u8]) -> Result<(u8, &'a Keyspace), Reply> {
    let n = int_arg(arg).ok_or_else(not_int)?;
    if sh.numbered.is_empty() && n != 0 {
        return Err(Reply::err("ERR SELECT is not allowed in cluster mode"));
    }
    let n = u8::try_from(n).map_err(|_| Reply::err("ERR DB index is out of range"))?;
    sh.database(n).map(|k| (n, k)).ok_or_else(|| Reply::err("ERR DB index is out of range"))
}

fn cmd_select(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    let [_, n] = a else { return wrong_args("select") };
    match database(sh, n) {
        Ok((n, _)) => {
            sess.db = n;
            Reply::ok()
        }
        Err(r) => r,
    }
}

/// SWAPDB x y: the two numbers trade their key ranges (one record written, no key moved).
fn cmd_swapdb(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    let [_, x, y] = a else { return wrong_args("swapdb") };
    if sh.numbered.is_empty() {
        return Reply::err("ERR SWAPDB is not allowed in cluster mode");
    }
    let Some(x) = int_arg(x) else { return Reply::err("ERR invalid first DB index") };
    let Some(y) = int_arg(y) else { return Reply::err("ERR invalid second DB index") };
    let (Ok(x), Ok(y)) = (u8::try_from(x), u8::try_from(y)) else {
        return Reply::err("ERR DB index is out of range");
    };
    if sh.database(x).is_none() || sh.database(y).is_none() {
        return Reply::err("ERR DB index is out of range");
    }
    // No command may run on the old numbering while the map changes.
    let _exclusive = (!sess.atomic).then(|| sh.gate.write());
    match sh.swap_databases(x, y) {
        Ok(()) => Reply::ok(),
        Err(e) => Reply::err(format!("ERR {e}")),
    }
}

/// FLUSHDB's and FLUSHALL's optional ASYNC or SYNC (both flush at once: a range delete is
/// one record however many keys).
fn flush_mode_ok(a: &[&[u8]]) -> bool {
    match a {
        [_] => true,
        [_, m] => matches!(lower(m).as_str(), "async" | "sync"),
        _ => false,
    }
}

fn cmd_flushdb(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    if !flush_mode_ok(a) {
        return syntax();
    }
    ks(sh.db(sess).delete_range(b"", None, sess.span.as_ref()).map(|()| Reply::ok()))
}

fn cmd_flushall(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    if !flush_mode_ok(a) {
        return syntax();
    }
    ks((|| {
        for (_, k) in sh.databases() {
            k.delete_range(b"", None, sess.span.as_ref())?;
        }
        Ok(Reply::ok())
    })())
}

/// Locks `x` in database `a` and `y` in database `b`, the lower database first so that two
/// copies in opposite directions cannot deadlock.
fn lock_pair<'a>(a: (u8, &'a Keyspace), x: &[u8], b: (u8, &'a Keyspace), y: &[u8]) -> Vec<RwLockWriteGuard<'a, ()>> {
    if a.0 == b.0 {
        return a.1.lock_many(&[x, y]);
    }
    let (first, second) = if a.0 < b.0 { ((a.1, x), (b.1, y)) } else { ((b.1, y), (a.1, x)) };
    vec![first.0.lock(first.1), second.0.lock(second.1)]
}

fn cmd_move(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    let [_, key, db] = a else { return wrong_args("move") };
    if sh.numbered.is_empty() {
        return Reply::err("ERR MOVE is not allowed in cluster mode");
    }
    let to = match database(sh, db) {
        Ok(t) => t,
        Err(r) => return r,
    };
    if to.0 == sess.db {
        return Reply::err("ERR source and destination objects are the same");
    }
    let from = (sess.db, sh.db(sess));
    let _g = lock_pair(from, key, to, key);
    ks((|| {
        if from.1.get(key)?.is_none() || to.1.get(key)?.is_some() {
            return Ok(Reply::Int(0));
        }
        from.1.copy_locked(key, to.1, key)?;
        from.1.delete_locked(key)?;
        sh.wake(to.0, key);
        Ok(Reply::Int(1))
    })())
}

/// COPY source destination [DB n] [REPLACE].
fn cmd_copy(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    let [_, src, dst, opts @ ..] = a else { return wrong_args("copy") };
    let (mut to, mut replace) = ((sess.db, sh.db(sess)), false);
    let mut it = opts.iter();
    while let Some(o) = it.next() {
        match (lower(o).as_str(), it.clone().next()) {
            ("replace", _) => replace = true,
            ("db", Some(n)) => {
                it.next();
                if sh.numbered.is_empty() {
                    return Reply::err("ERR Copying to another database is not allowed in cluster mode");
                }
                match database(sh, n) {
                    Ok(t) => to = t,
                    Err(r) => return r,
                }
            }
            _ => return syntax(),
        }
    }
    if to.0 == sess.db && src == dst {
        return Reply::err("ERR source and destination objects are the same");
    }
    let from = (sess.db, sh.db(sess));
    let _g = lock_pair(from, src, to, dst);
    ks((|| {
        if from.1.get(src)?.is_none() || (!replace && to.1.get(dst)?.is_some()) {
            return Ok(Reply::Int(0));
        }
        let copied = from.1.copy_locked(src, to.1, dst)?;
        sh.wake(to.0, dst);
        Ok(Reply::Int(i64::from(copied)))
    })())
}

/// RENAME's and RENAMENX's work: None when `src` does not exist, else whether it was renamed.
fn rename(k: &Keyspace, src: &[u8], dst: &[u8], nx: bool) -> Result<Option<bool>, KsError> {
    let _g = k.lock_many(&[src, dst]);
    if k.get(src)?.is_none() {
        return Ok(None);
    }
    if src == dst {
        return Ok(Some(!nx));
    }
    if nx && k.get(dst)?.is_some() {
        return Ok(Some(false));
    }
    k.copy_locked(src, k, dst)?;
    k.delete_locked(src)?;
    Ok(Some(true))
}

fn cmd_rename(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    let [_, src, dst] = a else { return wrong_args("rename") };
    match rename(sh.db(sess), src, dst, false) {
        Ok(None) => Reply::err("ERR no such key"),
        Ok(Some(_)) => {
            sh.wake(sess.db, dst);
            Reply::ok()
        }
        Err(e) => Reply::err(e.to_string()),
    }
}

fn cmd_renamenx(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    let [_, src, dst] = a else { return wrong_args("renamenx") };
    match rename(sh.db(sess), src, dst, true) {
        Ok(None) => Reply::err("ERR no such key"),
        Ok(Some(done)) => {
            sh.wake(sess.db, dst);
            Reply::Int(i64::from(done))
        }
        Err(e) => Reply::err(e.to_string()),
    }
}

/// RANDOMKEY: the first key at or after a random point of the key space (wrapping round to
/// the first key). Keys after a gap in the key space come up more often than others: an
/// ordered store has no cheap uniform pick.
fn cmd_randomkey(sh: &Shared, sess: &mut Session, _: &[&[u8]]) -> Reply {
    let k = sh.db(sess);
    let span = sess.span.as_ref();
    ks((|| {
        let (first, _) = k.keys_after(None, 1, span)?;
        let Some(first) = first.into_iter().next() else { return Ok(Reply::Nil) };
        let last = k.last_key(span)?;
        let lo = first.first().copied().unwrap_or(0);
        let hi = last.as_ref().and_then(|l| l.first().copied()).unwrap_or(lo).max(lo);
        let mut start: Vec<u8> = (0..8).map(|_| rand::random::<u8>()).collect();
        if let Some(b) = start.first_mut() {
            *b = rand::Rng::gen_range(&mut rand::thread_rng(), lo..=hi);
        }
        let (after, _) = k.keys_after(Some(&start), 1, span)?;
        Ok(Reply::Bulk(after.into_iter().next().unwrap_or(first)))
    })())
}
