//! Hashes: a record holding the field count, and one engine key per field (`encoding`).
//!
//! A layout-2 hash is read with raw field names (its empty-named field, if it ever had one,
//! was written over by the record and is gone) and rewritten in layout 3 in one atomic batch by
//! the first command that changes it. Fields a layout-2 store left without their record (an
//! HDEL of the empty name deleted the record) are taken into the hash the next HSET creates,
//! so they are counted again instead of showing up uncounted.

use super::encoding::{field_key, field_name, hash_meta, HASH_V2};
use super::{decode, Keyspace, KsError, Pairs, Value};
use halyard_engine::WriteBatch;

/// A hash's record.
struct Meta {
    len: u64,
    /// Expiry time (0: none); every field carries it too.
    at: u64,
    /// Fields under layout 2's raw names.
    legacy: bool,
}

impl Keyspace {
    /// The hash at `user`: None if there is none, WRONGTYPE for a string.
    fn hash_meta(&self, user: &[u8]) -> Result<Option<Meta>, KsError> {
        let Some((v, at)) = self.db.get_with_expiry(&self.key(user))? else { return Ok(None) };
        let legacy = v.first() == Some(&HASH_V2);
        match decode(v)? {
            Value::Hash(len) => Ok(Some(Meta { len, at, legacy })),
            _ => Err(KsError::WrongType),
        }
    }

    /// The hash at `user` in layout 3, rewriting a layout-2 one first (and taking in fields a
    /// layout-2 store left without a record); None if there is no hash. Caller holds the lock.
    fn hash_for_write(&self, user: &[u8]) -> Result<Option<Meta>, KsError> {
        match self.hash_meta(user)? {
            Some(m) if !m.legacy => Ok(Some(m)),
            Some(m) => self.upgrade_hash(user, m.at).map(Some),
            None if self.db.scan(self.fields_range(user)).next().is_some() => self.upgrade_hash(user, 0).map(Some),
            None => Ok(None),
        }
    }

    /// Rewrites the fields under `user` (raw layout-2 names) in layout 3 with the count they
    /// make, in one batch. Caller holds the lock.
    fn upgrade_hash(&self, user: &[u8], at: u64) -> Result<Meta, KsError> {
        let p = self.key(user).len();
        let fields: Pairs = self.db.scan(self.fields_range(user)).collect::<Result<_, _>>()?;
        let mut b = WriteBatch::new();
        let mut moved = Vec::new();
        for (k, v) in &fields {
            let new = field_key(&self.prefix, user, k.get(p..).unwrap_or_default(), false);
            if new != *k {
                b.delete(k.clone());
                moved.push((new, v.clone()));
            }
        }
        // Puts after every delete: a field's new key may be another field's old one.
        for (k, v) in moved {
            b.put_expiring(k, v, at);
        }
        let len = fields.len() as u64;
        b.put_expiring(self.key(user).to_vec(), hash_meta(len), at);
        self.db.write(&b)?;
        Ok(Meta { len, at, legacy: false })
    }

    /// HSET: returns the number of new fields. Caller holds the key's lock.
    pub fn hset_locked(&self, user: &[u8], pairs: &[(&[u8], &[u8])]) -> Result<u64, KsError> {
        self.mark_aggregates()?;
        let (n, at) = self.hash_for_write(user)?.map_or((0, 0), |m| (m.len, m.at));
        let mut added = 0;
        let mut b = WriteBatch::new();
        let mut seen = std::collections::HashSet::new();
        for (f, v) in pairs {
            let fk = field_key(&self.prefix, user, f, false);
            if seen.insert(fk.clone()) && self.db.get(&fk)?.is_none() {
                added += 1;
            }
            b.put_expiring(fk, v.to_vec(), at);
        }
        b.put_expiring(self.key(user).to_vec(), hash_meta(n + added), at);
        self.db.write(&b)?;
        Ok(added)
    }

    /// HGET: a field's value.
    pub fn hget(&self, user: &[u8], field: &[u8]) -> Result<Option<Vec<u8>>, KsError> {
        let Some(m) = self.hash_meta(user)? else { return Ok(None) };
        if m.legacy && field.is_empty() {
            // Layout 2 kept the empty name's value under the record's key: it is gone.
            return Ok(None);
        }
        Ok(self.db.get(&field_key(&self.prefix, user, field, m.legacy))?)
    }

    /// HGETALL: every field and value, in the order of their engine keys.
    pub fn hgetall(&self, user: &[u8]) -> Result<Pairs, KsError> {
        let Some(m) = self.hash_meta(user)? else { return Ok(Vec::new()) };
        let p = self.key(user).len();
        let mut out = Vec::new();
        for r in self.db.scan(self.fields_range(user)) {
            let (k, v) = r?;
            out.push((field_name(k.get(p..).unwrap_or_default(), m.legacy).to_vec(), v));
        }
        Ok(out)
    }

    /// HDEL: returns the number of fields removed. Caller holds the key's lock.
    pub fn hdel_locked(&self, user: &[u8], fields: &[&[u8]]) -> Result<u64, KsError> {
        let Some(m) = self.hash_for_write(user)? else { return Ok(0) };
        let mut removed = 0;
        let mut b = WriteBatch::new();
        let mut seen = std::collections::HashSet::new();
        for f in fields {
            let fk = field_key(&self.prefix, user, f, false);
            if seen.insert(fk.clone()) && self.db.get(&fk)?.is_some() {
                removed += 1;
                b.delete(fk);
            }
        }
        if removed >= m.len {
            b.delete(self.key(user).to_vec());
        } else {
            b.put_expiring(self.key(user).to_vec(), hash_meta(m.len - removed), m.at);
        }
        self.db.write(&b)?;
        Ok(removed)
    }

    /// HLEN: the number of fields (0 for no key).
    pub fn hlen(&self, user: &[u8]) -> Result<u64, KsError> {
        Ok(self.hash_meta(user)?.map_or(0, |m| m.len))
    }
}

impl Keyspace {
    /// HSCAN's page: up to `limit` fields and values after the field `after` (from the first
    /// when None), and whether more follow.
    pub fn hfields_after(&self, user: &[u8], after: Option<&[u8]>, limit: usize) -> Result<(Pairs, bool), KsError> {
        let Some(m) = self.hash_meta(user)? else { return Ok((Vec::new(), false)) };
        let after = after.map(|a| field_key(&self.prefix, user, a, m.legacy));
        let (page, more) = self.sub_page(user, after, limit)?;
        let p = self.key(user).len();
        let page = page.into_iter().map(|(k, v)| (field_name(k.get(p..).unwrap_or_default(), m.legacy).to_vec(), v));
        Ok((page.collect(), more))
    }
}
