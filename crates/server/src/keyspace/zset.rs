//! Sorted sets: a record holding the member count, each member's score under `01 | member`
//! and the score index `02 | score_key(score) | member` (`encoding`), which keeps the members
//! in ZRANGE's order: by score, ties by member.
//!
//! Ranges by score seek the index, ranges by member (BYLEX) seek the member records (for a set
//! whose scores are all equal, as Redis requires for them, both orders are the same). Ranks
//! have no counts to seek by: finding the member at rank r, or the rank of a member, walks the
//! index from its start (O(rank)). As for hashes, every record of a sorted set carries its
//! expiry time, so the key expires as a whole.
//!
//! Pops leave tombstones at the ends of the score index until compaction, and each ZPOPMIN
//! would walk past all of them. So the record may also hold pop hints: the index suffix
//! (`score_key | member`) of the last member popped from the low end and from the high end.
//! No member's index entry lies at or below the low hint (at or above the high one): a pop
//! starts its walk after it. A write that puts a member at or beyond a hint drops that hint;
//! removals keep hints true. A record without hints is the 9-byte form.

use super::encoding::{counted, field_name, prefix_end, score_key, score_of, ZSET};
use super::{decode, Keyspace, KsError, Value};
use halyard_engine::{Scan, ScanOptions, WriteBatch};
use std::collections::HashMap;
use std::ops::Bound;

/// The tag of a member's record under the sorted set's record.
const MEMBER: u8 = 1;
/// The tag of a member's place in the score index.
const INDEX: u8 = 2;

/// A member and its score.
pub type Scored = (Vec<u8>, f64);

/// A bound of a range by member (BYLEX): `-`, `+`, `[member` or `(member`.
#[derive(Clone, Debug, PartialEq)]
pub enum Lex {
    /// `-`: below every member.
    Min,
    /// `+`: above every member.
    Max,
    /// `[member`: inclusive.
    In(Vec<u8>),
    /// `(member`: exclusive.
    Ex(Vec<u8>),
}

/// A sorted set's record.
struct Meta {
    len: u64,
    /// Expiry time (0: none); every record of the set carries it too.
    at: u64,
    /// The pop hints: low end, high end.
    hints: [Option<Vec<u8>>; 2],
}

/// A sorted set record's value: the count and, when there are, the pop hints.
fn zset_record(len: u64, hints: &[Option<Vec<u8>>; 2]) -> Vec<u8> {
    let mut v = counted(ZSET, len);
    if hints.iter().any(Option::is_some) {
        for h in hints {
            let h = h.as_deref().unwrap_or_default();
            v.extend_from_slice(&(h.len() as u32).to_le_bytes());
            v.extend_from_slice(h);
        }
    }
    v
}

/// The pop hints of a record's value (none in the 9-byte form, or an empty one).
fn hints_of(v: &[u8]) -> [Option<Vec<u8>>; 2] {
    let mut rest = v.get(9..).unwrap_or_default();
    let mut take = || {
        let n = rest.get(..4).and_then(|b| b.try_into().ok()).map(u32::from_le_bytes)? as usize;
        let h = rest.get(4..4 + n)?.to_vec();
        rest = rest.get(4 + n..).unwrap_or_default();
        (!h.is_empty()).then_some(h)
    };
    let lo = take();
    [lo, take()]
}

/// The members of a range, in order (`zrange_by_score`, `zrange_by_lex`).
pub struct ZIter {
    scan: Option<Scan>,
    /// Length of the engine keys' common part (record key and tag).
    skip: usize,
    /// Walks the score index (else the member records).
    index: bool,
    /// A range by member taken along the score index (a set whose scores differ).
    lex: Option<LexWalk>,
}

/// A range by member along the score index, as Redis walks its compact sets: from the first
/// member (the last, reversed) within the range's near end, while members stay within its far
/// end.
struct LexWalk {
    lo: Lex,
    hi: Lex,
    rev: bool,
    started: bool,
}

impl LexWalk {
    /// Whether `m` is within the bound where the walk starts, and within the one where it ends.
    fn ends(&self, m: &[u8]) -> (bool, bool) {
        let (lo, hi) = (above(m, &self.lo), below(m, &self.hi));
        if self.rev {
            (hi, lo)
        } else {
            (lo, hi)
        }
    }
}

/// Whether `m` is at or above the lower bound `lo`.
fn above(m: &[u8], lo: &Lex) -> bool {
    match lo {
        Lex::Min => true,
        Lex::Max => false,
        Lex::In(x) => m >= x.as_slice(),
        Lex::Ex(x) => m > x.as_slice(),
    }
}

/// Whether `m` is at or below the upper bound `hi`.
fn below(m: &[u8], hi: &Lex) -> bool {
    match hi {
        Lex::Max => true,
        Lex::Min => false,
        Lex::In(x) => m <= x.as_slice(),
        Lex::Ex(x) => m < x.as_slice(),
    }
}

impl Iterator for ZIter {
    type Item = Result<Scored, KsError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let item = self.next_raw()?;
            let (Some(w), Ok((m, _))) = (self.lex.as_mut(), &item) else { return Some(item) };
            let (start, end) = w.ends(m);
            if !w.started && !start {
                continue;
            }
            w.started = true;
            if end {
                return Some(item);
            }
            self.scan = None;
            return None;
        }
    }
}

impl ZIter {
    fn next_raw(&mut self) -> Option<Result<Scored, KsError>> {
        let (k, v) = match self.scan.as_mut()?.next()? {
            Ok(kv) => kv,
            Err(e) => return Some(Err(e.into())),
        };
        let rest = k.get(self.skip..).unwrap_or_default();
        let parsed = if self.index {
            rest.split_first_chunk::<8>().map(|(s, m)| (m.to_vec(), score_of(*s)))
        } else {
            decode_score(&v).map(|s| (rest.to_vec(), s))
        };
        Some(parsed.ok_or_else(corrupt))
    }
}

fn corrupt() -> KsError {
    KsError::Engine(halyard_engine::Error::Corruption { segment: 0, offset: 0, what: "bad sorted set record".into() })
}

fn decode_score(v: &[u8]) -> Option<f64> {
    v.first_chunk::<8>().map(|b| f64::from_le_bytes(*b))
}

/// `base` followed by `parts`.
fn join(base: &[u8], parts: &[&[u8]]) -> Vec<u8> {
    let mut k = base.to_vec();
    for p in parts {
        k.extend_from_slice(p);
    }
    k
}

/// Whether the engine range `lo..hi` holds no key at all.
fn empty_range(lo: &Bound<Vec<u8>>, hi: &Bound<Vec<u8>>) -> bool {
    match (lo, hi) {
        (Bound::Included(l), Bound::Included(h)) => l > h,
        (Bound::Included(l) | Bound::Excluded(l), Bound::Included(h) | Bound::Excluded(h)) => l >= h,
        _ => false,
    }
}

impl Keyspace {
    /// The sorted set at `user`: None if there is none, WRONGTYPE for another type.
    fn zset_meta(&self, user: &[u8]) -> Result<Option<Meta>, KsError> {
        let Some((v, at)) = self.db.get_with_expiry(&self.key(user))? else { return Ok(None) };
        let hints = hints_of(&v);
        match decode(v)? {
            Value::ZSet(len) => Ok(Some(Meta { len, at, hints })),
            _ => Err(KsError::WrongType),
        }
    }

    /// The engine key of `member`'s score.
    fn zmember_key(&self, user: &[u8], member: &[u8]) -> Vec<u8> {
        join(&self.key(user), &[&[MEMBER], member])
    }

    /// The engine key of `member`'s place in the score index.
    fn zindex_key(&self, user: &[u8], score: f64, member: &[u8]) -> Vec<u8> {
        join(&self.key(user), &[&[INDEX], &score_key(score), member])
    }

    /// A member's score, the key's type unchecked.
    fn zscore_raw(&self, user: &[u8], member: &[u8]) -> Result<Option<f64>, KsError> {
        match self.db.get(&self.zmember_key(user, member))? {
            None => Ok(None),
            Some(v) => decode_score(&v).map(Some).ok_or_else(corrupt),
        }
    }

    /// ZCARD: the number of members (0 for no key).
    pub fn zcard(&self, user: &[u8]) -> Result<u64, KsError> {
        Ok(self.zset_meta(user)?.map_or(0, |m| m.len))
    }

    /// ZSCORE: a member's score.
    pub fn zscore(&self, user: &[u8], member: &[u8]) -> Result<Option<f64>, KsError> {
        if self.zset_meta(user)?.is_none() {
            return Ok(None);
        }
        self.zscore_raw(user, member)
    }

    /// The members with scores within `lo..hi`, by score ascending or (`rev`) descending.
    pub fn zrange_by_score(&self, user: &[u8], lo: Bound<f64>, hi: Bound<f64>, rev: bool) -> Result<ZIter, KsError> {
        let base = join(&self.key(user), &[&[INDEX]]);
        let end = prefix_end(&base).unwrap_or_default();
        let after = |s: f64| prefix_end(&join(&base, &[&score_key(s)])).unwrap_or_else(|| end.clone());
        let lo = match lo {
            Bound::Included(s) => join(&base, &[&score_key(s)]),
            Bound::Excluded(s) => after(s),
            Bound::Unbounded => base.clone(),
        };
        let hi = match hi {
            Bound::Included(s) => after(s),
            Bound::Excluded(s) => join(&base, &[&score_key(s)]),
            Bound::Unbounded => end,
        };
        self.zwalk(user, (Bound::Included(lo), Bound::Excluded(hi)), rev, true, base.len())
    }

    /// Every member, by score.
    pub fn zall(&self, user: &[u8], rev: bool) -> Result<ZIter, KsError> {
        self.zrange_by_score(user, Bound::Unbounded, Bound::Unbounded, rev)
    }

    /// The members from the low end (from the high end with `max`), as a pop takes them: the
    /// walk starts after the pop hint of that end.
    pub fn zpop_order(&self, user: &[u8], max: bool) -> Result<ZIter, KsError> {
        let Some(m) = self.zset_meta(user)? else { return self.zall(user, max) };
        let base = join(&self.key(user), &[&[INDEX]]);
        let end = prefix_end(&base).unwrap_or_default();
        let hint = |i: usize| m.hints.get(i).cloned().flatten().map(|h| join(&base, &[&h]));
        let lo = hint(0).filter(|_| !max).map_or(Bound::Included(base.clone()), Bound::Excluded);
        let hi = hint(1).filter(|_| max).map_or(Bound::Excluded(end), Bound::Excluded);
        self.zwalk(user, (lo, hi), max, true, base.len())
    }

    /// The members within `lo..hi` by member, ascending or (`rev`) descending. Redis asks for
    /// equal scores in a range by member; a set whose scores differ is walked along the score
    /// index as Redis walks its compact sets (O(n)).
    pub fn zrange_by_lex(&self, user: &[u8], lo: &Lex, hi: &Lex, rev: bool) -> Result<ZIter, KsError> {
        if let Some((first, last)) = self.zends(user)? {
            if first.1 != last.1 {
                let (b0, b1) = (join(&self.key(user), &[&[INDEX]]), join(&self.key(user), &[&[INDEX + 1]]));
                let skip = b0.len();
                let fits = below(&first.0, hi) && above(&last.0, lo);
                let range = if fits {
                    (Bound::Included(b0), Bound::Excluded(b1))
                } else {
                    (Bound::Excluded(b0.clone()), Bound::Excluded(b0))
                };
                let mut it = self.zwalk(user, range, rev, true, skip)?;
                it.lex = Some(LexWalk { lo: lo.clone(), hi: hi.clone(), rev, started: false });
                return Ok(it);
            }
        }
        self.zrange_by_member(user, lo, hi, rev)
    }

    /// The members within `lo..hi` in member order, whatever their scores (ZSCAN's order).
    pub fn zrange_by_member(&self, user: &[u8], lo: &Lex, hi: &Lex, rev: bool) -> Result<ZIter, KsError> {
        let base = join(&self.key(user), &[&[MEMBER]]);
        let end = prefix_end(&base).unwrap_or_default();
        let lo = match lo {
            Lex::Min => Bound::Included(base.clone()),
            Lex::Max => Bound::Excluded(end.clone()),
            Lex::In(m) => Bound::Included(join(&base, &[m])),
            Lex::Ex(m) => Bound::Excluded(join(&base, &[m])),
        };
        let hi = match hi {
            Lex::Max => Bound::Excluded(end),
            Lex::Min => Bound::Excluded(base.clone()),
            Lex::In(m) => Bound::Included(join(&base, &[m])),
            Lex::Ex(m) => Bound::Excluded(join(&base, &[m])),
        };
        self.zwalk(user, (lo, hi), rev, false, base.len())
    }

    /// A walk of one engine range of the sorted set at `user` (none when there is no set).
    fn zwalk(
        &self,
        user: &[u8],
        range: (Bound<Vec<u8>>, Bound<Vec<u8>>),
        reverse: bool,
        index: bool,
        skip: usize,
    ) -> Result<ZIter, KsError> {
        let exists = self.zset_meta(user)?.is_some();
        let scan = (exists && !empty_range(&range.0, &range.1))
            .then(|| self.db.scan_with(range, ScanOptions { reverse, limit: None }));
        Ok(ZIter { scan, skip, index, lex: None })
    }

    /// The first and last members by score (None: no set).
    fn zends(&self, user: &[u8]) -> Result<Option<(Scored, Scored)>, KsError> {
        let first = self.zall(user, false)?.next().transpose()?;
        let last = self.zall(user, true)?.next().transpose()?;
        Ok(first.zip(last))
    }

    /// ZRANK: a member's rank from the lowest score (0-based) and its score. Counts the index
    /// entries before it: O(rank).
    pub fn zrank(&self, user: &[u8], member: &[u8]) -> Result<Option<(u64, f64)>, KsError> {
        if self.zset_meta(user)?.is_none() {
            return Ok(None);
        }
        let Some(score) = self.zscore_raw(user, member)? else { return Ok(None) };
        let lo = join(&self.key(user), &[&[INDEX]]);
        let hi = self.zindex_key(user, score, member);
        let mut n = 0;
        for r in self.db.scan((Bound::Included(lo), Bound::Excluded(hi))) {
            r?;
            n += 1;
        }
        Ok(Some((n, score)))
    }

    /// The members of a sorted set with their scores, or of a set with score 1 (what
    /// ZUNIONSTORE and its kin take); None when there is no key, WRONGTYPE for other types.
    pub fn zset_or_set(&self, user: &[u8]) -> Result<Option<Vec<Scored>>, KsError> {
        match self.get(user)? {
            None => Ok(None),
            Some(Value::ZSet(_)) => self.zall(user, false)?.collect::<Result<Vec<_>, _>>().map(Some),
            Some(Value::Set(_)) => {
                let p = self.key(user).len();
                let mut out = Vec::new();
                for r in self.db.scan(self.fields_range(user)) {
                    let (k, _) = r?;
                    out.push((field_name(k.get(p..).unwrap_or_default(), false).to_vec(), 1.0));
                }
                Ok(Some(out))
            }
            Some(_) => Err(KsError::WrongType),
        }
    }

    /// A change of the sorted set at `user` (WRONGTYPE if it holds another type), written by
    /// `ZWrite::commit`. Caller holds the key's lock until then.
    pub fn zwrite_locked(&self, user: &[u8]) -> Result<ZWrite<'_>, KsError> {
        let meta = self.zset_meta(user)?;
        Ok(ZWrite {
            ks: self,
            user: user.to_vec(),
            existed: meta.is_some(),
            len: meta.as_ref().map_or(0, |m| m.len),
            at: meta.as_ref().map_or(0, |m| m.at),
            batch: WriteBatch::new(),
            pending: HashMap::new(),
            changed: false,
            hints: meta.as_ref().map_or([None, None], |m| m.hints.clone()),
            put: [None, None],
        })
    }
}

/// Changes to one sorted set, gathered into one engine batch: members set and removed one
/// after the other, each seeing the ones before it.
pub struct ZWrite<'a> {
    ks: &'a Keyspace,
    user: Vec<u8>,
    existed: bool,
    len: u64,
    at: u64,
    batch: WriteBatch,
    /// Scores as this change leaves them (None: removed).
    pending: HashMap<Vec<u8>, Option<f64>>,
    changed: bool,
    /// The pop hints (low, high), and the lowest and highest index suffixes this change put.
    hints: [Option<Vec<u8>>; 2],
    put: [Option<Vec<u8>>; 2],
}

impl ZWrite<'_> {
    /// The number of members, with the changes so far.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the set (with the changes so far) has no member.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// A member's score, with the changes so far.
    pub fn score(&self, member: &[u8]) -> Result<Option<f64>, KsError> {
        match self.pending.get(member) {
            Some(s) => Ok(*s),
            None if self.existed => self.ks.zscore_raw(&self.user, member),
            None => Ok(None),
        }
    }

    /// Sets a member's score (a new member or a new score); returns its old score.
    pub fn set(&mut self, member: &[u8], score: f64) -> Result<Option<f64>, KsError> {
        // As Redis: -0 is kept as 0.
        let score = if score == 0.0 { 0.0 } else { score };
        let old = self.score(member)?;
        match old {
            Some(o) => {
                self.batch.delete(self.ks.zindex_key(&self.user, o, member));
            }
            None => self.len += 1,
        }
        let at = self.at;
        self.batch.put_expiring(self.ks.zmember_key(&self.user, member), score.to_le_bytes().to_vec(), at);
        self.batch.put_expiring(self.ks.zindex_key(&self.user, score, member), Vec::new(), at);
        // Only a set with pop hints needs to know where members were put (ZADD's hot path
        // builds nothing otherwise).
        if self.hints.iter().any(Option::is_some) {
            let suffix = [score_key(score).as_slice(), member].concat();
            if self.put[0].as_ref().is_none_or(|p| suffix < *p) {
                self.put[0] = Some(suffix.clone());
            }
            if self.put[1].as_ref().is_none_or(|p| suffix > *p) {
                self.put[1] = Some(suffix);
            }
        }
        self.pending.insert(member.to_vec(), Some(score));
        self.changed = true;
        Ok(old)
    }

    /// Removes a member; returns whether it was there.
    pub fn remove(&mut self, member: &[u8]) -> Result<bool, KsError> {
        let Some(old) = self.score(member)? else { return Ok(false) };
        self.batch.delete(self.ks.zmember_key(&self.user, member));
        self.batch.delete(self.ks.zindex_key(&self.user, old, member));
        self.pending.insert(member.to_vec(), None);
        self.len = self.len.saturating_sub(1);
        self.changed = true;
        Ok(true)
    }

    /// Records that `member` (with `score`) was popped from the low end (the high end with
    /// `max`): later pops start after it. Call after `remove`, in a change that only pops (a
    /// member it put would not be weighed against the new hint).
    pub fn popped(&mut self, member: &[u8], score: f64, max: bool) {
        let suffix = [score_key(score).as_slice(), member].concat();
        if let Some(h) = self.hints.get_mut(usize::from(max)) {
            *h = Some(suffix);
        }
    }

    /// Writes the changes: the record with the new count, or no record once the set is empty.
    pub fn commit(mut self) -> Result<(), KsError> {
        if !self.changed {
            return Ok(());
        }
        // A member put at or beyond a hint makes it false: drop it.
        if let (Some(h), Some(p)) = (&self.hints[0], &self.put[0]) {
            if p <= h {
                self.hints[0] = None;
            }
        }
        if let (Some(h), Some(p)) = (&self.hints[1], &self.put[1]) {
            if p >= h {
                self.hints[1] = None;
            }
        }
        let rec = self.ks.key(&self.user).to_vec();
        if self.len == 0 {
            self.batch.delete(rec);
        } else {
            if !self.existed {
                self.ks.mark_aggregates()?;
            }
            self.batch.put_expiring(rec, zset_record(self.len, &self.hints), self.at);
        }
        self.ks.db.write(&self.batch)?;
        Ok(())
    }
}
