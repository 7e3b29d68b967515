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

fn number(s: &[u8], what: &str) -> Result<i64, ProtocolError> {
    std::str::from_utf8(s)
        .ok()
        .and_then(|s| s.parse::<i64>().ok())
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
    if n > limits.max_args as i64 {
        return Err(ProtocolError("invalid multibulk length".into()));
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
        if len < 0 || len as usize > limits.max_request_bytes || total + len as usize > limits.max_request_bytes {
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
    let mut args: Vec<Vec<u8>> = Vec::new();
    let mut cur: Option<Vec<u8>> = None;
    let mut quote: Option<u8> = None;
    let mut bytes = text.iter().copied().peekable();
    while let Some(c) = bytes.next() {
        match (quote, c) {
            (Some(q), _) if c == q => quote = None,
            (Some(b'"'), b'\\') if bytes.peek().is_some() => {
                let e = match bytes.next() {
                    Some(b'n') => b'\n',
                    Some(b'r') => b'\r',
                    Some(b't') => b'\t',
                    x => x.unwrap_or_default(),
                };
                cur.get_or_insert_with(Vec::new).push(e);
            }
            (Some(_), _) => cur.get_or_insert_with(Vec::new).push(c),
            (None, b'"' | b'\'') => {
                quote = Some(c);
                cur.get_or_insert_with(Vec::new);
            }
            (None, b' ' | b'\t') => args.extend(cur.take()),
            (None, _) => cur.get_or_insert_with(Vec::new).push(c),
        }
    }
    if quote.is_some() {
        return Err(ProtocolError("unbalanced quotes in request".into()));
    }
    args.extend(cur);
    if args.len() > limits.max_args {
        return Err(ProtocolError("too many arguments".into()));
    }
    Ok(Some((args.into_iter().map(std::borrow::Cow::Owned).collect(), nl + 1)))
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
            Reply::Array(items) => {
                out.push(b'*');
                num(out, items.len());
                out.extend_from_slice(b"\r\n");
                for i in items {
                    i.encode(proto, out);
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
