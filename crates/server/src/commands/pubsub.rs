//! Publish/subscribe commands: SUBSCRIBE, PSUBSCRIBE, UNSUBSCRIBE, PUNSUBSCRIBE, PUBLISH, PUBSUB
//! CHANNELS/NUMSUB/NUMPAT, and HALYARD.PUBLISH (a message another node of the cluster
//! received, for this node's subscribers). The registry and delivery are in `crate::pubsub`.
//!
//! In a cluster a PUBLISH reaches the subscribers of every node: the node it was sent to
//! delivers it to its own and passes it to every other node (`forward`), and answers with the
//! sum of the receivers.

use super::args::{lower, wrong_args};
use super::glob::glob;
use super::table::{Command, Keys};
use crate::pubsub::Subscriber;
use crate::resp::Reply;
use crate::state::{Session, Shared};

#[rustfmt::skip]
pub(super) static COMMANDS: &[Command] = &[
    Command { name: "subscribe", arity: -2, flags: 0, keys: Keys::None, handler: cmd_subscribe },
    Command { name: "psubscribe", arity: -2, flags: 0, keys: Keys::None, handler: cmd_psubscribe },
    Command { name: "unsubscribe", arity: -1, flags: 0, keys: Keys::None, handler: cmd_unsubscribe },
    Command { name: "punsubscribe", arity: -1, flags: 0, keys: Keys::None, handler: cmd_punsubscribe },
    Command { name: "publish", arity: 3, flags: 0, keys: Keys::Nodes, handler: cmd_publish },
    Command { name: "pubsub", arity: -2, flags: 0, keys: Keys::None, handler: cmd_pubsub },
    Command { name: "halyard.publish", arity: 3, flags: 0, keys: Keys::None, handler: cmd_publish },
];

/// The confirmation of one (un)subscription: kind, name (nil for none), count after it.
fn confirmation(kind: &str, name: Option<&[u8]>, count: usize) -> Reply {
    Reply::Push(vec![Reply::bulk(kind), name.map_or(Reply::Nil, Reply::bulk), Reply::Int(count as i64)])
}

fn subscribe(sh: &Shared, sess: &mut Session, names: &[&[u8]], pattern: bool) -> Reply {
    let id = sess.id;
    let subs = sess.subs.get_or_insert_with(Subscriber::new);
    let kind = if pattern { "psubscribe" } else { "subscribe" };
    let mut replies = Vec::with_capacity(names.len());
    for n in names {
        sh.pubsub.subscribe(id, subs, n, pattern);
        replies.push(confirmation(kind, Some(n), subs.count()));
    }
    Reply::Many(replies)
}

fn unsubscribe(sh: &Shared, sess: &mut Session, names: &[&[u8]], pattern: bool) -> Reply {
    let id = sess.id;
    let subs = sess.subs.get_or_insert_with(Subscriber::new);
    let kind = if pattern { "punsubscribe" } else { "unsubscribe" };
    let all: Vec<Vec<u8>> = if names.is_empty() {
        let set = if pattern { &subs.patterns } else { &subs.channels };
        set.iter().cloned().collect()
    } else {
        names.iter().map(|n| n.to_vec()).collect()
    };
    if all.is_empty() {
        return Reply::Many(vec![confirmation(kind, None, subs.count())]);
    }
    let mut replies = Vec::with_capacity(all.len());
    for n in &all {
        sh.pubsub.unsubscribe(id, subs, n, pattern);
        replies.push(confirmation(kind, Some(n), subs.count()));
    }
    Reply::Many(replies)
}

fn cmd_subscribe(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    subscribe(sh, sess, a.get(1..).unwrap_or_default(), false)
}

fn cmd_psubscribe(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    subscribe(sh, sess, a.get(1..).unwrap_or_default(), true)
}

fn cmd_unsubscribe(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    unsubscribe(sh, sess, a.get(1..).unwrap_or_default(), false)
}

fn cmd_punsubscribe(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    unsubscribe(sh, sess, a.get(1..).unwrap_or_default(), true)
}

/// PUBLISH channel message (on a single node, or the part of a cluster's PUBLISH for this
/// node's subscribers): the number of subscribers that received it.
fn cmd_publish(sh: &Shared, _: &mut Session, a: &[&[u8]]) -> Reply {
    let [_, channel, message] = a else { return wrong_args("publish") };
    Reply::Int(sh.pubsub.publish(channel, message, glob) as i64)
}

/// PUBSUB CHANNELS [pattern] | NUMSUB [channel...] | NUMPAT (this node's subscribers).
fn cmd_pubsub(sh: &Shared, _: &mut Session, a: &[&[u8]]) -> Reply {
    let sub = lower(a.get(1).copied().unwrap_or_default());
    match (sub.as_str(), a.get(2..).unwrap_or_default()) {
        ("channels", []) => Reply::Array(sh.pubsub.channels(|_| true).into_iter().map(Reply::Bulk).collect()),
        ("channels", [p]) => Reply::Array(sh.pubsub.channels(|c| glob(p, c)).into_iter().map(Reply::Bulk).collect()),
        ("numsub", chans) => {
            Reply::Array(chans.iter().flat_map(|c| [Reply::bulk(*c), Reply::Int(sh.pubsub.numsub(c) as i64)]).collect())
        }
        ("numpat", []) => Reply::Int(sh.pubsub.numpat() as i64),
        _ => super::args::bad_subcommand(
            "pubsub",
            a.get(1).copied().unwrap_or_default(),
            &["channels", "numsub", "numpat"],
        ),
    }
}

/// Commands a RESP2 connection may run while it has subscriptions.
pub(super) const WHILE_SUBSCRIBED: &[&str] =
    &["subscribe", "psubscribe", "unsubscribe", "punsubscribe", "ping", "quit", "reset", "ssubscribe", "sunsubscribe"];
