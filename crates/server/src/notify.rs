//! Keyspace notifications (Redis' `notify-keyspace-events`): the event classes a server
//! publishes, what each write command's event is called, and the keys waiting to expire whose
//! `expired` event is still due. Publishing is the command dispatcher's (`commands::dispatch`)
//! and the server's (`lib.rs`, for expiries); this module holds no server state.
//!
//! A write command publishes its event for each of its keys it changed: on
//! `__keyspace@<db>__:<key>` with the event as the message (class `K`) and on
//! `__keyevent@<db>__:<event>` with the key (class `E`), when the command's class is enabled.
//! A key changed when the command's reply says it did something (not an error, nil, 0 or an
//! empty array) or its record (value or expiry) differs afterwards. Notifications are local to
//! the node, as in Redis Cluster.

use parking_lot::Mutex;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::atomic::{AtomicU32, Ordering::Relaxed};

pub const KEYSPACE: u32 = 1 << 0;
pub const KEYEVENT: u32 = 1 << 1;
pub const GENERIC: u32 = 1 << 2;
pub const STRING: u32 = 1 << 3;
pub const LIST: u32 = 1 << 4;
pub const SET: u32 = 1 << 5;
pub const HASH: u32 = 1 << 6;
pub const ZSET: u32 = 1 << 7;
pub const EXPIRED: u32 = 1 << 8;
pub const EVICTED: u32 = 1 << 9;
pub const STREAM: u32 = 1 << 10;
pub const KEY_MISS: u32 = 1 << 11;
pub const MODULE: u32 = 1 << 12;
pub const NEW: u32 = 1 << 13;
/// `A`: every class but key misses and new keys.
pub const ALL: u32 = GENERIC | STRING | LIST | SET | HASH | ZSET | EXPIRED | EVICTED | STREAM | MODULE;

/// The class letters in the order Redis gives them back.
const CLASSES: [(char, u32); 11] = [
    ('g', GENERIC),
    ('$', STRING),
    ('l', LIST),
    ('s', SET),
    ('h', HASH),
    ('z', ZSET),
    ('x', EXPIRED),
    ('e', EVICTED),
    ('t', STREAM),
    ('d', MODULE),
    ('n', NEW),
];

/// The flags a `notify-keyspace-events` value names; None for a letter it does not know.
pub fn parse(v: &str) -> Option<u32> {
    v.chars().try_fold(0, |f, c| {
        let bit = match c {
            'A' => ALL,
            'K' => KEYSPACE,
            'E' => KEYEVENT,
            'm' => KEY_MISS,
            c => CLASSES.iter().find(|(l, _)| *l == c)?.1,
        };
        Some(f | bit)
    })
}

/// `flags` written as Redis gives them back: `A` or the classes, then `K`, `E`, `m`.
pub fn canonical(flags: u32) -> String {
    let mut s = String::new();
    if flags & ALL == ALL {
        s.push('A');
    } else {
        s.extend(CLASSES.iter().filter(|(_, b)| flags & b != 0).map(|(c, _)| *c));
    }
    s.extend(
        [('K', KEYSPACE), ('E', KEYEVENT), ('m', KEY_MISS)].iter().filter(|(_, b)| flags & b != 0).map(|(c, _)| *c),
    );
    s
}

/// A server's notification settings and the expiries it watches for `expired` events.
#[derive(Default)]
pub struct Notifier {
    flags: AtomicU32,
    expiring: Mutex<Expiring>,
}

/// Keys given an expiry while `expired` events were on: by time, and each key's expiry now
/// (a key deleted or given another expiry since is not announced at the old time).
#[derive(Default)]
struct Expiring {
    by_time: BinaryHeap<Reverse<(u64, u8, Vec<u8>)>>,
    now: HashMap<(u8, Vec<u8>), u64>,
}

/// At most this many expiries are watched; past it the newest are not (their `expired`
/// events are lost, as Redis loses events to a client that cannot keep up).
const MAX_WATCHED: usize = 1 << 20;

impl Notifier {
    pub fn flags(&self) -> u32 {
        self.flags.load(Relaxed)
    }

    pub fn set_flags(&self, f: u32) {
        self.flags.store(f, Relaxed);
        if f & EXPIRED == 0 {
            *self.expiring.lock() = Expiring::default();
        }
    }

    /// Whether events of `class` are published (as keyspace or keyevent messages).
    pub fn wants(&self, class: u32) -> bool {
        let f = self.flags();
        f & (KEYSPACE | KEYEVENT) != 0 && f & class != 0
    }

    /// Watches `key` of `db`, which expires at `at` (ms), for its `expired` event.
    pub fn watch_expiry(&self, at: u64, db: u8, key: &[u8]) {
        let mut e = self.expiring.lock();
        if e.by_time.len() < MAX_WATCHED {
            e.by_time.push(Reverse((at, db, key.to_vec())));
            e.now.insert((db, key.to_vec()), at);
        }
    }

    /// `key` of `db` no longer expires when it was watched to (deleted, persisted).
    pub fn forget_expiry(&self, db: u8, key: &[u8]) {
        let mut e = self.expiring.lock();
        if !e.now.is_empty() {
            e.now.remove(&(db, key.to_vec()));
        }
    }

    /// The watched keys whose expiry came by `now`, removed from the watch.
    pub fn due(&self, now: u64) -> Vec<(u8, Vec<u8>)> {
        let mut e = self.expiring.lock();
        let mut out = Vec::new();
        while e.by_time.peek().is_some_and(|Reverse((at, _, _))| *at <= now) {
            let Some(Reverse((at, db, key))) = e.by_time.pop() else { break };
            let k = (db, key);
            if e.now.get(&k) == Some(&at) {
                e.now.remove(&k);
                out.push(k);
            }
        }
        out
    }
}

/// The (channel, message) pairs that announce `event` of `class` on `key` of database `db`
/// under `flags`.
pub fn messages(flags: u32, db: u8, class: u32, event: &str, key: &[u8]) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut out = Vec::new();
    if flags & class == 0 {
        return out;
    }
    if flags & KEYSPACE != 0 {
        out.push(([format!("__keyspace@{db}__:").as_bytes(), key].concat(), event.as_bytes().to_vec()));
    }
    if flags & KEYEVENT != 0 {
        out.push((format!("__keyevent@{db}__:{event}").into_bytes(), key.to_vec()));
    }
    out
}

/// The class and event name of write command `cmd` on its `i`th key (None: it announces
/// nothing, e.g. FLUSHDB).
pub fn event_of(cmd: &str, i: usize) -> Option<(u32, &'static str)> {
    let two = |a, b| if i == 0 { a } else { b };
    Some(match cmd {
        "set" | "setex" | "psetex" | "setnx" | "getset" | "mset" | "msetnx" | "bitop" => (STRING, "set"),
        "incr" | "decr" | "incrby" | "decrby" => (STRING, "incrby"),
        "incrbyfloat" => (STRING, "incrbyfloat"),
        "append" => (STRING, "append"),
        "setrange" => (STRING, "setrange"),
        "setbit" => (STRING, "setbit"),
        "getdel" | "del" | "unlink" => (GENERIC, "del"),
        "getex" | "expire" | "pexpire" | "expireat" | "pexpireat" => (GENERIC, "expire"),
        "persist" => (GENERIC, "persist"),
        "rename" | "renamenx" => (GENERIC, two("rename_from", "rename_to")),
        "copy" => (GENERIC, two("copy_from", "copy_to")),
        "move" => (GENERIC, "move_from"),
        "sort" => (LIST, "sortstore"),
        "lpush" | "lpushx" => (LIST, "lpush"),
        "rpush" | "rpushx" => (LIST, "rpush"),
        "lpop" | "blpop" => (LIST, "lpop"),
        "rpop" | "brpop" => (LIST, "rpop"),
        "linsert" => (LIST, "linsert"),
        "lset" => (LIST, "lset"),
        "lrem" => (LIST, "lrem"),
        "ltrim" => (LIST, "ltrim"),
        "lmove" | "blmove" => (LIST, two("lmove_from", "lmove_to")),
        "rpoplpush" | "brpoplpush" => (LIST, two("rpop", "lpush")),
        "lmpop" | "blmpop" => (LIST, "lmpop"),
        "sadd" => (SET, "sadd"),
        "srem" => (SET, "srem"),
        "spop" => (SET, "spop"),
        "smove" => (SET, two("srem", "sadd")),
        "sinterstore" => (SET, "sinterstore"),
        "sunionstore" => (SET, "sunionstore"),
        "sdiffstore" => (SET, "sdiffstore"),
        "hset" | "hmset" | "hsetnx" => (HASH, "hset"),
        "hdel" => (HASH, "hdel"),
        "hincrby" => (HASH, "hincrby"),
        "hincrbyfloat" => (HASH, "hincrbyfloat"),
        "zadd" => (ZSET, "zadd"),
        "zincrby" => (ZSET, "zincr"),
        "zrem" => (ZSET, "zrem"),
        "zpopmin" | "bzpopmin" => (ZSET, "zpopmin"),
        "zpopmax" | "bzpopmax" => (ZSET, "zpopmax"),
        "zmpop" | "bzmpop" => (ZSET, "zmpop"),
        "zremrangebyscore" => (ZSET, "zremrangebyscore"),
        "zremrangebyrank" => (ZSET, "zremrangebyrank"),
        "zremrangebylex" => (ZSET, "zremrangebylex"),
        "zunionstore" => (ZSET, "zunionstore"),
        "zinterstore" => (ZSET, "zinterstore"),
        "zdiffstore" => (ZSET, "zdiffstore"),
        "zrangestore" => (ZSET, "zrangestore"),
        "xadd" => (STREAM, "xadd"),
        "xdel" => (STREAM, "xdel"),
        "xtrim" => (STREAM, "xtrim"),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_read_back_as_redis_writes_them() {
        for (given, back) in
            [("KA", "AK"), ("gKE", "gKE"), ("$lshzxeKE", "$lshzxeKE"), ("nKEm$", "$nKEm"), ("An", "A"), ("", "")]
        {
            assert_eq!(canonical(parse(given).unwrap()), back, "{given}");
        }
        assert_eq!(parse("Kq"), None);
    }

    #[test]
    fn messages_follow_the_classes() {
        let f = parse("Kl").unwrap();
        assert_eq!(messages(f, 3, LIST, "lpush", b"k"), vec![(b"__keyspace@3__:k".to_vec(), b"lpush".to_vec())]);
        assert!(messages(f, 3, STRING, "set", b"k").is_empty());
        let both = messages(parse("KEA").unwrap(), 0, STRING, "set", b"k");
        assert_eq!(both.get(1), Some(&(b"__keyevent@0__:set".to_vec(), b"k".to_vec())));
    }

    #[test]
    fn expiries_come_due_in_order() {
        let n = Notifier::default();
        n.watch_expiry(20, 0, b"b");
        n.watch_expiry(10, 1, b"a");
        n.watch_expiry(15, 0, b"c");
        n.forget_expiry(0, b"c");
        n.watch_expiry(12, 0, b"d");
        n.watch_expiry(30, 0, b"d");
        assert!(n.due(5).is_empty());
        assert_eq!(n.due(25), vec![(1, b"a".to_vec()), (0, b"b".to_vec())]);
        assert_eq!(n.due(30), vec![(0, b"d".to_vec())]);
    }
}
