//! Log values: the value an entry points to in the medium or large log, read by pointer
//! (one at a time, or many at once for a scan), checked against its record's checksum, salt
//! and key, and cached; a large-log record not yet written out is read from the log tail.

#![expect(
    clippy::indexing_slicing,
    reason = "`out` has an entry at every index `misses` names: each was taken as `out` grew"
)]

use crate::error::{Error, Result};
use crate::format::record;
use crate::region::{value_cache_key, Region};
use crate::tree::memtable::{Entry, Value};
use std::sync::Arc;

impl Region {
    /// The value of an entry, reading the log for pointers (`None`: deleted or expired).
    pub(crate) fn resolve(&self, e: &Entry) -> Result<Option<Vec<u8>>> {
        // The clock is read only for a pair that expires: most do not, and this is every get's path.
        let at = e.value.expire_at();
        if at != 0 && at <= self.sh.now_ms() {
            return Ok(None);
        }
        match e.value.base() {
            Value::Inline(v) => Ok(Some(v.clone())),
            Value::Tombstone | Value::Expiring { .. } => Ok(None),
            Value::Medium { ptr, len, salt } | Value::Large { ptr, len, salt } => {
                self.read_value(*ptr, *len, *salt, &e.key).map(Some)
            }
        }
    }

    /// The values of `entries` (none a tombstone), in order. Log values missing from the cache
    /// are read all at once (`Device::read_many`), so a scan pays about one device latency per
    /// batch instead of one per value.
    /// On an error, the pairs before the failing one come back with it.
    pub(crate) fn resolve_many(&self, entries: Vec<Entry>) -> (Vec<(Entry, Vec<u8>)>, Option<Error>) {
        let ctx = &self.sh.ctx;
        let mut out: Vec<(Entry, Vec<u8>)> = Vec::with_capacity(entries.len());
        // (index in out, ptr, len, salt) of the values to read
        let mut misses: Vec<(usize, u64, u32, u32)> = Vec::new();
        for e in entries {
            let value = match e.value.base() {
                Value::Inline(v) => v.clone(),
                Value::Tombstone | Value::Expiring { .. } => Vec::new(),
                Value::Medium { ptr, len, salt } | Value::Large { ptr, len, salt } => {
                    match ctx.cache.get(value_cache_key(*ptr, *salt)) {
                        Some(v) => v.to_vec(),
                        None => {
                            misses.push((out.len(), *ptr, *len, *salt));
                            Vec::new()
                        }
                    }
                }
            };
            out.push((e, value));
        }
        if misses.is_empty() {
            return (out, None);
        }
        let reqs: Vec<(u64, usize)> = misses.iter().map(|m| (m.1, m.2 as usize)).collect();
        let read = ctx.dev.read_many(&reqs, crate::device::IoKind::Read);
        for ((i, ptr, len, salt), bytes) in misses.into_iter().zip(read) {
            let key = &out[i].0.key;
            // A batched read that failed is tried again alone (pread).
            let value = match bytes {
                Ok(b) => self.value_from_read(&b, ptr, len, salt, key),
                Err(_) => self.read_value(ptr, len, salt, key),
            };
            match value {
                Ok(v) => out[i].1 = v,
                Err(e) => {
                    out.truncate(i);
                    return (out, Some(e));
                }
            }
        }
        (out, None)
    }

    pub(crate) fn read_value(&self, ptr: u64, len: u32, salt: u32, key: &[u8]) -> Result<Vec<u8>> {
        // The cache holds values already checked against their record's checksum and key.
        let ck = value_cache_key(ptr, salt);
        let ctx = &self.sh.ctx;
        if let Some(v) = ctx.cache.get(ck) {
            return Ok(v.to_vec());
        }
        let bytes = ctx.dev.read(ptr, len as usize, crate::device::IoKind::Read)?;
        self.value_from_read(&bytes, ptr, len, salt, key)
    }

    /// The value in `bytes` read at `ptr`, checked against its record's checksum, salt and key
    /// and then cached; a record not (yet) on the device as expected comes from the log tail.
    fn value_from_read(&self, bytes: &[u8], ptr: u64, len: u32, salt: u32, key: &[u8]) -> Result<Vec<u8>> {
        let value = match record::decode(bytes, Some(salt)) {
            Ok(r) if r.key == key => r.value.to_vec(),
            _ => self.read_from_tail(ptr, len, salt, key)?,
        };
        self.sh.ctx.cache.insert(value_cache_key(ptr, salt), Arc::new(value.clone()));
        Ok(value)
    }

    fn bad_ptr(&self, ptr: u64, what: &str) -> Error {
        let bits = self.sh.dev.seg_bits();
        Error::corrupt(ptr >> bits, ptr & ((1 << bits) - 1), what)
    }

    /// The value of a record appended to the large log but perhaps not yet written out.
    fn read_from_tail(&self, ptr: u64, len: u32, salt: u32, key: &[u8]) -> Result<Vec<u8>> {
        let w = self.w.lock();
        if let (Some((seg, s)), Some(_)) = (w.large.seg, w.large.position(&self.sh.dev)) {
            let base = self.sh.dev.seg_base(seg);
            if s == salt && ptr >= base {
                let at = (ptr - base) as usize;
                if let Some(Ok(r)) = w.large.image().get(at..at + len as usize).map(|b| record::decode(b, Some(salt))) {
                    if r.key == key {
                        return Ok(r.value.to_vec());
                    }
                }
            }
        }
        // The tail may have moved on (writing the record out) since the first device read.
        let bytes = self.sh.ctx.dev.read(ptr, len as usize, crate::device::IoKind::Read)?;
        drop(w);
        if let Ok(r) = record::decode(&bytes, Some(salt)) {
            if r.key == key {
                return Ok(r.value.to_vec());
            }
        }
        // What lies there instead says which kind of fault this is (a reused segment, another
        // key's record, a torn or foreign block): logged for the operator and the bug report.
        let found = match record::decode(&bytes, None) {
            Ok(r) => {
                format!("a record of lsn {} for another key or salt (key {:?})", r.lsn, String::from_utf8_lossy(r.key))
            }
            Err(e) => format!("no record ({e:?})"),
        };
        tracing::error!(
            region = self.id,
            backup = self.backup,
            ptr,
            salt,
            key = %String::from_utf8_lossy(key),
            "a value pointer fails its checks: {found}; run `halyard admin verify` on the region"
        );
        Err(self.bad_ptr(ptr, "log record at pointer fails its checks"))
    }
}
