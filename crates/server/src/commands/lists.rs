//! List commands: LPUSH, RPUSH, LPUSHX, RPUSHX, LPOP, RPOP, LRANGE, LINDEX, LSET, LLEN, LREM,
//! LTRIM, LINSERT, LPOS, LMOVE, RPOPLPUSH. The blocking forms are in `blocking`.

use super::args::{int_arg, ks, lower, not_int, syntax, wrong_args};
use super::table::{Command, Keys, READONLY, WRITE};
use crate::keyspace::list::End;
use crate::keyspace::{Keyspace, KsError};
use crate::resp::Reply;
use crate::state::{Session, Shared};

#[rustfmt::skip]
pub(super) static COMMANDS: &[Command] = &[
    Command { name: "lpush", arity: -3, flags: WRITE, keys: Keys::First, handler: cmd_lpush },
    Command { name: "rpush", arity: -3, flags: WRITE, keys: Keys::First, handler: cmd_rpush },
    Command { name: "lpushx", arity: -3, flags: WRITE, keys: Keys::First, handler: cmd_lpushx },
    Command { name: "rpushx", arity: -3, flags: WRITE, keys: Keys::First, handler: cmd_rpushx },
    Command { name: "lpop", arity: -2, flags: WRITE, keys: Keys::First, handler: cmd_lpop },
    Command { name: "rpop", arity: -2, flags: WRITE, keys: Keys::First, handler: cmd_rpop },
    Command { name: "lrange", arity: 4, flags: READONLY, keys: Keys::First, handler: cmd_lrange },
    Command { name: "lindex", arity: 3, flags: READONLY, keys: Keys::First, handler: cmd_lindex },
    Command { name: "lset", arity: 4, flags: WRITE, keys: Keys::First, handler: cmd_lset },
    Command { name: "llen", arity: 2, flags: READONLY, keys: Keys::First, handler: cmd_llen },
    Command { name: "lrem", arity: 4, flags: WRITE, keys: Keys::First, handler: cmd_lrem },
    Command { name: "ltrim", arity: 4, flags: WRITE, keys: Keys::First, handler: cmd_ltrim },
    Command { name: "linsert", arity: 5, flags: WRITE, keys: Keys::First, handler: cmd_linsert },
    Command { name: "lpos", arity: -3, flags: READONLY, keys: Keys::First, handler: cmd_lpos },
    Command { name: "lmove", arity: 5, flags: WRITE, keys: Keys::Two, handler: cmd_lmove },
    Command { name: "rpoplpush", arity: 3, flags: WRITE, keys: Keys::Two, handler: cmd_rpoplpush },
    Command { name: "lmpop", arity: -4, flags: WRITE, keys: Keys::CountAt { at: 1, dest: false }, handler: cmd_lmpop },
];

fn push(sh: &Shared, sess: &Session, a: &[&[u8]], end: End, only_existing: bool) -> Reply {
    let [_, key, values @ ..] = a else { return syntax() };
    let k = sh.db(sess);
    let _g = k.lock(key);
    let r = k.push_locked(key, end, values, only_existing).map(|n| Reply::Int(n as i64));
    if r.is_ok() {
        sh.wake(sess.db, key);
    }
    ks(r)
}

fn cmd_lpush(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    push(sh, sess, a, End::Left, false)
}

fn cmd_rpush(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    push(sh, sess, a, End::Right, false)
}

fn cmd_lpushx(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    push(sh, sess, a, End::Left, true)
}

fn cmd_rpushx(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    push(sh, sess, a, End::Right, true)
}

/// LPOP/RPOP key [count]: one element (or nil) without a count, an array with one.
fn pop(sh: &Shared, sess: &Session, a: &[&[u8]], end: End, name: &str) -> Reply {
    let (key, count) = match a {
        [_, key] => (*key, None),
        [_, key, n] => match int_arg(n) {
            Some(n) if n >= 0 => (*key, Some(n as u64)),
            _ => return Reply::err("ERR value is out of range, must be positive"),
        },
        _ => return wrong_args(name),
    };
    let k = sh.db(sess);
    let _g = k.lock(key);
    ks((|| {
        let exists = k.list_meta(key)?.is_some();
        let popped = k.pop_locked(key, end, count.unwrap_or(1))?;
        Ok(match count {
            None => popped.into_iter().next().map_or(Reply::Nil, Reply::Bulk),
            Some(_) if !exists => Reply::NilArray,
            Some(_) => Reply::Array(popped.into_iter().map(Reply::Bulk).collect()),
        })
    })())
}

fn cmd_lpop(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    pop(sh, sess, a, End::Left, "lpop")
}

fn cmd_rpop(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    pop(sh, sess, a, End::Right, "rpop")
}

fn cmd_lrange(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    let [_, key, start, stop] = a else { return wrong_args("lrange") };
    let (Some(start), Some(stop)) = (int_arg(start), int_arg(stop)) else { return not_int() };
    ks(sh.db(sess).lrange(key, start, stop).map(|v| Reply::Array(v.into_iter().map(Reply::Bulk).collect())))
}

fn cmd_lindex(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    let [_, key, index] = a else { return wrong_args("lindex") };
    let Some(index) = int_arg(index) else { return not_int() };
    ks(sh.db(sess).lindex(key, index).map(Reply::opt))
}

fn cmd_lset(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    let [_, key, index, v] = a else { return wrong_args("lset") };
    let Some(index) = int_arg(index) else { return not_int() };
    let k = sh.db(sess);
    let _g = k.lock(key);
    match k.lset_locked(key, index, v) {
        Ok(Ok(())) => Reply::ok(),
        Ok(Err(e)) => Reply::err(e),
        Err(e) => Reply::err(e.to_string()),
    }
}

fn cmd_llen(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    let [_, key] = a else { return wrong_args("llen") };
    ks(sh.db(sess).llen(key).map(|n| Reply::Int(n as i64)))
}

/// LREM key count element: removes `count` matches from the head (from the tail when
/// negative, all when 0).
fn cmd_lrem(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    let [_, key, count, element] = a else { return wrong_args("lrem") };
    let Some(count) = int_arg(count) else { return not_int() };
    let k = sh.db(sess);
    let _g = k.lock(key);
    ks((|| {
        let Some(m) = k.list_meta(key)? else { return Ok(Reply::Int(0)) };
        let mut items = k.list_all(key)?;
        let limit = if count == 0 { usize::MAX } else { usize::try_from(count.unsigned_abs()).unwrap_or(usize::MAX) };
        if count < 0 {
            items.reverse();
        }
        let mut removed = 0;
        items.retain(|v| {
            let hit = removed < limit && v.as_slice() == *element;
            removed += usize::from(hit);
            !hit
        });
        if count < 0 {
            items.reverse();
        }
        if removed > 0 {
            k.rewrite_list_locked(key, &m, &items)?;
        }
        Ok(Reply::Int(removed as i64))
    })())
}

fn cmd_ltrim(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    let [_, key, start, stop] = a else { return wrong_args("ltrim") };
    let (Some(start), Some(stop)) = (int_arg(start), int_arg(stop)) else { return not_int() };
    let k = sh.db(sess);
    let _g = k.lock(key);
    ks((|| {
        let Some(m) = k.list_meta(key)? else { return Ok(Reply::ok()) };
        let kept = k.lrange(key, start, stop)?;
        if kept.len() as u64 != m.len() {
            k.rewrite_list_locked(key, &m, &kept)?;
        }
        Ok(Reply::ok())
    })())
}

fn cmd_linsert(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    let [_, key, place, pivot, element] = a else { return wrong_args("linsert") };
    let after = match lower(place).as_str() {
        "before" => false,
        "after" => true,
        _ => return syntax(),
    };
    let k = sh.db(sess);
    let _g = k.lock(key);
    ks((|| {
        let Some(m) = k.list_meta(key)? else { return Ok(Reply::Int(0)) };
        let mut items = k.list_all(key)?;
        let Some(at) = items.iter().position(|v| v.as_slice() == *pivot) else { return Ok(Reply::Int(-1)) };
        items.insert(at + usize::from(after), element.to_vec());
        k.rewrite_list_locked(key, &m, &items)?;
        Ok(Reply::Int(items.len() as i64))
    })())
}

/// LPOS's options: RANK, COUNT and MAXLEN, or the reply to a bad one.
fn lpos_options(opts: &[&[u8]]) -> Result<(i64, Option<usize>, usize), Reply> {
    let (mut rank, mut count, mut maxlen) = (1i64, None, 0usize);
    for pair in opts.chunks(2) {
        let [name, value] = pair else { return Err(syntax()) };
        let n = int_arg(value).ok_or_else(not_int)?;
        match lower(name).as_str() {
            "rank" if n == 0 => {
                return Err(Reply::err(
                    "ERR RANK can't be zero: use 1 to start from the first match, 2 from the second ... or use negative to start from the end of the list",
                ))
            }
            "rank" if n == i64::MIN => return Err(Reply::err("ERR value is out of range")),
            "rank" => rank = n,
            "count" => count = Some(usize::try_from(n).map_err(|_| Reply::err("ERR COUNT can't be negative"))?),
            "maxlen" => maxlen = usize::try_from(n).map_err(|_| Reply::err("ERR MAXLEN can't be negative"))?,
            _ => return Err(syntax()),
        }
    }
    Ok((rank, count, maxlen))
}

/// LPOS key element [RANK r] [COUNT n] [MAXLEN len].
fn cmd_lpos(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    let [_, key, element, opts @ ..] = a else { return wrong_args("lpos") };
    let (rank, count, maxlen) = match lpos_options(opts) {
        Ok(o) => o,
        Err(r) => return r,
    };
    ks((|| {
        let items = sh.db(sess).list_all(key)?;
        let len = items.len();
        let order: Box<dyn Iterator<Item = usize>> = if rank > 0 { Box::new(0..len) } else { Box::new((0..len).rev()) };
        let limit = if maxlen == 0 { len } else { maxlen };
        let skip = usize::try_from(rank.unsigned_abs() - 1).unwrap_or(usize::MAX);
        let want = match count {
            Some(0) => usize::MAX,
            Some(n) => n,
            None => 1,
        };
        let found: Vec<usize> = order
            .take(limit)
            .filter(|&i| items.get(i).is_some_and(|v| v.as_slice() == *element))
            .skip(skip)
            .take(want)
            .collect();
        Ok(match count {
            None => found.first().map_or(Reply::Nil, |&i| Reply::Int(i as i64)),
            Some(_) => Reply::Array(found.into_iter().map(|i| Reply::Int(i as i64)).collect()),
        })
    })())
}

pub(super) fn end_arg(a: &[u8]) -> Option<End> {
    match lower(a).as_str() {
        "left" => Some(End::Left),
        "right" => Some(End::Right),
        _ => None,
    }
}

/// LMOVE's work: pops from `src` at `from` and pushes onto `dst` at `to` (the same list
/// rotates). None when `src` is empty. Checks `dst`'s type before anything moves.
pub(super) fn lmove(k: &Keyspace, src: &[u8], dst: &[u8], from: End, to: End) -> Result<Option<Vec<u8>>, KsError> {
    let _g = k.lock_many(&[src, dst]);
    if k.list_meta(src)?.is_none() {
        return Ok(None);
    }
    k.list_meta(dst)?;
    let Some(v) = k.pop_locked(src, from, 1)?.into_iter().next() else { return Ok(None) };
    k.push_locked(dst, to, &[&v], false)?;
    Ok(Some(v))
}

fn cmd_lmove(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    let [_, src, dst, from, to] = a else { return wrong_args("lmove") };
    let (Some(from), Some(to)) = (end_arg(from), end_arg(to)) else { return syntax() };
    let r = lmove(sh.db(sess), src, dst, from, to);
    if matches!(r, Ok(Some(_))) {
        sh.wake(sess.db, dst);
    }
    ks(r.map(Reply::opt))
}

fn cmd_rpoplpush(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    let [_, src, dst] = a else { return wrong_args("rpoplpush") };
    let r = lmove(sh.db(sess), src, dst, End::Right, End::Left);
    if matches!(r, Ok(Some(_))) {
        sh.wake(sess.db, dst);
    }
    ks(r.map(Reply::opt))
}

/// LMPOP's and BLMPOP's `numkeys key... LEFT|RIGHT [COUNT n]`: the keys, the end, the count.
pub(super) fn mpop_args<'a>(a: &[&'a [u8]]) -> Result<(Vec<&'a [u8]>, End, u64), Reply> {
    let [n, rest @ ..] = a else { return Err(syntax()) };
    let n = match int_arg(n) {
        Some(n) if n > 0 => n as usize,
        Some(_) => return Err(Reply::err("ERR numkeys should be greater than 0")),
        None => return Err(Reply::err("ERR numkeys should be greater than 0")),
    };
    if n >= rest.len() {
        return Err(syntax());
    }
    let (keys, rest) = rest.split_at(n);
    let [end, opts @ ..] = rest else { return Err(syntax()) };
    let end = end_arg(end).ok_or_else(syntax)?;
    let count = match opts {
        [] => 1,
        [c, v] if lower(c) == "count" => match int_arg(v) {
            Some(v) if v > 0 => v as u64,
            _ => return Err(Reply::err("ERR count should be greater than 0")),
        },
        _ => return Err(syntax()),
    };
    Ok((keys.to_vec(), end, count))
}

/// The first of `keys` holding a list: its name and up to `count` elements popped from `end`.
pub(super) fn mpop(k: &Keyspace, keys: &[&[u8]], end: End, count: u64) -> Result<Option<Reply>, KsError> {
    for key in keys {
        let _g = k.lock(key);
        let popped = k.pop_locked(key, end, count)?;
        if !popped.is_empty() {
            let items = Reply::Array(popped.into_iter().map(Reply::Bulk).collect());
            return Ok(Some(Reply::Array(vec![Reply::bulk(*key), items])));
        }
    }
    Ok(None)
}

/// LMPOP numkeys key... LEFT|RIGHT [COUNT n].
fn cmd_lmpop(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    let (keys, end, count) = match mpop_args(a.get(1..).unwrap_or_default()) {
        Ok(x) => x,
        Err(r) => return r,
    };
    ks(mpop(sh.db(sess), &keys, end, count).map(|r| r.unwrap_or(Reply::NilArray)))
}
