//! Whole keys of any type: deleting, expiring, and copying one under another name or into
//! another database. A key's records are its own record and every engine key under it
//! (`encoding`), so these work the same for every type.

use super::encoding::{chunked_meta, is_aggregate, string_value, INLINE_STRING};
use super::{Keyspace, KsError, Pairs};
use halyard_engine::WriteBatch;

/// Records written or deleted per engine batch when a key is too large for one.
const CHUNK: usize = 1000;

impl Keyspace {
    /// The records under `user`'s own (fields, members, elements), in key order.
    pub(super) fn sub_records(&self, user: &[u8]) -> Result<Pairs, KsError> {
        Ok(self.db.scan(self.fields_range(user)).collect::<Result<_, _>>()?)
    }

    /// Writes the string `v` to `user`, which holds nothing else now, expiring at `at`: in its
    /// record, or past `INLINE_STRING` bytes in chunks (each a batch, the record last, so that a
    /// crash part-way leaves the key as it was, with chunks under it the next write replaces).
    pub(super) fn put_string(&self, user: &[u8], v: &[u8], at: u64) -> Result<(), KsError> {
        let rec = self.key(user);
        if v.len() <= INLINE_STRING {
            self.db.put_expiring(&rec, &string_value(v), at)?;
            return Ok(());
        }
        self.mark_aggregates()?;
        let mut n: u32 = 0;
        for chunk in v.chunks(INLINE_STRING) {
            let mut k = rec.to_vec();
            k.extend_from_slice(&n.to_be_bytes());
            self.db.put_expiring(&k, chunk, at)?;
            n += 1;
        }
        self.db.put_expiring(&rec, &chunked_meta(v.len() as u64, n), at)?;
        Ok(())
    }

    /// The string of `len` bytes kept in chunks under `user`.
    pub(super) fn read_chunked(&self, user: &[u8], len: u64) -> Result<Vec<u8>, KsError> {
        let mut out = Vec::with_capacity(usize::try_from(len).unwrap_or(0));
        // Only the chunks the record counts: a write cut short may have left more after them.
        let chunks = usize::try_from(len.div_ceil(INLINE_STRING as u64)).unwrap_or(usize::MAX);
        let opts = halyard_engine::ScanOptions { reverse: false, limit: Some(chunks) };
        for r in self.db.scan_with(self.fields_range(user), opts) {
            out.extend_from_slice(&r?.1);
        }
        if out.len() as u64 != len {
            let what = format!("a long string of {len} bytes has {} in its chunks", out.len());
            return Err(KsError::Engine(halyard_engine::Error::Corruption { segment: 0, offset: 0, what }));
        }
        Ok(out)
    }

    /// The bytes of `user`'s records, keys and values (None: no such key).
    pub fn footprint(&self, user: &[u8]) -> Result<Option<u64>, KsError> {
        let rec = self.key(user);
        let Some(v) = self.db.get(&rec)? else { return Ok(None) };
        let mut n = (rec.len() + v.len()) as u64;
        if is_aggregate(&v) {
            for r in self.db.scan(self.fields_range(user)) {
                let (k, v) = r?;
                n += (k.len() + v.len()) as u64;
            }
        }
        Ok(Some(n))
    }

    /// Deletes a key of any type. Caller holds the key's lock. Returns whether it existed.
    pub fn delete_locked(&self, user: &[u8]) -> Result<bool, KsError> {
        let rec = self.key(user);
        let Some(v) = self.db.get(&rec)? else { return Ok(false) };
        if is_aggregate(&v) {
            let subs: Vec<Vec<u8>> =
                self.db.scan(self.fields_range(user)).map(|r| r.map(|(k, _)| k)).collect::<Result<_, _>>()?;
            for chunk in subs.chunks(CHUNK) {
                let mut b = WriteBatch::new();
                for k in chunk {
                    b.delete(k.clone());
                }
                self.db.write(&b)?;
            }
        }
        self.db.delete(&rec)?;
        Ok(true)
    }

    /// Sets `user`'s expiry to `at` (0: removes it; a time already past deletes the key).
    /// Every record of the key carries the time, so that compactions drop them together.
    /// Returns whether the key exists. Caller holds the key's lock.
    pub fn expire_locked(&self, user: &[u8], at: u64) -> Result<bool, KsError> {
        let rec = self.key(user);
        let Some((v, _)) = self.db.get_with_expiry(&rec)? else { return Ok(false) };
        if at != 0 && at <= self.now_ms() {
            return self.delete_locked(user);
        }
        if is_aggregate(&v) {
            for chunk in self.sub_records(user)?.chunks(CHUNK) {
                let mut b = WriteBatch::new();
                for (k, sv) in chunk {
                    b.put_expiring(k.clone(), sv.clone(), at);
                }
                self.db.write(&b)?;
            }
        }
        self.db.put_expiring(&rec, &v, at)?;
        Ok(true)
    }

    /// Copies what `user` holds to `to_user` of database `to` (which may be this one), with its
    /// expiry, replacing what `to_user` held. Returns false when `user` does not exist. The
    /// caller holds both keys' locks.
    pub fn copy_locked(&self, user: &[u8], to: &Keyspace, to_user: &[u8]) -> Result<bool, KsError> {
        let rec = self.key(user);
        let Some((v, at)) = self.db.get_with_expiry(&rec)? else { return Ok(false) };
        let subs = if is_aggregate(&v) { self.sub_records(user)? } else { Vec::new() };
        to.delete_locked(to_user)?;
        if is_aggregate(&v) {
            to.mark_aggregates()?;
        }
        let dst = to.key(to_user);
        let mut b = WriteBatch::new();
        for (k, sv) in subs {
            let mut nk = dst.to_vec();
            nk.extend_from_slice(k.get(rec.len()..).unwrap_or_default());
            b.put_expiring(nk, sv, at);
            if b.len() >= CHUNK {
                self.db.write(&std::mem::take(&mut b))?;
            }
        }
        // The record last: a crash part-way leaves records under no record, which the next
        // write of the key takes over or deletes.
        b.put_expiring(dst.to_vec(), v, at);
        self.db.write(&b)?;
        Ok(true)
    }
}
