//! The `bit` library Redis' scripts have (LuaBitOp): 32-bit operations on Lua numbers.

use mlua::{Lua, MultiValue, Result, Table, Value};

/// A Lua number as LuaBitOp takes it: rounded, then wrapped to a signed 32-bit integer.
fn tobit(v: &Value) -> Result<i32> {
    let n = match v {
        Value::Integer(i) => *i as f64,
        Value::Number(n) => *n,
        Value::String(s) => s.to_str()?.trim().parse::<f64>().map_err(|_| bad(v))?,
        other => return Err(bad(other)),
    };
    if !n.is_finite() {
        return Ok(0);
    }
    Ok(n.round_ties_even().rem_euclid(4_294_967_296.0) as u32 as i32)
}

fn bad(v: &Value) -> mlua::Error {
    mlua::Error::runtime(format!("bad argument to bit operation (number expected, got {})", v.type_name()))
}

fn fold(args: &MultiValue, f: fn(i32, i32) -> i32) -> Result<i32> {
    let mut it = args.iter();
    let first = it.next().ok_or_else(|| bad(&Value::Nil))?;
    it.try_fold(tobit(first)?, |acc, v| Ok(f(acc, tobit(v)?)))
}

fn arg(args: &MultiValue, i: usize) -> Result<i32> {
    tobit(args.get(i).unwrap_or(&Value::Nil))
}

/// The `bit` table.
pub fn library(lua: &Lua) -> Result<Table> {
    let t = lua.create_table()?;
    let unary = |f: fn(i32) -> i32| move |_: &Lua, a: MultiValue| Ok(f(arg(&a, 0)?));
    let binary = |f: fn(i32, u32) -> i32| move |_: &Lua, a: MultiValue| Ok(f(arg(&a, 0)?, (arg(&a, 1)? & 31) as u32));
    t.set("tobit", lua.create_function(unary(|x| x))?)?;
    t.set("bnot", lua.create_function(unary(|x| !x))?)?;
    t.set("bswap", lua.create_function(unary(i32::swap_bytes))?)?;
    t.set("band", lua.create_function(|_, a: MultiValue| fold(&a, |x, y| x & y))?)?;
    t.set("bor", lua.create_function(|_, a: MultiValue| fold(&a, |x, y| x | y))?)?;
    t.set("bxor", lua.create_function(|_, a: MultiValue| fold(&a, |x, y| x ^ y))?)?;
    t.set("lshift", lua.create_function(binary(|x, n| ((x as u32) << n) as i32))?)?;
    t.set("rshift", lua.create_function(binary(|x, n| ((x as u32) >> n) as i32))?)?;
    t.set("arshift", lua.create_function(binary(|x, n| x >> n))?)?;
    t.set("rol", lua.create_function(binary(|x, n| (x as u32).rotate_left(n) as i32))?)?;
    t.set("ror", lua.create_function(binary(|x, n| (x as u32).rotate_right(n) as i32))?)?;
    t.set(
        "tohex",
        lua.create_function(|_, a: MultiValue| {
            let x = arg(&a, 0)? as u32;
            let n = if a.len() > 1 { arg(&a, 1)? } else { 8 };
            let digits = n.unsigned_abs().min(8) as usize;
            let s = if n < 0 { format!("{x:08X}") } else { format!("{x:08x}") };
            Ok(s.get(8 - digits..).unwrap_or_default().to_string())
        })?,
    )?;
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operations_follow_luabitop() {
        let lua = Lua::new();
        lua.globals().set("bit", library(&lua).unwrap()).unwrap();
        let ok: bool = lua
            .load(
                r#"return bit.tobit(1) == 1 and bit.band(1) == 1 and bit.bxor(1, 2) == 3
                    and bit.bor(1, 2, 4, 8, 16, 32, 64, 128) == 255 and bit.tobit(0xffffffff) == -1
                    and bit.lshift(1, 31) == -2147483648 and bit.rshift(-1, 28) == 15
                    and bit.arshift(-256, 4) == -16 and bit.tohex(255, 4) == "00ff"
                    and bit.tohex(-1, -2) == "FF" and bit.bnot(0) == -1 and bit.rol(1, 33) == 2"#,
            )
            .eval()
            .unwrap();
        assert!(ok);
    }
}
