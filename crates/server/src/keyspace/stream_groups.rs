//! A stream's consumer groups: each group's last delivered ID, its consumers, and its pending
//! entries list (PEL: entries delivered to a consumer and not yet acknowledged). They lie under
//! the stream's record `R`, after every possible entry key (an entry's suffix is its 16-byte
//! ID; these suffixes start with 16 bytes FF and are longer), so that deleting, renaming,
//! copying or expiring the stream carries them along, and entry scans never see them:
//!
//! ```text
//! R | FF×16 | 'g' | group                     u64 LE ms | u64 LE seq (last delivered) | i64 LE entries read
//! R | FF×16 | 'c' | u32 BE len | group | consumer      u64 LE seen ms | u64 LE active ms
//! R | FF×16 | 'p' | u32 BE len | group | u64 BE ms | u64 BE seq
//!                                             u64 LE delivery ms | u64 LE deliveries | consumer
//! ```
//!
//! Every one of these records carries the stream's expiry.

use super::encoding::prefix_end;
use super::stream::Id;
use super::{Keyspace, KsError};
use halyard_engine::{ScanOptions, WriteBatch};
use std::ops::Bound;

/// A consumer group.
#[derive(Clone, Debug)]
pub struct Group {
    pub name: Vec<u8>,
    /// The last ID delivered to any of its consumers.
    pub last: Id,
    /// How many entries it has read (-1: unknown, after SETID to an arbitrary ID).
    pub entries_read: i64,
}

/// A consumer of a group.
#[derive(Clone, Debug)]
pub struct Consumer {
    pub name: Vec<u8>,
    /// When it last tried to read or claim (ms).
    pub seen: u64,
    /// When it last got an entry (ms; 0: never).
    pub active: u64,
}

/// An entry of a group's PEL.
#[derive(Clone, Debug)]
pub struct Pending {
    pub id: Id,
    pub consumer: Vec<u8>,
    /// When it was last delivered (ms).
    pub delivered: u64,
    pub deliveries: u64,
}

/// A record under a prefix: its key's suffix and its value.
type Row = (Vec<u8>, Vec<u8>);

fn u64_at(v: &[u8], at: usize) -> u64 {
    v.get(at..at + 8).and_then(|b| b.try_into().ok()).map_or(0, u64::from_le_bytes)
}

fn id_of(s: &[u8]) -> Option<Id> {
    Some((u64::from_be_bytes(s.get(..8)?.try_into().ok()?), u64::from_be_bytes(s.get(8..16)?.try_into().ok()?)))
}

impl Keyspace {
    fn groups_base(&self, user: &[u8], tag: u8) -> Vec<u8> {
        let mut k = self.key(user).to_vec();
        k.extend_from_slice(&[0xff; 16]);
        k.push(tag);
        k
    }

    fn group_key(&self, user: &[u8], group: &[u8]) -> Vec<u8> {
        [self.groups_base(user, b'g').as_slice(), group].concat()
    }

    /// The prefix of a group's consumers (`c`) or PEL (`p`).
    fn member_prefix(&self, user: &[u8], tag: u8, group: &[u8]) -> Vec<u8> {
        let mut k = self.groups_base(user, tag);
        k.extend_from_slice(&(group.len() as u32).to_be_bytes());
        k.extend_from_slice(group);
        k
    }

    fn pending_key(&self, user: &[u8], group: &[u8], id: Id) -> Vec<u8> {
        let mut k = self.member_prefix(user, b'p', group);
        k.extend_from_slice(&id.0.to_be_bytes());
        k.extend_from_slice(&id.1.to_be_bytes());
        k
    }

    /// The records under `prefix`, with their keys' suffixes after it, at most `limit`.
    fn under(&self, prefix: &[u8], from: Bound<Vec<u8>>, limit: Option<usize>) -> Result<Vec<Row>, KsError> {
        let hi = prefix_end(prefix).map_or(Bound::Unbounded, Bound::Excluded);
        let lo = match from {
            Bound::Unbounded => Bound::Included(prefix.to_vec()),
            b => b,
        };
        let mut out = Vec::new();
        for r in self.db.scan_with((lo, hi), ScanOptions { reverse: false, limit }) {
            let (k, v) = r?;
            out.push((k.get(prefix.len()..).unwrap_or_default().to_vec(), v));
        }
        Ok(out)
    }

    /// The stream's groups, by name.
    pub fn groups(&self, user: &[u8]) -> Result<Vec<Group>, KsError> {
        let rows = self.under(&self.groups_base(user, b'g'), Bound::Unbounded, None)?;
        Ok(rows.into_iter().map(|(name, v)| decode_group(name, &v)).collect())
    }

    pub fn group(&self, user: &[u8], group: &[u8]) -> Result<Option<Group>, KsError> {
        Ok(self.db.get(&self.group_key(user, group))?.map(|v| decode_group(group.to_vec(), &v)))
    }

    pub fn put_group(&self, b: &mut WriteBatch, user: &[u8], g: &Group, at: u64) {
        let mut v = Vec::with_capacity(24);
        v.extend_from_slice(&g.last.0.to_le_bytes());
        v.extend_from_slice(&g.last.1.to_le_bytes());
        v.extend_from_slice(&g.entries_read.to_le_bytes());
        b.put_expiring(self.group_key(user, &g.name), v, at);
    }

    /// Deletes a group with its consumers and PEL.
    pub fn delete_group(&self, b: &mut WriteBatch, user: &[u8], group: &[u8]) -> Result<(), KsError> {
        b.delete(self.group_key(user, group));
        for tag in [b'c', b'p'] {
            let p = self.member_prefix(user, tag, group);
            for (suffix, _) in self.under(&p, Bound::Unbounded, None)? {
                b.delete([p.as_slice(), &suffix].concat());
            }
        }
        Ok(())
    }

    pub fn consumers(&self, user: &[u8], group: &[u8]) -> Result<Vec<Consumer>, KsError> {
        let rows = self.under(&self.member_prefix(user, b'c', group), Bound::Unbounded, None)?;
        Ok(rows.into_iter().map(|(name, v)| Consumer { name, seen: u64_at(&v, 0), active: u64_at(&v, 8) }).collect())
    }

    pub fn consumer(&self, user: &[u8], group: &[u8], name: &[u8]) -> Result<Option<Consumer>, KsError> {
        let k = [self.member_prefix(user, b'c', group).as_slice(), name].concat();
        Ok(self.db.get(&k)?.map(|v| Consumer { name: name.to_vec(), seen: u64_at(&v, 0), active: u64_at(&v, 8) }))
    }

    pub fn put_consumer(&self, b: &mut WriteBatch, user: &[u8], group: &[u8], c: &Consumer, at: u64) {
        let k = [self.member_prefix(user, b'c', group).as_slice(), &c.name].concat();
        b.put_expiring(k, [c.seen.to_le_bytes(), c.active.to_le_bytes()].concat(), at);
    }

    pub fn delete_consumer(&self, b: &mut WriteBatch, user: &[u8], group: &[u8], name: &[u8]) {
        b.delete([self.member_prefix(user, b'c', group).as_slice(), name].concat());
    }

    /// The group's PEL entries with IDs from `from` on, in ID order, at most `limit`.
    pub fn pending(
        &self,
        user: &[u8],
        group: &[u8],
        from: Bound<Id>,
        limit: Option<usize>,
    ) -> Result<Vec<Pending>, KsError> {
        let p = self.member_prefix(user, b'p', group);
        let from = match from {
            Bound::Included(id) => Bound::Included(self.pending_key(user, group, id)),
            Bound::Excluded(id) => Bound::Excluded(self.pending_key(user, group, id)),
            Bound::Unbounded => Bound::Unbounded,
        };
        let rows = self.under(&p, from, limit)?;
        Ok(rows
            .into_iter()
            .filter_map(|(s, v)| {
                Some(Pending {
                    id: id_of(&s)?,
                    delivered: u64_at(&v, 0),
                    deliveries: u64_at(&v, 8),
                    consumer: v.get(16..)?.to_vec(),
                })
            })
            .collect())
    }

    pub fn pending_entry(&self, user: &[u8], group: &[u8], id: Id) -> Result<Option<Pending>, KsError> {
        Ok(self.db.get(&self.pending_key(user, group, id))?.and_then(|v| {
            Some(Pending { id, delivered: u64_at(&v, 0), deliveries: u64_at(&v, 8), consumer: v.get(16..)?.to_vec() })
        }))
    }

    pub fn put_pending(&self, b: &mut WriteBatch, user: &[u8], group: &[u8], p: &Pending, at: u64) {
        let v = [&p.delivered.to_le_bytes()[..], &p.deliveries.to_le_bytes(), &p.consumer].concat();
        b.put_expiring(self.pending_key(user, group, p.id), v, at);
    }

    pub fn delete_pending(&self, b: &mut WriteBatch, user: &[u8], group: &[u8], id: Id) {
        b.delete(self.pending_key(user, group, id));
    }

    /// Creates an empty stream at `user` (XGROUP CREATE ... MKSTREAM). Caller holds the key's
    /// lock and saw no key there.
    pub fn create_stream_locked(&self, user: &[u8]) -> Result<(), KsError> {
        self.mark_aggregates()?;
        self.db.put(&self.key(user), &super::stream::stream_meta(0, (0, 0)))?;
        Ok(())
    }

    /// One entry's fields, if it exists.
    pub fn stream_entry(&self, user: &[u8], id: Id) -> Result<Option<Vec<Vec<u8>>>, KsError> {
        let e = self.xrange(user, Bound::Included(id), Bound::Included(id), false, Some(1))?;
        Ok(e.into_iter().next().map(|(_, f)| f))
    }
}

fn decode_group(name: Vec<u8>, v: &[u8]) -> Group {
    let read = v.get(16..24).and_then(|b| b.try_into().ok()).map_or(-1, i64::from_le_bytes);
    Group { name, last: (u64_at(v, 0), u64_at(v, 8)), entries_read: read }
}
