//! The `cmsgpack` library Redis' scripts have (lua-cmsgpack's encodings): `pack`, `unpack`,
//! `unpack_one`, `unpack_limit`.

use mlua::{Lua, MultiValue, Result, Table, Value};

/// Tables nested deeper than this pack as nil (lua-cmsgpack's limit; it also cuts cycles).
const MAX_NESTING: usize = 16;
/// Unpacking refuses input nested deeper than this.
const MAX_UNPACK_DEPTH: usize = 512;

fn int(out: &mut Vec<u8>, n: i64) {
    match n {
        0..=127 => out.push(n as u8),
        128..=0xff => out.extend_from_slice(&[0xcc, n as u8]),
        0x100..=0xffff => {
            out.push(0xcd);
            out.extend_from_slice(&(n as u16).to_be_bytes());
        }
        0x1_0000..=0xffff_ffff => {
            out.push(0xce);
            out.extend_from_slice(&(n as u32).to_be_bytes());
        }
        -32..=-1 => out.push(n as i8 as u8),
        -128..=-33 => out.extend_from_slice(&[0xd0, n as i8 as u8]),
        -32768..=-129 => {
            out.push(0xd1);
            out.extend_from_slice(&(n as i16).to_be_bytes());
        }
        -2_147_483_648..=-32769 => {
            out.push(0xd2);
            out.extend_from_slice(&(n as i32).to_be_bytes());
        }
        n if n > 0 => {
            out.push(0xcf);
            out.extend_from_slice(&(n as u64).to_be_bytes());
        }
        n => {
            out.push(0xd3);
            out.extend_from_slice(&n.to_be_bytes());
        }
    }
}

fn number(out: &mut Vec<u8>, n: f64) {
    if n.is_finite() && n == n.trunc() && n >= i64::MIN as f64 && n < i64::MAX as f64 {
        return int(out, n as i64);
    }
    let f = n as f32;
    if f64::from(f) == n || n.is_nan() {
        out.push(0xca);
        out.extend_from_slice(&f.to_be_bytes());
    } else {
        out.push(0xcb);
        out.extend_from_slice(&n.to_be_bytes());
    }
}

/// A length header: fix form under `fix_max` (`fix | n`), else the 8-, 16- or 32-bit form.
fn header(out: &mut Vec<u8>, n: usize, fix: u8, fix_max: usize, forms: [Option<u8>; 3]) {
    if n < fix_max {
        out.push(fix | n as u8);
    } else if let (Some(b8), true) = (forms[0], n <= 0xff) {
        out.extend_from_slice(&[b8, n as u8]);
    } else if let (Some(b16), true) = (forms[1], n <= 0xffff) {
        out.push(b16);
        out.extend_from_slice(&(n as u16).to_be_bytes());
    } else if let Some(b32) = forms[2] {
        out.push(b32);
        out.extend_from_slice(&(n as u32).to_be_bytes());
    }
}

fn is_array(t: &Table) -> Result<bool> {
    let (mut count, mut max) = (0usize, 0usize);
    for pair in t.pairs::<Value, Value>() {
        let (k, _) = pair?;
        let n = match k {
            Value::Integer(i) if i >= 1 => i as f64,
            Value::Number(n) if n >= 1.0 && n.fract() == 0.0 => n,
            _ => return Ok(false),
        };
        count += 1;
        max = max.max(n as usize);
    }
    Ok(max == count)
}

fn pack(out: &mut Vec<u8>, v: &Value, depth: usize) -> Result<()> {
    match v {
        Value::Boolean(b) => out.push(if *b { 0xc3 } else { 0xc2 }),
        Value::Integer(i) => int(out, *i),
        Value::Number(n) => number(out, *n),
        Value::String(s) => {
            let b = s.as_bytes();
            header(out, b.len(), 0xa0, 32, [Some(0xd9), Some(0xda), Some(0xdb)]);
            out.extend_from_slice(&b);
        }
        Value::Table(t) if depth < MAX_NESTING => {
            if is_array(t)? {
                let n = t.raw_len();
                header(out, n, 0x90, 16, [None, Some(0xdc), Some(0xdd)]);
                for i in 1..=n {
                    pack(out, &t.raw_get::<Value>(i)?, depth + 1)?;
                }
            } else {
                // Walked twice rather than collected: every value held at once takes a slot of
                // Lua's stack, which a large table would exhaust.
                let n = t.pairs::<Value, Value>().count();
                header(out, n, 0x80, 16, [None, Some(0xde), Some(0xdf)]);
                for pair in t.pairs::<Value, Value>() {
                    let (k, v) = pair?;
                    pack(out, &k, depth + 1)?;
                    pack(out, &v, depth + 1)?;
                }
            }
        }
        _ => out.push(0xc0),
    }
    Ok(())
}

fn missing() -> mlua::Error {
    mlua::Error::runtime("Missing bytes in input.")
}

/// Reads one object from `b` at `*at`.
fn unpack(lua: &Lua, b: &[u8], at: &mut usize, depth: usize) -> Result<Value> {
    if depth > MAX_UNPACK_DEPTH {
        return Err(mlua::Error::runtime("Bad data format in input."));
    }
    let mut take = |n: usize| -> Result<&[u8]> {
        let s = b.get(*at..*at + n).ok_or_else(missing)?;
        *at += n;
        Ok(s)
    };
    let be = |s: &[u8]| s.iter().fold(0u64, |acc, &x| acc << 8 | u64::from(x));
    let t = *take(1)?.first().ok_or_else(missing)?;
    let num = |x: f64| Ok(Value::Number(x));
    match t {
        0x00..=0x7f => num(f64::from(t)),
        0xe0..=0xff => num(f64::from(t as i8)),
        0xc0 => Ok(Value::Nil),
        0xc2 => Ok(Value::Boolean(false)),
        0xc3 => Ok(Value::Boolean(true)),
        0xca => num(f64::from(f32::from_bits(be(take(4)?) as u32))),
        0xcb => num(f64::from_bits(be(take(8)?))),
        0xcc..=0xcf => num(be(take(1 << (t - 0xcc))?) as f64),
        0xd0 => num(f64::from(be(take(1)?) as u8 as i8)),
        0xd1 => num(f64::from(be(take(2)?) as u16 as i16)),
        0xd2 => num(f64::from(be(take(4)?) as u32 as i32)),
        0xd3 => num(be(take(8)?) as i64 as f64),
        0xa0..=0xbf | 0xd9..=0xdb | 0xc4..=0xc6 => {
            let n = match t {
                0xa0..=0xbf => usize::from(t & 0x1f),
                0xd9 | 0xc4 => be(take(1)?) as usize,
                0xda | 0xc5 => be(take(2)?) as usize,
                _ => be(take(4)?) as usize,
            };
            Ok(Value::String(lua.create_string(take(n)?)?))
        }
        0x90..=0x9f | 0xdc | 0xdd => {
            let n = match t {
                0x90..=0x9f => usize::from(t & 0x0f),
                0xdc => be(take(2)?) as usize,
                _ => be(take(4)?) as usize,
            };
            let table = lua.create_table()?;
            for i in 1..=n {
                table.raw_set(i, unpack(lua, b, at, depth + 1)?)?;
            }
            Ok(Value::Table(table))
        }
        0x80..=0x8f | 0xde | 0xdf => {
            let n = match t {
                0x80..=0x8f => usize::from(t & 0x0f),
                0xde => be(take(2)?) as usize,
                _ => be(take(4)?) as usize,
            };
            let table = lua.create_table()?;
            for _ in 0..n {
                let k = unpack(lua, b, at, depth + 1)?;
                let v = unpack(lua, b, at, depth + 1)?;
                if !matches!(k, Value::Nil) {
                    table.raw_set(k, v)?;
                }
            }
            Ok(Value::Table(table))
        }
        _ => Err(mlua::Error::runtime("Bad data format in input.")),
    }
}

/// `unpack_limit(s, limit, offset)`: the offset after the objects read (-1 at the end of the
/// input), then up to `limit` objects (0: all) from `offset` on.
fn unpack_limit(lua: &Lua, s: &[u8], limit: usize, offset: usize) -> Result<MultiValue> {
    if offset > s.len() {
        return Err(mlua::Error::runtime(format!("Start offset {offset} greater than input length {}.", s.len())));
    }
    let mut at = offset;
    let mut out = MultiValue::new();
    while at < s.len() && (limit == 0 || out.len() < limit) {
        out.push_back(unpack(lua, s, &mut at, 0)?);
    }
    let next = if at >= s.len() { -1 } else { at as i64 };
    out.push_front(Value::Integer(next));
    Ok(out)
}

/// Unpacks every object of `data` in a fresh Lua state (the fuzz target's entry: a script's
/// `cmsgpack.unpack` takes bytes a client sent). Err is the error a script would see.
pub fn unpack_all(data: &[u8]) -> Result<usize> {
    let lua = Lua::new();
    Ok(unpack_limit(&lua, data, 0, 0)?.len() - 1)
}

/// The `cmsgpack` table.
pub fn library(lua: &Lua) -> Result<Table> {
    let t = lua.create_table()?;
    t.set(
        "pack",
        lua.create_function(|lua, args: MultiValue| {
            if args.is_empty() {
                return Err(mlua::Error::runtime("MessagePack pack needs input."));
            }
            let mut out = Vec::new();
            for v in &args {
                pack(&mut out, v, 0)?;
            }
            lua.create_string(&out)
        })?,
    )?;
    t.set(
        "unpack",
        lua.create_function(|lua, s: mlua::LuaString| {
            let mut all = unpack_limit(lua, &s.as_bytes(), 0, 0)?;
            all.pop_front();
            Ok(all)
        })?,
    )?;
    t.set(
        "unpack_one",
        lua.create_function(|lua, (s, offset): (mlua::LuaString, Option<usize>)| {
            unpack_limit(lua, &s.as_bytes(), 1, offset.unwrap_or(0))
        })?,
    )?;
    t.set(
        "unpack_limit",
        lua.create_function(|lua, (s, limit, offset): (mlua::LuaString, usize, Option<usize>)| {
            unpack_limit(lua, &s.as_bytes(), limit, offset.unwrap_or(0))
        })?,
    )?;
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(lua: &Lua, code: &str) -> String {
        let s: mlua::LuaString = lua.load(code).eval().unwrap();
        s.as_bytes().iter().map(|b| format!("{b:02x}")).collect()
    }

    #[test]
    fn encodings_are_lua_cmsgpacks() {
        let lua = Lua::new();
        lua.globals().set("cmsgpack", library(&lua).unwrap()).unwrap();
        assert_eq!(hex(&lua, "return cmsgpack.pack(0.1)"), "cb3fb999999999999a");
        assert_eq!(hex(&lua, "return cmsgpack.pack(-1099511627776)"), "d3ffffff0000000000");
        assert_eq!(hex(&lua, "return cmsgpack.pack({1, 2}, 'ab', true, nil)"), "920102a26162c3c0");
        let ok: bool = lua
            .load(
                r#"local s = cmsgpack.pack({a = 1, b = {1.5, "x"}}, 300, -70000)
                local t, n, m = cmsgpack.unpack(s)
                local off, one = cmsgpack.unpack_one(s, 0)
                return t.a == 1 and t.b[1] == 1.5 and t.b[2] == "x" and n == 300 and m == -70000
                    and one.a == 1 and off > 0 and select(1, cmsgpack.unpack_limit(s, 3, 0)) == -1"#,
            )
            .eval()
            .unwrap();
        assert!(ok);
    }

    #[test]
    fn truncated_input_is_an_error() {
        let lua = Lua::new();
        lua.globals().set("cmsgpack", library(&lua).unwrap()).unwrap();
        let ok: bool = lua.load(r#"return pcall(cmsgpack.unpack, "\220\0\5\1")"#).eval().unwrap();
        assert!(!ok);
    }
}
