//! Streams: entries appended under increasing IDs, read by ID range, deleted and trimmed
//! (consumer groups are in `stream_groups`). The record holds the entry count and
//! the last ID; each entry is `record | u64 BE ms | u64 BE seq` holding its field-value pairs
//! as `u32 LE length | bytes` each, in order.

use super::encoding::STREAM;
use super::{decode, Keyspace, KsError, Value};
use halyard_engine::{ScanOptions, WriteBatch};
use std::ops::Bound;

/// A stream entry's ID.
pub type Id = (u64, u64);

/// An entry: its ID and field-value pairs.
pub type Entry = (Id, Vec<Vec<u8>>);

/// A stream's record.
#[derive(Clone, Copy, Debug)]
pub struct StreamMeta {
    pub len: u64,
    pub last: Id,
    /// Expiry time (0: none); every entry carries it too.
    pub at: u64,
}

/// A stream record's engine value.
pub fn stream_meta(len: u64, last: Id) -> Vec<u8> {
    let mut v = vec![STREAM];
    v.extend_from_slice(&len.to_le_bytes());
    v.extend_from_slice(&last.0.to_le_bytes());
    v.extend_from_slice(&last.1.to_le_bytes());
    v
}

fn encode_fields(fields: &[&[u8]]) -> Vec<u8> {
    let mut v = Vec::new();
    for f in fields {
        v.extend_from_slice(&(f.len() as u32).to_le_bytes());
        v.extend_from_slice(f);
    }
    v
}

fn decode_fields(mut v: &[u8]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    while let Some(len) = v.get(..4).and_then(|b| b.try_into().ok()).map(u32::from_le_bytes) {
        let Some(f) = v.get(4..4 + len as usize) else { break };
        out.push(f.to_vec());
        v = v.get(4 + len as usize..).unwrap_or_default();
    }
    out
}

impl Keyspace {
    /// The stream at `user`: None if there is none, WRONGTYPE for another type.
    pub fn stream_meta(&self, user: &[u8]) -> Result<Option<StreamMeta>, KsError> {
        let Some((v, at)) = self.db.get_with_expiry(&self.key(user))? else { return Ok(None) };
        match decode(v)? {
            Value::Stream { len, last } => Ok(Some(StreamMeta { len, last, at })),
            _ => Err(KsError::WrongType),
        }
    }

    fn entry_key(&self, user: &[u8], id: Id) -> Vec<u8> {
        let mut k = self.key(user).to_vec();
        k.extend_from_slice(&id.0.to_be_bytes());
        k.extend_from_slice(&id.1.to_be_bytes());
        k
    }

    /// Appends an entry under `id` (greater than the stream's last; the caller checked) to the
    /// stream at `user`, creating it unless `must_exist`. Caller holds the key's lock.
    pub fn xadd_locked(&self, user: &[u8], id: Id, fields: &[&[u8]]) -> Result<(), KsError> {
        let m = match self.stream_meta(user)? {
            Some(m) => m,
            None => {
                self.mark_aggregates()?;
                StreamMeta { len: 0, last: (0, 0), at: 0 }
            }
        };
        let mut b = WriteBatch::new();
        b.put_expiring(self.entry_key(user, id), encode_fields(fields), m.at);
        b.put_expiring(self.key(user).to_vec(), stream_meta(m.len + 1, id), m.at);
        self.db.write(&b)?;
        Ok(())
    }

    /// The entries with IDs in `lo..=hi` (by the bounds given), in order or reversed, at most
    /// `count`.
    pub fn xrange(
        &self,
        user: &[u8],
        lo: Bound<Id>,
        hi: Bound<Id>,
        rev: bool,
        count: Option<usize>,
    ) -> Result<Vec<Entry>, KsError> {
        if self.stream_meta(user)?.is_none() {
            return Ok(Vec::new());
        }
        let skip = self.key(user).len();
        let bound = |b: Bound<Id>| match b {
            Bound::Included(id) => Bound::Included(self.entry_key(user, id)),
            Bound::Excluded(id) => Bound::Excluded(self.entry_key(user, id)),
            Bound::Unbounded => Bound::Unbounded,
        };
        let (lo, hi) = (bound(lo), bound(hi));
        let lo = match lo {
            Bound::Unbounded => Bound::Excluded(self.key(user).to_vec()),
            b => b,
        };
        let hi = match hi {
            Bound::Unbounded => Bound::Included(self.entry_key(user, (u64::MAX, u64::MAX))),
            b => b,
        };
        let mut out = Vec::new();
        for r in self.db.scan_with((lo, hi), ScanOptions { reverse: rev, limit: count }) {
            let (k, v) = r?;
            let id = k.get(skip..).filter(|s| s.len() == 16).and_then(|s| {
                Some((
                    u64::from_be_bytes(s.get(..8)?.try_into().ok()?),
                    u64::from_be_bytes(s.get(8..)?.try_into().ok()?),
                ))
            });
            if let Some(id) = id {
                out.push((id, decode_fields(&v)));
            }
        }
        Ok(out)
    }

    /// Deletes the entries `ids` (those that exist); returns how many. The stream stays, with
    /// its last ID, even when empty, as in Redis. Caller holds the key's lock.
    pub fn xdel_locked(&self, user: &[u8], ids: &[Id]) -> Result<u64, KsError> {
        let Some(m) = self.stream_meta(user)? else { return Ok(0) };
        let mut b = WriteBatch::new();
        let mut n = 0;
        let mut seen = std::collections::HashSet::new();
        for id in ids {
            let k = self.entry_key(user, *id);
            if seen.insert(*id) && self.db.get(&k)?.is_some() {
                b.delete(k);
                n += 1;
            }
        }
        b.put_expiring(self.key(user).to_vec(), stream_meta(m.len.saturating_sub(n), m.last), m.at);
        self.db.write(&b)?;
        Ok(n)
    }
}
