//! Counters and latency histograms, rendered in the Prometheus text format.

#![expect(clippy::indexing_slicing, reason = "shard and bucket indexes are reduced within the fixed array sizes")]

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Latency bucket upper bounds in microseconds.
const BUCKETS_US: [u64; 12] = [5, 10, 25, 50, 100, 250, 500, 1000, 2500, 10_000, 100_000, 1_000_000];

/// One thread group's counters, on cache lines of their own: counters every request updates
/// would otherwise bounce between cores.
#[derive(Default)]
#[repr(align(128))]
struct Shard {
    calls: AtomicU64,
    timed: AtomicU64,
    errors: AtomicU64,
    usec: AtomicU64,
    buckets: [AtomicU64; BUCKETS_US.len()],
}

const SHARDS: usize = 8;

fn shard_index() -> usize {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    thread_local! {
        static INDEX: usize = (NEXT.fetch_add(1, Relaxed) as usize) % SHARDS;
    }
    INDEX.with(|i| *i)
}

#[derive(Default)]
pub struct CmdStats {
    shards: [Shard; SHARDS],
}

impl CmdStats {
    /// Counts a call; `usec` is its latency when this call was sampled.
    pub fn record(&self, usec: Option<u64>, error: bool) {
        let s = &self.shards[shard_index()];
        s.calls.fetch_add(1, Relaxed);
        if error {
            s.errors.fetch_add(1, Relaxed);
        }
        if let Some(usec) = usec {
            s.timed.fetch_add(1, Relaxed);
            s.usec.fetch_add(usec, Relaxed);
            if let Some(i) = BUCKETS_US.iter().position(|&b| usec <= b) {
                s.buckets[i].fetch_add(1, Relaxed);
            }
        }
    }

    fn sum(&self, f: impl Fn(&Shard) -> &AtomicU64) -> u64 {
        self.shards.iter().map(|s| f(s).load(Relaxed)).sum()
    }

    pub fn calls(&self) -> u64 {
        self.sum(|s| &s.calls)
    }

    pub fn errors(&self) -> u64 {
        self.sum(|s| &s.errors)
    }

    pub fn timed(&self) -> u64 {
        self.sum(|s| &s.timed)
    }

    pub fn usec(&self) -> u64 {
        self.sum(|s| &s.usec)
    }

    fn bucket(&self, i: usize) -> u64 {
        self.sum(|s| &s.buckets[i])
    }
}

/// Server-wide counters.
#[derive(Default)]
pub struct Metrics {
    pub commands: BTreeMap<&'static str, CmdStats>,
    pub unknown_commands: AtomicU64,
    pub connections_total: AtomicU64,
    pub connections_rejected: AtomicU64,
    pub protocol_errors: AtomicU64,
    pub idle_timeouts: AtomicU64,
    pub auth_failures: AtomicU64,
    pub bytes_in: AtomicU64,
    pub bytes_out: AtomicU64,
}

impl Metrics {
    pub fn new(names: &[&'static str]) -> Metrics {
        Metrics { commands: names.iter().map(|n| (*n, CmdStats::default())).collect(), ..Metrics::default() }
    }

    pub fn total_calls(&self) -> u64 {
        self.commands.values().map(CmdStats::calls).sum()
    }
}

/// CPU seconds (user, system) this process has used.
pub fn cpu_seconds() -> (f64, f64) {
    // SAFETY: getrusage writes into the struct we pass.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointer to a rusage struct.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let t = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    (t(ru.ru_utime), t(ru.ru_stime))
}

/// Everything /metrics shows.
/// `native` = (requests, error replies, bad frames) of the native protocol.
pub fn render(
    m: &Metrics,
    engine: &halyard_engine::Stats,
    connected: usize,
    native: Option<&crate::native::NativeCounters>,
) -> String {
    let native =
        native.map(|n| [&n.requests, &n.errors, &n.bad_frames, &n.bytes_in, &n.bytes_out].map(|c| c.load(Relaxed)));
    let mut o = String::new();
    render_connections(&mut o, m, connected, native);
    render_commands(&mut o, m);
    if let Some([requests, errors, bad, ..]) = native {
        counter(&mut o, "halyard_native_requests_total", "Native protocol requests.", requests as f64);
        counter(&mut o, "halyard_native_errors_total", "Native protocol error replies.", errors as f64);
        counter(&mut o, "halyard_native_bad_frames_total", "Malformed native frames (connection closed).", bad as f64);
    }
    render_cpu(&mut o, m.total_calls() + native.map_or(0, |n| n[0]));
    render_engine_io(&mut o, engine);
    render_engine_work(&mut o, engine);
    o
}

fn counter(o: &mut String, name: &str, help: &str, v: f64) {
    let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} counter\n{name} {v}");
}

fn gauge(o: &mut String, name: &str, help: &str, v: f64) {
    let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {v}");
}

/// Connection and byte counters; `native` as in [`render`], loaded.
fn render_connections(o: &mut String, m: &Metrics, connected: usize, native: Option<[u64; 5]>) {
    let load = |c: &AtomicU64| c.load(Relaxed) as f64;
    counter(o, "halyard_connections_total", "Client connections accepted.", load(&m.connections_total));
    counter(
        o,
        "halyard_connections_rejected_total",
        "Connections refused over --max-clients.",
        load(&m.connections_rejected),
    );
    counter(
        o,
        "halyard_protocol_errors_total",
        "Malformed or oversized requests (connection closed).",
        load(&m.protocol_errors),
    );
    counter(o, "halyard_idle_timeouts_total", "Connections closed for idling.", load(&m.idle_timeouts));
    counter(o, "halyard_auth_failures_total", "Failed AUTH attempts.", load(&m.auth_failures));
    counter(o, "halyard_unknown_commands_total", "Unknown commands.", load(&m.unknown_commands));
    counter(
        o,
        "halyard_network_received_bytes_total",
        "Bytes received from clients (RESP and native).",
        (m.bytes_in.load(Relaxed) + native.map_or(0, |n| n[3])) as f64,
    );
    counter(
        o,
        "halyard_network_sent_bytes_total",
        "Bytes sent to clients (RESP and native).",
        (m.bytes_out.load(Relaxed) + native.map_or(0, |n| n[4])) as f64,
    );
    let _ = writeln!(o, "# HELP halyard_connected_clients Clients connected now.\n# TYPE halyard_connected_clients gauge\nhalyard_connected_clients {connected}");
}

/// Per-command calls, errors and the latency histogram (commands called at least once).
fn render_commands(o: &mut String, m: &Metrics) {
    let _ = writeln!(
        o,
        "# HELP halyard_commands_total Commands executed, by command.\n# TYPE halyard_commands_total counter"
    );
    for (n, c) in &m.commands {
        let _ = writeln!(o, "halyard_commands_total{{cmd=\"{n}\"}} {}", c.calls());
    }
    let _ = writeln!(o, "# HELP halyard_command_errors_total Commands that replied with an error.\n# TYPE halyard_command_errors_total counter");
    for (n, c) in &m.commands {
        let _ = writeln!(o, "halyard_command_errors_total{{cmd=\"{n}\"}} {}", c.errors());
    }
    let _ = writeln!(
        o,
        "# HELP halyard_command_duration_seconds Command latency.\n# TYPE halyard_command_duration_seconds histogram"
    );
    for (n, c) in m.commands.iter().filter(|(_, c)| c.calls() > 0) {
        let mut cum = 0;
        for (i, b) in BUCKETS_US.iter().enumerate() {
            cum += c.bucket(i);
            let _ =
                writeln!(o, "halyard_command_duration_seconds_bucket{{cmd=\"{n}\",le=\"{}\"}} {cum}", *b as f64 / 1e6);
        }
        let calls = c.timed();
        let _ = writeln!(o, "halyard_command_duration_seconds_bucket{{cmd=\"{n}\",le=\"+Inf\"}} {calls}");
        let _ = writeln!(o, "halyard_command_duration_seconds_sum{{cmd=\"{n}\"}} {}", c.usec() as f64 / 1e6);
        let _ = writeln!(o, "halyard_command_duration_seconds_count{{cmd=\"{n}\"}} {calls}");
    }
}

/// CPU time, in total and per request (RESP and native) served.
fn render_cpu(o: &mut String, requests: u64) {
    let (user, sys) = cpu_seconds();
    counter(o, "halyard_cpu_user_seconds_total", "User CPU time of the server process.", user);
    counter(o, "halyard_cpu_system_seconds_total", "System CPU time of the server process.", sys);
    let _ = writeln!(
        o,
        "# HELP halyard_cpu_us_per_request CPU time (user+system) per request served.\n# TYPE halyard_cpu_us_per_request gauge\nhalyard_cpu_us_per_request {}",
        if requests == 0 { 0.0 } else { (user + sys) * 1e6 / requests as f64 }
    );
}

/// The engine's device traffic, L0 and levels.
fn render_engine_io(o: &mut String, e: &halyard_engine::Stats) {
    counter(o, "halyard_engine_device_read_bytes_total", "Bytes read from the device.", e.device_read_bytes as f64);
    counter(o, "halyard_engine_device_write_bytes_total", "Bytes written to the device.", e.device_write_bytes as f64);
    for (k, v) in &e.write_bytes_by {
        let _ = writeln!(o, "halyard_engine_device_write_bytes_by_purpose{{purpose=\"{k}\"}} {v}");
    }
    for (k, v) in &e.read_bytes_by {
        let _ = writeln!(o, "halyard_engine_device_read_bytes_by_purpose{{purpose=\"{k}\"}} {v}");
    }
    counter(
        o,
        "halyard_engine_user_bytes_total",
        "Bytes of keys and values written by clients.",
        e.user_bytes_written as f64,
    );
    gauge(
        o,
        "halyard_engine_io_amplification",
        "Device bytes read and written per user byte written.",
        e.io_amplification(),
    );
    gauge(o, "halyard_engine_l0_bytes", "Bytes in the in-memory L0.", e.l0_bytes as f64);
    let _ = writeln!(
        o,
        "# HELP halyard_engine_level_bytes Bytes per level (stored).\n# TYPE halyard_engine_level_bytes gauge"
    );
    for (i, l) in e.levels.iter().enumerate() {
        let _ = writeln!(o, "halyard_engine_level_bytes{{level=\"{}\"}} {}", i + 1, l.stored_bytes);
        let _ = writeln!(o, "halyard_engine_level_ssts{{level=\"{}\"}} {}", i + 1, l.ssts);
    }
}

/// The engine's background work (compaction, GC), cache, space and open cost.
fn render_engine_work(o: &mut String, e: &halyard_engine::Stats) {
    counter(o, "halyard_engine_stall_seconds_total", "Time writers waited for L0 space.", e.stall_seconds);
    counter(o, "halyard_engine_compactions_total", "Compactions completed.", e.compactions as f64);
    counter(
        o,
        "halyard_engine_warmed_leaves_total",
        "Leaves compactions cached in place of the cached leaves they rewrote.",
        e.warmed_leaves as f64,
    );
    counter(
        o,
        "halyard_engine_compaction_cached_bytes_total",
        "Bytes of input leaves compactions took from the cache instead of the device.",
        e.compaction_cached_bytes as f64,
    );
    counter(
        o,
        "halyard_engine_l0_versions_dropped_total",
        "Superseded versions L0 dropped before compaction (no reader could see them).",
        e.l0_versions_dropped as f64,
    );
    counter(o, "halyard_engine_gc_segments_total", "Large-log segments reclaimed by GC.", e.gc_segments as f64);
    counter(
        o,
        "halyard_engine_gc_known_segments_total",
        "Large-log segments GC reclaimed without an index lookup per record.",
        e.gc_known_segments as f64,
    );
    counter(o, "halyard_engine_gc_bytes_moved_total", "Bytes GC re-appended.", e.gc_bytes_moved as f64);
    gauge(o, "halyard_engine_cache_hit_ratio", "Node and value cache hit rate.", e.cache_hit_rate());
    gauge(o, "halyard_engine_space_allocated_bytes", "Bytes of segments in use.", e.space_allocated_bytes as f64);
    gauge(o, "halyard_engine_open_seconds", "How long the store's last open took.", e.open_seconds);
    gauge(o, "halyard_engine_open_read_bytes", "Device bytes the store's last open read.", e.open_read_bytes as f64);
    gauge(
        o,
        "halyard_engine_partly_filled_log_segments",
        "Large-log segments left holding records in less than half of their bytes.",
        e.partly_filled_log_segments as f64,
    );
    gauge(
        o,
        "halyard_engine_pinned_bytes",
        "Bloom filters and SST index nodes held in memory outside the cache.",
        e.levels.iter().map(|l| l.pinned_bytes).sum::<u64>() as f64,
    );
}
