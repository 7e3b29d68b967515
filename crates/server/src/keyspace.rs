//! Redis data types on the engine's ordered key space (layout 2).
//!
//! ```text
//! engine key                               engine value
//! 'r' | esc(user) | 00 01                  0x00 | string bytes        (a string)
//!                                          0x01 | u64 LE field count  (a hash)
//! 'r' | esc(user) | 00 01 | field          field value                (a hash field)
//! ```
//! Two files beside a single-node store's segments keep its bookkeeping out of the key space
//! native clients see: `keyspace-layout` ("2") and `keyspace-hashes` (present once a hash
//! was created, so that SET may skip reading the old value until then).
//! `esc` doubles every 0x00 of the user key as 00 FF and `00 01` ends it, so the encoding keeps
//! user keys' order and no encoded key is a prefix of another: a key's fields sort right after
//! it and before the next key. A hash therefore lies in one region of a cluster, whatever the
//! split points, as long as a split point holds no 00 byte (`cluster init --resp` cuts so).
//!
//! Layout 1 (`'k' | user` and `'f' | u32 BE len | user | field`) is moved to layout 2 when a
//! single-node store opens, in atomic batches that each move whole records, so a crash half-way
//! leaves every record readable in one layout or the other and the next open finishes.
//! Writers take a striped lock on the user key, so read-modify-write commands are atomic
//! against every other writer of that key.
//!
//! A key that expires carries its expiry time in the engine (`put_expiring`, an absolute time
//! in milliseconds that the node running the command decides, so every copy agrees). A hash
//! expires as a whole: its record and every field carry the same time, so that compactions drop
//! them together; EXPIRE on a hash rewrites its fields.

#![expect(
    clippy::indexing_slicing,
    reason = "stripes are reduced modulo the stripe count; prefixes are stripped from keys found by a prefix scan"
)]

use halyard_engine::{Db, Error, ScanOptions, WriteBatch};
use parking_lot::{Mutex, MutexGuard};
use std::ops::Bound;

const STRING: u8 = 0;
const HASH: u8 = 1;
const STRIPES: usize = 1024;
/// The first byte of every engine key of the Redis key space.
pub const PREFIX: u8 = b'r';
const LAYOUT_FILE: &str = "keyspace-layout";
const HASHES_FILE: &str = "keyspace-hashes";

/// Writes a small bookkeeping file durably (the file, then its directory).
fn mark(db: &Db, name: &str, contents: &[u8]) -> Result<(), KsError> {
    let io =
        |source: std::io::Error| KsError::Engine(Error::Io { context: "writing the key space's bookkeeping", source });
    let path = db.path().join(name);
    let f = std::fs::File::create(&path).map_err(io)?;
    std::io::Write::write_all(&mut &f, contents).map_err(io)?;
    f.sync_all().map_err(io)?;
    std::fs::File::open(db.path()).and_then(|d| d.sync_all()).map_err(io)
}

/// Key-value pairs, in order.
pub type Pairs = Vec<(Vec<u8>, Vec<u8>)>;

/// An engine key range a command is confined to (a forwarded command runs on its region only).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Span {
    /// First engine key.
    pub start: Vec<u8>,
    /// First engine key past the span (None: no end).
    pub end: Option<Vec<u8>>,
}

impl Span {
    /// Whether the engine key `k` lies in the span.
    pub fn contains(&self, k: &[u8]) -> bool {
        k >= self.start.as_slice() && self.end.as_deref().is_none_or(|e| k < e)
    }
}

/// What a user key holds.
#[derive(Debug, PartialEq, Eq)]
pub enum Value {
    /// A string.
    Str(Vec<u8>),
    /// A hash with this many fields.
    Hash(u64),
}

/// Errors of keyspace operations.
#[derive(Debug, thiserror::Error)]
pub enum KsError {
    /// The key holds another type.
    #[error("WRONGTYPE Operation against a key holding the wrong kind of value")]
    WrongType,
    /// The engine failed.
    #[error("ERR {0}")]
    Engine(#[from] Error),
}

/// The key space of one server.
pub struct Keyspace {
    pub db: std::sync::Arc<Db>,
    locks: Vec<Mutex<()>>,
    /// Whether any hash may exist: while none does, SET need not look at the old value.
    hashes: std::sync::atomic::AtomicBool,
    /// Single-node store: the bookkeeping records are kept (a cluster node holds only regions,
    /// which need not cover them).
    single: bool,
}

/// The engine key of a user key; on the stack for keys of up to 61 bytes.
pub fn key(user: &[u8]) -> smallvec::SmallVec<[u8; 64]> {
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
/// (not one of its fields); None for bookkeeping records and keys outside the Redis key space.
fn user_of(k: &[u8]) -> Option<(Vec<u8>, bool)> {
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

fn field_key(user: &[u8], field: &[u8]) -> Vec<u8> {
    let mut k = key(user).to_vec();
    k.extend_from_slice(field);
    k
}

/// The engine keys of `user`'s fields.
fn fields_range(user: &[u8]) -> (Bound<Vec<u8>>, Bound<Vec<u8>>) {
    let p = key(user).to_vec();
    let end = prefix_end(&p).map_or(Bound::Unbounded, Bound::Excluded);
    (Bound::Excluded(p), end)
}

fn string_value(v: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(v.len() + 1);
    out.push(STRING);
    out.extend_from_slice(v);
    out
}

fn decode(mut v: Vec<u8>) -> Result<Value, KsError> {
    match v.first() {
        Some(&STRING) => {
            // In place: one small move instead of a second allocation on every GET.
            v.remove(0);
            Ok(Value::Str(v))
        }
        Some(&HASH) if v.len() == 9 => {
            let mut n = [0u8; 8];
            n.copy_from_slice(&v[1..9]);
            Ok(Value::Hash(u64::from_le_bytes(n)))
        }
        _ => Err(KsError::Engine(Error::Corruption { segment: 0, offset: 0, what: "unknown value type".into() })),
    }
}

fn hash_meta(n: u64) -> Vec<u8> {
    let mut v = vec![HASH];
    v.extend_from_slice(&n.to_le_bytes());
    v
}

fn prefix_end(p: &[u8]) -> Option<Vec<u8>> {
    let mut e = p.to_vec();
    while let Some(last) = e.pop() {
        if last < 0xff {
            e.push(last + 1);
            return Some(e);
        }
    }
    None
}

/// `lo..hi` within `span` when one is given.
fn clip(span: Option<&Span>, lo: Bound<Vec<u8>>, hi: Bound<Vec<u8>>) -> (Bound<Vec<u8>>, Bound<Vec<u8>>) {
    let Some(s) = span else { return (lo, hi) };
    let lo = match lo {
        Bound::Included(k) | Bound::Excluded(k) if k < s.start => Bound::Included(s.start.clone()),
        Bound::Unbounded => Bound::Included(s.start.clone()),
        other => other,
    };
    let hi = match (hi, &s.end) {
        (hi, None) => hi,
        (Bound::Included(k) | Bound::Excluded(k), Some(e)) if k >= *e => Bound::Excluded(e.clone()),
        (Bound::Unbounded, Some(e)) => Bound::Excluded(e.clone()),
        (other, Some(_)) => other,
    };
    (lo, hi)
}

/// The whole Redis key space.
fn all_keys() -> (Bound<Vec<u8>>, Bound<Vec<u8>>) {
    (Bound::Included(vec![PREFIX]), Bound::Excluded(vec![PREFIX + 1]))
}

impl Keyspace {
    /// The key space of `db`. A single-node store (one with the default region) is moved from
    /// layout 1 if it holds any of it, and records its layout.
    pub fn new(db: std::sync::Arc<Db>) -> Result<Keyspace, KsError> {
        let single = db.options().default_region;
        let hashes = if single {
            migrate_v1(&db)?;
            if !db.path().join(LAYOUT_FILE).exists() {
                // A store that holds keys without the marker files came from elsewhere (a
                // backup, a checkpoint, a copy of the data files): it may hold hashes.
                if db.scan_with(all_keys(), ScanOptions { reverse: false, limit: Some(1) }).next().is_some() {
                    mark(&db, HASHES_FILE, b"")?;
                }
                mark(&db, LAYOUT_FILE, b"2")?;
            }
            db.path().join(HASHES_FILE).exists()
        } else {
            // A cluster node cannot keep the record (its regions need not cover it), and a
            // promoted region may hold hashes: SET always looks at the old value.
            true
        };
        Ok(Keyspace {
            db,
            locks: (0..STRIPES).map(|_| Mutex::new(())).collect(),
            hashes: std::sync::atomic::AtomicBool::new(hashes),
            single,
        })
    }

    fn stripe(&self, user: &[u8]) -> usize {
        // FNV-1a: cheap and good enough to spread keys over the stripes.
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for &b in user {
            h = (h ^ b as u64).wrapping_mul(0x100_0000_01b3);
        }
        (h % STRIPES as u64) as usize
    }

    /// Locks one key for a read-modify-write.
    pub fn lock(&self, user: &[u8]) -> MutexGuard<'_, ()> {
        self.locks[self.stripe(user)].lock()
    }

    /// Locks several keys (in stripe order, so that two callers cannot deadlock).
    pub fn lock_many(&self, users: &[&[u8]]) -> Vec<MutexGuard<'_, ()>> {
        let mut s: Vec<usize> = users.iter().map(|u| self.stripe(u)).collect();
        s.sort_unstable();
        s.dedup();
        s.into_iter().map(|i| self.locks[i].lock()).collect()
    }

    pub fn get(&self, user: &[u8]) -> Result<Option<Value>, KsError> {
        self.db.get(&key(user))?.map(decode).transpose()
    }

    /// The string at `user` (None if absent; WRONGTYPE for a hash).
    pub fn get_str(&self, user: &[u8]) -> Result<Option<Vec<u8>>, KsError> {
        match self.get(user)? {
            None => Ok(None),
            Some(Value::Str(s)) => Ok(Some(s)),
            Some(Value::Hash(_)) => Err(KsError::WrongType),
        }
    }

    /// Stores a string, replacing whatever the key held (its expiry too). Caller holds the
    /// key's lock.
    pub fn set_locked(&self, user: &[u8], v: &[u8]) -> Result<(), KsError> {
        self.set_expiring_locked(user, v, 0)
    }

    /// Stores a string that expires at `at` (ms since the Unix epoch; 0: never), replacing
    /// whatever the key held. Caller holds the key's lock.
    pub fn set_expiring_locked(&self, user: &[u8], v: &[u8], at: u64) -> Result<(), KsError> {
        if let Some(Value::Hash(_)) = self.get(user)? {
            self.delete_locked(user)?;
        }
        self.db.put_expiring(&key(user), &string_value(v), at)?;
        Ok(())
    }

    /// Stores a string keeping the key's expiry (INCR, APPEND and KEEPTTL do). Caller holds
    /// the key's lock.
    pub fn set_keep_ttl_locked(&self, user: &[u8], v: &[u8]) -> Result<(), KsError> {
        // One read gives both what the key holds and its time.
        let at = match self.db.get_with_expiry(&key(user))? {
            None => 0,
            Some((old, at)) => {
                if let Value::Hash(_) = decode(old)? {
                    self.delete_locked(user)?;
                }
                at
            }
        };
        self.db.put_expiring(&key(user), &string_value(v), at)?;
        Ok(())
    }

    /// The store's clock, which expiry times are judged by (ms since the Unix epoch).
    pub fn now_ms(&self) -> u64 {
        self.db.now_ms()
    }

    /// When `user` expires: None if there is no such key, Some(0) if it does not expire.
    pub fn expiry(&self, user: &[u8]) -> Result<Option<u64>, KsError> {
        Ok(self.db.get_with_expiry(&key(user))?.map(|(_, at)| at))
    }

    /// Sets `user`'s expiry to `at` (0: removes it; a time already past deletes the key).
    /// Returns whether the key exists. Caller holds the key's lock.
    pub fn expire_locked(&self, user: &[u8], at: u64) -> Result<bool, KsError> {
        let Some((v, _)) = self.db.get_with_expiry(&key(user))? else { return Ok(false) };
        if at != 0 && at <= self.now_ms() {
            return self.delete_locked(user);
        }
        if let Value::Hash(_) = decode(v.clone())? {
            let fields: Pairs = self.db.scan(fields_range(user)).collect::<Result<_, _>>()?;
            for chunk in fields.chunks(1000) {
                let mut b = WriteBatch::new();
                for (f, fv) in chunk {
                    b.put_expiring(f.clone(), fv.clone(), at);
                }
                self.db.write(&b)?;
            }
        }
        self.db.put_expiring(&key(user), &v, at)?;
        Ok(true)
    }

    /// Stores a string; while no hash exists it skips reading the old value (the SET fast
    /// path). Caller holds the key's lock.
    pub fn set(&self, user: &[u8], v: &[u8]) -> Result<(), KsError> {
        if self.hashes.load(std::sync::atomic::Ordering::Acquire) {
            self.set_locked(user, v)
        } else {
            self.db.put(&key(user), &string_value(v))?;
            Ok(())
        }
    }

    /// Deletes a key of any type. Caller holds the key's lock. Returns whether it existed.
    pub fn delete_locked(&self, user: &[u8]) -> Result<bool, KsError> {
        match self.get(user)? {
            None => Ok(false),
            Some(Value::Str(_)) => {
                self.db.delete(&key(user))?;
                Ok(true)
            }
            Some(Value::Hash(_)) => {
                let fields: Vec<Vec<u8>> =
                    self.db.scan(fields_range(user)).map(|r| r.map(|(k, _)| k)).collect::<Result<_, _>>()?;
                for chunk in fields.chunks(1000) {
                    let mut b = WriteBatch::new();
                    for f in chunk {
                        b.delete(f.clone());
                    }
                    self.db.write(&b)?;
                }
                self.db.delete(&key(user))?;
                Ok(true)
            }
        }
    }

    fn hash_len(&self, user: &[u8]) -> Result<Option<u64>, KsError> {
        match self.get(user)? {
            None => Ok(None),
            Some(Value::Hash(n)) => Ok(Some(n)),
            Some(Value::Str(_)) => Err(KsError::WrongType),
        }
    }

    /// HSET: returns the number of new fields. Caller holds the key's lock.
    pub fn hset_locked(&self, user: &[u8], pairs: &[(&[u8], &[u8])]) -> Result<u64, KsError> {
        if self.single && !self.hashes.swap(true, std::sync::atomic::Ordering::AcqRel) {
            mark(&self.db, HASHES_FILE, b"")?;
        }
        let mut n = self.hash_len(user)?.unwrap_or(0);
        let at = if n > 0 { self.expiry(user)?.unwrap_or(0) } else { 0 };
        let mut added = 0;
        let mut b = WriteBatch::new();
        let mut seen = std::collections::HashSet::new();
        for (f, v) in pairs {
            let fk = field_key(user, f);
            if seen.insert(fk.clone()) && self.db.get(&fk)?.is_none() {
                added += 1;
            }
            b.put_expiring(fk, v.to_vec(), at);
        }
        n += added;
        b.put_expiring(key(user).to_vec(), hash_meta(n), at);
        self.db.write(&b)?;
        Ok(added)
    }

    pub fn hget(&self, user: &[u8], field: &[u8]) -> Result<Option<Vec<u8>>, KsError> {
        if self.hash_len(user)?.is_none() {
            return Ok(None);
        }
        Ok(self.db.get(&field_key(user, field))?)
    }

    pub fn hgetall(&self, user: &[u8]) -> Result<Pairs, KsError> {
        if self.hash_len(user)?.is_none() {
            return Ok(Vec::new());
        }
        let p = key(user).len();
        let mut out = Vec::new();
        for r in self.db.scan(fields_range(user)) {
            let (k, v) = r?;
            out.push((k[p..].to_vec(), v));
        }
        Ok(out)
    }

    /// HDEL: returns the number of fields removed. Caller holds the key's lock.
    pub fn hdel_locked(&self, user: &[u8], fields: &[&[u8]]) -> Result<u64, KsError> {
        let Some(n) = self.hash_len(user)? else { return Ok(0) };
        let mut removed = 0;
        let mut b = WriteBatch::new();
        let mut seen = std::collections::HashSet::new();
        for f in fields {
            let fk = field_key(user, f);
            if seen.insert(fk.clone()) && self.db.get(&fk)?.is_some() {
                removed += 1;
                b.delete(fk);
            }
        }
        if removed == n {
            b.delete(key(user).to_vec());
        } else {
            let at = self.expiry(user)?.unwrap_or(0);
            b.put_expiring(key(user).to_vec(), hash_meta(n - removed), at);
        }
        self.db.write(&b)?;
        Ok(removed)
    }

    pub fn hlen(&self, user: &[u8]) -> Result<u64, KsError> {
        Ok(self.hash_len(user)?.unwrap_or(0))
    }

    /// User keys in order after `after` (exclusive; from the start of `span` or of the key
    /// space when None) up to `limit`, and whether more follow.
    pub fn keys_after(
        &self,
        after: Option<&[u8]>,
        limit: usize,
        span: Option<&Span>,
    ) -> Result<(Vec<Vec<u8>>, bool), KsError> {
        let (mut lo, hi) = all_keys();
        if let Some(a) = after {
            // Past the key and its fields.
            lo = prefix_end(&key(a)).map_or(Bound::Excluded(key(a).to_vec()), Bound::Included);
        }
        let (mut lo, hi) = clip(span, lo, hi);
        let mut out = Vec::new();
        'walk: loop {
            for r in self.db.scan((lo.clone(), hi.clone())) {
                let (k, v) = r?;
                let Some((user, true)) = user_of(&k) else { continue };
                if out.len() == limit {
                    return Ok((out, true));
                }
                out.push(user);
                if v.first() == Some(&HASH) {
                    // Skip the hash's fields: open the scan again past them.
                    match prefix_end(&k) {
                        Some(e) => lo = Bound::Included(e),
                        None => break 'walk,
                    }
                    continue 'walk;
                }
            }
            break;
        }
        Ok((out, false))
    }

    /// String pairs in [start, end) (end None = to the last key), forward or reverse, within
    /// `span`.
    pub fn range(
        &self,
        start: &[u8],
        end: Option<&[u8]>,
        limit: usize,
        reverse: bool,
        span: Option<&Span>,
    ) -> Result<Pairs, KsError> {
        let lo = Bound::Included(key(start).to_vec());
        let hi = end.map_or(all_keys().1, |e| Bound::Excluded(key(e).to_vec()));
        let mut out = Vec::new();
        if limit == 0 {
            return Ok(out);
        }
        for r in self.db.scan_with(clip(span, lo, hi), ScanOptions { reverse, limit: None }) {
            let (k, v) = r?;
            let Some((user, true)) = user_of(&k) else { continue };
            if let Ok(Value::Str(s)) = decode(v) {
                out.push((user, s));
                if out.len() >= limit {
                    break;
                }
            }
        }
        Ok(out)
    }

    /// Deletes every user key in [start, end) (end None = to the last key), hashes whole,
    /// within `span`: one engine range delete per region, whatever the number of keys. Every
    /// key's lock is held meanwhile, so no read-modify-write of a key in the range straddles it.
    pub fn delete_range(&self, start: &[u8], end: Option<&[u8]>, span: Option<&Span>) -> Result<(), KsError> {
        let lo = Bound::Included(key(start).to_vec());
        let hi = end.map_or(all_keys().1, |e| Bound::Excluded(key(e).to_vec()));
        let (Bound::Included(lo), Bound::Excluded(hi)) = clip(span, lo, hi) else {
            return Ok(());
        };
        if lo >= hi {
            return Ok(());
        }
        let _all: Vec<MutexGuard<'_, ()>> = self.locks.iter().map(|l| l.lock()).collect();
        Ok(self.db.delete_range(&lo, &hi)?)
    }

    /// Number of user keys within `span` (walks the key space).
    pub fn count(&self, span: Option<&Span>) -> Result<u64, KsError> {
        self.walk(span, |_| Ok(false)).map(|(n, _)| n)
    }

    /// Number of user keys, and of those that expire (one walk, reading each key's expiry).
    pub fn count_with_expiring(&self) -> Result<(u64, u64), KsError> {
        self.walk(None, |k| Ok(self.expiry(k)?.is_some_and(|at| at != 0)))
    }

    /// Walks the user keys within `span`: how many there are, and for how many `f` says yes.
    fn walk(
        &self,
        span: Option<&Span>,
        mut f: impl FnMut(&[u8]) -> Result<bool, KsError>,
    ) -> Result<(u64, u64), KsError> {
        let (mut n, mut yes) = (0, 0);
        let mut after: Option<Vec<u8>> = None;
        loop {
            let (keys, more) = self.keys_after(after.as_deref(), 4096, span)?;
            n += keys.len() as u64;
            for k in &keys {
                yes += u64::from(f(k)?);
            }
            if !more {
                return Ok((n, yes));
            }
            after = keys.into_iter().last();
        }
    }
}

/// Moves layout 1's records (`'k' | user`, `'f' | u32 len | user | field`) to layout 2, a
/// batch of whole records at a time (each batch atomic: no record is lost or doubled by a crash).
fn migrate_v1(db: &Db) -> Result<(), KsError> {
    if db.path().join(LAYOUT_FILE).exists() {
        return Ok(());
    }
    let mut moved = 0u64;
    for prefix in [b'k', b'f'] {
        loop {
            let range = (Bound::Included(vec![prefix]), Bound::Excluded(vec![prefix + 1]));
            let page: Pairs =
                db.scan_with(range, ScanOptions { reverse: false, limit: Some(1000) }).collect::<Result<_, _>>()?;
            if page.is_empty() {
                break;
            }
            let mut b = WriteBatch::new();
            for (k, v) in page {
                if let Some(new) = v1_to_v2(&k) {
                    b.put(new, v);
                }
                b.delete(k);
                moved += 1;
            }
            db.write(&b)?;
        }
    }
    if moved > 0 {
        tracing::info!("moved {moved} records of the Redis key space from layout 1 to layout 2");
        // Layout 1 marked hashes by their fields; any field moved means hashes may exist.
        if db
            .scan_with(all_keys(), ScanOptions { reverse: false, limit: None })
            .any(|r| r.ok().and_then(|(k, _)| user_of(&k)).is_some_and(|(_, own)| !own))
        {
            mark(db, HASHES_FILE, b"")?;
        }
    }
    Ok(())
}

/// The layout-2 key of a layout-1 key; None for a malformed one (dropped).
fn v1_to_v2(k: &[u8]) -> Option<Vec<u8>> {
    match k.split_first()? {
        (b'k', user) => Some(key(user).to_vec()),
        (b'f', rest) => {
            let len = u32::from_be_bytes(rest.get(..4)?.try_into().ok()?) as usize;
            let user = rest.get(4..4 + len)?;
            Some(field_key(user, rest.get(4 + len..)?))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encoding_keeps_order_and_is_prefix_free() {
        let users: Vec<&[u8]> =
            vec![b"", b"\x00", b"\x00\x00", b"\x00\x01", b"a", b"a\x00", b"a\x00b", b"ab", b"b", b"\xff"];
        for w in users.windows(2) {
            let (a, b) = (key(w[0]), key(w[1]));
            assert!(a < b, "{:?} < {:?}", w[0], w[1]);
            assert!(!b.starts_with(&a), "{:?} is a prefix of {:?}", w[0], w[1]);
            // Every field of `a` sorts before `b`.
            assert!(field_key(w[0], b"\xff\xff") < b.to_vec());
        }
        for u in users {
            assert_eq!(user_of(&key(u)), Some((u.to_vec(), true)));
            assert_eq!(user_of(&field_key(u, b"f")), Some((u.to_vec(), false)));
        }
    }

    /// A store written in layout 1 (the engine keys written as that layout laid them out)
    /// opens with every string and hash readable, and a second open moves nothing again.
    #[test]
    fn layout_1_is_moved_on_open() {
        let dir = tempfile::tempdir().unwrap();
        let opts = halyard_engine::Options { direct_io: false, ..Default::default() };
        let db = std::sync::Arc::new(Db::open(dir.path(), opts).unwrap());
        let v1_field = |user: &[u8], field: &[u8]| {
            let mut k = vec![b'f'];
            k.extend_from_slice(&(user.len() as u32).to_be_bytes());
            k.extend_from_slice(user);
            k.extend_from_slice(field);
            k
        };
        for i in 0..2500u32 {
            db.put(format!("kkey{i:05}").as_bytes(), &string_value(format!("v{i}").as_bytes())).unwrap();
        }
        db.put(b"kh", &hash_meta(2)).unwrap();
        db.put(&v1_field(b"h", b"a"), b"1").unwrap();
        db.put(&v1_field(b"h", b"b\x00"), b"2").unwrap();
        let ks = Keyspace::new(db.clone()).unwrap();
        assert_eq!(ks.get_str(b"key00042").unwrap(), Some(b"v42".to_vec()));
        assert_eq!(ks.hgetall(b"h").unwrap(), vec![(b"a".to_vec(), b"1".to_vec()), (b"b\x00".to_vec(), b"2".to_vec())]);
        assert_eq!(ks.count(None).unwrap(), 2501);
        assert!(ks.hashes.load(std::sync::atomic::Ordering::Relaxed), "a moved hash keeps SET careful");
        let left = db.scan((Bound::Included(b"f".to_vec()), Bound::Excluded(b"l".to_vec()))).count();
        assert_eq!(left, 0, "no layout-1 record is left");
        // Once marked, a native key that looks like layout 1 is left alone.
        db.put(b"knative", b"x").unwrap();
        drop(ks);
        let ks = Keyspace::new(db.clone()).unwrap();
        assert_eq!(db.get(b"knative").unwrap(), Some(b"x".to_vec()));
        assert_eq!(ks.count(None).unwrap(), 2501);
    }

    #[test]
    fn keys_skip_hash_fields_and_respect_spans() {
        let dir = tempfile::tempdir().unwrap();
        let opts = halyard_engine::Options { direct_io: false, ..Default::default() };
        let ks = Keyspace::new(std::sync::Arc::new(Db::open(dir.path(), opts).unwrap())).unwrap();
        ks.set(b"a", b"1").unwrap();
        let fields: Vec<(Vec<u8>, Vec<u8>)> = (0..50).map(|i| (format!("f{i}").into_bytes(), b"v".to_vec())).collect();
        let refs: Vec<(&[u8], &[u8])> = fields.iter().map(|(f, v)| (f.as_slice(), v.as_slice())).collect();
        ks.hset_locked(b"b", &refs).unwrap();
        ks.set(b"c", b"3").unwrap();
        let (keys, more) = ks.keys_after(None, 10, None).unwrap();
        assert_eq!((keys, more), (vec![b"a".to_vec(), b"b".to_vec(), b"c".to_vec()], false));
        assert_eq!(ks.keys_after(Some(b"a"), 1, None).unwrap(), (vec![b"b".to_vec()], true));
        let span = Span { start: key(b"b").to_vec(), end: Some(key(b"c").to_vec()) };
        assert_eq!(ks.count(Some(&span)).unwrap(), 1);
        assert_eq!(
            ks.range(b"", None, 10, true, None).unwrap(),
            vec![(b"c".to_vec(), b"3".to_vec()), (b"a".to_vec(), b"1".to_vec())]
        );
        assert_eq!(ks.hlen(b"b").unwrap(), 50);
    }

    #[test]
    fn clip_keeps_within_the_span() {
        let s = Span { start: b"rb".to_vec(), end: Some(b"rd".to_vec()) };
        let (lo, hi) = clip(Some(&s), Bound::Included(b"ra".to_vec()), Bound::Excluded(b"rz".to_vec()));
        assert_eq!((lo, hi), (Bound::Included(b"rb".to_vec()), Bound::Excluded(b"rd".to_vec())));
        let (lo, hi) = clip(Some(&s), Bound::Excluded(b"rc".to_vec()), Bound::Excluded(b"rc1".to_vec()));
        assert_eq!((lo, hi), (Bound::Excluded(b"rc".to_vec()), Bound::Excluded(b"rc1".to_vec())));
    }
}
