//! The Lua 5.1 state scripts run in (mlua, built from source), sandboxed, with the libraries
//! Redis gives scripts (`cjson`, `cmsgpack`, `bit`), and the conversions between Redis
//! replies and Lua values (Redis' rules). The commands that run scripts are in
//! `commands::scripting`.

mod bit;
mod cjson;
pub mod cmsgpack;

use crate::resp::{fmt_double, Reply};
use mlua::{Lua, LuaOptions, StdLib, Value};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a script runs before other clients' commands answer BUSY by default (Redis'
/// `lua-time-limit`; `Scripts::limit_ms` holds the one in force).
pub const LUA_TIME_LIMIT: Duration = Duration::from_secs(5);

/// The scripts of a server: their bodies by SHA1, the Lua state, and the running script.
pub struct Scripts {
    pub bodies: Mutex<HashMap<String, Vec<u8>>>,
    /// The loaded function libraries: each one's functions, by library name.
    pub libraries: Mutex<std::collections::BTreeMap<String, Vec<String>>>,
    /// The functions declared `no-writes` (FCALL_RO runs only those).
    pub read_only: Mutex<std::collections::BTreeSet<String>>,
    pub lua: Mutex<Option<Lua>>,
    /// When the running script started (ms since the server started; 0: none runs).
    pub started: AtomicU64,
    /// The running script called a write command.
    pub wrote: AtomicBool,
    /// SCRIPT KILL asked the running script to stop.
    pub killed: Arc<AtomicBool>,
    /// The clock `started` counts from.
    epoch: std::sync::OnceLock<Instant>,
    /// Milliseconds a script runs before other commands answer BUSY (Redis'
    /// `busy-reply-threshold`, alias `lua-time-limit`; CONFIG SET changes it).
    pub limit_ms: AtomicU64,
}

impl Default for Scripts {
    fn default() -> Scripts {
        Scripts {
            bodies: Mutex::default(),
            libraries: Mutex::default(),
            read_only: Mutex::default(),
            lua: Mutex::default(),
            started: AtomicU64::new(0),
            wrote: AtomicBool::new(false),
            killed: Arc::default(),
            epoch: std::sync::OnceLock::new(),
            limit_ms: AtomicU64::new(LUA_TIME_LIMIT.as_millis() as u64),
        }
    }
}

impl Scripts {
    /// Milliseconds on the clock `started` counts (never 0).
    pub fn now(&self) -> u64 {
        self.epoch.get_or_init(Instant::now).elapsed().as_millis() as u64 + 1
    }

    /// Whether a script has run past the time limit (other commands then answer BUSY).
    pub fn busy(&self) -> bool {
        let s = self.started.load(Relaxed);
        s != 0 && self.now().saturating_sub(s) >= self.limit_ms.load(Relaxed)
    }
}

/// The registry names of the environment scripts run in and of the real `redis` table (which
/// scripts see through a read-only view).
pub const ENV: &str = "halyard_env";
pub const REDIS: &str = "halyard_redis";

/// Makes what scripts see read-only, as Redis 7 does: scripts run in an environment whose
/// writes fail; the libraries are read-only views; `setmetatable`, `rawset` and `getmetatable`
/// cannot reach behind a view; `loadstring` takes no bytecode and gives its chunk the same
/// environment; `setfenv` and `getfenv` are gone. One script therefore cannot change what the
/// next one (another client's) runs. Returns the environment.
const READ_ONLY: &str = r#"
local G, rawset_, setmetatable_, getmetatable_, setfenv_, loadstring_, type_, error_ =
    _G, rawset, setmetatable, getmetatable, setfenv, loadstring, type, error
local protected = setmetatable_({}, {__mode = "k"})
local function deny() error_("Attempt to modify a readonly table", 2) end
local sealed = {}
setmetatable_(sealed, {__newindex = deny, __metatable = sealed})
protected[sealed] = true
local function view(t)
    local v = setmetatable_({}, {__index = t, __newindex = deny, __metatable = sealed})
    protected[v] = true
    return v
end
for _, name in ipairs({"redis", "cjson", "cmsgpack", "bit", "string", "math", "table"}) do
    rawset_(G, name, view(G[name]))
end
local env = setmetatable_({}, {
    __index = function(_, n)
        local v = G[n]
        if v == nil then
            error_("Script attempted to access nonexistent global variable '" .. tostring(n) .. "'", 2)
        end
        return v
    end,
    __newindex = deny,
    __metatable = sealed,
})
protected[env] = true
rawset_(G, "_G", env)
rawset_(G, "setmetatable", function(t, m)
    if protected[t] then error_("Attempt to modify a readonly table", 2) end
    return setmetatable_(t, m)
end)
rawset_(G, "rawset", function(t, k, v)
    if protected[t] then error_("Attempt to modify a readonly table", 2) end
    return rawset_(t, k, v)
end)
rawset_(G, "loadstring", function(s, name)
    if type_(s) == "string" and s:byte(1) == 27 then return nil, "binary chunks are not allowed" end
    local f, e = loadstring_(s, name)
    if f then setfenv_(f, env) end
    return f, e
end)
rawset_(G, "setfenv", nil)
rawset_(G, "getfenv", nil)
rawset_(G, "newproxy", nil)
rawset_(G, "print", nil)
-- Strings' methods come from the read-only string view, and their metatable is sealed.
local smeta = getmetatable_("")
smeta.__index = G.string
smeta.__metatable = sealed
return env
"#;

/// The sandboxed state, with the `redis` library and global protection.
pub fn new_state(killed: Arc<AtomicBool>) -> mlua::Result<Lua> {
    let lua = Lua::new_with(StdLib::TABLE | StdLib::STRING | StdLib::MATH, LuaOptions::default())?;
    let g = lua.globals();
    for unsafe_fn in ["dofile", "loadfile", "load"] {
        g.raw_set(unsafe_fn, Value::Nil)?;
    }
    let redis = lua.create_table()?;
    redis.set(
        "sha1hex",
        lua.create_function(|_, a: mlua::MultiValue| match a.front() {
            Some(Value::String(s)) if a.len() == 1 => Ok(sha1_hex(&s.as_bytes())),
            Some(Value::Integer(n)) if a.len() == 1 => Ok(sha1_hex(n.to_string().as_bytes())),
            Some(Value::Number(n)) if a.len() == 1 => Ok(sha1_hex(fmt_double(*n).as_bytes())),
            _ => Err(mlua::Error::runtime("ERR wrong number of arguments")),
        })?,
    )?;
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
    lua.set_named_registry_value(REDIS, redis.clone())?;
    g.raw_set("redis", redis)?;
    g.raw_set("cjson", cjson::library(&lua)?)?;
    g.raw_set("cmsgpack", cmsgpack::library(&lua)?)?;
    g.raw_set("bit", bit::library(&lua)?)?;
    let env: mlua::Table = lua.load(READ_ONLY).set_name("=sandbox").call(())?;
    lua.set_named_registry_value(ENV, env)?;
    arm(&lua, killed)?;
    Ok(lua)
}

/// Installs the hook that stops a script SCRIPT KILL asked to stop. Once it fires it fires on
/// every line, so that a script catching the error with `pcall` meets it again outside the
/// `pcall` and ends, as in Redis. Called before each script (a killed one left the per-line hook).
pub fn arm(lua: &Lua, killed: Arc<AtomicBool>) -> mlua::Result<()> {
    lua.set_hook(mlua::HookTriggers::new().every_nth_instruction(10_000), move |lua, _| {
        if killed.load(Relaxed) {
            let again = killed.clone();
            lua.set_hook(mlua::HookTriggers::new().every_line(), move |_, _| match again.load(Relaxed) {
                true => Err(mlua::Error::runtime(KILLED)),
                false => Ok(mlua::VmState::Continue),
            })?;
            return Err(mlua::Error::runtime(KILLED));
        }
        Ok(mlua::VmState::Continue)
    })
}

const KILLED: &str = "ERR Script killed by user with SCRIPT KILL...";

pub fn status_table(lua: &Lua, field: &str, s: String) -> mlua::Result<mlua::Table> {
    let t = lua.create_table()?;
    t.set(field, s)?;
    Ok(t)
}

pub fn sha1_hex(b: &[u8]) -> String {
    sha1_smol::Sha1::from(b).digest().to_string()
}

/// The text of a Lua error as a Redis error reply's: the innermost cause, with an error code.
pub fn error_text(e: &mlua::Error) -> String {
    let text = match e {
        mlua::Error::CallbackError { cause, .. } => return error_text(cause),
        mlua::Error::RuntimeError(s) => s.clone(),
        mlua::Error::SyntaxError { message, .. } => format!("ERR Error compiling script (new function): {message}"),
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
pub fn to_lua(lua: &Lua, r: Reply) -> mlua::Result<Value> {
    Ok(match r {
        Reply::Int(n) => Value::Integer(n),
        Reply::Bulk(b) => Value::String(lua.create_string(&b)?),
        Reply::Nil | Reply::NilArray | Reply::Encoded(_) | Reply::EncodedItems { .. } => Value::Boolean(false),
        Reply::Simple(s) => Value::Table(status_table(lua, "ok", s)?),
        Reply::Error(e) => Value::Table(status_table(lua, "err", e)?),
        Reply::Double(d) => Value::String(lua.create_string(fmt_double(d))?),
        Reply::Array(items) | Reply::Set(items) | Reply::Push(items) | Reply::Many(items) => Value::Table(
            lua.create_sequence_from(items.into_iter().map(|i| to_lua(lua, i)).collect::<mlua::Result<Vec<_>>>()?)?,
        ),
        Reply::Map(pairs) => {
            let flat: Vec<Reply> = pairs.into_iter().flat_map(|(k, v)| [k, v]).collect();
            to_lua(lua, Reply::Array(flat))?
        }
    })
}

/// Tables nested deeper than this in a script's result end in an error reply (a table that
/// holds itself would otherwise be converted for ever).
const MAX_REPLY_DEPTH: usize = 500;

/// A script's result as a Redis reply (Redis' Lua-to-RESP rules).
pub fn from_lua(v: Value) -> Reply {
    from_lua_at(v, 0)
}

fn from_lua_at(v: Value, depth: usize) -> Reply {
    match v {
        Value::Nil | Value::Boolean(false) => Reply::Nil,
        Value::Boolean(true) => Reply::Int(1),
        Value::Integer(n) => Reply::Int(n),
        Value::Number(f) => Reply::Int(f as i64),
        Value::String(s) => Reply::Bulk(s.as_bytes().to_vec()),
        Value::Table(_) if depth >= MAX_REPLY_DEPTH => Reply::err("ERR reached lua stack limit"),
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
                    Ok(v) => items.push(from_lua_at(v, depth + 1)),
                }
            }
            Reply::Array(items)
        }
        _ => Reply::Nil,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_table_that_holds_itself_ends_in_an_error() {
        let lua = Lua::new();
        let v: Value = lua.load("local a = {}; local b = {a}; a[1] = b; return a").eval().unwrap();
        let mut r = from_lua(v);
        let mut depth = 0;
        while let Reply::Array(mut items) = r {
            assert_eq!(items.len(), 1);
            r = items.pop().unwrap();
            depth += 1;
        }
        assert_eq!(depth, MAX_REPLY_DEPTH);
        assert!(matches!(r, Reply::Error(e) if e == "ERR reached lua stack limit"));
    }
}
