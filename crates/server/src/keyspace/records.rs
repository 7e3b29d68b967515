//! Whole keys of any type: deleting, expiring, and copying one under another name or into
//! another database. A key's records are its own record and every engine key under it
//! (`encoding`), so these work the same for every type.

use super::encoding::is_aggregate;
use super::{Keyspace, KsError, Pairs};
use halyard_engine::WriteBatch;

/// Records written or deleted per engine batch when a key is too large for one.
const CHUNK: usize = 1000;

impl Keyspace {
    /// The records under `user`'s own (fields, members, elements), in key order.
    pub(super) fn sub_records(&self, user: &[u8]) -> Result<Pairs, KsError> {
        Ok(self.db.scan(self.fields_range(user)).collect::<Result<_, _>>()?)
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
