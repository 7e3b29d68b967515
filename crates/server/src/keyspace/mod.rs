//! Redis data types on the engine's ordered key space.
//!
//! The layout of keys and values is in `encoding` (layout 3; layout 2's hashes are still read
//! and rewritten on their next change; layout 1 is moved to layout 2 when a store opens, in
//! `migrate`). Two files beside a single-node store's segments keep its bookkeeping out of the
//! key space native clients see: `keyspace-layout` and `keyspace-hashes` (present once a hash
//! was created, so that SET may skip reading the old value until then). A store on storage
//! without a directory (`Db::open_on`) keeps neither and assumes hashes may exist.
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

mod encoding;
mod hash;
pub mod list;
mod migrate;
mod records;
pub mod set;
pub mod stream;
pub mod stream_groups;
pub mod zset;

use encoding::{
    all_keys_in, db_prefix, is_aggregate, key_in, prefix_end, string_value, user_of, CHUNKED, HASH, HASH_V2, LIST, SET,
    STREAM, STRING, ZSET,
};
pub use encoding::{key, EngineKey, PREFIX, SLOTS_KEY};
use halyard_engine::{Db, Error, ScanOptions};
use parking_lot::{RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::ops::Bound;

const STRIPES: usize = 1024;

/// Where a size split of the store cuts (`Options::split_key`): before the first 00 byte of the
/// key it proposes, so that no Redis key's record and fields are ever parted (see `encoding`).
pub fn split_key() -> halyard_engine::SplitKey {
    halyard_engine::SplitKey(std::sync::Arc::new(|k: &[u8]| {
        let cut = k.iter().position(|&b| b == 0).unwrap_or(k.len());
        k.get(..cut).unwrap_or(k).to_vec()
    }))
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
    /// A list whose elements are at indices `head..tail`.
    List { head: u64, tail: u64 },
    /// A set with this many members.
    Set(u64),
    /// A sorted set with this many members.
    ZSet(u64),
    /// A string of this many bytes kept in chunks (`Keyspace::get` reads it whole as `Str`).
    Chunked(u64),
    /// A stream with this many entries and this last ID.
    Stream { len: u64, last: (u64, u64) },
}

impl Value {
    /// The type's name as TYPE and SCAN's TYPE option give it.
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::Str(_) | Value::Chunked(_) => "string",
            Value::Hash(_) => "hash",
            Value::List { .. } => "list",
            Value::Set(_) => "set",
            Value::ZSet(_) => "zset",
            Value::Stream { .. } => "stream",
        }
    }
}

/// Errors of keyspace operations.
#[derive(Debug, thiserror::Error)]
pub enum KsError {
    /// The key holds another type.
    #[error("WRONGTYPE Operation against a key holding the wrong kind of value")]
    WrongType,
    /// The engine failed (a write to a region changing primaries: retry, as for a refusal).
    #[error("{} {}", engine_code(.0), .0)]
    Engine(#[from] Error),
    /// A command refused its input part-way (the text starts with the error code).
    #[error("{0}")]
    Refused(String),
}

/// The Redis error code for an engine error: TRYAGAIN for a write to a region whose primary
/// is changing (the client retries, as for a routing refusal), ERR for the rest.
fn engine_code(e: &Error) -> &'static str {
    match e {
        Error::RegionFenced(_) => "TRYAGAIN",
        _ => "ERR",
    }
}

/// The key space of one database of a server.
pub struct Keyspace {
    pub db: std::sync::Arc<Db>,
    locks: Vec<RwLock<()>>,
    /// Whether any hash (or other type with records under its key) may exist: while none does,
    /// SET need not look at the old value. Shared by a store's databases.
    hashes: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// Single-node store: the bookkeeping records are kept (a cluster node holds only regions,
    /// which need not cover them).
    single: bool,
    /// The database's key prefix (`encoding::db_prefix`).
    prefix: smallvec::SmallVec<[u8; 2]>,
}

/// The little-endian u64 at `at` of `v`.
fn u64_at(v: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(v.get(at..at + 8)?.try_into().ok()?))
}

fn decode(mut v: Vec<u8>) -> Result<Value, KsError> {
    let value = match (v.first(), v.len()) {
        (Some(&STRING), _) => {
            // In place: one small move instead of a second allocation on every GET.
            v.remove(0);
            return Ok(Value::Str(v));
        }
        (Some(&(HASH | HASH_V2)), 9) => u64_at(&v, 1).map(Value::Hash),
        (Some(&SET), 9) => u64_at(&v, 1).map(Value::Set),
        // Longer with the pop hints (`zset::zset_record`).
        (Some(&ZSET), n) if n >= 9 => u64_at(&v, 1).map(Value::ZSet),
        (Some(&LIST), 17) => u64_at(&v, 1).zip(u64_at(&v, 9)).map(|(head, tail)| Value::List { head, tail }),
        (Some(&CHUNKED), 13) => u64_at(&v, 1).map(Value::Chunked),
        (Some(&STREAM), 25) => {
            u64_at(&v, 1).zip(u64_at(&v, 9).zip(u64_at(&v, 17))).map(|(len, last)| Value::Stream { len, last })
        }
        _ => None,
    };
    value.ok_or_else(|| KsError::Engine(Error::Corruption { segment: 0, offset: 0, what: "unknown value type".into() }))
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

impl Keyspace {
    /// The key space of `db`. A single-node store (one with the default region) is moved from
    /// layout 1 if it holds any of it, and records its layout.
    pub fn new(db: std::sync::Arc<Db>) -> Result<Keyspace, KsError> {
        let single = db.options().default_region;
        // A cluster node cannot keep the record (its regions need not cover it), and a
        // promoted region may hold hashes: SET always looks at the old value.
        let hashes = if single { migrate::open(&db)? } else { true };
        Ok(Keyspace {
            db,
            locks: (0..STRIPES).map(|_| RwLock::new(())).collect(),
            hashes: std::sync::Arc::new(std::sync::atomic::AtomicBool::new(hashes)),
            single,
            prefix: db_prefix(0),
        })
    }

    /// Database `n` (1–15) of the same store.
    pub fn numbered(&self, n: u8) -> Keyspace {
        Keyspace {
            db: self.db.clone(),
            locks: (0..STRIPES).map(|_| RwLock::new(())).collect(),
            hashes: self.hashes.clone(),
            single: self.single,
            prefix: db_prefix(n),
        }
    }

    /// The engine key of `user` in this database.
    pub fn key(&self, user: &[u8]) -> EngineKey {
        key_in(&self.prefix, user)
    }

    /// The engine keys of what `user` holds under its record (fields, members, elements).
    fn fields_range(&self, user: &[u8]) -> (Bound<Vec<u8>>, Bound<Vec<u8>>) {
        let p = self.key(user).to_vec();
        let end = prefix_end(&p).map_or(Bound::Unbounded, Bound::Excluded);
        (Bound::Excluded(p), end)
    }

    /// Records that a type with records under its key may now exist (SET then reads before it
    /// writes).
    fn mark_aggregates(&self) -> Result<(), KsError> {
        if self.single && !self.hashes.swap(true, std::sync::atomic::Ordering::AcqRel) {
            migrate::mark_hashes(&self.db)?;
        }
        Ok(())
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
    pub fn lock(&self, user: &[u8]) -> RwLockWriteGuard<'_, ()> {
        self.locks[self.stripe(user)].write()
    }

    /// Locks several keys (in stripe order, so that two callers cannot deadlock).
    pub fn lock_many(&self, users: &[&[u8]]) -> Vec<RwLockWriteGuard<'_, ()>> {
        self.stripes(users).map(|i| self.locks[i].write()).collect()
    }

    /// Locks several keys for reading: a key a command reads as several records (a list's
    /// record and its elements, a long string's chunks) is never seen half way through a
    /// write, which holds the key's lock while it changes them.
    /// Every read-only command takes these: no heap allocation for up to four keys.
    pub fn read_many(&self, users: &[&[u8]]) -> smallvec::SmallVec<[RwLockReadGuard<'_, ()>; 4]> {
        self.stripes(users).map(|i| self.locks[i].read()).collect()
    }

    fn stripes(&self, users: &[&[u8]]) -> impl Iterator<Item = usize> {
        let mut s: smallvec::SmallVec<[usize; 4]> = users.iter().map(|u| self.stripe(u)).collect();
        s.sort_unstable();
        s.dedup();
        s.into_iter()
    }

    /// What `user` holds (a long string read whole).
    pub fn get(&self, user: &[u8]) -> Result<Option<Value>, KsError> {
        match self.db.get(&self.key(user))?.map(decode).transpose()? {
            Some(Value::Chunked(len)) => self.read_chunked(user, len).map(|s| Some(Value::Str(s))),
            other => Ok(other),
        }
    }

    /// The string at `user` (None if absent; WRONGTYPE for any other type).
    pub fn get_str(&self, user: &[u8]) -> Result<Option<Vec<u8>>, KsError> {
        match self.get(user)? {
            None => Ok(None),
            Some(Value::Str(s)) => Ok(Some(s)),
            Some(_) => Err(KsError::WrongType),
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
        if let Some(old) = self.db.get(&self.key(user))? {
            if is_aggregate(&old) {
                self.delete_locked(user)?;
            }
        }
        self.put_string(user, v, at)
    }

    /// Stores a string keeping the key's expiry (INCR, APPEND and KEEPTTL do). Caller holds
    /// the key's lock.
    pub fn set_keep_ttl_locked(&self, user: &[u8], v: &[u8]) -> Result<(), KsError> {
        // One read gives both what the key holds and its time.
        let at = match self.db.get_with_expiry(&self.key(user))? {
            None => 0,
            Some((old, at)) => {
                if is_aggregate(&old) {
                    self.delete_locked(user)?;
                }
                at
            }
        };
        self.put_string(user, v, at)
    }

    /// The store's clock, which expiry times are judged by (ms since the Unix epoch).
    pub fn now_ms(&self) -> u64 {
        self.db.now_ms()
    }

    /// When `user` expires: None if there is no such key, Some(0) if it does not expire.
    pub fn expiry(&self, user: &[u8]) -> Result<Option<u64>, KsError> {
        Ok(self.db.get_with_expiry(&self.key(user))?.map(|(_, at)| at))
    }

    /// Stores a string; while no hash exists it skips reading the old value (the SET fast
    /// path). Caller holds the key's lock.
    pub fn set(&self, user: &[u8], v: &[u8]) -> Result<(), KsError> {
        if self.hashes.load(std::sync::atomic::Ordering::Acquire) || v.len() > encoding::INLINE_STRING {
            self.set_locked(user, v)
        } else {
            self.db.put(&self.key(user), &string_value(v))?;
            Ok(())
        }
    }

    /// User keys in order after `after` (exclusive; from the start of `span` or of the key
    /// space when None) up to `limit`, and whether more follow.
    pub fn keys_after(
        &self,
        after: Option<&[u8]>,
        limit: usize,
        span: Option<&Span>,
    ) -> Result<(Vec<Vec<u8>>, bool), KsError> {
        let (mut lo, hi) = all_keys_in(&self.prefix);
        if let Some(a) = after {
            // Past the key and its fields.
            let k = self.key(a);
            lo = prefix_end(&k).map_or(Bound::Excluded(k.to_vec()), Bound::Included);
        }
        let (mut lo, hi) = clip(span, lo, hi);
        let mut out = Vec::new();
        'walk: loop {
            for r in self.db.scan((lo.clone(), hi.clone())) {
                let (k, v) = r?;
                let Some((user, true)) = user_of(&self.prefix, &k) else { continue };
                if out.len() == limit {
                    return Ok((out, true));
                }
                out.push(user);
                if is_aggregate(&v) {
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

    /// The last user key within `span` (None: there is none).
    pub fn last_key(&self, span: Option<&Span>) -> Result<Option<Vec<u8>>, KsError> {
        let (lo, hi) = all_keys_in(&self.prefix);
        let mut scan = self.db.scan_with(clip(span, lo, hi), ScanOptions { reverse: true, limit: Some(1) });
        Ok(scan.next().transpose()?.and_then(|(k, _)| user_of(&self.prefix, &k)).map(|(u, _)| u))
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
        let lo = Bound::Included(self.key(start).to_vec());
        let hi = end.map_or(all_keys_in(&self.prefix).1, |e| Bound::Excluded(self.key(e).to_vec()));
        let mut out = Vec::new();
        if limit == 0 {
            return Ok(out);
        }
        for r in self.db.scan_with(clip(span, lo, hi), ScanOptions { reverse, limit: None }) {
            let (k, v) = r?;
            let Some((user, true)) = user_of(&self.prefix, &k) else { continue };
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
        let lo = Bound::Included(self.key(start).to_vec());
        let hi = end.map_or(all_keys_in(&self.prefix).1, |e| Bound::Excluded(self.key(e).to_vec()));
        let (Bound::Included(lo), Bound::Excluded(hi)) = clip(span, lo, hi) else {
            return Ok(());
        };
        if lo >= hi {
            return Ok(());
        }
        let _all: Vec<RwLockWriteGuard<'_, ()>> = self.locks.iter().map(|l| l.write()).collect();
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

#[cfg(test)]
mod tests {
    use super::*;

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
        let v1_meta = |n: u64| [&[HASH_V2][..], &n.to_le_bytes()].concat();
        db.put(b"kh", &v1_meta(4)).unwrap();
        db.put(&v1_field(b"h", b"a"), b"1").unwrap();
        db.put(&v1_field(b"h", b"b\x00"), b"2").unwrap();
        db.put(&v1_field(b"h", b""), b"3").unwrap();
        db.put(&v1_field(b"h", b"\x00"), b"4").unwrap();
        let ks = Keyspace::new(db.clone()).unwrap();
        assert_eq!(ks.get_str(b"key00042").unwrap(), Some(b"v42".to_vec()));
        let mut all = ks.hgetall(b"h").unwrap();
        all.sort();
        let want: Pairs = [(&b""[..], &b"3"[..]), (b"\x00", b"4"), (b"a", b"1"), (b"b\x00", b"2")]
            .iter()
            .map(|(f, v)| (f.to_vec(), v.to_vec()))
            .collect();
        assert_eq!(all, want);
        assert_eq!(ks.hlen(b"h").unwrap(), 4);
        assert_eq!(ks.hget(b"h", b"").unwrap(), Some(b"3".to_vec()));
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
