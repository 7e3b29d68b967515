//! RESP2/RESP3 framing: requests (arrays of bulk strings, or inline commands) and replies.

/// A malformed or oversized request; the connection gets the message and is closed.
#[derive(Debug, PartialEq, Eq)]
pub struct ProtocolError(pub String);

/// Limits on one request.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Largest request (all of its arguments) in bytes.
    pub max_request_bytes: usize,
    /// Most arguments in one request.
    pub max_args: usize,
}

fn line(buf: &[u8], from: usize) -> Option<(usize, usize)> {
    // (end of line content, start of next line)
    let pos = buf.get(from..)?.windows(2).position(|w| w == b"\r\n")?;
    Some((from + pos, from + pos + 2))
}

/// Redis' largest bulk string (its `proto-max-bulk-len` default): a longer one is not a
/// valid request whatever this server's limits are.
const REDIS_MAX_BULK: i64 = 512 << 20;

/// A multibulk or bulk length as Redis' `string2ll` reads it: an optional `-`, then `0` or digits
/// without a leading zero; no sign `+`, no spaces, nothing else.
fn number(s: &[u8], what: &str) -> Result<i64, ProtocolError> {
    std::str::from_utf8(s)
        .ok()
        .and_then(|t| t.parse::<i64>().ok())
        .filter(|n| itoa::Buffer::new().format(*n).as_bytes() == s)
        .ok_or_else(|| ProtocolError(format!("invalid {what}")))
}

/// A request's arguments, borrowed from the read buffer where possible (no copy per argument;
/// inline commands with escapes own theirs).
pub type Args<'a> = smallvec::SmallVec<[std::borrow::Cow<'a, [u8]>; 6]>;

/// A parsed request and the bytes it took; None: incomplete, read more.
pub type Parsed<'a> = Option<(Args<'a>, usize)>;

/// Parses one request from the start of `buf`.
pub fn parse(buf: &[u8], limits: Limits) -> Result<Parsed<'_>, ProtocolError> {
    match buf.first() {
        None => return Ok(None),
        Some(b'*') => {}
        Some(_) => return parse_inline(buf, limits),
    }
    let Some((end, mut pos)) = line(buf, 0) else {
        return if buf.len() > 64 { Err(ProtocolError("invalid multibulk length".into())) } else { Ok(None) };
    };
    let n = number(buf.get(1..end).unwrap_or_default(), "multibulk length")?;
    // As Redis: more than i32::MAX is not a request; zero or less is an empty one.
    if n > i64::from(i32::MAX) {
        return Err(ProtocolError("invalid multibulk length".into()));
    }
    if n > limits.max_args as i64 {
        return Err(ProtocolError(format!("too many arguments in request (more than {})", limits.max_args)));
    }
    let mut args = Args::new();
    let mut total = 0usize;
    for _ in 0..n.max(0) {
        match buf.get(pos) {
            None => return Ok(None),
            Some(b'$') => {}
            Some(&c) => return Err(ProtocolError(format!("expected '$', got '{}'", c as char))),
        }
        let Some((end, next)) = line(buf, pos) else {
            return if buf.len() - pos > 64 { Err(ProtocolError("invalid bulk length".into())) } else { Ok(None) };
        };
        let len = number(buf.get(pos + 1..end).unwrap_or_default(), "bulk length")?;
        if !(0..=REDIS_MAX_BULK).contains(&len) {
            return Err(ProtocolError("invalid bulk length".into()));
        }
        if len as usize > limits.max_request_bytes || total + len as usize > limits.max_request_bytes {
            return Err(ProtocolError(format!(
                "request larger than {} bytes (--max-request-bytes)",
                limits.max_request_bytes
            )));
        }
        let len = len as usize;
        total += len;
        let (Some(arg), Some(crlf)) = (buf.get(next..next + len), buf.get(next + len..next + len + 2)) else {
            return Ok(None);
        };
        if crlf != b"\r\n" {
            return Err(ProtocolError("bulk string not terminated by CRLF".into()));
        }
        args.push(std::borrow::Cow::Borrowed(arg));
        pos = next + len + 2;
    }
    Ok(Some((args, pos)))
}

fn parse_inline(buf: &[u8], limits: Limits) -> Result<Parsed<'_>, ProtocolError> {
    let Some(nl) = buf.iter().position(|&b| b == b'\n') else {
        if buf.len() > limits.max_request_bytes.min(64 << 10) {
            return Err(ProtocolError("too big inline request".into()));
        }
        return Ok(None);
    };
    let text = buf.get(..nl).unwrap_or_default();
    let text = text.strip_suffix(b"\r").unwrap_or(text);
    let Some(args) = split_inline(text) else {
        return Err(ProtocolError("unbalanced quotes in request".into()));
    };
    if args.len() > limits.max_args {
        return Err(ProtocolError("too many arguments".into()));
    }
    Ok(Some((args.into_iter().map(std::borrow::Cow::Owned).collect(), nl + 1)))
}

/// C's `isspace`: what separates inline arguments and may follow a closing quote.
fn is_space(c: u8) -> bool {
    matches!(c, b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c)
}

fn hex_digit(c: u8) -> Option<u8> {
    (c as char).to_digit(16).map(|d| d as u8)
}

/// Splits an inline command as Redis' `sdssplitargs` does; None for unbalanced quotes: a quoted
/// part not closed, or its closing quote followed by something other than a space or the end.
/// Quotes may open within an argument (`a"b c"` is `ab c`); within double quotes `\n`, `\r`,
/// `\t`, `\b`, `\a` and `\xHH` are escapes and `\` takes any other byte as it is; within single
/// quotes only `\'` is.
fn split_inline(line: &[u8]) -> Option<Vec<Vec<u8>>> {
    let at = |i: usize| line.get(i).copied();
    let mut args = Vec::new();
    let mut p = 0;
    loop {
        while at(p).is_some_and(is_space) {
            p += 1;
        }
        if at(p).is_none() {
            return Some(args);
        }
        let mut arg = Vec::new();
        let mut quote: Option<u8> = None;
        loop {
            let Some(c) = at(p) else {
                if quote.is_some() {
                    return None;
                }
                break;
            };
            p += 1;
            match quote {
                Some(q) if c == q => {
                    if at(p).is_some_and(|n| !is_space(n)) {
                        return None;
                    }
                    break;
                }
                Some(b'"') if c == b'\\' => match (at(p), at(p + 1).and_then(hex_digit), at(p + 2).and_then(hex_digit))
                {
                    (Some(b'x'), Some(hi), Some(lo)) => {
                        arg.push(hi << 4 | lo);
                        p += 3;
                    }
                    (Some(e), _, _) => {
                        arg.push(match e {
                            b'n' => b'\n',
                            b'r' => b'\r',
                            b't' => b'\t',
                            b'b' => 0x08,
                            b'a' => 0x07,
                            other => other,
                        });
                        p += 1;
                    }
                    // A backslash last: the quote is not closed.
                    (None, _, _) => arg.push(c),
                },
                Some(b'\'') if c == b'\\' && at(p) == Some(b'\'') => {
                    arg.push(b'\'');
                    p += 1;
                }
                Some(_) => arg.push(c),
                None => match c {
                    b' ' | b'\t' | b'\n' | b'\r' => break,
                    b'"' | b'\'' => quote = Some(c),
                    _ => arg.push(c),
                },
            }
        }
        args.push(arg);
    }
}

fn num(out: &mut Vec<u8>, n: impl itoa::Integer) {
    out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
}

/// A reply, encoded for the connection's protocol version.
#[derive(Clone, Debug, PartialEq)]
pub enum Reply {
    /// `+OK`
    Simple(String),
    /// `-ERR ...` (the text includes the error code word).
    Error(String),
    /// `:n`
    Int(i64),
    /// A bulk string.
    Bulk(Vec<u8>),
    /// The null reply (nil bulk in RESP2).
    Nil,
    /// An array.
    Array(Vec<Reply>),
    /// A map (a flat array in RESP2).
    Map(Vec<(Reply, Reply)>),
    /// One reply another node encoded for this connection's protocol, relayed as it is.
    Encoded(Vec<u8>),
    /// A set (RESP3 `~`; an array in RESP2).
    Set(Vec<Reply>),
    /// A double (RESP3 `,`; a bulk string in RESP2), written as Redis 7.0 writes it (`%.17g`).
    Double(f64),
    /// The null array (`*-1` in RESP2: an aborted EXEC, a timed-out blocking pop).
    NilArray,
    /// A push message (RESP3 `>`; an array in RESP2): what pub/sub delivers.
    Push(Vec<Reply>),
    /// Several replies to one command, one after the other (SUBSCRIBE confirms each channel).
    Many(Vec<Reply>),
    /// An array of `len` replies other nodes encoded for this connection's protocol, given
    /// back to back in `items` (regions' parts of one reply).
    EncodedItems {
        /// How many replies `items` holds.
        len: usize,
        /// The replies, encoded.
        items: Vec<u8>,
    },
}

/// Sends one command to the Redis port at `addr` (after AUTH with `password`, if any) and
/// returns its reply as sent: a one-off connection for messages between nodes.
pub async fn call(addr: &str, password: Option<&str>, args: &[&[u8]]) -> std::io::Result<Vec<u8>> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await?;
    let mut req = Vec::new();
    let mut expect = 1;
    if let Some(p) = password {
        Reply::Array(vec![Reply::bulk("AUTH"), Reply::bulk(p)]).encode(2, &mut req);
        expect += 1;
    }
    Reply::Array(args.iter().map(|a| Reply::bulk(*a)).collect()).encode(2, &mut req);
    s.write_all(&req).await?;
    let mut buf = Vec::new();
    loop {
        if s.read_buf(&mut buf).await? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        // Replies to AUTH and to a one-line command: the last line is the one wanted.
        let lines: Vec<&[u8]> = buf.split_inclusive(|&b| b == b'\n').filter(|l| l.ends_with(b"\r\n")).collect();
        if lines.len() >= expect {
            return Ok(lines.last().map(|l| l.to_vec()).unwrap_or_default());
        }
    }
}

/// An aggregate's header (`kind` and length) and its items.
fn aggregate(kind: u8, items: &[Reply], proto: u8, out: &mut Vec<u8>) {
    out.push(kind);
    num(out, items.len());
    out.extend_from_slice(b"\r\n");
    for i in items {
        i.encode(proto, out);
    }
}

/// A double as Redis 7.0 replies it: C's `%.17g` (17 significant digits, trailing zeros
/// dropped, an exponent below 1e-4 and from 1e17), `inf`, `-inf` and `nan`.
pub fn fmt_double(d: f64) -> String {
    if d.is_nan() {
        return "nan".into();
    }
    if d.is_infinite() {
        return if d > 0.0 { "inf" } else { "-inf" }.into();
    }
    if d == 0.0 {
        return if d.is_sign_negative() { "-0" } else { "0" }.into();
    }
    let sci = format!("{d:.16e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if !(-4..17).contains(&exp) {
        let m = trim_zeros(mantissa);
        let sign = if exp < 0 { '-' } else { '+' };
        return format!("{m}e{sign}{:02}", exp.unsigned_abs());
    }
    let decimals = usize::try_from(16 - exp).unwrap_or(0);
    trim_zeros(&format!("{d:.decimals$}")).to_string()
}

/// `s` without the zeros that end its fraction, nor a point left alone.
fn trim_zeros(s: &str) -> &str {
    if !s.contains('.') {
        return s;
    }
    s.trim_end_matches('0').trim_end_matches('.')
}

impl Reply {
    /// `+OK`.
    pub fn ok() -> Reply {
        Reply::Simple("OK".into())
    }
    /// An error reply; `msg` starts with its code (ERR, WRONGTYPE, NOAUTH, ...).
    pub fn err(msg: impl Into<String>) -> Reply {
        Reply::Error(msg.into())
    }
    /// A bulk string from anything byte-like.
    pub fn bulk(b: impl Into<Vec<u8>>) -> Reply {
        Reply::Bulk(b.into())
    }
    /// Whether it is a push message (or only push messages), which CLIENT REPLY OFF does not
    /// hold back.
    pub fn is_push(&self) -> bool {
        match self {
            Reply::Push(_) => true,
            Reply::Many(v) => !v.is_empty() && v.iter().all(Reply::is_push),
            _ => false,
        }
    }

    /// Bulk or nil.
    pub fn opt(b: Option<Vec<u8>>) -> Reply {
        b.map_or(Reply::Nil, Reply::Bulk)
    }

    /// Appends the wire form to `out` for protocol version `proto` (2 or 3).
    pub fn encode(&self, proto: u8, out: &mut Vec<u8>) {
        match self {
            Reply::Simple(s) => {
                out.push(b'+');
                out.extend(s.bytes().filter(|&b| b != b'\r' && b != b'\n'));
                out.extend_from_slice(b"\r\n");
            }
            Reply::Error(s) => {
                out.push(b'-');
                out.extend(s.bytes().map(|b| if b == b'\r' || b == b'\n' { b' ' } else { b }));
                out.extend_from_slice(b"\r\n");
            }
            Reply::Int(n) => {
                out.push(b':');
                num(out, *n);
                out.extend_from_slice(b"\r\n");
            }
            Reply::Bulk(b) => {
                out.push(b'$');
                num(out, b.len());
                out.extend_from_slice(b"\r\n");
                out.extend_from_slice(b);
                out.extend_from_slice(b"\r\n");
            }
            Reply::Nil => out.extend_from_slice(if proto >= 3 { b"_\r\n" } else { b"$-1\r\n" }),
            Reply::Encoded(b) => out.extend_from_slice(b),
            Reply::EncodedItems { len, items } => {
                out.push(b'*');
                num(out, *len);
                out.extend_from_slice(b"\r\n");
                out.extend_from_slice(items);
            }
            Reply::Array(items) => aggregate(b'*', items, proto, out),
            Reply::Set(items) => aggregate(if proto >= 3 { b'~' } else { b'*' }, items, proto, out),
            Reply::Push(items) => aggregate(if proto >= 3 { b'>' } else { b'*' }, items, proto, out),
            Reply::Many(replies) => {
                for r in replies {
                    r.encode(proto, out);
                }
            }
            Reply::NilArray => out.extend_from_slice(if proto >= 3 { b"_\r\n" } else { b"*-1\r\n" }),
            Reply::Double(d) => {
                let text = fmt_double(*d);
                if proto >= 3 {
                    out.push(b',');
                    out.extend_from_slice(text.as_bytes());
                    out.extend_from_slice(b"\r\n");
                } else {
                    Reply::Bulk(text.into_bytes()).encode(proto, out);
                }
            }
            Reply::Map(pairs) => {
                if proto >= 3 {
                    out.push(b'%');
                    num(out, pairs.len());
                } else {
                    out.push(b'*');
                    num(out, pairs.len() * 2);
                }
                out.extend_from_slice(b"\r\n");
                for (k, v) in pairs {
                    k.encode(proto, out);
                    v.encode(proto, out);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const L: Limits = Limits { max_request_bytes: 1 << 20, max_args: 1024 };

    #[test]
    fn doubles_read_as_redis_7_0_writes_them() {
        let cases: [(f64, &str); 12] = [
            (1.0, "1"),
            (1.5, "1.5"),
            (-2.25, "-2.25"),
            (0.1, "0.10000000000000001"),
            (1e17, "1e+17"),
            (12345678901234567.0, "12345678901234568"),
            (0.0001, "0.0001"),
            (0.00001, "1.0000000000000001e-05"),
            (f64::INFINITY, "inf"),
            (f64::NEG_INFINITY, "-inf"),
            (0.0, "0"),
            (3.0e-300, "3.0000000000000002e-300"),
        ];
        for (d, want) in cases {
            assert_eq!(fmt_double(d), want, "{d:e}");
        }
    }

    #[test]
    fn multibulk_and_partial_input() {
        let req = b"*3\r\n$3\r\nSET\r\n$1\r\na\r\n$5\r\nhello\r\n";
        let (args, used) = parse(req, L).expect("ok").expect("complete");
        assert_eq!(
            args.iter().map(|a| a.to_vec()).collect::<Vec<_>>(),
            vec![b"SET".to_vec(), b"a".to_vec(), b"hello".to_vec()]
        );
        assert_eq!(used, req.len());
        for cut in 0..req.len() {
            assert!(matches!(parse(&req[..cut], L), Ok(None)), "prefix of {cut} bytes");
        }
    }

    #[test]
    fn inline_with_quotes() {
        let (args, used) = parse(b"set k \"a b\\n\" 'c d'\r\nGET", L).expect("ok").expect("complete");
        assert_eq!(
            args.iter().map(|a| a.to_vec()).collect::<Vec<_>>(),
            vec![b"set".to_vec(), b"k".to_vec(), b"a b\n".to_vec(), b"c d".to_vec()]
        );
        assert_eq!(used, 21);
    }

    #[test]
    fn bad_input_is_an_error() {
        assert!(parse(b"*x\r\n", L).is_err());
        assert!(parse(b"*1\r\n+foo\r\n", L).is_err());
        assert!(parse(b"*1\r\n$3\r\nfooXX", L).is_err());
        assert!(parse(b"*1\r\n$99999999999\r\n", L).is_err());
        assert!(parse(b"*2000\r\n", L).is_err());
        assert!(parse(b"set \"unclosed\r\n", L).is_err());
    }

    fn words(req: &[u8]) -> Result<Vec<Vec<u8>>, ProtocolError> {
        let (args, used) = parse(req, L)?.expect("complete");
        assert_eq!(used, req.len(), "{:?}", String::from_utf8_lossy(req));
        Ok(args.iter().map(|a| a.to_vec()).collect())
    }

    /// Inline commands are split as Redis' sdssplitargs splits them.
    #[test]
    fn inline_splits_as_redis() {
        for req in [
            &b"set \"\"\"k\"\"\" v\r\n"[..],
            b"set \"k v\r\n",
            b"set 'k v\r\n",
            b"set \"k\"v x\r\n",
            b"set 'k'v x\r\n",
            b"echo a\"b c\"d\r\n",
            b"echo \"a\\\"\r\n",
            b"echo 'a\\'\r\n",
        ] {
            let unbalanced = ProtocolError("unbalanced quotes in request".into());
            assert_eq!(words(req), Err(unbalanced), "{:?}", String::from_utf8_lossy(req));
        }
        let ok: [(&[u8], &[&[u8]]); 12] = [
            (b"echo 'a\\'b' c\r\n", &[b"echo", b"a'b", b"c"]),
            (b"echo 'a\\nb'\r\n", &[b"echo", b"a\\nb"]),
            (b"echo \"\\x41\\x4a\\b\\a\\q\\x4\"\n", &[b"echo", b"AJ\x08\x07qx4"]),
            (b"echo a\"b c\"\r\n", &[b"echo", b"ab c"]),
            (b"echo \"a\"\x0bb\r\n", &[b"echo", b"a", b"b"]),
            (b"echo a\x0bb\r\n", &[b"echo", b"a\x0bb"]),
            (b"echo a\rb\r\n", &[b"echo", b"a", b"b"]),
            (b" \x0b\x0c echo \t \"\" ''\r\n", &[b"echo", b"", b""]),
            (b"echo \"a b\"\r\n", &[b"echo", b"a b"]),
            (b"echo 'x'\t\r\n", &[b"echo", b"x"]),
            (b"\r\n", &[]),
            (b"\n", &[]),
        ];
        for (req, want) in ok {
            assert_eq!(words(req), Ok(want.iter().map(|w| w.to_vec()).collect()), "{:?}", String::from_utf8_lossy(req));
        }
    }

    /// What Redis 7.0 refuses in a multibulk header gets its words; what it takes but is over
    /// the server's own limits gets the server's.
    #[test]
    fn lengths_redis_refuses() {
        let bulk = Err(ProtocolError("invalid bulk length".into()));
        for req in [
            &b"*1\r\n$-10\r\n"[..],
            b"*1\r\n$-1\r\n",
            b"*1\r\n$2000000000\r\n",
            b"*1\r\n$536870913\r\n",
            b"*1\r\n$99999999999999999999\r\n",
            b"*1\r\n$+3\r\nfoo\r\n",
            b"*1\r\n$03\r\nfoo\r\n",
            b"*1\r\n$ 3\r\nfoo\r\n",
            b"*1\r\n$3x\r\nfoo\r\n",
            b"*1\r\n$\r\n",
        ] {
            assert_eq!(parse(req, L), bulk, "{:?}", String::from_utf8_lossy(req));
        }
        let multibulk = Err(ProtocolError("invalid multibulk length".into()));
        for req in [&b"*2147483648\r\n"[..], b"*+1\r\n", b"*01\r\n", b"*-0\r\n", b"*\r\n", b"*1x\r\n"] {
            assert_eq!(parse(req, L), multibulk, "{:?}", String::from_utf8_lossy(req));
        }
        // Valid for Redis, over this server's limits.
        let mut two = b"*2\r\n$1048576\r\n".to_vec();
        two.resize(two.len() + (1 << 20), b'a');
        two.extend(b"\r\n$1\r\n");
        for req in [&b"*1\r\n$536870912\r\n"[..], b"*1\r\n$1048577\r\n", &two] {
            let e = parse(req, L).expect_err("over the limit");
            assert!(e.0.contains("larger than 1048576 bytes"), "{e:?}");
        }
        let e = parse(b"*2147483647\r\n", L).expect_err("over max_args");
        assert!(e.0.contains("more than 1024"), "{e:?}");
        // A count of zero or less is an empty request, as in Redis.
        assert_eq!(words(b"*-5\r\n"), Ok(vec![]));
        assert_eq!(words(b"*0\r\n"), Ok(vec![]));
        assert_eq!(words(b"*1\r\n$0\r\n\r\n"), Ok(vec![vec![]]));
    }

    #[test]
    fn resp3_nil_and_map() {
        let mut v = Vec::new();
        Reply::Map(vec![(Reply::bulk("a"), Reply::Int(1))]).encode(2, &mut v);
        Reply::Nil.encode(2, &mut v);
        assert_eq!(v, b"*2\r\n$1\r\na\r\n:1\r\n$-1\r\n");
        let mut v = Vec::new();
        Reply::Map(vec![(Reply::bulk("a"), Reply::Int(1))]).encode(3, &mut v);
        Reply::Nil.encode(3, &mut v);
        assert_eq!(v, b"%1\r\n$1\r\na\r\n:1\r\n_\r\n");
    }
}
