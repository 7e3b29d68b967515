//! LCS key1 key2 [LEN] [IDX] [MINMATCHLEN n] [WITHMATCHLEN]: the longest common subsequence of
//! two strings, by Redis 7.0's dynamic programme and walk back, so that its ranges come out as
//! Redis gives them.

use super::args::{int_arg, lower, syntax, wrong_args};
use super::table::{Command, Keys, READONLY};
use crate::keyspace::KsError;
use crate::resp::Reply;
use crate::state::{Session, Shared};

#[rustfmt::skip]
pub(super) static COMMANDS: &[Command] = &[
    Command { name: "lcs", arity: -3, flags: READONLY, keys: Keys::Two, handler: cmd_lcs },
];

/// The largest table the programme may build (cells of 4 bytes): Redis's `proto-max-bulk-len`.
const MAX_CELLS: u64 = (512 << 20) / 4;

struct LcsOptions {
    len: bool,
    idx: bool,
    min: u64,
    with_len: bool,
}

fn options(opts: &[&[u8]]) -> Result<LcsOptions, Reply> {
    let mut o = LcsOptions { len: false, idx: false, min: 0, with_len: false };
    let mut it = opts.iter();
    while let Some(opt) = it.next() {
        match lower(opt).as_str() {
            "len" => o.len = true,
            "idx" => o.idx = true,
            "withmatchlen" => o.with_len = true,
            "minmatchlen" => {
                o.min = it.next().and_then(|v| int_arg(v)).map_or(Err(syntax()), |n| Ok(n.max(0) as u64))?
            }
            _ => return Err(syntax()),
        }
    }
    if o.len && o.idx {
        return Err(Reply::err("ERR If you want both the length and indexes, please just use IDX."));
    }
    Ok(o)
}

fn cmd_lcs(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    let [_, k1, k2, opts @ ..] = a else { return wrong_args("lcs") };
    let o = match options(opts) {
        Ok(o) => o,
        Err(r) => return r,
    };
    let k = sh.db(sess);
    let read = |key: &[u8]| match k.get_str(key) {
        Err(KsError::WrongType) => Err(Reply::err("ERR The specified keys must contain string values")),
        Err(e) => Err(Reply::err(e.to_string())),
        Ok(v) => Ok(v.unwrap_or_default()),
    };
    let (x, y) = match (read(k1), read(k2)) {
        (Ok(x), Ok(y)) => (x, y),
        (Err(r), _) | (_, Err(r)) => return r,
    };
    if (x.len() as u64 + 1).saturating_mul(y.len() as u64 + 1) > MAX_CELLS {
        return Reply::err("ERR Insufficient memory, transient memory for LCS exceeds proto-max-bulk-len");
    }
    lcs(&x, &y, &o)
}

fn lcs(x: &[u8], y: &[u8], o: &LcsOptions) -> Reply {
    let (n, m) = (x.len(), y.len());
    let w = m + 1;
    let mut dp = vec![0u32; (n + 1) * w];
    let at = |dp: &[u32], i: usize, j: usize| dp.get(i * w + j).copied().unwrap_or(0);
    for i in 1..=n {
        for j in 1..=m {
            let v = if x.get(i - 1) == y.get(j - 1) {
                at(&dp, i - 1, j - 1) + 1
            } else {
                at(&dp, i - 1, j).max(at(&dp, i, j - 1))
            };
            if let Some(c) = dp.get_mut(i * w + j) {
                *c = v;
            }
        }
    }
    let total = at(&dp, n, m);
    if o.len {
        return Reply::Int(i64::from(total));
    }
    let (seq, matches) = walk_back(x, y, &dp, w, total, o);
    if !o.idx {
        return Reply::Bulk(seq);
    }
    Reply::Map(vec![
        (Reply::bulk("matches"), Reply::Array(matches)),
        (Reply::bulk("len"), Reply::Int(i64::from(total))),
    ])
}

/// The subsequence and, for IDX, the matched ranges, as Redis walks the table back.
fn walk_back(x: &[u8], y: &[u8], dp: &[u32], w: usize, total: u32, o: &LcsOptions) -> (Vec<u8>, Vec<Reply>) {
    let at = |i: usize, j: usize| dp.get(i * w + j).copied().unwrap_or(0);
    let mut seq = vec![0u8; total as usize];
    let mut matches = Vec::new();
    let (mut i, mut j, mut idx) = (x.len(), y.len(), total as usize);
    let unset = x.len();
    let (mut a0, mut a1, mut b0, mut b1) = (unset, 0, 0, 0);
    while i > 0 && j > 0 {
        let mut emit = false;
        if x.get(i - 1) == y.get(j - 1) {
            if let (Some(s), Some(&c)) = (seq.get_mut(idx.wrapping_sub(1)), x.get(i - 1)) {
                *s = c;
            }
            if a0 == unset {
                (a0, a1, b0, b1) = (i - 1, i - 1, j - 1, j - 1);
            } else if a0 == i && b0 == j {
                a0 -= 1;
                b0 -= 1;
            } else {
                emit = true;
            }
            if a0 == 0 || b0 == 0 {
                emit = true;
            }
            idx = idx.saturating_sub(1);
            i -= 1;
            j -= 1;
        } else {
            if at(i - 1, j) > at(i, j - 1) {
                i -= 1;
            } else {
                j -= 1;
            }
            emit = a0 != unset;
        }
        if emit {
            let len = (a1 - a0 + 1) as u64;
            if o.min == 0 || len >= o.min {
                let pair = |s: usize, e: usize| Reply::Array(vec![Reply::Int(s as i64), Reply::Int(e as i64)]);
                let mut m = vec![pair(a0, a1), pair(b0, b1)];
                if o.with_len {
                    m.push(Reply::Int(len as i64));
                }
                matches.push(Reply::Array(m));
            }
            a0 = unset;
        }
    }
    (seq, matches)
}
