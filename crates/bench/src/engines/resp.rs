//! A server spoken to in RESP2: a Halyard server's Redis front end, a running Redis, or a
//! `redis-server` child started for the run.
//!
//! The client is written here rather than taken from a crate so that what is timed is one
//! request written and one reply read on a blocking socket, with nothing pooled or pipelined
//! behind the bench's back: each bench thread owns one connection, like a YCSB client.

#![expect(clippy::indexing_slicing, reason = "replies are indexed per request of the batch that produced them")]

use super::api::{bench_thread, Engine, EngineConfig, EngineStats};
use super::server::{remote_probe, Probe, RedisChild};
use crate::args::Target;
use crate::workload::Workload;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

/// A RESP2 reply.
#[derive(Debug, PartialEq)]
pub(super) enum Reply {
    /// `+...`
    Status(String),
    /// `:n`
    Int(i64),
    /// `$n ...` (`None`: the null bulk string).
    Bulk(Option<Vec<u8>>),
    /// `*n ...` (`None`: the null array).
    Array(Option<Vec<Reply>>),
}

/// One blocking RESP2 connection.
pub(super) struct Conn {
    r: BufReader<TcpStream>,
    w: BufWriter<TcpStream>,
}

impl Conn {
    pub(super) fn open(addr: &str) -> Result<Conn, String> {
        let a =
            addr.to_socket_addrs().map_err(|e| format!("{addr}: {e}"))?.next().ok_or(format!("{addr}: no address"))?;
        let s = TcpStream::connect_timeout(&a, Duration::from_secs(5)).map_err(|e| format!("connect {addr}: {e}"))?;
        // Requests are single small writes answered before the next: Nagle would add delays.
        s.set_nodelay(true).map_err(|e| e.to_string())?;
        // A server that stops answering fails the phase instead of hanging the bench.
        s.set_read_timeout(Some(Duration::from_secs(60))).map_err(|e| e.to_string())?;
        let w = s.try_clone().map_err(|e| e.to_string())?;
        Ok(Conn { r: BufReader::with_capacity(64 << 10, s), w: BufWriter::with_capacity(64 << 10, w) })
    }

    /// Sends a command and reads its reply; an error reply becomes `Err`.
    pub(super) fn call(&mut self, args: &[&[u8]]) -> Result<Reply, String> {
        let io = |e: std::io::Error| format!("connection: {e}");
        write!(self.w, "*{}\r\n", args.len()).map_err(io)?;
        for a in args {
            write!(self.w, "${}\r\n", a.len()).map_err(io)?;
            self.w.write_all(a).map_err(io)?;
            self.w.write_all(b"\r\n").map_err(io)?;
        }
        self.w.flush().map_err(io)?;
        read_reply(&mut self.r)
    }
}

fn read_line(r: &mut impl BufRead) -> Result<Vec<u8>, String> {
    let mut line = Vec::new();
    r.read_until(b'\n', &mut line).map_err(|e| format!("connection: {e}"))?;
    if !line.ends_with(b"\r\n") {
        return Err("connection closed by the server".into());
    }
    line.truncate(line.len() - 2);
    Ok(line)
}

fn read_reply(r: &mut impl BufRead) -> Result<Reply, String> {
    let line = read_line(r)?;
    let (&tag, rest) = line.split_first().ok_or("empty reply line")?;
    let text = String::from_utf8_lossy(rest);
    let int = || text.parse::<i64>().map_err(|_| format!("bad length or integer `{text}`"));
    match tag {
        b'+' => Ok(Reply::Status(text.into_owned())),
        b'-' => Err(format!("server error: {text}")),
        b':' => Ok(Reply::Int(int()?)),
        b'$' => {
            let n = int()?;
            if n < 0 {
                return Ok(Reply::Bulk(None));
            }
            let mut v = vec![0; n as usize + 2];
            r.read_exact(&mut v).map_err(|e| format!("connection: {e}"))?;
            v.truncate(n as usize);
            Ok(Reply::Bulk(Some(v)))
        }
        b'*' => {
            let n = int()?;
            if n < 0 {
                return Ok(Reply::Array(None));
            }
            (0..n).map(|_| read_reply(r)).collect::<Result<_, _>>().map(|v| Reply::Array(Some(v)))
        }
        t => Err(format!("unexpected reply type `{}`", t as char)),
    }
}

/// Why a Redis cannot run Run E, in the report.
const NO_SCAN: &str = "Redis has no ordered range scan (SCAN walks its hash table in no key order; \
                       HALYARD.RANGE is Halyard's), so run-e is not run on this server";

/// A RESP2 server with one connection per bench thread.
pub(super) struct Resp {
    // Field order: the connections close before the child is stopped.
    conns: Vec<Mutex<Conn>>,
    addr: String,
    /// INFO says `halyard_version`: HALYARD.RANGE serves the scans.
    halyard: bool,
    server: String,
    probe: Probe,
    child: Option<RedisChild>,
}

impl Resp {
    /// Connects to a running server.
    pub(super) fn connect(t: &Target, cfg: &EngineConfig) -> Result<Resp, String> {
        Resp::open(t.addr.clone(), cfg, None)
    }

    /// Starts a `redis-server` child under `dir` and connects to it.
    pub(super) fn spawn_redis(dir: &Path, cfg: &EngineConfig) -> Result<Resp, String> {
        let child = RedisChild::spawn(dir)?;
        Resp::open(format!("127.0.0.1:{}", child.port), cfg, Some(child))
    }

    fn open(addr: String, cfg: &EngineConfig, child: Option<RedisChild>) -> Result<Resp, String> {
        let conns: Vec<Mutex<Conn>> =
            (0..cfg.threads.max(1)).map(|_| Conn::open(&addr).map(Mutex::new)).collect::<Result<_, _>>()?;
        let info = match conns[0].lock().unwrap_or_else(|p| p.into_inner()).call(&[b"INFO", b"server"])? {
            Reply::Bulk(Some(v)) => String::from_utf8_lossy(&v).into_owned(),
            r => return Err(format!("INFO server: unexpected reply {r:?}")),
        };
        let field = |k: &str| info.lines().find_map(|l| l.strip_prefix(k)?.strip_prefix(':')).map(str::trim);
        let (halyard, server) = match (field("halyard_version"), field("redis_version")) {
            (Some(v), _) => (true, format!("Halyard {v}")),
            (None, v) => (false, format!("Redis {}", v.unwrap_or("(version unknown)"))),
        };
        let probe = match &child {
            Some(c) => Probe::Child { pid: c.pid(), data: c.data.clone() },
            None => remote_probe(halyard, cfg.metrics.as_deref()),
        };
        Ok(Resp { conns, addr, halyard, server, probe, child })
    }

    /// This thread's connection.
    fn call(&self, args: &[&[u8]]) -> Result<Reply, String> {
        let c = &self.conns[bench_thread() % self.conns.len()];
        c.lock().unwrap_or_else(|p| p.into_inner()).call(args)
    }
}

impl Engine for Resp {
    fn put(&self, key: &[u8], value: &[u8]) -> Result<(), String> {
        match self.call(&[b"SET", key, value])? {
            Reply::Status(s) if s == "OK" => Ok(()),
            r => Err(format!("SET: unexpected reply {r:?}")),
        }
    }

    fn get(&self, key: &[u8]) -> Result<Option<usize>, String> {
        match self.call(&[b"GET", key])? {
            Reply::Bulk(v) => Ok(v.map(|v| v.len())),
            r => Err(format!("GET: unexpected reply {r:?}")),
        }
    }

    fn scan(&self, start: &[u8], len: usize) -> Result<(usize, u64), String> {
        if !self.halyard {
            return Err(NO_SCAN.into());
        }
        let limit = len.to_string();
        match self.call(&[b"HALYARD.RANGE", start, b"", b"LIMIT", limit.as_bytes()])? {
            Reply::Array(Some(items)) => {
                let bytes = items.iter().map(|i| if let Reply::Bulk(Some(b)) = i { b.len() as u64 } else { 0 }).sum();
                Ok((items.len() / 2, bytes))
            }
            r => Err(format!("HALYARD.RANGE: unexpected reply {r:?}")),
        }
    }

    fn stats(&self) -> EngineStats {
        self.probe.stats()
    }

    fn settings(&self) -> Vec<(String, String)> {
        let mut v = vec![
            ("server".to_string(), self.server.clone()),
            ("address".into(), self.addr.clone()),
            ("protocol".into(), "RESP2, one blocking connection per bench thread, no pipelining".into()),
            ("connections".into(), self.conns.len().to_string()),
            (
                "scans".into(),
                if self.halyard { "HALYARD.RANGE start \"\" LIMIT n".into() } else { NO_SCAN.to_string() },
            ),
            ("server_measures".into(), self.probe.describe()),
        ];
        if let Some(c) = &self.child {
            let args: Vec<&str> = c.args.iter().map(|a| if a.is_empty() { "\"\"" } else { a }).collect();
            v.push(("command".into(), format!("redis-server {}", args.join(" "))));
            v.push(("budgets".into(), "--cache-mb, --l0-mb, --growth-factor and --sync do not apply".into()));
        } else {
            v.push(("budgets".into(), "the server's own settings (--cache-mb etc. do not apply)".into()));
        }
        v
    }

    fn unsupported(&self, w: Workload) -> Option<String> {
        (w == Workload::RunE && !self.halyard).then(|| NO_SCAN.to_string())
    }

    fn halyard_server(&self) -> bool {
        self.halyard
    }

    fn begin_phase(&self) {
        self.probe.reset_peak();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_replies() {
        let mut r: &[u8] = b"+OK\r\n:42\r\n$3\r\nabc\r\n$-1\r\n*2\r\n$1\r\nk\r\n$0\r\n\r\n-ERR no\r\n$5\r\nab";
        assert_eq!(read_reply(&mut r).unwrap(), Reply::Status("OK".into()));
        assert_eq!(read_reply(&mut r).unwrap(), Reply::Int(42));
        assert_eq!(read_reply(&mut r).unwrap(), Reply::Bulk(Some(b"abc".to_vec())));
        assert_eq!(read_reply(&mut r).unwrap(), Reply::Bulk(None));
        let arr = Reply::Array(Some(vec![Reply::Bulk(Some(b"k".to_vec())), Reply::Bulk(Some(Vec::new()))]));
        assert_eq!(read_reply(&mut r).unwrap(), arr);
        assert!(read_reply(&mut r).unwrap_err().contains("ERR no"));
        assert!(read_reply(&mut r).is_err(), "a truncated bulk is an error");
    }
}
