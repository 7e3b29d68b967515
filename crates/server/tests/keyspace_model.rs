//! The Redis key space against a model: random strings, hashes and lists (pushed and popped at
//! both ends, renamed) with arbitrary user keys and
//! field names (empty, holding 00 or FF bytes, looking like the encoding's own suffixes), every
//! read compared with a `BTreeMap` after every step and again after a reopen. Also stores
//! written in layout 2 (raw field names, the empty name written over its hash's record) open
//! and read correctly, and are repaired by their next change.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    missing_docs,
    reason = "test code: a failure stops where it happened"
)]

use halyard_engine::{Db, Options};
use halyard_server::keyspace::list::End;
use halyard_server::keyspace::{key, Keyspace, Value};
use proptest::prelude::*;
use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

#[derive(Clone, Debug, PartialEq)]
enum M {
    Str(Vec<u8>),
    Hash(BTreeMap<Vec<u8>, Vec<u8>>),
    List(VecDeque<Vec<u8>>),
}

#[derive(Clone, Debug)]
enum Op {
    Set(Vec<u8>, Vec<u8>),
    Hset(Vec<u8>, Vec<(Vec<u8>, Vec<u8>)>),
    Hdel(Vec<u8>, Vec<Vec<u8>>),
    Del(Vec<u8>),
    Push(Vec<u8>, bool, Vec<Vec<u8>>),
    Pop(Vec<u8>, bool, u64),
    Rename(Vec<u8>, Vec<u8>),
    Reopen,
}

/// Bytes drawn mostly from the ones the encoding gives meaning to, so that collisions would
/// show: 00, 01, FF and a letter.
fn bytes(max: usize) -> impl Strategy<Value = Vec<u8>> + Clone {
    prop::collection::vec(prop_oneof![Just(0u8), Just(1u8), Just(0xffu8), Just(b'a'), any::<u8>()], 0..max)
}

fn op() -> impl Strategy<Value = Op> {
    let user = bytes(3);
    prop_oneof![
        1 => (user.clone(), bytes(4)).prop_map(|(k, v)| Op::Set(k, v)),
        4 => (user.clone(), prop::collection::vec((bytes(3), bytes(4)), 1..4)).prop_map(|(k, p)| Op::Hset(k, p)),
        2 => (user.clone(), prop::collection::vec(bytes(3), 1..3)).prop_map(|(k, f)| Op::Hdel(k, f)),
        1 => user.clone().prop_map(Op::Del),
        3 => (user.clone(), any::<bool>(), prop::collection::vec(bytes(3), 1..4)).prop_map(|(k, l, v)| Op::Push(k, l, v)),
        2 => (user.clone(), any::<bool>(), 0..4u64).prop_map(|(k, l, n)| Op::Pop(k, l, n)),
        1 => (user.clone(), user).prop_map(|(a, b)| Op::Rename(a, b)),
        1 => Just(Op::Reopen),
    ]
}

fn open(dir: &std::path::Path) -> Keyspace {
    let opts = Options { direct_io: false, cache_bytes: 4 << 20, ..Options::default() };
    Keyspace::new(Arc::new(Db::open(dir, opts).unwrap())).unwrap()
}

fn apply(ks: &Keyspace, model: &mut BTreeMap<Vec<u8>, M>, op: &Op) {
    match op {
        Op::Set(k, v) => {
            let _g = ks.lock(k);
            ks.set(k, v).unwrap();
            model.insert(k.clone(), M::Str(v.clone()));
        }
        Op::Hset(k, pairs) => {
            let _g = ks.lock(k);
            let refs: Vec<(&[u8], &[u8])> = pairs.iter().map(|(f, v)| (f.as_slice(), v.as_slice())).collect();
            let got = ks.hset_locked(k, &refs);
            let M::Hash(h) = model.entry(k.clone()).or_insert_with(|| M::Hash(BTreeMap::new())) else {
                assert!(got.is_err(), "HSET on a string must fail");
                return;
            };
            let mut added = 0;
            for (f, v) in pairs {
                added += u64::from(h.insert(f.clone(), v.clone()).is_none());
            }
            assert_eq!(got.unwrap(), added, "HSET's count of new fields");
        }
        Op::Hdel(k, fields) => {
            let _g = ks.lock(k);
            let refs: Vec<&[u8]> = fields.iter().map(Vec::as_slice).collect();
            let got = ks.hdel_locked(k, &refs);
            match model.get_mut(k) {
                Some(M::Str(_) | M::List(_)) => assert!(got.is_err()),
                None => assert_eq!(got.unwrap(), 0),
                Some(M::Hash(h)) => {
                    let removed = fields.iter().collect::<std::collections::BTreeSet<_>>();
                    let n = removed.into_iter().filter(|f| h.remove(*f).is_some()).count() as u64;
                    assert_eq!(got.unwrap(), n);
                    if h.is_empty() {
                        model.remove(k);
                    }
                }
            }
        }
        Op::Del(k) => {
            let _g = ks.lock(k);
            assert_eq!(ks.delete_locked(k).unwrap(), model.remove(k).is_some());
        }
        Op::Push(..) | Op::Pop(..) => apply_list(ks, model, op),
        Op::Rename(a, b) => {
            let _g = ks.lock_many(&[a, b]);
            let Some(v) = model.get(a).cloned() else { return };
            if a != b {
                ks.copy_locked(a, ks, b).unwrap();
                ks.delete_locked(a).unwrap();
                model.remove(a);
                model.insert(b.clone(), v);
            }
        }
        Op::Reopen => unreachable!("handled by the caller"),
    }
}

fn apply_list(ks: &Keyspace, model: &mut BTreeMap<Vec<u8>, M>, op: &Op) {
    let end = |left: bool| if left { End::Left } else { End::Right };
    match op {
        Op::Push(k, left, values) => {
            let _g = ks.lock(k);
            let refs: Vec<&[u8]> = values.iter().map(Vec::as_slice).collect();
            let got = ks.push_locked(k, end(*left), &refs, false);
            let M::List(l) = model.entry(k.clone()).or_insert_with(|| M::List(VecDeque::new())) else {
                assert!(got.is_err(), "a push onto another type must fail");
                return;
            };
            for v in values {
                if *left {
                    l.push_front(v.clone());
                } else {
                    l.push_back(v.clone());
                }
            }
            assert_eq!(got.unwrap(), l.len() as u64, "the length after a push");
        }
        Op::Pop(k, left, n) => {
            let _g = ks.lock(k);
            let got = ks.pop_locked(k, end(*left), *n);
            match model.get_mut(k) {
                Some(M::List(l)) => {
                    let want: Vec<Vec<u8>> =
                        (0..*n).map_while(|_| if *left { l.pop_front() } else { l.pop_back() }).collect();
                    assert_eq!(got.unwrap(), want, "popped");
                    if l.is_empty() {
                        model.remove(k);
                    }
                }
                Some(_) => assert!(got.is_err(), "a pop from another type must fail"),
                None => assert_eq!(got.unwrap(), Vec::<Vec<u8>>::new()),
            }
        }
        _ => unreachable!("not a list operation"),
    }
}

/// Every read of the key space agrees with the model.
fn check(ks: &Keyspace, model: &BTreeMap<Vec<u8>, M>) {
    let (keys, more) = ks.keys_after(None, 10_000, None).unwrap();
    assert!(!more);
    assert_eq!(keys, model.keys().cloned().collect::<Vec<_>>(), "the key list");
    for (k, m) in model {
        match m {
            M::Str(v) => assert_eq!(ks.get(k).unwrap(), Some(Value::Str(v.clone()))),
            M::Hash(h) => {
                assert_eq!(ks.get(k).unwrap(), Some(Value::Hash(h.len() as u64)), "HLEN of {k:?}");
                let mut all = ks.hgetall(k).unwrap();
                all.sort();
                assert_eq!(all, h.iter().map(|(f, v)| (f.clone(), v.clone())).collect::<Vec<_>>(), "HGETALL {k:?}");
                for (f, v) in h {
                    assert_eq!(ks.hget(k, f).unwrap().as_ref(), Some(v), "HGET {k:?} {f:?}");
                }
                assert_eq!(ks.hget(k, b"\x00\x00\x01never").unwrap(), None);
            }
            M::List(l) => {
                assert_eq!(ks.llen(k).unwrap(), l.len() as u64, "LLEN {k:?}");
                assert_eq!(ks.lrange(k, 0, -1).unwrap(), l.iter().cloned().collect::<Vec<_>>(), "LRANGE {k:?}");
                assert_eq!(ks.lindex(k, -1).unwrap().as_ref(), l.back(), "LINDEX -1 {k:?}");
            }
        }
    }
    assert_eq!(ks.count(None).unwrap(), model.len() as u64);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]
    #[test]
    fn strings_hashes_and_lists_match_the_model(ops in prop::collection::vec(op(), 1..60)) {
        let dir = tempfile::tempdir().unwrap();
        let mut ks = open(dir.path());
        let mut model = BTreeMap::new();
        for op in &ops {
            if let Op::Reopen = op {
                drop(ks);
                ks = open(dir.path());
            } else {
                apply(&ks, &mut model, op);
            }
            check(&ks, &model);
        }
    }
}

fn v2_meta(n: u64) -> Vec<u8> {
    [&[1u8][..], &n.to_le_bytes()].concat()
}

fn v2_field(user: &[u8], field: &[u8]) -> Vec<u8> {
    [&key(user)[..], field].concat()
}

/// A layout-2 hash whose empty field was written over by its record (what `HSET h a 1` then
/// `HSET h "" v` left): it reads as the one field that survived, and its next change rewrites
/// it in layout 3 with every name, including names starting with 00 that move.
#[test]
fn layout_2_hashes_read_and_are_rewritten() {
    let dir = tempfile::tempdir().unwrap();
    let ks = open(dir.path());
    let db = ks.db.clone();
    db.put(&key(b"h"), &v2_meta(3)).unwrap();
    db.put(&v2_field(b"h", b"a"), b"1").unwrap();
    db.put(&v2_field(b"h", b"\x00x"), b"2").unwrap();
    db.put(&v2_field(b"h", b"\x00\x00x"), b"3").unwrap();
    assert_eq!(ks.hlen(b"h").unwrap(), 3);
    assert_eq!(ks.hget(b"h", b"").unwrap(), None, "the empty name's value is gone, not the record's bytes");
    assert_eq!(ks.hget(b"h", b"\x00x").unwrap(), Some(b"2".to_vec()));
    {
        let _g = ks.lock(b"h");
        assert_eq!(ks.hset_locked(b"h", &[(b"", b"v")]).unwrap(), 1);
    }
    let mut all = ks.hgetall(b"h").unwrap();
    all.sort();
    let want: Vec<(Vec<u8>, Vec<u8>)> = [(&b""[..], &b"v"[..]), (b"\x00\x00x", b"3"), (b"\x00x", b"2"), (b"a", b"1")]
        .iter()
        .map(|(f, v)| (f.to_vec(), v.to_vec()))
        .collect();
    assert_eq!(all, want);
    assert_eq!(ks.hlen(b"h").unwrap(), 4);
    assert_eq!(ks.get(b"h").unwrap(), Some(Value::Hash(4)));
}

/// Fields a layout-2 store left without their record (`HDEL h ""` deleted the record) are
/// counted by the hash the next HSET creates, instead of showing up uncounted.
#[test]
fn layout_2_orphaned_fields_are_taken_back() {
    let dir = tempfile::tempdir().unwrap();
    let ks = open(dir.path());
    ks.db.put(&v2_field(b"h", b"a"), b"1").unwrap();
    assert_eq!(ks.get(b"h").unwrap(), None);
    assert_eq!(ks.keys_after(None, 10, None).unwrap().0, Vec::<Vec<u8>>::new());
    {
        let _g = ks.lock(b"h");
        assert_eq!(ks.hset_locked(b"h", &[(b"b", b"2")]).unwrap(), 1);
    }
    assert_eq!(ks.hlen(b"h").unwrap(), 2);
    assert_eq!(ks.hgetall(b"h").unwrap(), vec![(b"a".to_vec(), b"1".to_vec()), (b"b".to_vec(), b"2".to_vec())]);
    {
        let _g = ks.lock(b"h");
        assert_eq!(ks.hdel_locked(b"h", &[b"a", b"b"]).unwrap(), 2);
    }
    assert_eq!(ks.get(b"h").unwrap(), None);
}

/// The defect as a client saw it, on a new store.
#[test]
fn the_empty_field_name_is_a_field() {
    let dir = tempfile::tempdir().unwrap();
    let ks = open(dir.path());
    let _g = ks.lock(b"h");
    assert_eq!(ks.hset_locked(b"h", &[(b"a", b"1")]).unwrap(), 1);
    assert_eq!(ks.hset_locked(b"h", &[(b"", b"v")]).unwrap(), 1);
    assert_eq!(ks.hget(b"h", b"").unwrap(), Some(b"v".to_vec()));
    assert_eq!(ks.hlen(b"h").unwrap(), 2);
    assert_eq!(ks.hdel_locked(b"h", &[b""]).unwrap(), 1);
    assert_eq!(ks.hlen(b"h").unwrap(), 1);
    assert_eq!(ks.hgetall(b"h").unwrap(), vec![(b"a".to_vec(), b"1".to_vec())]);
    assert_eq!(ks.hset_locked(b"h", &[(b"b", b"2")]).unwrap(), 1);
    assert_eq!(ks.hlen(b"h").unwrap(), 2);
}
