//! Blocking pops: BLPOP, BRPOP, BLMOVE, BRPOPLPUSH of lists, BZPOPMIN and BZPOPMAX of sorted
//! sets.
//!
//! A blocking command first registers its connection under its keys (`state::Waiters`), then
//! tries its non-blocking form. When that finds nothing it sets `sess.waiting`: the connection
//! sends nothing, waits until a write to one of the keys wakes it or the timeout passes, and
//! runs the command again (registering first means a push between the try and the wait is
//! not missed: the connection's `Notify` keeps the wake-up). Inside EXEC or a script, and for a
//! command forwarded from another node, a blocking command does not block: it answers as if
//! its timeout had passed.

use super::args::wrong_args;
use super::lists::lmove;
use super::table::{Command, Keys, WRITE};
use crate::keyspace::list::End;
use crate::keyspace::{Keyspace, KsError};
use crate::resp::Reply;
use crate::state::{Block, Session, Shared};
use std::time::{Duration, Instant};

#[rustfmt::skip]
pub(super) static COMMANDS: &[Command] = &[
    Command { name: "blpop", arity: -3, flags: WRITE, keys: Keys::AllButLast, handler: cmd_blpop },
    Command { name: "brpop", arity: -3, flags: WRITE, keys: Keys::AllButLast, handler: cmd_brpop },
    Command { name: "blmove", arity: 6, flags: WRITE, keys: Keys::Two, handler: cmd_blmove },
    Command { name: "brpoplpush", arity: 4, flags: WRITE, keys: Keys::Two, handler: cmd_brpoplpush },
    Command { name: "blmpop", arity: -5, flags: WRITE, keys: Keys::CountAt { at: 2, dest: false }, handler: cmd_blmpop },
    Command { name: "bzmpop", arity: -5, flags: WRITE, keys: Keys::CountAt { at: 2, dest: false }, handler: cmd_bzmpop },
    Command { name: "zmpop", arity: -4, flags: WRITE, keys: Keys::CountAt { at: 1, dest: false }, handler: cmd_zmpop },
    Command { name: "bzpopmin", arity: -3, flags: WRITE, keys: Keys::AllButLast, handler: cmd_bzpopmin },
    Command { name: "bzpopmax", arity: -3, flags: WRITE, keys: Keys::AllButLast, handler: cmd_bzpopmax },
];

/// A timeout in seconds (fractions allowed; 0: for ever), or Redis' reply to a bad one.
pub(super) fn timeout(a: &[u8]) -> Result<Option<Duration>, Reply> {
    let t: f64 = std::str::from_utf8(a)
        .ok()
        .and_then(|s| s.parse().ok())
        .filter(|t: &f64| t.is_finite())
        .ok_or_else(|| Reply::err("ERR timeout is not a float or out of range"))?;
    if t < 0.0 {
        return Err(Reply::err("ERR timeout is negative"));
    }
    Ok((t > 0.0).then(|| Duration::from_secs_f64(t.min(1e9))))
}

/// Runs `attempt` as a blocking command on `keys`: its reply when it has one, otherwise a
/// wait (or, when the command may not block or its time is up, the null array).
pub(super) fn blocking(
    sh: &Shared,
    sess: &mut Session,
    keys: &[&[u8]],
    wait: Option<Duration>,
    attempt: impl Fn(&Keyspace) -> Result<Option<Reply>, KsError>,
) -> Reply {
    let may_block = sess.span.is_none() && !sess.atomic;
    let first_try = sess.block.is_none();
    if let Some(error) = sh.waiters.take_release(sess.id).filter(|_| !first_try) {
        sh.unblock(sess);
        return match error {
            true => Reply::err("UNBLOCKED client unblocked via CLIENT UNBLOCK"),
            false => Reply::NilArray,
        };
    }
    if may_block && first_try {
        let keys: Vec<Vec<u8>> = keys.iter().map(|k| k.to_vec()).collect();
        sh.waiters.register(sess.db, &keys, sess.id, &sess.notify);
        sess.block = Some(Block { db: sess.db, keys, deadline: wait.map(|w| Instant::now() + w), after: Vec::new() });
    }
    // A key that became another type while the client waited does not wake it, as in Redis
    // (a transaction may push to it and then replace it); only the first try answers WRONGTYPE.
    let result = match attempt(sh.db(sess)) {
        Err(KsError::WrongType) if !first_try => Ok(None),
        r => r,
    };
    match result {
        Ok(Some(reply)) => {
            sh.unblock(sess);
            reply
        }
        Ok(None) => {
            let due = sess.block.as_ref().is_none_or(|b| b.deadline.is_some_and(|d| Instant::now() >= d));
            if due {
                sh.unblock(sess);
            } else {
                if let Some(b) = sess.block.as_ref().filter(|_| !first_try) {
                    sh.waiters.pass_on(b.db, &b.keys, sess.id);
                }
                sess.waiting = true;
            }
            Reply::NilArray
        }
        Err(e) => {
            sh.unblock(sess);
            Reply::err(e.to_string())
        }
    }
}

/// `KEY... timeout` commands (BLPOP, BRPOP, BZPOPMIN, BZPOPMAX): the first key `pop` takes
/// something from (under the key's lock), its name before `pop`'s items.
fn first_pop(
    sh: &Shared,
    sess: &mut Session,
    a: &[&[u8]],
    name: &str,
    pop: impl Fn(&Keyspace, &[u8]) -> Result<Option<Vec<Reply>>, KsError>,
) -> Reply {
    let [_, keys @ .., t] = a else { return wrong_args(name) };
    let wait = match timeout(t) {
        Ok(w) => w,
        Err(r) => return r,
    };
    blocking(sh, sess, keys, wait, |k| {
        for key in keys {
            let _g = k.lock(key);
            if let Some(items) = pop(k, key)? {
                return Ok(Some(Reply::Array([vec![Reply::bulk(*key)], items].concat())));
            }
        }
        Ok(None)
    })
}

/// BLPOP/BRPOP key... timeout: the first key with an element, and the element.
fn bpop(sh: &Shared, sess: &mut Session, a: &[&[u8]], end: End, name: &str) -> Reply {
    first_pop(sh, sess, a, name, |k, key| {
        Ok(k.pop_locked(key, end, 1)?.into_iter().next().map(|v| vec![Reply::Bulk(v)]))
    })
}

fn cmd_blpop(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    bpop(sh, sess, a, End::Left, "blpop")
}

fn cmd_brpop(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    bpop(sh, sess, a, End::Right, "brpop")
}

/// BLMOVE's and BRPOPLPUSH's work: the element moved, or nil once the time is up.
fn bmove(sh: &Shared, sess: &mut Session, src: &[u8], dst: &[u8], ends: (End, End), t: &[u8]) -> Reply {
    let wait = match timeout(t) {
        Ok(w) => w,
        Err(r) => return r,
    };
    let db = sess.db;
    let r = blocking(sh, sess, &[src], wait, |k| match lmove(k, src, dst, ends.0, ends.1) {
        // The destination holds another type while the source has something to move: the
        // client is answered WRONGTYPE and the source keeps its elements, as in Redis.
        Err(KsError::WrongType) if matches!(k.list_meta(src), Ok(Some(_))) => {
            Ok(Some(Reply::err(KsError::WrongType.to_string())))
        }
        r => Ok(r?.map(Reply::Bulk)),
    });
    if matches!(r, Reply::Bulk(_)) {
        sh.wake(db, dst);
    }
    r
}

fn cmd_blmove(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    let [_, src, dst, from, to, t] = a else { return wrong_args("blmove") };
    let (Some(from), Some(to)) = (super::lists::end_arg(from), super::lists::end_arg(to)) else {
        return super::args::syntax();
    };
    bmove(sh, sess, src, dst, (from, to), t)
}

fn cmd_brpoplpush(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    let [_, src, dst, t] = a else { return wrong_args("brpoplpush") };
    bmove(sh, sess, src, dst, (End::Right, End::Left), t)
}

/// BZPOPMIN/BZPOPMAX key... timeout: the first key with a member, the member and its score.
fn bzpop(sh: &Shared, sess: &mut Session, a: &[&[u8]], max: bool, name: &str) -> Reply {
    first_pop(sh, sess, a, name, |k, key| {
        let Some((member, score)) = k.zpop_order(key, max)?.next().transpose()? else { return Ok(None) };
        let mut w = k.zwrite_locked(key)?;
        w.remove(&member)?;
        w.popped(&member, score, max);
        w.commit()?;
        Ok(Some(vec![Reply::Bulk(member), Reply::Double(score)]))
    })
}

fn cmd_bzpopmin(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    bzpop(sh, sess, a, false, "bzpopmin")
}

fn cmd_bzpopmax(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    bzpop(sh, sess, a, true, "bzpopmax")
}

/// BLMPOP timeout numkeys key... LEFT|RIGHT [COUNT n].
fn cmd_blmpop(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    let [_, t, rest @ ..] = a else { return wrong_args("blmpop") };
    let wait = match timeout(t) {
        Ok(w) => w,
        Err(r) => return r,
    };
    let (keys, end, count) = match super::lists::mpop_args(rest) {
        Ok(x) => x,
        Err(r) => return r,
    };
    blocking(sh, sess, &keys, wait, |k| super::lists::mpop(k, &keys, end, count))
}

/// ZMPOP's and BZMPOP's `numkeys key... MIN|MAX [COUNT n]`: the keys, whether MAX, the count.
fn zmpop_args<'a>(a: &[&'a [u8]]) -> Result<(Vec<&'a [u8]>, bool, usize), Reply> {
    let [n, rest @ ..] = a else { return Err(super::args::syntax()) };
    let n = match super::args::int_arg(n) {
        Some(n) if n > 0 => n as usize,
        _ => return Err(Reply::err("ERR numkeys should be greater than 0")),
    };
    if n >= rest.len() {
        return Err(super::args::syntax());
    }
    let (keys, rest) = rest.split_at(n);
    let [end, opts @ ..] = rest else { return Err(super::args::syntax()) };
    let max = match super::args::lower(end).as_str() {
        "min" => false,
        "max" => true,
        _ => return Err(super::args::syntax()),
    };
    let count = match opts {
        [] => 1,
        [c, v] if super::args::lower(c) == "count" => match super::args::int_arg(v) {
            Some(v) if v > 0 => v as usize,
            _ => return Err(Reply::err("ERR count should be greater than 0")),
        },
        _ => return Err(super::args::syntax()),
    };
    Ok((keys.to_vec(), max, count))
}

/// The first of `keys` holding a sorted set: its name and up to `count` members popped from
/// the low (or `max`: high) end, with their scores.
fn zmpop(k: &Keyspace, keys: &[&[u8]], max: bool, count: usize) -> Result<Option<Reply>, KsError> {
    for key in keys {
        let _g = k.lock(key);
        let items: Vec<(Vec<u8>, f64)> = k.zpop_order(key, max)?.take(count).collect::<Result<_, _>>()?;
        if items.is_empty() {
            continue;
        }
        let mut w = k.zwrite_locked(key)?;
        for (m, s) in &items {
            w.remove(m)?;
            w.popped(m, *s, max);
        }
        w.commit()?;
        let pairs = items.into_iter().map(|(m, s)| Reply::Array(vec![Reply::Bulk(m), Reply::Double(s)])).collect();
        return Ok(Some(Reply::Array(vec![Reply::bulk(*key), Reply::Array(pairs)])));
    }
    Ok(None)
}

/// ZMPOP numkeys key... MIN|MAX [COUNT n].
fn cmd_zmpop(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    let (keys, max, count) = match zmpop_args(a.get(1..).unwrap_or_default()) {
        Ok(x) => x,
        Err(r) => return r,
    };
    match zmpop(sh.db(sess), &keys, max, count) {
        Ok(r) => r.unwrap_or(Reply::NilArray),
        Err(e) => Reply::err(e.to_string()),
    }
}

/// BZMPOP timeout numkeys key... MIN|MAX [COUNT n].
fn cmd_bzmpop(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    let [_, t, rest @ ..] = a else { return wrong_args("bzmpop") };
    let wait = match timeout(t) {
        Ok(w) => w,
        Err(r) => return r,
    };
    let (keys, max, count) = match zmpop_args(rest) {
        Ok(x) => x,
        Err(r) => return r,
    };
    blocking(sh, sess, &keys, wait, |k| zmpop(k, &keys, max, count))
}
