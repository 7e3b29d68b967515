//! Numbers as Redis reads and writes them in values: strict integers (`string2ll`) and the
//! floats of INCRBYFLOAT and HINCRBYFLOAT (`string2ld`, `ld2string`'s human form).
//!
//! Redis adds floats as C `long double` (80-bit on x86-64, about 19 significant digits) and
//! writes the sum with `%.17Lf`, trailing zeros dropped. Halyard adds `f64`s and writes the sum
//! with 15 significant digits (the most any decimal keeps through an `f64`), in the same fixed
//! notation and never more than 17 decimals. The two agree on sums of numbers with up to 15
//! significant digits within the `f64` range: `1 + 0.1` is `1.1` and `0.1 + 0.2` is `0.3` in
//! both. They differ where `long double` shows more: inputs of 16 or more significant digits
//! (`1.23456789012345678` stays so in Redis, is `1.23456789012346` here), its rounding showing
//! past the 15th digit (Redis' `1000.1 + 26.5` is `1026.59999999999999998`, here `1026.6`),
//! exact digits of large numbers (Redis writes every digit of its binary `1e300`, here
//! `1` and 300 zeros), and beyond `f64`'s range (Redis holds `1e400`; here it is refused as
//! infinity).

/// An integer as Redis' `string2ll` reads it: an optional `-`, digits without a leading zero
/// (but `0` itself), nothing else, within i64.
pub(super) fn strict_int(b: &[u8]) -> Option<i64> {
    let digits = b.strip_prefix(b"-").unwrap_or(b);
    let first = *digits.first()?;
    if !digits.iter().all(u8::is_ascii_digit) || (first == b'0' && b.len() > 1) {
        return None;
    }
    std::str::from_utf8(b).ok()?.parse().ok()
}

/// A float as Redis' `string2ld` reads it (`strtold` on the whole string): decimal or hex,
/// `inf`/`infinity` in any case; None for anything else, a leading space or NaN.
pub(super) fn parse_float(b: &[u8]) -> Option<f64> {
    let s = std::str::from_utf8(b).ok()?;
    if s.starts_with(|c: char| c.is_ascii_whitespace()) {
        return None;
    }
    let (neg, body) = match s.as_bytes().first() {
        Some(b'-') => (true, s.get(1..)?),
        Some(b'+') => (false, s.get(1..)?),
        _ => (false, s),
    };
    let v = match body.get(..2) {
        Some("0x" | "0X") => hex_float(body.get(2..)?)?,
        // Rust reads digits, a point, an exponent, inf, infinity and nan as strtold does;
        // a second sign it must not take.
        _ if body.starts_with(['+', '-']) => return None,
        _ => body.parse::<f64>().ok()?,
    };
    let v = if neg { -v } else { v };
    (!v.is_nan()).then_some(v)
}

/// The digits of a hex float after `0x`: hex digits with an optional point, then an optional
/// binary exponent `p[+-]n`.
fn hex_float(s: &str) -> Option<f64> {
    let (mantissa, exp) = match s.split_once(['p', 'P']) {
        Some((m, e)) => (m, e.parse::<i32>().ok()?),
        None => (s, 0),
    };
    let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    if int.is_empty() && frac.is_empty() {
        return None;
    }
    let mut v = 0f64;
    for c in int.chars() {
        v = v * 16.0 + f64::from(c.to_digit(16)?);
    }
    let mut scale = 1f64 / 16.0;
    for c in frac.chars() {
        v += f64::from(c.to_digit(16)?) * scale;
        scale /= 16.0;
    }
    Some(v * 2f64.powi(exp))
}

/// A float sum as INCRBYFLOAT replies and stores it: 15 significant digits in fixed notation,
/// at most 17 decimals, trailing zeros and a lone point dropped, `-0` as `0` (see the module's
/// notes for where this differs from Redis' `long double`). `v` is finite.
pub(super) fn human(v: f64) -> String {
    let sci = format!("{v:.14e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i64 = exp.parse().unwrap_or(0);
    let (neg, mantissa) = match mantissa.strip_prefix('-') {
        Some(m) => (true, m),
        None => (false, mantissa),
    };
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let mut out = if exp < -3 {
        // Past 17 decimals the 15 digits would not all show: round at the 17th as Redis does.
        format!("{:.17}", v.abs())
    } else if exp >= 0 {
        let cut = usize::try_from(exp + 1).unwrap_or(0);
        let int: String = digits.chars().chain(std::iter::repeat('0')).take(cut.max(digits.len())).collect();
        let (i, f) = int.split_at(cut.min(int.len()));
        format!("{i}.{f}")
    } else {
        let zeros = usize::try_from(-exp - 1).unwrap_or(0);
        format!("0.{}{digits}", "0".repeat(zeros))
    };
    if out.contains('.') {
        out.truncate(out.trim_end_matches('0').trim_end_matches('.').len());
    }
    if neg && out != "0" {
        out.insert(0, '-');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_read_as_redis_reads_them() {
        let ok: &[(&str, f64)] = &[
            ("1", 1.0),
            ("-2.5", -2.5),
            ("+1", 1.0),
            (".5", 0.5),
            ("5.", 5.0),
            ("1e3", 1000.0),
            ("0x10", 16.0),
            ("-0x1.8p1", -3.0),
            ("inf", f64::INFINITY),
            ("-Infinity", f64::NEG_INFINITY),
        ];
        for (s, v) in ok {
            assert_eq!(parse_float(s.as_bytes()), Some(*v), "{s}");
        }
        for s in ["", " 1", "1 ", "1e", "nan", "x", "--1", "+-1", "0x", "1.2.3"] {
            assert_eq!(parse_float(s.as_bytes()), None, "{s}");
        }
    }

    #[test]
    fn sums_are_written_as_redis_writes_them() {
        let cases: &[(f64, &str)] = &[
            (10.5, "10.5"),
            (1.0 + 0.1, "1.1"),
            (0.1 + 0.2, "0.3"),
            (3.0e3, "3000"),
            (1e20, "100000000000000000000"),
            (-0.001, "-0.001"),
            (1e-5, "0.00001"),
            (-0.0, "0"),
            (0.0, "0"),
            (1e-20, "0"),
            (1.5e-10, "0.00000000015"),
            (17179869184.0, "17179869184"),
            (-123.456, "-123.456"),
        ];
        for (v, s) in cases {
            assert_eq!(human(*v), *s, "{v}");
        }
    }

    #[test]
    fn integers_read_as_string2ll() {
        for (s, v) in [("0", Some(0)), ("-1", Some(-1)), ("12", Some(12)), ("-9223372036854775808", Some(i64::MIN))] {
            assert_eq!(strict_int(s.as_bytes()), v, "{s}");
        }
        for s in ["", "-", "01", "+1", " 1", "1 ", "-0", "9223372036854775808", "1.0"] {
            assert_eq!(strict_int(s.as_bytes()), None, "{s}");
        }
    }
}
