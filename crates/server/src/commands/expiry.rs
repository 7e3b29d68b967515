//! Key expiry: SET's EX/PX/EXAT/PXAT/KEEPTTL, SETEX, PSETEX, GETEX, EXPIRE, PEXPIRE, EXPIREAT,
//! PEXPIREAT, TTL, PTTL, EXPIRETIME, PEXPIRETIME, PERSIST, answering as redis-server 7 does.
//! Times are absolute milliseconds since the Unix epoch, decided here by the node running the
//! command (a cluster's primary), so that every copy of the key expires at the same moment.

use super::args::{int_arg, ks, lower, not_int, syntax, wrong_args};
use crate::keyspace::{Keyspace, KsError};
use crate::resp::Reply;
use crate::state::{Session, Shared};

/// What a command asks of the key's expiry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Ttl {
    /// Nothing said: SET clears it, GETEX leaves it.
    Unset,
    /// Expire at this time (ms since the Unix epoch).
    At(u64),
    /// KEEPTTL: keep what the key has.
    Keep,
    /// PERSIST (GETEX): remove it.
    Persist,
}

fn invalid_time(cmd: &str) -> Reply {
    Reply::err(format!("ERR invalid expire time in '{cmd}' command"))
}

/// The absolute time of `n` in `unit` ("ex", "px", "exat", "pxat"), as Redis computes it:
/// Err(reply) for a non-integer, a non-positive number, or an overflow.
fn when(now: u64, unit: &str, n: &[u8], cmd: &str) -> Result<u64, Reply> {
    let n = int_arg(n).ok_or_else(not_int)?;
    if n <= 0 {
        return Err(invalid_time(cmd));
    }
    absolute(now, unit, n).and_then(|at| u64::try_from(at).ok()).ok_or_else(|| invalid_time(cmd))
}

/// `n` in `unit` as milliseconds since the Unix epoch (None on overflow): seconds ("ex",
/// "exat") are multiplied by 1000, relative units ("ex", "px") added to `now`.
fn absolute(now: u64, unit: &str, n: i64) -> Option<i64> {
    let ms = if unit.starts_with('e') { n.checked_mul(1000)? } else { n };
    if unit.ends_with("at") {
        Some(ms)
    } else {
        ms.checked_add(i64::try_from(now).ok()?)
    }
}

/// Parses SET's options: NX, XX, GET and one of EX/PX/EXAT/PXAT/KEEPTTL.
pub(super) fn set_options(now: u64, opts: &[&[u8]]) -> Result<(bool, bool, bool, Ttl), Reply> {
    let (mut nx, mut xx, mut get, mut ttl) = (false, false, false, Ttl::Unset);
    let mut i = 0;
    while let Some(opt) = opts.get(i) {
        match lower(opt).as_str() {
            "nx" if !xx => nx = true,
            "xx" if !nx => xx = true,
            "get" => get = true,
            "keepttl" if ttl == Ttl::Unset => ttl = Ttl::Keep,
            u @ ("ex" | "px" | "exat" | "pxat") if ttl == Ttl::Unset => {
                let Some(n) = opts.get(i + 1) else { return Err(syntax()) };
                ttl = Ttl::At(when(now, u, n, "set")?);
                i += 1;
            }
            _ => return Err(syntax()),
        }
        i += 1;
    }
    Ok((nx, xx, get, ttl))
}

/// Writes a string under the key's lock as SET does with `ttl`.
pub(super) fn store(k: &Keyspace, key: &[u8], value: &[u8], ttl: Ttl) -> Result<(), KsError> {
    match ttl {
        Ttl::Keep => k.set_keep_ttl_locked(key, value),
        Ttl::At(at) => k.set_expiring_locked(key, value, at),
        Ttl::Unset | Ttl::Persist => k.set_locked(key, value),
    }
}

fn setex(k: &Keyspace, a: &[&[u8]], cmd: &str, unit: &str) -> Reply {
    let [_, key, n, value] = a else { return wrong_args(cmd) };
    let at = match when(k.now_ms(), unit, n, cmd) {
        Ok(at) => at,
        Err(r) => return r,
    };
    ks((|| {
        let _g = k.lock(key);
        k.set_expiring_locked(key, value, at)?;
        Ok(Reply::ok())
    })())
}

pub(super) fn cmd_setex(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    setex(sh.db(sess), a, "setex", "ex")
}

pub(super) fn cmd_psetex(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    setex(sh.db(sess), a, "psetex", "px")
}

/// GETEX key [EX s | PX ms | EXAT t | PXAT t | PERSIST].
pub(super) fn cmd_getex(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    let [_, key, opts @ ..] = a else { return wrong_args("getex") };
    let ttl = match opts {
        [] => Ttl::Unset,
        [p] if lower(p) == "persist" => Ttl::Persist,
        [u, n] if matches!(lower(u).as_str(), "ex" | "px" | "exat" | "pxat") => {
            match when(sh.db(sess).now_ms(), &lower(u), n, "getex") {
                Ok(at) => Ttl::At(at),
                Err(r) => return r,
            }
        }
        _ => return syntax(),
    };
    ks((|| {
        let _g = sh.db(sess).lock(key);
        let Some(v) = sh.db(sess).get_str(key)? else { return Ok(Reply::Nil) };
        match ttl {
            Ttl::At(at) => {
                sh.db(sess).expire_locked(key, at)?;
            }
            Ttl::Persist => {
                sh.db(sess).expire_locked(key, 0)?;
            }
            Ttl::Unset | Ttl::Keep => {}
        }
        Ok(Reply::bulk(v))
    })())
}

/// EXPIRE's conditions.
#[derive(Default)]
struct Cond {
    nx: bool,
    xx: bool,
    gt: bool,
    lt: bool,
}

fn conditions(opts: &[&[u8]]) -> Result<Cond, Reply> {
    let mut c = Cond::default();
    for o in opts {
        match lower(o).as_str() {
            "nx" => c.nx = true,
            "xx" => c.xx = true,
            "gt" => c.gt = true,
            "lt" => c.lt = true,
            _ => return Err(Reply::err(format!("ERR Unsupported option {}", String::from_utf8_lossy(o)))),
        }
    }
    if c.nx && (c.xx || c.gt || c.lt) {
        return Err(Reply::err("ERR NX and XX, GT or LT options at the same time are not compatible"));
    }
    if c.gt && c.lt {
        return Err(Reply::err("ERR GT and LT options at the same time are not compatible"));
    }
    Ok(c)
}

/// EXPIRE, PEXPIRE, EXPIREAT, PEXPIREAT key n [NX | XX | GT | LT]: 1 if the expiry was set (or
/// the key deleted, for a time already past), 0 if the key is missing or a condition failed.
fn expire(k: &Keyspace, a: &[&[u8]], cmd: &str, unit: &str) -> Reply {
    let [_, key, n, opts @ ..] = a else { return wrong_args(cmd) };
    let Some(n) = int_arg(n) else { return not_int() };
    let c = match conditions(opts) {
        Ok(c) => c,
        Err(r) => return r,
    };
    let now = k.now_ms();
    // Redis accepts negative times (the key is then deleted); it refuses only overflows.
    let Some(at) = absolute(now, unit, n) else { return invalid_time(cmd) };
    ks((|| {
        let _g = k.lock(key);
        let Some(cur) = k.expiry(key)? else { return Ok(Reply::Int(0)) };
        let fails = (c.nx && cur != 0)
            || (c.xx && cur == 0)
            || (c.gt && (cur == 0 || at <= cur as i64))
            || (c.lt && cur != 0 && at >= cur as i64);
        if fails {
            return Ok(Reply::Int(0));
        }
        // A time already past deletes the key; 1 ms since the epoch is as past as any.
        let at = u64::try_from(at).unwrap_or(0).max(1);
        k.expire_locked(key, at)?;
        Ok(Reply::Int(1))
    })())
}

pub(super) fn cmd_expire(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    expire(sh.db(sess), a, "expire", "ex")
}

pub(super) fn cmd_pexpire(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    expire(sh.db(sess), a, "pexpire", "px")
}

pub(super) fn cmd_expireat(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    expire(sh.db(sess), a, "expireat", "exat")
}

pub(super) fn cmd_pexpireat(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    expire(sh.db(sess), a, "pexpireat", "pxat")
}

/// TTL and its kin: -2 for a missing key, -1 for one that does not expire, else `f(at, now)`.
fn ttl_reply(k: &Keyspace, a: &[&[u8]], cmd: &str, f: fn(u64, u64) -> i64) -> Reply {
    let [_, key] = a else { return wrong_args(cmd) };
    ks(k.expiry(key).map(|e| match e {
        None => Reply::Int(-2),
        Some(0) => Reply::Int(-1),
        Some(at) => Reply::Int(f(at, k.now_ms())),
    }))
}

fn left(at: u64, now: u64) -> i64 {
    i64::try_from(at.saturating_sub(now)).unwrap_or(i64::MAX)
}

pub(super) fn cmd_ttl(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    ttl_reply(sh.db(sess), a, "ttl", |at, now| (left(at, now) + 500) / 1000)
}

pub(super) fn cmd_pttl(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    ttl_reply(sh.db(sess), a, "pttl", left)
}

pub(super) fn cmd_expiretime(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    ttl_reply(sh.db(sess), a, "expiretime", |at, _| i64::try_from(at / 1000).unwrap_or(i64::MAX))
}

pub(super) fn cmd_pexpiretime(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    ttl_reply(sh.db(sess), a, "pexpiretime", |at, _| i64::try_from(at).unwrap_or(i64::MAX))
}

/// PERSIST key: 1 if the key's expiry was removed, 0 if it had none or does not exist.
pub(super) fn cmd_persist(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    let [_, key] = a else { return wrong_args("persist") };
    ks((|| {
        let _g = sh.db(sess).lock(key);
        match sh.db(sess).expiry(key)? {
            None | Some(0) => Ok(Reply::Int(0)),
            Some(_) => {
                sh.db(sess).expire_locked(key, 0)?;
                Ok(Reply::Int(1))
            }
        }
    })())
}
