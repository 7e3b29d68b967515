//! Hash commands: HSET, HMSET, HGET, HMGET, HGETALL, HDEL, HEXISTS, HLEN.

use super::args::{ks, pairs, wrong_args};
use crate::keyspace::Keyspace;
use crate::resp::Reply;
use crate::state::{Session, Shared};

pub(super) fn cmd_hset(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    set_fields(sh.db(sess), a, "hset", |added| Reply::Int(added as i64))
}

/// HSET with the reply of Redis before 4.0.
pub(super) fn cmd_hmset(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    set_fields(sh.db(sess), a, "hmset", |_| Reply::ok())
}

/// HSET's work; `reply` makes the reply from the number of fields added.
fn set_fields(k: &Keyspace, a: &[&[u8]], name: &str, reply: fn(u64) -> Reply) -> Reply {
    let [_, key, fields @ ..] = a else { return wrong_args(name) };
    let Some(pairs) = pairs(fields) else { return wrong_args(name) };
    let _g = k.lock(key);
    ks(k.hset_locked(key, &pairs).map(reply))
}

pub(super) fn cmd_hget(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    let [_, key, field] = a else { return wrong_args("hget") };
    ks(sh.db(sess).hget(key, field).map(Reply::opt))
}

pub(super) fn cmd_hmget(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    let [_, key, fields @ ..] = a else { return wrong_args("hmget") };
    ks((|| {
        let mut out = Vec::new();
        for f in fields {
            out.push(Reply::opt(sh.db(sess).hget(key, f)?));
        }
        Ok(Reply::Array(out))
    })())
}

pub(super) fn cmd_hgetall(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    let [_, key] = a else { return wrong_args("hgetall") };
    ks(sh
        .db(sess)
        .hgetall(key)
        .map(|pairs| Reply::Map(pairs.into_iter().map(|(f, v)| (Reply::Bulk(f), Reply::Bulk(v))).collect())))
}

pub(super) fn cmd_hdel(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    let [_, key, fields @ ..] = a else { return wrong_args("hdel") };
    let _g = sh.db(sess).lock(key);
    ks(sh.db(sess).hdel_locked(key, fields).map(|n| Reply::Int(n as i64)))
}

pub(super) fn cmd_hexists(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    let [_, key, field] = a else { return wrong_args("hexists") };
    ks(sh.db(sess).hget(key, field).map(|v| Reply::Int(v.is_some() as i64)))
}

pub(super) fn cmd_hlen(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    let [_, key] = a else { return wrong_args("hlen") };
    ks(sh.db(sess).hlen(key).map(|n| Reply::Int(n as i64)))
}
