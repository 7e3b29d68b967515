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
//! BUSY; SCRIPT KILL stops it unless it already wrote. The Lua state itself is in `crate::lua`.

use super::args::{int_arg, lower, wrong_args};
use super::dispatch::{plan, run_ungated};
use super::table::{lookup, Command, Keys, ATOMIC, WRITE};
use crate::lua::{error_text, from_lua, new_state, sha1_hex, status_table, to_lua};
use crate::resp::{fmt_double, Reply};
use crate::state::{Session, Shared};
use mlua::{Lua, Value};
use std::cell::RefCell;
use std::sync::atomic::Ordering::Relaxed;

#[rustfmt::skip]
pub(super) static COMMANDS: &[Command] = &[
    Command { name: "eval", arity: -3, flags: WRITE | ATOMIC, keys: Keys::CountAt { at: 2, dest: false }, handler: cmd_eval },
    Command { name: "evalsha", arity: -3, flags: WRITE | ATOMIC, keys: Keys::CountAt { at: 2, dest: false }, handler: cmd_evalsha },
    Command { name: "script", arity: -2, flags: ATOMIC, keys: Keys::None, handler: cmd_script },
];

/// Commands a script may not call.
const NOT_IN_SCRIPTS: &[&str] =
    &["multi", "exec", "discard", "watch", "unwatch", "eval", "evalsha", "script", "quit", "hello", "auth"];

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
    // Inside EXEC the gate is held already (a script queued in a transaction).
    let _exclusive = (!sess.atomic).then(|| sh.gate.write());
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
    let was_atomic = std::mem::replace(&mut sess.atomic, true);
    // Off the runtime's worker: the connections queued on it (a SCRIPT KILL among them) are
    // served meanwhile.
    let mut result = None;
    (crate::native::off_worker_hook().0)(&mut || result = Some(execute(lua, sh, sess, sha, body, keys, argv)));
    sess.atomic = was_atomic;
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
fn cmd_script(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    let s = &sh.scripts;
    match (lower(a.get(1).copied().unwrap_or_default()).as_str(), a.get(2..).unwrap_or_default()) {
        ("load", [body]) => {
            let _exclusive = (!sess.atomic).then(|| sh.gate.write());
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
            let _exclusive = (!sess.atomic).then(|| sh.gate.write());
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
