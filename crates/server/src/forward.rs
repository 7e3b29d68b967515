//! Redis clients on any node of a cluster. A command whose keys lie in a region another node
//! leads is forwarded to that primary over the native protocol (a RESP request carrying the
//! region and its epoch) and the reply relayed as the primary encoded it; a multi-key read
//! spanning regions (MGET, EXISTS) is split by key; SCAN, KEYS, DBSIZE, HALYARD.RANGE and
//! HALYARD.DELRANGE walk every region in key order, each part confined to its region. A multi-key write spanning
//! regions is refused (CROSSSLOT) before anything runs.
//!
//! A forwarded request that fails because the region changed hands (`NotLeader`,
//! `StaleEpoch`, no primary yet) is tried again against the current map until
//! [`RETRY_FOR`]; a write whose outcome is unknown (the primary went away after it was sent)
//! closes the client's connection, as a write whose backups did not acknowledge does.

use crate::cluster::{ClusterNode, Target};
use crate::commands::{self, Command, WRITE};
use crate::keyspace::key;
use crate::resp::Reply;
use crate::state::{Session, Shared};
use halyard_client::Error as ClientError;
use halyard_proto::ErrorCode;
use std::io;
use std::time::{Duration, Instant};

/// How long a forwarded request keeps being retried while its region changes hands (a lease
/// TTL, the master's promotion, and margin).
pub const RETRY_FOR: Duration = Duration::from_secs(10);

/// The longest pause between two tries of a forwarded command.
const MAX_PAUSE: Duration = Duration::from_millis(500);

/// Runs a command `commands::plan` sent to other nodes, returning its reply encoded for the
/// session. An error means the outcome of a write is unknown: the caller closes the connection.
pub async fn run(sh: &Shared, sess: &mut Session, cmd: &Command, args: &[Vec<u8>]) -> io::Result<Vec<u8>> {
    let Some(c) = sh.cluster.get() else { return Ok(encode(sess.proto, Reply::err("ERR not a cluster node"))) };
    let a: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
    let rest = a.get(1..).unwrap_or_default();
    match cmd.name {
        "mget" => {
            let mut items = Vec::with_capacity(rest.len());
            for k in rest {
                let part = on_key(c, sh, sess, &[b"GET", k], true).await?;
                // As on one node: a key that holds another type reads as nil.
                items.push(if part.starts_with(b"-") { Reply::Nil } else { Reply::Encoded(part) });
            }
            Ok(encode(sess.proto, Reply::Array(items)))
        }
        "exists" => {
            let mut n = 0;
            for k in rest {
                let part = on_key(c, sh, sess, &[b"EXISTS", k], true).await?;
                let Some(x) = int_of(&part) else { return Ok(part) };
                n += x;
            }
            Ok(encode(sess.proto, Reply::Int(n)))
        }
        "dbsize" => {
            let mut n = 0;
            for t in c.targets() {
                let part = on_region(c, sh, sess, t.id, &a, true).await?;
                let Some(x) = int_of(&part) else { return Ok(part) };
                n += x;
            }
            Ok(encode(sess.proto, Reply::Int(n)))
        }
        "keys" => {
            let mut parts = Vec::new();
            for t in c.targets() {
                parts.push(on_region(c, sh, sess, t.id, &a, true).await?);
            }
            Ok(concat(parts))
        }
        "scan" => scan(c, sh, sess, rest).await,
        "halyard.range" => range(c, sh, sess, &a).await,
        "halyard.delrange" => delrange(c, sh, sess, &a).await,
        "publish" => publish(c, sh, sess, &a).await,
        "flushdb" | "flushall" => {
            for t in c.targets() {
                let part = on_region(c, sh, sess, t.id, &a, false).await?;
                if part.starts_with(b"-") {
                    return Ok(part);
                }
            }
            Ok(encode(sess.proto, Reply::ok()))
        }
        "randomkey" => {
            // A random region first, then the others in order: the first key one holds.
            let mut targets = c.targets();
            let turn = if targets.is_empty() { 0 } else { rand::random::<usize>() % targets.len() };
            targets.rotate_left(turn);
            for t in targets {
                let part = on_region(c, sh, sess, t.id, &a, true).await?;
                if !matches!(part.as_slice(), b"$-1\r\n" | b"_\r\n") {
                    return Ok(part);
                }
            }
            Ok(encode(sess.proto, Reply::Nil))
        }
        _ => {
            // The region of the command's first key, wherever its key spec puts it.
            let Some(t) = cmd.keys.of(&a).first().and_then(|u| c.target_for(&key(u))) else {
                return Ok(encode(sess.proto, Reply::err("CLUSTERDOWN no region of the cluster covers this key")));
            };
            on_region(c, sh, sess, t.id, &a, cmd.flags & WRITE == 0).await
        }
    }
}

/// Runs a command on the region of its first key; `read`: it changes nothing (tried again
/// whatever failed).
async fn on_key(c: &ClusterNode, sh: &Shared, sess: &mut Session, a: &[&[u8]], read: bool) -> io::Result<Vec<u8>> {
    let Some(t) = a.get(1).and_then(|u| c.target_for(&key(u))) else {
        return Ok(encode(sess.proto, Reply::err("CLUSTERDOWN no region of the cluster covers this key")));
    };
    on_region(c, sh, sess, t.id, a, read).await
}

/// Runs a command on region `id`: here when this node leads it, otherwise on its primary,
/// retrying while the region changes hands.
async fn on_region(
    c: &ClusterNode,
    sh: &Shared,
    sess: &mut Session,
    id: u32,
    a: &[&[u8]],
    read: bool,
) -> io::Result<Vec<u8>> {
    let deadline = Instant::now() + RETRY_FOR;
    let mut pauses = backon::BackoffBuilder::build(
        backon::ExponentialBuilder::default()
            .with_min_delay(Duration::from_millis(20))
            .with_max_delay(MAX_PAUSE)
            .without_max_times(),
    );
    loop {
        let Some(t) = c.target(id) else {
            return Ok(encode(sess.proto, Reply::err(format!("CLUSTERDOWN region {id} is not in the region map"))));
        };
        let res = if t.local {
            let (bytes, writes) = in_region(sh, &t, sess.proto, a);
            sess.writes.extend(writes);
            Ok(bytes)
        } else {
            c.forward(&t, sess.proto, a).await
        };
        let e = match res {
            Ok(bytes) => return Ok(bytes),
            Err(e) => e,
        };
        let not_run = certainly_not_run(&e);
        if (read || not_run) && Instant::now() < deadline {
            tokio::time::sleep(pauses.next().unwrap_or(MAX_PAUSE)).await;
            continue;
        }
        if read || not_run {
            let msg = format!("TRYAGAIN region {id} has no reachable primary ({e}); retry later");
            return Ok(encode(sess.proto, Reply::err(msg)));
        }
        return Err(io::Error::other(format!("forwarded write to region {id}: outcome unknown ({e})")));
    }
}

/// Whether a failed forward certainly did not run the command (it may be sent again).
fn certainly_not_run(e: &ClientError) -> bool {
    match e {
        ClientError::Server { code, .. } => matches!(
            code,
            ErrorCode::NotLeader
                | ErrorCode::StaleEpoch
                | ErrorCode::NoRegion
                | ErrorCode::ShuttingDown
                | ErrorCode::AuthRequired
                | ErrorCode::HandshakeRequired
        ),
        // Refused before it was sent (no connection could be opened, or it was too large).
        ClientError::Io(e) => e.kind() == io::ErrorKind::ConnectionRefused,
        ClientError::RequestTooLarge { .. } => true,
        _ => false,
    }
}

/// Executes a command on region `t`, which this node leads, confined to its keys: the reply
/// in RESP `proto` and the writes it made (their acknowledgements are waited for before the
/// reply goes out).
pub fn in_region(sh: &Shared, t: &Target, proto: u8, a: &[&[u8]]) -> (Vec<u8>, Vec<(u32, u64)>) {
    let mut s = sh.session(String::from("forwarded"));
    s.authed = true;
    s.proto = proto;
    s.span = Some(t.span.clone());
    s.region = Some(t.id);
    let reply = commands::execute(sh, &mut s, a);
    (encode(proto, reply), std::mem::take(&mut s.writes))
}

/// The receiving side of a forward: checks that this node leads `region` at `epoch`, then
/// runs the command there.
pub fn serve(sh: &Shared, region: u32, epoch: u64, proto: u8, a: &[&[u8]]) -> crate::native::RespOutcome {
    let Some(c) = sh.cluster.get() else {
        return Err((ErrorCode::UnknownOp, "not a cluster node: send Redis commands to its Redis port".into()));
    };
    let Some(t) = c.target(region) else {
        return Err((ErrorCode::NoRegion, format!("region {region} is not in this node's region map")));
    };
    if !t.local {
        return Err((ErrorCode::NotLeader, format!("region {region} is led by {} at {}", t.primary, t.native)));
    }
    crate::native::Router::check_epoch(c.as_ref(), region, epoch)?;
    Ok(in_region(sh, &t, proto, a))
}

/// Lets `node` run the Redis commands other nodes forward to it, on `sh`'s key space.
pub fn install(sh: &std::sync::Arc<Shared>, node: &ClusterNode) {
    // Weak: the node must not keep the server's state alive.
    let weak = std::sync::Arc::downgrade(sh);
    let _ = node.peers.exec.set(Box::new(move |region, epoch, proto, args| match weak.upgrade() {
        Some(sh) => serve(&sh, region, epoch, proto, args),
        None => Err((ErrorCode::ShuttingDown, "the server is shutting down".into())),
    }));
}

/// SCAN over the whole cluster: the cursor stands for the last key returned; each step asks
/// the region holding the next keys for up to COUNT of them (`HALYARD.KEYSAFTER`). With TYPE,
/// each key MATCH keeps is asked its type in its region.
async fn scan(c: &ClusterNode, sh: &Shared, sess: &mut Session, rest: &[&[u8]]) -> io::Result<Vec<u8>> {
    let [cursor, opts @ ..] = rest else { return Ok(encode(sess.proto, Reply::err("ERR syntax error"))) };
    let commands::ScanOptions { pattern, count, kind } = match commands::scan_options(opts) {
        Ok(o) => o,
        Err(r) => return Ok(encode(sess.proto, r)),
    };
    let cursor = std::str::from_utf8(cursor).ok().and_then(|s| s.parse::<u64>().ok());
    let mut after = match cursor {
        Some(0) => None,
        Some(n) => match sh.cursors.lock().get(n) {
            Some(k) => Some(k),
            None => return Ok(encode(sess.proto, Reply::err("ERR invalid cursor"))),
        },
        None => return Ok(encode(sess.proto, Reply::err("ERR invalid cursor"))),
    };
    let targets = c.targets();
    let first = after.as_ref().map_or(0, |a| targets.iter().position(|t| t.span.contains(&key(a))).unwrap_or(0));
    let mut keys: Vec<Vec<u8>> = Vec::new();
    let count_arg = count.to_string();
    for t in targets.iter().skip(first) {
        let mut a: Vec<&[u8]> = vec![b"HALYARD.KEYSAFTER", count_arg.as_bytes()];
        if let Some(k) = after.as_deref().filter(|k| t.span.contains(&key(k))) {
            a.push(k);
        }
        let part = on_region(c, sh, sess, t.id, &a, true).await?;
        let Some(found) = bulks_of(&part) else { return Ok(part) };
        let full = found.len() >= count;
        after = found.last().cloned().or(after);
        keys.extend(found);
        if full {
            let next = after.clone().map_or(0, |k| sh.cursors.lock().put(k));
            return scan_reply(c, sh, sess, next, keys, pattern, kind).await;
        }
    }
    scan_reply(c, sh, sess, 0, keys, pattern, kind).await
}

/// SCAN's reply: the keys MATCH `pattern` and TYPE `kind` keep. A region's error reply to a
/// TYPE asked is the reply.
async fn scan_reply(
    c: &ClusterNode,
    sh: &Shared,
    sess: &mut Session,
    next: u64,
    keys: Vec<Vec<u8>>,
    pattern: Option<&[u8]>,
    kind: Option<&[u8]>,
) -> io::Result<Vec<u8>> {
    let mut items = Vec::new();
    for k in keys {
        if pattern.is_some_and(|p| !commands::glob(p, &k)) {
            continue;
        }
        if let Some(kind) = kind {
            let part = on_key(c, sh, sess, &[b"TYPE", &k], true).await?;
            let Some(name) = part.strip_prefix(b"+").and_then(|n| n.strip_suffix(b"\r\n")) else { return Ok(part) };
            // A key gone since it was listed ("none") is left out whatever TYPE asked for.
            if name == b"none" || !name.eq_ignore_ascii_case(kind) {
                continue;
            }
        }
        items.push(Reply::Bulk(k));
    }
    Ok(encode(sess.proto, Reply::Array(vec![Reply::bulk(next.to_string()), Reply::Array(items)])))
}

/// HALYARD.RANGE over the regions the range meets, in order (reverse order with REV), until
/// LIMIT pairs.
async fn range(c: &ClusterNode, sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> io::Result<Vec<u8>> {
    let [_, start, end, opts @ ..] = a else { return Ok(encode(sess.proto, Reply::err("ERR syntax error"))) };
    let (limit, reverse) = match commands::range_options(opts) {
        Ok(o) => o,
        Err(reply) => return Ok(encode(sess.proto, reply)),
    };
    let lo = key(start).to_vec();
    let hi = (!end.is_empty()).then(|| key(end).to_vec());
    let mut targets: Vec<Target> = c
        .targets()
        .into_iter()
        .filter(|t| hi.as_ref().is_none_or(|h| t.span.start < *h) && t.span.end.as_ref().is_none_or(|e| *e > lo))
        .collect();
    if reverse {
        targets.reverse();
    }
    let (mut left, mut parts) = (limit, Vec::new());
    for t in targets {
        if left == 0 {
            break;
        }
        let n = left.to_string();
        let mut sub: Vec<&[u8]> = vec![b"HALYARD.RANGE", start, end, b"LIMIT", n.as_bytes()];
        if reverse {
            sub.push(b"REV");
        }
        let part = on_region(c, sh, sess, t.id, &sub, true).await?;
        let Some((items, _)) = array_of(&part) else { return Ok(part) };
        left = left.saturating_sub(items / 2);
        parts.push(part);
    }
    Ok(concat(parts))
}

/// HALYARD.DELRANGE on every region the range meets, in key order: atomic within each region,
/// not across them. The first refusal is the reply.
async fn delrange(c: &ClusterNode, sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> io::Result<Vec<u8>> {
    let [_, start, end] = a else { return Ok(encode(sess.proto, Reply::err("ERR syntax error"))) };
    let lo = key(start).to_vec();
    let hi = (!end.is_empty()).then(|| key(end).to_vec());
    let targets = c
        .targets()
        .into_iter()
        .filter(|t| hi.as_ref().is_none_or(|h| t.span.start < *h) && t.span.end.as_ref().is_none_or(|e| *e > lo));
    for t in targets {
        let part = on_region(c, sh, sess, t.id, a, false).await?;
        if part.starts_with(b"-") {
            return Ok(part);
        }
    }
    Ok(encode(sess.proto, Reply::ok()))
}

/// PUBLISH in a cluster: this node's subscribers, then every other node's (HALYARD.PUBLISH over
/// its Redis port, authenticated with this node's password); the reply is the sum of the
/// receivers. A node that cannot be reached within a second is left out of the count.
async fn publish(c: &ClusterNode, sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> io::Result<Vec<u8>> {
    let [_, channel, message] = a else { return Ok(encode(sess.proto, Reply::err("ERR syntax error"))) };
    let mut n = sh.pubsub.publish(channel, message, commands::glob) as i64;
    let args: [&[u8]; 3] = [b"HALYARD.PUBLISH", channel, message];
    for (_, addr) in c.resp_nodes().into_iter().skip(1) {
        let sent =
            tokio::time::timeout(Duration::from_secs(1), crate::resp::call(&addr, sh.requirepass.as_deref(), &args));
        if let Ok(Ok(reply)) = sent.await {
            n += int_of(&reply).unwrap_or(0);
        }
    }
    Ok(encode(sess.proto, Reply::Int(n)))
}

fn encode(proto: u8, r: Reply) -> Vec<u8> {
    let mut out = Vec::new();
    r.encode(proto, &mut out);
    out
}

/// The integer of a `:n` reply.
fn int_of(b: &[u8]) -> Option<i64> {
    let body = b.strip_prefix(b":")?.strip_suffix(b"\r\n")?;
    std::str::from_utf8(body).ok()?.parse().ok()
}

/// An array reply's length and the encoded items after its header.
fn array_of(b: &[u8]) -> Option<(usize, &[u8])> {
    let rest = b.strip_prefix(b"*")?;
    let eol = rest.windows(2).position(|w| w == b"\r\n")?;
    let n = std::str::from_utf8(rest.get(..eol)?).ok()?.parse().ok()?;
    Some((n, rest.get(eol + 2..)?))
}

/// The bulk strings of an array reply of bulk strings.
fn bulks_of(b: &[u8]) -> Option<Vec<Vec<u8>>> {
    let (n, mut body) = array_of(b)?;
    let mut out = Vec::with_capacity(n.min(body.len() / 4));
    for _ in 0..n {
        let rest = body.strip_prefix(b"$")?;
        let eol = rest.windows(2).position(|w| w == b"\r\n")?;
        let len: usize = std::str::from_utf8(rest.get(..eol)?).ok()?.parse().ok()?;
        // A peer's lengths are not trusted: no arithmetic on them may overflow.
        let end = (eol + 2).checked_add(len)?;
        out.push(rest.get(eol + 2..end)?.to_vec());
        body = rest.get(end.checked_add(2)?..)?;
    }
    Some(out)
}

/// Array replies joined into one; the first error reply among them instead, if any.
fn concat(parts: Vec<Vec<u8>>) -> Vec<u8> {
    let mut len = 0;
    let mut items = Vec::new();
    for p in &parts {
        match array_of(p) {
            Some((k, body)) => {
                len += k;
                items.extend_from_slice(body);
            }
            None => return p.clone(),
        }
    }
    // The protocol is the parts' own: the encoding names none.
    encode(2, Reply::EncodedItems { len, items })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_are_read_back() {
        assert_eq!(int_of(b":42\r\n"), Some(42));
        assert_eq!(int_of(b"-ERR x\r\n"), None);
        let arr = encode(2, Reply::Array(vec![Reply::bulk("a"), Reply::bulk(""), Reply::bulk("c\r\n")]));
        assert_eq!(bulks_of(&arr), Some(vec![b"a".to_vec(), b"".to_vec(), b"c\r\n".to_vec()]));
        let joined = concat(vec![arr.clone(), encode(2, Reply::Array(vec![])), arr]);
        assert_eq!(bulks_of(&joined).map(|v| v.len()), Some(6));
        let err = encode(2, Reply::err("ERR no"));
        assert_eq!(concat(vec![encode(2, Reply::Array(vec![])), err.clone()]), err);
        assert_eq!(bulks_of(b"*2\r\n$1\r\na\r\n"), None, "truncated");
        assert_eq!(bulks_of(b"*1\r\n$18446744073709551615\r\n"), None, "a length that would overflow");
    }

    /// A peer's reply is untrusted bytes: every prefix and every one-byte change of valid
    /// replies, and random bytes, read back without a panic.
    #[test]
    fn reading_replies_never_panics() {
        let valid = encode(3, Reply::Array(vec![Reply::bulk("key"), Reply::Int(-7), Reply::Nil, Reply::bulk("")]));
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let read = |b: &[u8]| {
            let _ = (int_of(b), array_of(b), bulks_of(b), concat(vec![b.to_vec(), valid.clone()]));
        };
        for cut in 0..=valid.len() {
            read(&valid[..cut]);
        }
        for i in 0..valid.len() {
            for v in [0u8, b'$', b'*', b'-', b':', b'\r', b'\n', b'9', 0xff] {
                let mut m = valid.clone();
                m[i] = v;
                read(&m);
            }
        }
        for _ in 0..2000 {
            let n = (next() % 40) as usize;
            let b: Vec<u8> = (0..n).map(|_| b"*$:-\r\n0123456789ab"[(next() % 18) as usize]).collect();
            read(&b);
        }
    }
}
