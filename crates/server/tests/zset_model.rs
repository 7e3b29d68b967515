//! Sorted sets against a model: random ZADD (with its options), ZREM, ZINCRBY, ZPOPMIN,
//! ZPOPMAX, ZREMRANGEBYSCORE and ZRANGE by rank on a few keys, run through
//! `commands::execute`, every reply compared with what a `BTreeMap` model says, and after every
//! step every key read back whole (ZRANGE WITHSCORES, ZCARD, ZSCORE, ZRANK, ZREVRANK, ZCOUNT).
//! Members are drawn from the bytes the encoding gives meaning to (00, 01, 02, FF), and scores
//! from a few values so that ties (ordered by member), -0 and infinities come up.

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
use std::collections::BTreeMap;
use std::sync::Arc;

type Model = BTreeMap<Vec<u8>, BTreeMap<Vec<u8>, f64>>;

const KEYS: &[&[u8]] = &[b"z", b"z\x00", b"y"];

#[derive(Clone, Debug)]
enum Op {
    Zadd { key: usize, flag: Option<&'static str>, ch: bool, pairs: Vec<(f64, Vec<u8>)> },
    Zrem(usize, Vec<Vec<u8>>),
    Zincrby(usize, f64, Vec<u8>),
    Pop { key: usize, max: bool, count: Option<usize> },
    RemRangeByScore(usize, f64, f64),
    RangeByRank(usize, i64, i64),
}

fn member() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(prop_oneof![Just(0u8), Just(1u8), Just(2u8), Just(0xffu8), Just(b'a')], 0..3)
}

fn score() -> impl Strategy<Value = f64> {
    prop_oneof![
        6 => (-3i32..4).prop_map(f64::from),
        2 => Just(0.5),
        1 => Just(-0.0),
        1 => Just(f64::INFINITY),
        1 => Just(f64::NEG_INFINITY),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    let key = 0..KEYS.len();
    let flag = prop_oneof![Just(None), Just(Some("NX")), Just(Some("XX")), Just(Some("GT")), Just(Some("LT"))];
    prop_oneof![
        5 => (key.clone(), flag, any::<bool>(), prop::collection::vec((score(), member()), 1..5))
            .prop_map(|(key, flag, ch, pairs)| Op::Zadd { key, flag, ch, pairs }),
        2 => (key.clone(), prop::collection::vec(member(), 1..3)).prop_map(|(k, m)| Op::Zrem(k, m)),
        2 => (key.clone(), score(), member()).prop_map(|(k, s, m)| Op::Zincrby(k, s, m)),
        1 => (key.clone(), any::<bool>(), prop::option::of(0usize..4)).prop_map(|(key, max, count)| Op::Pop { key, max, count }),
        1 => (key.clone(), score(), score()).prop_map(|(k, a, b)| Op::RemRangeByScore(k, a, b)),
        2 => (key, -5i64..5, -5i64..5).prop_map(|(k, a, b)| Op::RangeByRank(k, a, b)),
    ]
}

/// A score as a command argument.
fn arg(s: f64) -> String {
    if s.is_infinite() {
        if s > 0.0 { "+inf" } else { "-inf" }.to_string()
    } else {
        format!("{s}")
    }
}

fn shared(dir: &std::path::Path) -> Arc<Shared> {
    let opts = Options { direct_io: false, cache_bytes: 4 << 20, ..Options::default() };
    let db = Arc::new(Db::open(dir, opts).expect("open store"));
    let ks = Keyspace::new(db).expect("keyspace");
    Arc::new(Shared::new(ks, None, Metrics::new(&commands::names())))
}

fn exec(sh: &Shared, sess: &mut Session, args: &[&[u8]]) -> Reply {
    commands::execute(sh, sess, args)
}

/// A set's members in ZRANGE's order: by score, ties by member.
fn ordered(set: &BTreeMap<Vec<u8>, f64>) -> Vec<(Vec<u8>, f64)> {
    let mut v: Vec<(Vec<u8>, f64)> = set.iter().map(|(m, s)| (m.clone(), *s)).collect();
    v.sort_by(|a, b| a.1.partial_cmp(&b.1).unwrap().then_with(|| a.0.cmp(&b.0)));
    v
}

fn with_scores(items: &[(Vec<u8>, f64)]) -> Reply {
    Reply::Array(items.iter().flat_map(|(m, s)| [Reply::Bulk(m.clone()), Reply::Double(*s)]).collect())
}

/// ZADD on the model: the reply Redis gives.
fn model_zadd(set: &mut BTreeMap<Vec<u8>, f64>, flag: Option<&str>, ch: bool, pairs: &[(f64, Vec<u8>)]) -> Reply {
    let (mut added, mut changed) = (0, 0);
    for (s, m) in pairs {
        let s = if *s == 0.0 { 0.0 } else { *s };
        match (set.get(m).copied(), flag) {
            (Some(_), Some("NX")) | (None, Some("XX")) => {}
            (Some(cur), Some("GT")) if s <= cur => {}
            (Some(cur), Some("LT")) if s >= cur => {}
            (Some(cur), _) => {
                if s != cur {
                    changed += 1;
                    set.insert(m.clone(), s);
                }
            }
            (None, _) => {
                added += 1;
                set.insert(m.clone(), s);
            }
        }
    }
    Reply::Int(if ch { added + changed } else { added })
}

/// Runs one op on the server and the model; the reply the model expects.
fn apply(sh: &Shared, sess: &mut Session, model: &mut Model, op: &Op) -> (Reply, Reply) {
    let (key, args): (usize, Vec<Vec<u8>>) = match op {
        Op::Zadd { key, flag, ch, pairs } => {
            let mut a: Vec<Vec<u8>> = vec![b"ZADD".to_vec(), KEYS[*key].to_vec()];
            a.extend(flag.map(|f| f.as_bytes().to_vec()));
            if *ch {
                a.push(b"CH".to_vec());
            }
            for (s, m) in pairs {
                a.push(arg(*s).into_bytes());
                a.push(m.clone());
            }
            (*key, a)
        }
        Op::Zrem(k, ms) => (*k, [vec![b"ZREM".to_vec(), KEYS[*k].to_vec()], ms.clone()].concat()),
        Op::Zincrby(k, s, m) => (*k, vec![b"ZINCRBY".to_vec(), KEYS[*k].to_vec(), arg(*s).into_bytes(), m.clone()]),
        Op::Pop { key, max, count } => {
            let name: &[u8] = if *max { b"ZPOPMAX" } else { b"ZPOPMIN" };
            let mut a = vec![name.to_vec(), KEYS[*key].to_vec()];
            a.extend(count.map(|c| c.to_string().into_bytes()));
            (*key, a)
        }
        Op::RemRangeByScore(k, lo, hi) => {
            (*k, vec![b"ZREMRANGEBYSCORE".to_vec(), KEYS[*k].to_vec(), arg(*lo).into_bytes(), arg(*hi).into_bytes()])
        }
        Op::RangeByRank(k, a, b) => (
            *k,
            vec![
                b"ZRANGE".to_vec(),
                KEYS[*k].to_vec(),
                a.to_string().into_bytes(),
                b.to_string().into_bytes(),
                b"WITHSCORES".to_vec(),
            ],
        ),
    };
    let refs: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
    let got = exec(sh, sess, &refs);
    let set = model.entry(KEYS[key].to_vec()).or_default();
    let want = model_reply(set, op);
    if set.is_empty() {
        model.remove(KEYS[key]);
    }
    (got, want)
}

fn model_reply(set: &mut BTreeMap<Vec<u8>, f64>, op: &Op) -> Reply {
    match op {
        Op::Zadd { flag, ch, pairs, .. } => model_zadd(set, *flag, *ch, pairs),
        Op::Zrem(_, ms) => {
            let gone: std::collections::BTreeSet<&Vec<u8>> = ms.iter().filter(|m| set.contains_key(*m)).collect();
            for m in &gone {
                set.remove(*m);
            }
            Reply::Int(gone.len() as i64)
        }
        Op::Zincrby(_, s, m) => {
            let new = set.get(m).map_or(*s, |cur| cur + s);
            if new.is_nan() {
                return Reply::Error("ERR resulting score is not a number (NaN)".into());
            }
            let new = if new == 0.0 { 0.0 } else { new };
            set.insert(m.clone(), new);
            Reply::Double(new)
        }
        Op::Pop { max, count, .. } => {
            let mut all = ordered(set);
            if *max {
                all.reverse();
            }
            all.truncate(count.unwrap_or(1));
            for (m, _) in &all {
                set.remove(m);
            }
            with_scores(&all)
        }
        Op::RemRangeByScore(_, lo, hi) => {
            let gone: Vec<Vec<u8>> = set.iter().filter(|(_, s)| *s >= lo && *s <= hi).map(|(m, _)| m.clone()).collect();
            for m in &gone {
                set.remove(m);
            }
            Reply::Int(gone.len() as i64)
        }
        Op::RangeByRank(_, a, b) => {
            let all = ordered(set);
            let len = all.len() as i64;
            let start = if *a < 0 { (len + a).max(0) } else { *a };
            let stop = if *b < 0 { len + b } else { (*b).min(len - 1) };
            if start > stop || start >= len {
                return Reply::Array(Vec::new());
            }
            with_scores(&all[start as usize..=stop as usize])
        }
    }
}

/// Every key reads back as the model has it.
fn check(sh: &Shared, sess: &mut Session, model: &Model) {
    for key in KEYS {
        let empty = BTreeMap::new();
        let set = model.get(*key).unwrap_or(&empty);
        let all = ordered(set);
        assert_eq!(exec(sh, sess, &[b"ZRANGE", key, b"0", b"-1", b"WITHSCORES"]), with_scores(&all), "{key:?}");
        let mut rev = all.clone();
        rev.reverse();
        assert_eq!(exec(sh, sess, &[b"ZREVRANGE", key, b"0", b"-1", b"WITHSCORES"]), with_scores(&rev));
        assert_eq!(exec(sh, sess, &[b"ZCARD", key]), Reply::Int(all.len() as i64));
        assert_eq!(exec(sh, sess, &[b"EXISTS", key]), Reply::Int(i64::from(!all.is_empty())));
        for (i, (m, s)) in all.iter().enumerate() {
            assert_eq!(exec(sh, sess, &[b"ZSCORE", key, m]), Reply::Double(*s));
            assert_eq!(exec(sh, sess, &[b"ZRANK", key, m]), Reply::Int(i as i64));
            assert_eq!(exec(sh, sess, &[b"ZREVRANK", key, m]), Reply::Int((all.len() - 1 - i) as i64));
        }
        let within = all.iter().filter(|(_, s)| (-1.0..=1.0).contains(s)).count();
        assert_eq!(exec(sh, sess, &[b"ZCOUNT", key, b"-1", b"1"]), Reply::Int(within as i64));
        let rest: Vec<(Vec<u8>, f64)> = all.iter().filter(|(_, s)| *s > 0.0).cloned().collect();
        assert_eq!(exec(sh, sess, &[b"ZRANGEBYSCORE", key, b"(0", b"+inf", b"WITHSCORES"]), with_scores(&rest));
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]
    #[test]
    fn sorted_sets_match_the_model(ops in prop::collection::vec(op(), 1..50)) {
        let dir = tempfile::tempdir().unwrap();
        let sh = shared(dir.path());
        let mut sess = sh.session("127.0.0.1:1".into());
        let mut model = Model::new();
        for op in &ops {
            let (got, want) = apply(&sh, &mut sess, &mut model, op);
            prop_assert_eq!(got, want, "{:?}", op);
            check(&sh, &mut sess, &model);
        }
    }
}
