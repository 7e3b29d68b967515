//! What the command handlers share: argument parsing and the common error replies.

use crate::keyspace::KsError;
use crate::resp::Reply;

pub(super) fn wrong_args(name: &str) -> Reply {
    Reply::err(format!("ERR wrong number of arguments for '{name}' command"))
}

/// The reply to a subcommand of `cmd` that is not one of `known` (named as the client spelled
/// it), or one of them with the wrong number of arguments, in Redis 7's words.
pub(super) fn bad_subcommand(cmd: &str, sub: &[u8], known: &[&str]) -> Reply {
    let lowered = lower(sub);
    if known.contains(&lowered.as_str()) {
        return wrong_args(&format!("{cmd}|{lowered}"));
    }
    let shown: String = String::from_utf8_lossy(sub).chars().take(128).collect();
    Reply::err(format!("ERR unknown subcommand '{shown}'. Try {} HELP.", cmd.to_ascii_uppercase()))
}

pub(super) fn syntax() -> Reply {
    Reply::err("ERR syntax error")
}

pub(super) fn not_int() -> Reply {
    Reply::err("ERR value is not an integer or out of range")
}

pub(super) fn ks(r: Result<Reply, KsError>) -> Reply {
    r.unwrap_or_else(|e| Reply::err(e.to_string()))
}

pub(super) fn int_arg(a: &[u8]) -> Option<i64> {
    std::str::from_utf8(a).ok()?.parse().ok()
}

pub(super) fn lower(a: &[u8]) -> String {
    String::from_utf8_lossy(a).to_ascii_lowercase()
}

/// `k1 v1 k2 v2 ...` as pairs; None for an odd count.
pub(super) fn pairs<'a>(args: &[&'a [u8]]) -> Option<Vec<(&'a [u8], &'a [u8])>> {
    if !args.len().is_multiple_of(2) {
        return None;
    }
    Some(args.chunks_exact(2).filter_map(|p| Some((*p.first()?, *p.get(1)?))).collect())
}
