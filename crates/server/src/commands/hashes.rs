//! Hash commands: HSET, HMSET, HGET, HMGET, HGETALL, HDEL, HEXISTS, HLEN (in the main table),
//! and HSETNX, HINCRBY, HINCRBYFLOAT, HKEYS, HVALS, HSTRLEN, HRANDFIELD, HSCAN (in this
//! module's).

use super::args::{ks, lower, not_int, pairs, syntax, wrong_args};
use super::glob::glob;
use super::numbers::{human, parse_float, strict_int};
use super::sets::{item_cursor, item_scan_options, pick_count, scan_page};
use super::table::{Command, Keys, READONLY, WRITE};
use crate::keyspace::set::random_picks;
use crate::keyspace::Keyspace;
use crate::resp::Reply;
use crate::state::{Session, Shared};

#[rustfmt::skip]
pub(super) static COMMANDS: &[Command] = &[
    Command { name: "hsetnx", arity: 4, flags: WRITE, keys: Keys::First, handler: cmd_hsetnx },
    Command { name: "hincrby", arity: 4, flags: WRITE, keys: Keys::First, handler: cmd_hincrby },
    Command { name: "hincrbyfloat", arity: 4, flags: WRITE, keys: Keys::First, handler: cmd_hincrbyfloat },
    Command { name: "hkeys", arity: 2, flags: READONLY, keys: Keys::First, handler: cmd_hkeys },
    Command { name: "hvals", arity: 2, flags: READONLY, keys: Keys::First, handler: cmd_hvals },
    Command { name: "hstrlen", arity: 3, flags: READONLY, keys: Keys::First, handler: cmd_hstrlen },
    Command { name: "hrandfield", arity: -2, flags: READONLY, keys: Keys::First, handler: cmd_hrandfield },
    Command { name: "hscan", arity: -3, flags: READONLY, keys: Keys::First, handler: cmd_hscan },
];

pub(super) fn cmd_hset(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    set_fields(sh.db(sess), a, "hset", |added| Reply::Int(added as i64))
}

/// HSET with the reply of Redis before 4.0.
pub(super) fn cmd_hmset(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    set_fields(sh.db(sess), a, "hmset", |_| Reply::ok())
}

/// HSET's work; `reply` makes the reply from the number of fields added.
fn set_fields(k: &Keyspace, a: &[&[u8]], name: &str, reply: fn(u64) -> Reply) -> Reply {
    let [_, key, fields @ ..] = a else { return wrong_args(name) };
    let Some(pairs) = pairs(fields) else { return wrong_args(name) };
    let _g = k.lock(key);
    ks(k.hset_locked(key, &pairs).map(reply))
}

pub(super) fn cmd_hget(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    let [_, key, field] = a else { return wrong_args("hget") };
    ks(sh.db(sess).hget(key, field).map(Reply::opt))
}

pub(super) fn cmd_hmget(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    let [_, key, fields @ ..] = a else { return wrong_args("hmget") };
    ks((|| {
        let mut out = Vec::new();
        for f in fields {
            out.push(Reply::opt(sh.db(sess).hget(key, f)?));
        }
        Ok(Reply::Array(out))
    })())
}

pub(super) fn cmd_hgetall(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    let [_, key] = a else { return wrong_args("hgetall") };
    ks(sh
        .db(sess)
        .hgetall(key)
        .map(|pairs| Reply::Map(pairs.into_iter().map(|(f, v)| (Reply::Bulk(f), Reply::Bulk(v))).collect())))
}

pub(super) fn cmd_hdel(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    let [_, key, fields @ ..] = a else { return wrong_args("hdel") };
    let _g = sh.db(sess).lock(key);
    ks(sh.db(sess).hdel_locked(key, fields).map(|n| Reply::Int(n as i64)))
}

pub(super) fn cmd_hexists(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    let [_, key, field] = a else { return wrong_args("hexists") };
    ks(sh.db(sess).hget(key, field).map(|v| Reply::Int(v.is_some() as i64)))
}

pub(super) fn cmd_hlen(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    let [_, key] = a else { return wrong_args("hlen") };
    ks(sh.db(sess).hlen(key).map(|n| Reply::Int(n as i64)))
}

fn cmd_hsetnx(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    let [_, key, field, value] = a else { return wrong_args("hsetnx") };
    let k = sh.db(sess);
    let _g = k.lock(key);
    ks((|| {
        if k.hget(key, field)?.is_some() {
            return Ok(Reply::Int(0));
        }
        k.hset_locked(key, &[(field, value)])?;
        Ok(Reply::Int(1))
    })())
}

/// HINCRBY key field increment.
fn cmd_hincrby(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    let [_, key, field, by] = a else { return wrong_args("hincrby") };
    let Some(by) = strict_int(by) else { return not_int() };
    let k = sh.db(sess);
    let _g = k.lock(key);
    ks((|| {
        let cur = match k.hget(key, field)? {
            None => 0,
            Some(v) => match strict_int(&v) {
                Some(n) => n,
                None => return Ok(Reply::err("ERR hash value is not an integer")),
            },
        };
        let Some(n) = cur.checked_add(by) else {
            return Ok(Reply::err("ERR increment or decrement would overflow"));
        };
        k.hset_locked(key, &[(field, n.to_string().as_bytes())])?;
        Ok(Reply::Int(n))
    })())
}

/// HINCRBYFLOAT key field increment (see `numbers` for how the sum is written).
fn cmd_hincrbyfloat(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    let [_, key, field, by] = a else { return wrong_args("hincrbyfloat") };
    let Some(by) = parse_float(by) else { return Reply::err("ERR value is not a valid float") };
    if by.is_infinite() {
        return Reply::err("ERR value is NaN or Infinity");
    }
    let k = sh.db(sess);
    let _g = k.lock(key);
    ks((|| {
        let cur = match k.hget(key, field)? {
            None => 0.0,
            Some(v) => match parse_float(&v) {
                Some(n) => n,
                None => return Ok(Reply::err("ERR hash value is not a float")),
            },
        };
        let sum = cur + by;
        if !sum.is_finite() {
            return Ok(Reply::err("ERR increment would produce NaN or Infinity"));
        }
        let text = human(sum);
        k.hset_locked(key, &[(field, text.as_bytes())])?;
        Ok(Reply::bulk(text))
    })())
}

fn cmd_hkeys(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    let [_, key] = a else { return wrong_args("hkeys") };
    ks(sh.db(sess).hgetall(key).map(|p| Reply::Array(p.into_iter().map(|(f, _)| Reply::Bulk(f)).collect())))
}

fn cmd_hvals(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    let [_, key] = a else { return wrong_args("hvals") };
    ks(sh.db(sess).hgetall(key).map(|p| Reply::Array(p.into_iter().map(|(_, v)| Reply::Bulk(v)).collect())))
}

fn cmd_hstrlen(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    let [_, key, field] = a else { return wrong_args("hstrlen") };
    ks(sh.db(sess).hget(key, field).map(|v| Reply::Int(v.map_or(0, |v| v.len() as i64))))
}

/// HRANDFIELD key [count [WITHVALUES]]: one field (or nil), or an array of picks (as in
/// SRANDMEMBER), with their values: flat in RESP2, as pairs in RESP3.
fn cmd_hrandfield(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    let k = sh.db(sess);
    let (key, count, with_values) = match a {
        [_, key] => {
            return ks(k.hgetall(key).map(|p| Reply::opt(random_picks(p, 1).into_iter().next().map(|(f, _)| f))))
        }
        [_, key, count] => (key, count, false),
        [_, key, count, w] if lower(w) == "withvalues" => (key, count, true),
        [_, _, _, ..] => return syntax(),
        _ => return wrong_args("hrandfield"),
    };
    let n = match pick_count(count, with_values) {
        Ok(n) => n,
        Err(r) => return r,
    };
    let resp3 = sess.proto == 3;
    ks(k.hgetall(key).map(|p| {
        let picks = random_picks(p, n).into_iter();
        Reply::Array(match (with_values, resp3) {
            (false, _) => picks.map(|(f, _)| Reply::Bulk(f)).collect(),
            (true, false) => picks.flat_map(|(f, v)| [Reply::Bulk(f), Reply::Bulk(v)]).collect(),
            (true, true) => picks.map(|(f, v)| Reply::Array(vec![Reply::Bulk(f), Reply::Bulk(v)])).collect(),
        })
    }))
}

/// HSCAN key cursor [MATCH pattern] [COUNT n]: fields and values in field order, COUNT
/// fields at a time.
fn cmd_hscan(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    let [_, key, cursor, opts @ ..] = a else { return wrong_args("hscan") };
    let k = sh.db(sess);
    let after = match item_cursor(sh, cursor) {
        Ok(a) => a,
        Err(r) => return r,
    };
    match k.hlen(key) {
        Ok(0) => return scan_page(sh, None, Vec::new()),
        Ok(_) => {}
        Err(e) => return Reply::err(e.to_string()),
    }
    let (pattern, count) = match item_scan_options(opts) {
        Ok(o) => o,
        Err(r) => return r,
    };
    ks(k.hfields_after(key, after.as_deref(), count).map(|(pairs, more)| {
        let last = if more { pairs.last().map(|(f, _)| f.clone()) } else { None };
        let items = pairs
            .into_iter()
            .filter(|(f, _)| pattern.is_none_or(|p| glob(p, f)))
            .flat_map(|(f, v)| [Reply::Bulk(f), Reply::Bulk(v)])
            .collect();
        scan_page(sh, last, items)
    }))
}
