//! String commands: GET, SET and its variants, MGET, MSET, STRLEN, APPEND, GETRANGE, and the
//! INCR family (in the main table); SETRANGE and INCRBYFLOAT (in this module's).

use super::args::{int_arg, ks, not_int, pairs, wrong_args};
use super::expiry::{set_options, store, Ttl};
use super::numbers::{human, parse_float, strict_int};
use super::table::{Command, Keys, WRITE};
use crate::keyspace::{Keyspace, KsError, Value};
use crate::resp::Reply;
use crate::state::{Session, Shared};

#[rustfmt::skip]
pub(super) static COMMANDS: &[Command] = &[
    Command { name: "setrange", arity: 4, flags: WRITE, keys: Keys::First, handler: cmd_setrange },
    Command { name: "incrbyfloat", arity: 3, flags: WRITE, keys: Keys::First, handler: cmd_incrbyfloat },
];

pub(super) fn cmd_get(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    let [_, key] = a else { return wrong_args("get") };
    ks(sh.db(sess).get_str(key).map(Reply::opt))
}

/// SET key value [NX | XX] [GET] [EX s | PX ms | EXAT t | PXAT t | KEEPTTL].
pub(super) fn cmd_set(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    let [_, key, value, opts @ ..] = a else { return wrong_args("set") };
    let (nx, xx, get, ttl) = if opts.is_empty() {
        (false, false, false, Ttl::Unset)
    } else {
        match set_options(sh.db(sess).now_ms(), opts) {
            Ok(o) => o,
            Err(r) => return r,
        }
    };
    let k = &sh.db(sess);
    ks((|| {
        let _g = k.lock(key);
        if !nx && !xx && !get && ttl == Ttl::Unset {
            k.set(key, value)?;
            return Ok(Reply::ok());
        }
        let old = k.get(key)?;
        if get && !matches!(old, None | Some(Value::Str(_))) {
            return Err(KsError::WrongType);
        }
        let exists = old.is_some();
        let old = match old {
            Some(Value::Str(s)) => Some(s),
            _ => None,
        };
        if (nx && exists) || (xx && !exists) {
            return Ok(if get { Reply::opt(old) } else { Reply::Nil });
        }
        store(sh.db(sess), key, value, ttl)?;
        Ok(if get { Reply::opt(old) } else { Reply::ok() })
    })())
}

pub(super) fn cmd_setnx(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    let [_, key, value] = a else { return wrong_args("setnx") };
    let k = &sh.db(sess);
    ks((|| {
        let _g = k.lock(key);
        if k.get(key)?.is_some() {
            return Ok(Reply::Int(0));
        }
        k.set_locked(key, value)?;
        Ok(Reply::Int(1))
    })())
}

pub(super) fn cmd_getset(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    let [_, key, value] = a else { return wrong_args("getset") };
    let k = &sh.db(sess);
    ks((|| {
        let _g = k.lock(key);
        let old = k.get_str(key)?;
        k.set_locked(key, value)?;
        Ok(Reply::opt(old))
    })())
}

pub(super) fn cmd_getdel(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    let [_, key] = a else { return wrong_args("getdel") };
    let k = &sh.db(sess);
    ks((|| {
        let _g = k.lock(key);
        let old = k.get_str(key)?;
        if old.is_some() {
            k.delete_locked(key)?;
        }
        Ok(Reply::opt(old))
    })())
}

pub(super) fn cmd_mget(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    let [_, keys @ ..] = a else { return wrong_args("mget") };
    // A key that fails to read (or holds a hash) is nil, as Redis answers for other types.
    Reply::Array(
        keys.iter().map(|key| sh.db(sess).get_str(key).ok().flatten().map_or(Reply::Nil, Reply::Bulk)).collect(),
    )
}

pub(super) fn cmd_mset(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    set_many(sh.db(sess), a, "mset", false)
}

pub(super) fn cmd_msetnx(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    set_many(sh.db(sess), a, "msetnx", true)
}

/// MSET and MSETNX (`nx`: only when none of the keys exists), under all the keys' locks.
fn set_many(k: &Keyspace, a: &[&[u8]], name: &str, nx: bool) -> Reply {
    let Some(pairs) = a.get(1..).and_then(pairs) else { return wrong_args(name) };
    let keys: Vec<&[u8]> = pairs.iter().map(|(key, _)| *key).collect();
    let k = &k;
    ks((|| {
        let _g = k.lock_many(&keys);
        if nx {
            for key in &keys {
                if k.get(key)?.is_some() {
                    return Ok(Reply::Int(0));
                }
            }
        }
        for (key, value) in &pairs {
            k.set_locked(key, value)?;
        }
        Ok(if nx { Reply::Int(1) } else { Reply::ok() })
    })())
}

pub(super) fn cmd_strlen(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    let [_, key] = a else { return wrong_args("strlen") };
    ks(sh.db(sess).get_str(key).map(|v| Reply::Int(v.map_or(0, |v| v.len() as i64))))
}

pub(super) fn cmd_append(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    let [_, key, tail] = a else { return wrong_args("append") };
    let k = &sh.db(sess);
    ks((|| {
        let _g = k.lock(key);
        let mut v = k.get_str(key)?.unwrap_or_default();
        v.extend_from_slice(tail);
        k.set_keep_ttl_locked(key, &v)?;
        Ok(Reply::Int(v.len() as i64))
    })())
}

/// GETRANGE key start end: inclusive offsets, negative ones from the end.
pub(super) fn cmd_getrange(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    let [_, key, start, end] = a else { return wrong_args("getrange") };
    let (Some(s), Some(e)) = (strict_int(start), strict_int(end)) else { return not_int() };
    ks(sh.db(sess).get_str(key).map(|v| {
        let v = v.unwrap_or_default();
        let part = clamp_range(v.len() as i64, s, e).and_then(|(s, e)| v.get(s as usize..=e as usize));
        Reply::bulk(part.unwrap_or_default().to_vec())
    }))
}

/// Inclusive offsets `start..=end` into `len` items as GETRANGE, BITCOUNT and BITPOS read
/// them (negative ones from the end, clamped to the items); None when they hold none.
pub(super) fn clamp_range(len: i64, start: i64, end: i64) -> Option<(i64, i64)> {
    if start < 0 && end < 0 && start > end {
        return None;
    }
    let s = if start < 0 { len.saturating_add(start).max(0) } else { start };
    let e = if end < 0 { len.saturating_add(end).max(0) } else { end };
    let e = e.min(len - 1);
    (len > 0 && s <= e).then_some((s, e))
}

/// The longest string Redis stores (`proto-max-bulk-len`): SETRANGE and SETBIT refuse to grow
/// a string past it, before allocating anything.
pub(super) const MAX_STRING: u64 = 512 << 20;

/// SETRANGE key offset value: writes `value` at `offset`, padding with zero bytes; replies
/// with the new length.
fn cmd_setrange(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    let [_, key, offset, value] = a else { return wrong_args("setrange") };
    let Some(offset) = strict_int(offset) else { return not_int() };
    let Ok(offset) = u64::try_from(offset) else { return Reply::err("ERR offset is out of range") };
    let k = sh.db(sess);
    let _g = k.lock(key);
    ks((|| {
        let old = k.get_str(key)?;
        if value.is_empty() {
            return Ok(Reply::Int(old.map_or(0, |v| v.len() as i64)));
        }
        let Some(end) = offset.checked_add(value.len() as u64).filter(|&e| e <= MAX_STRING) else {
            return Ok(Reply::err("ERR string exceeds maximum allowed size (proto-max-bulk-len)"));
        };
        let (at, end) = (offset as usize, end as usize);
        let mut v = old.unwrap_or_default();
        if v.len() < end {
            v.resize(end, 0);
        }
        if let Some(dst) = v.get_mut(at..end) {
            dst.copy_from_slice(value);
        }
        k.set_keep_ttl_locked(key, &v)?;
        Ok(Reply::Int(v.len() as i64))
    })())
}

/// INCRBYFLOAT key increment (see `numbers` for how the sum is written).
fn cmd_incrbyfloat(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    let [_, key, by] = a else { return wrong_args("incrbyfloat") };
    let k = sh.db(sess);
    let _g = k.lock(key);
    ks((|| {
        let cur = match k.get_str(key)? {
            None => Some(0.0),
            Some(v) => parse_float(&v),
        };
        let (Some(cur), Some(by)) = (cur, parse_float(by)) else {
            return Ok(Reply::err("ERR value is not a valid float"));
        };
        let sum = cur + by;
        if !sum.is_finite() {
            return Ok(Reply::err("ERR increment would produce NaN or Infinity"));
        }
        let text = human(sum);
        k.set_keep_ttl_locked(key, text.as_bytes())?;
        Ok(Reply::bulk(text))
    })())
}

pub(super) fn cmd_incr(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    let [_, key] = a else { return wrong_args("incr") };
    add(sh.db(sess), key, 1)
}

pub(super) fn cmd_decr(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    let [_, key] = a else { return wrong_args("decr") };
    add(sh.db(sess), key, -1)
}

pub(super) fn cmd_incrby(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    let [_, key, by] = a else { return wrong_args("incrby") };
    match int_arg(by) {
        Some(by) => add(sh.db(sess), key, by),
        None => not_int(),
    }
}

pub(super) fn cmd_decrby(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    let [_, key, by] = a else { return wrong_args("decrby") };
    match int_arg(by).map(i64::checked_neg) {
        Some(Some(by)) => add(sh.db(sess), key, by),
        Some(None) => Reply::err("ERR decrement would overflow"),
        None => not_int(),
    }
}

/// Adds `by` to the integer `key` holds (0 when it is missing), under the key's lock.
fn add(k: &Keyspace, key: &[u8], by: i64) -> Reply {
    let k = &k;
    ks((|| {
        let _g = k.lock(key);
        let cur = match k.get_str(key)? {
            None => 0,
            Some(v) => match int_arg(&v) {
                Some(n) => n,
                None => return Ok(not_int()),
            },
        };
        let Some(n) = cur.checked_add(by) else {
            return Ok(Reply::err("ERR increment or decrement would overflow"));
        };
        k.set_keep_ttl_locked(key, n.to_string().as_bytes())?;
        Ok(Reply::Int(n))
    })())
}
