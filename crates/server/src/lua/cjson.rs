//! The `cjson` library Redis' scripts have (lua-cjson 2.1's behaviour): `encode`, `decode`,
//! `null`, and the settings scripts call (depth limits, invalid numbers; the others are
//! accepted and change nothing).

use mlua::{LightUserData, Lua, MultiValue, Result, Table, Value};
use parking_lot::Mutex;
use std::sync::Arc;

/// The settings of one Lua state's `cjson`.
struct Settings {
    encode_depth: usize,
    decode_depth: usize,
    invalid_numbers: bool,
}

fn null() -> Value {
    Value::LightUserData(LightUserData(std::ptr::null_mut()))
}

/// A number as C's `%.14g` writes it (lua-cjson's default precision).
pub fn fmt_g14(n: f64) -> String {
    if n == 0.0 {
        return if n.is_sign_negative() { "-0".into() } else { "0".into() };
    }
    let sci = format!("{n:.13e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let trim = |s: &str| -> String {
        if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            s.to_string()
        }
    };
    if !(-4..14).contains(&exp) {
        let sign = if exp < 0 { '-' } else { '+' };
        return format!("{}e{sign}{:02}", trim(mantissa), exp.abs());
    }
    let decimals = usize::try_from(13 - exp).unwrap_or(0);
    trim(&format!("{n:.decimals$}"))
}

fn escape(out: &mut Vec<u8>, s: &[u8]) {
    out.push(b'"');
    for &b in s {
        match b {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'/' => out.extend_from_slice(b"\\/"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            0x08 => out.extend_from_slice(b"\\b"),
            0x0c => out.extend_from_slice(b"\\f"),
            b if b < 0x20 || b == 0x7f => out.extend_from_slice(format!("\\u{b:04x}").as_bytes()),
            // Bytes past ASCII go out as they are (UTF-8 stays UTF-8).
            b => out.push(b),
        }
    }
    out.push(b'"');
}

fn err(msg: String) -> mlua::Error {
    mlua::Error::runtime(msg)
}

/// Whether a table is an array (keys 1..n, not too sparse) and its length.
fn array_len(t: &Table) -> Result<Option<usize>> {
    let (mut max, mut items) = (0usize, 0usize);
    for pair in t.pairs::<Value, Value>() {
        let (k, _) = pair?;
        let n = match k {
            Value::Integer(i) if i >= 1 => i as f64,
            Value::Number(n) if n >= 1.0 && n.fract() == 0.0 => n,
            _ => return Ok(None),
        };
        max = max.max(n as usize);
        items += 1;
    }
    if max > 10 && max > items * 2 {
        return Err(err("Cannot serialise table: excessively sparse array".into()));
    }
    Ok((items > 0).then_some(max))
}

fn number(out: &mut Vec<u8>, n: f64, s: &Settings) -> Result<()> {
    if !n.is_finite() {
        if !s.invalid_numbers {
            return Err(err("Cannot serialise number: must not be NaN or Inf".into()));
        }
        out.extend_from_slice(
            if n.is_nan() {
                "nan"
            } else if n > 0.0 {
                "inf"
            } else {
                "-inf"
            }
            .as_bytes(),
        );
        return Ok(());
    }
    out.extend_from_slice(fmt_g14(n).as_bytes());
    Ok(())
}

fn encode(out: &mut Vec<u8>, v: &Value, s: &Settings, depth: usize) -> Result<()> {
    match v {
        Value::Nil => out.extend_from_slice(b"null"),
        Value::LightUserData(u) if u.0.is_null() => out.extend_from_slice(b"null"),
        Value::Boolean(b) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
        Value::Integer(i) => number(out, *i as f64, s)?,
        Value::Number(n) => number(out, *n, s)?,
        Value::String(x) => escape(out, &x.as_bytes()),
        Value::Table(t) => {
            if depth >= s.encode_depth {
                return Err(err(format!("Cannot serialise, excessive nesting ({})", depth + 1)));
            }
            match array_len(t)? {
                Some(n) => {
                    out.push(b'[');
                    for i in 1..=n {
                        if i > 1 {
                            out.push(b',');
                        }
                        encode(out, &t.raw_get::<Value>(i)?, s, depth + 1)?;
                    }
                    out.push(b']');
                }
                None => object(out, t, s, depth)?,
            }
        }
        other => return Err(err(format!("Cannot serialise {}: type not supported", other.type_name()))),
    }
    Ok(())
}

fn object(out: &mut Vec<u8>, t: &Table, s: &Settings, depth: usize) -> Result<()> {
    out.push(b'{');
    let mut first = true;
    for pair in t.pairs::<Value, Value>() {
        let (k, v) = pair?;
        let key = match &k {
            Value::String(x) => x.as_bytes().to_vec(),
            Value::Integer(i) => fmt_g14(*i as f64).into_bytes(),
            Value::Number(n) => fmt_g14(*n).into_bytes(),
            other => {
                return Err(err(format!(
                    "Cannot serialise {}: table key must be a number or string",
                    other.type_name()
                )))
            }
        };
        if !first {
            out.push(b',');
        }
        first = false;
        escape(out, &key);
        out.push(b':');
        encode(out, &v, s, depth + 1)?;
    }
    out.push(b'}');
    Ok(())
}

fn to_lua(lua: &Lua, j: serde_json::Value, depth: usize, max: usize) -> Result<Value> {
    let nested = |d: usize| {
        if d > max {
            Err(err(format!("Found too many nested data structures ({d})")))
        } else {
            Ok(())
        }
    };
    Ok(match j {
        serde_json::Value::Null => null(),
        serde_json::Value::Bool(b) => Value::Boolean(b),
        serde_json::Value::Number(n) => Value::Number(n.as_f64().unwrap_or(0.0)),
        serde_json::Value::String(s) => Value::String(lua.create_string(&s)?),
        serde_json::Value::Array(items) => {
            nested(depth + 1)?;
            let t = lua.create_table_with_capacity(items.len(), 0)?;
            for (i, item) in items.into_iter().enumerate() {
                t.raw_set(i + 1, to_lua(lua, item, depth + 1, max)?)?;
            }
            Value::Table(t)
        }
        serde_json::Value::Object(map) => {
            nested(depth + 1)?;
            let t = lua.create_table_with_capacity(0, map.len())?;
            for (k, v) in map {
                t.raw_set(k, to_lua(lua, v, depth + 1, max)?)?;
            }
            Value::Table(t)
        }
    })
}

type Field = fn(&mut Settings) -> &mut usize;

fn encode_depth(s: &mut Settings) -> &mut usize {
    &mut s.encode_depth
}

fn decode_depth(s: &mut Settings) -> &mut usize {
    &mut s.decode_depth
}

/// The `cjson` table.
pub fn library(lua: &Lua) -> Result<Table> {
    let settings = Arc::new(Mutex::new(Settings { encode_depth: 1000, decode_depth: 1000, invalid_numbers: false }));
    let t = lua.create_table()?;
    let s = settings.clone();
    t.set(
        "encode",
        lua.create_function(move |lua, v: Value| {
            let mut out = Vec::new();
            encode(&mut out, &v, &s.lock(), 0)?;
            lua.create_string(&out)
        })?,
    )?;
    let s = settings.clone();
    t.set(
        "decode",
        lua.create_function(move |lua, text: mlua::LuaString| {
            let j: serde_json::Value = serde_json::from_slice(&text.as_bytes())
                .map_err(|e| err(format!("Expected value but found invalid token: {e}")))?;
            to_lua(lua, j, 0, s.lock().decode_depth)
        })?,
    )?;
    t.set("null", null())?;
    for (name, field) in [("encode_max_depth", encode_depth as Field), ("decode_max_depth", decode_depth)] {
        let s = settings.clone();
        t.set(
            name,
            lua.create_function(move |_, d: Option<usize>| {
                let mut g = s.lock();
                let f = field(&mut g);
                *f = d.unwrap_or(*f).max(1);
                Ok(*f)
            })?,
        )?;
    }
    let s = settings;
    t.set(
        "encode_invalid_numbers",
        lua.create_function(move |_, on: Option<bool>| {
            let mut g = s.lock();
            g.invalid_numbers = on.unwrap_or(g.invalid_numbers);
            Ok(g.invalid_numbers)
        })?,
    )?;
    for setting in ["encode_keep_buffer", "encode_sparse_array", "encode_number_precision", "decode_invalid_numbers"] {
        t.set(setting, lua.create_function(|_, a: MultiValue| Ok(a))?)?;
    }
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_print_as_percent_14g() {
        for (n, s) in [
            (0.0003, "0.0003"),
            (1023.2, "1023.2"),
            (-5000.0, "-5000"),
            (100.0, "100"),
            (0.1, "0.1"),
            (1e20, "1e+20"),
            (1.5e-7, "1.5e-07"),
            (123456789012345.0, "1.2345678901234e+14"),
            (2f64.powi(40), "1099511627776"),
        ] {
            assert_eq!(fmt_g14(n), s);
        }
    }

    #[test]
    fn values_round_trip_as_lua_cjson_does() {
        let lua = Lua::new();
        lua.globals().set("cjson", library(&lua).unwrap()).unwrap();
        let r: String = lua
            .load(
                r#"local d = cjson.decode("[0.0, -5e3, -1, 0.3e-3, 1023.2, 0e10]")
                local e = cjson.encode({a = {1, 2, "x/y"}})
                local ok = pcall(cjson.encode, {[false] = 1})
                return table.concat(d, " ") .. "|" .. e .. "|" .. tostring(ok) .. "|" .. cjson.encode({})"#,
            )
            .eval()
            .unwrap();
        assert_eq!(r, r#"0 -5000 -1 0.0003 1023.2 0|{"a":[1,2,"x\/y"]}|false|{}"#);
    }
}
