//! Redis commands on the keyspace.

use crate::keyspace::{KsError, Value};
use crate::resp::Reply;
use crate::state::{Session, Shared};
use std::sync::atomic::Ordering::Relaxed;

/// (name, arity): positive = exact argument count including the name, negative = at least.
pub const COMMANDS: &[(&str, i32)] = &[
    ("ping", -1),
    ("echo", 2),
    ("hello", -1),
    ("auth", -2),
    ("select", 2),
    ("quit", -1),
    ("command", -1),
    ("client", -2),
    ("info", -1),
    ("config", -2),
    ("dbsize", 1),
    ("time", 1),
    ("get", 2),
    ("set", -3),
    ("setnx", 3),
    ("getset", 3),
    ("getdel", 2),
    ("mget", -2),
    ("mset", -3),
    ("msetnx", -3),
    ("del", -2),
    ("unlink", -2),
    ("exists", -2),
    ("type", 2),
    ("strlen", 2),
    ("append", 3),
    ("getrange", 4),
    ("incr", 2),
    ("decr", 2),
    ("incrby", 3),
    ("decrby", 3),
    ("scan", -2),
    ("keys", 2),
    ("hset", -4),
    ("hmset", -4),
    ("hget", 3),
    ("hmget", -3),
    ("hgetall", 2),
    ("hdel", -3),
    ("hexists", 3),
    ("hlen", 2),
    ("halyard.range", -3),
];

/// Every command's name, for the per-command metrics.
pub fn names() -> Vec<&'static str> {
    COMMANDS.iter().map(|(n, _)| *n).collect()
}

fn wrong_args(name: &str) -> Reply {
    Reply::err(format!("ERR wrong number of arguments for '{name}' command"))
}

fn syntax() -> Reply {
    Reply::err("ERR syntax error")
}

fn not_int() -> Reply {
    Reply::err("ERR value is not an integer or out of range")
}

fn ks(r: Result<Reply, KsError>) -> Reply {
    r.unwrap_or_else(|e| Reply::err(e.to_string()))
}

fn int_arg(a: &[u8]) -> Option<i64> {
    std::str::from_utf8(a).ok()?.parse().ok()
}

fn lower(a: &[u8]) -> String {
    String::from_utf8_lossy(a).to_ascii_lowercase()
}

/// Runs one command. `sess.quit` is set by QUIT.
pub fn execute(sh: &Shared, sess: &mut Session, args: &[&[u8]]) -> Reply {
    let Some(first) = args.first() else { return Reply::err("ERR empty command") };
    let Some(&(cname, arity)) = COMMANDS.iter().find(|(n, _)| n.as_bytes().eq_ignore_ascii_case(first)) else {
        sh.metrics.unknown_commands.fetch_add(1, Relaxed);
        let rest: Vec<String> = args[1..].iter().take(8).map(|a| format!("'{}'", String::from_utf8_lossy(a))).collect();
        return Reply::err(format!(
            "ERR unknown command '{}', with args beginning with: {}",
            String::from_utf8_lossy(first),
            rest.join(" ")
        ));
    };
    if (arity > 0 && args.len() != arity as usize) || (arity < 0 && args.len() < (-arity) as usize) {
        return wrong_args(cname);
    }
    if sh.requirepass.is_some() && !sess.authed && !matches!(cname, "auth" | "hello" | "quit") {
        return Reply::err("NOAUTH Authentication required.");
    }
    // Latency is sampled (one command in 16 per connection): reading the clock twice per
    // command cost ~5% of a GET. Counts and errors are exact.
    sess.timed = sess.timed.wrapping_add(1);
    let t0 = sess.timed.is_multiple_of(16).then(std::time::Instant::now);
    let reply = dispatch(sh, sess, cname, args);
    if let Some(st) = sh.metrics.commands.get(cname) {
        st.record(t0.map(|t| t.elapsed().as_micros() as u64), matches!(reply, Reply::Error(_)));
    }
    reply
}

fn dispatch(sh: &Shared, sess: &mut Session, name: &str, a: &[&[u8]]) -> Reply {
    let k = &sh.ks;
    match name {
        "ping" => match a.len() {
            1 => Reply::Simple("PONG".into()),
            2 => Reply::bulk(a[1]),
            _ => wrong_args("ping"),
        },
        "echo" => Reply::bulk(a[1]),
        "hello" => hello(sh, sess, a),
        "auth" => auth(sh, sess, &a[1..]),
        "select" => match int_arg(a[1]) {
            Some(0) => Reply::ok(),
            Some(_) => Reply::err("ERR DB index is out of range"),
            None => not_int(),
        },
        "quit" => {
            sess.quit = true;
            Reply::ok()
        }
        "command" => match a.get(1).map(|s| lower(s)).as_deref() {
            None | Some("docs") | Some("info") => Reply::Array(Vec::new()),
            Some("count") => Reply::Int(COMMANDS.len() as i64),
            Some(_) => Reply::err("ERR unknown subcommand for 'command'"),
        },
        "client" => client(sh, sess, a),
        "info" => Reply::bulk(sh.info(a.get(1).map(|s| lower(s)).as_deref())),
        "config" => match lower(a[1]).as_str() {
            // Clients such as redis-benchmark read a few settings at start.
            "get" if a.len() == 3 => {
                let p = lower(a[2]);
                let v = match p.as_str() {
                    "appendonly" => Some("no"),
                    "save" => Some(""),
                    "databases" => Some("1"),
                    _ => None,
                };
                Reply::Array(v.map_or(Vec::new(), |v| vec![Reply::bulk(p.clone()), Reply::bulk(v)]))
            }
            _ => Reply::err("ERR CONFIG is limited to CONFIG GET in Halyard"),
        },
        "dbsize" => ks(k.count().map(|n| Reply::Int(n as i64))),
        "time" => {
            let d = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
            Reply::Array(vec![Reply::bulk(d.as_secs().to_string()), Reply::bulk(d.subsec_micros().to_string())])
        }
        "get" => ks(k.get_str(a[1]).map(Reply::opt)),
        "set" => set(sh, a),
        "setnx" => ks((|| {
            let _g = k.lock(a[1]);
            if k.get(a[1])?.is_some() {
                return Ok(Reply::Int(0));
            }
            k.set_locked(a[1], a[2])?;
            Ok(Reply::Int(1))
        })()),
        "getset" => ks((|| {
            let _g = k.lock(a[1]);
            let old = k.get_str(a[1])?;
            k.set_locked(a[1], a[2])?;
            Ok(Reply::opt(old))
        })()),
        "getdel" => ks((|| {
            let _g = k.lock(a[1]);
            let old = k.get_str(a[1])?;
            if old.is_some() {
                k.delete_locked(a[1])?;
            }
            Ok(Reply::opt(old))
        })()),
        "mget" => Reply::Array(
            a[1..].iter().map(|key| k.get_str(key).ok().flatten().map_or(Reply::Nil, Reply::Bulk)).collect(),
        ),
        "mset" | "msetnx" => {
            if a.len().is_multiple_of(2) {
                return wrong_args(name);
            }
            let keys: Vec<&[u8]> = a[1..].iter().step_by(2).copied().collect();
            ks((|| {
                let _g = k.lock_many(&keys);
                if name == "msetnx" {
                    for key in &keys {
                        if k.get(key)?.is_some() {
                            return Ok(Reply::Int(0));
                        }
                    }
                }
                for pair in a[1..].chunks(2) {
                    k.set_locked(pair[0], pair[1])?;
                }
                Ok(if name == "msetnx" { Reply::Int(1) } else { Reply::ok() })
            })())
        }
        "del" | "unlink" => ks((|| {
            let mut n = 0;
            for key in &a[1..] {
                let _g = k.lock(key);
                n += k.delete_locked(key)? as i64;
            }
            Ok(Reply::Int(n))
        })()),
        "exists" => ks((|| {
            let mut n = 0;
            for key in &a[1..] {
                n += k.get(key)?.is_some() as i64;
            }
            Ok(Reply::Int(n))
        })()),
        "type" => ks(k.get(a[1]).map(|v| {
            Reply::Simple(match v {
                None => "none".into(),
                Some(Value::Str(_)) => "string".into(),
                Some(Value::Hash(_)) => "hash".into(),
            })
        })),
        "strlen" => ks(k.get_str(a[1]).map(|v| Reply::Int(v.map_or(0, |v| v.len() as i64)))),
        "append" => ks((|| {
            let _g = k.lock(a[1]);
            let mut v = k.get_str(a[1])?.unwrap_or_default();
            v.extend_from_slice(a[2]);
            k.set_locked(a[1], &v)?;
            Ok(Reply::Int(v.len() as i64))
        })()),
        "getrange" => {
            let (Some(s), Some(e)) = (int_arg(a[2]), int_arg(a[3])) else { return not_int() };
            ks(k.get_str(a[1]).map(|v| {
                let v = v.unwrap_or_default();
                let n = v.len() as i64;
                let s = if s < 0 { (n + s).max(0) } else { s };
                let e = if e < 0 { n + e } else { e.min(n - 1) };
                if n == 0 || s > e || s >= n {
                    Reply::bulk(Vec::new())
                } else {
                    Reply::bulk(v[s as usize..=e as usize].to_vec())
                }
            }))
        }
        "incr" | "decr" | "incrby" | "decrby" => {
            let by = match name {
                "incr" => 1,
                "decr" => -1,
                _ => match int_arg(a[2]) {
                    Some(n) if name == "incrby" => n,
                    Some(n) => match n.checked_neg() {
                        Some(n) => n,
                        None => return Reply::err("ERR decrement would overflow"),
                    },
                    None => return not_int(),
                },
            };
            ks((|| {
                let _g = k.lock(a[1]);
                let cur = match k.get_str(a[1])? {
                    None => 0,
                    Some(v) => match int_arg(&v) {
                        Some(n) => n,
                        None => return Ok(not_int()),
                    },
                };
                let Some(n) = cur.checked_add(by) else {
                    return Ok(Reply::err("ERR increment or decrement would overflow"));
                };
                k.set_locked(a[1], n.to_string().as_bytes())?;
                Ok(Reply::Int(n))
            })())
        }
        "scan" => scan(sh, a),
        "keys" => ks((|| {
            let mut out = Vec::new();
            let mut after: Option<Vec<u8>> = None;
            loop {
                let (keys, more) = k.keys_after(after.as_deref(), 1000)?;
                for key in &keys {
                    if glob(a[1], key) {
                        out.push(Reply::bulk(key.clone()));
                    }
                }
                if !more {
                    break;
                }
                after = keys.last().cloned();
            }
            Ok(Reply::Array(out))
        })()),
        "hset" | "hmset" => {
            if !a.len().is_multiple_of(2) {
                return wrong_args(name);
            }
            let pairs: Vec<(&[u8], &[u8])> = a[2..].chunks(2).map(|p| (p[0], p[1])).collect();
            ks((|| {
                let _g = k.lock(a[1]);
                let n = k.hset_locked(a[1], &pairs)?;
                Ok(if name == "hmset" { Reply::ok() } else { Reply::Int(n as i64) })
            })())
        }
        "hget" => ks(k.hget(a[1], a[2]).map(Reply::opt)),
        "hmget" => ks((|| {
            let mut out = Vec::new();
            for f in &a[2..] {
                out.push(Reply::opt(k.hget(a[1], f)?));
            }
            Ok(Reply::Array(out))
        })()),
        "hgetall" => ks(k
            .hgetall(a[1])
            .map(|pairs| Reply::Map(pairs.into_iter().map(|(f, v)| (Reply::Bulk(f), Reply::Bulk(v))).collect()))),
        "hdel" => ks((|| {
            let _g = k.lock(a[1]);
            let fields: Vec<&[u8]> = a[2..].to_vec();
            Ok(Reply::Int(k.hdel_locked(a[1], &fields)? as i64))
        })()),
        "hexists" => ks(k.hget(a[1], a[2]).map(|v| Reply::Int(v.is_some() as i64))),
        "hlen" => ks(k.hlen(a[1]).map(|n| Reply::Int(n as i64))),
        "halyard.range" => range(sh, a),
        _ => Reply::err(format!("ERR unknown command '{name}'")),
    }
}

fn set(sh: &Shared, a: &[&[u8]]) -> Reply {
    let (mut nx, mut xx, mut get) = (false, false, false);
    let mut i = 3;
    while i < a.len() {
        match lower(a[i]).as_str() {
            "nx" => nx = true,
            "xx" => xx = true,
            "get" => get = true,
            "ex" | "px" | "exat" | "pxat" | "keepttl" => {
                return Reply::err("ERR key expiry (EX/PX/EXAT/PXAT/KEEPTTL) is not supported by Halyard yet")
            }
            _ => return syntax(),
        }
        i += 1;
    }
    if nx && xx {
        return syntax();
    }
    let k = &sh.ks;
    ks((|| {
        let _g = k.lock(a[1]);
        if !nx && !xx && !get {
            k.set(a[1], a[2])?;
            return Ok(Reply::ok());
        }
        let old = k.get(a[1])?;
        if get && matches!(old, Some(Value::Hash(_))) {
            return Err(KsError::WrongType);
        }
        let exists = old.is_some();
        let old = match old {
            Some(Value::Str(s)) => Some(s),
            _ => None,
        };
        if (nx && exists) || (xx && !exists) {
            return Ok(if get { Reply::opt(old) } else { Reply::Nil });
        }
        k.set_locked(a[1], a[2])?;
        Ok(if get { Reply::opt(old) } else { Reply::ok() })
    })())
}

fn hello(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    let mut i = 1;
    if let Some(v) = a.get(1) {
        match int_arg(v) {
            Some(p @ 2..=3) => sess.proto_next = Some(p as u8),
            _ => return Reply::err("NOPROTO unsupported protocol version"),
        }
        i = 2;
    }
    while i < a.len() {
        match lower(a[i]).as_str() {
            "auth" if i + 2 < a.len() => {
                if let Reply::Error(e) = auth(sh, sess, &a[i + 1..i + 3]) {
                    sess.proto_next = None;
                    return Reply::Error(e);
                }
                i += 3;
            }
            "setname" if i + 1 < a.len() => {
                sess.name = Some(a[i + 1].to_vec());
                i += 2;
            }
            _ => {
                sess.proto_next = None;
                return syntax();
            }
        }
    }
    if sh.requirepass.is_some() && !sess.authed {
        sess.proto_next = None;
        return Reply::err("NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time");
    }
    let proto = sess.proto_next.unwrap_or(sess.proto);
    Reply::Map(vec![
        (Reply::bulk("server"), Reply::bulk("halyard")),
        (Reply::bulk("version"), Reply::bulk(env!("CARGO_PKG_VERSION"))),
        (Reply::bulk("proto"), Reply::Int(proto as i64)),
        (Reply::bulk("id"), Reply::Int(sess.id as i64)),
        (Reply::bulk("mode"), Reply::bulk("standalone")),
        (Reply::bulk("role"), Reply::bulk("master")),
        (Reply::bulk("modules"), Reply::Array(Vec::new())),
    ])
}

fn auth(sh: &Shared, sess: &mut Session, creds: &[&[u8]]) -> Reply {
    let Some(pass) = &sh.requirepass else {
        return Reply::err("ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?");
    };
    let (user, given) = match creds {
        [p] => (&b"default"[..], p),
        [u, p] => (*u, p),
        _ => return syntax(),
    };
    if user == b"default" && **given == *pass.as_bytes() {
        sess.authed = true;
        Reply::ok()
    } else {
        sh.metrics.auth_failures.fetch_add(1, Relaxed);
        Reply::err("WRONGPASS invalid username-password pair or user is disabled.")
    }
}

fn client(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    match lower(a[1]).as_str() {
        "setname" if a.len() == 3 => {
            if a[2].iter().any(|&b| b == b' ' || b == b'\n') {
                return Reply::err("ERR Client names cannot contain spaces, newlines or special characters.");
            }
            sess.name = Some(a[2].to_vec());
            Reply::ok()
        }
        "getname" => Reply::opt(sess.name.clone()),
        "id" => Reply::Int(sess.id as i64),
        "info" => Reply::bulk(sh.client_line(sess)),
        "setinfo" => Reply::ok(),
        _ => Reply::err(format!("ERR unknown subcommand or wrong number of arguments for 'client|{}'", lower(a[1]))),
    }
}

/// SCAN cursor [MATCH pattern] [COUNT n]: cursors walk the key space in key order.
fn scan(sh: &Shared, a: &[&[u8]]) -> Reply {
    let Some(cursor) = std::str::from_utf8(a[1]).ok().and_then(|s| s.parse::<u64>().ok()) else {
        return Reply::err("ERR invalid cursor");
    };
    let mut count = 10usize;
    let mut pattern: Option<&[u8]> = None;
    let mut i = 2;
    while i < a.len() {
        match lower(a[i]).as_str() {
            "match" if i + 1 < a.len() => pattern = Some(a[i + 1]),
            "count" if i + 1 < a.len() => match int_arg(a[i + 1]) {
                Some(n) if n > 0 => count = n as usize,
                _ => return syntax(),
            },
            "type" if i + 1 < a.len() => {}
            _ => return syntax(),
        }
        i += 2;
    }
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

/// HALYARD.RANGE start end [LIMIT n] [REV]: string pairs in [start, end) in key order
/// (an empty end means no upper bound), as a flat array key, value, key, value...
fn range(sh: &Shared, a: &[&[u8]]) -> Reply {
    let mut limit = 1000usize;
    let mut reverse = false;
    let mut i = 3;
    while i < a.len() {
        match lower(a[i]).as_str() {
            "limit" if i + 1 < a.len() => {
                match int_arg(a[i + 1]) {
                    Some(n) if n >= 0 => limit = n as usize,
                    _ => return not_int(),
                }
                i += 2;
            }
            "rev" => {
                reverse = true;
                i += 1;
            }
            _ => return syntax(),
        }
    }
    let end = if a[2].is_empty() { None } else { Some(a[2]) };
    ks(sh
        .ks
        .range(a[1], end, limit, reverse)
        .map(|pairs| Reply::Array(pairs.into_iter().flat_map(|(k, v)| [Reply::Bulk(k), Reply::Bulk(v)]).collect())))
}

/// Redis glob matching: `*`, `?`, `[abc]`, `[^a-z]`, `\x`.
pub fn glob(p: &[u8], s: &[u8]) -> bool {
    let (mut pi, mut si) = (0, 0);
    let (mut star_p, mut star_s) = (None, 0);
    while si < s.len() {
        if pi < p.len() {
            match p[pi] {
                b'*' => {
                    star_p = Some(pi);
                    star_s = si;
                    pi += 1;
                    continue;
                }
                b'?' => {
                    pi += 1;
                    si += 1;
                    continue;
                }
                b'[' => {
                    if let Some((ok, next)) = class(p, pi, s[si]) {
                        if ok {
                            pi = next;
                            si += 1;
                            continue;
                        }
                    }
                }
                b'\\' if pi + 1 < p.len() && p[pi + 1] == s[si] => {
                    pi += 2;
                    si += 1;
                    continue;
                }
                c if c == s[si] => {
                    pi += 1;
                    si += 1;
                    continue;
                }
                _ => {}
            }
        }
        match star_p {
            Some(sp) => {
                pi = sp + 1;
                star_s += 1;
                si = star_s;
            }
            None => return false,
        }
    }
    p[pi..].iter().all(|&c| c == b'*')
}

fn class(p: &[u8], start: usize, c: u8) -> Option<(bool, usize)> {
    let mut i = start + 1;
    let neg = p.get(i) == Some(&b'^');
    if neg {
        i += 1;
    }
    let mut hit = false;
    while i < p.len() && p[i] != b']' {
        if p[i] == b'\\' && i + 1 < p.len() {
            hit |= p[i + 1] == c;
            i += 2;
        } else if i + 2 < p.len() && p[i + 1] == b'-' && p[i + 2] != b']' {
            let (lo, hi) = (p[i].min(p[i + 2]), p[i].max(p[i + 2]));
            hit |= (lo..=hi).contains(&c);
            i += 3;
        } else {
            hit |= p[i] == c;
            i += 1;
        }
    }
    (i < p.len()).then_some((hit != neg, i + 1))
}

#[cfg(test)]
mod tests {
    use super::glob;

    #[test]
    fn glob_matches_like_redis() {
        assert!(glob(b"*", b"anything"));
        assert!(glob(b"h?llo", b"hello"));
        assert!(glob(b"h*llo", b"heeeello"));
        assert!(glob(b"h[ae]llo", b"hallo"));
        assert!(!glob(b"h[ae]llo", b"hillo"));
        assert!(glob(b"h[^e]llo", b"hallo"));
        assert!(!glob(b"h[^e]llo", b"hello"));
        assert!(glob(b"h[a-b]llo", b"hbllo"));
        assert!(glob(b"user:*:name", b"user:42:name"));
        assert!(!glob(b"user:*:name", b"user:42:age"));
        assert!(glob(b"a\\*b", b"a*b"));
        assert!(!glob(b"a\\*b", b"axb"));
    }
}
