//! Sets: a record holding the member count, and one engine key per member with an empty value
//! (`encoding`). As a hash's fields do, every member carries the key's expiry, so that the
//! whole set expires together; the record is rewritten on each change and deleted with the
//! last member.
//!
//! Random picks (SPOP, SRANDMEMBER) read the members and choose among them: an ordered store
//! has no cheap uniform pick, and a uniform one is what Redis promises.

use super::encoding::{counted, field_key, field_name, SET};
use super::{decode, Keyspace, KsError, Pairs, Value};
use halyard_engine::{ScanOptions, WriteBatch};
use rand::seq::index::sample;
use rand::Rng;
use std::collections::HashSet;
use std::ops::Bound;

/// Members written per engine batch when a stored set is too large for one.
const CHUNK: usize = 1000;

/// A set's record.
struct Meta {
    len: u64,
    /// Expiry time (0: none); every member carries it too.
    at: u64,
}

impl Keyspace {
    /// The set at `user`: None if there is none, WRONGTYPE for any other type.
    fn set_meta(&self, user: &[u8]) -> Result<Option<Meta>, KsError> {
        let Some((v, at)) = self.db.get_with_expiry(&self.key(user))? else { return Ok(None) };
        match decode(v)? {
            Value::Set(len) => Ok(Some(Meta { len, at })),
            _ => Err(KsError::WrongType),
        }
    }

    fn member_key(&self, user: &[u8], member: &[u8]) -> Vec<u8> {
        field_key(&self.prefix, user, member, false)
    }

    /// Puts the record of a set of `len` members into `b`, or its deletion when it is empty.
    fn put_set_record(&self, b: &mut WriteBatch, user: &[u8], len: u64, at: u64) {
        if len == 0 {
            b.delete(self.key(user).to_vec());
        } else {
            b.put_expiring(self.key(user).to_vec(), counted(SET, len), at);
        }
    }

    /// The number of members, None when there is no key (WRONGTYPE for another type).
    pub fn set_len(&self, user: &[u8]) -> Result<Option<u64>, KsError> {
        Ok(self.set_meta(user)?.map(|m| m.len))
    }

    /// SCARD: the number of members (0 for no key).
    pub fn scard(&self, user: &[u8]) -> Result<u64, KsError> {
        Ok(self.set_len(user)?.unwrap_or(0))
    }

    /// SADD: returns the number of new members. Caller holds the key's lock.
    pub fn sadd_locked(&self, user: &[u8], members: &[&[u8]]) -> Result<u64, KsError> {
        let meta = self.set_meta(user)?;
        let mut b = WriteBatch::new();
        let added = self.add_members(&mut b, user, members, meta)?;
        if added > 0 {
            self.db.write(&b)?;
        }
        Ok(added)
    }

    /// Puts the members of `members` that the set `meta` describes lacks into `b`, with the
    /// record's new count; returns how many. A new set (`meta` None) drops whatever records a
    /// crash left under no record.
    fn add_members(
        &self,
        b: &mut WriteBatch,
        user: &[u8],
        members: &[&[u8]],
        meta: Option<Meta>,
    ) -> Result<u64, KsError> {
        let (n, at) = match meta {
            Some(m) => (m.len, m.at),
            None => {
                self.mark_aggregates()?;
                for r in self.db.scan(self.fields_range(user)) {
                    b.delete(r?.0);
                }
                (0, 0)
            }
        };
        let mut added = 0;
        let mut seen = HashSet::new();
        for m in members {
            let mk = self.member_key(user, m);
            if seen.insert(mk.clone()) && (n == 0 || self.db.get(&mk)?.is_none()) {
                added += 1;
                b.put_expiring(mk, Vec::new(), at);
            }
        }
        if added > 0 {
            self.put_set_record(b, user, n + added, at);
        }
        Ok(added)
    }

    /// SREM: returns the number of members removed. Caller holds the key's lock.
    pub fn srem_locked(&self, user: &[u8], members: &[&[u8]]) -> Result<u64, KsError> {
        let Some(m) = self.set_meta(user)? else { return Ok(0) };
        let mut removed = 0;
        let mut b = WriteBatch::new();
        let mut seen = HashSet::new();
        for mem in members {
            let mk = self.member_key(user, mem);
            if seen.insert(mk.clone()) && self.db.get(&mk)?.is_some() {
                removed += 1;
                b.delete(mk);
            }
        }
        if removed > 0 {
            self.put_set_record(&mut b, user, m.len.saturating_sub(removed), m.at);
            self.db.write(&b)?;
        }
        Ok(removed)
    }

    /// SISMEMBER: whether `member` is in the set (false for no key).
    pub fn sismember(&self, user: &[u8], member: &[u8]) -> Result<bool, KsError> {
        if self.set_meta(user)?.is_none() {
            return Ok(false);
        }
        Ok(self.db.get(&self.member_key(user, member))?.is_some())
    }

    /// SMEMBERS: every member, in the order of their engine keys (none for no key).
    pub fn smembers(&self, user: &[u8]) -> Result<Vec<Vec<u8>>, KsError> {
        if self.set_meta(user)?.is_none() {
            return Ok(Vec::new());
        }
        self.member_names(user)
    }

    /// The members under `user`'s record (its type already checked).
    fn member_names(&self, user: &[u8]) -> Result<Vec<Vec<u8>>, KsError> {
        let p = self.key(user).len();
        let mut out = Vec::new();
        for r in self.db.scan(self.fields_range(user)) {
            let (k, _) = r?;
            out.push(field_name(k.get(p..).unwrap_or_default(), false).to_vec());
        }
        Ok(out)
    }

    /// SPOP: removes and returns up to `count` random members. Caller holds the key's lock.
    pub fn spop_locked(&self, user: &[u8], count: u64) -> Result<Vec<Vec<u8>>, KsError> {
        let Some(m) = self.set_meta(user)? else { return Ok(Vec::new()) };
        if count == 0 {
            return Ok(Vec::new());
        }
        if count.saturating_mul(SAMPLE_FACTOR) < m.len {
            let picked = self.members_near_random(user, count as usize)?;
            let mut b = WriteBatch::new();
            for mem in &picked {
                b.delete(self.member_key(user, mem));
            }
            self.put_set_record(&mut b, user, m.len.saturating_sub(picked.len() as u64), m.at);
            self.db.write(&b)?;
            return Ok(picked);
        }
        let mut all = self.member_names(user)?;
        if count >= all.len() as u64 {
            self.delete_locked(user)?;
            return Ok(all);
        }
        let picked: Vec<usize> = sample(&mut rand::thread_rng(), all.len(), count as usize).into_vec();
        let mut out = Vec::with_capacity(picked.len());
        let mut b = WriteBatch::new();
        for i in picked {
            if let Some(mem) = all.get_mut(i) {
                let mem = std::mem::take(mem);
                b.delete(self.member_key(user, &mem));
                out.push(mem);
            }
        }
        self.put_set_record(&mut b, user, m.len.saturating_sub(out.len() as u64), m.at);
        self.db.write(&b)?;
        Ok(out)
    }

    /// SRANDMEMBER with a count: up to `count` distinct members, or for a negative count
    /// `-count` members that may repeat.
    pub fn srandmember(&self, user: &[u8], count: i64) -> Result<Vec<Vec<u8>>, KsError> {
        if let Some(m) = self.set_meta(user)? {
            if count > 0 && (count as u64).saturating_mul(SAMPLE_FACTOR) < m.len {
                return self.members_near_random(user, count as usize);
            }
        }
        let all = self.smembers(user)?;
        Ok(random_picks(all, count))
    }

    /// `count` members of a large set without reading it all: those at and after a random
    /// point between its first and last member (wrapping round), O(count + log n). Members
    /// after a wide gap between names come up more often than others, and the ones picked
    /// together are neighbours: good enough for SPOP's and SRANDMEMBER's usual use (take
    /// some work, sample), cheaper by far than a uniform pick over millions of members.
    fn members_near_random(&self, user: &[u8], count: usize) -> Result<Vec<Vec<u8>>, KsError> {
        let p = self.key(user).len();
        let range = self.fields_range(user);
        let first =
            self.db.scan_with(range.clone(), ScanOptions { reverse: false, limit: Some(1) }).next().transpose()?;
        let last =
            self.db.scan_with(range.clone(), ScanOptions { reverse: true, limit: Some(1) }).next().transpose()?;
        let (Some((lo, _)), Some((hi, _))) = (first, last) else { return Ok(Vec::new()) };
        let start = random_between(&lo, &hi);
        let mut keys: Vec<Vec<u8>> = self
            .db
            .scan_with((Bound::Included(start), range.1.clone()), ScanOptions { reverse: false, limit: Some(count) })
            .map(|r| r.map(|(k, _)| k))
            .collect::<Result<_, _>>()?;
        if keys.len() < count {
            let more = self.db.scan_with(range, ScanOptions { reverse: false, limit: Some(count - keys.len()) });
            for r in more {
                let k = r?.0;
                if !keys.contains(&k) {
                    keys.push(k);
                }
            }
        }
        Ok(keys.into_iter().map(|k| field_name(k.get(p..).unwrap_or_default(), false).to_vec()).collect())
    }

    /// SMOVE: moves `member` from `src` to `dst`; whether it was in `src`. Caller holds both
    /// keys' locks.
    pub fn smove_locked(&self, src: &[u8], dst: &[u8], member: &[u8]) -> Result<bool, KsError> {
        let Some(from) = self.set_meta(src)? else { return Ok(false) };
        let to = self.set_meta(dst)?;
        let mk = self.member_key(src, member);
        if self.db.get(&mk)?.is_none() {
            return Ok(false);
        }
        if src == dst {
            return Ok(true);
        }
        // One batch: the member leaves `src` and joins `dst` together.
        let mut b = WriteBatch::new();
        b.delete(mk);
        self.put_set_record(&mut b, src, from.len.saturating_sub(1), from.at);
        self.add_members(&mut b, dst, &[member], to)?;
        self.db.write(&b)?;
        Ok(true)
    }

    /// Replaces whatever `user` held by a set of `members` (distinct), without expiry; an
    /// empty set deletes the key. Caller holds the key's lock.
    pub fn sstore_locked(&self, user: &[u8], members: &[Vec<u8>]) -> Result<(), KsError> {
        self.delete_locked(user)?;
        if members.is_empty() {
            return Ok(());
        }
        self.mark_aggregates()?;
        let mut b = WriteBatch::new();
        for m in members {
            b.put_expiring(self.member_key(user, m), Vec::new(), 0);
            if b.len() >= CHUNK {
                self.db.write(&std::mem::take(&mut b))?;
            }
        }
        // The record last: a crash part-way leaves members under no record, which the next
        // SADD or store of the key deletes.
        self.put_set_record(&mut b, user, members.len() as u64, 0);
        self.db.write(&b)?;
        Ok(())
    }

    /// SSCAN's page: up to `limit` members after `after` (from the first when None), and
    /// whether more follow.
    pub fn smembers_after(
        &self,
        user: &[u8],
        after: Option<&[u8]>,
        limit: usize,
    ) -> Result<(Vec<Vec<u8>>, bool), KsError> {
        if self.set_meta(user)?.is_none() {
            return Ok((Vec::new(), false));
        }
        let after = after.map(|a| self.member_key(user, a));
        let (page, more) = self.sub_page(user, after, limit)?;
        let p = self.key(user).len();
        Ok((page.into_iter().map(|(k, _)| field_name(k.get(p..).unwrap_or_default(), false).to_vec()).collect(), more))
    }

    /// Up to `limit` records under `user`'s record after the engine key `after` (from the
    /// first when None), and whether more follow.
    pub(super) fn sub_page(&self, user: &[u8], after: Option<Vec<u8>>, limit: usize) -> Result<(Pairs, bool), KsError> {
        let (lo, hi) = self.fields_range(user);
        let lo = after.map_or(lo, Bound::Excluded);
        let mut out = Vec::new();
        for r in self.db.scan((lo, hi)) {
            let kv = r?;
            if out.len() == limit {
                return Ok((out, true));
            }
            out.push(kv);
        }
        Ok((out, false))
    }
}

/// A set this many times larger than the count asked picks members near a random point
/// instead of reading every member.
const SAMPLE_FACTOR: u64 = 8;

/// A random key between `lo` and `hi` (which sort `lo` <= `hi`): their common prefix, then a
/// byte drawn between theirs, then random bytes.
fn random_between(lo: &[u8], hi: &[u8]) -> Vec<u8> {
    let mut rng = rand::thread_rng();
    let common = lo.iter().zip(hi).take_while(|(a, b)| a == b).count();
    let mut k = lo.get(..common).unwrap_or_default().to_vec();
    let (a, b) = (lo.get(common).copied().unwrap_or(0), hi.get(common).copied().unwrap_or(u8::MAX));
    k.push(rng.gen_range(a.min(b)..=a.max(b)));
    k.extend((0..8).map(|_| rng.gen::<u8>()));
    k
}

/// `count` picks of `all` as SRANDMEMBER and HRANDFIELD make them: distinct ones (at most
/// all) for a count of 0 or more, `-count` that may repeat for a negative one.
pub fn random_picks<T: Clone>(mut all: Vec<T>, count: i64) -> Vec<T> {
    let mut rng = rand::thread_rng();
    if count >= 0 {
        let n = usize::try_from(count).unwrap_or(usize::MAX);
        if n >= all.len() {
            return all;
        }
        let mut picked: Vec<usize> = sample(&mut rng, all.len(), n).into_vec();
        picked.sort_unstable();
        let mut out = Vec::with_capacity(n);
        for i in picked.into_iter().rev() {
            if i < all.len() {
                out.push(all.swap_remove(i));
            }
        }
        return out;
    }
    if all.is_empty() {
        return all;
    }
    let n = count.unsigned_abs();
    (0..n).filter_map(|_| all.get(rng.gen_range(0..all.len())).cloned()).collect()
}
