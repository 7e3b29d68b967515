//! Bit commands on strings: SETBIT, GETBIT, BITCOUNT, BITPOS. Bit 0 is the most significant
//! bit of the first byte, as in Redis.

use super::args::{ks, lower, not_int, syntax, wrong_args};
use super::numbers::strict_int;
use super::strings::{clamp_range, MAX_STRING};
use super::table::{Command, Keys, READONLY, WRITE};
use crate::resp::Reply;
use crate::state::{Session, Shared};

#[rustfmt::skip]
pub(super) static COMMANDS: &[Command] = &[
    Command { name: "setbit", arity: 4, flags: WRITE, keys: Keys::First, handler: cmd_setbit },
    Command { name: "getbit", arity: 3, flags: READONLY, keys: Keys::First, handler: cmd_getbit },
    Command { name: "bitcount", arity: -2, flags: READONLY, keys: Keys::First, handler: cmd_bitcount },
    Command { name: "bitpos", arity: -3, flags: READONLY, keys: Keys::First, handler: cmd_bitpos },
];

/// A bit offset argument: within the longest string, or the reply Redis gives.
fn bit_offset(arg: &[u8]) -> Result<u64, Reply> {
    strict_int(arg)
        .and_then(|n| u64::try_from(n).ok())
        .filter(|n| n >> 3 < MAX_STRING)
        .ok_or_else(|| Reply::err("ERR bit offset is not an integer or out of range"))
}

/// The byte holding bit `offset` and the bit's mask in it.
fn locate(offset: u64) -> (usize, u8) {
    ((offset >> 3) as usize, 0x80 >> (offset & 7))
}

/// SETBIT key offset 0|1: replies with the bit's old value; grows the string with zero bytes.
fn cmd_setbit(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    let [_, key, offset, bit] = a else { return wrong_args("setbit") };
    let offset = match bit_offset(offset) {
        Ok(o) => o,
        Err(r) => return r,
    };
    let on = match strict_int(bit) {
        Some(b @ (0 | 1)) => b == 1,
        _ => return Reply::err("ERR bit is not an integer or out of range"),
    };
    let k = sh.db(sess);
    let _g = k.lock(key);
    ks((|| {
        let mut v = k.get_str(key)?.unwrap_or_default();
        let (byte, mask) = locate(offset);
        if v.len() <= byte {
            v.resize(byte + 1, 0);
        }
        let Some(b) = v.get_mut(byte) else { return Ok(Reply::Int(0)) };
        let old = *b & mask != 0;
        if on {
            *b |= mask;
        } else {
            *b &= !mask;
        }
        k.set_keep_ttl_locked(key, &v)?;
        Ok(Reply::Int(i64::from(old)))
    })())
}

fn cmd_getbit(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    let [_, key, offset] = a else { return wrong_args("getbit") };
    let offset = match bit_offset(offset) {
        Ok(o) => o,
        Err(r) => return r,
    };
    let (byte, mask) = locate(offset);
    ks(sh.db(sess).get_str(key).map(|v| {
        let b = v.and_then(|v| v.get(byte).copied()).unwrap_or(0);
        Reply::Int(i64::from(b & mask != 0))
    }))
}

/// BYTE or BIT: whether the offsets count bits.
fn unit(arg: Option<&&[u8]>) -> Result<bool, Reply> {
    match arg.map(|u| lower(u)).as_deref() {
        None | Some("byte") => Ok(false),
        Some("bit") => Ok(true),
        Some(_) => Err(syntax()),
    }
}

/// The inclusive bit range of `v` that offsets `start..=end` name (bits when `bits`, else
/// bytes); None when it holds no bit.
fn bit_range(v: &[u8], start: i64, end: i64, bits: bool) -> Option<(u64, u64)> {
    let len = v.len() as i64;
    if bits {
        clamp_range(len.saturating_mul(8), start, end).map(|(s, e)| (s as u64, e as u64))
    } else {
        clamp_range(len, start, end).map(|(s, e)| (s as u64 * 8, e as u64 * 8 + 7))
    }
}

/// The bits `s..=e` of byte `i` of the string (bit 0 its most significant) as a mask.
fn byte_mask(i: u64, s: u64, e: u64) -> u8 {
    let lo = if i == s >> 3 { 0xffu8 >> (s & 7) } else { 0xff };
    let hi = if i == e >> 3 { 0xffu8 << (7 - (e & 7)) } else { 0xff };
    lo & hi
}

/// BITCOUNT key [start end [BYTE | BIT]]: the set bits in the range.
fn cmd_bitcount(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    let [_, key, rest @ ..] = a else { return wrong_args("bitcount") };
    let v = match sh.db(sess).get_str(key) {
        Ok(Some(v)) => v,
        Ok(None) => return Reply::Int(0),
        Err(e) => return Reply::err(e.to_string()),
    };
    let range = match rest {
        [] => bit_range(&v, 0, -1, false),
        [start, end, u @ ..] if u.len() <= 1 => {
            let (Some(s), Some(e)) = (strict_int(start), strict_int(end)) else { return not_int() };
            if s < 0 && e < 0 && s > e {
                return Reply::Int(0);
            }
            match unit(u.first()) {
                Ok(bits) => bit_range(&v, s, e, bits),
                Err(r) => return r,
            }
        }
        _ => return syntax(),
    };
    let Some((s, e)) = range else { return Reply::Int(0) };
    let n: u32 =
        (s >> 3..=e >> 3).map(|i| v.get(i as usize).map_or(0, |b| (b & byte_mask(i, s, e)).count_ones())).sum();
    Reply::Int(i64::from(n))
}

/// BITPOS key bit [start [end [BYTE | BIT]]]: the first bit of that value in the range; -1 when
/// there is none, but for a clear bit sought without an end: the string then counts as followed
/// by zeros.
fn cmd_bitpos(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    let [_, key, bit, rest @ ..] = a else { return wrong_args("bitpos") };
    let want = match strict_int(bit) {
        Some(b @ (0 | 1)) => b == 1,
        Some(_) => return Reply::err("ERR The bit argument must be 1 or 0."),
        None => return not_int(),
    };
    let v = match sh.db(sess).get_str(key) {
        Ok(Some(v)) => v,
        Ok(None) => return Reply::Int(if want { -1 } else { 0 }),
        Err(e) => return Reply::err(e.to_string()),
    };
    if rest.len() > 3 {
        return syntax();
    }
    let Some(start) = rest.first().map_or(Some(0), |s| strict_int(s)) else { return not_int() };
    let bits = match unit(rest.get(2)) {
        Ok(b) => b,
        Err(r) => return r,
    };
    let Some(end) = rest.get(1).map_or(Some(i64::MAX), |e| strict_int(e)) else { return not_int() };
    let end_given = rest.len() >= 2;
    let Some((s, e)) = bit_range(&v, start, end, bits) else { return Reply::Int(-1) };
    for i in s >> 3..=e >> 3 {
        let mask = byte_mask(i, s, e);
        let b = v.get(i as usize).copied().unwrap_or(0);
        let hits = if want { b & mask } else { !b & mask };
        if hits != 0 {
            return Reply::Int((i * 8 + u64::from(hits.leading_zeros())) as i64);
        }
    }
    Reply::Int(if want || end_given { -1 } else { e as i64 + 1 })
}
