//! How Redis keys, hash fields and value headers are laid out in engine keys and values.
//!
//! ```text
//! engine key                               engine value
//! 'r' | esc(user) | 00 01                  00 | string bytes          (a string)
//!                                          02 | u64 LE field count    (a hash, layout 3)
//!                                          01 | u64 LE field count    (a hash, layout 2)
//! 'r' | esc(user) | 00 01 | fesc(field)    field value                (a field, layout 3)
//! 'r' | esc(user) | 00 01 | field          field value                (a field, layout 2)
//! ```
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
/// The first byte of every engine key of the Redis key space.
pub const PREFIX: u8 = b'r';

/// The whole Redis key space, as engine keys.
pub fn all_keys() -> (std::ops::Bound<Vec<u8>>, std::ops::Bound<Vec<u8>>) {
    (std::ops::Bound::Included(vec![PREFIX]), std::ops::Bound::Excluded(vec![PREFIX + 1]))
}

/// An engine key, on the stack for user keys of up to 61 bytes.
pub type EngineKey = smallvec::SmallVec<[u8; 64]>;

/// The engine key of a user key.
pub fn key(user: &[u8]) -> EngineKey {
    let mut k = smallvec::SmallVec::with_capacity(user.len() + 3);
    k.push(PREFIX);
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
/// (not one of its fields); None for keys outside the Redis key space.
pub fn user_of(k: &[u8]) -> Option<(Vec<u8>, bool)> {
    let rest = k.strip_prefix(&[PREFIX])?;
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

/// The engine key of a hash field; `legacy` for a layout-2 hash (raw name).
pub fn field_key(user: &[u8], field: &[u8], legacy: bool) -> Vec<u8> {
    let mut k = key(user).to_vec();
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
    let mut v = vec![HASH];
    v.extend_from_slice(&n.to_le_bytes());
    v
}

/// Whether an engine value is a hash's record (either layout).
pub fn is_hash(v: &[u8]) -> bool {
    matches!(v.first(), Some(&(HASH | HASH_V2)))
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
            assert!(field_key(w[0], b"\xff\xff", false) < b.to_vec());
        }
        for u in users {
            assert_eq!(user_of(&key(u)), Some((u.to_vec(), true)));
            assert_eq!(user_of(&field_key(u, b"f", false)), Some((u.to_vec(), false)));
            assert_eq!(user_of(&field_key(u, b"", false)), Some((u.to_vec(), false)));
        }
    }

    #[test]
    fn field_names_are_never_the_record_and_never_collide() {
        let names: Vec<&[u8]> =
            vec![b"", b"\x00", b"\x00\x00", b"\x00\x01", b"\x01", b"\x00\xff", b"\xff", b"a", b"a\x00"];
        let record = key(b"h").to_vec();
        let mut keys = std::collections::HashSet::new();
        for n in &names {
            let k = field_key(b"h", n, false);
            assert_ne!(k, record, "{n:?}");
            assert!(keys.insert(k.clone()), "{n:?} collides");
            assert_eq!(field_name(&k[record.len()..], false), *n);
        }
    }
}
