//! A connection whose write is stalled inside the engine (an fdatasync or a log write that does
//! not return, as on a device that stopped answering) holds up no other connection: PING on
//! another connection answers at once while the writers are still waiting.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    missing_docs,
    reason = "test code: a failure stops where it happened"
)]

use halyard_engine::{Db, MemStorage, Storage};
use halyard_server::config::{ServerConfig, WriteSync};
use parking_lot::{Condvar, Mutex};
use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// In-memory storage whose syncs (or writes) wait while the gate is closed.
struct Gated {
    inner: MemStorage,
    /// Writes wait at the gate, not syncs.
    writes: bool,
    closed: Mutex<bool>,
    opened: Condvar,
    /// Syncs waiting at the gate now.
    waiting: AtomicUsize,
}

impl Gated {
    fn set_closed(&self, closed: bool) {
        *self.closed.lock() = closed;
        self.opened.notify_all();
    }

    fn pass(&self) {
        let mut closed = self.closed.lock();
        if *closed {
            self.waiting.fetch_add(1, SeqCst);
            while *closed {
                self.opened.wait(&mut closed);
            }
            self.waiting.fetch_sub(1, SeqCst);
        }
    }
}

impl Storage for Gated {
    fn seg_bits(&self) -> u32 {
        self.inner.seg_bits()
    }
    fn read(&self, seg: u32, off: u64, buf: &mut [u8]) -> io::Result<usize> {
        self.inner.read(seg, off, buf)
    }
    fn write(&self, seg: u32, off: u64, buf: &[u8]) -> io::Result<()> {
        if self.writes {
            self.pass();
        }
        self.inner.write(seg, off, buf)
    }
    fn sync(&self) -> io::Result<()> {
        if !self.writes {
            self.pass();
        }
        self.inner.sync()
    }
    fn len(&self) -> io::Result<u64> {
        self.inner.len()
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.inner.set_len(len)
    }
    fn punch(&self, seg: u32, off: u64, len: u64) -> bool {
        self.inner.punch(seg, off, len)
    }
}

/// Opens the gate when the test ends, passed or not, so that the runtime can shut down.
struct OpenOnDrop(Arc<Gated>);

impl Drop for OpenOnDrop {
    fn drop(&mut self) {
        self.0.set_closed(false);
    }
}

fn free_addr() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr").to_string()
}

fn connect(addr: &str) -> TcpStream {
    let t0 = Instant::now();
    loop {
        match TcpStream::connect(addr) {
            Ok(s) => return s,
            Err(e) => assert!(t0.elapsed() < Duration::from_secs(30), "server did not come up: {e}"),
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Sends `cmd` and reads one line of reply within `within`.
fn ask(s: &mut TcpStream, cmd: &str, within: Duration) -> io::Result<String> {
    s.write_all(cmd.as_bytes())?;
    read_line(s, within)
}

fn read_line(s: &mut TcpStream, within: Duration) -> io::Result<String> {
    s.set_read_timeout(Some(within))?;
    let mut line = Vec::new();
    let mut b = [0u8; 1];
    while !line.ends_with(b"\r\n") {
        if s.read(&mut b)? == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        line.push(b[0]);
    }
    Ok(String::from_utf8_lossy(&line).into_owned())
}

/// `sync = always`: every SET waits for an fdatasync that does not return.
#[test]
fn ping_answers_while_other_connections_syncs_are_stalled() {
    stalled_writers_hold_up_no_ping(WriteSync::Always, false, 1);
}

/// `sync = group`: each SET's value fills a log chunk, whose device write does not return.
#[test]
fn ping_answers_while_other_connections_log_writes_are_stalled() {
    stalled_writers_hold_up_no_ping(WriteSync::Group, true, 300 << 10);
}

fn stalled_writers_hold_up_no_ping(sync: WriteSync, gate_writes: bool, value_len: usize) {
    const WORKERS: usize = 2;
    // More stalled writers than the runtime has workers.
    const WRITERS: usize = 2 * WORKERS;
    let seg_bytes = halyard_engine::Options::default().segment_bytes;
    let gated = Arc::new(Gated {
        inner: MemStorage::new(seg_bytes.trailing_zeros()),
        writes: gate_writes,
        closed: Mutex::new(false),
        opened: Condvar::new(),
        waiting: AtomicUsize::new(0),
    });
    let mut cfg = ServerConfig { resp: free_addr(), listen: free_addr(), http: free_addr(), ..ServerConfig::default() };
    cfg.engine.sync = sync;
    cfg.engine.direct_io = false;
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(WORKERS).enable_all().build().expect("runtime");
    // Dropped before the runtime, which waits for its workers.
    let _open = OpenOnDrop(gated.clone());
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let storage: Arc<dyn Storage> = gated.clone();
    let server = rt.spawn(halyard_server::run_with(cfg.clone(), move |opts| Db::open_on(storage, opts), async {
        let _ = stop_rx.await;
    }));

    let mut pinger = connect(&cfg.resp);
    assert_eq!(ask(&mut pinger, "PING\r\n", Duration::from_secs(10)).expect("ping"), "+PONG\r\n");
    let mut writers: Vec<TcpStream> = (0..WRITERS).map(|_| connect(&cfg.resp)).collect();
    for (i, w) in writers.iter_mut().enumerate() {
        let set = format!("SET before{i} v\r\n");
        assert_eq!(ask(w, &set, Duration::from_secs(10)).expect("set"), "+OK\r\n");
    }

    // Every writer's SET now waits for the device, which does not answer.
    gated.set_closed(true);
    let value = "v".repeat(value_len);
    for (i, w) in writers.iter_mut().enumerate() {
        let key = format!("stalled{i}");
        let set = format!("*3\r\n$3\r\nSET\r\n${}\r\n{key}\r\n${value_len}\r\n{value}\r\n", key.len());
        w.write_all(set.as_bytes()).expect("send set");
    }
    let t0 = Instant::now();
    while gated.waiting.load(SeqCst) == 0 {
        assert!(t0.elapsed() < Duration::from_secs(10), "no write reached the gate");
        std::thread::sleep(Duration::from_millis(10));
    }
    // Time for the other writers to block as well (on the sync or behind it).
    std::thread::sleep(Duration::from_millis(300));

    let t1 = Instant::now();
    let pong = ask(&mut pinger, "PING\r\n", Duration::from_secs(2));
    assert!(
        matches!(&pong, Ok(p) if p == "+PONG\r\n"),
        "PING on another connection did not answer within 2 s of {:?} while writes were stalled: {pong:?}",
        t1.elapsed()
    );
    // The writers are still stalled: the PING did not get through because they finished.
    assert!(gated.waiting.load(SeqCst) > 0, "the stall ended before the PING was answered");
    for w in &mut writers {
        w.set_nonblocking(true).expect("nonblocking");
        let mut b = [0u8; 16];
        match w.read(&mut b) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            r => panic!("a stalled SET answered before the gate opened: {r:?}"),
        }
        w.set_nonblocking(false).expect("blocking");
    }

    // Opened, the stalled writes complete.
    gated.set_closed(false);
    for w in &mut writers {
        assert_eq!(read_line(w, Duration::from_secs(10)).expect("stalled set's reply"), "+OK\r\n");
    }
    let _ = stop_tx.send(());
    let r = rt.block_on(async { tokio::time::timeout(Duration::from_secs(30), server).await });
    assert!(matches!(r, Ok(Ok(Ok(())))), "server did not stop cleanly: {r:?}");
}
