//! Sorted set commands: ZADD, ZINCRBY, ZREM, ZSCORE, ZMSCORE, ZCARD, ZCOUNT, ZLEXCOUNT, the
//! ZRANGE family (ZRANGE, ZREVRANGE, ZRANGEBYSCORE, ZREVRANGEBYSCORE, ZRANGEBYLEX,
//! ZREVRANGEBYLEX, ZRANGESTORE), ZRANK, ZREVRANK, ZPOPMIN, ZPOPMAX, ZREMRANGEBYRANK,
//! ZREMRANGEBYSCORE, ZREMRANGEBYLEX, ZSCAN, ZRANDMEMBER, and ZUNION, ZINTER, ZDIFF with their
//! STORE forms. Replies and error texts are Redis 7.0's.

use super::args::{int_arg, ks, lower, not_int, syntax, wrong_args};
use super::glob::glob;
use super::keys::{scan_options, ScanOptions};
use super::table::{Command, Keys, READONLY, WRITE};
use crate::keyspace::zset::{Lex, Scored, ZIter};
use crate::keyspace::{Keyspace, KsError};
use crate::resp::Reply;
use crate::state::{Session, Shared};
use std::collections::HashMap;
use std::ops::Bound;

const SRC_DEST: Keys = Keys::CountAt { at: 2, dest: true };
const SRC: Keys = Keys::CountAt { at: 1, dest: false };

#[rustfmt::skip]
pub(super) static COMMANDS: &[Command] = &[
    Command { name: "zadd", arity: -4, flags: WRITE, keys: Keys::First, handler: cmd_zadd },
    Command { name: "zincrby", arity: 4, flags: WRITE, keys: Keys::First, handler: cmd_zincrby },
    Command { name: "zrem", arity: -3, flags: WRITE, keys: Keys::First, handler: cmd_zrem },
    Command { name: "zscore", arity: 3, flags: READONLY, keys: Keys::First, handler: cmd_zscore },
    Command { name: "zmscore", arity: -3, flags: READONLY, keys: Keys::First, handler: cmd_zmscore },
    Command { name: "zcard", arity: 2, flags: READONLY, keys: Keys::First, handler: cmd_zcard },
    Command { name: "zcount", arity: 4, flags: READONLY, keys: Keys::First, handler: cmd_zcount },
    Command { name: "zlexcount", arity: 4, flags: READONLY, keys: Keys::First, handler: cmd_zlexcount },
    Command { name: "zrange", arity: -4, flags: READONLY, keys: Keys::First, handler: cmd_zrange },
    Command { name: "zrangestore", arity: -5, flags: WRITE, keys: Keys::Two, handler: cmd_zrangestore },
    Command { name: "zrevrange", arity: -4, flags: READONLY, keys: Keys::First, handler: cmd_zrevrange },
    Command { name: "zrangebyscore", arity: -4, flags: READONLY, keys: Keys::First, handler: cmd_zrangebyscore },
    Command { name: "zrevrangebyscore", arity: -4, flags: READONLY, keys: Keys::First, handler: cmd_zrevrangebyscore },
    Command { name: "zrangebylex", arity: -4, flags: READONLY, keys: Keys::First, handler: cmd_zrangebylex },
    Command { name: "zrevrangebylex", arity: -4, flags: READONLY, keys: Keys::First, handler: cmd_zrevrangebylex },
    Command { name: "zrank", arity: 3, flags: READONLY, keys: Keys::First, handler: cmd_zrank },
    Command { name: "zrevrank", arity: 3, flags: READONLY, keys: Keys::First, handler: cmd_zrevrank },
    Command { name: "zpopmin", arity: -2, flags: WRITE, keys: Keys::First, handler: cmd_zpopmin },
    Command { name: "zpopmax", arity: -2, flags: WRITE, keys: Keys::First, handler: cmd_zpopmax },
    Command { name: "zremrangebyrank", arity: 4, flags: WRITE, keys: Keys::First, handler: cmd_zremrangebyrank },
    Command { name: "zremrangebyscore", arity: 4, flags: WRITE, keys: Keys::First, handler: cmd_zremrangebyscore },
    Command { name: "zremrangebylex", arity: 4, flags: WRITE, keys: Keys::First, handler: cmd_zremrangebylex },
    Command { name: "zscan", arity: -3, flags: READONLY, keys: Keys::First, handler: cmd_zscan },
    Command { name: "zrandmember", arity: -2, flags: READONLY, keys: Keys::First, handler: cmd_zrandmember },
    Command { name: "zunionstore", arity: -4, flags: WRITE, keys: SRC_DEST, handler: cmd_zunionstore },
    Command { name: "zinterstore", arity: -4, flags: WRITE, keys: SRC_DEST, handler: cmd_zinterstore },
    Command { name: "zdiffstore", arity: -4, flags: WRITE, keys: SRC_DEST, handler: cmd_zdiffstore },
    Command { name: "zunion", arity: -3, flags: READONLY, keys: SRC, handler: cmd_zunion },
    Command { name: "zinter", arity: -3, flags: READONLY, keys: SRC, handler: cmd_zinter },
    Command { name: "zintercard", arity: -3, flags: READONLY, keys: Keys::CountAt { at: 1, dest: false }, handler: cmd_zintercard },
    Command { name: "zdiff", arity: -3, flags: READONLY, keys: SRC, handler: cmd_zdiff },
];

fn not_float() -> Reply {
    Reply::err("ERR value is not a valid float")
}

fn nan_result() -> Reply {
    Reply::err("ERR resulting score is not a number (NaN)")
}

/// C's `strtod` over the whole of `a` (leading spaces allowed, as strtod skips them): the
/// number and whether it over- or underflowed; None when not all of `a` is a number. As
/// strtod, an empty text is 0.
fn strtod(a: &[u8]) -> Option<(f64, bool)> {
    let s = std::str::from_utf8(a).ok()?.trim_start_matches([' ', '\t', '\n', '\r', '\x0b', '\x0c']);
    if s.is_empty() {
        return Some((0.0, false));
    }
    let (neg, body) = match s.strip_prefix('-') {
        Some(b) => (true, b),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    let low = body.to_ascii_lowercase();
    let mag = if low == "inf" || low == "infinity" {
        return Some((if neg { f64::NEG_INFINITY } else { f64::INFINITY }, false));
    } else if low == "nan" {
        f64::NAN
    } else if let Some(hex) = low.strip_prefix("0x") {
        if hex.is_empty() || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        hex.bytes().fold(0.0, |acc, b| acc * 16.0 + f64::from((b as char).to_digit(16).unwrap_or(0)))
    } else {
        if !body.bytes().all(|b| b.is_ascii_digit() || matches!(b, b'.' | b'e' | b'E' | b'+' | b'-')) {
            return None;
        }
        body.parse::<f64>().ok()?
    };
    let mantissa = low.split('e').next().unwrap_or_default();
    let erange = mag.is_infinite() || (mag == 0.0 && mantissa.bytes().any(|b| (b'1'..=b'9').contains(&b)));
    Some((if neg { -mag } else { mag }, erange))
}

/// A score or increment as Redis reads one (`getDoubleFromObject`): not empty, no leading
/// space, no overflow or underflow to 0, not NaN.
fn float_arg(a: &[u8]) -> Option<f64> {
    if a.first().is_none_or(|b| b.is_ascii_whitespace()) {
        return None;
    }
    let (v, erange) = strtod(a)?;
    (!v.is_nan() && !(erange && (v.is_infinite() || v == 0.0))).then_some(v)
}

/// A score range bound: `1.5`, `(1.5` (exclusive), `-inf`, `+inf`.
fn score_bound(a: &[u8]) -> Option<Bound<f64>> {
    let (ex, text) = match a.strip_prefix(b"(") {
        Some(t) => (true, t),
        None => (false, a),
    };
    let (v, _) = strtod(text)?;
    if v.is_nan() {
        return None;
    }
    Some(if ex { Bound::Excluded(v) } else { Bound::Included(v) })
}

fn score_range(min: &[u8], max: &[u8]) -> Result<(Bound<f64>, Bound<f64>), Reply> {
    score_bound(min).zip(score_bound(max)).ok_or_else(|| Reply::err("ERR min or max is not a float"))
}

/// A lex range bound: `-`, `+`, `[member`, `(member`.
fn lex_bound(a: &[u8]) -> Option<Lex> {
    match a {
        b"-" => Some(Lex::Min),
        b"+" => Some(Lex::Max),
        [b'[', m @ ..] => Some(Lex::In(m.to_vec())),
        [b'(', m @ ..] => Some(Lex::Ex(m.to_vec())),
        _ => None,
    }
}

fn lex_range(min: &[u8], max: &[u8]) -> Result<(Lex, Lex), Reply> {
    lex_bound(min).zip(lex_bound(max)).ok_or_else(|| Reply::err("ERR min or max not valid string range item"))
}

/// Members, with their scores when `withscores`: flat in RESP2, [member, score] pairs in RESP3
/// (as Redis 7.0).
fn scored_reply(items: Vec<Scored>, withscores: bool, proto: u8) -> Reply {
    let out = if !withscores {
        items.into_iter().map(|(m, _)| Reply::Bulk(m)).collect()
    } else if proto >= 3 {
        items.into_iter().map(|(m, s)| Reply::Array(vec![Reply::Bulk(m), Reply::Double(s)])).collect()
    } else {
        items.into_iter().flat_map(|(m, s)| [Reply::Bulk(m), Reply::Double(s)]).collect()
    };
    Reply::Array(out)
}

/// Up to `limit` (None: all) members of `it` after skipping `offset`.
fn collect(it: ZIter, offset: usize, limit: Option<usize>) -> Result<Vec<Scored>, KsError> {
    let mut out = Vec::new();
    if limit == Some(0) {
        return Ok(out);
    }
    for (i, r) in it.enumerate() {
        let item = r?;
        if i < offset {
            continue;
        }
        out.push(item);
        if limit.is_some_and(|l| out.len() >= l) {
            break;
        }
    }
    Ok(out)
}

/// ZADD's options.
#[derive(Default)]
struct AddFlags {
    nx: bool,
    xx: bool,
    gt: bool,
    lt: bool,
    ch: bool,
    incr: bool,
}

/// What ZADD did to one member.
enum Added {
    /// A new member.
    New(f64),
    /// A new score.
    Changed(f64),
    /// The score it had.
    Same(f64),
    /// Nothing (NX, XX, GT or LT said no).
    Nop,
    /// The increment made NaN.
    Nan,
}

fn cmd_zadd(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    let [_, key, rest @ ..] = a else { return wrong_args("zadd") };
    let mut f = AddFlags::default();
    let mut i = 0;
    while let Some(opt) = rest.get(i) {
        match lower(opt).as_str() {
            "nx" => f.nx = true,
            "xx" => f.xx = true,
            "gt" => f.gt = true,
            "lt" => f.lt = true,
            "ch" => f.ch = true,
            "incr" => f.incr = true,
            _ => break,
        }
        i += 1;
    }
    let elems = rest.get(i..).unwrap_or_default();
    if elems.is_empty() || !elems.len().is_multiple_of(2) {
        return syntax();
    }
    if f.nx && f.xx {
        return Reply::err("ERR XX and NX options at the same time are not compatible");
    }
    if (f.nx && (f.gt || f.lt)) || (f.gt && f.lt) {
        return Reply::err("ERR GT, LT, and/or NX options at the same time are not compatible");
    }
    if f.incr && elems.len() > 2 {
        return Reply::err("ERR INCR option supports a single increment-element pair");
    }
    let mut pairs = Vec::new();
    for p in elems.chunks_exact(2) {
        let [s, m] = p else { continue };
        let Some(s) = float_arg(s) else { return not_float() };
        pairs.push((s, *m));
    }
    let k = sh.db(sess);
    let _g = k.lock(key);
    let r = zadd(k, key, &pairs, &f);
    if r.is_ok() {
        sh.wake(sess.db, key);
    }
    ks(r)
}

fn zadd(k: &Keyspace, key: &[u8], pairs: &[(f64, &[u8])], f: &AddFlags) -> Result<Reply, KsError> {
    let mut w = k.zwrite_locked(key)?;
    let (mut added, mut changed, mut last) = (0, 0, None);
    for &(score, m) in pairs {
        let cur = w.score(m)?;
        let outcome = match cur {
            Some(_) if f.nx => Added::Nop,
            Some(cur) => {
                let s = if f.incr { cur + score } else { score };
                if s.is_nan() {
                    Added::Nan
                } else if (f.lt && s >= cur) || (f.gt && s <= cur) {
                    Added::Nop
                } else if s == cur {
                    Added::Same(s)
                } else {
                    w.set(m, s)?;
                    Added::Changed(s)
                }
            }
            None if f.xx => Added::Nop,
            None => {
                w.set(m, score)?;
                Added::New(score)
            }
        };
        last = match outcome {
            Added::New(s) => {
                added += 1;
                Some(s)
            }
            Added::Changed(s) => {
                changed += 1;
                Some(s)
            }
            Added::Same(s) => Some(s),
            Added::Nop => None,
            Added::Nan => {
                w.commit()?;
                return Ok(nan_result());
            }
        };
    }
    w.commit()?;
    Ok(match (f.incr, last) {
        (true, Some(s)) => Reply::Double(s),
        (true, None) => Reply::Nil,
        (false, _) => Reply::Int(if f.ch { added + changed } else { added }),
    })
}

fn cmd_zincrby(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    let [_, key, incr, member] = a else { return wrong_args("zincrby") };
    let Some(incr) = float_arg(incr) else { return not_float() };
    let k = sh.db(sess);
    let _g = k.lock(key);
    ks((|| {
        let mut w = k.zwrite_locked(key)?;
        let s = w.score(member)?.map_or(incr, |cur| cur + incr);
        if s.is_nan() {
            return Ok(nan_result());
        }
        w.set(member, s)?;
        w.commit()?;
        Ok(Reply::Double(s))
    })())
}

fn cmd_zrem(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    let [_, key, members @ ..] = a else { return wrong_args("zrem") };
    let k = sh.db(sess);
    let _g = k.lock(key);
    ks((|| {
        let mut w = k.zwrite_locked(key)?;
        let mut n = 0;
        for m in members {
            n += i64::from(w.remove(m)?);
        }
        w.commit()?;
        Ok(Reply::Int(n))
    })())
}

fn cmd_zscore(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    let [_, key, member] = a else { return wrong_args("zscore") };
    ks(sh.db(sess).zscore(key, member).map(|s| s.map_or(Reply::Nil, Reply::Double)))
}

fn cmd_zmscore(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    let [_, key, members @ ..] = a else { return wrong_args("zmscore") };
    let k = sh.db(sess);
    ks((|| {
        let mut out = Vec::new();
        for m in members {
            out.push(k.zscore(key, m)?.map_or(Reply::Nil, Reply::Double));
        }
        Ok(Reply::Array(out))
    })())
}

fn cmd_zcard(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    let [_, key] = a else { return wrong_args("zcard") };
    ks(sh.db(sess).zcard(key).map(|n| Reply::Int(n as i64)))
}

/// The number of members of a walk.
fn count(it: ZIter) -> Result<Reply, KsError> {
    let mut n = 0;
    for r in it {
        r?;
        n += 1;
    }
    Ok(Reply::Int(n))
}

fn cmd_zcount(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    let [_, key, min, max] = a else { return wrong_args("zcount") };
    let (lo, hi) = match score_range(min, max) {
        Ok(r) => r,
        Err(e) => return e,
    };
    ks(sh.db(sess).zrange_by_score(key, lo, hi, false).and_then(count))
}

fn cmd_zlexcount(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    let [_, key, min, max] = a else { return wrong_args("zlexcount") };
    let (lo, hi) = match lex_range(min, max) {
        Ok(r) => r,
        Err(e) => return e,
    };
    ks(sh.db(sess).zrange_by_lex(key, &lo, &hi, false).and_then(count))
}

/// Which members a range takes.
#[derive(Clone, Debug, PartialEq)]
enum Span {
    /// Ranks `start..=stop`, negative ones from the end (ZRANGE's default).
    Rank(i64, i64),
    /// Scores (BYSCORE).
    Score(Bound<f64>, Bound<f64>),
    /// Members (BYLEX).
    Lex(Lex, Lex),
}

/// The kind of span ZRANGE's options or the command's name chose.
#[derive(Clone, Copy, PartialEq, Eq)]
enum By {
    Rank,
    Score,
    Lex,
}

/// A parsed ZRANGE-family request.
struct RangeReq {
    span: Span,
    rev: bool,
    /// LIMIT offset count (count < 0: all).
    limit: Option<(i64, i64)>,
    withscores: bool,
}

/// Parses `min max [options]` of the ZRANGE family as Redis does (`zrangeGenericCommand`):
/// `by` and `rev` fixed by the command's name, or None where the options choose; no
/// WITHSCORES when the result is stored.
fn range_request(args: &[&[u8]], by: Option<By>, rev: Option<bool>, store: bool) -> Result<RangeReq, Reply> {
    let [min, max, opts @ ..] = args else { return Err(syntax()) };
    let (mut by_opt, mut rev_opt, mut limit, mut withscores) = (by, rev, None, false);
    let mut i = 0;
    while let Some(opt) = opts.get(i) {
        let left = opts.len() - i - 1;
        match lower(opt).as_str() {
            "withscores" if !store => withscores = true,
            "limit" if left >= 2 => {
                let (Some(o), Some(c)) =
                    (opts.get(i + 1).and_then(|o| int_arg(o)), opts.get(i + 2).and_then(|c| int_arg(c)))
                else {
                    return Err(not_int());
                };
                limit = Some((o, c));
                i += 2;
            }
            "rev" if rev_opt.is_none() => rev_opt = Some(true),
            "bylex" if by_opt.is_none() => by_opt = Some(By::Lex),
            "byscore" if by_opt.is_none() => by_opt = Some(By::Score),
            _ => return Err(syntax()),
        }
        i += 1;
    }
    let (by, rev) = (by_opt.unwrap_or(By::Rank), rev_opt.unwrap_or(false));
    if limit.is_some_and(|(_, c)| c != -1) && by == By::Rank {
        return Err(Reply::err(
            "ERR syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX",
        ));
    }
    if withscores && by == By::Lex {
        return Err(Reply::err("ERR syntax error, WITHSCORES not supported in combination with BYLEX"));
    }
    let (min, max) = if rev && by != By::Rank { (max, min) } else { (min, max) };
    let span = match by {
        By::Rank => match (int_arg(min), int_arg(max)) {
            (Some(s), Some(e)) => Span::Rank(s, e),
            _ => return Err(not_int()),
        },
        By::Score => score_range(min, max).map(|(lo, hi)| Span::Score(lo, hi))?,
        By::Lex => lex_range(min, max).map(|(lo, hi)| Span::Lex(lo, hi))?,
    };
    Ok(RangeReq { span, rev, limit, withscores })
}

/// The members a range request takes, in its order.
fn fetch(k: &Keyspace, key: &[u8], r: &RangeReq) -> Result<Vec<Scored>, KsError> {
    let (offset, limit) = match r.limit {
        None => (0, None),
        Some((o, _)) if o < 0 => return Ok(Vec::new()),
        Some((o, c)) => (o as usize, usize::try_from(c).ok()),
    };
    match &r.span {
        Span::Rank(start, stop) => {
            let len = k.zcard(key)? as i64;
            let start = if *start < 0 { (len + start).max(0) } else { *start };
            let stop = if *stop < 0 { len + stop } else { (*stop).min(len - 1) };
            if start > stop || start >= len {
                return Ok(Vec::new());
            }
            collect(k.zall(key, r.rev)?, start as usize, Some((stop - start + 1) as usize))
        }
        Span::Score(lo, hi) => collect(k.zrange_by_score(key, *lo, *hi, r.rev)?, offset, limit),
        Span::Lex(lo, hi) => collect(k.zrange_by_lex(key, lo, hi, r.rev)?, offset, limit),
    }
}

/// A ZRANGE-family read: `args` are `key min max [options]`.
fn range(sh: &Shared, sess: &Session, name: &str, a: &[&[u8]], by: Option<By>, rev: Option<bool>) -> Reply {
    let [_, key, rest @ ..] = a else { return wrong_args(name) };
    let r = match range_request(rest, by, rev, false) {
        Ok(r) => r,
        Err(e) => return e,
    };
    ks(fetch(sh.db(sess), key, &r).map(|items| scored_reply(items, r.withscores, sess.proto)))
}

fn cmd_zrange(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    range(sh, sess, "zrange", a, None, None)
}

fn cmd_zrevrange(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    range(sh, sess, "zrevrange", a, Some(By::Rank), Some(true))
}

fn cmd_zrangebyscore(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    range(sh, sess, "zrangebyscore", a, Some(By::Score), Some(false))
}

fn cmd_zrevrangebyscore(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    range(sh, sess, "zrevrangebyscore", a, Some(By::Score), Some(true))
}

fn cmd_zrangebylex(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    range(sh, sess, "zrangebylex", a, Some(By::Lex), Some(false))
}

fn cmd_zrevrangebylex(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    range(sh, sess, "zrevrangebylex", a, Some(By::Lex), Some(true))
}

/// Replaces what `dest` holds with a sorted set of `items` (deletes it when there are none).
/// Caller holds `dest`'s lock.
fn store(k: &Keyspace, dest: &[u8], items: &[Scored]) -> Result<Reply, KsError> {
    k.delete_locked(dest)?;
    let mut w = k.zwrite_locked(dest)?;
    for (m, s) in items {
        w.set(m, *s)?;
    }
    let n = w.len();
    w.commit()?;
    Ok(Reply::Int(n as i64))
}

fn cmd_zrangestore(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    let [_, dest, src, rest @ ..] = a else { return wrong_args("zrangestore") };
    let r = match range_request(rest, None, None, true) {
        Ok(r) => r,
        Err(e) => return e,
    };
    let k = sh.db(sess);
    let _g = k.lock_many(&[dest, src]);
    ks(fetch(k, src, &r).and_then(|items| store(k, dest, &items)))
}

fn rank(sh: &Shared, sess: &Session, a: &[&[u8]], rev: bool) -> Reply {
    let [_, key, member] = a else { return wrong_args(if rev { "zrevrank" } else { "zrank" }) };
    let k = sh.db(sess);
    ks((|| {
        let Some((r, _)) = k.zrank(key, member)? else { return Ok(Reply::Nil) };
        let r = if rev { k.zcard(key)?.saturating_sub(r + 1) } else { r };
        Ok(Reply::Int(r as i64))
    })())
}

fn cmd_zrank(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    rank(sh, sess, a, false)
}

fn cmd_zrevrank(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    rank(sh, sess, a, true)
}

/// ZPOPMIN / ZPOPMAX key [count]: without a count one member and its score (a flat pair in
/// RESP3 too); with one, as ZRANGE WITHSCORES replies.
fn pop(sh: &Shared, sess: &Session, a: &[&[u8]], max: bool) -> Reply {
    let [_, key, rest @ ..] = a else { return wrong_args(if max { "zpopmax" } else { "zpopmin" }) };
    let count = match rest {
        [] => None,
        [c] => match int_arg(c).filter(|&n| n >= 0) {
            Some(n) => Some(n as usize),
            None => return Reply::err("ERR value is out of range, must be positive"),
        },
        _ => return syntax(),
    };
    let k = sh.db(sess);
    let _g = k.lock(key);
    ks((|| {
        let items = collect(k.zpop_order(key, max)?, 0, Some(count.unwrap_or(1)))?;
        let mut w = k.zwrite_locked(key)?;
        for (m, s) in &items {
            w.remove(m)?;
            w.popped(m, *s, max);
        }
        w.commit()?;
        Ok(match count {
            Some(_) => scored_reply(items, true, sess.proto),
            None => scored_reply(items, true, 2),
        })
    })())
}

fn cmd_zpopmin(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    pop(sh, sess, a, false)
}

fn cmd_zpopmax(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    pop(sh, sess, a, true)
}

/// ZREMRANGEBY*: removes the members of a span; replies how many.
fn remove_range(sh: &Shared, sess: &Session, key: &[u8], span: Result<Span, Reply>) -> Reply {
    let span = match span {
        Ok(s) => s,
        Err(e) => return e,
    };
    let k = sh.db(sess);
    let _g = k.lock(key);
    ks((|| {
        let items = fetch(k, key, &RangeReq { span, rev: false, limit: None, withscores: false })?;
        let mut w = k.zwrite_locked(key)?;
        for (m, _) in &items {
            w.remove(m)?;
        }
        w.commit()?;
        Ok(Reply::Int(items.len() as i64))
    })())
}

fn cmd_zremrangebyrank(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    let [_, key, start, stop] = a else { return wrong_args("zremrangebyrank") };
    let span = match (int_arg(start), int_arg(stop)) {
        (Some(s), Some(e)) => Ok(Span::Rank(s, e)),
        _ => Err(not_int()),
    };
    remove_range(sh, sess, key, span)
}

fn cmd_zremrangebyscore(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    let [_, key, min, max] = a else { return wrong_args("zremrangebyscore") };
    remove_range(sh, sess, key, score_range(min, max).map(|(lo, hi)| Span::Score(lo, hi)))
}

fn cmd_zremrangebylex(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    let [_, key, min, max] = a else { return wrong_args("zremrangebylex") };
    remove_range(sh, sess, key, lex_range(min, max).map(|(lo, hi)| Span::Lex(lo, hi)))
}

/// Sets of up to this many members are scanned whole in one reply, in score order, as Redis
/// answers for its compact (listpack) sorted sets.
const SCAN_WHOLE: u64 = 128;

/// A score as ZSCAN gives it: Redis' compact sets hold whole scores as integers (up to
/// i64::MAX / 2), its large ones print every score with `%.17g`.
fn scan_score(s: f64, small: bool) -> String {
    let int = s as i64;
    if small && s.abs() <= (i64::MAX / 2) as f64 && int as f64 == s && s != 0.0 {
        int.to_string()
    } else {
        crate::resp::fmt_double(s)
    }
}

/// ZSCAN key cursor [MATCH pattern] [COUNT n]: a small set whole (cursor 0); a larger one
/// COUNT members at a time in member order, the cursor standing for the last member given.
/// Scores are bulk strings, in RESP3 too.
fn cmd_zscan(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    let [_, key, cursor, opts @ ..] = a else { return wrong_args("zscan") };
    let Some(cursor) = std::str::from_utf8(cursor).ok().and_then(|s| s.parse::<u64>().ok()) else {
        return Reply::err("ERR invalid cursor");
    };
    let (pattern, count) = match scan_options(opts) {
        Ok(ScanOptions { pattern, count, kind: None }) => (pattern, count),
        Ok(_) => return syntax(),
        Err(r) => return r,
    };
    let k = sh.db(sess);
    ks((|| {
        let len = k.zcard(key)?;
        let (items, next, small) = if len <= SCAN_WHOLE {
            (collect(k.zall(key, false)?, 0, None)?, 0, true)
        } else {
            let after = match cursor {
                0 => Lex::Min,
                c => match sh.cursors.lock().get(c) {
                    Some(m) => Lex::Ex(m),
                    None => return Ok(Reply::err("ERR invalid cursor")),
                },
            };
            let mut page =
                collect(k.zrange_by_member(key, &after, &Lex::Max, false)?, 0, Some(count.saturating_add(1)))?;
            let next = if page.len() > count {
                page.truncate(count);
                page.last().map_or(0, |(m, _)| sh.cursors.lock().put(m.clone()))
            } else {
                0
            };
            (page, next, false)
        };
        let mut out = Vec::new();
        for (m, s) in items {
            if pattern.is_none_or(|p| glob(p, &m)) {
                out.push(Reply::Bulk(m));
                out.push(Reply::bulk(scan_score(s, small)));
            }
        }
        Ok(Reply::Array(vec![Reply::bulk(next.to_string()), Reply::Array(out)]))
    })())
}

/// ZRANDMEMBER key [count [WITHSCORES]]: a positive count gives distinct members (the whole
/// set when it has no more), a negative one that many picks with repeats.
fn cmd_zrandmember(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    let (key, count, withscores) = match a {
        [_, key] => (key, None, false),
        [_, key, c, rest @ ..] => {
            let withscores = match rest {
                [] => false,
                [w] if lower(w) == "withscores" => true,
                _ => return syntax(),
            };
            match super::sets::pick_count(c, withscores) {
                Ok(c) => (key, Some(c), withscores),
                Err(r) => return r,
            }
        }
        _ => return wrong_args("zrandmember"),
    };
    let k = sh.db(sess);
    ks((|| {
        let all = collect(k.zall(key, false)?, 0, None)?;
        let mut rng = rand::thread_rng();
        let Some(count) = count else {
            let pick = rand::seq::SliceRandom::choose(all.as_slice(), &mut rng);
            return Ok(pick.map_or(Reply::Nil, |(m, _)| Reply::Bulk(m.clone())));
        };
        let items: Vec<Scored> = if all.is_empty() || count == 0 {
            Vec::new()
        } else if count < 0 {
            let n = count.unsigned_abs() as usize;
            (0..n).filter_map(|_| rand::seq::SliceRandom::choose(all.as_slice(), &mut rng).cloned()).collect()
        } else if count as usize >= all.len() {
            // As Redis answers for its compact sets: the whole set, highest score first.
            all.into_iter().rev().collect()
        } else {
            let mut idx = rand::seq::index::sample(&mut rng, all.len(), count as usize).into_vec();
            idx.sort_unstable();
            idx.into_iter().filter_map(|i| all.get(i).cloned()).collect()
        };
        Ok(scored_reply(items, withscores, sess.proto))
    })())
}

/// ZUNION, ZINTER, ZDIFF.
#[derive(Clone, Copy, PartialEq, Eq)]
enum SetOp {
    Union,
    Inter,
    Diff,
}

/// AGGREGATE SUM | MIN | MAX.
#[derive(Clone, Copy)]
enum Agg {
    Sum,
    Min,
    Max,
}

fn aggregate(agg: Agg, acc: f64, v: f64) -> f64 {
    match agg {
        Agg::Sum => {
            let s = acc + v;
            if s.is_nan() {
                0.0
            } else {
                s
            }
        }
        Agg::Min => acc.min(v),
        Agg::Max => acc.max(v),
    }
}

/// What ZUNION and its kin combine, and how.
struct Inputs {
    /// Each key's members (none for a missing key).
    sets: Vec<Vec<Scored>>,
    weights: Vec<f64>,
    agg: Agg,
    withscores: bool,
}

/// The input keys (as `numkeys key...`), read, and the options after them; `dest` for the
/// STORE forms (no WITHSCORES). Keys are read before the options are parsed, as Redis does,
/// so a key of the wrong type is reported first.
fn combine_inputs(
    k: &Keyspace,
    name: &str,
    op: SetOp,
    args: &[&[u8]],
    dest: bool,
) -> Result<Result<Inputs, Reply>, KsError> {
    let [numkeys, rest @ ..] = args else { return Ok(Err(wrong_args(name))) };
    let Some(n) = int_arg(numkeys) else { return Ok(Err(not_int())) };
    if n < 1 {
        return Ok(Err(Reply::err(format!("ERR at least 1 input key is needed for '{name}' command"))));
    }
    let n = n as usize;
    let (Some(keys), Some(opts)) = (rest.get(..n), rest.get(n..)) else { return Ok(Err(syntax())) };
    let mut sets = Vec::new();
    for key in keys {
        sets.push(k.zset_or_set(key)?.unwrap_or_default());
    }
    Ok(combine_options(op, opts, n, dest).map(|(weights, agg, withscores)| Inputs { sets, weights, agg, withscores }))
}

/// WEIGHTS, AGGREGATE and WITHSCORES.
fn combine_options(op: SetOp, opts: &[&[u8]], n: usize, dest: bool) -> Result<(Vec<f64>, Agg, bool), Reply> {
    let (mut weights, mut agg, mut withscores) = (vec![1.0; n], Agg::Sum, false);
    let mut i = 0;
    while let Some(opt) = opts.get(i) {
        let left = opts.len() - i;
        match lower(opt).as_str() {
            "weights" if op != SetOp::Diff && left > n => {
                for (j, w) in weights.iter_mut().enumerate() {
                    let arg = opts.get(i + 1 + j).copied().unwrap_or_default();
                    *w = float_arg(arg).ok_or_else(|| Reply::err("ERR weight value is not a float"))?;
                }
                i += n + 1;
            }
            "aggregate" if op != SetOp::Diff && left >= 2 => {
                agg = match opts.get(i + 1).map(|a| lower(a)).as_deref() {
                    Some("sum") => Agg::Sum,
                    Some("min") => Agg::Min,
                    Some("max") => Agg::Max,
                    _ => return Err(syntax()),
                };
                i += 2;
            }
            "withscores" if !dest => {
                withscores = true;
                i += 1;
            }
            _ => return Err(syntax()),
        }
    }
    Ok((weights, agg, withscores))
}

/// The members of the combination, by score then member.
fn combine(op: SetOp, sets: Vec<Vec<Scored>>, weights: &[f64], agg: Agg) -> Vec<Scored> {
    let weighted = |s: f64, w: f64| {
        let v = s * w;
        if v.is_nan() {
            0.0
        } else {
            v
        }
    };
    let mut out: Vec<Scored> = match op {
        SetOp::Union => {
            let mut acc: HashMap<Vec<u8>, f64> = HashMap::new();
            for (set, &w) in sets.into_iter().zip(weights) {
                for (m, s) in set {
                    let v = weighted(s, w);
                    acc.entry(m).and_modify(|a| *a = aggregate(agg, *a, v)).or_insert(v);
                }
            }
            acc.into_iter().collect()
        }
        SetOp::Inter => {
            let mut sets: Vec<(HashMap<Vec<u8>, f64>, f64)> =
                sets.into_iter().zip(weights).map(|(s, &w)| (s.into_iter().collect(), w)).collect();
            sets.sort_by_key(|(s, _)| s.len());
            let Some(((first, w0), rest)) = sets.split_first() else { return Vec::new() };
            let mut out = Vec::new();
            'member: for (m, s) in first {
                let mut v = weighted(*s, *w0);
                for (other, w) in rest {
                    let Some(o) = other.get(m) else { continue 'member };
                    v = aggregate(agg, v, weighted(*o, *w));
                }
                out.push((m.clone(), v));
            }
            out
        }
        SetOp::Diff => {
            let mut it = sets.into_iter();
            let first = it.next().unwrap_or_default();
            let others: Vec<std::collections::HashSet<Vec<u8>>> =
                it.map(|s| s.into_iter().map(|(m, _)| m).collect()).collect();
            first.into_iter().filter(|(m, _)| !others.iter().any(|o| o.contains(m))).collect()
        }
    };
    out.sort_by(|a, b| a.1.partial_cmp(&b.1).unwrap_or(std::cmp::Ordering::Equal).then_with(|| a.0.cmp(&b.0)));
    out
}

/// ZUNION / ZINTER / ZDIFF numkeys key... [options].
fn combine_read(sh: &Shared, sess: &Session, name: &str, op: SetOp, a: &[&[u8]]) -> Reply {
    let k = sh.db(sess);
    ks((|| {
        let i = match combine_inputs(k, name, op, a.get(1..).unwrap_or_default(), false)? {
            Ok(x) => x,
            Err(e) => return Ok(e),
        };
        Ok(scored_reply(combine(op, i.sets, &i.weights, i.agg), i.withscores, sess.proto))
    })())
}

/// ZUNIONSTORE / ZINTERSTORE / ZDIFFSTORE dest numkeys key... [options].
fn combine_store(sh: &Shared, sess: &Session, name: &str, op: SetOp, a: &[&[u8]]) -> Reply {
    let [_, dest, rest @ ..] = a else { return wrong_args(name) };
    let k = sh.db(sess);
    let mut locked: Vec<&[u8]> = vec![dest];
    if let Some(n) = rest.first().and_then(|n| int_arg(n)).and_then(|n| usize::try_from(n).ok()) {
        locked.extend(rest.iter().skip(1).take(n).copied());
    }
    let _g = k.lock_many(&locked);
    ks((|| {
        let i = match combine_inputs(k, name, op, rest, true)? {
            Ok(x) => x,
            Err(e) => return Ok(e),
        };
        store(k, dest, &combine(op, i.sets, &i.weights, i.agg))
    })())
}

fn cmd_zunion(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    combine_read(sh, sess, "zunion", SetOp::Union, a)
}

fn cmd_zinter(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    combine_read(sh, sess, "zinter", SetOp::Inter, a)
}

fn cmd_zdiff(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    combine_read(sh, sess, "zdiff", SetOp::Diff, a)
}

fn cmd_zunionstore(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    combine_store(sh, sess, "zunionstore", SetOp::Union, a)
}

fn cmd_zinterstore(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    combine_store(sh, sess, "zinterstore", SetOp::Inter, a)
}

fn cmd_zdiffstore(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    combine_store(sh, sess, "zdiffstore", SetOp::Diff, a)
}

/// ZINTERCARD numkeys key... [LIMIT n]: how many members all the sets share (0 for a LIMIT of
/// none), up to the limit.
fn cmd_zintercard(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    let [_, n, rest @ ..] = a else { return wrong_args("zintercard") };
    let n = match int_arg(n) {
        Some(n) if n > 0 => n as usize,
        Some(_) => return Reply::err("ERR at least 1 input key is needed for 'zintercard' command"),
        None => return not_int(),
    };
    if n > rest.len() {
        return syntax();
    }
    let (keys, opts) = rest.split_at(n);
    let limit = match opts {
        [] => usize::MAX,
        [l, v] if lower(l) == "limit" => match int_arg(v) {
            Some(0) => usize::MAX,
            Some(v) if v > 0 => v as usize,
            _ => return Reply::err("ERR LIMIT can't be negative"),
        },
        _ => return syntax(),
    };
    let k = sh.db(sess);
    ks((|| {
        let mut common: Option<std::collections::HashSet<Vec<u8>>> = None;
        for key in keys {
            let members: std::collections::HashSet<Vec<u8>> =
                k.zset_or_set(key)?.unwrap_or_default().into_iter().map(|(m, _)| m).collect();
            common = Some(match common {
                None => members,
                Some(c) => c.intersection(&members).cloned().collect(),
            });
        }
        Ok(Reply::Int(common.map_or(0, |c| c.len().min(limit)) as i64))
    })())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_parse_as_redis_reads_them() {
        assert_eq!(float_arg(b"1.5"), Some(1.5));
        assert_eq!(float_arg(b"-inf"), Some(f64::NEG_INFINITY));
        assert_eq!(float_arg(b"+Inf"), Some(f64::INFINITY));
        assert_eq!(float_arg(b"0x10"), Some(16.0));
        assert_eq!(float_arg(b"1e5"), Some(1e5));
        for bad in [&b""[..], b"nan", b"x", b" 1", b"1 ", b"1e400", b"1e-400", b"-", b"."] {
            assert_eq!(float_arg(bad), None, "{bad:?}");
        }
        assert_eq!(score_bound(b"(1.5"), Some(Bound::Excluded(1.5)));
        assert_eq!(score_bound(b"("), Some(Bound::Excluded(0.0)));
        assert_eq!(score_bound(b"1e400"), Some(Bound::Included(f64::INFINITY)));
        assert_eq!(score_bound(b"nan"), None);
        assert_eq!(lex_bound(b"+a"), None);
        assert_eq!(lex_bound(b"[a"), Some(Lex::In(b"a".to_vec())));
    }
}
