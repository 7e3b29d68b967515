//! ACL: SETUSER, DELUSER, GETUSER, LIST, USERS, WHOAMI, CAT, DRYRUN, GENPASS, LOG; the
//! command categories rules name (`+@read`, `-@dangerous`); and the check every command
//! passes (`permitted`). The users themselves are in `crate::acl`.

use super::args::{bad_subcommand, lower, wrong_args};
use super::table::{lookup, Command, Keys, READONLY, WRITE};
use crate::acl::{password_hash, Denied, User};
use crate::resp::Reply;
use crate::state::{Session, Shared};

#[rustfmt::skip]
pub(super) static COMMANDS: &[Command] = &[
    Command { name: "acl", arity: -2, flags: 0, keys: Keys::None, handler: cmd_acl },
];

/// The categories ACL CAT lists, in its order.
const CATEGORIES: &[&str] = &[
    "keyspace",
    "read",
    "write",
    "set",
    "sortedset",
    "list",
    "hash",
    "string",
    "bitmap",
    "hyperloglog",
    "geo",
    "stream",
    "pubsub",
    "admin",
    "fast",
    "slow",
    "blocking",
    "dangerous",
    "connection",
    "transaction",
    "scripting",
];

const KEYSPACE: &[&str] = &[
    "del",
    "unlink",
    "exists",
    "type",
    "expire",
    "pexpire",
    "expireat",
    "pexpireat",
    "ttl",
    "pttl",
    "expiretime",
    "pexpiretime",
    "persist",
    "scan",
    "keys",
    "rename",
    "renamenx",
    "move",
    "copy",
    "randomkey",
    "dbsize",
    "flushdb",
    "flushall",
    "dump",
    "restore",
    "object",
    "swapdb",
    "select",
];
const STRING: &[&str] = &[
    "get",
    "set",
    "setnx",
    "getset",
    "getdel",
    "mget",
    "mset",
    "msetnx",
    "strlen",
    "append",
    "getrange",
    "incr",
    "decr",
    "incrby",
    "decrby",
    "incrbyfloat",
    "setex",
    "psetex",
    "getex",
    "setrange",
    "lcs",
];
const FAST: &[&str] = &[
    "get",
    "set",
    "setnx",
    "getset",
    "getdel",
    "strlen",
    "incr",
    "decr",
    "incrby",
    "decrby",
    "exists",
    "type",
    "ttl",
    "pttl",
    "expire",
    "persist",
    "hget",
    "hset",
    "hsetnx",
    "hdel",
    "hexists",
    "hlen",
    "hincrby",
    "llen",
    "lpush",
    "rpush",
    "lpop",
    "rpop",
    "lindex",
    "sadd",
    "srem",
    "scard",
    "sismember",
    "zadd",
    "zrem",
    "zscore",
    "zcard",
    "zincrby",
    "xadd",
    "xlen",
    "ping",
    "echo",
    "auth",
    "hello",
    "select",
    "multi",
    "discard",
    "watch",
    "unwatch",
    "publish",
];
const DANGEROUS: &[&str] = &[
    "flushall",
    "flushdb",
    "keys",
    "swapdb",
    "config",
    "debug",
    "info",
    "acl",
    "halyard.delrange",
    "halyard.backup",
    "shutdown",
    "save",
    "bgsave",
    "lastsave",
];
const CONNECTION: &[&str] =
    &["ping", "echo", "hello", "auth", "quit", "client", "select", "command", "readonly", "readwrite"];
const BLOCKING: &[&str] =
    &["blpop", "brpop", "blmove", "brpoplpush", "blmpop", "bzpopmin", "bzpopmax", "bzmpop", "xread", "xreadgroup"];

/// Whether command `c` is in `category`.
fn in_category(c: &Command, category: &str) -> bool {
    let n = c.name;
    let bitmap = ["setbit", "getbit", "bitcount", "bitpos", "bitop", "bitfield"].contains(&n);
    match category {
        "read" => c.flags & READONLY != 0,
        "write" => c.flags & WRITE != 0,
        "keyspace" => KEYSPACE.contains(&n),
        "string" => STRING.contains(&n),
        "bitmap" => bitmap,
        "hash" => n.starts_with('h') && !["hello"].contains(&n) && !n.starts_with("halyard"),
        "list" => {
            (n.starts_with('l') && n != "lcs")
                || (n.starts_with('r') && n.contains("push") || n.starts_with("rpop"))
                || ["blpop", "brpop", "blmove", "brpoplpush", "blmpop", "sort", "sort_ro"].contains(&n)
        }
        "set" => {
            n.starts_with('s')
                && ![
                    "set",
                    "setnx",
                    "setex",
                    "setrange",
                    "setbit",
                    "select",
                    "scan",
                    "swapdb",
                    "strlen",
                    "subscribe",
                    "script",
                ]
                .contains(&n)
        }
        "sortedset" => n.starts_with('z') || n.starts_with("bz"),
        "stream" => n.starts_with('x'),
        "pubsub" => n.contains("subscribe") || n.contains("publish") || n == "pubsub",
        "admin" => {
            ["config", "debug", "acl", "halyard.backup", "cluster", "client", "shutdown", "save", "bgsave", "lastsave"]
                .contains(&n)
        }
        "fast" => FAST.contains(&n),
        "slow" => !FAST.contains(&n),
        "blocking" => BLOCKING.contains(&n),
        "dangerous" => DANGEROUS.contains(&n),
        "connection" => CONNECTION.contains(&n),
        "transaction" => ["multi", "exec", "discard", "watch", "unwatch"].contains(&n),
        "scripting" => {
            ["eval", "evalsha", "eval_ro", "evalsha_ro", "script", "function", "fcall", "fcall_ro"].contains(&n)
        }
        _ => false,
    }
}

fn commands_in(category: &str) -> impl Iterator<Item = &'static Command> + '_ {
    super::table::all().filter(move |c| in_category(c, category))
}

/// Applies one ACL SETUSER rule to `u`; Err is why it is refused.
fn apply(u: &mut User, rule: &[u8]) -> Result<(), String> {
    let text = String::from_utf8_lossy(rule).into_owned();
    let bad = |why: &str| format!("Error in ACL SETUSER modifier '{text}': {why}");
    match lower(rule).as_str() {
        "on" => u.enabled = true,
        "off" => u.enabled = false,
        "nopass" => {
            u.nopass = true;
            u.passwords.clear();
        }
        "resetpass" => {
            u.nopass = false;
            u.passwords.clear();
        }
        "allkeys" => all_keys(u),
        "resetkeys" => {
            u.all_keys = false;
            u.key_patterns.clear();
        }
        "allchannels" => {
            u.all_channels = true;
            u.channel_patterns.clear();
        }
        "resetchannels" => {
            u.all_channels = false;
            u.channel_patterns.clear();
        }
        "allcommands" | "+@all" => command_rule(u, true, None),
        "nocommands" | "-@all" => command_rule(u, false, None),
        "reset" => *u = User::new(),
        _ => return apply_prefixed(u, &text).map_err(|why| bad(&why)),
    }
    Ok(())
}

/// The rules that start with a sign: `>pass`, `<pass`, `#hash`, `!hash`, `~keys`, `&channels`,
/// `+cmd`, `-cmd`, `+@category`, `-@category`.
fn apply_prefixed(u: &mut User, text: &str) -> Result<(), String> {
    let (sign, rest) = text.split_at(text.char_indices().nth(1).map_or(text.len(), |(i, _)| i));
    match sign {
        ">" => {
            u.passwords.insert(password_hash(rest.as_bytes()));
            u.nopass = false;
        }
        "<" => {
            u.passwords.remove(&password_hash(rest.as_bytes()));
        }
        "#" if rest.len() == 64 && rest.bytes().all(|b| b.is_ascii_hexdigit()) => {
            u.passwords.insert(rest.to_ascii_lowercase());
            u.nopass = false;
        }
        "!" => {
            u.passwords.remove(&rest.to_ascii_lowercase());
        }
        "~" if rest == "*" => all_keys(u),
        "~" => {
            if !u.all_keys {
                u.key_patterns.push(rest.as_bytes().to_vec());
            }
        }
        "%" => {
            let pattern = rest.split_once('~').map(|p| p.1).ok_or("Syntax error")?;
            return apply_prefixed(u, &format!("~{pattern}"));
        }
        "&" if rest == "*" => {
            u.all_channels = true;
            u.channel_patterns.clear();
        }
        "&" => {
            if !u.all_channels {
                u.channel_patterns.push(rest.as_bytes().to_vec());
            }
        }
        "+" | "-" => return command_sign(u, sign == "+", rest),
        _ => return Err("Syntax error".into()),
    }
    Ok(())
}

fn all_keys(u: &mut User) {
    u.all_keys = true;
    u.key_patterns.clear();
}

fn command_sign(u: &mut User, allow: bool, rest: &str) -> Result<(), String> {
    if let Some(cat) = rest.strip_prefix('@') {
        if cat == "all" {
            command_rule(u, allow, None);
        } else if CATEGORIES.contains(&cat) {
            command_rule(u, allow, Some(Target::Category(cat)));
        } else {
            return Err("Unknown command or category name in ACL".into());
        }
        return Ok(());
    }
    // A subcommand rule (`+config|get`) is taken for the whole command.
    let name = rest.split('|').next().unwrap_or_default();
    let Some(c) = lookup(name.as_bytes()) else { return Err("Unknown command or category name in ACL".into()) };
    command_rule(u, allow, Some(Target::Command(c.name)));
    Ok(())
}

enum Target<'a> {
    Category(&'a str),
    Command(&'static str),
}

/// Allows or forbids every command (`target` None), a category's or one command.
fn command_rule(u: &mut User, allow: bool, target: Option<Target<'_>>) {
    let names: Vec<&'static str> = match &target {
        None => {
            u.all_commands = allow;
            u.allowed.clear();
            u.command_rules = if allow { "+@all".into() } else { "-@all".into() };
            return;
        }
        Some(Target::Category(cat)) => commands_in(cat).map(|c| c.name).collect(),
        Some(Target::Command(n)) => vec![n],
    };
    if u.all_commands && !allow {
        u.all_commands = false;
        u.allowed = super::table::all().map(|c| c.name.to_string()).collect();
    }
    if !u.all_commands {
        for n in names {
            if allow {
                u.allowed.insert(n.to_string());
            } else {
                u.allowed.remove(n);
            }
        }
    }
    let rule = match target {
        Some(Target::Category(cat)) => format!("{}@{cat}", if allow { '+' } else { '-' }),
        Some(Target::Command(n)) => format!("{}{n}", if allow { '+' } else { '-' }),
        None => String::new(),
    };
    u.command_rules = format!("{} {rule}", u.command_rules);
}

/// The channels a pub/sub command names.
fn channels<'a, 'b>(cmd: &Command, args: &'b [&'a [u8]]) -> &'b [&'a [u8]] {
    match cmd.name {
        "publish" | "halyard.publish" => args.get(1..2).unwrap_or_default(),
        "subscribe" | "psubscribe" => args.get(1..).unwrap_or_default(),
        _ => &[],
    }
}

/// Whether the session's user may run `cmd` with `args`: the NOPERM reply if not.
pub(super) fn permitted(sh: &Shared, sess: &Session, cmd: &Command, args: &[&[u8]]) -> Result<(), Reply> {
    let keys = match cmd.keys {
        Keys::Whole | Keys::Region | Keys::Nodes => smallvec::SmallVec::new(),
        k => k.of(args),
    };
    let denied = sh.acl.check(sess.user.as_deref(), cmd.name, &keys, channels(cmd, args), super::glob::glob);
    let text = match (denied, sess.scripted) {
        (Ok(()), _) => return Ok(()),
        // A script's command is refused in other words (Redis' own).
        (Err(Denied::Command), true) => "ERR The user executing the script can't run this command or subcommand".into(),
        (Err(Denied::Key), true) => {
            "ERR The user executing the script can't access at least one of the keys mentioned in the command".into()
        }
        (Err(Denied::Channel), true) => {
            "ERR The user executing the script can't publish to the channel mentioned in the command".into()
        }
        (Err(Denied::Command), false) => {
            format!("NOPERM this user has no permissions to run the '{}' command", full_name(cmd, args))
        }
        (Err(Denied::Key), false) => {
            "NOPERM this user has no permissions to access one of the keys used as arguments".into()
        }
        (Err(Denied::Channel), false) => {
            "NOPERM this user has no permissions to access one of the channels used as arguments".into()
        }
    };
    Err(Reply::err(text))
}

/// The name Redis gives a command in ACL errors: `container|subcommand` for the commands
/// that have subcommands.
fn full_name(cmd: &Command, args: &[&[u8]]) -> String {
    const CONTAINERS: &[&str] = &[
        "acl", "config", "client", "object", "script", "function", "xgroup", "xinfo", "memory", "pubsub", "command",
        "cluster",
    ];
    match args.get(1) {
        Some(sub) if CONTAINERS.contains(&cmd.name) => format!("{}|{}", cmd.name, lower(sub)),
        _ => cmd.name.to_string(),
    }
}

/// `redis.acl_check_cmd`: whether the script's user may run `args`; None for no such command.
pub(super) fn script_may_run(sh: &Shared, sess: &Session, args: &[&[u8]]) -> Option<bool> {
    let c = lookup(args.first()?)?;
    Some(c.arity_ok(args.len()) && permitted(sh, sess, c, args).is_ok())
}

/// ACL LIST's line for a user.
fn describe(name: &str, u: &User) -> String {
    let mut s = format!("user {name} {}", if u.enabled { "on" } else { "off" });
    if u.nopass {
        s.push_str(" nopass");
    }
    for p in &u.passwords {
        s.push_str(&format!(" #{p}"));
    }
    s.push(' ');
    s.push_str(&keys_text(u));
    s.push(' ');
    s.push_str(&channels_text(u));
    s.push(' ');
    s.push_str(&u.command_rules);
    s
}

fn keys_text(u: &User) -> String {
    if u.all_keys {
        return "~*".into();
    }
    u.key_patterns.iter().map(|p| format!("~{}", String::from_utf8_lossy(p))).collect::<Vec<_>>().join(" ")
}

fn channels_text(u: &User) -> String {
    if u.all_channels {
        return "&*".into();
    }
    let c: Vec<String> = u.channel_patterns.iter().map(|p| format!("&{}", String::from_utf8_lossy(p))).collect();
    if c.is_empty() {
        "resetchannels".into()
    } else {
        c.join(" ")
    }
}

fn getuser(u: &User) -> Reply {
    let mut flags = vec![Reply::bulk(if u.enabled { "on" } else { "off" })];
    if u.nopass {
        flags.push(Reply::bulk("nopass"));
    }
    let pair = |k: &str, v: Reply| [Reply::bulk(k), v];
    let items: Vec<Reply> = [
        pair("flags", Reply::Array(flags)),
        pair("passwords", Reply::Array(u.passwords.iter().map(|p| Reply::bulk(p.as_str())).collect())),
        pair("commands", Reply::bulk(u.command_rules.as_str())),
        pair("keys", Reply::bulk(keys_text(u))),
        pair(
            "channels",
            Reply::bulk(if u.all_channels { "&*".into() } else { channels_text(u).replace("resetchannels", "") }),
        ),
        pair("selectors", Reply::Array(Vec::new())),
    ]
    .into_iter()
    .flatten()
    .collect();
    Reply::Array(items)
}

fn cmd_acl(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    let [_, sub, rest @ ..] = a else { return wrong_args("acl") };
    let name = |n: &[u8]| String::from_utf8_lossy(n).into_owned();
    match (lower(sub).as_str(), rest) {
        ("setuser", [user, rules @ ..]) => {
            let user = name(user);
            let mut u = sh.acl.get(&user).map_or_else(User::new, |u| (*u).clone());
            for r in rules {
                if let Err(e) = apply(&mut u, r) {
                    return Reply::err(format!("ERR {e}"));
                }
            }
            sh.acl.put(&user, u);
            Reply::ok()
        }
        ("deluser", users @ [_, ..]) => {
            let users: Vec<String> = users.iter().map(|u| name(u)).collect();
            if users.iter().any(|u| u == "default") {
                return Reply::err("ERR The 'default' user cannot be removed");
            }
            Reply::Int(sh.acl.delete(&users) as i64)
        }
        ("getuser", [user]) => sh.acl.get(&name(user)).map_or(Reply::Nil, |u| getuser(&u)),
        ("list", []) => Reply::Array(sh.acl.all().iter().map(|(n, u)| Reply::bulk(describe(n, u))).collect()),
        ("users", []) => Reply::Array(sh.acl.names().into_iter().map(Reply::bulk).collect()),
        ("whoami", []) => Reply::bulk(sess.user.clone().unwrap_or_else(|| "default".into())),
        ("cat", []) => Reply::Array(CATEGORIES.iter().map(|c| Reply::bulk(*c)).collect()),
        ("cat", [cat]) if CATEGORIES.contains(&lower(cat).as_str()) => {
            Reply::Array(commands_in(&lower(cat)).map(|c| Reply::bulk(c.name)).collect())
        }
        ("cat", [cat]) => Reply::err(format!("ERR Unknown category '{}'", name(cat))),
        ("dryrun", [user, args @ ..]) if !args.is_empty() => dryrun(sh, &name(user), args),
        ("genpass", []) => Reply::bulk((0..32).map(|_| format!("{:02x}", rand::random::<u8>())).collect::<String>()),
        ("log", [] | [_]) => Reply::Array(Vec::new()),
        ("save" | "load", []) => Reply::err("ERR This Redis instance is not configured to use an ACL file. You may want to specify users via the ACL SETUSER command and then issue a CONFIG REWRITE (assuming you have a Redis configuration file set) in order to store users in the Redis configuration."),
        _ => bad_subcommand("acl", sub, &["setuser", "deluser", "getuser", "list", "users", "whoami", "cat", "dryrun", "genpass", "log", "save", "load"]),
    }
}

fn dryrun(sh: &Shared, user: &str, args: &[&[u8]]) -> Reply {
    if sh.acl.get(user).is_none() {
        return Reply::err(format!("ERR User '{user}' not found"));
    }
    let Some(c) = args.first().and_then(|n| lookup(n)) else {
        return Reply::err(format!(
            "ERR Command '{}' not found",
            String::from_utf8_lossy(args.first().copied().unwrap_or_default())
        ));
    };
    let as_user = Some(user).filter(|u| *u != "default");
    let keys = c.keys.of(args);
    if let Err(Denied::Command) = sh.acl.check(as_user, c.name, &[], &[], super::glob::glob) {
        return Reply::bulk(format!("This user has no permissions to run the '{}' command", full_name(c, args)));
    }
    for key in &keys {
        // The first key refused is named, as Redis does.
        if let Err(Denied::Key) = sh.acl.check(as_user, c.name, &[key], &[], super::glob::glob) {
            return Reply::bulk(format!(
                "This user has no permissions to access the '{}' key",
                String::from_utf8_lossy(key)
            ));
        }
    }
    match sh.acl.check(as_user, c.name, &keys, channels(c, args), super::glob::glob) {
        Ok(()) => Reply::ok(),
        Err(Denied::Command) => {
            Reply::bulk(format!("This user has no permissions to run the '{}' command", full_name(c, args)))
        }
        Err(Denied::Key) => Reply::bulk("This user has no permissions to access one of the keys used as arguments"),
        Err(Denied::Channel) => {
            Reply::bulk("This user has no permissions to access one of the channels used as arguments")
        }
    }
}
