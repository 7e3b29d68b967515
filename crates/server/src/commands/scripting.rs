//! Scripting: EVAL, EVALSHA, SCRIPT LOAD/EXISTS/FLUSH/KILL, with Redis' Lua 5.1 semantics.
//!
//! One Lua 5.1 state (mlua, built from source) runs every script, holding the server's command
//! gate exclusively (`Shared::gate`), so a script runs alone, as in Redis, and its writes reach
//! the engine (and the backups) as the effects of the commands it called. The state is
//! sandboxed: the base, table, string and math libraries only (no `io`, `os`, `debug`,
//! `package`, `dofile`, `loadfile`), and globals can be neither created nor read when absent.
//! `redis.call` and `redis.pcall` run a command through the same table, checks and cluster
//! routing as a client's (a key another node leads is an error: a script runs where its
//! declared keys are). A script past `LUA_TIME_LIMIT` makes other clients' commands answer
//! BUSY; SCRIPT KILL stops it unless it already wrote.

use super::args::{int_arg, lower, wrong_args};
use super::{lookup, plan, run_ungated, Command, Keys, ATOMIC, WRITE};
use crate::resp::{fmt_double, Reply};
use crate::state::{Session, Shared};
use mlua::{Lua, LuaOptions, StdLib, Value};
use parking_lot::Mutex;
use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[rustfmt::skip]
pub(super) static COMMANDS: &[Command] = &[
    Command { name: "eval", arity: -3, flags: WRITE | ATOMIC, keys: Keys::CountAt { at: 2, dest: false }, handler: cmd_eval },
    Command { name: "evalsha", arity: -3, flags: WRITE | ATOMIC, keys: Keys::CountAt { at: 2, dest: false }, handler: cmd_evalsha },
    Command { name: "script", arity: -2, flags: ATOMIC, keys: Keys::None, handler: cmd_script },
];

/// How long a script runs before other clients' commands answer BUSY (Redis' `lua-time-limit`).
pub const LUA_TIME_LIMIT: Duration = Duration::from_secs(5);

/// Commands a script may not call.
const NOT_IN_SCRIPTS: &[&str] =
    &["multi", "exec", "discard", "watch", "unwatch", "eval", "evalsha", "script", "quit", "hello", "auth"];

/// The scripts of a server: their bodies by SHA1, the Lua state, and the running script.
#[derive(Default)]
pub struct Scripts {
    bodies: Mutex<HashMap<String, Vec<u8>>>,
    lua: Mutex<Option<Lua>>,
    /// When the running script started (ms since the server started; 0: none runs).
    started: AtomicU64,
    /// The running script called a write command.
    wrote: AtomicBool,
    /// SCRIPT KILL asked the running script to stop.
    killed: Arc<AtomicBool>,
    /// The clock `started` counts from.
    epoch: std::sync::OnceLock<Instant>,
}

impl Scripts {
    fn now(&self) -> u64 {
        self.epoch.get_or_init(Instant::now).elapsed().as_millis() as u64 + 1
    }

    /// Whether a script has run past the time limit (other commands then answer BUSY).
    pub fn busy(&self) -> bool {
        let s = self.started.load(Relaxed);
        s != 0 && self.now().saturating_sub(s) >= LUA_TIME_LIMIT.as_millis() as u64
    }
}

/// The sandboxed state, with the `redis` library and global protection.
fn new_state(killed: Arc<AtomicBool>) -> mlua::Result<Lua> {
    let lua = Lua::new_with(StdLib::TABLE | StdLib::STRING | StdLib::MATH, LuaOptions::default())?;
    let g = lua.globals();
    for unsafe_fn in ["dofile", "loadfile", "load"] {
        g.raw_set(unsafe_fn, Value::Nil)?;
    }
    let redis = lua.create_table()?;
    redis.set("sha1hex", lua.create_function(|_, s: mlua::LuaString| Ok(sha1_hex(&s.as_bytes())))?)?;
    redis.set("error_reply", lua.create_function(|lua, s: String| status_table(lua, "err", s))?)?;
    redis.set("status_reply", lua.create_function(|lua, s: String| status_table(lua, "ok", s))?)?;
    redis.set("log", lua.create_function(|_, _: mlua::MultiValue| Ok(()))?)?;
    redis.set("setresp", lua.create_function(|_, _: mlua::MultiValue| Ok(()))?)?;
    redis.set("set_repl", lua.create_function(|_, _: mlua::MultiValue| Ok(()))?)?;
    redis.set("replicate_commands", lua.create_function(|_, _: mlua::MultiValue| Ok(true))?)?;
    for (i, name) in ["LOG_DEBUG", "LOG_VERBOSE", "LOG_NOTICE", "LOG_WARNING"].iter().enumerate() {
        redis.set(*name, i)?;
    }
    for (i, name) in ["REPL_NONE", "REPL_SLAVE", "REPL_AOF", "REPL_ALL"].iter().enumerate() {
        redis.set(*name, [0, 1, 2, 3].get(i).copied().unwrap_or(0))?;
    }
    g.raw_set("redis", redis)?;
    lua.load(
        r#"setmetatable(_G, {
            __index = function(_, n) error("Script attempted to access nonexistent global variable '" .. tostring(n) .. "'", 2) end,
            __newindex = function(_, n) error("Script attempted to create global variable '" .. tostring(n) .. "'", 2) end,
        })"#,
    )
    .exec()?;
    lua.set_hook(mlua::HookTriggers::new().every_nth_instruction(10_000), move |_, _| {
        if killed.load(Relaxed) {
            return Err(mlua::Error::runtime("ERR Script killed by user with SCRIPT KILL..."));
        }
        Ok(mlua::VmState::Continue)
    })?;
    Ok(lua)
}

fn status_table(lua: &Lua, field: &str, s: String) -> mlua::Result<mlua::Table> {
    let t = lua.create_table()?;
    t.set(field, s)?;
    Ok(t)
}

fn sha1_hex(b: &[u8]) -> String {
    sha1_smol::Sha1::from(b).digest().to_string()
}

/// The text of a Lua error as a Redis error reply's: the innermost cause, with an error code.
fn error_text(e: &mlua::Error) -> String {
    let text = match e {
        mlua::Error::CallbackError { cause, .. } => return error_text(cause),
        mlua::Error::RuntimeError(s) => s.clone(),
        mlua::Error::SyntaxError { message, .. } => format!("ERR Error compiling script: {message}"),
        mlua::Error::ExternalError(x) => x.to_string(),
        other => other.to_string(),
    };
    let coded =
        text.split_whitespace().next().is_some_and(|w| w.len() > 1 && w.bytes().all(|b| b.is_ascii_uppercase()));
    if coded {
        text
    } else {
        format!("ERR {text}")
    }
}

/// A Redis reply as Lua sees it (RESP2 conversions).
fn to_lua(lua: &Lua, r: Reply) -> mlua::Result<Value> {
    Ok(match r {
        Reply::Int(n) => Value::Integer(n),
        Reply::Bulk(b) => Value::String(lua.create_string(&b)?),
        Reply::Nil | Reply::NilArray | Reply::Encoded(_) | Reply::EncodedItems { .. } => Value::Boolean(false),
        Reply::Simple(s) => Value::Table(status_table(lua, "ok", s)?),
        Reply::Error(e) => Value::Table(status_table(lua, "err", e)?),
        Reply::Double(d) => Value::String(lua.create_string(fmt_double(d))?),
        Reply::Array(items) | Reply::Set(items) | Reply::Push(items) => Value::Table(
            lua.create_sequence_from(items.into_iter().map(|i| to_lua(lua, i)).collect::<mlua::Result<Vec<_>>>()?)?,
        ),
        Reply::Map(pairs) => {
            let flat: Vec<Reply> = pairs.into_iter().flat_map(|(k, v)| [k, v]).collect();
            to_lua(lua, Reply::Array(flat))?
        }
    })
}

/// A script's result as a Redis reply (Redis' Lua-to-RESP rules).
fn from_lua(v: Value) -> Reply {
    match v {
        Value::Nil | Value::Boolean(false) => Reply::Nil,
        Value::Boolean(true) => Reply::Int(1),
        Value::Integer(n) => Reply::Int(n),
        Value::Number(f) => Reply::Int(f as i64),
        Value::String(s) => Reply::Bulk(s.as_bytes().to_vec()),
        Value::Table(t) => {
            if let Ok(Value::String(e)) = t.raw_get::<Value>("err") {
                return Reply::Error(String::from_utf8_lossy(&e.as_bytes()).into_owned());
            }
            if let Ok(Value::String(s)) = t.raw_get::<Value>("ok") {
                return Reply::Simple(String::from_utf8_lossy(&s.as_bytes()).into_owned());
            }
            let mut items = Vec::new();
            for i in 1.. {
                match t.raw_get::<Value>(i) {
                    Ok(Value::Nil) | Err(_) => break,
                    Ok(v) => items.push(from_lua(v)),
                }
            }
            Reply::Array(items)
        }
        _ => Reply::Nil,
    }
}

/// An error `redis.call` raises: the command's error reply, as the script's error.
#[derive(Debug)]
struct CallError(String);

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for CallError {}

/// `redis.call` (`raise`) and `redis.pcall`: runs one command for the script.
fn call(lua: &Lua, sh: &Shared, sess: &mut Session, args: mlua::MultiValue, raise: bool) -> mlua::Result<Value> {
    let mut owned: Vec<Vec<u8>> = Vec::with_capacity(args.len());
    for a in args {
        match a {
            Value::String(s) => owned.push(s.as_bytes().to_vec()),
            Value::Integer(n) => owned.push(n.to_string().into_bytes()),
            Value::Number(f) => owned.push(fmt_double(f).into_bytes()),
            _ => return fail(lua, "ERR Lua redis lib command arguments must be strings or integers", raise),
        }
    }
    let refs: Vec<&[u8]> = owned.iter().map(Vec::as_slice).collect();
    let Some(name) = refs.first() else {
        return fail(lua, "ERR Please specify at least one argument for this redis lib call", raise);
    };
    if lookup(name).is_some_and(|c| NOT_IN_SCRIPTS.contains(&c.name)) {
        return fail(lua, "ERR This Redis command is not allowed from script", raise);
    }
    let reply = match plan(sh, sess, &refs) {
        Ok(p) if p.remote => Reply::err("ERR a script may only touch keys of a region this node leads"),
        Ok(p) => {
            if p.writes() {
                sh.scripts.wrote.store(true, Relaxed);
            }
            run_ungated(sh, sess, &refs, &p)
        }
        Err(e) => e,
    };
    match reply {
        Reply::Error(e) => fail(lua, &e, raise),
        other => to_lua(lua, other),
    }
}

fn fail(lua: &Lua, msg: &str, raise: bool) -> mlua::Result<Value> {
    if raise {
        return Err(mlua::Error::external(CallError(msg.to_string())));
    }
    Ok(Value::Table(status_table(lua, "err", msg.to_string())?))
}

/// The compiled function of script `sha` (compiled from `body` on first use).
fn function(lua: &Lua, sha: &str, body: &[u8]) -> mlua::Result<mlua::Function> {
    let name = format!("f_{sha}");
    if let Ok(f) = lua.named_registry_value::<mlua::Function>(&name) {
        return Ok(f);
    }
    let f = lua.load(body).set_name("@user_script").into_function()?;
    lua.set_named_registry_value(&name, &f)?;
    Ok(f)
}

/// Runs script `sha` (`body`) with KEYS and ARGV.
fn run_script(sh: &Shared, sess: &mut Session, sha: &str, body: &[u8], keys: &[&[u8]], argv: &[&[u8]]) -> Reply {
    let _exclusive = sh.gate.write();
    let mut guard = sh.scripts.lua.lock();
    if guard.is_none() {
        match new_state(sh.scripts.killed.clone()) {
            Ok(l) => *guard = Some(l),
            Err(e) => return Reply::err(format!("ERR the Lua state could not start: {e}")),
        }
    }
    let Some(lua) = guard.as_ref() else { return Reply::err("ERR no Lua state") };
    sh.scripts.killed.store(false, Relaxed);
    sh.scripts.wrote.store(false, Relaxed);
    sh.scripts.started.store(sh.scripts.now(), Relaxed);
    sess.atomic = true;
    // Off the runtime's worker: the connections queued on it (a SCRIPT KILL among them) are
    // served meanwhile.
    let mut result = None;
    (crate::native::off_worker_hook().0)(&mut || result = Some(execute(lua, sh, sess, sha, body, keys, argv)));
    sess.atomic = false;
    let result = result.unwrap_or_else(|| Err(mlua::Error::runtime("ERR the script did not run")));
    sh.scripts.started.store(0, Relaxed);
    match result {
        Ok(v) => from_lua(v),
        Err(e) => Reply::Error(error_text(&e)),
    }
}

fn execute(
    lua: &Lua,
    sh: &Shared,
    sess: &mut Session,
    sha: &str,
    body: &[u8],
    keys: &[&[u8]],
    argv: &[&[u8]],
) -> mlua::Result<Value> {
    let f = function(lua, sha, body)?;
    let g = lua.globals();
    let strings = |xs: &[&[u8]]| -> mlua::Result<mlua::Table> {
        lua.create_sequence_from(xs.iter().map(|x| lua.create_string(x)).collect::<mlua::Result<Vec<_>>>()?)
    };
    g.raw_set("KEYS", strings(keys)?)?;
    g.raw_set("ARGV", strings(argv)?)?;
    let redis: mlua::Table = g.raw_get("redis")?;
    let sess = RefCell::new(sess);
    lua.scope(|scope| {
        let c = scope.create_function_mut(|lua, a: mlua::MultiValue| call(lua, sh, &mut sess.borrow_mut(), a, true))?;
        let p =
            scope.create_function_mut(|lua, a: mlua::MultiValue| call(lua, sh, &mut sess.borrow_mut(), a, false))?;
        redis.raw_set("call", c)?;
        redis.raw_set("pcall", p)?;
        let out = f.call::<Value>(());
        redis.raw_set("call", Value::Nil)?;
        redis.raw_set("pcall", Value::Nil)?;
        out
    })
}

/// A script's KEYS and ARGV.
type KeysAndArgs<'a, 'b> = (&'b [&'a [u8]], &'b [&'a [u8]]);

/// EVAL's and EVALSHA's `numkeys key... arg...`, or the error reply for a bad count.
fn split_keys<'a, 'b>(rest: &'b [&'a [u8]]) -> Result<KeysAndArgs<'a, 'b>, Reply> {
    let [n, rest @ ..] = rest else { return Err(wrong_args("eval")) };
    let n = int_arg(n).ok_or_else(|| Reply::err("ERR value is not an integer or out of range"))?;
    let n = usize::try_from(n).map_err(|_| Reply::err("ERR Number of keys can't be negative"))?;
    if n > rest.len() {
        return Err(Reply::err("ERR Number of keys can't be greater than number of args"));
    }
    Ok(rest.split_at(n))
}

fn cmd_eval(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    let [_, body, rest @ ..] = a else { return wrong_args("eval") };
    let (keys, argv) = match split_keys(rest) {
        Ok(x) => x,
        Err(r) => return r,
    };
    let sha = sha1_hex(body);
    sh.scripts.bodies.lock().insert(sha.clone(), body.to_vec());
    run_script(sh, sess, &sha, body, keys, argv)
}

fn cmd_evalsha(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    let [_, sha, rest @ ..] = a else { return wrong_args("evalsha") };
    let (keys, argv) = match split_keys(rest) {
        Ok(x) => x,
        Err(r) => return r,
    };
    let sha = String::from_utf8_lossy(sha).to_ascii_lowercase();
    let Some(body) = sh.scripts.bodies.lock().get(&sha).cloned() else {
        return Reply::err("NOSCRIPT No matching script. Please use EVAL.");
    };
    run_script(sh, sess, &sha, &body, keys, argv)
}

/// SCRIPT LOAD body | EXISTS sha... | FLUSH [ASYNC|SYNC] | KILL.
fn cmd_script(sh: &Shared, _: &mut Session, a: &[&[u8]]) -> Reply {
    let s = &sh.scripts;
    match (lower(a.get(1).copied().unwrap_or_default()).as_str(), a.get(2..).unwrap_or_default()) {
        ("load", [body]) => {
            let _exclusive = sh.gate.write();
            if let Err(e) = Lua::new().load(*body).set_name("@user_script").into_function() {
                return Reply::Error(error_text(&e));
            }
            let sha = sha1_hex(body);
            s.bodies.lock().insert(sha.clone(), body.to_vec());
            Reply::bulk(sha)
        }
        ("exists", shas) if !shas.is_empty() => {
            let bodies = s.bodies.lock();
            let has = |x: &&[u8]| bodies.contains_key(&String::from_utf8_lossy(x).to_ascii_lowercase());
            Reply::Array(shas.iter().map(|x| Reply::Int(i64::from(has(x)))).collect())
        }
        ("flush", []) | ("flush", [_]) => {
            let _exclusive = sh.gate.write();
            s.bodies.lock().clear();
            *s.lua.lock() = None;
            Reply::ok()
        }
        ("kill", []) if s.started.load(Relaxed) == 0 => Reply::err("NOTBUSY No scripts in execution right now."),
        ("kill", []) if s.wrote.load(Relaxed) => Reply::err("UNKILLABLE Sorry the script already executed write commands against the dataset. You can either wait the script termination or kill the server in a hard way using the SHUTDOWN NOSAVE command."),
        ("kill", []) => {
            s.killed.store(true, Relaxed);
            Reply::ok()
        }
        (sub, _) => Reply::err(format!(
            "ERR unknown subcommand or wrong number of arguments for '{sub}'. Try SCRIPT HELP."
        )),
    }
}
