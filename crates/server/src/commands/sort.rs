//! SORT and SORT_RO: the elements of a list, set or sorted set, sorted as numbers or (ALPHA) as
//! strings, or by weights read from other keys (BY pattern), with LIMIT, GET patterns, and
//! STORE into a list.
//!
//! A pattern's `*` stands for the element; `key->field` reads a hash field; `GET #` is the
//! element itself; `BY nosort` keeps the source's order. In a cluster, BY and GET patterns are
//! refused, as Redis Cluster refuses patterns that may name keys of other slots.

use super::args::{int_arg, ks, lower, syntax, wrong_args};
use super::table::{Command, Keys, READONLY, WRITE};
use crate::keyspace::list::End;
use crate::keyspace::{Keyspace, KsError, Value};
use crate::resp::Reply;
use crate::state::{Session, Shared};

#[rustfmt::skip]
pub(super) static COMMANDS: &[Command] = &[
    Command { name: "sort", arity: -2, flags: WRITE, keys: Keys::First, handler: cmd_sort },
    Command { name: "sort_ro", arity: -2, flags: READONLY, keys: Keys::First, handler: cmd_sort_ro },
];

/// SORT's options.
#[derive(Default)]
struct SortOptions<'a> {
    by: Option<&'a [u8]>,
    limit: Option<(i64, i64)>,
    get: Vec<&'a [u8]>,
    desc: bool,
    alpha: bool,
    store: Option<&'a [u8]>,
}

fn options<'a>(opts: &[&'a [u8]], read_only: bool) -> Result<SortOptions<'a>, Reply> {
    let mut o = SortOptions::default();
    let mut it = opts.iter();
    while let Some(opt) = it.next() {
        match lower(opt).as_str() {
            "asc" => o.desc = false,
            "desc" => o.desc = true,
            "alpha" => o.alpha = true,
            "by" => o.by = Some(it.next().ok_or_else(syntax)?),
            "get" => o.get.push(it.next().ok_or_else(syntax)?),
            "store" if !read_only => o.store = Some(it.next().ok_or_else(syntax)?),
            "limit" => {
                let (Some(off), Some(n)) = (it.next().and_then(|v| int_arg(v)), it.next().and_then(|v| int_arg(v)))
                else {
                    return Err(syntax());
                };
                o.limit = Some((off, n));
            }
            _ => return Err(syntax()),
        }
    }
    Ok(o)
}

/// The elements of the list, set or sorted set at `key` (none for no key).
fn elements(k: &Keyspace, key: &[u8]) -> Result<Vec<Vec<u8>>, KsError> {
    Ok(match k.get(key)? {
        None => Vec::new(),
        Some(Value::List { .. }) => k.list_all(key)?,
        Some(Value::Set(_)) => k.smembers(key)?,
        Some(Value::ZSet(_)) => k.zall(key, false)?.map(|r| r.map(|(m, _)| m)).collect::<Result<_, _>>()?,
        Some(_) => return Err(KsError::WrongType),
    })
}

/// The value a pattern names for `elem`: `*` replaced by it, `->field` a hash field.
fn lookup(k: &Keyspace, pattern: &[u8], elem: &[u8]) -> Result<Option<Vec<u8>>, KsError> {
    if pattern == b"#" {
        return Ok(Some(elem.to_vec()));
    }
    let Some(star) = pattern.iter().position(|&b| b == b'*') else { return Ok(None) };
    let (head, tail) = pattern.split_at(star);
    let tail = tail.get(1..).unwrap_or_default();
    let (tail, field) = match tail.windows(2).position(|w| w == b"->") {
        Some(i) => (tail.get(..i).unwrap_or_default(), tail.get(i + 2..)),
        None => (tail, None),
    };
    let key = [head, elem, tail].concat();
    match field {
        Some(f) => match k.hget(&key, f) {
            Err(KsError::WrongType) => Ok(None),
            r => r,
        },
        None => match k.get_str(&key) {
            Err(KsError::WrongType) => Ok(None),
            r => r,
        },
    }
}

fn sort(sh: &Shared, sess: &mut Session, a: &[&[u8]], read_only: bool) -> Reply {
    let [_, key, opts @ ..] = a else { return wrong_args(if read_only { "sort_ro" } else { "sort" }) };
    let o = match options(opts, read_only) {
        Ok(o) => o,
        Err(r) => return r,
    };
    let patterns = o.by.is_some_and(|b| b != b"nosort") || o.get.iter().any(|g| *g != b"#");
    if patterns && sh.cluster.get().is_some() {
        return Reply::err(
            "ERR BY and GET patterns of SORT are refused in a cluster: they may name keys of other regions",
        );
    }
    let k = sh.db(sess);
    ks((|| {
        let mut items = sorted(k, key, &o)?;
        if let Some((off, n)) = o.limit {
            let off = usize::try_from(off.max(0)).unwrap_or(0);
            let n = if n < 0 { usize::MAX } else { usize::try_from(n).unwrap_or(usize::MAX) };
            items = items.into_iter().skip(off).take(n).collect();
        }
        let out: Vec<Option<Vec<u8>>> = if o.get.is_empty() {
            items.into_iter().map(Some).collect()
        } else {
            let mut out = Vec::new();
            for e in &items {
                for g in &o.get {
                    out.push(lookup(k, g, e)?);
                }
            }
            out
        };
        let Some(dst) = o.store else { return Ok(Reply::Array(out.into_iter().map(Reply::opt).collect())) };
        let _g = k.lock(dst);
        k.delete_locked(dst)?;
        let values: Vec<Vec<u8>> = out.into_iter().map(Option::unwrap_or_default).collect();
        if !values.is_empty() {
            let refs: Vec<&[u8]> = values.iter().map(Vec::as_slice).collect();
            k.push_locked(dst, End::Right, &refs, false)?;
            sh.wake(sess.db, dst);
        }
        Ok(Reply::Int(values.len() as i64))
    })())
}

/// The elements of `key` in SORT's order.
fn sorted(k: &Keyspace, key: &[u8], o: &SortOptions<'_>) -> Result<Vec<Vec<u8>>, KsError> {
    let items = elements(k, key)?;
    if o.by == Some(b"nosort") {
        return Ok(items);
    }
    let mut keyed = Vec::with_capacity(items.len());
    for e in items {
        let weight = match o.by {
            Some(p) => lookup(k, p, &e)?,
            None => Some(e.clone()),
        };
        keyed.push((weight.unwrap_or_default(), e));
    }
    if o.alpha {
        keyed.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.cmp(&b.1)));
    } else {
        let mut nums = Vec::with_capacity(keyed.len());
        for (w, e) in keyed {
            let n = if w.is_empty() && o.by.is_some() {
                0.0
            } else {
                std::str::from_utf8(&w)
                    .ok()
                    .and_then(|s| s.trim().parse::<f64>().ok())
                    .filter(|n| !n.is_nan())
                    .ok_or_else(|| KsError::Refused("ERR One or more scores can't be converted into double".into()))?
            };
            nums.push((n, e));
        }
        nums.sort_by(|a, b| a.0.total_cmp(&b.0).then_with(|| a.1.cmp(&b.1)));
        keyed = nums.into_iter().map(|(_, e)| (Vec::new(), e)).collect();
    }
    let mut out: Vec<Vec<u8>> = keyed.into_iter().map(|(_, e)| e).collect();
    if o.desc {
        out.reverse();
    }
    Ok(out)
}

fn cmd_sort(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    sort(sh, sess, a, false)
}

fn cmd_sort_ro(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    sort(sh, sess, a, true)
}
