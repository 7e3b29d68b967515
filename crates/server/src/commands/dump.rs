//! DUMP and RESTORE in Redis' own payload format, so that a value dumped here restores into
//! Redis 7 and one dumped there restores here (tools that move keys between servers, such as
//! MIGRATE-style copiers, pass these payloads through).
//!
//! A payload is one RDB object, then the RDB version and a checksum:
//!
//! ```text
//! type (1 byte) | object | u16 LE RDB version (10, Redis 7.0) | u64 LE CRC-64/Jones of all before
//! ```
//!
//! Objects written here use the plain RDB encodings (and RESTORE also reads Redis' compact ones,
//! see `compact`):
//!
//! ```text
//! 0 string   string
//! 1 list     len | string × len                      (head first)
//! 2 set      len | string × len
//! 4 hash     len | (field string, value string) × len
//! 5 zset     len | (member string, f64 LE score) × len
//! ```
//!
//! `len` is RDB's length: `00xxxxxx` (6 bits), `01xxxxxx xxxxxxxx` (14 bits BE), `80` + u32 BE
//! or `81` + u64 BE. A string is a length and its bytes; read back, a string may also be an
//! integer (`C0` i8, `C1` i16 LE, `C2` i32 LE) or LZF-compressed (`C3` clen len data), as
//! Redis writes them. Redis 7's compact encodings of small collections (listpacks, intsets,
//! quicklists of listpacks; see `compact`) are read too; the older ziplists are refused with
//! "Bad data format", and so are payloads of other RDB versions than 1–10 or with a wrong
//! checksum; streams are not dumped.

use super::args::{int_arg, ks, lower, syntax, wrong_args};
use super::table::{Command, Keys, READONLY, WRITE};
use crate::keyspace::list::End;
use crate::keyspace::{Keyspace, KsError, Value};
use crate::resp::Reply;
use crate::state::{Session, Shared};

#[rustfmt::skip]
pub(super) static COMMANDS: &[Command] = &[
    Command { name: "dump", arity: 2, flags: READONLY, keys: Keys::First, handler: cmd_dump },
    Command { name: "restore", arity: -4, flags: WRITE, keys: Keys::First, handler: cmd_restore },
];

const RDB_VERSION: u16 = 10;

/// A value as a payload carries it.
#[derive(Debug, PartialEq)]
pub enum Object {
    Str(Vec<u8>),
    List(Vec<Vec<u8>>),
    Set(Vec<Vec<u8>>),
    Hash(Vec<(Vec<u8>, Vec<u8>)>),
    ZSet(Vec<(Vec<u8>, f64)>),
}

/// CRC-64/Jones (reflected, polynomial 0xad93d23594c935a9, init 0), as Redis' `crc64`.
pub fn crc64(data: &[u8]) -> u64 {
    const POLY: u64 = 0x95ac_9329_ac4b_c9b5; // 0xad93d23594c935a9 reflected
    let mut crc = 0u64;
    for &b in data {
        crc ^= u64::from(b);
        for _ in 0..8 {
            crc = if crc & 1 == 1 { (crc >> 1) ^ POLY } else { crc >> 1 };
        }
    }
    crc
}

fn put_len(out: &mut Vec<u8>, n: u64) {
    match n {
        0..=63 => out.push(n as u8),
        64..=16383 => out.extend_from_slice(&[0x40 | (n >> 8) as u8, n as u8]),
        _ => match u32::try_from(n) {
            Ok(n) => {
                out.push(0x80);
                out.extend_from_slice(&n.to_be_bytes());
            }
            Err(_) => {
                out.push(0x81);
                out.extend_from_slice(&n.to_be_bytes());
            }
        },
    }
}

fn put_str(out: &mut Vec<u8>, s: &[u8]) {
    put_len(out, s.len() as u64);
    out.extend_from_slice(s);
}

/// The payload DUMP answers for `o`.
pub fn encode(o: &Object) -> Vec<u8> {
    let mut out = Vec::new();
    match o {
        Object::Str(s) => {
            out.push(0);
            put_str(&mut out, s);
        }
        Object::List(items) | Object::Set(items) => {
            out.push(if matches!(o, Object::List(_)) { 1 } else { 2 });
            put_len(&mut out, items.len() as u64);
            items.iter().for_each(|i| put_str(&mut out, i));
        }
        Object::Hash(pairs) => {
            out.push(4);
            put_len(&mut out, pairs.len() as u64);
            for (f, v) in pairs {
                put_str(&mut out, f);
                put_str(&mut out, v);
            }
        }
        Object::ZSet(members) => {
            out.push(5);
            put_len(&mut out, members.len() as u64);
            for (m, s) in members {
                put_str(&mut out, m);
                out.extend_from_slice(&s.to_le_bytes());
            }
        }
    }
    out.extend_from_slice(&RDB_VERSION.to_le_bytes());
    let crc = crc64(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

/// Why a payload was refused: its footer, or its body.
#[derive(Debug, PartialEq)]
pub enum Bad {
    Footer,
    Format,
}

/// Reads RDB's encodings from a payload's body.
struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], Bad> {
        if n > self.0.len() {
            return Err(Bad::Format);
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Ok(a)
    }

    fn byte(&mut self) -> Result<u8, Bad> {
        self.take(1)?.first().copied().ok_or(Bad::Format)
    }

    /// A length, or `Err(Ok(kind))` for a special string encoding.
    fn len(&mut self) -> Result<Result<u64, u8>, Bad> {
        let b = self.byte()?;
        Ok(match b >> 6 {
            0 => Ok(u64::from(b & 0x3f)),
            1 => Ok(u64::from(b & 0x3f) << 8 | u64::from(self.byte()?)),
            3 => Err(b & 0x3f),
            _ => match b {
                0x80 => Ok(u64::from(u32::from_be_bytes(self.take(4)?.try_into().map_err(|_| Bad::Format)?))),
                0x81 => Ok(u64::from_be_bytes(self.take(8)?.try_into().map_err(|_| Bad::Format)?)),
                _ => return Err(Bad::Format),
            },
        })
    }

    fn count(&mut self) -> Result<usize, Bad> {
        let n = self.len()?.map_err(|_| Bad::Format)?;
        // Each element takes at least one byte: a count past what is left is a lie.
        usize::try_from(n).ok().filter(|&n| n <= self.0.len()).ok_or(Bad::Format)
    }

    fn string(&mut self) -> Result<Vec<u8>, Bad> {
        match self.len()? {
            Ok(n) => Ok(self.take(usize::try_from(n).map_err(|_| Bad::Format)?)?.to_vec()),
            Err(0) => Ok((self.byte()? as i8).to_string().into_bytes()),
            Err(1) => {
                Ok(i16::from_le_bytes(self.take(2)?.try_into().map_err(|_| Bad::Format)?).to_string().into_bytes())
            }
            Err(2) => {
                Ok(i32::from_le_bytes(self.take(4)?.try_into().map_err(|_| Bad::Format)?).to_string().into_bytes())
            }
            Err(3) => {
                let clen = self.len()?.map_err(|_| Bad::Format)?;
                let len = self.len()?.map_err(|_| Bad::Format)?;
                let data = self.take(usize::try_from(clen).map_err(|_| Bad::Format)?)?;
                lzf_decompress(data, usize::try_from(len).map_err(|_| Bad::Format)?)
            }
            Err(_) => Err(Bad::Format),
        }
    }
}

/// LZF decompression (liblzf's format, as Redis compresses long strings), to exactly `len`
/// bytes.
fn lzf_decompress(mut data: &[u8], len: usize) -> Result<Vec<u8>, Bad> {
    if len > 512 << 20 {
        return Err(Bad::Format);
    }
    let mut out = Vec::with_capacity(len);
    while let Some((&ctrl, rest)) = data.split_first() {
        data = rest;
        if ctrl < 32 {
            let n = usize::from(ctrl) + 1;
            let lit = data.get(..n).ok_or(Bad::Format)?;
            out.extend_from_slice(lit);
            data = data.get(n..).unwrap_or_default();
        } else {
            let mut n = usize::from(ctrl >> 5);
            if n == 7 {
                let (&more, rest) = data.split_first().ok_or(Bad::Format)?;
                n += usize::from(more);
                data = rest;
            }
            let (&low, rest) = data.split_first().ok_or(Bad::Format)?;
            data = rest;
            let back = (usize::from(ctrl & 0x1f) << 8) + usize::from(low) + 1;
            let start = out.len().checked_sub(back).ok_or(Bad::Format)?;
            for i in 0..n + 2 {
                let b = *out.get(start + i).ok_or(Bad::Format)?;
                out.push(b);
            }
        }
        if out.len() > len {
            return Err(Bad::Format);
        }
    }
    if out.len() == len {
        Ok(out)
    } else {
        Err(Bad::Format)
    }
}

/// Redis' compact encodings of small collections, read back: 11 an intset (a set of
/// integers), 16 a hash as one listpack (field, value, ...), 17 a sorted set as one listpack
/// (member, score, ...), 18 a list as a quicklist (nodes: 1 one plain element, 2 a
/// listpack), 20 a set as one listpack.
fn compact(r: &mut Reader<'_>, t: u8) -> Result<Object, Bad> {
    Ok(match t {
        11 => Object::Set(intset(&r.string()?)?),
        16 => Object::Hash(pairs(listpack(&r.string()?)?)?),
        17 => {
            let pairs = pairs(listpack(&r.string()?)?)?;
            let score =
                |s: &[u8]| std::str::from_utf8(s).ok().and_then(|s| s.parse::<f64>().ok()).filter(|f| !f.is_nan());
            Object::ZSet(
                pairs.into_iter().map(|(m, s)| Ok((m, score(&s).ok_or(Bad::Format)?))).collect::<Result<_, Bad>>()?,
            )
        }
        18 => {
            let nodes = r.count()?;
            let mut items = Vec::new();
            for _ in 0..nodes {
                match r.len()? {
                    Ok(1) => items.push(r.string()?),
                    Ok(2) => items.extend(listpack(&r.string()?)?),
                    _ => return Err(Bad::Format),
                }
            }
            Object::List(items)
        }
        20 => Object::Set(listpack(&r.string()?)?),
        _ => return Err(Bad::Format),
    })
}

/// Field-value (or member-score) pairs.
type Pairs = Vec<(Vec<u8>, Vec<u8>)>;

fn pairs(items: Vec<Vec<u8>>) -> Result<Pairs, Bad> {
    if !items.len().is_multiple_of(2) {
        return Err(Bad::Format);
    }
    let mut it = items.into_iter();
    Ok(std::iter::from_fn(|| Some((it.next()?, it.next()?))).collect())
}

/// An intset's members: `u32 LE width (2, 4, 8) | u32 LE count | count × width-byte LE ints`.
fn intset(b: &[u8]) -> Result<Vec<Vec<u8>>, Bad> {
    let u32_at = |at: usize| b.get(at..at + 4).and_then(|x| x.try_into().ok()).map(u32::from_le_bytes);
    let (Some(width), Some(count)) = (u32_at(0), u32_at(4)) else { return Err(Bad::Format) };
    let width = width as usize;
    if ![2, 4, 8].contains(&width) || b.len() != 8 + width * count as usize {
        return Err(Bad::Format);
    }
    Ok(b.get(8..)
        .unwrap_or_default()
        .chunks(width)
        .map(|c| {
            let mut v = [0u8; 8];
            v.get_mut(..width).unwrap_or_default().copy_from_slice(c);
            // Sign-extend the narrower widths.
            let shift = 64 - 8 * width as u32;
            ((i64::from_le_bytes(v) << shift) >> shift).to_string().into_bytes()
        })
        .collect())
}

/// A listpack's elements as strings (integers in decimal):
/// `u32 LE total bytes | u16 LE count | entries | FF`, each entry its encoding and data, then
/// its length again (1–5 bytes) for walking backwards.
fn listpack(b: &[u8]) -> Result<Vec<Vec<u8>>, Bad> {
    let mut at = 6;
    let mut out = Vec::new();
    loop {
        let &e = b.get(at).ok_or(Bad::Format)?;
        if e == 0xff {
            return if at + 1 == b.len() { Ok(out) } else { Err(Bad::Format) };
        }
        let byte = |i: usize| b.get(at + i).copied().map(u64::from).ok_or(Bad::Format);
        let int = |n: usize| -> Result<Vec<u8>, Bad> {
            let mut v = 0u64;
            for i in (0..n).rev() {
                v = v << 8 | byte(1 + i)?;
            }
            let shift = 64 - 8 * n as u32;
            Ok((((v << shift) as i64) >> shift).to_string().into_bytes())
        };
        let (item, len) = match e {
            0x00..=0x7f => (u64::from(e).to_string().into_bytes(), 1),
            0x80..=0xbf => string(b, at + 1, usize::from(e & 0x3f), 1)?,
            0xc0..=0xdf => {
                let v = (u64::from(e & 0x1f) << 8 | byte(1)?) as i64;
                ((((v << 51) >> 51).to_string().into_bytes()), 2)
            }
            0xe0..=0xef => string(b, at + 2, (usize::from(e & 0x0f) << 8) | byte(1)? as usize, 2)?,
            0xf0 => {
                let n = (0..4).try_fold(0usize, |n, i| Ok::<_, Bad>(n | (byte(1 + i)? as usize) << (8 * i)))?;
                string(b, at + 5, n, 5)?
            }
            0xf1 => (int(2)?, 3),
            0xf2 => (int(3)?, 4),
            0xf3 => (int(4)?, 5),
            0xf4 => (int(8)?, 9),
            _ => return Err(Bad::Format),
        };
        out.push(item);
        at += len + backlen_size(len);
    }
}

/// A listpack string entry: `n` bytes at `from`, and the entry's length with its `head` bytes.
fn string(b: &[u8], from: usize, n: usize, head: usize) -> Result<(Vec<u8>, usize), Bad> {
    Ok((b.get(from..from.checked_add(n).ok_or(Bad::Format)?).ok_or(Bad::Format)?.to_vec(), head + n))
}

fn backlen_size(len: usize) -> usize {
    match len {
        0..=127 => 1,
        128..=16383 => 2,
        16384..=2_097_151 => 3,
        2_097_152..=268_435_455 => 4,
        _ => 5,
    }
}

/// The object a RESTORE payload carries.
pub fn decode(p: &[u8]) -> Result<Object, Bad> {
    let body_len = p.len().checked_sub(10).ok_or(Bad::Footer)?;
    let (body, footer) = p.split_at(body_len);
    let version = u16::from_le_bytes([footer.first().copied().unwrap_or(0), footer.get(1).copied().unwrap_or(0)]);
    let crc = footer.get(2..10).and_then(|c| c.try_into().ok()).map(u64::from_le_bytes);
    let sum = p.get(..body_len + 2).map(crc64);
    // Redis accepts a zero checksum (written with checksums off).
    if version == 0 || version > RDB_VERSION || (crc != Some(0) && crc != sum) {
        return Err(Bad::Footer);
    }
    let mut r = Reader(body);
    let o = match r.byte()? {
        0 => Object::Str(r.string()?),
        t @ (1 | 2) => {
            let n = r.count()?;
            let items = (0..n).map(|_| r.string()).collect::<Result<Vec<_>, _>>()?;
            if t == 1 {
                Object::List(items)
            } else {
                Object::Set(items)
            }
        }
        4 => {
            let n = r.count()?;
            Object::Hash((0..n).map(|_| Ok((r.string()?, r.string()?))).collect::<Result<Vec<_>, Bad>>()?)
        }
        5 => {
            let n = r.count()?;
            let mut members = Vec::with_capacity(n);
            for _ in 0..n {
                let m = r.string()?;
                let s = f64::from_le_bytes(r.take(8)?.try_into().map_err(|_| Bad::Format)?);
                if s.is_nan() {
                    return Err(Bad::Format);
                }
                members.push((m, s));
            }
            Object::ZSet(members)
        }
        t => compact(&mut r, t)?,
    };
    if r.0.is_empty() {
        Ok(o)
    } else {
        Err(Bad::Format)
    }
}

/// The value at `user` as a payload object (None: no key; Err reply: a stream).
fn read_object(k: &Keyspace, user: &[u8]) -> Result<Option<Result<Object, Reply>>, KsError> {
    let Some(v) = k.get(user)? else { return Ok(None) };
    Ok(Some(Ok(match v {
        Value::Str(s) => Object::Str(s),
        Value::Chunked(_) => Object::Str(k.get_str(user)?.unwrap_or_default()),
        Value::List { .. } => Object::List(k.list_all(user)?),
        Value::Set(_) => Object::Set(k.smembers(user)?),
        Value::Hash(_) => Object::Hash(k.hgetall(user)?),
        Value::ZSet(_) => Object::ZSet(k.zall(user, false)?.collect::<Result<Vec<_>, _>>()?),
        Value::Stream { .. } => {
            return Ok(Some(Err(Reply::err("ERR DUMP of a stream is not supported: read it with XRANGE"))));
        }
    })))
}

/// Stores `o` at `user`, which holds nothing now, expiring at `at` (0: never). Caller holds
/// the key's lock.
fn refs(v: &[Vec<u8>]) -> Vec<&[u8]> {
    v.iter().map(Vec::as_slice).collect()
}

fn write_object(k: &Keyspace, user: &[u8], o: Object, at: u64) -> Result<(), KsError> {
    match o {
        Object::Str(s) => return if at > 0 { k.set_expiring_locked(user, &s, at) } else { k.set_locked(user, &s) },
        Object::List(items) => {
            k.push_locked(user, End::Right, &refs(&items), false)?;
        }
        Object::Set(items) => {
            k.sadd_locked(user, &refs(&items))?;
        }
        Object::Hash(pairs) => {
            let p: Vec<(&[u8], &[u8])> = pairs.iter().map(|(f, v)| (f.as_slice(), v.as_slice())).collect();
            k.hset_locked(user, &p)?;
        }
        Object::ZSet(members) => {
            let mut w = k.zwrite_locked(user)?;
            for (m, s) in &members {
                w.set(m, *s)?;
            }
            w.commit()?;
        }
    }
    if at > 0 {
        k.expire_locked(user, at)?;
    }
    Ok(())
}

fn cmd_dump(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    let [_, key] = a else { return wrong_args("dump") };
    ks(read_object(sh.db(sess), key).map(|o| match o {
        None => Reply::Nil,
        Some(Ok(o)) => Reply::Bulk(encode(&o)),
        Some(Err(r)) => r,
    }))
}

/// RESTORE key ttl payload [REPLACE] [ABSTTL] [IDLETIME s] [FREQ f].
fn cmd_restore(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    let [_, key, ttl, payload, opts @ ..] = a else { return wrong_args("restore") };
    let (mut replace, mut abs, mut i) = (false, false, 0);
    while let Some(o) = opts.get(i) {
        match lower(o).as_str() {
            "replace" => replace = true,
            "absttl" => abs = true,
            "idletime" | "freq" => match opts.get(i + 1).and_then(|v| int_arg(v)) {
                Some(v) if v >= 0 => i += 1,
                Some(_) => return Reply::err("ERR Invalid IDLETIME value, must be >= 0"),
                None => return super::args::not_int(),
            },
            _ => return syntax(),
        }
        i += 1;
    }
    let k = sh.db(sess);
    let _g = k.lock(key);
    ks((|| {
        // Redis' order of checks: the key, then the TTL, then the payload.
        let exists = k.get(key)?.is_some();
        if exists && !replace {
            return Ok(Reply::err("BUSYKEY Target key name already exists."));
        }
        let Some(ttl) = int_arg(ttl) else { return Ok(super::args::not_int()) };
        if ttl < 0 {
            return Ok(Reply::err("ERR Invalid TTL value, must be >= 0"));
        }
        let o = match decode(payload) {
            Ok(o) => o,
            Err(Bad::Footer) => return Ok(Reply::err("ERR DUMP payload version or checksum are wrong")),
            Err(Bad::Format) => return Ok(Reply::err("ERR Bad data format")),
        };
        if exists {
            k.delete_locked(key)?;
        }
        let now = k.now_ms();
        let at = match (ttl, abs) {
            (0, _) => 0,
            (t, true) => t as u64,
            (t, false) => now.saturating_add(t as u64),
        };
        if at != 0 && at <= now {
            // Already expired: as in Redis, nothing is stored.
            return Ok(Reply::ok());
        }
        write_object(k, key, o, at)?;
        sh.wake(sess.db, key);
        Ok(Reply::ok())
    })())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc64_is_redis_check_value() {
        assert_eq!(crc64(b"123456789"), 0xe9c6_d914_c4b8_d9ca);
    }

    #[test]
    fn objects_round_trip() {
        let long = vec![b'x'; 70_000];
        for o in [
            Object::Str(b"hello".to_vec()),
            Object::Str(long.clone()),
            Object::List(vec![b"a".to_vec(), long.clone(), Vec::new()]),
            Object::Set((0..100).map(|i| format!("m{i}").into_bytes()).collect()),
            Object::Hash(vec![(b"f".to_vec(), b"v".to_vec())]),
            Object::ZSet(vec![(b"a".to_vec(), 1.5), (b"b".to_vec(), f64::INFINITY)]),
        ] {
            assert_eq!(decode(&encode(&o)), Ok(o));
        }
    }

    #[test]
    fn damaged_payloads_are_refused() {
        let p = encode(&Object::List(vec![b"a".to_vec(), b"b".to_vec()]));
        for n in 0..p.len() {
            assert!(decode(p.get(..n).unwrap_or_default()).is_err(), "a payload cut at {n}");
        }
        let mut flipped = p.clone();
        if let Some(b) = flipped.get_mut(3) {
            *b ^= 1;
        }
        assert_eq!(decode(&flipped), Err(Bad::Footer));
    }

    #[test]
    fn compact_encodings_are_read() {
        let lp = [
            &[0u8, 0, 0, 0, 4, 0][..],
            &[0x05, 0x01],
            &[0xdf, 0xff, 0x02],
            &[0x82, b'a', b'b', 0x03],
            &[0xf1, 0xd4, 0xfe, 0x03],
            &[0xff],
        ]
        .concat();
        let items: Vec<Vec<u8>> = ["5", "-1", "ab", "-300"].iter().map(|s| s.as_bytes().to_vec()).collect();
        assert_eq!(listpack(&lp), Ok(items));
        assert_eq!(listpack(&lp[..lp.len() - 1]), Err(Bad::Format));
        let is = [&2u32.to_le_bytes()[..], &2u32.to_le_bytes(), &(-7i16).to_le_bytes(), &9i16.to_le_bytes()].concat();
        assert_eq!(intset(&is), Ok(vec![b"-7".to_vec(), b"9".to_vec()]));
        assert_eq!(intset(&is[..9]), Err(Bad::Format));
    }

    #[test]
    fn redis_string_encodings_are_read() {
        // An int8, and "aaaaaaaaaa" LZF-compressed: a literal "a", then a back reference of 9.
        let mut r = Reader(&[0xc0, 0xfb]);
        assert_eq!(r.string(), Ok(b"-5".to_vec()));
        let mut r = Reader(&[0xc3, 0x05, 0x0a, 0x00, b'a', 0xe0, 0x00, 0x00]);
        assert_eq!(r.string(), Ok(b"aaaaaaaaaa".to_vec()));
    }
}
