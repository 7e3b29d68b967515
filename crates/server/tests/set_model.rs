//! Set commands against a model: random SADD, SREM, SPOP, SMOVE, the STORE forms, DEL and
//! SET (for wrong types) on a few keys through `commands::execute`, with every key's members,
//! count and type compared with a `BTreeSet` per key after every step. Members include the
//! empty one and ones holding 00 bytes, which the encoding escapes.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    missing_docs,
    reason = "test code: a failure stops where it happened"
)]

use halyard_engine::{Db, Options};
use halyard_server::commands;
use halyard_server::keyspace::Keyspace;
use halyard_server::metrics::Metrics;
use halyard_server::resp::Reply;
use halyard_server::state::{Session, Shared};
use proptest::prelude::*;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// What the model holds at a key.
#[derive(Clone, Debug)]
enum M {
    Str,
    Set(BTreeSet<Vec<u8>>),
}

#[derive(Clone, Debug)]
enum Op {
    Sadd(usize, Vec<Vec<u8>>),
    Srem(usize, Vec<Vec<u8>>),
    Spop(usize, Option<u8>),
    Smove(usize, usize, Vec<u8>),
    Store(&'static str, usize, Vec<usize>),
    Del(usize),
    Set(usize),
}

const KEYS: [&[u8]; 4] = [b"a", b"b", b"\x00", b"a\x00"];

fn member() -> impl Strategy<Value = Vec<u8>> + Clone {
    prop::collection::vec(prop_oneof![Just(0u8), Just(1u8), Just(0xffu8), Just(b'm')], 0..3)
}

fn key() -> impl Strategy<Value = usize> {
    0..KEYS.len()
}

fn op() -> impl Strategy<Value = Op> {
    let members = prop::collection::vec(member(), 1..5);
    let store = prop_oneof![Just("SINTERSTORE"), Just("SUNIONSTORE"), Just("SDIFFSTORE")];
    prop_oneof![
        5 => (key(), members.clone()).prop_map(|(k, m)| Op::Sadd(k, m)),
        2 => (key(), members).prop_map(|(k, m)| Op::Srem(k, m)),
        2 => (key(), prop::option::of(0u8..5)).prop_map(|(k, n)| Op::Spop(k, n)),
        2 => (key(), key(), member()).prop_map(|(s, d, m)| Op::Smove(s, d, m)),
        2 => (store, key(), prop::collection::vec(key(), 1..4)).prop_map(|(c, d, ks)| Op::Store(c, d, ks)),
        1 => key().prop_map(Op::Del),
        1 => key().prop_map(Op::Set),
    ]
}

fn exec(sh: &Shared, sess: &mut Session, args: &[&[u8]]) -> Reply {
    commands::execute(sh, sess, args)
}

fn wrongtype(r: &Reply) -> bool {
    matches!(r, Reply::Error(e) if e.starts_with("WRONGTYPE"))
}

/// The model's set at `k` (empty for none); None for a string.
fn set_of(model: &BTreeMap<usize, M>, k: usize) -> Option<BTreeSet<Vec<u8>>> {
    match model.get(&k) {
        None => Some(BTreeSet::new()),
        Some(M::Set(s)) => Some(s.clone()),
        Some(M::Str) => None,
    }
}

fn put(model: &mut BTreeMap<usize, M>, k: usize, s: BTreeSet<Vec<u8>>) {
    if s.is_empty() {
        model.remove(&k);
    } else {
        model.insert(k, M::Set(s));
    }
}

fn apply(sh: &Shared, sess: &mut Session, model: &mut BTreeMap<usize, M>, op: &Op) {
    match op {
        Op::Sadd(k, ms) | Op::Srem(k, ms) => {
            let name: &[u8] = if matches!(op, Op::Sadd(..)) { b"SADD" } else { b"SREM" };
            let mut args = vec![name, KEYS[*k]];
            args.extend(ms.iter().map(Vec::as_slice));
            let r = exec(sh, sess, &args);
            let Some(mut s) = set_of(model, *k) else { return assert!(wrongtype(&r), "{op:?}: {r:?}") };
            let before = s.len();
            for m in ms {
                if name == b"SADD" {
                    s.insert(m.clone());
                } else {
                    s.remove(m);
                }
            }
            assert_eq!(r, Reply::Int(s.len().abs_diff(before) as i64), "{op:?}");
            put(model, *k, s);
        }
        Op::Spop(k, n) => spop(sh, sess, model, *k, *n),
        Op::Smove(src, dst, m) => {
            let r = exec(sh, sess, &[b"SMOVE", KEYS[*src], KEYS[*dst], m]);
            let (from, to) = (set_of(model, *src), set_of(model, *dst));
            if model.get(src).is_none() {
                return assert_eq!(r, Reply::Int(0), "{op:?}");
            }
            let (Some(mut from), Some(mut to)) = (from, to) else { return assert!(wrongtype(&r), "{op:?}: {r:?}") };
            let moved = from.contains(m);
            assert_eq!(r, Reply::Int(i64::from(moved)), "{op:?}");
            if moved && src != dst {
                from.remove(m);
                to.insert(m.clone());
                put(model, *src, from);
                put(model, *dst, to);
            }
        }
        Op::Store(cmd, dest, keys) => store(sh, sess, model, cmd, *dest, keys),
        Op::Del(k) => {
            let r = exec(sh, sess, &[b"DEL", KEYS[*k]]);
            assert_eq!(r, Reply::Int(i64::from(model.remove(k).is_some())));
        }
        Op::Set(k) => {
            assert_eq!(exec(sh, sess, &[b"SET", KEYS[*k], b"v"]), Reply::ok());
            model.insert(*k, M::Str);
        }
    }
}

fn spop(sh: &Shared, sess: &mut Session, model: &mut BTreeMap<usize, M>, k: usize, n: Option<u8>) {
    let count = n.map(|n| n.to_string());
    let mut args: Vec<&[u8]> = vec![b"SPOP", KEYS[k]];
    args.extend(count.as_ref().map(|c| c.as_bytes()));
    let r = exec(sh, sess, &args);
    let Some(mut s) = set_of(model, k) else { return assert!(wrongtype(&r), "SPOP: {r:?}") };
    let popped: Vec<Vec<u8>> = match (n, r) {
        (None, Reply::Nil) => Vec::new(),
        (None, Reply::Bulk(m)) => vec![m],
        (Some(_), Reply::Set(items)) => {
            items.into_iter().map(|i| if let Reply::Bulk(m) = i { m } else { panic!("{i:?}") }).collect()
        }
        (_, r) => panic!("SPOP {k} {n:?}: {r:?}"),
    };
    let want = usize::from(n.unwrap_or(1)).min(s.len());
    assert_eq!(popped.len(), want, "SPOP {k} {n:?}: {popped:?} of {s:?}");
    for m in &popped {
        assert!(s.remove(m), "SPOP gave {m:?}, not a member (or twice)");
    }
    put(model, k, s);
}

fn store(sh: &Shared, sess: &mut Session, model: &mut BTreeMap<usize, M>, cmd: &str, dest: usize, keys: &[usize]) {
    let mut args: Vec<&[u8]> = vec![cmd.as_bytes(), KEYS[dest]];
    args.extend(keys.iter().map(|k| KEYS[*k]));
    let r = exec(sh, sess, &args);
    let Some(sets) = keys.iter().map(|k| set_of(model, *k)).collect::<Option<Vec<_>>>() else {
        return assert!(wrongtype(&r), "{cmd}: {r:?}");
    };
    let mut it = sets.into_iter();
    let mut out = it.next().unwrap_or_default();
    for s in it {
        out = match cmd {
            "SINTERSTORE" => out.intersection(&s).cloned().collect(),
            "SUNIONSTORE" => out.union(&s).cloned().collect(),
            _ => out.difference(&s).cloned().collect(),
        };
    }
    assert_eq!(r, Reply::Int(out.len() as i64), "{cmd} {dest} {keys:?}");
    model.remove(&dest);
    put(model, dest, out);
}

/// Every key's type, count and members agree with the model.
fn check(sh: &Shared, sess: &mut Session, model: &BTreeMap<usize, M>) {
    for (i, k) in KEYS.iter().enumerate() {
        let t = exec(sh, sess, &[b"TYPE", k]);
        let card = exec(sh, sess, &[b"SCARD", k]);
        let members = exec(sh, sess, &[b"SMEMBERS", k]);
        match model.get(&i) {
            Some(M::Str) => {
                assert_eq!(t, Reply::Simple("string".into()));
                assert!(wrongtype(&card) && wrongtype(&members));
            }
            m => {
                let want = match m {
                    Some(M::Set(s)) => s.clone(),
                    _ => BTreeSet::new(),
                };
                let kind = if want.is_empty() { "none" } else { "set" };
                assert_eq!(t, Reply::Simple(kind.into()), "TYPE {k:?}");
                assert_eq!(card, Reply::Int(want.len() as i64), "SCARD {k:?}");
                let Reply::Set(items) = members else { panic!("SMEMBERS {k:?}: {members:?}") };
                let got: Vec<Vec<u8>> =
                    items.into_iter().map(|i| if let Reply::Bulk(m) = i { m } else { panic!("{i:?}") }).collect();
                assert_eq!(got, want.iter().cloned().collect::<Vec<_>>(), "SMEMBERS {k:?} (in member order)");
                for m in &want {
                    assert_eq!(exec(sh, sess, &[b"SISMEMBER", k, m]), Reply::Int(1));
                }
            }
        }
    }
    assert_eq!(exec(sh, sess, &[b"DBSIZE"]), Reply::Int(model.len() as i64));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]
    #[test]
    fn sets_match_the_model(ops in prop::collection::vec(op(), 1..50)) {
        let dir = tempfile::tempdir().unwrap();
        let opts = Options { direct_io: false, cache_bytes: 4 << 20, ..Options::default() };
        let ks = Keyspace::new(Arc::new(Db::open(dir.path(), opts).unwrap())).unwrap();
        let sh = Arc::new(Shared::new(ks, None, Metrics::new(&commands::names())));
        let mut sess = sh.session("127.0.0.1:1".into());
        let mut model = BTreeMap::new();
        for op in &ops {
            apply(&sh, &mut sess, &mut model, op);
            check(&sh, &mut sess, &model);
        }
    }
}
