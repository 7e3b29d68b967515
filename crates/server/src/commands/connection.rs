//! Connection and server commands: PING, ECHO, HELLO, AUTH, QUIT, COMMAND, CLIENT,
//! INFO, TIME (CONFIG is in `config`).

use super::args::{int_arg, lower, syntax, wrong_args};
use crate::resp::Reply;
use crate::state::{Session, Shared};
use std::sync::atomic::Ordering::Relaxed;

pub(super) fn cmd_ping(_: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    if Shared::subscribed(sess) {
        // A RESP2 subscriber's replies are arrays, as its messages are.
        let msg = a.get(1).map_or(Reply::bulk(""), |m| Reply::bulk(*m));
        return Reply::Array(vec![Reply::bulk("pong"), msg]);
    }
    match a {
        [_] => Reply::Simple("PONG".into()),
        [_, msg] => Reply::bulk(*msg),
        _ => wrong_args("ping"),
    }
}

pub(super) fn cmd_echo(_: &Shared, _: &mut Session, a: &[&[u8]]) -> Reply {
    let [_, msg] = a else { return wrong_args("echo") };
    Reply::bulk(*msg)
}

pub(super) fn cmd_quit(_: &Shared, sess: &mut Session, _: &[&[u8]]) -> Reply {
    sess.quit = true;
    Reply::ok()
}

pub(super) fn cmd_info(sh: &Shared, _: &mut Session, a: &[&[u8]]) -> Reply {
    let sections: Vec<String> = a.get(1..).unwrap_or_default().iter().map(|s| lower(s)).collect();
    Reply::bulk(crate::info::info(sh, &sections))
}

pub(super) fn cmd_time(_: &Shared, _: &mut Session, _: &[&[u8]]) -> Reply {
    let d = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    Reply::Array(vec![Reply::bulk(d.as_secs().to_string()), Reply::bulk(d.subsec_micros().to_string())])
}

pub(super) fn cmd_client(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    let [_, sub, rest @ ..] = a else { return wrong_args("client") };
    match (lower(sub).as_str(), rest) {
        ("setname", [name]) => {
            if name.iter().any(|&b| b == b' ' || b == b'\n') {
                return Reply::err("ERR Client names cannot contain spaces, newlines or special characters.");
            }
            sess.name = Some(name.to_vec());
            Reply::ok()
        }
        ("getname", _) => Reply::opt(sess.name.clone()),
        ("id", _) => Reply::Int(sess.id as i64),
        ("unblock", [id, how @ ..]) if how.len() <= 1 => {
            let error = match how.first().map(|h| lower(h)) {
                None => false,
                Some(h) if h == "timeout" => false,
                Some(h) if h == "error" => true,
                Some(_) => return Reply::err("ERR CLIENT UNBLOCK reason should be TIMEOUT or ERROR"),
            };
            match super::args::int_arg(id) {
                Some(id) => Reply::Int(i64::from(u64::try_from(id).is_ok_and(|id| sh.waiters.release(id, error)))),
                None => super::args::not_int(),
            }
        }
        ("info", _) => Reply::bulk(sh.client_line(sess)),
        ("setinfo", _) => Reply::ok(),
        ("reply", [mode]) => match lower(mode).as_str() {
            "on" => {
                sess.replies = crate::state::Replies::On;
                Reply::ok()
            }
            // No reply to the CLIENT REPLY OFF or SKIP itself either.
            "off" => {
                sess.replies = crate::state::Replies::Off;
                Reply::ok()
            }
            "skip" => {
                sess.replies = crate::state::Replies::SkipNext;
                Reply::ok()
            }
            _ => syntax(),
        },
        _ => super::args::bad_subcommand(
            "client",
            sub,
            &["setname", "getname", "id", "info", "setinfo", "reply", "unblock"],
        ),
    }
}

pub(super) fn cmd_auth(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    let [_, creds @ ..] = a else { return wrong_args("auth") };
    auth(sh, sess, creds)
}

/// AUTH's work, for AUTH and HELLO ... AUTH: `creds` is `[password]` or `[user, password]`.
fn auth(sh: &Shared, sess: &mut Session, creds: &[&[u8]]) -> Reply {
    let (user, given) = match creds {
        [p] => (&b"default"[..], p),
        [u, p] => (*u, p),
        _ => return syntax(),
    };
    if creds.len() == 1 && sh.acl.default_needs_no_password() {
        return Reply::err("ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?");
    }
    let user = String::from_utf8_lossy(user).into_owned();
    if sh.acl.authenticate(&user, given) {
        sess.authed = true;
        sess.user = (user != "default").then_some(user);
        Reply::ok()
    } else {
        sh.metrics.auth_failures.fetch_add(1, Relaxed);
        Reply::err("WRONGPASS invalid username-password pair or user is disabled.")
    }
}

/// HELLO [protover [AUTH user pass] [SETNAME name]]. The protocol switch takes effect once
/// the reply is encoded (in the new protocol), and not at all when HELLO fails.
pub(super) fn cmd_hello(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    let [_, rest @ ..] = a else { return wrong_args("hello") };
    let opts = match rest.split_first() {
        None => rest,
        Some((proto, opts)) => {
            match int_arg(proto) {
                Some(p @ 2..=3) => sess.proto_next = Some(p as u8),
                _ => return Reply::err("NOPROTO unsupported protocol version"),
            }
            opts
        }
    };
    if let Err(e) = hello_options(sh, sess, opts) {
        sess.proto_next = None;
        return e;
    }
    if !sess.authed {
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

/// HELLO's AUTH and SETNAME options, in order; Err is the reply when one fails.
fn hello_options(sh: &Shared, sess: &mut Session, opts: &[&[u8]]) -> Result<(), Reply> {
    let mut it = opts.iter();
    while let Some(opt) = it.next() {
        match lower(opt).as_str() {
            "auth" => {
                let (Some(user), Some(pass)) = (it.next(), it.next()) else { return Err(syntax()) };
                if let e @ Reply::Error(_) = auth(sh, sess, &[*user, *pass]) {
                    return Err(e);
                }
            }
            "setname" => {
                let Some(name) = it.next() else { return Err(syntax()) };
                sess.name = Some(name.to_vec());
            }
            _ => return Err(syntax()),
        }
    }
    Ok(())
}
