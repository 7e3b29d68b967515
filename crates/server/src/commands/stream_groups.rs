//! Reading streams as consumers: XREAD, and consumer groups (XGROUP, XREADGROUP, XACK,
//! XPENDING, XCLAIM, XAUTOCLAIM, XINFO) as job queues use them: each group remembers the last
//! entry it handed out, and every entry handed to a consumer stays pending until acknowledged
//! or claimed by another. The records are laid out in `keyspace::stream_groups`.

use super::args::{bad_subcommand, int_arg, ks, lower, syntax, wrong_args};
use super::blocking::blocking;
use super::streams::{entries_reply, id_text, parse_id, BAD_ID};
use super::table::{Command, Keys, READONLY, WRITE};
use crate::keyspace::stream::{Entry, Id};
use crate::keyspace::stream_groups::{Consumer, Group, Pending};
use crate::keyspace::{Keyspace, KsError};
use crate::resp::Reply;
use crate::state::{Session, Shared};
use halyard_engine::WriteBatch;
use std::ops::Bound;
use std::time::Duration;

#[rustfmt::skip]
pub(super) static COMMANDS: &[Command] = &[
    Command { name: "xread", arity: -4, flags: READONLY, keys: Keys::Streams, handler: cmd_xread },
    Command { name: "xreadgroup", arity: -7, flags: WRITE, keys: Keys::Streams, handler: cmd_xreadgroup },
    Command { name: "xgroup", arity: -2, flags: WRITE, keys: Keys::Second, handler: cmd_xgroup },
    Command { name: "xack", arity: -4, flags: WRITE, keys: Keys::First, handler: cmd_xack },
    Command { name: "xpending", arity: -3, flags: READONLY, keys: Keys::First, handler: cmd_xpending },
    Command { name: "xclaim", arity: -6, flags: WRITE, keys: Keys::First, handler: cmd_xclaim },
    Command { name: "xautoclaim", arity: -6, flags: WRITE, keys: Keys::First, handler: cmd_xautoclaim },
    Command { name: "xinfo", arity: -2, flags: READONLY, keys: Keys::Second, handler: cmd_xinfo },
];

const NEEDS_KEY: &str = "ERR The XGROUP subcommand requires the key to exist. Note that for CREATE you may want to use the MKSTREAM option to create an empty stream automatically.";

/// Announces a stream's keyspace event (`xgroup-create`, ...) when those are on; the
/// dispatcher publishes it once the command ran.
fn announce(sh: &Shared, sess: &mut Session, event: &str, key: &[u8]) {
    if sh.settings.notify.wants(crate::notify::STREAM) {
        sess.events.push((event.to_string(), key.to_vec()));
    }
}

/// Runs `run`, then announces `xgroup-createconsumer` on each of `keys` where `consumer`
/// of `group` exists now and did not before (XREADGROUP, XCLAIM, XAUTOCLAIM create it).
fn creating_consumer(
    sh: &Shared,
    sess: &mut Session,
    keys: &[&[u8]],
    group: &[u8],
    consumer: &[u8],
    run: impl FnOnce(&mut Session) -> Reply,
) -> Reply {
    let k = sh.db(sess);
    let absent: Vec<bool> = keys.iter().map(|key| matches!(k.consumer(key, group, consumer), Ok(None))).collect();
    let reply = run(sess);
    for (key, absent) in keys.iter().zip(absent) {
        if absent && matches!(sh.db(sess).consumer(key, group, consumer), Ok(Some(_))) {
            announce(sh, sess, "xgroup-createconsumer", key);
        }
    }
    reply
}

fn no_group(key: &[u8], group: &[u8]) -> Reply {
    Reply::err(format!(
        "NOGROUP No such consumer group '{}' for key name '{}'",
        String::from_utf8_lossy(group),
        String::from_utf8_lossy(key)
    ))
}

/// XREAD's and XREADGROUP's options before STREAMS.
struct ReadOpts<'a> {
    count: Option<usize>,
    block: Option<Option<Duration>>,
    noack: bool,
    keys: &'a [&'a [u8]],
    ids: &'a [&'a [u8]],
}

fn read_opts<'a>(name: &str, a: &'a [&'a [u8]], group: bool) -> Result<ReadOpts<'a>, Reply> {
    let mut o = ReadOpts { count: None, block: None, noack: false, keys: &[], ids: &[] };
    let mut i = 0;
    while let Some(opt) = a.get(i) {
        match lower(opt).as_str() {
            "count" => {
                let n = a.get(i + 1).and_then(|n| int_arg(n)).ok_or_else(super::args::not_int)?;
                o.count = (n > 0).then_some(n as usize);
                i += 2;
            }
            "block" => {
                let ms = a.get(i + 1).and_then(|n| int_arg(n));
                let ms = ms.ok_or_else(|| Reply::err("ERR timeout is not an integer or out of range"))?;
                if ms < 0 {
                    return Err(Reply::err("ERR timeout is negative"));
                }
                o.block = Some((ms > 0).then(|| Duration::from_millis(ms as u64)));
                i += 2;
            }
            "noack" if group => {
                o.noack = true;
                i += 1;
            }
            "streams" => {
                let rest = a.get(i + 1..).unwrap_or_default();
                if rest.is_empty() || !rest.len().is_multiple_of(2) {
                    let what = if group { "'>'" } else { "'$'" };
                    return Err(Reply::err(format!(
                        "ERR Unbalanced '{name}' list of streams: for each stream key an ID or {what} must be specified."
                    )));
                }
                let (keys, ids) = rest.split_at(rest.len() / 2);
                o.keys = keys;
                o.ids = ids;
                return Ok(o);
            }
            _ => return Err(syntax()),
        }
    }
    Err(syntax())
}

/// The reply of a read that found `found` (key, entries) pairs: nil when none has any.
fn read_reply(proto: u8, found: Vec<(Vec<u8>, Reply)>) -> Option<Reply> {
    if found.is_empty() {
        return None;
    }
    Some(match proto {
        3 => Reply::Map(found.into_iter().map(|(k, e)| (Reply::Bulk(k), e)).collect()),
        _ => Reply::Array(found.into_iter().map(|(k, e)| Reply::Array(vec![Reply::Bulk(k), e])).collect()),
    })
}

/// XREAD [COUNT n] [BLOCK ms] STREAMS key... id...: entries after each ID (`$`: the stream's
/// last when the command came), waiting for some with BLOCK.
fn cmd_xread(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    let o = match read_opts("xread", a.get(1..).unwrap_or_default(), false) {
        Ok(o) => o,
        Err(r) => return r,
    };
    if o.block.is_some() && sess.scripted {
        return Reply::err("ERR xread command is not allowed with BLOCK option from scripts");
    }
    let k = sh.db(sess);
    // `$` stands for the last ID when the client first asked, kept while it waits.
    let after: Vec<Id> = match sess.block.as_ref().filter(|b| b.after.len() == o.ids.len()) {
        Some(b) => b.after.clone(),
        None => {
            let mut ids = Vec::with_capacity(o.ids.len());
            for (key, id) in o.keys.iter().zip(o.ids) {
                ids.push(match *id {
                    b"$" => match k.stream_meta(key) {
                        Ok(m) => m.map_or((0, 0), |m| m.last),
                        Err(e) => return Reply::err(e.to_string()),
                    },
                    _ => match parse_id(id, 0) {
                        Some(id) => id,
                        None => return Reply::err(BAD_ID),
                    },
                });
            }
            ids
        }
    };
    let proto = sess.proto;
    let attempt = |k: &Keyspace| -> Result<Option<Reply>, KsError> {
        let mut found = Vec::new();
        for (key, id) in o.keys.iter().zip(&after) {
            let entries = k.xrange(key, Bound::Excluded(*id), Bound::Unbounded, false, o.count)?;
            if !entries.is_empty() {
                found.push((key.to_vec(), entries_reply(entries)));
            }
        }
        Ok(read_reply(proto, found))
    };
    let Some(wait) = o.block else {
        return ks(attempt(k).map(|r| r.unwrap_or(Reply::NilArray)));
    };
    let r = blocking(sh, sess, o.keys, wait, attempt);
    if let Some(b) = sess.block.as_mut() {
        b.after = after;
    }
    r
}

/// XREADGROUP GROUP group consumer [COUNT n] [BLOCK ms] [NOACK] STREAMS key... id...: with
/// `>`, entries no consumer of the group got yet (pending for this one unless NOACK); with an
/// ID, this consumer's pending entries after it.
fn cmd_xreadgroup(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    let [_, g, group, consumer, rest @ ..] = a else { return wrong_args("xreadgroup") };
    if lower(g) != "group" {
        return syntax();
    }
    let o = match read_opts("xreadgroup", rest, true) {
        Ok(o) => o,
        Err(r) => return r,
    };
    if o.block.is_some() && sess.scripted {
        return Reply::err("ERR xreadgroup command is not allowed with BLOCK option from scripts");
    }
    let mut ids = Vec::with_capacity(o.ids.len());
    for id in o.ids {
        ids.push(match *id {
            b">" => None,
            _ => match parse_id(id, 0) {
                Some(id) => Some(id),
                None => return Reply::err(BAD_ID),
            },
        });
    }
    let k = sh.db(sess);
    for key in o.keys {
        match k.stream_meta(key).and_then(|m| Ok(m.is_some() && k.group(key, group)?.is_some())) {
            Ok(true) => {}
            Ok(false) => {
                return Reply::err(format!(
                    "NOGROUP No such key '{}' or consumer group '{}' in XREADGROUP with GROUP option",
                    String::from_utf8_lossy(key),
                    String::from_utf8_lossy(group)
                ))
            }
            Err(e) => return Reply::err(e.to_string()),
        }
    }
    let proto = sess.proto;
    let attempt = |k: &Keyspace| -> Result<Option<Reply>, KsError> {
        let mut found = Vec::new();
        let now = k.now_ms();
        for (key, id) in o.keys.iter().zip(&ids) {
            let _g = k.lock(key);
            let part = match id {
                None => deliver_new(k, key, group, consumer, o.count, o.noack, now)?,
                Some(after) => history(k, key, group, consumer, *after, o.count, now)?,
            };
            if let Some(p) = part {
                found.push((key.to_vec(), p));
            }
        }
        Ok(read_reply(proto, found))
    };
    creating_consumer(sh, sess, o.keys, group, consumer, |sess| match o.block {
        Some(wait) if ids.iter().all(Option::is_none) => blocking(sh, sess, o.keys, wait, attempt),
        _ => ks(attempt(sh.db(sess)).map(|r| r.unwrap_or(Reply::NilArray))),
    })
}

/// `consumer` of `group` as it is once seen at `now` (a new one if it was not there).
fn seen(k: &Keyspace, key: &[u8], group: &[u8], consumer: &[u8], now: u64) -> Result<Consumer, KsError> {
    let c = k.consumer(key, group, consumer)?;
    Ok(Consumer { seen: now, ..c.unwrap_or(Consumer { name: consumer.to_vec(), seen: now, active: 0 }) })
}

/// Hands the entries after the group's last delivered ID to `consumer`; None when there are
/// none (a stream without a new entry is left out of the reply).
fn deliver_new(
    k: &Keyspace,
    key: &[u8],
    group: &[u8],
    consumer: &[u8],
    count: Option<usize>,
    noack: bool,
    now: u64,
) -> Result<Option<Reply>, KsError> {
    let (Some(m), Some(mut g)) = (k.stream_meta(key)?, k.group(key, group)?) else { return Ok(None) };
    let entries = k.xrange(key, Bound::Excluded(g.last), Bound::Unbounded, false, count)?;
    let mut b = WriteBatch::new();
    let mut c = seen(k, key, group, consumer, now)?;
    if let Some((last, _)) = entries.last() {
        g.last = *last;
        if g.entries_read >= 0 {
            g.entries_read += entries.len() as i64;
        }
        c.active = now;
        k.put_group(&mut b, key, &g, m.at);
        if !noack {
            for (id, _) in &entries {
                let p = Pending { id: *id, consumer: consumer.to_vec(), delivered: now, deliveries: 1 };
                k.put_pending(&mut b, key, group, &p, m.at);
            }
        }
    }
    k.put_consumer(&mut b, key, group, &c, m.at);
    k.db.write(&b)?;
    Ok((!entries.is_empty()).then(|| entries_reply(entries)))
}

/// `consumer`'s pending entries after `after` (a deleted entry as its ID with nil fields),
/// delivered again (their delivery count and time updated, as in Redis).
fn history(
    k: &Keyspace,
    key: &[u8],
    group: &[u8],
    consumer: &[u8],
    after: Id,
    count: Option<usize>,
    now: u64,
) -> Result<Option<Reply>, KsError> {
    let Some(m) = k.stream_meta(key)? else { return Ok(None) };
    let mut items = Vec::new();
    let mut b = WriteBatch::new();
    for p in k.pending(key, group, Bound::Excluded(after), None)? {
        if count.is_some_and(|c| items.len() >= c) {
            break;
        }
        if p.consumer == consumer {
            let fields = k.stream_entry(key, p.id)?;
            if fields.is_some() {
                k.put_pending(
                    &mut b,
                    key,
                    group,
                    &Pending { delivered: now, deliveries: p.deliveries + 1, ..p.clone() },
                    m.at,
                );
            }
            items.push(Reply::Array(vec![
                id_text(p.id),
                fields.map_or(Reply::NilArray, |f| Reply::Array(f.into_iter().map(Reply::Bulk).collect())),
            ]));
        }
    }
    k.put_consumer(&mut b, key, group, &seen(k, key, group, consumer, now)?, m.at);
    k.db.write(&b)?;
    Ok(Some(Reply::Array(items)))
}

const XGROUP_HELP: [&str; 17] = [
    "XGROUP <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "CREATE <key> <groupname> <id|$> [option]",
    "    Create a new consumer group. Options are:",
    "    * MKSTREAM",
    "      Create the empty stream if it does not exist.",
    "    * ENTRIESREAD entries_read",
    "      Set the group's entries_read counter (internal use).",
    "CREATECONSUMER <key> <groupname> <consumer>",
    "    Create a new consumer in the specified group.",
    "DELCONSUMER <key> <groupname> <consumer>",
    "    Remove the specified consumer.",
    "DESTROY <key> <groupname>",
    "    Remove the specified group.",
    "SETID <key> <groupname> <id|$> [ENTRIESREAD entries_read]",
    "    Set the current group ID and entries_read counter.",
    "HELP",
    "    Prints this help.",
];

const XGROUP_SUBCOMMANDS: &[&str] = &["create", "setid", "destroy", "createconsumer", "delconsumer", "help"];

fn cmd_xgroup(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    let [_, sub, rest @ ..] = a else { return wrong_args("xgroup") };
    let k = sh.db(sess);
    let name = lower(sub);
    if let Some(key) = rest.first() {
        let _g = k.lock(key);
        let existed = match rest {
            [_, group, c] => matches!(k.consumer(key, group, c), Ok(Some(_))),
            _ => false,
        };
        let r = match (name.as_str(), rest) {
            ("create", [key, group, id, opts @ ..]) => group_create(k, key, group, id, opts),
            ("setid", [key, group, id, opts @ ..]) => group_setid(k, key, group, id, opts),
            ("destroy", [key, group]) => group_destroy(k, key, group),
            ("createconsumer", [key, group, c]) => consumer_create(k, key, group, c),
            ("delconsumer", [key, group, c]) => consumer_delete(k, key, group, c),
            _ => return bad_subcommand("xgroup", sub, XGROUP_SUBCOMMANDS),
        };
        let reply = ks(r);
        // The event, when the subcommand did something.
        let did = match (&reply, name.as_str()) {
            (Reply::Error(_), _) => false,
            (Reply::Int(n), "destroy" | "createconsumer") => *n == 1,
            (_, "delconsumer") => existed,
            _ => true,
        };
        if did {
            announce(sh, sess, &format!("xgroup-{name}"), key);
        }
        return reply;
    }
    match name.as_str() {
        "help" => Reply::Array(XGROUP_HELP.iter().map(|l| Reply::Simple((*l).into())).collect()),
        _ => bad_subcommand("xgroup", sub, XGROUP_SUBCOMMANDS),
    }
}

/// A group's starting ID (`$`: the stream's last) and ENTRIESREAD, or the reply to bad ones.
fn start_of(last: Id, len: u64, id: &[u8], opts: &[&[u8]]) -> Result<(Id, i64), Reply> {
    let start = match id {
        b"$" => last,
        _ => parse_id(id, 0).ok_or_else(|| Reply::err(BAD_ID))?,
    };
    let mut read = if id == b"$" {
        len as i64
    } else if start == (0, 0) {
        0
    } else {
        -1
    };
    if let [o, n] = opts {
        if lower(o) != "entriesread" {
            return Err(syntax());
        }
        read = match int_arg(n) {
            Some(n) if n >= -1 => n,
            _ => return Err(Reply::err("ERR value for ENTRIESREAD must be positive or -1")),
        };
    } else if !opts.is_empty() {
        return Err(syntax());
    }
    Ok((start, read))
}

fn group_create(k: &Keyspace, key: &[u8], group: &[u8], id: &[u8], opts: &[&[u8]]) -> Result<Reply, KsError> {
    let (mk, opts) = match opts.split_first() {
        Some((o, rest)) if lower(o) == "mkstream" => (true, rest),
        _ => (false, opts),
    };
    let meta = k.stream_meta(key)?;
    let (last, len, at) = meta.map_or(((0, 0), 0, 0), |m| (m.last, m.len, m.at));
    let (start, read) = match start_of(last, len, id, opts) {
        Ok(x) => x,
        Err(r) => return Ok(r),
    };
    if meta.is_none() && !mk {
        return Ok(Reply::err(NEEDS_KEY));
    }
    if k.group(key, group)?.is_some() {
        return Ok(Reply::err("BUSYGROUP Consumer Group name already exists"));
    }
    if meta.is_none() {
        k.create_stream_locked(key)?;
    }
    let mut b = WriteBatch::new();
    k.put_group(&mut b, key, &Group { name: group.to_vec(), last: start, entries_read: read }, at);
    k.db.write(&b)?;
    Ok(Reply::ok())
}

fn group_setid(k: &Keyspace, key: &[u8], group: &[u8], id: &[u8], opts: &[&[u8]]) -> Result<Reply, KsError> {
    let Some(m) = k.stream_meta(key)? else { return Ok(Reply::err(NEEDS_KEY)) };
    let (start, read) = match start_of(m.last, m.len, id, opts) {
        Ok(x) => x,
        Err(r) => return Ok(r),
    };
    if k.group(key, group)?.is_none() {
        return Ok(no_group(key, group));
    }
    let mut b = WriteBatch::new();
    k.put_group(&mut b, key, &Group { name: group.to_vec(), last: start, entries_read: read }, m.at);
    k.db.write(&b)?;
    Ok(Reply::ok())
}

fn group_destroy(k: &Keyspace, key: &[u8], group: &[u8]) -> Result<Reply, KsError> {
    if k.stream_meta(key)?.is_none() {
        return Ok(Reply::err(NEEDS_KEY));
    }
    if k.group(key, group)?.is_none() {
        return Ok(Reply::Int(0));
    }
    let mut b = WriteBatch::new();
    k.delete_group(&mut b, key, group)?;
    k.db.write(&b)?;
    Ok(Reply::Int(1))
}

fn consumer_create(k: &Keyspace, key: &[u8], group: &[u8], c: &[u8]) -> Result<Reply, KsError> {
    let Some(m) = k.stream_meta(key)? else { return Ok(Reply::err(NEEDS_KEY)) };
    if k.group(key, group)?.is_none() {
        return Ok(no_group(key, group));
    }
    if k.consumer(key, group, c)?.is_some() {
        return Ok(Reply::Int(0));
    }
    let mut b = WriteBatch::new();
    k.put_consumer(&mut b, key, group, &Consumer { name: c.to_vec(), seen: k.now_ms(), active: 0 }, m.at);
    k.db.write(&b)?;
    Ok(Reply::Int(1))
}

fn consumer_delete(k: &Keyspace, key: &[u8], group: &[u8], c: &[u8]) -> Result<Reply, KsError> {
    if k.stream_meta(key)?.is_none() {
        return Ok(Reply::err(NEEDS_KEY));
    }
    if k.group(key, group)?.is_none() {
        return Ok(no_group(key, group));
    }
    if k.consumer(key, group, c)?.is_none() {
        return Ok(Reply::Int(0));
    }
    let mut b = WriteBatch::new();
    let mut n = 0;
    for p in k.pending(key, group, Bound::Unbounded, None)?.into_iter().filter(|p| p.consumer == c) {
        k.delete_pending(&mut b, key, group, p.id);
        n += 1;
    }
    k.delete_consumer(&mut b, key, group, c);
    k.db.write(&b)?;
    Ok(Reply::Int(n))
}

/// XACK key group id...: how many of the IDs were pending and no longer are.
fn cmd_xack(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    let [_, key, group, ids @ ..] = a else { return wrong_args("xack") };
    let Some(ids) = ids.iter().map(|i| parse_id(i, 0)).collect::<Option<Vec<Id>>>() else { return Reply::err(BAD_ID) };
    let k = sh.db(sess);
    let _g = k.lock(key);
    ks((|| {
        if k.stream_meta(key)?.is_none() || k.group(key, group)?.is_none() {
            return Ok(Reply::Int(0));
        }
        let mut b = WriteBatch::new();
        let mut n = 0;
        let mut seen = std::collections::HashSet::new();
        for id in ids {
            if seen.insert(id) && k.pending_entry(key, group, id)?.is_some() {
                k.delete_pending(&mut b, key, group, id);
                n += 1;
            }
        }
        k.db.write(&b)?;
        Ok(Reply::Int(n))
    })())
}

/// An ID range bound of XPENDING and XAUTOCLAIM: `-`, `+`, an ID, or `(` an ID.
fn pel_bound(a: &[u8], low: bool) -> Option<Bound<Id>> {
    match (a, low) {
        (b"-", true) | (b"+", false) => Some(Bound::Unbounded),
        (b"-", false) => Some(Bound::Included((0, 0))),
        (b"+", true) => Some(Bound::Included((u64::MAX, u64::MAX))),
        _ => match a.strip_prefix(b"(") {
            Some(rest) => parse_id(rest, if low { 0 } else { u64::MAX }).map(Bound::Excluded),
            None => parse_id(a, if low { 0 } else { u64::MAX }).map(Bound::Included),
        },
    }
}

fn within(id: Id, hi: Bound<Id>) -> bool {
    match hi {
        Bound::Included(h) => id <= h,
        Bound::Excluded(h) => id < h,
        Bound::Unbounded => true,
    }
}

/// XPENDING key group: the summary; XPENDING key group [IDLE ms] start end count [consumer]:
/// the pending entries themselves.
fn cmd_xpending(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    let [_, key, group, rest @ ..] = a else { return wrong_args("xpending") };
    let k = sh.db(sess);
    let (idle, rest) = match rest {
        [i, ms, more @ ..] if lower(i) == "idle" => match int_arg(ms) {
            Some(ms) => (Some(ms.max(0) as u64), more),
            None => return super::args::not_int(),
        },
        _ => (None, rest),
    };
    let exists = ks((|| Ok(Reply::Int(i64::from(k.stream_meta(key)?.is_some() && k.group(key, group)?.is_some()))))());
    match exists {
        Reply::Int(1) => {}
        Reply::Int(_) => return no_group(key, group),
        other => return other,
    }
    match rest {
        [] if idle.is_none() => ks(pending_summary(k, key, group)),
        [start, end, count, consumer @ ..] if consumer.len() <= 1 => {
            let (Some(lo), Some(hi)) = (pel_bound(start, true), pel_bound(end, false)) else {
                return Reply::err(BAD_ID);
            };
            let Some(count) = int_arg(count) else { return super::args::not_int() };
            let now = k.now_ms();
            ks(k.pending(key, group, lo, None).map(|all| {
                let rows = all
                    .into_iter()
                    .take_while(|p| within(p.id, hi))
                    .filter(|p| consumer.first().is_none_or(|c| p.consumer == *c))
                    .filter(|p| idle.is_none_or(|i| now.saturating_sub(p.delivered) >= i))
                    .take(count.max(0) as usize)
                    .map(|p| {
                        Reply::Array(vec![
                            id_text(p.id),
                            Reply::Bulk(p.consumer),
                            Reply::Int(now.saturating_sub(p.delivered) as i64),
                            Reply::Int(p.deliveries as i64),
                        ])
                    });
                Reply::Array(rows.collect())
            }))
        }
        _ => syntax(),
    }
}

fn pending_summary(k: &Keyspace, key: &[u8], group: &[u8]) -> Result<Reply, KsError> {
    let all = k.pending(key, group, Bound::Unbounded, None)?;
    let (Some(first), Some(last)) = (all.first(), all.last()) else {
        return Ok(Reply::Array(vec![Reply::Int(0), Reply::Nil, Reply::Nil, Reply::NilArray]));
    };
    let mut by: std::collections::BTreeMap<&[u8], i64> = std::collections::BTreeMap::new();
    for p in &all {
        *by.entry(p.consumer.as_slice()).or_default() += 1;
    }
    let consumers = by.into_iter().map(|(c, n)| Reply::Array(vec![Reply::bulk(c), Reply::bulk(n.to_string())]));
    Ok(Reply::Array(vec![
        Reply::Int(all.len() as i64),
        id_text(first.id),
        id_text(last.id),
        Reply::Array(consumers.collect()),
    ]))
}

/// XCLAIM's options after its IDs.
struct ClaimOpts {
    idle: Option<u64>,
    time: Option<u64>,
    retry: Option<u64>,
    force: bool,
    justid: bool,
}

fn claim_opts(a: &[&[u8]]) -> Result<ClaimOpts, Reply> {
    let mut o = ClaimOpts { idle: None, time: None, retry: None, force: false, justid: false };
    let mut i = 0;
    while let Some(opt) = a.get(i) {
        let num = || a.get(i + 1).and_then(|n| int_arg(n)).ok_or_else(super::args::not_int);
        match lower(opt).as_str() {
            "idle" => o.idle = Some(num()?.max(0) as u64),
            "time" => o.time = Some(num()?.max(0) as u64),
            "retrycount" => o.retry = Some(num()?.max(0) as u64),
            "lastid" => {
                a.get(i + 1).and_then(|v| parse_id(v, 0)).ok_or_else(|| Reply::err(BAD_ID))?;
            }
            "force" | "justid" => {
                o.force |= lower(opt) == "force";
                o.justid |= lower(opt) == "justid";
                i += 1;
                continue;
            }
            _ => return Err(Reply::err(format!("ERR Unrecognized XCLAIM option '{}'", String::from_utf8_lossy(opt)))),
        }
        i += 2;
    }
    Ok(o)
}

/// XCLAIM key group consumer min-idle-time id... [options]: the pending entries idle for at
/// least min-idle-time become `consumer`'s.
fn cmd_xclaim(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    let [_, key, group, consumer, ..] = a else { return wrong_args("xclaim") };
    creating_consumer(sh, sess, &[key], group, consumer, |sess| xclaim(sh, sess, a))
}

fn xclaim(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    let [_, key, group, consumer, min_idle, rest @ ..] = a else { return wrong_args("xclaim") };
    let Some(min_idle) = int_arg(min_idle) else {
        return Reply::err("ERR Invalid min-idle-time argument for XCLAIM");
    };
    let n_ids = rest.iter().take_while(|i| parse_id(i, 0).is_some()).count();
    let (ids, opts) = rest.split_at(n_ids);
    if ids.is_empty() {
        return Reply::err(BAD_ID);
    }
    let o = match claim_opts(opts) {
        Ok(o) => o,
        Err(r) => return r,
    };
    let ids: Vec<Id> = ids.iter().filter_map(|i| parse_id(i, 0)).collect();
    let k = sh.db(sess);
    let _g = k.lock(key);
    ks((|| {
        let (Some(m), Some(_)) = (k.stream_meta(key)?, k.group(key, group)?) else { return Ok(no_group(key, group)) };
        let now = k.now_ms();
        let mut b = WriteBatch::new();
        let mut claimed: Vec<Entry> = Vec::new();
        let mut just = Vec::new();
        for id in ids {
            let p = match k.pending_entry(key, group, id)? {
                Some(p) => p,
                None if o.force && k.stream_entry(key, id)?.is_some() => {
                    Pending { id, consumer: consumer.to_vec(), delivered: 0, deliveries: 0 }
                }
                None => continue,
            };
            if min_idle > 0 && now.saturating_sub(p.delivered) < min_idle as u64 {
                continue;
            }
            let Some(fields) = k.stream_entry(key, id)? else {
                // The entry is gone: it leaves the PEL.
                k.delete_pending(&mut b, key, group, id);
                continue;
            };
            let delivered = o.time.or(o.idle.map(|i| now.saturating_sub(i))).unwrap_or(now);
            let deliveries = o.retry.unwrap_or(p.deliveries + u64::from(!o.justid));
            k.put_pending(
                &mut b,
                key,
                group,
                &Pending { id, consumer: consumer.to_vec(), delivered, deliveries },
                m.at,
            );
            just.push(id_text(id));
            claimed.push((id, fields));
        }
        let c = seen(k, key, group, consumer, now)?;
        let active = if claimed.is_empty() { c.active } else { now };
        k.put_consumer(&mut b, key, group, &Consumer { active, ..c }, m.at);
        k.db.write(&b)?;
        Ok(if o.justid { Reply::Array(just) } else { entries_reply(claimed) })
    })())
}

/// XAUTOCLAIM key group consumer min-idle-time start [COUNT n] [JUSTID]: XCLAIM of the pending
/// entries from `start` on, scanning at most COUNT×10; the cursor to go on from, the entries,
/// and the IDs of entries that no longer exist (taken out of the PEL).
fn cmd_xautoclaim(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    let [_, key, group, consumer, ..] = a else { return wrong_args("xautoclaim") };
    creating_consumer(sh, sess, &[key], group, consumer, |sess| xautoclaim(sh, sess, a))
}

fn xautoclaim(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    let [_, key, group, consumer, min_idle, start, opts @ ..] = a else { return wrong_args("xautoclaim") };
    let Some(min_idle) = int_arg(min_idle) else {
        return Reply::err("ERR Invalid min-idle-time argument for XAUTOCLAIM");
    };
    let Some(start) = pel_bound(start, true) else { return Reply::err(BAD_ID) };
    let (mut count, mut justid, mut i) = (100usize, false, 0);
    while let Some(o) = opts.get(i) {
        match lower(o).as_str() {
            "count" => match opts.get(i + 1).and_then(|n| int_arg(n)) {
                Some(n) if (1..=i64::MAX / 10).contains(&n) => count = n as usize,
                _ => return Reply::err("ERR COUNT must be > 0"),
            },
            "justid" => {
                justid = true;
                i += 1;
                continue;
            }
            _ => return syntax(),
        }
        i += 2;
    }
    let k = sh.db(sess);
    let _g = k.lock(key);
    ks((|| {
        let (Some(m), Some(_)) = (k.stream_meta(key)?, k.group(key, group)?) else { return Ok(no_group(key, group)) };
        let now = k.now_ms();
        let attempts = count.saturating_mul(10);
        let scanned = k.pending(key, group, start, Some(attempts.saturating_add(1)))?;
        let (mut b, mut claimed, mut deleted, mut just) = (WriteBatch::new(), Vec::new(), Vec::new(), Vec::new());
        let mut examined = 0;
        for p in scanned.iter().take(attempts) {
            if claimed.len() >= count {
                break;
            }
            examined += 1;
            if now.saturating_sub(p.delivered) < min_idle.max(0) as u64 {
                continue;
            }
            let Some(fields) = k.stream_entry(key, p.id)? else {
                k.delete_pending(&mut b, key, group, p.id);
                deleted.push(id_text(p.id));
                continue;
            };
            let q = Pending {
                id: p.id,
                consumer: consumer.to_vec(),
                delivered: now,
                deliveries: p.deliveries + u64::from(!justid),
            };
            k.put_pending(&mut b, key, group, &q, m.at);
            just.push(id_text(p.id));
            claimed.push((p.id, fields));
        }
        let c = seen(k, key, group, consumer, now)?;
        let active = if claimed.is_empty() { c.active } else { now };
        k.put_consumer(&mut b, key, group, &Consumer { active, ..c }, m.at);
        k.db.write(&b)?;
        let next = scanned.get(examined).map_or((0, 0), |p| p.id);
        let entries = if justid { Reply::Array(just) } else { entries_reply(claimed) };
        Ok(Reply::Array(vec![id_text(next), entries, Reply::Array(deleted)]))
    })())
}

const XINFO_HELP: [&str; 9] = [
    "XINFO <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "CONSUMERS <key> <groupname>",
    "    Show consumers of <groupname>.",
    "GROUPS <key>",
    "    Show the stream consumer groups.",
    "STREAM <key> [FULL [COUNT <count>]",
    "    Show information about the stream.",
    "HELP",
    "    Prints this help.",
];

/// XINFO STREAM key | GROUPS key | CONSUMERS key group (without the FULL form's details).
fn cmd_xinfo(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    let [_, sub, rest @ ..] = a else { return wrong_args("xinfo") };
    let k = sh.db(sess);
    let sub_name = lower(sub);
    if sub_name == "help" && rest.is_empty() {
        return Reply::Array(XINFO_HELP.iter().map(|l| Reply::Simple((*l).into())).collect());
    }
    let (key, group) = match (sub_name.as_str(), rest) {
        ("stream", [key, ..]) | ("groups", [key]) => (*key, None),
        ("consumers", [key, group]) => (*key, Some(*group)),
        _ => return bad_subcommand("xinfo", sub, &["stream", "groups", "consumers", "help"]),
    };
    ks((|| {
        let Some(m) = k.stream_meta(key)? else { return Ok(Reply::err("ERR no such key")) };
        match (sub_name.as_str(), group) {
            ("groups", _) => info_groups(k, key, m.len),
            (_, Some(group)) => info_consumers(k, key, group),
            _ => info_stream(k, key, m),
        }
    })())
}

fn pair(n: &str, v: Reply) -> (Reply, Reply) {
    (Reply::bulk(n), v)
}

fn info_groups(k: &Keyspace, key: &[u8], len: u64) -> Result<Reply, KsError> {
    let mut out = Vec::new();
    for g in k.groups(key)? {
        let consumers = k.consumers(key, &g.name)?.len() as i64;
        let pending = k.pending(key, &g.name, Bound::Unbounded, None)?.len() as i64;
        let known = g.entries_read >= 0;
        let lag = if known { Reply::Int((len as i64 - g.entries_read).max(0)) } else { Reply::Nil };
        out.push(Reply::Map(vec![
            pair("name", Reply::Bulk(g.name)),
            pair("consumers", Reply::Int(consumers)),
            pair("pending", Reply::Int(pending)),
            pair("last-delivered-id", id_text(g.last)),
            pair("entries-read", if known { Reply::Int(g.entries_read) } else { Reply::Nil }),
            pair("lag", lag),
        ]));
    }
    Ok(Reply::Array(out))
}

fn info_consumers(k: &Keyspace, key: &[u8], group: &[u8]) -> Result<Reply, KsError> {
    if k.group(key, group)?.is_none() {
        return Ok(no_group(key, group));
    }
    let now = k.now_ms();
    let pel = k.pending(key, group, Bound::Unbounded, None)?;
    let rows = k.consumers(key, group)?.into_iter().map(|c| {
        let pending = pel.iter().filter(|p| p.consumer == c.name).count() as i64;
        Reply::Map(vec![
            pair("name", Reply::Bulk(c.name)),
            pair("pending", Reply::Int(pending)),
            pair("idle", Reply::Int(now.saturating_sub(c.seen) as i64)),
        ])
    });
    Ok(Reply::Array(rows.collect()))
}

fn info_stream(k: &Keyspace, key: &[u8], m: crate::keyspace::stream::StreamMeta) -> Result<Reply, KsError> {
    let first = k.xrange(key, Bound::Unbounded, Bound::Unbounded, false, Some(1))?;
    let last = k.xrange(key, Bound::Unbounded, Bound::Unbounded, true, Some(1))?;
    let entry = |e: Vec<Entry>| {
        e.into_iter().next().map_or(Reply::Nil, |(id, f)| {
            Reply::Array(vec![id_text(id), Reply::Array(f.into_iter().map(Reply::Bulk).collect())])
        })
    };
    Ok(Reply::Map(vec![
        pair("length", Reply::Int(m.len as i64)),
        pair("radix-tree-keys", Reply::Int(1)),
        pair("radix-tree-nodes", Reply::Int(2)),
        pair("last-generated-id", id_text(m.last)),
        pair("max-deleted-entry-id", Reply::bulk("0-0")),
        pair("entries-added", Reply::Int(m.len as i64)),
        pair("recorded-first-entry-id", first.first().map_or(Reply::bulk("0-0"), |e| id_text(e.0))),
        pair("groups", Reply::Int(k.groups(key)?.len() as i64)),
        pair("first-entry", entry(first)),
        pair("last-entry", entry(last)),
    ]))
}
