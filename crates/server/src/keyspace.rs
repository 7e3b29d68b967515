//! Redis data types on the engine's ordered key space.
//!
//! ```text
//! engine key                          engine value
//! 'k' | user key                      0x00 | string bytes        (a string)
//!                                     0x01 | u64 field count     (a hash)
//! 'f' | u32 len | user key | field    field value                (a hash field)
//! ```
//! User keys sort in key order under the 'k' prefix, which SCAN, KEYS and HALYARD.RANGE walk.
//! Writers take a striped lock on the user key, so read-modify-write commands are atomic
//! against every other writer of that key.

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

/// Key-value pairs, in order.
pub type Pairs = Vec<(Vec<u8>, Vec<u8>)>;

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
}

/// The engine key of a user key; on the stack for keys of up to 63 bytes.
pub fn key(user: &[u8]) -> smallvec::SmallVec<[u8; 64]> {
    let mut k = smallvec::SmallVec::with_capacity(user.len() + 1);
    k.push(b'k');
    k.extend_from_slice(user);
    k
}

fn field_prefix(user: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(user.len() + 5);
    k.push(b'f');
    k.extend_from_slice(&(user.len() as u32).to_be_bytes());
    k.extend_from_slice(user);
    k
}

fn field_key(user: &[u8], field: &[u8]) -> Vec<u8> {
    let mut k = field_prefix(user);
    k.extend_from_slice(field);
    k
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

impl Keyspace {
    pub fn new(db: std::sync::Arc<Db>) -> Result<Keyspace, KsError> {
        let any_field = db
            .scan_with(
                (Bound::Included(b"f".to_vec()), Bound::Excluded(b"g".to_vec())),
                ScanOptions { reverse: false, limit: Some(1) },
            )
            .next()
            .transpose()?
            .is_some();
        Ok(Keyspace {
            db,
            locks: (0..STRIPES).map(|_| Mutex::new(())).collect(),
            hashes: std::sync::atomic::AtomicBool::new(any_field),
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

    /// Stores a string, replacing whatever the key held. Caller holds the key's lock.
    pub fn set_locked(&self, user: &[u8], v: &[u8]) -> Result<(), KsError> {
        if let Some(Value::Hash(_)) = self.get(user)? {
            self.delete_locked(user)?;
        }
        self.db.put(&key(user), &string_value(v))?;
        Ok(())
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
                let p = field_prefix(user);
                let end = prefix_end(&p).map_or(Bound::Unbounded, Bound::Excluded);
                let fields: Vec<Vec<u8>> = self
                    .db
                    .scan((Bound::Included(p.clone()), end))
                    .map(|r| r.map(|(k, _)| k))
                    .collect::<Result<_, _>>()?;
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
        self.hashes.store(true, std::sync::atomic::Ordering::Release);
        let mut n = self.hash_len(user)?.unwrap_or(0);
        let mut added = 0;
        let mut b = WriteBatch::new();
        let mut seen = std::collections::HashSet::new();
        for (f, v) in pairs {
            let fk = field_key(user, f);
            if seen.insert(fk.clone()) && self.db.get(&fk)?.is_none() {
                added += 1;
            }
            b.put(fk, v.to_vec());
        }
        n += added;
        b.put(key(user).to_vec(), hash_meta(n));
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
        let p = field_prefix(user);
        let end = prefix_end(&p).map_or(Bound::Unbounded, Bound::Excluded);
        let mut out = Vec::new();
        for r in self.db.scan((Bound::Included(p.clone()), end)) {
            let (k, v) = r?;
            out.push((k[p.len()..].to_vec(), v));
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
            b.put(key(user).to_vec(), hash_meta(n - removed));
        }
        self.db.write(&b)?;
        Ok(removed)
    }

    pub fn hlen(&self, user: &[u8]) -> Result<u64, KsError> {
        Ok(self.hash_len(user)?.unwrap_or(0))
    }

    /// User keys in order after `after` (exclusive) up to `limit`, and whether more follow.
    pub fn keys_after(&self, after: Option<&[u8]>, limit: usize) -> Result<(Vec<Vec<u8>>, bool), KsError> {
        let lo = match after {
            Some(a) => Bound::Excluded(key(a).to_vec()),
            None => Bound::Included(b"k".to_vec()),
        };
        let hi = Bound::Excluded(b"l".to_vec());
        let mut out = Vec::new();
        let mut more = false;
        for r in self.db.scan_with((lo, hi), ScanOptions { reverse: false, limit: Some(limit + 1) }) {
            let (k, _) = r?;
            if out.len() == limit {
                more = true;
                break;
            }
            out.push(k[1..].to_vec());
        }
        Ok((out, more))
    }

    /// String pairs in [start, end) (end None = to the last key), forward or reverse.
    pub fn range(&self, start: &[u8], end: Option<&[u8]>, limit: usize, reverse: bool) -> Result<Pairs, KsError> {
        let lo = Bound::Included(key(start).to_vec());
        let hi = end.map_or(Bound::Excluded(b"l".to_vec()), |e| Bound::Excluded(key(e).to_vec()));
        let mut out = Vec::new();
        for r in self.db.scan_with((lo, hi), ScanOptions { reverse, limit: None }) {
            let (k, v) = r?;
            if let Ok(Value::Str(s)) = decode(v) {
                out.push((k[1..].to_vec(), s));
                if out.len() >= limit {
                    break;
                }
            }
        }
        Ok(out)
    }

    /// Number of user keys (walks the key space).
    pub fn count(&self) -> Result<u64, KsError> {
        let mut n = 0;
        for r in self.db.scan((Bound::Included(b"k".to_vec()), Bound::Excluded(b"l".to_vec()))) {
            r?;
            n += 1;
        }
        Ok(n)
    }
}
