//! Commands on keys of any type: DEL, UNLINK, EXISTS, TYPE, DBSIZE, SCAN, KEYS,
//! HALYARD.RANGE and HALYARD.DELRANGE.

use super::args::{int_arg, ks, lower, not_int, syntax, wrong_args};
use super::glob;
use crate::keyspace::{Keyspace, KsError, Value};
use crate::resp::Reply;
use crate::state::{Session, Shared};

pub(super) fn cmd_del(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    let [_, keys @ ..] = a else { return wrong_args("del") };
    delete(sh.db(sess), keys)
}

/// The same as DEL: deleting a key costs one tombstone whatever its size.
pub(super) fn cmd_unlink(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    let [_, keys @ ..] = a else { return wrong_args("unlink") };
    delete(sh.db(sess), keys)
}

fn delete(k: &Keyspace, keys: &[&[u8]]) -> Reply {
    let k = &k;
    ks((|| {
        let mut n = 0;
        for key in keys {
            let _g = k.lock(key);
            n += k.delete_locked(key)? as i64;
        }
        Ok(Reply::Int(n))
    })())
}

pub(super) fn cmd_exists(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    let [_, keys @ ..] = a else { return wrong_args("exists") };
    ks((|| {
        let mut n = 0;
        for key in keys {
            n += sh.db(sess).get(key)?.is_some() as i64;
        }
        Ok(Reply::Int(n))
    })())
}

pub(super) fn cmd_type(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    let [_, key] = a else { return wrong_args("type") };
    ks(sh.db(sess).get(key).map(|v| Reply::Simple(v.as_ref().map_or("none", type_name).into())))
}

/// A value's type as TYPE names it.
fn type_name(v: &Value) -> &'static str {
    v.type_name()
}

/// Whether `key` holds a value whose type TYPE names `kind` (in any case), as SCAN's TYPE option
/// keeps keys: an unknown name matches no key, nor does a key gone since it was listed.
pub(crate) fn has_type(k: &Keyspace, key: &[u8], kind: &[u8]) -> Result<bool, KsError> {
    Ok(k.get(key)?.is_some_and(|v| type_name(&v).as_bytes().eq_ignore_ascii_case(kind)))
}

pub(super) fn cmd_dbsize(sh: &Shared, s: &mut Session, _: &[&[u8]]) -> Reply {
    ks(sh.db(s).count(s.span.as_ref()).map(|n| Reply::Int(n as i64)))
}

/// SCAN cursor [MATCH pattern] [COUNT n] [TYPE t]: cursors walk the key space in key order.
/// As in Redis, COUNT keys are looked at and those MATCH or TYPE leave out are dropped from the
/// page (which can then be empty with a cursor to go on from).
pub(super) fn cmd_scan(sh: &Shared, s: &mut Session, a: &[&[u8]]) -> Reply {
    let [_, cursor, opts @ ..] = a else { return wrong_args("scan") };
    let Some(cursor) = std::str::from_utf8(cursor).ok().and_then(|s| s.parse::<u64>().ok()) else {
        return Reply::err("ERR invalid cursor");
    };
    let ScanOptions { pattern, count, kind } = match scan_options(opts) {
        Ok(o) => o,
        Err(r) => return r,
    };
    let after = if cursor == 0 {
        None
    } else {
        match sh.cursors.lock().get(cursor) {
            Some(k) => Some(k),
            None => return Reply::err("ERR invalid cursor"),
        }
    };
    ks((|| {
        let (keys, more) = sh.db(s).keys_after(after.as_deref(), count, s.span.as_ref())?;
        let next = match (more, keys.last()) {
            (true, Some(last)) => sh.cursors.lock().put(last.clone()),
            _ => 0,
        };
        let mut items = Vec::new();
        for k in keys {
            if pattern.is_none_or(|p| glob(p, &k)) && kind.map_or(Ok(true), |t| has_type(sh.db(s), &k, t))? {
                items.push(Reply::Bulk(k));
            }
        }
        Ok(Reply::Array(vec![Reply::bulk(next.to_string()), Reply::Array(items)]))
    })())
}

/// SCAN's options.
pub(crate) struct ScanOptions<'a> {
    /// MATCH: a glob pattern.
    pub pattern: Option<&'a [u8]>,
    /// COUNT: how many keys to look at [default: 10].
    pub count: usize,
    /// TYPE: a type name as TYPE answers it, in any case.
    pub kind: Option<&'a [u8]>,
}

/// SCAN's options; None for a syntax error. As in Redis, the last of an option given twice
/// counts.
pub(crate) fn scan_options<'a>(opts: &[&'a [u8]]) -> Result<ScanOptions<'a>, Reply> {
    let mut o = ScanOptions { pattern: None, count: 10, kind: None };
    for opt in opts.chunks(2) {
        let [name, value] = opt else { return Err(syntax()) };
        match lower(name).as_str() {
            "match" => o.pattern = Some(*value),
            "count" => match int_arg(value) {
                Some(n) if n > 0 => o.count = n as usize,
                Some(_) => return Err(syntax()),
                None => return Err(not_int()),
            },
            "type" => o.kind = Some(*value),
            _ => return Err(syntax()),
        }
    }
    Ok(o)
}

pub(super) fn cmd_keys(sh: &Shared, s: &mut Session, a: &[&[u8]]) -> Reply {
    let [_, pattern] = a else { return wrong_args("keys") };
    ks((|| {
        let mut out = Vec::new();
        let mut after: Option<Vec<u8>> = None;
        loop {
            let (keys, more) = sh.db(s).keys_after(after.as_deref(), 1000, s.span.as_ref())?;
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

/// HALYARD.RANGE's (LIMIT, REV); the error reply for bad options.
pub(crate) fn range_options(opts: &[&[u8]]) -> Result<(usize, bool), Reply> {
    let (mut limit, mut reverse) = (1000usize, false);
    let mut it = opts.iter();
    while let Some(opt) = it.next() {
        match lower(opt).as_str() {
            "limit" => match it.next().map(|n| int_arg(n)) {
                None => return Err(syntax()),
                Some(Some(n)) if n >= 0 => limit = n as usize,
                Some(_) => return Err(not_int()),
            },
            "rev" => reverse = true,
            _ => return Err(syntax()),
        }
    }
    Ok((limit, reverse))
}

/// HALYARD.KEYSAFTER count [after]: up to `count` user keys after `after` (from the start
/// when absent), in key order. Other nodes use it to walk a region for a cluster-wide SCAN.
pub(super) fn cmd_halyard_keysafter(sh: &Shared, s: &mut Session, a: &[&[u8]]) -> Reply {
    let [_, count, after @ ..] = a else { return wrong_args("halyard.keysafter") };
    let (Some(count), None) = (int_arg(count).filter(|&n| n > 0), after.get(1)) else { return syntax() };
    ks(sh
        .db(s)
        .keys_after(after.first().copied(), count as usize, s.span.as_ref())
        .map(|(keys, _)| Reply::Array(keys.into_iter().map(Reply::Bulk).collect())))
}

/// HALYARD.RANGE start end [LIMIT n] [REV]: string pairs in [start, end) in key order
/// (an empty end means no upper bound), as a flat array key, value, key, value...
pub(super) fn cmd_halyard_range(sh: &Shared, s: &mut Session, a: &[&[u8]]) -> Reply {
    let [_, start, end, opts @ ..] = a else { return wrong_args("halyard.range") };
    let (limit, reverse) = match range_options(opts) {
        Ok(o) => o,
        Err(reply) => return reply,
    };
    let end = (!end.is_empty()).then_some(*end);
    ks(sh
        .db(s)
        .range(start, end, limit, reverse, s.span.as_ref())
        .map(|pairs| Reply::Array(pairs.into_iter().flat_map(|(k, v)| [Reply::Bulk(k), Reply::Bulk(v)]).collect())))
}

/// HALYARD.DELRANGE start end: deletes every key in [start, end) (an empty end means no upper
/// bound), hashes whole, in one record per region whatever the number of keys; answers OK.
pub(super) fn cmd_halyard_delrange(sh: &Shared, s: &mut Session, a: &[&[u8]]) -> Reply {
    let [_, start, end] = a else { return wrong_args("halyard.delrange") };
    let end = (!end.is_empty()).then_some(*end);
    // As RocksDB's DeleteRange: an empty range deletes nothing, an inverted one is an error.
    if end.is_some_and(|e| e < *start) {
        return Reply::err("ERR the end of the range is before its start");
    }
    ks(sh.db(s).delete_range(start, end, s.span.as_ref()).map(|()| Reply::ok()))
}

/// HALYARD.BACKUP: adds a backup of this node's store to its `backup_dir` (only segments earlier
/// backups lack are copied) and answers with the backup's number, each region's LSN, and the
/// bytes copied and reused. Writes go on meanwhile; the copy runs off the network worker.
pub(super) fn cmd_halyard_backup(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    let [_] = a else { return wrong_args("halyard.backup") };
    let Some(dir) = sh.backup_dir.get() else {
        return Reply::err(
            "ERR no backup directory: start the server with --backup-dir DIR (or backup_dir in its config file)",
        );
    };
    let mut result = None;
    (crate::native::off_worker_hook().0)(&mut || result = Some(sh.db(sess).db.backup(dir)));
    match result {
        Some(Ok(r)) => Reply::Array(vec![
            Reply::bulk("backup"),
            Reply::Int(i64::from(r.backup)),
            Reply::bulk("lsns"),
            Reply::Array(
                r.lsns
                    .iter()
                    .map(|(id, lsn)| Reply::Array(vec![Reply::Int(i64::from(*id)), Reply::Int(*lsn as i64)]))
                    .collect(),
            ),
            Reply::bulk("bytes_copied"),
            Reply::Int(r.bytes_copied as i64),
            Reply::bulk("bytes_reused"),
            Reply::Int(r.bytes_reused as i64),
            Reply::bulk("pause_us"),
            Reply::Int(r.longest_pause.as_micros() as i64),
        ]),
        Some(Err(e)) => Reply::err(format!("ERR backup failed: {e}")),
        None => Reply::err("ERR backup did not run"),
    }
}
