//! Stream commands: XADD (with MAXLEN/MINID trimming), XLEN, XRANGE, XREVRANGE, XDEL, XTRIM.
//! Reading as a consumer (XREAD, groups) is in `stream_groups`.

use super::args::{int_arg, ks, lower, syntax, wrong_args};
use super::table::{Command, Keys, READONLY, WRITE};
use crate::keyspace::stream::{Entry, Id};
use crate::keyspace::{Keyspace, KsError};
use crate::resp::Reply;
use crate::state::{Session, Shared};
use std::ops::Bound;

#[rustfmt::skip]
pub(super) static COMMANDS: &[Command] = &[
    Command { name: "xadd", arity: -5, flags: WRITE, keys: Keys::First, handler: cmd_xadd },
    Command { name: "xlen", arity: 2, flags: READONLY, keys: Keys::First, handler: cmd_xlen },
    Command { name: "xrange", arity: -4, flags: READONLY, keys: Keys::First, handler: cmd_xrange },
    Command { name: "xrevrange", arity: -4, flags: READONLY, keys: Keys::First, handler: cmd_xrevrange },
    Command { name: "xdel", arity: -3, flags: WRITE, keys: Keys::First, handler: cmd_xdel },
    Command { name: "xtrim", arity: -4, flags: WRITE, keys: Keys::First, handler: cmd_xtrim },
];

pub(super) const BAD_ID: &str = "ERR Invalid stream ID specified as stream command argument";

/// `ms-seq`, or `ms` with `seq` given by `default_seq`.
pub(super) fn parse_id(a: &[u8], default_seq: u64) -> Option<Id> {
    let s = std::str::from_utf8(a).ok()?;
    match s.split_once('-') {
        Some((ms, seq)) => Some((ms.parse().ok()?, seq.parse().ok()?)),
        None => Some((s.parse().ok()?, default_seq)),
    }
}

/// A range bound: `-`, `+`, an ID (a bare `ms` covers all its sequence numbers), or `(` an ID
/// for an exclusive bound.
fn bound(a: &[u8], low: bool) -> Option<Bound<Id>> {
    match a {
        b"-" if low => Some(Bound::Unbounded),
        b"-" => Some(Bound::Included((0, 0))),
        b"+" if low => Some(Bound::Included((u64::MAX, u64::MAX))),
        b"+" => Some(Bound::Unbounded),
        _ => match a.strip_prefix(b"(") {
            Some(rest) => parse_id(rest, if low { 0 } else { u64::MAX }).map(Bound::Excluded),
            None => parse_id(a, if low { 0 } else { u64::MAX }).map(Bound::Included),
        },
    }
}

pub(super) fn id_text(id: Id) -> Reply {
    Reply::bulk(format!("{}-{}", id.0, id.1))
}

pub(super) fn entries_reply(entries: Vec<Entry>) -> Reply {
    Reply::Array(
        entries
            .into_iter()
            .map(|(id, f)| Reply::Array(vec![id_text(id), Reply::Array(f.into_iter().map(Reply::Bulk).collect())]))
            .collect(),
    )
}

/// The trimming XADD and XTRIM ask for: MAXLEN n or MINID id (`=` or `~` before it; `~` is
/// taken as exact), and the arguments after it.
enum Trim {
    MaxLen(u64),
    MinId(Id),
}

fn parse_trim<'a>(a: &'a [&'a [u8]]) -> Result<(Option<Trim>, &'a [&'a [u8]]), Reply> {
    let Some(kind) = a.first().map(|k| lower(k)) else { return Ok((None, a)) };
    if kind != "maxlen" && kind != "minid" {
        return Ok((None, a));
    }
    let mut rest = a.get(1..).unwrap_or_default();
    if matches!(rest.first(), Some(&b"=") | Some(&b"~")) {
        rest = rest.get(1..).unwrap_or_default();
    }
    let [v, after @ ..] = rest else { return Err(syntax()) };
    // LIMIT bounds the work of an approximate trim; trims here are exact.
    let after = match after {
        [l, _, more @ ..] if lower(l) == "limit" => more,
        _ => after,
    };
    let t = if kind == "maxlen" {
        match int_arg(v) {
            Some(n) if n >= 0 => Trim::MaxLen(n as u64),
            _ => return Err(Reply::err("ERR The MAXLEN argument must be >= 0.")),
        }
    } else {
        Trim::MinId(parse_id(v, 0).ok_or_else(|| Reply::err(BAD_ID))?)
    };
    Ok((Some(t), after))
}

/// Deletes the entries `t` trims off; returns how many.
fn trim(k: &Keyspace, key: &[u8], t: &Trim) -> Result<u64, KsError> {
    let Some(m) = k.stream_meta(key)? else { return Ok(0) };
    let doomed: Vec<Id> = match t {
        Trim::MaxLen(n) if m.len > *n => {
            let excess = usize::try_from(m.len - n).unwrap_or(usize::MAX);
            k.xrange(key, Bound::Unbounded, Bound::Unbounded, false, Some(excess))?.into_iter().map(|e| e.0).collect()
        }
        Trim::MaxLen(_) => Vec::new(),
        Trim::MinId(id) => {
            k.xrange(key, Bound::Unbounded, Bound::Excluded(*id), false, None)?.into_iter().map(|e| e.0).collect()
        }
    };
    k.xdel_locked(key, &doomed)
}

/// XADD key [NOMKSTREAM] [MAXLEN|MINID [=|~] threshold [LIMIT n]] *|id field value ...
fn cmd_xadd(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    let [_, key, rest @ ..] = a else { return wrong_args("xadd") };
    let (nomk, rest) = match rest.split_first() {
        Some((f, r)) if lower(f) == "nomkstream" => (true, r),
        _ => (false, rest),
    };
    let (t, rest) = match parse_trim(rest) {
        Ok(x) => x,
        Err(r) => return r,
    };
    let [id, fields @ ..] = rest else { return wrong_args("xadd") };
    if fields.is_empty() || !fields.len().is_multiple_of(2) {
        return wrong_args("xadd");
    }
    let k = sh.db(sess);
    let _g = k.lock(key);
    ks((|| {
        let meta = k.stream_meta(key)?;
        if meta.is_none() && nomk {
            return Ok(Reply::Nil);
        }
        let last = meta.map_or((0, 0), |m| m.last);
        let id = match next_id(id, last, k.now_ms()) {
            Ok(id) => id,
            Err(r) => return Ok(r),
        };
        k.xadd_locked(key, id, fields)?;
        sh.wake(sess.db, key);
        if let Some(t) = &t {
            trim(k, key, t)?;
        }
        Ok(id_text(id))
    })())
}

/// The ID XADD gives a new entry: `*` (the clock, or after the last ID), `ms-*`, or explicit.
fn next_id(arg: &[u8], last: Id, now: u64) -> Result<Id, Reply> {
    let id = match arg {
        b"*" if now > last.0 => (now, 0),
        b"*" => (last.0, last.1.checked_add(1).ok_or_else(|| Reply::err(BAD_ID))?),
        _ => match arg.strip_suffix(b"-*") {
            Some(ms) => {
                let ms: u64 =
                    std::str::from_utf8(ms).ok().and_then(|s| s.parse().ok()).ok_or_else(|| Reply::err(BAD_ID))?;
                if ms == last.0 {
                    (ms, last.1.saturating_add(1))
                } else {
                    (ms, 0)
                }
            }
            None => parse_id(arg, 0).ok_or_else(|| Reply::err(BAD_ID))?,
        },
    };
    if id == (0, 0) {
        return Err(Reply::err("ERR The ID specified in XADD must be greater than 0-0"));
    }
    if id <= last {
        return Err(Reply::err("ERR The ID specified in XADD is equal or smaller than the target stream top item"));
    }
    Ok(id)
}

fn cmd_xlen(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    let [_, key] = a else { return wrong_args("xlen") };
    ks(sh.db(sess).stream_meta(key).map(|m| Reply::Int(m.map_or(0, |m| m.len) as i64)))
}

fn range(sh: &Shared, sess: &Session, a: &[&[u8]], rev: bool) -> Reply {
    let [_, key, first, second, opts @ ..] = a else { return wrong_args(if rev { "xrevrange" } else { "xrange" }) };
    let (start, end) = if rev { (second, first) } else { (first, second) };
    let (Some(lo), Some(hi)) = (bound(start, true), bound(end, false)) else { return Reply::err(BAD_ID) };
    let count = match opts {
        [] => None,
        [c, n] if lower(c) == "count" => match int_arg(n) {
            Some(n) if n <= 0 => return Reply::NilArray,
            Some(n) => Some(n as usize),
            None => return Reply::err("ERR value is not an integer or out of range"),
        },
        _ => return syntax(),
    };
    ks(sh.db(sess).xrange(key, lo, hi, rev, count).map(entries_reply))
}

fn cmd_xrange(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    range(sh, sess, a, false)
}

fn cmd_xrevrange(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    range(sh, sess, a, true)
}

fn cmd_xdel(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    let [_, key, ids @ ..] = a else { return wrong_args("xdel") };
    let Some(ids) = ids.iter().map(|i| parse_id(i, 0)).collect::<Option<Vec<Id>>>() else { return Reply::err(BAD_ID) };
    let k = sh.db(sess);
    let _g = k.lock(key);
    ks(k.xdel_locked(key, &ids).map(|n| Reply::Int(n as i64)))
}

fn cmd_xtrim(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    let [_, key, rest @ ..] = a else { return wrong_args("xtrim") };
    let t = match parse_trim(rest) {
        Ok((Some(t), [])) => t,
        Ok(_) => return syntax(),
        Err(r) => return r,
    };
    let k = sh.db(sess);
    let _g = k.lock(key);
    ks(trim(k, key, &t).map(|n| Reply::Int(n as i64)))
}
