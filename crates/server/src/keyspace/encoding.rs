//! How Redis keys, hash fields and value headers are laid out in engine keys and values.
//!
//! ```text
//! engine key                               engine value
//! P | esc(user) | 00 01                    00 | string bytes          (a string)
//!                                          02 | u64 LE field count    (a hash, layout 3)
//!                                          01 | u64 LE field count    (a hash, layout 2)
//!                                          03 | u64 LE head | u64 LE tail   (a list)
//!                                          04 | u64 LE member count   (a set)
//!                                          05 | u64 LE member count   (a sorted set)
//!                                          [ | u32 LE n | lowest popped | u32 LE m | highest popped ]
//!                                          06 | u64 LE length | u32 LE chunks  (a long string)
//!                                          07 | u64 LE count | u64 LE ms | u64 LE seq (a stream)
//! P | esc(user) | 00 01 | fesc(field)      field value                (a hash field, layout 3)
//! P | esc(user) | 00 01 | field            field value                (a field, layout 2)
//! P | esc(user) | 00 01 | u64 BE index     element                    (a list element)
//! P | esc(user) | 00 01 | fesc(member)     empty                      (a set member)
//! P | esc(user) | 00 01 | 01 | member      f64 LE score               (a sorted set member)
//! P | esc(user) | 00 01 | 02 | score | member   empty                  (its place by score)
//! P | esc(user) | 00 01 | u32 BE chunk     up to 1 MiB of the string  (a long string's part)
//! P | esc(user) | 00 01 | u64 BE ms | u64 BE seq   fields and values  (a stream entry)
//! ```
//!
//! A string longer than `INLINE_STRING` bytes (Redis allows 512 MB) is cut into chunks of that
//! size, each a record of its own under the key, since an engine record must fit in one log
//! segment; its record says how long it is and how many chunks follow.
//!
//! `P`, the database's prefix, is `'r'` for database 0 (the only one of a cluster) and
//! `'d' | n` for database n of 1–15 on a single node: each database is one contiguous engine
//! range, so FLUSHDB is one range delete. These are the ranges' *slots*; which slot a database
//! number names is kept in one record, so that SWAPDB swaps two numbers without moving a key:
//!
//! ```text
//! 'd' | 00 | "slots"                       16 bytes: byte n = the slot of database n
//! ```
//!
//! (slot 0 is `'r'`, slot n is `'d' | n`; absent: every database in its own slot). `'d' | 00`
//! is no database's prefix, so the record lies in no database's range.
//!
//! Everything a key holds lies under its record key, which no other user key's records share:
//! deleting, expiring, renaming or moving a key of any type walks the keys after its record up
//! to `prefix_end(record)` and keeps their suffixes. A list's elements sit at indices
//! `head..tail` (a push at the left takes `head - 1`; a new list starts both at 2^63). A
//! sorted set's `score` is the f64 made to sort as bytes (`score_key`: the sign bit flipped
//! for positives, every bit for negatives; -0 is stored as 0).
//!
//! `esc` doubles every 0x00 of the user key as 00 FF and `00 01` ends it, so the encoding keeps
//! user keys' order and no encoded key is a prefix of another: a key's fields sort right after
//! it and before the next key. A hash therefore lies in one region of a cluster, whatever the
//! split points, as long as a split point holds no 00 byte (`cluster init --redis` cuts so).
//!
//! `fesc` puts a 00 byte before a field name that is empty or starts with 00 and leaves every
//! other name as it is. It is injective and never empty, so no field's key equals its hash's
//! own record key, whatever the name. Layout 2 stored field names raw: the empty name wrote
//! over the hash's record. A layout-2 hash (header 01) is read with raw names and rewritten in
//! layout 3 by the next command that changes it (`Keyspace::upgrade_hash`); names that do not
//! start with 00 have the same key in both layouts.

/// Value header of a string.
pub const STRING: u8 = 0;
/// Value header of a layout-2 hash (fields under their raw names).
pub const HASH_V2: u8 = 1;
/// Value header of a hash (fields under `fesc` names).
pub const HASH: u8 = 2;
/// Value header of a list.
pub const LIST: u8 = 3;
/// Value header of a set.
pub const SET: u8 = 4;
/// Value header of a sorted set.
pub const ZSET: u8 = 5;
/// Value header of a stream.
pub const STREAM: u8 = 7;
/// Value header of a string kept in chunks.
pub const CHUNKED: u8 = 6;
/// The longest string kept in its record; a longer one is kept in chunks of this size.
pub const INLINE_STRING: usize = 1 << 20;
/// The first byte of every engine key of database 0's key space.
pub const PREFIX: u8 = b'r';
/// The first byte of the engine keys of databases 1–15 (the database number follows).
pub const DB_PREFIX: u8 = b'd';

/// The engine key of the database-to-slot map.
pub const SLOTS_KEY: &[u8] = b"d\x00slots";

/// The key prefix of database `n`.
pub fn db_prefix(n: u8) -> smallvec::SmallVec<[u8; 2]> {
    if n == 0 {
        smallvec::smallvec![PREFIX]
    } else {
        smallvec::smallvec![DB_PREFIX, n]
    }
}

/// The whole key space of database 0, as engine keys.
pub fn all_keys() -> (std::ops::Bound<Vec<u8>>, std::ops::Bound<Vec<u8>>) {
    all_keys_in(&[PREFIX])
}

/// The whole key space of the database with prefix `p`, as engine keys.
pub fn all_keys_in(p: &[u8]) -> (std::ops::Bound<Vec<u8>>, std::ops::Bound<Vec<u8>>) {
    let end = prefix_end(p).map_or(std::ops::Bound::Unbounded, std::ops::Bound::Excluded);
    (std::ops::Bound::Included(p.to_vec()), end)
}

/// An engine key, on the stack for user keys of up to 61 bytes.
pub type EngineKey = smallvec::SmallVec<[u8; 64]>;

/// The engine key of a user key of database 0.
pub fn key(user: &[u8]) -> EngineKey {
    key_in(&[PREFIX], user)
}

/// The engine key of a user key of the database with prefix `p`.
pub fn key_in(p: &[u8], user: &[u8]) -> EngineKey {
    let mut k = smallvec::SmallVec::with_capacity(user.len() + 2 + p.len());
    k.extend_from_slice(p);
    for &b in user {
        k.push(b);
        if b == 0 {
            k.push(0xff);
        }
    }
    k.extend_from_slice(&[0, 1]);
    k
}

/// The user key an engine key belongs to and whether the engine key is the key's own record
/// (not one of its fields); None for keys outside the key space of prefix `p`.
pub fn user_of(p: &[u8], k: &[u8]) -> Option<(Vec<u8>, bool)> {
    let rest = k.strip_prefix(p)?;
    let mut user = Vec::with_capacity(rest.len());
    let mut it = rest.iter().enumerate();
    while let Some((i, &b)) = it.next() {
        if b != 0 {
            user.push(b);
            continue;
        }
        match it.next() {
            Some((_, 0xff)) => user.push(0),
            Some((_, 1)) => return Some((user, i + 2 == rest.len())),
            _ => return None,
        }
    }
    None
}

/// The engine key of a hash field or set member; `legacy` for a layout-2 hash (raw name).
pub fn field_key(p: &[u8], user: &[u8], field: &[u8], legacy: bool) -> Vec<u8> {
    let mut k = key_in(p, user).to_vec();
    if !legacy && field.first().is_none_or(|&b| b == 0) {
        k.push(0);
    }
    k.extend_from_slice(field);
    k
}

/// The field name of the part of a field's engine key after the hash's record key.
pub fn field_name(suffix: &[u8], legacy: bool) -> &[u8] {
    if legacy {
        suffix
    } else {
        suffix.strip_prefix(&[0]).unwrap_or(suffix)
    }
}

/// The smallest key greater than every key that starts with `p` (None: there is none).
pub fn prefix_end(p: &[u8]) -> Option<Vec<u8>> {
    let mut e = p.to_vec();
    while let Some(last) = e.pop() {
        if last < 0xff {
            e.push(last + 1);
            return Some(e);
        }
    }
    None
}

/// A string's engine value.
pub fn string_value(v: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(v.len() + 1);
    out.push(STRING);
    out.extend_from_slice(v);
    out
}

/// A hash record's engine value (layout 3).
pub fn hash_meta(n: u64) -> Vec<u8> {
    counted(HASH, n)
}

/// Whether an engine value is the record of a key with records under it (any type but a
/// string).
pub fn is_aggregate(v: &[u8]) -> bool {
    v.first().is_some_and(|&t| t != STRING)
}

/// A record of a type with a count (hash, set, sorted set).
pub fn counted(header: u8, n: u64) -> Vec<u8> {
    let mut v = vec![header];
    v.extend_from_slice(&n.to_le_bytes());
    v
}

/// A long string's record: its length and number of chunks.
pub fn chunked_meta(len: u64, chunks: u32) -> Vec<u8> {
    let mut v = vec![CHUNKED];
    v.extend_from_slice(&len.to_le_bytes());
    v.extend_from_slice(&chunks.to_le_bytes());
    v
}

/// A list's record: its elements are at `head..tail`.
pub fn list_meta(head: u64, tail: u64) -> Vec<u8> {
    let mut v = vec![LIST];
    v.extend_from_slice(&head.to_le_bytes());
    v.extend_from_slice(&tail.to_le_bytes());
    v
}

/// A score as bytes that sort as the numbers do.
#[allow(dead_code, reason = "the sorted-set layout, whose commands come next")]
pub fn score_key(score: f64) -> [u8; 8] {
    let bits = if score == 0.0 { 0 } else { score.to_bits() };
    let sortable = if bits >> 63 == 1 { !bits } else { bits | 1 << 63 };
    sortable.to_be_bytes()
}

/// The score of `score_key`'s bytes.
#[allow(dead_code, reason = "the sorted-set layout, whose commands come next")]
pub fn score_of(b: [u8; 8]) -> f64 {
    let s = u64::from_be_bytes(b);
    f64::from_bits(if s >> 63 == 1 { s & !(1 << 63) } else { !s })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_keep_order_and_are_prefix_free() {
        let users: Vec<&[u8]> =
            vec![b"", b"\x00", b"\x00\x00", b"\x00\x01", b"a", b"a\x00", b"a\x00b", b"ab", b"b", b"\xff"];
        for w in users.windows(2) {
            let (a, b) = (key(w[0]), key(w[1]));
            assert!(a < b, "{:?} < {:?}", w[0], w[1]);
            assert!(!b.starts_with(&a), "{:?} is a prefix of {:?}", w[0], w[1]);
            // Every field of `a` sorts before `b`.
            assert!(field_key(&[PREFIX], w[0], b"\xff\xff", false) < b.to_vec());
        }
        for u in users {
            assert_eq!(user_of(&[PREFIX], &key(u)), Some((u.to_vec(), true)));
            assert_eq!(user_of(&[PREFIX], &field_key(&[PREFIX], u, b"f", false)), Some((u.to_vec(), false)));
            assert_eq!(user_of(&[PREFIX], &field_key(&[PREFIX], u, b"", false)), Some((u.to_vec(), false)));
            let p = db_prefix(3);
            assert_eq!(user_of(&p, &key_in(&p, u)), Some((u.to_vec(), true)));
            assert_eq!(user_of(&[PREFIX], &key_in(&p, u)), None);
        }
    }

    #[test]
    fn field_names_are_never_the_record_and_never_collide() {
        let names: Vec<&[u8]> =
            vec![b"", b"\x00", b"\x00\x00", b"\x00\x01", b"\x01", b"\x00\xff", b"\xff", b"a", b"a\x00"];
        let record = key(b"h").to_vec();
        let mut keys = std::collections::HashSet::new();
        for n in &names {
            let k = field_key(&[PREFIX], b"h", n, false);
            assert_ne!(k, record, "{n:?}");
            assert!(keys.insert(k.clone()), "{n:?} collides");
            assert_eq!(field_name(&k[record.len()..], false), *n);
        }
    }

    #[test]
    fn scores_sort_as_numbers() {
        let xs = [
            f64::NEG_INFINITY,
            -1e300,
            -2.5,
            -1.0,
            -f64::MIN_POSITIVE,
            0.0,
            f64::MIN_POSITIVE,
            1.0,
            2.5,
            1e300,
            f64::INFINITY,
        ];
        for w in xs.windows(2) {
            assert!(score_key(w[0]) < score_key(w[1]), "{} < {}", w[0], w[1]);
        }
        for x in xs {
            assert_eq!(score_of(score_key(x)), x);
        }
        assert_eq!(score_key(-0.0), score_key(0.0));
    }
}
