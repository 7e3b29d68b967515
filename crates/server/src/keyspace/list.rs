//! Lists: a record holding the indices `head..tail` of the elements, and one engine key per
//! element (`record | u64 BE index`, `encoding`). A push at either end writes one element and
//! the record; a pop deletes one and rewrites the record; reading by position is a point read
//! or a range scan. Commands that remove or insert in the middle (LREM, LINSERT) rewrite the
//! elements after the change, O(N) as in Redis.

use super::encoding::list_meta;
use super::{decode, Keyspace, KsError, Value};
use halyard_engine::{ScanOptions, WriteBatch};
use std::ops::Bound;

/// Where a new list's first element goes: the middle of the index space, so that either end
/// can grow by 2^63 elements.
const MIDDLE: u64 = 1 << 63;

/// A list's record.
#[derive(Clone, Copy, Debug)]
pub struct ListMeta {
    /// The first element's index.
    pub head: u64,
    /// One past the last element's index.
    pub tail: u64,
    /// Expiry time (0: none); every element carries it too.
    pub at: u64,
}

impl ListMeta {
    /// The number of elements.
    pub fn len(&self) -> u64 {
        self.tail - self.head
    }

    /// Whether it has no element (a list's record is deleted then).
    pub fn is_empty(&self) -> bool {
        self.head == self.tail
    }
}

/// Which end of a list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum End {
    Left,
    Right,
}

impl Keyspace {
    /// The list at `user`: None if there is none, WRONGTYPE for another type.
    pub fn list_meta(&self, user: &[u8]) -> Result<Option<ListMeta>, KsError> {
        let Some((v, at)) = self.db.get_with_expiry(&self.key(user))? else { return Ok(None) };
        match decode(v)? {
            Value::List { head, tail } if head <= tail => Ok(Some(ListMeta { head, tail, at })),
            Value::List { .. } => Err(KsError::Engine(halyard_engine::Error::Corruption {
                segment: 0,
                offset: 0,
                what: "a list's head is past its tail".into(),
            })),
            _ => Err(KsError::WrongType),
        }
    }

    fn element_key(&self, user: &[u8], index: u64) -> Vec<u8> {
        let mut k = self.key(user).to_vec();
        k.extend_from_slice(&index.to_be_bytes());
        k
    }

    /// Writes the record of `m`, or deletes it when the list is empty, into `b`.
    fn put_list_meta(&self, b: &mut WriteBatch, user: &[u8], m: &ListMeta) {
        if m.is_empty() {
            b.delete(self.key(user).to_vec());
        } else {
            b.put_expiring(self.key(user).to_vec(), list_meta(m.head, m.tail), m.at);
        }
    }

    /// LPUSH/RPUSH: pushes `values` one after the other at `end`; `only_existing` for
    /// LPUSHX/RPUSHX. Returns the new length (0 when nothing was pushed to no list). Caller
    /// holds the key's lock.
    pub fn push_locked(&self, user: &[u8], end: End, values: &[&[u8]], only_existing: bool) -> Result<u64, KsError> {
        let mut m = match self.list_meta(user)? {
            Some(m) => m,
            None if only_existing => return Ok(0),
            None => {
                self.mark_aggregates()?;
                ListMeta { head: MIDDLE, tail: MIDDLE, at: 0 }
            }
        };
        let mut b = WriteBatch::new();
        for v in values {
            let index = match end {
                End::Left => {
                    m.head -= 1;
                    m.head
                }
                End::Right => {
                    m.tail += 1;
                    m.tail - 1
                }
            };
            b.put_expiring(self.element_key(user, index), v.to_vec(), m.at);
        }
        self.put_list_meta(&mut b, user, &m);
        self.db.write(&b)?;
        Ok(m.len())
    }

    /// LPOP/RPOP: removes up to `count` elements from `end`, in the order they were popped.
    /// Caller holds the key's lock.
    pub fn pop_locked(&self, user: &[u8], end: End, count: u64) -> Result<Vec<Vec<u8>>, KsError> {
        let Some(mut m) = self.list_meta(user)? else { return Ok(Vec::new()) };
        let n = count.min(m.len());
        let (lo, hi) = match end {
            End::Left => (m.head, m.head + n),
            End::Right => (m.tail - n, m.tail),
        };
        let mut popped = self.elements(user, lo, hi)?;
        if end == End::Right {
            popped.reverse();
        }
        let mut b = WriteBatch::new();
        for i in lo..hi {
            b.delete(self.element_key(user, i));
        }
        match end {
            End::Left => m.head = hi,
            End::Right => m.tail = lo,
        }
        self.put_list_meta(&mut b, user, &m);
        self.db.write(&b)?;
        Ok(popped)
    }

    /// The elements at indices `lo..hi` (absolute), in order.
    fn elements(&self, user: &[u8], lo: u64, hi: u64) -> Result<Vec<Vec<u8>>, KsError> {
        if lo >= hi {
            return Ok(Vec::new());
        }
        let range = (Bound::Included(self.element_key(user, lo)), Bound::Excluded(self.element_key(user, hi)));
        let limit = usize::try_from(hi - lo).ok();
        let scan = self.db.scan_with(range, ScanOptions { reverse: false, limit });
        Ok(scan.map(|r| r.map(|(_, v)| v)).collect::<Result<_, _>>()?)
    }

    /// LRANGE: the elements from `start` to `stop` (inclusive, negative from the end).
    pub fn lrange(&self, user: &[u8], start: i64, stop: i64) -> Result<Vec<Vec<u8>>, KsError> {
        let Some(m) = self.list_meta(user)? else { return Ok(Vec::new()) };
        let Some((lo, hi)) = span_of(m.len(), start, stop) else { return Ok(Vec::new()) };
        self.elements(user, m.head + lo, m.head + hi)
    }

    /// LINDEX: the element at `index` (negative from the end).
    pub fn lindex(&self, user: &[u8], index: i64) -> Result<Option<Vec<u8>>, KsError> {
        let Some(m) = self.list_meta(user)? else { return Ok(None) };
        let Some(i) = position(m.len(), index) else { return Ok(None) };
        Ok(self.db.get(&self.element_key(user, m.head + i))?)
    }

    /// LSET: replaces the element at `index`. Errors: no such key, index out of range.
    /// Caller holds the key's lock.
    pub fn lset_locked(&self, user: &[u8], index: i64, v: &[u8]) -> Result<Result<(), &'static str>, KsError> {
        let Some(m) = self.list_meta(user)? else { return Ok(Err("ERR no such key")) };
        let Some(i) = position(m.len(), index) else { return Ok(Err("ERR index out of range")) };
        self.db.put_expiring(&self.element_key(user, m.head + i), v, m.at)?;
        // The record too, so that WATCH and replication see the key change.
        self.db.put_expiring(&self.key(user), &list_meta(m.head, m.tail), m.at)?;
        Ok(Ok(()))
    }

    /// LLEN.
    pub fn llen(&self, user: &[u8]) -> Result<u64, KsError> {
        Ok(self.list_meta(user)?.map_or(0, |m| m.len()))
    }

    /// Every element, in order.
    pub fn list_all(&self, user: &[u8]) -> Result<Vec<Vec<u8>>, KsError> {
        self.lrange(user, 0, -1)
    }

    /// Replaces the list's elements with `items` (its expiry kept): the list's new contents
    /// after LREM, LINSERT or LTRIM. Caller holds the key's lock.
    pub fn rewrite_list_locked(&self, user: &[u8], m: &ListMeta, items: &[Vec<u8>]) -> Result<(), KsError> {
        let mut b = WriteBatch::new();
        for i in m.head..m.tail {
            b.delete(self.element_key(user, i));
        }
        let new = ListMeta { head: m.head, tail: m.head + items.len() as u64, at: m.at };
        for (i, v) in (new.head..).zip(items) {
            b.put_expiring(self.element_key(user, i), v.clone(), m.at);
        }
        self.put_list_meta(&mut b, user, &new);
        self.db.write(&b)?;
        Ok(())
    }
}

/// The offset of `index` (negative from the end) in a list of `len`, if it is inside.
pub fn position(len: u64, index: i64) -> Option<u64> {
    let i = if index < 0 { i128::from(len) + i128::from(index) } else { i128::from(index) };
    u64::try_from(i).ok().filter(|&i| i < len)
}

/// LRANGE's and LTRIM's `start..=stop` (negative from the end) as offsets `lo..hi` of a list
/// of `len`; None when it holds nothing.
pub fn span_of(len: u64, start: i64, stop: i64) -> Option<(u64, u64)> {
    let len_i = i128::from(len);
    let from_end = |x: i64| if x < 0 { len_i + i128::from(x) } else { i128::from(x) };
    // A start before the head is the head; a stop before it leaves nothing.
    let (lo, hi) = (from_end(start).max(0), from_end(stop).min(len_i - 1));
    if lo > hi || lo >= len_i {
        return None;
    }
    Some((u64::try_from(lo).ok()?, u64::try_from(hi + 1).ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_follow_redis() {
        assert_eq!(span_of(5, 0, -1), Some((0, 5)));
        assert_eq!(span_of(5, -2, -1), Some((3, 5)));
        assert_eq!(span_of(5, -100, 100), Some((0, 5)));
        assert_eq!(span_of(5, 3, 1), None);
        assert_eq!(span_of(4, 0, -5), None);
        assert_eq!(span_of(1, 0, -5), None);
        assert_eq!(span_of(4, -10, -4), Some((0, 1)));
        assert_eq!(span_of(5, 5, 10), None);
        assert_eq!(span_of(0, 0, -1), None);
        assert_eq!(span_of(5, i64::MIN, i64::MAX), Some((0, 5)));
        assert_eq!(position(3, -1), Some(2));
        assert_eq!(position(3, 3), None);
        assert_eq!(position(3, -4), None);
        assert_eq!(position(3, i64::MIN), None);
    }
}
