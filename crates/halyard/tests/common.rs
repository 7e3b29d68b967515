//! Starting a real `halyard serve` process (and a real `redis-server`) for tests.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    missing_docs,
    reason = "test code: a failure stops where it happened"
)]
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A port no other test of this process was given, below the kernel's ephemeral range
/// (32768..): a port from `bind(0)` can be taken by some client's outgoing connection before
/// the server that was told to use it binds it, and two parallel tests could get the same one.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU16, Ordering};
    static NEXT: AtomicU16 = AtomicU16::new(0);
    let _ = NEXT.compare_exchange(0, (std::process::id() % 1000) as u16 * 12, Ordering::SeqCst, Ordering::SeqCst);
    for _ in 0..12_000 {
        let p = 20_000 + NEXT.fetch_add(1, Ordering::SeqCst) % 12_000;
        if TcpListener::bind(("127.0.0.1", p)).is_ok() {
            return p;
        }
    }
    panic!("no free port in 20000..32000");
}

fn wait_for(port: u16) {
    let t0 = Instant::now();
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(t0.elapsed() < Duration::from_secs(30), "server on port {port} did not come up");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A `halyard serve` process; SIGTERM and wait on drop.
pub struct Server {
    pub child: Option<Child>,
    pub resp: u16,
    pub native: u16,
    pub http: u16,
    pub dir: std::path::PathBuf,
}

impl Server {
    pub fn start(dir: &std::path::Path, extra: &[&str]) -> Server {
        Server::start_on(dir, "127.0.0.1", extra)
    }

    /// A server whose RESP and native listeners bind `host` (the HTTP one stays on loopback).
    pub fn start_on(dir: &std::path::Path, host: &str, extra: &[&str]) -> Server {
        let (resp, native, http) = (free_port(), free_port(), free_port());
        let child = Command::new(env!("CARGO_BIN_EXE_halyard"))
            .args(["serve", "--dir"])
            .arg(dir)
            .args(["--resp", &format!("{host}:{resp}")])
            .args(["--listen", &format!("{host}:{native}")])
            .args(["--http", &format!("127.0.0.1:{http}")])
            .args(extra)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start halyard serve");
        wait_for(resp);
        Server { child: Some(child), resp, native, http, dir: dir.to_path_buf() }
    }

    /// SIGTERM; returns the exit status.
    pub fn stop(&mut self) -> std::process::ExitStatus {
        let mut c = self.child.take().expect("running");
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc_kill(c.id() as i32, 15) };
        c.wait().expect("wait")
    }

    pub fn conn(&self) -> Resp {
        Resp::connect(self.resp)
    }

    pub fn http_get(&self, path: &str) -> String {
        let mut s = TcpStream::connect(("127.0.0.1", self.http)).expect("http");
        write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").expect("write");
        let mut out = String::new();
        s.read_to_string(&mut out).expect("read");
        out
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if self.child.is_some() {
            self.stop();
        }
    }
}

extern "C" {
    #[link_name = "kill"]
    fn libc_kill(pid: i32, sig: i32) -> i32;
}

/// A `redis-server` for side-by-side comparisons.
pub struct RedisServer {
    child: Child,
    pub port: u16,
    _dir: tempfile::TempDir,
}

impl RedisServer {
    pub fn start() -> RedisServer {
        let port = free_port();
        let dir = tempfile::tempdir().expect("tempdir");
        let child = Command::new("redis-server")
            .args([
                "--port",
                &port.to_string(),
                "--save",
                "",
                "--appendonly",
                "no",
                "--enable-debug-command",
                "yes",
                "--dir",
            ])
            .arg(dir.path())
            .stdout(Stdio::null())
            .spawn()
            .expect("redis-server (apt-get install redis-server)");
        wait_for(port);
        RedisServer { child, port, _dir: dir }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A decoded reply.
#[derive(Debug, Clone, PartialEq)]
pub enum R {
    Simple(String),
    Err(String),
    Int(i64),
    Bulk(Option<Vec<u8>>),
    Array(Option<Vec<R>>),
    Map(Vec<(R, R)>),
    Null,
    /// RESP3 push (pub/sub messages), set and double.
    Push(Vec<R>),
    Set(Vec<R>),
    Double(String),
}

/// A minimal RESP client that sends commands as arrays and decodes replies.
pub struct Resp {
    r: BufReader<TcpStream>,
    w: TcpStream,
}

impl Resp {
    pub fn connect(port: u16) -> Resp {
        let s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(30))).expect("timeout");
        Resp { r: BufReader::new(s.try_clone().expect("clone")), w: s }
    }

    pub fn send(&mut self, args: &[&[u8]]) {
        let mut b = format!("*{}\r\n", args.len()).into_bytes();
        for a in args {
            b.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
            b.extend_from_slice(a);
            b.extend_from_slice(b"\r\n");
        }
        self.w.write_all(&b).expect("write");
    }

    pub fn raw(&mut self, bytes: &[u8]) {
        self.w.write_all(bytes).expect("write");
    }

    pub fn cmd(&mut self, args: &[&str]) -> R {
        let a: Vec<&[u8]> = args.iter().map(|s| s.as_bytes()).collect();
        self.send(&a);
        self.read().expect("reply")
    }

    pub fn read(&mut self) -> Option<R> {
        let mut line = String::new();
        if self.r.read_line(&mut line).ok()? == 0 {
            return None;
        }
        let line = line.trim_end_matches("\r\n");
        let (t, rest) = line.split_at(1);
        Some(match t {
            "+" => R::Simple(rest.into()),
            "-" => R::Err(rest.into()),
            ":" => R::Int(rest.parse().ok()?),
            "_" => R::Null,
            "$" => {
                let n: i64 = rest.parse().ok()?;
                if n < 0 {
                    R::Bulk(None)
                } else {
                    let mut b = vec![0u8; n as usize + 2];
                    self.r.read_exact(&mut b).ok()?;
                    b.truncate(n as usize);
                    R::Bulk(Some(b))
                }
            }
            "*" => {
                let n: i64 = rest.parse().ok()?;
                if n < 0 {
                    R::Array(None)
                } else {
                    R::Array(Some((0..n).map(|_| self.read()).collect::<Option<Vec<_>>>()?))
                }
            }
            "%" => {
                let n: usize = rest.parse().ok()?;
                R::Map((0..n).map(|_| Some((self.read()?, self.read()?))).collect::<Option<Vec<_>>>()?)
            }
            ">" | "~" => {
                let n: usize = rest.parse().ok()?;
                let items = (0..n).map(|_| self.read()).collect::<Option<Vec<_>>>()?;
                if t == ">" {
                    R::Push(items)
                } else {
                    R::Set(items)
                }
            }
            "," => R::Double(rest.into()),
            _ => return None,
        })
    }
}

pub fn bulk(s: &str) -> R {
    R::Bulk(Some(s.as_bytes().to_vec()))
}

pub fn ok() -> R {
    R::Simple("OK".into())
}

pub fn have(tool: &str) -> bool {
    Command::new("sh").arg("-c").arg(format!("command -v {tool}")).output().map(|o| o.status.success()).unwrap_or(false)
}
