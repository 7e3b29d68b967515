//! What the bench can measure of a server process, and the `redis-server` child.
//!
//! For an engine behind a server, this process's /proc/self/io and getrusage only show the
//! client; the storage work happens in the server. A child on this machine is read through
//! /proc/<pid>; a Halyard server elsewhere only through its Prometheus endpoint, when given;
//! otherwise the figures are unknown and reported as such rather than guessed.

use super::api::{disk_bytes, EngineStats, ServerSample};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How to measure a server.
pub(super) enum Probe {
    /// A child process on this machine, with its data directory.
    Child { pid: u32, data: PathBuf },
    /// A Halyard server's Prometheus endpoint.
    Metrics(String),
    /// Nothing can be read; the reason is reported.
    Blind(String),
}

impl Probe {
    /// Reads the counters now. Failures leave fields `None` and say why in `source`.
    pub(super) fn sample(&self) -> ServerSample {
        match self {
            Probe::Child { pid, data } => {
                let io = std::fs::read_to_string(format!("/proc/{pid}/io")).unwrap_or_default();
                let field = |name: &str| proc_field(&io, name);
                let write = field("write_bytes").map(|w| w.saturating_sub(field("cancelled_write_bytes").unwrap_or(0)));
                let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
                ServerSample {
                    source: format!("server process /proc/{pid}"),
                    read_bytes: field("read_bytes"),
                    write_bytes: write,
                    cpu_seconds: proc_cpu_seconds(*pid),
                    disk_bytes: Some(disk_bytes(data)),
                    peak_rss_bytes: proc_field(&status.replace(" kB", ""), "VmHWM").map(|kb| kb * 1024),
                    stall_seconds: None,
                    net_bytes: None,
                    shipped_bytes: None,
                    image_bytes: None,
                    l0_bytes: None,
                }
            }
            Probe::Metrics(url) => match http_get(url) {
                Ok(body) => {
                    let m = |name: &str| metric(&body, name);
                    let cpu = match (m("halyard_cpu_user_seconds_total"), m("halyard_cpu_system_seconds_total")) {
                        (Some(u), Some(s)) => Some(u + s),
                        _ => None,
                    };
                    ServerSample {
                        source: format!("server metrics {url}"),
                        read_bytes: m("halyard_engine_device_read_bytes_total").map(|v| v as u64),
                        write_bytes: m("halyard_engine_device_write_bytes_total").map(|v| v as u64),
                        cpu_seconds: cpu,
                        disk_bytes: m("halyard_engine_space_allocated_bytes").map(|v| v as u64),
                        peak_rss_bytes: None,
                        stall_seconds: m("halyard_engine_stall_seconds_total"),
                        net_bytes: None,
                        shipped_bytes: None,
                        image_bytes: None,
                        l0_bytes: m("halyard_engine_l0_bytes").map(|v| v as u64),
                    }
                }
                Err(e) => {
                    ServerSample { source: format!("server metrics {url} unreadable: {e}"), ..Default::default() }
                }
            },
            Probe::Blind(why) => ServerSample { source: why.clone(), ..Default::default() },
        }
    }

    /// Resets the child's peak-RSS mark so that the next sample covers one phase.
    pub(super) fn reset_peak(&self) {
        if let Probe::Child { pid, .. } = self {
            let _ = std::fs::write(format!("/proc/{pid}/clear_refs"), "5");
        }
    }

    /// The engine's stats: everything about a server engine is in `server`.
    pub(super) fn stats(&self) -> EngineStats {
        let s = self.sample();
        EngineStats {
            device_read_bytes: None,
            device_write_bytes: None,
            stall_seconds: s.stall_seconds.unwrap_or(f64::NAN),
            server: Some(s),
            backup: None,
            counters: Default::default(),
            gauges: Default::default(),
        }
    }

    /// For the settings: where the server-side figures come from.
    pub(super) fn describe(&self) -> String {
        match self {
            Probe::Child { pid, .. } => format!("/proc/{pid} (io, stat, status) and the data directory"),
            Probe::Metrics(url) => format!("{url} (engine device bytes, CPU, space, stalls)"),
            Probe::Blind(why) => why.clone(),
        }
    }
}

/// The probe of a remote server: its metrics when it is Halyard and `--metrics` is given.
pub(super) fn remote_probe(halyard: bool, metrics: Option<&str>) -> Probe {
    match (halyard, metrics) {
        (true, Some(url)) => Probe::Metrics(url.to_string()),
        (true, None) => Probe::Blind(
            "not measured (no --metrics): device bytes, space and stalls unknown, CPU is the client's".into(),
        ),
        (false, _) => Probe::Blind(
            "not measured (not a Halyard server, no metrics): device bytes, space and stalls unknown, \
             CPU is the client's"
                .into(),
        ),
    }
}

/// `name: value` from /proc text.
fn proc_field(text: &str, name: &str) -> Option<u64> {
    text.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(':')?.trim().parse().ok())
}

/// utime + stime of a process (all its threads) in seconds, from /proc/<pid>/stat.
fn proc_cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces and parentheses: fields are counted after the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    // SAFETY: sysconf has no memory effects.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    (hz > 0).then(|| ticks as f64 / hz as f64)
}

/// The value of an unlabelled Prometheus sample.
pub(super) fn metric_of(body: &str, name: &str) -> Option<f64> {
    metric(body, name)
}

fn metric(body: &str, name: &str) -> Option<f64> {
    body.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

/// The body of an HTTP GET (the server answers with Content-Length and closes).
pub(super) fn http_get(url: &str) -> Result<String, String> {
    let rest = url.strip_prefix("http://").ok_or("not an http:// URL")?;
    let (host, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let addr = host.to_socket_addrs().map_err(|e| e.to_string())?.next().ok_or("no address")?;
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(Duration::from_secs(10))).map_err(|e| e.to_string())?;
    write!(s, "GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n").map_err(|e| e.to_string())?;
    let mut text = String::new();
    s.read_to_string(&mut text).map_err(|e| e.to_string())?;
    let (head, body) = text.split_once("\r\n\r\n").ok_or("no HTTP header")?;
    let status = head.lines().next().unwrap_or("");
    if status.split_whitespace().nth(1) != Some("200") {
        return Err(status.to_string());
    }
    Ok(body.to_string())
}

/// A loopback port nobody listens on now. Another process may take it before the server
/// binds it; the caller retries then.
fn free_port() -> Result<u16, String> {
    let l = TcpListener::bind("127.0.0.1:0").map_err(|e| format!("no free loopback port: {e}"))?;
    l.local_addr().map(|a| a.port()).map_err(|e| e.to_string())
}

/// Stops a server child: SIGTERM (a clean stop), then SIGKILL if it takes over 10 s.
pub(super) fn stop_child(child: &mut Child) {
    // SAFETY: kill only signals our own child, which has not been reaped yet.
    unsafe {
        libc::kill(child.id() as libc::pid_t, libc::SIGTERM);
    }
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(10) {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// A `redis-server` child, stopped when dropped (also when the bench fails or unwinds).
pub(super) struct RedisChild {
    child: Child,
    /// Its port on 127.0.0.1.
    pub(super) port: u16,
    /// Its data directory (AOF).
    pub(super) data: PathBuf,
    /// Its command-line settings, for the report.
    pub(super) args: Vec<String>,
}

impl RedisChild {
    /// Starts `redis-server` with an append-only file synced every second, keeping its data in
    /// `dir/data` and its log in `dir/redis.log` (so that space amplification counts the AOF only).
    pub(super) fn spawn(dir: &Path) -> Result<RedisChild, String> {
        let data = dir.join("data");
        std::fs::create_dir_all(&data).map_err(|e| format!("cannot create {}: {e}", data.display()))?;
        let log = dir.join("redis.log");
        let mut last = String::new();
        for _ in 0..3 {
            let port = free_port()?;
            let args: Vec<String> = [
                "--port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "yes",
                "--appendfsync",
                "everysec",
                "--daemonize",
                "no",
                "--dir",
                data.to_str().ok_or("the --dir path is not UTF-8")?,
            ]
            .iter()
            .map(|s| s.to_string())
            .collect();
            let out = std::fs::File::create(&log).map_err(|e| format!("cannot create {}: {e}", log.display()))?;
            let err = out.try_clone().map_err(|e| e.to_string())?;
            let mut cmd = Command::new("redis-server");
            cmd.args(&args).stdin(Stdio::null()).stdout(out).stderr(err);
            // A bench killed outright must not leave a server behind. The signal follows the
            // death of the spawning thread, which is the one that runs the engine to its end.
            // SAFETY: prctl is async-signal-safe and touches no memory of ours.
            unsafe {
                use std::os::unix::process::CommandExt;
                cmd.pre_exec(|| {
                    libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                    Ok(())
                });
            }
            let child = cmd
                .spawn()
                .map_err(|e| format!("cannot start redis-server: {e} (install it: apt-get install redis-server)"))?;
            let mut r = RedisChild { child, port, data: data.clone(), args };
            match r.wait_ready(Duration::from_secs(10)) {
                Ok(()) => return Ok(r),
                Err(e) => {
                    let text = std::fs::read_to_string(&log).unwrap_or_default();
                    let tail: Vec<&str> = text.lines().rev().take(5).collect();
                    last = format!("{e}; log: {}", tail.into_iter().rev().collect::<Vec<_>>().join(" | "));
                    // Dropping `r` stops the child. Only a lost race for the port is retried.
                    if !text.contains("Address already in use") {
                        break;
                    }
                }
            }
        }
        Err(format!("redis-server did not start: {last}"))
    }

    /// Pings until the server answers, failing early if it exits.
    fn wait_ready(&mut self, limit: Duration) -> Result<(), String> {
        let t0 = Instant::now();
        while t0.elapsed() < limit {
            if let Ok(Some(st)) = self.child.try_wait() {
                return Err(format!("redis-server exited with {st}"));
            }
            if let Ok(mut s) = TcpStream::connect(("127.0.0.1", self.port)) {
                let _ = s.set_read_timeout(Some(Duration::from_secs(1)));
                let mut line = String::new();
                let sent = s.write_all(b"PING\r\n").is_ok();
                if sent && BufReader::new(&s).read_line(&mut line).is_ok() && line.starts_with("+PONG") {
                    return Ok(());
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Err(format!("redis-server did not answer PING within {limit:?}"))
    }

    /// Process id.
    pub(super) fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for RedisChild {
    fn drop(&mut self) {
        // SIGTERM lets Redis flush its AOF and exit.
        stop_child(&mut self.child);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_proc_and_prometheus_text() {
        assert_eq!(proc_field("rchar: 5\nread_bytes: 4096\n", "read_bytes"), Some(4096));
        assert_eq!(proc_field("read_bytes: 1\n", "write_bytes"), None);
        let body = "# HELP x\nhalyard_cpu_user_seconds_total 1.5\nhalyard_commands_total{cmd=\"get\"} 3\n";
        assert_eq!(metric(body, "halyard_cpu_user_seconds_total"), Some(1.5));
        assert_eq!(metric(body, "halyard_commands_total"), None);
        assert!(proc_cpu_seconds(std::process::id()).is_some());
    }
}
