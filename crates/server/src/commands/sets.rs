//! Set commands: SADD, SREM, SMEMBERS, SISMEMBER, SMISMEMBER, SCARD, SPOP, SRANDMEMBER,
//! SINTER, SUNION, SDIFF and their STORE forms, SINTERCARD, SMOVE, SSCAN.

use super::args::{int_arg, ks, lower, not_int, syntax, wrong_args};
use super::glob::glob;
use super::keys::{scan_options, ScanOptions};
use super::table::{Command, Keys, READONLY, WRITE};
use crate::keyspace::{Keyspace, KsError};
use crate::resp::Reply;
use crate::state::{Session, Shared};
use std::collections::BTreeSet;

#[rustfmt::skip]
pub(super) static COMMANDS: &[Command] = &[
    Command { name: "sadd", arity: -3, flags: WRITE, keys: Keys::First, handler: cmd_sadd },
    Command { name: "srem", arity: -3, flags: WRITE, keys: Keys::First, handler: cmd_srem },
    Command { name: "smembers", arity: 2, flags: READONLY, keys: Keys::First, handler: cmd_smembers },
    Command { name: "sismember", arity: 3, flags: READONLY, keys: Keys::First, handler: cmd_sismember },
    Command { name: "smismember", arity: -3, flags: READONLY, keys: Keys::First, handler: cmd_smismember },
    Command { name: "scard", arity: 2, flags: READONLY, keys: Keys::First, handler: cmd_scard },
    Command { name: "spop", arity: -2, flags: WRITE, keys: Keys::First, handler: cmd_spop },
    Command { name: "srandmember", arity: -2, flags: READONLY, keys: Keys::First, handler: cmd_srandmember },
    Command { name: "sinter", arity: -2, flags: READONLY, keys: Keys::All, handler: cmd_sinter },
    Command { name: "sunion", arity: -2, flags: READONLY, keys: Keys::All, handler: cmd_sunion },
    Command { name: "sdiff", arity: -2, flags: READONLY, keys: Keys::All, handler: cmd_sdiff },
    Command { name: "sinterstore", arity: -3, flags: WRITE, keys: Keys::All, handler: cmd_sinterstore },
    Command { name: "sunionstore", arity: -3, flags: WRITE, keys: Keys::All, handler: cmd_sunionstore },
    Command { name: "sdiffstore", arity: -3, flags: WRITE, keys: Keys::All, handler: cmd_sdiffstore },
    Command { name: "sintercard", arity: -3, flags: READONLY, keys: Keys::CountAt { at: 1, dest: false }, handler: cmd_sintercard },
    Command { name: "smove", arity: 4, flags: WRITE, keys: Keys::Two, handler: cmd_smove },
    Command { name: "sscan", arity: -3, flags: READONLY, keys: Keys::First, handler: cmd_sscan },
];

/// The most members a negative SRANDMEMBER or HRANDFIELD count may ask for: Redis would try
/// to build a reply of any size (and run out of memory); Halyard refuses.
pub(super) const MAX_REPEATED_PICKS: u64 = 10_000_000;

fn members_reply(members: impl IntoIterator<Item = Vec<u8>>) -> Reply {
    Reply::Set(members.into_iter().map(Reply::Bulk).collect())
}

fn cmd_sadd(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    let [_, key, members @ ..] = a else { return wrong_args("sadd") };
    let k = sh.db(sess);
    let _g = k.lock(key);
    ks(k.sadd_locked(key, members).map(|n| Reply::Int(n as i64)))
}

fn cmd_srem(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    let [_, key, members @ ..] = a else { return wrong_args("srem") };
    let k = sh.db(sess);
    let _g = k.lock(key);
    ks(k.srem_locked(key, members).map(|n| Reply::Int(n as i64)))
}

fn cmd_smembers(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    let [_, key] = a else { return wrong_args("smembers") };
    ks(sh.db(sess).smembers(key).map(members_reply))
}

fn cmd_sismember(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    let [_, key, member] = a else { return wrong_args("sismember") };
    ks(sh.db(sess).sismember(key, member).map(|b| Reply::Int(i64::from(b))))
}

fn cmd_smismember(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    let [_, key, members @ ..] = a else { return wrong_args("smismember") };
    let k = sh.db(sess);
    ks((|| {
        let mut out = Vec::with_capacity(members.len());
        for m in members {
            out.push(Reply::Int(i64::from(k.sismember(key, m)?)));
        }
        Ok(Reply::Array(out))
    })())
}

fn cmd_scard(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    let [_, key] = a else { return wrong_args("scard") };
    ks(sh.db(sess).scard(key).map(|n| Reply::Int(n as i64)))
}

/// SPOP key [count]: one member (or nil), or a set of up to `count`.
fn cmd_spop(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    let (key, count) = match a {
        [_, key] => (*key, None),
        [_, key, count] => match int_arg(count) {
            Some(n) if n >= 0 => (*key, Some(n as u64)),
            _ => return Reply::err("ERR value is out of range, must be positive"),
        },
        [_, _, _, ..] => return syntax(),
        _ => return wrong_args("spop"),
    };
    let k = sh.db(sess);
    let _g = k.lock(key);
    ks(k.spop_locked(key, count.unwrap_or(1)).map(|popped| match count {
        None => Reply::opt(popped.into_iter().next()),
        Some(_) => members_reply(popped),
    }))
}

/// A RANDMEMBER-style count: the count, or the reply Redis gives for it (`pairs`: picks of
/// field-value pairs, which Redis allows half as many of).
pub(super) fn pick_count(arg: &[u8], pairs: bool) -> Result<i64, Reply> {
    let n = int_arg(arg).ok_or_else(not_int)?;
    if n == i64::MIN {
        return Err(Reply::err(
            "ERR value is out of range, value must between -9223372036854775807 and 9223372036854775807",
        ));
    }
    if pairs && n < -(i64::MAX / 2) {
        return Err(Reply::err("ERR value is out of range"));
    }
    if n < 0 && n.unsigned_abs() > MAX_REPEATED_PICKS {
        return Err(Reply::err(format!("ERR count is too large: at most {MAX_REPEATED_PICKS} repeated picks")));
    }
    Ok(n)
}

/// SRANDMEMBER key [count]: one member (or nil), or an array of picks.
fn cmd_srandmember(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    let k = sh.db(sess);
    match a {
        [_, key] => ks(k.srandmember(key, 1).map(|m| Reply::opt(m.into_iter().next()))),
        [_, key, count] => match pick_count(count, false) {
            Ok(n) => ks(k.srandmember(key, n).map(|m| Reply::Array(m.into_iter().map(Reply::Bulk).collect()))),
            Err(r) => r,
        },
        [_, _, _, ..] => syntax(),
        _ => wrong_args("srandmember"),
    }
}

/// How SINTER, SUNION and SDIFF combine their sets.
#[derive(Clone, Copy)]
enum Op {
    Inter,
    Union,
    Diff,
}

/// The sets at `keys` combined by `op`; stops an intersection at `limit` members (0: none).
/// As in Redis, every key must hold a set or nothing, and a missing key is an empty set.
fn combine(k: &Keyspace, keys: &[&[u8]], op: Op, limit: usize) -> Result<Vec<Vec<u8>>, KsError> {
    let mut lens = Vec::with_capacity(keys.len());
    for key in keys {
        lens.push(k.set_len(key)?);
    }
    match op {
        Op::Inter => {
            let Some(lens) = lens.into_iter().collect::<Option<Vec<u64>>>() else { return Ok(Vec::new()) };
            // The smallest set's members, each looked up in the others.
            let Some((small, _)) = lens.iter().enumerate().min_by_key(|(_, n)| **n) else { return Ok(Vec::new()) };
            let mut out = Vec::new();
            'member: for m in k.smembers(keys.get(small).copied().unwrap_or_default())? {
                for (i, key) in keys.iter().enumerate() {
                    if i != small && !k.sismember(key, &m)? {
                        continue 'member;
                    }
                }
                out.push(m);
                if out.len() == limit {
                    break;
                }
            }
            Ok(out)
        }
        Op::Union => {
            let mut all = BTreeSet::new();
            for key in keys {
                all.extend(k.smembers(key)?);
            }
            Ok(all.into_iter().collect())
        }
        Op::Diff => {
            let Some((first, rest)) = keys.split_first() else { return Ok(Vec::new()) };
            let mut left: BTreeSet<Vec<u8>> = k.smembers(first)?.into_iter().collect();
            for key in rest {
                if left.is_empty() {
                    break;
                }
                for m in k.smembers(key)? {
                    left.remove(&m);
                }
            }
            Ok(left.into_iter().collect())
        }
    }
}

fn read_combined(sh: &Shared, sess: &Session, a: &[&[u8]], op: Op) -> Reply {
    ks(combine(sh.db(sess), a.get(1..).unwrap_or_default(), op, 0).map(members_reply))
}

/// A STORE form: the sets at the keys after the destination combined by `op`, stored at the
/// destination in place of whatever it held; replies with the result's size.
fn store_combined(sh: &Shared, sess: &Session, a: &[&[u8]], op: Op) -> Reply {
    let [_, dest, keys @ ..] = a else { return syntax() };
    let k = sh.db(sess);
    let _g = k.lock_many(a.get(1..).unwrap_or_default());
    ks((|| {
        let members = combine(k, keys, op, 0)?;
        k.sstore_locked(dest, &members)?;
        Ok(Reply::Int(members.len() as i64))
    })())
}

fn cmd_sinter(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    read_combined(sh, sess, a, Op::Inter)
}

fn cmd_sunion(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    read_combined(sh, sess, a, Op::Union)
}

fn cmd_sdiff(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    read_combined(sh, sess, a, Op::Diff)
}

fn cmd_sinterstore(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    store_combined(sh, sess, a, Op::Inter)
}

fn cmd_sunionstore(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    store_combined(sh, sess, a, Op::Union)
}

fn cmd_sdiffstore(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    store_combined(sh, sess, a, Op::Diff)
}

/// SINTERCARD numkeys key... [LIMIT limit].
fn cmd_sintercard(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    let [_, numkeys, rest @ ..] = a else { return wrong_args("sintercard") };
    let n = match int_arg(numkeys) {
        Some(n) if n > 0 => n as usize,
        _ => return Reply::err("ERR numkeys should be greater than 0"),
    };
    if n > rest.len() {
        return Reply::err("ERR Number of keys can't be greater than number of args");
    }
    let (keys, opts) = rest.split_at(n);
    let mut limit = 0;
    for opt in opts.chunks(2) {
        match opt {
            [name, value] if lower(name) == "limit" => match int_arg(value) {
                Some(l) if l >= 0 => limit = l as usize,
                _ => return Reply::err("ERR LIMIT can't be negative"),
            },
            _ => return syntax(),
        }
    }
    ks(combine(sh.db(sess), keys, Op::Inter, limit).map(|m| Reply::Int(m.len() as i64)))
}

fn cmd_smove(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    let [_, src, dst, member] = a else { return wrong_args("smove") };
    let k = sh.db(sess);
    let _g = k.lock_many(&[src, dst]);
    ks(k.smove_locked(src, dst, member).map(|moved| Reply::Int(i64::from(moved))))
}

/// A SCAN-style cursor argument of SSCAN and HSCAN: the item to go on after (None: from the
/// start), or the reply for a bad cursor.
pub(super) fn item_cursor(sh: &Shared, cursor: &[u8]) -> Result<Option<Vec<u8>>, Reply> {
    let invalid = || Reply::err("ERR invalid cursor");
    let c = std::str::from_utf8(cursor).ok().and_then(|s| s.parse::<u64>().ok()).ok_or_else(invalid)?;
    if c == 0 {
        return Ok(None);
    }
    sh.cursors.lock().get(c).map(Some).ok_or_else(invalid)
}

/// SSCAN's and HSCAN's options (MATCH, COUNT; no TYPE), or the reply for bad ones.
pub(super) fn item_scan_options<'a>(opts: &[&'a [u8]]) -> Result<(Option<&'a [u8]>, usize), Reply> {
    match scan_options(opts)? {
        ScanOptions { pattern, count, kind: None } => Ok((pattern, count)),
        _ => Err(syntax()),
    }
}

/// A page's reply: the next cursor (0 at the end: `last` is None) and the items.
pub(super) fn scan_page(sh: &Shared, last: Option<Vec<u8>>, items: Vec<Reply>) -> Reply {
    let next = last.map_or(0, |l| sh.cursors.lock().put(l));
    Reply::Array(vec![Reply::bulk(next.to_string()), Reply::Array(items)])
}

/// SSCAN key cursor [MATCH pattern] [COUNT n]: members in key order, COUNT at a time.
fn cmd_sscan(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    let [_, key, cursor, opts @ ..] = a else { return wrong_args("sscan") };
    let k = sh.db(sess);
    let after = match item_cursor(sh, cursor) {
        Ok(a) => a,
        Err(r) => return r,
    };
    match k.set_len(key) {
        Ok(Some(_)) => {}
        Ok(None) => return scan_page(sh, None, Vec::new()),
        Err(e) => return Reply::err(e.to_string()),
    }
    let (pattern, count) = match item_scan_options(opts) {
        Ok(o) => o,
        Err(r) => return r,
    };
    ks(k.smembers_after(key, after.as_deref(), count).map(|(members, more)| {
        let last = if more { members.last().cloned() } else { None };
        let items = members.into_iter().filter(|m| pattern.is_none_or(|p| glob(p, m))).map(Reply::Bulk).collect();
        scan_page(sh, last, items)
    }))
}
