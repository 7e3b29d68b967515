//! Commands on keys of any type: DEL, UNLINK, EXISTS, TYPE, DBSIZE, SCAN, KEYS, and
//! HALYARD.RANGE.

use super::{glob, int_arg, ks, lower, not_int, syntax, wrong_args};
use crate::keyspace::Value;
use crate::resp::Reply;
use crate::state::{Session, Shared};

pub(super) fn cmd_del(sh: &Shared, _: &mut Session, a: &[&[u8]]) -> Reply {
    let [_, keys @ ..] = a else { return wrong_args("del") };
    delete(sh, keys)
}

/// The same as DEL: deleting a key costs one tombstone whatever its size.
pub(super) fn cmd_unlink(sh: &Shared, _: &mut Session, a: &[&[u8]]) -> Reply {
    let [_, keys @ ..] = a else { return wrong_args("unlink") };
    delete(sh, keys)
}

fn delete(sh: &Shared, keys: &[&[u8]]) -> Reply {
    let k = &sh.ks;
    ks((|| {
        let mut n = 0;
        for key in keys {
            let _g = k.lock(key);
            n += k.delete_locked(key)? as i64;
        }
        Ok(Reply::Int(n))
    })())
}

pub(super) fn cmd_exists(sh: &Shared, _: &mut Session, a: &[&[u8]]) -> Reply {
    let [_, keys @ ..] = a else { return wrong_args("exists") };
    ks((|| {
        let mut n = 0;
        for key in keys {
            n += sh.ks.get(key)?.is_some() as i64;
        }
        Ok(Reply::Int(n))
    })())
}

pub(super) fn cmd_type(sh: &Shared, _: &mut Session, a: &[&[u8]]) -> Reply {
    let [_, key] = a else { return wrong_args("type") };
    ks(sh.ks.get(key).map(|v| {
        Reply::Simple(match v {
            None => "none".into(),
            Some(Value::Str(_)) => "string".into(),
            Some(Value::Hash(_)) => "hash".into(),
        })
    }))
}

pub(super) fn cmd_dbsize(sh: &Shared, _: &mut Session, _: &[&[u8]]) -> Reply {
    ks(sh.ks.count().map(|n| Reply::Int(n as i64)))
}

/// SCAN cursor [MATCH pattern] [COUNT n] [TYPE t]: cursors walk the key space in key order.
/// TYPE is accepted and not applied.
pub(super) fn cmd_scan(sh: &Shared, _: &mut Session, a: &[&[u8]]) -> Reply {
    let [_, cursor, opts @ ..] = a else { return wrong_args("scan") };
    let Some(cursor) = std::str::from_utf8(cursor).ok().and_then(|s| s.parse::<u64>().ok()) else {
        return Reply::err("ERR invalid cursor");
    };
    let Some((pattern, count)) = scan_options(opts) else { return syntax() };
    let after = if cursor == 0 {
        None
    } else {
        match sh.cursors.lock().get(cursor) {
            Some(k) => Some(k),
            None => return Reply::err("ERR invalid cursor"),
        }
    };
    ks((|| {
        let (keys, more) = sh.ks.keys_after(after.as_deref(), count)?;
        let next = match (more, keys.last()) {
            (true, Some(last)) => sh.cursors.lock().put(last.clone()),
            _ => 0,
        };
        let items = keys.into_iter().filter(|k| pattern.is_none_or(|p| glob(p, k))).map(Reply::Bulk).collect();
        Ok(Reply::Array(vec![Reply::bulk(next.to_string()), Reply::Array(items)]))
    })())
}

/// SCAN's (MATCH pattern, COUNT); None for a syntax error.
fn scan_options<'a>(opts: &[&'a [u8]]) -> Option<(Option<&'a [u8]>, usize)> {
    let (mut pattern, mut count) = (None, 10usize);
    for opt in opts.chunks(2) {
        let [name, value] = opt else { return None };
        match lower(name).as_str() {
            "match" => pattern = Some(*value),
            "count" => match int_arg(value) {
                Some(n) if n > 0 => count = n as usize,
                _ => return None,
            },
            "type" => {}
            _ => return None,
        }
    }
    Some((pattern, count))
}

pub(super) fn cmd_keys(sh: &Shared, _: &mut Session, a: &[&[u8]]) -> Reply {
    let [_, pattern] = a else { return wrong_args("keys") };
    ks((|| {
        let mut out = Vec::new();
        let mut after: Option<Vec<u8>> = None;
        loop {
            let (keys, more) = sh.ks.keys_after(after.as_deref(), 1000)?;
            for key in &keys {
                if glob(pattern, key) {
                    out.push(Reply::bulk(key.clone()));
                }
            }
            if !more {
                break;
            }
            after = keys.last().cloned();
        }
        Ok(Reply::Array(out))
    })())
}

/// HALYARD.RANGE start end [LIMIT n] [REV]: string pairs in [start, end) in key order
/// (an empty end means no upper bound), as a flat array key, value, key, value...
pub(super) fn cmd_halyard_range(sh: &Shared, _: &mut Session, a: &[&[u8]]) -> Reply {
    let [_, start, end, opts @ ..] = a else { return wrong_args("halyard.range") };
    let (mut limit, mut reverse) = (1000usize, false);
    let mut it = opts.iter();
    while let Some(opt) = it.next() {
        match lower(opt).as_str() {
            "limit" => {
                let Some(n) = it.next() else { return syntax() };
                match int_arg(n) {
                    Some(n) if n >= 0 => limit = n as usize,
                    _ => return not_int(),
                }
            }
            "rev" => reverse = true,
            _ => return syntax(),
        }
    }
    let end = (!end.is_empty()).then_some(*end);
    ks(sh
        .ks
        .range(start, end, limit, reverse)
        .map(|pairs| Reply::Array(pairs.into_iter().flat_map(|(k, v)| [Reply::Bulk(k), Reply::Bulk(v)]).collect())))
}
