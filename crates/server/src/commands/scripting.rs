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
//! BUSY; SCRIPT KILL stops it unless it already wrote. Redis 7's functions (FUNCTION LOAD of a
//! `#!lua name=...` library that calls `redis.register_function`, FCALL) run the same way; they
//! live as long as the process (Redis keeps them in its RDB file; Halyard has none). The Lua state itself is in `crate::lua`.

use super::args::{int_arg, lower, wrong_args};
use super::dispatch::{plan, run_ungated};
use super::table::{lookup, Command, Keys, ATOMIC, READONLY, WRITE};
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
    Command { name: "eval_ro", arity: -3, flags: READONLY | ATOMIC, keys: Keys::CountAt { at: 2, dest: false }, handler: cmd_eval },
    Command { name: "evalsha_ro", arity: -3, flags: READONLY | ATOMIC, keys: Keys::CountAt { at: 2, dest: false }, handler: cmd_evalsha },
    Command { name: "script", arity: -2, flags: ATOMIC, keys: Keys::None, handler: cmd_script },
    Command { name: "function", arity: -2, flags: ATOMIC, keys: Keys::None, handler: cmd_function },
    Command { name: "fcall", arity: -3, flags: WRITE | ATOMIC, keys: Keys::CountAt { at: 2, dest: false }, handler: cmd_fcall },
    Command { name: "fcall_ro", arity: -3, flags: READONLY | ATOMIC, keys: Keys::CountAt { at: 2, dest: false }, handler: cmd_fcall },
];

/// The registry table of the loaded libraries' functions, by name.
const FUNCTIONS: &str = "halyard_functions";

/// Commands a script may not call.
const NOT_IN_SCRIPTS: &[&str] = &[
    "multi",
    "exec",
    "discard",
    "watch",
    "unwatch",
    "eval",
    "evalsha",
    "eval_ro",
    "evalsha_ro",
    "script",
    "quit",
    "hello",
    "auth",
    "blpop",
    "brpop",
    "brpoplpush",
    "blmove",
    "blmpop",
    "bzpopmin",
    "bzpopmax",
    "bzmpop",
    "cluster",
    "subscribe",
    "psubscribe",
    "unsubscribe",
    "punsubscribe",
    "client",
];

#[derive(Debug)]
/// An error `redis.call` raises: its text and the script's line that called.
struct CallError(String, Option<usize>);

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
    match lookup(name) {
        None => return fail(lua, "ERR Unknown Redis command called from script", raise),
        Some(c) if !c.arity_ok(refs.len()) => {
            return fail(lua, "ERR Wrong number of args calling Redis command from script", raise)
        }
        Some(_) => {}
    }
    if lookup(name).is_some_and(|c| NOT_IN_SCRIPTS.contains(&c.name)) {
        return fail(lua, "ERR This Redis command is not allowed from script", raise);
    }
    let reply = match plan(sh, sess, &refs) {
        Ok(p) if p.remote => Reply::err("ERR a script may only touch keys of a region this node leads"),
        Ok(p) => {
            if p.writes() && sess.script_read_only {
                return fail(lua, "ERR Write commands are not allowed from read-only scripts.", raise);
            }
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
        let line = lua.inspect_stack(1, |d| d.current_line()).flatten();
        return Err(mlua::Error::external(CallError(msg.to_string(), line)));
    }
    Ok(Value::Table(status_table(lua, "err", msg.to_string())?))
}

/// The compiled function of script `sha` (compiled from `body` on first use).
fn function(lua: &Lua, sha: &str, body: &[u8]) -> mlua::Result<mlua::Function> {
    let name = format!("f_{sha}");
    if let Ok(f) = lua.named_registry_value::<mlua::Function>(&name) {
        return Ok(f);
    }
    let env: mlua::Table = lua.named_registry_value(crate::lua::ENV)?;
    let f = lua.load(body).set_name("@user_script").set_environment(env).into_function()?;
    lua.set_named_registry_value(&name, &f)?;
    Ok(f)
}

/// What runs: a script (EVAL, EVALSHA) or a library's function (FCALL).
#[derive(Clone, Copy)]
enum Code<'a> {
    Script { sha: &'a str, body: &'a [u8] },
    Function(&'a str),
}

/// The Lua state, started on first use.
fn state<'a>(sh: &Shared, guard: &'a mut Option<Lua>) -> Result<&'a Lua, Reply> {
    if guard.is_none() {
        match new_state(sh.scripts.killed.clone()) {
            Ok(l) => *guard = Some(l),
            Err(e) => return Err(Reply::err(format!("ERR the Lua state could not start: {e}"))),
        }
    }
    guard.as_ref().ok_or_else(|| Reply::err("ERR no Lua state"))
}

/// Runs `code` with KEYS and ARGV.
fn run_script(sh: &Shared, sess: &mut Session, code: Code<'_>, keys: &[&[u8]], argv: &[&[u8]], ro: bool) -> Reply {
    // Inside EXEC the gate is held already (a script queued in a transaction).
    let _exclusive = (!sess.atomic).then(|| sh.gate.write());
    let mut guard = sh.scripts.lua.lock();
    let lua = match state(sh, &mut guard) {
        Ok(l) => l,
        Err(r) => return r,
    };
    sh.scripts.killed.store(false, Relaxed);
    if let Err(e) = crate::lua::arm(lua, sh.scripts.killed.clone()) {
        return Reply::err(format!("ERR {e}"));
    }
    sh.scripts.wrote.store(false, Relaxed);
    sh.scripts.started.store(sh.scripts.now(), Relaxed);
    let was_atomic = std::mem::replace(&mut sess.atomic, true);
    let was_scripted = std::mem::replace(&mut sess.scripted, true);
    sess.script_read_only = ro;
    // A script's SELECT does not change its caller's database.
    let db = sess.db;
    // Off the runtime's worker: the connections queued on it (a SCRIPT KILL among them) are
    // served meanwhile.
    let mut result = None;
    (crate::native::off_worker_hook().0)(&mut || result = Some(execute(lua, sh, sess, code, keys, argv)));
    sess.atomic = was_atomic;
    sess.scripted = was_scripted;
    sess.script_read_only = false;
    sess.db = db;
    let result = result.unwrap_or_else(|| Err(mlua::Error::runtime("ERR the script did not run")));
    sh.scripts.started.store(0, Relaxed);
    // A killed script leaves its per-line hook: FUNCTION LOAD runs code in this state too.
    sh.scripts.killed.store(false, Relaxed);
    if let Err(e) = crate::lua::arm(lua, sh.scripts.killed.clone()) {
        tracing::warn!("re-arming the script hook: {e}");
    }
    match result {
        Ok(v) => from_lua(v),
        Err(e) => Reply::Error(raised(&e, code)),
    }
}

/// The reply to an error raised out of a script, as Redis 7 words it: the error, then which
/// script and line raised it.
fn raised(e: &mlua::Error, code: Code<'_>) -> String {
    let text = error_text(e);
    if matches!(e, mlua::Error::SyntaxError { .. }) {
        return text;
    }
    let text = text.split("\nstack traceback:").next().unwrap_or_default().trim_end().to_string();
    let (name, source) = match code {
        Code::Script { sha, .. } => (sha, "@user_script"),
        Code::Function(f) => (f, "@user_function"),
    };
    // The line redis.call was called from, or the one Lua names in a runtime error.
    let line = call_error(e).and_then(|c| c.1).or_else(|| {
        let rest = text.split_once(&source[1..])?.1.strip_prefix(':')?;
        rest.split(':').next()?.parse().ok()
    });
    match line {
        Some(line) => format!("{text} script: {name}, on {source}:{line}."),
        None => text,
    }
}

fn call_error(e: &mlua::Error) -> Option<&CallError> {
    match e {
        mlua::Error::CallbackError { cause, .. } => call_error(cause),
        mlua::Error::ExternalError(x) => x.downcast_ref::<CallError>(),
        _ => None,
    }
}

fn execute(
    lua: &Lua,
    sh: &Shared,
    sess: &mut Session,
    code: Code<'_>,
    keys: &[&[u8]],
    argv: &[&[u8]],
) -> mlua::Result<Value> {
    let g = lua.globals();
    let strings = |xs: &[&[u8]]| -> mlua::Result<mlua::Table> {
        lua.create_sequence_from(xs.iter().map(|x| lua.create_string(x)).collect::<mlua::Result<Vec<_>>>()?)
    };
    let (k, a) = (strings(keys)?, strings(argv)?);
    g.raw_set("KEYS", k.clone())?;
    g.raw_set("ARGV", a.clone())?;
    // A function gets KEYS and ARGV as its arguments; a script reads the globals.
    let (f, args) = match code {
        Code::Script { sha, body } => (function(lua, sha, body)?, mlua::MultiValue::new()),
        Code::Function(name) => {
            let fns: mlua::Table = lua.named_registry_value(FUNCTIONS)?;
            let f: mlua::Function = fns.raw_get(name)?;
            (f, mlua::MultiValue::from_iter([Value::Table(k), Value::Table(a)]))
        }
    };
    let redis: mlua::Table = lua.named_registry_value(crate::lua::REDIS)?;
    let sess = RefCell::new(sess);
    lua.scope(|scope| {
        let c = scope.create_function_mut(|lua, a: mlua::MultiValue| call(lua, sh, &mut sess.borrow_mut(), a, true))?;
        let p =
            scope.create_function_mut(|lua, a: mlua::MultiValue| call(lua, sh, &mut sess.borrow_mut(), a, false))?;
        let check = scope.create_function(|lua, a: mlua::MultiValue| {
            let owned: Vec<Vec<u8>> =
                a.iter().map(|v| v.to_string().map(String::into_bytes)).collect::<mlua::Result<_>>()?;
            let refs: Vec<&[u8]> = owned.iter().map(Vec::as_slice).collect();
            super::acl::script_may_run(sh, &sess.borrow(), &refs).ok_or_else(|| {
                let line = lua.inspect_stack(1, |d| d.current_line()).flatten();
                mlua::Error::external(CallError("ERR Invalid command passed to redis.acl_check_cmd()".into(), line))
            })
        })?;
        redis.raw_set("call", c)?;
        redis.raw_set("pcall", p)?;
        redis.raw_set("acl_check_cmd", check)?;
        let out = f.call::<Value>(args);
        redis.raw_set("call", Value::Nil)?;
        redis.raw_set("pcall", Value::Nil)?;
        redis.raw_set("acl_check_cmd", Value::Nil)?;
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
    let ro = a.first().is_some_and(|c| lower(c) == "eval_ro");
    run_with_shebang(sh, sess, &sha, body, keys, argv, ro)
}

/// A script's `#!lua flags=...` first line: None without one, else whether it declared
/// `no-writes`; the reply Redis gives to a bad one.
fn shebang(body: &[u8]) -> Result<Option<bool>, Reply> {
    let Some(line) = body.strip_prefix(b"#!") else { return Ok(None) };
    let line = String::from_utf8_lossy(line.split(|&b| b == b'\n').next().unwrap_or_default()).into_owned();
    let mut parts = line.split(' ').filter(|p| !p.is_empty());
    if parts.next() != Some("lua") {
        return Err(Reply::err(format!("ERR Unexpected engine in script shebang: #!{line}")));
    }
    let mut no_writes = false;
    for opt in parts {
        let Some(flags) = opt.strip_prefix("flags=") else {
            return Err(Reply::err(format!("ERR Unknown lua shebang option: {opt}")));
        };
        for f in flags.split(',').filter(|f| !f.is_empty()) {
            match f {
                "no-writes" => no_writes = true,
                "allow-oom" | "allow-stale" | "no-cluster" | "allow-cross-slot-keys" => {}
                _ => return Err(Reply::err(format!("ERR Unexpected flag in script shebang: {f}"))),
            }
        }
    }
    Ok(Some(no_writes))
}

/// The code Lua compiles: the shebang line blanked, so that line numbers stay.
fn without_shebang(body: &[u8]) -> std::borrow::Cow<'_, [u8]> {
    match body.starts_with(b"#!") {
        true => body
            .iter()
            .position(|&b| b == b'\n')
            .map_or(Vec::new().into(), |i| body.get(i..).unwrap_or_default().into()),
        false => body.into(),
    }
}

/// Runs an EVAL or EVALSHA script, honouring its shebang's flags: `no-writes` makes it
/// read-only; without it, a single node under `min-replicas-to-write` refuses it at once.
fn run_with_shebang(
    sh: &Shared,
    sess: &mut Session,
    sha: &str,
    body: &[u8],
    keys: &[&[u8]],
    argv: &[&[u8]],
    ro: bool,
) -> Reply {
    let flags = match shebang(body) {
        Ok(f) => f,
        Err(r) => return r,
    };
    if flags == Some(false) && sh.settings.min_replicas.load(Relaxed) > 0 && sh.cluster.get().is_none() {
        return Reply::err(super::dispatch::NOREPLICAS);
    }
    let code = without_shebang(body);
    run_script(sh, sess, Code::Script { sha, body: &code }, keys, argv, ro || flags == Some(true))
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
    let ro = a.first().is_some_and(|c| lower(c) == "evalsha_ro");
    run_with_shebang(sh, sess, &sha, &body, keys, argv, ro)
}

/// SCRIPT LOAD body | EXISTS sha... | FLUSH [ASYNC|SYNC] | KILL.
fn cmd_script(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    let s = &sh.scripts;
    match (lower(a.get(1).copied().unwrap_or_default()).as_str(), a.get(2..).unwrap_or_default()) {
        ("load", [body]) => {
            let _exclusive = (!sess.atomic).then(|| sh.gate.write());
            if let Err(r) = shebang(body) {
                return r;
            }
            if let Err(e) = Lua::new().load(&*without_shebang(body)).set_name("@user_script").into_function() {
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
        ("kill", []) => kill(sh),
        _ => super::args::bad_subcommand(
            "script",
            a.get(1).copied().unwrap_or_default(),
            &["load", "exists", "flush", "kill"],
        ),
    }
}

/// SCRIPT KILL and FUNCTION KILL: stops the running script unless it wrote. Runs without the
/// command gate, which the script holds.
fn kill(sh: &Shared) -> Reply {
    let s = &sh.scripts;
    if s.started.load(Relaxed) == 0 {
        return Reply::err("NOTBUSY No scripts in execution right now.");
    }
    if s.wrote.load(Relaxed) {
        return Reply::err("UNKILLABLE Sorry the script already executed write commands against the dataset. You can either wait the script termination or kill the server in a hard way using the SHUTDOWN NOSAVE command.");
    }
    s.killed.store(true, Relaxed);
    Reply::ok()
}

/// FCALL/FCALL_RO function numkeys key... arg...
fn cmd_fcall(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    let [_, name, rest @ ..] = a else { return wrong_args("fcall") };
    let (keys, argv) = match split_keys(rest) {
        Ok(x) => x,
        Err(r) => return r,
    };
    let name = String::from_utf8_lossy(name).into_owned();
    if !sh.scripts.libraries.lock().values().any(|fns| fns.contains(&name)) {
        return Reply::err("ERR Function not found");
    }
    let read_only = a.first().is_some_and(|c| lower(c) == "fcall_ro");
    let no_writes = sh.scripts.read_only.lock().contains(&name);
    if read_only && !no_writes {
        return Reply::err("ERR Can not execute a script with write flag using *_ro command.");
    }
    run_script(sh, sess, Code::Function(&name), keys, argv, read_only || no_writes)
}

/// The library name of `#!lua name=<lib>` on a library's first line.
fn library_name(code: &[u8]) -> Result<String, Reply> {
    let first = code.split(|&b| b == b'\n').next().unwrap_or_default();
    let first = String::from_utf8_lossy(first);
    let Some(rest) = first.strip_prefix("#!") else { return Err(Reply::err("ERR Missing library metadata")) };
    let mut parts = rest.split_whitespace();
    if parts.next() != Some("lua") {
        return Err(Reply::err("ERR Engine not found"));
    }
    parts
        .find_map(|p| p.strip_prefix("name=").map(str::to_string))
        .filter(|n| !n.is_empty())
        .ok_or_else(|| Reply::err("ERR Library name was not given"))
}

/// Runs a library's code with a `redis.register_function` that collects its functions.
/// A function a library registered: its name, its callback and whether it declared
/// `no-writes` (only those run under FCALL_RO).
type Registered = (String, mlua::Function, bool);

fn load_library(lua: &Lua, code: &[u8]) -> mlua::Result<Vec<Registered>> {
    let found = RefCell::new(Vec::new());
    let redis: mlua::Table = lua.named_registry_value(crate::lua::REDIS)?;
    // The `#!lua` line is metadata, not Lua: left out, its line kept so line numbers hold.
    let body = code.iter().position(|&b| b == b'\n').map_or(&b""[..], |i| code.get(i..).unwrap_or_default());
    let env: mlua::Table = lua.named_registry_value(crate::lua::ENV)?;
    let chunk = lua.load(body).set_name("@user_function").set_environment(env).into_function()?;
    lua.scope(|scope| {
        let register = scope.create_function(|_, a: mlua::MultiValue| {
            let mut it = a.into_iter();
            let (name, f, ro) = match (it.next(), it.next()) {
                (Some(Value::String(n)), Some(Value::Function(f))) => (n.to_string_lossy(), f, false),
                (Some(Value::Table(t)), None) => {
                    let flags: Vec<String> = t.get::<Option<Vec<String>>>("flags")?.unwrap_or_default();
                    let ro = flags.iter().any(|f| f == "no-writes");
                    (t.get::<String>("function_name")?, t.get::<mlua::Function>("callback")?, ro)
                }
                _ => return Err(mlua::Error::runtime("ERR wrong arguments to redis.register_function")),
            };
            found.borrow_mut().push((name, f, ro));
            Ok(())
        })?;
        redis.raw_set("register_function", register)?;
        let out = chunk.call::<()>(());
        redis.raw_set("register_function", Value::Nil)?;
        out
    })?;
    Ok(found.into_inner())
}

/// FUNCTION LOAD [REPLACE] code.
fn function_load(sh: &Shared, replace: bool, code: &[u8]) -> Reply {
    let lib = match library_name(code) {
        Ok(l) => l,
        Err(r) => return r,
    };
    let mut guard = sh.scripts.lua.lock();
    let lua = match state(sh, &mut guard) {
        Ok(l) => l,
        Err(r) => return r,
    };
    let mut libs = sh.scripts.libraries.lock();
    if libs.contains_key(&lib) && !replace {
        return Reply::err(format!("ERR Library '{lib}' already exists"));
    }
    let fns = match load_library(lua, code) {
        Ok(f) => f,
        Err(e) => return Reply::Error(error_text(&e)),
    };
    if let Some((n, ..)) = fns.iter().find(|(n, ..)| libs.iter().any(|(l, f)| *l != lib && f.contains(n))) {
        return Reply::err(format!("ERR Function {n} already exists"));
    }
    let stored = (|| -> mlua::Result<()> {
        let table: mlua::Table = match lua.named_registry_value::<Option<mlua::Table>>(FUNCTIONS)? {
            Some(t) => t,
            None => lua.create_table()?,
        };
        for old in libs.get(&lib).into_iter().flatten() {
            table.raw_set(old.as_str(), Value::Nil)?;
        }
        for (n, f, _) in &fns {
            table.raw_set(n.as_str(), f.clone())?;
        }
        lua.set_named_registry_value(FUNCTIONS, table)
    })();
    if let Err(e) = stored {
        return Reply::Error(error_text(&e));
    }
    let mut ro = sh.scripts.read_only.lock();
    for (n, _, r) in &fns {
        if *r {
            ro.insert(n.clone());
        } else {
            ro.remove(n);
        }
    }
    libs.insert(lib.clone(), fns.into_iter().map(|(n, ..)| n).collect());
    Reply::bulk(lib)
}

/// FUNCTION LOAD | FLUSH | DELETE | LIST.
fn cmd_function(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    if a.len() == 2 && a.get(1).is_some_and(|s| lower(s) == "kill") {
        return kill(sh);
    }
    let _exclusive = (!sess.atomic).then(|| sh.gate.write());
    match (lower(a.get(1).copied().unwrap_or_default()).as_str(), a.get(2..).unwrap_or_default()) {
        ("load", [code]) => function_load(sh, false, code),
        ("load", [r, code]) if lower(r) == "replace" => function_load(sh, true, code),
        ("flush", []) | ("flush", [_]) => {
            sh.scripts.libraries.lock().clear();
            if let Some(lua) = sh.scripts.lua.lock().as_ref() {
                let _ = lua.set_named_registry_value(FUNCTIONS, Value::Nil);
            }
            Reply::ok()
        }
        ("delete", [lib]) => {
            let Some(fns) = sh.scripts.libraries.lock().remove(&*String::from_utf8_lossy(lib)) else {
                return Reply::err("ERR Library not found");
            };
            if let Some(lua) = sh.scripts.lua.lock().as_ref() {
                if let Ok(t) = lua.named_registry_value::<mlua::Table>(FUNCTIONS) {
                    for f in fns {
                        let _ = t.raw_set(f, Value::Nil);
                    }
                }
            }
            Reply::ok()
        }
        ("list", _) => Reply::Array(
            sh.scripts
                .libraries
                .lock()
                .iter()
                .map(|(lib, fns)| {
                    let fns = fns.iter().map(|f| Reply::Map(vec![(Reply::bulk("name"), Reply::bulk(f.as_str()))]));
                    Reply::Map(vec![
                        (Reply::bulk("library_name"), Reply::bulk(lib.as_str())),
                        (Reply::bulk("engine"), Reply::bulk("LUA")),
                        (Reply::bulk("functions"), Reply::Array(fns.collect())),
                    ])
                })
                .collect(),
        ),
        _ => super::args::bad_subcommand(
            "function",
            a.get(1).copied().unwrap_or_default(),
            &["load", "delete", "flush", "list", "kill"],
        ),
    }
}
